//! The daemon serves, or it exits: a flood of idle connections under the usual 1,024
//! open-file limit, the process out of descriptors, slow and unauthenticated
//! clients, and a listener that ends (src/daemon/listener.rs, src/daemon/mod.rs).
//! Loopback only; every wait is bounded.

mod common;

use std::{
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use cuzk::{
    actors::services::SelectedBackend,
    client::Access,
    daemon::{
        ext_proto::SubmitSyntheticRequest,
        proto::{await_proof_response::Status as JobStatus, AwaitProofRequest, GetStatusRequest, GetStatusResponse},
        Daemon, DaemonConfig, Listen,
    },
    gpu::{cpu::CpuBackend, Backend, GpuError, HostPartition, MsmResults, Staged, UploadedPartition},
    Engine, ProvingKey,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "liveness-test-token-0123456789";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// This process's own open-file limit raised to `n` (the flood's client side).
fn raise_nofile(n: u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        assert!(r.rlim_max >= n, "this test needs an open-file hard limit of at least {n} (have {})", r.rlim_max);
        r.rlim_cur = r.rlim_cur.max(n);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
}

/// A `cuzk daemon` process (CPU backend, token, results directory) under an
/// open-file limit of `nofile`, its log in `dir/daemon.log`.
struct Proc {
    child: Child,
    dir: PathBuf,
    grpc: SocketAddr,
    metrics: SocketAddr,
}

impl Proc {
    fn spawn(name: &str, nofile: u64, extra: &str, env: &[(&str, &str)]) -> Proc {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("liveness/{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), TOKEN).unwrap();
        common::owner_only(&dir.join("token"));
        let (grpc, metrics) =
            (SocketAddr::from(([127, 0, 0, 1], free_port())), SocketAddr::from(([127, 0, 0, 1], free_port())));
        let cfg = format!(
            "[backend]\nkind = \"cpu\"\n[budget]\nhost_memory = \"2GiB\"\n[daemon]\nlisten = \"{grpc}\"\n\
             metrics_listen = \"{metrics}\"\nshutdown_timeout_secs = 0\nresults_dir = \"{}\"\n\
             auth_token_file = \"{}\"\n{extra}",
            dir.join("results").display(),
            dir.join("token").display()
        );
        std::fs::write(dir.join("config.toml"), cfg).unwrap();
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cuzk"));
        cmd.arg("--config").arg(dir.join("config.toml")).arg("daemon");
        cmd.env("RUST_LOG", "info").stdout(Stdio::null()).stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit { rlim_cur: nofile, rlim_max: nofile };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Proc { child: cmd.spawn().unwrap(), dir, grpc, metrics }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn access(&self) -> Access {
        Access { token_file: Some(self.dir.join("token")), ..Default::default() }
    }

    /// GetStatus with the token, within `limit`.
    async fn status(&self, limit: Duration) -> Result<GetStatusResponse, String> {
        let addr = self.grpc.to_string();
        let call = async {
            let c = cuzk::client::connect_with(&addr, &self.access()).await.map_err(|e| format!("{e:#}"))?;
            cuzk::client::v1(c).get_status(GetStatusRequest {}).await.map(|r| r.into_inner()).map_err(|e| e.to_string())
        };
        tokio::time::timeout(limit, call).await.map_err(|_| format!("no answer within {limit:?}"))?
    }

    /// Waits for the daemon to serve (it starts an engine first).
    async fn ready(&mut self) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            if self.status(Duration::from_secs(5)).await.is_ok() {
                return;
            }
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("the daemon exited at start ({s}):\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the daemon did not serve within 120 s:\n{}", self.log());
    }

    /// SIGTERM, and the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        wait_exit(&mut self.child, Duration::from_secs(60)).expect("the daemon did not stop within 60 s of SIGTERM")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// One metric's value from the Prometheus text of `/metrics`.
async fn metric(addr: SocketAddr, series: &str) -> f64 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut v = Vec::new();
    s.read_to_end(&mut v).await.unwrap();
    let text = String::from_utf8_lossy(&v);
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("{series} not in /metrics"))
}

fn closed(reason: &str) -> String {
    format!("cuzk_listener_connections_closed_total{{listener=\"grpc\",reason=\"{reason}\"}}")
}

fn grpc_listener(s: &GetStatusResponse) -> &cuzk::daemon::proto::ListenerStatus {
    s.listeners.iter().find(|l| l.name == "grpc").expect("GetStatus lists the gRPC listener")
}

#[test]
fn a_flood_of_idle_connections_neither_locks_clients_out_nor_kills_the_listener() {
    const FLOOD: usize = 1100;
    raise_nofile(4096);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut d = Proc::spawn("flood", 1024, "", &[]);
    rt.block_on(d.ready());

    // 1,100 connections that never send a byte, held by this process.
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|i| {
            TcpStream::connect_timeout(&d.grpc, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    // A real client is served while they are held.
    let during =
        rt.block_on(d.status(Duration::from_secs(20))).unwrap_or_else(|e| panic!("during the flood: {e}\n{}", d.log()));
    let l = grpc_listener(&during);
    assert!(l.listening);
    assert!(l.open_connections <= l.max_connections, "{l:?}");
    assert_eq!(l.max_connections, 512);
    drop(flood);

    // And after it: the listener still accepts.
    std::thread::sleep(Duration::from_secs(1));
    let after =
        rt.block_on(d.status(Duration::from_secs(20))).unwrap_or_else(|e| panic!("after the flood: {e}\n{}", d.log()));
    let l = grpc_listener(&after);
    assert!(l.listening);
    assert!(l.accepted_total >= FLOOD as u64, "{l:?}");
    // The cap kept the process below its descriptor limit: no accept error, and at
    // least the connections beyond the cap were closed (at the cap, or by the
    // handshake deadline).
    assert_eq!(l.accept_errors_total, 0, "{l:?}");
    let closed_early =
        l.closed_total.get("evicted").copied().unwrap_or(0) + l.closed_total.get("handshake").copied().unwrap_or(0);
    assert!(closed_early >= (FLOOD - 512) as u64, "{l:?}");
    rt.block_on(async {
        assert_eq!(metric(d.metrics, "cuzk_listener_up{listener=\"grpc\"}").await, 1.0);
        assert!(metric(d.metrics, &closed("evicted")).await >= 1.0);
    });
    assert!(d.stop().success());
}

#[test]
fn out_of_descriptors_the_listener_backs_off_and_keeps_listening() {
    const FLOOD: usize = 400;
    raise_nofile(4096);
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A cap above the descriptor limit, and deadlines that keep the flood open: the
    // accept loop runs into EMFILE.
    let bounds = "max_connections = 5000\nhandshake_timeout_secs = 300\nfirst_request_timeout_secs = 300\n";
    let mut d = Proc::spawn("emfile", 256, bounds, &[]);
    rt.block_on(d.ready());
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|i| {
            TcpStream::connect_timeout(&d.grpc, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    let during =
        rt.block_on(d.status(Duration::from_secs(30))).unwrap_or_else(|e| panic!("during the flood: {e}\n{}", d.log()));
    assert!(grpc_listener(&during).listening);
    drop(flood);
    std::thread::sleep(Duration::from_secs(1));
    let after =
        rt.block_on(d.status(Duration::from_secs(30))).unwrap_or_else(|e| panic!("after the flood: {e}\n{}", d.log()));
    let l = grpc_listener(&after);
    assert!(l.listening);
    assert!(l.accept_errors_total > 0, "the flood did not exhaust descriptors: {l:?}");
    let log = d.log();
    assert!(log.contains("accept failed") && log.contains("ERROR"), "accept errors are logged at error:\n{log}");
    rt.block_on(async {
        assert!(metric(d.metrics, "cuzk_listener_accept_errors_total{listener=\"grpc\"}").await >= 1.0);
    });
    assert!(d.stop().success());
}

#[test]
fn a_listener_that_ends_ends_the_daemon_with_a_non_zero_status() {
    for (which, says) in
        [("grpc", "the gRPC listener stopped accepting"), ("metrics", "the metrics endpoint stopped accepting")]
    {
        let mut d = Proc::spawn(&format!("end-{which}"), 1024, "", &[("CUZK_TEST_END_LISTENER", which)]);
        let status = wait_exit(&mut d.child, Duration::from_secs(120))
            .unwrap_or_else(|| panic!("the daemon lived on without its {which} listener:\n{}", d.log()));
        assert_eq!(status.code(), Some(1), "{which}: {status}");
        let log = d.log();
        assert!(log.contains("stopped serving") && log.contains(says), "{which}: the reason is logged:\n{log}");
    }
}

/// The CPU backend, whose `execute` takes [`SLOW`]: a Prove that outlives every
/// connection deadline.
struct SlowBackend;

const SLOW: Duration = Duration::from_secs(6);

impl Backend for SlowBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        CpuBackend.upload(host)
    }
    fn stage(&self, _: &mut UploadedPartition, _: bool) -> Staged {
        Staged::default()
    }
    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        std::thread::sleep(SLOW);
        CpuBackend.execute(uploaded, srs, with_b_g2)
    }
}

#[test]
fn deadlines_close_slow_and_unauthenticated_connections_but_not_a_long_prove() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("liveness/{}-slow", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    common::owner_only(&token);
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        auth_token_file: token.display().to_string(),
        allow_synthetic: true,
        handshake_timeout_secs: 1,
        first_request_timeout_secs: 2,
        auth_timeout_secs: 3,
        idle_timeout_secs: 2,
        ..Default::default()
    };
    let backend: Arc<dyn Backend> = Arc::new(SlowBackend);
    let selected = SelectedBackend { backend, devices: 1, on_device: false, pinned_bytes: 0 };
    let engine = Engine::start_with_backend(common::small_config(), selected).unwrap();
    let d = Daemon::start_with_engine(cfg, engine, 1 << 30).unwrap();
    let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
    let metrics = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // An authenticated client with a request that runs past every deadline.
        let access = Access { token_file: Some(token.clone()), ..Default::default() };
        let c = cuzk::client::connect_with(&addr.to_string(), &access).await.unwrap();
        let (mut v1, mut ext) = (cuzk::client::v1(c.clone()), cuzk::client::ext(c));
        let job = ext
            .submit_synthetic(SubmitSyntheticRequest { log2: 8, public_inputs: 2, seed: 1, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .job_id;
        let long = tokio::spawn(async move {
            let t = Instant::now();
            let r = v1.await_proof(AwaitProofRequest { job_id: job, timeout_ms: 0 }).await;
            (t.elapsed(), r)
        });

        // Silent: closed by the handshake deadline.
        let silent = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut v = Vec::new();
            tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut v)).await.is_ok()
        });
        // The HTTP/2 preface and an empty SETTINGS frame, then nothing: closed by the
        // first-request deadline.
        let preface = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
            let mut v = Vec::new();
            tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut v)).await.is_ok()
        });
        // Without the token, calling again and again: closed by the auth deadline.
        let c = cuzk::client::connect(&addr.to_string()).await.unwrap();
        let mut stranger = cuzk::client::v1(c);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            let e = stranger.get_status(GetStatusRequest {}).await.unwrap_err();
            // Refused, or (once the auth deadline closes the connection) the call in
            // flight on it cancelled, or the next one unable to connect.
            assert!(
                matches!(
                    e.code(),
                    tonic::Code::Unauthenticated
                        | tonic::Code::Unavailable
                        | tonic::Code::Unknown
                        | tonic::Code::Cancelled
                ),
                "{e}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(silent.await.unwrap(), "a silent connection was not closed");
        assert!(preface.await.unwrap(), "a connection that stopped after the preface was not closed");
        for reason in ["handshake", "first_request", "auth"] {
            assert!(metric(metrics, &closed(reason)).await >= 1.0, "nothing closed by the {reason} deadline");
        }

        let (took, r) = long.await.unwrap();
        let r = r.expect("the long request's connection was closed under it").into_inner();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        assert!(took >= Duration::from_secs(4), "the request was not long: {took:?}");
    });
    d.shutdown();
}

/// A daemon's unix socket takes connections through the same loop; a path that
/// names something other than a socket is neither removed nor served on, and the
/// socket is removed at shutdown.
#[test]
fn the_unix_socket_is_served_through_the_same_accept_loop() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("liveness/{}-unix", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("cuzk.sock");
    let _ = std::fs::remove_file(&sock);
    std::fs::write(&sock, "an operator's file").unwrap();
    let on_file = DaemonConfig { listen: format!("unix://{}", sock.display()), ..Default::default() };
    let e = Daemon::start(on_file, common::small_config()).err().expect("a file is not a socket").to_string();
    assert!(e.contains("is a file, not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "an operator's file", "the file is left alone");
    std::fs::remove_file(&sock).unwrap();
    let cfg = DaemonConfig {
        listen: format!("unix://{}", sock.display()),
        metrics_listen: String::new(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        handshake_timeout_secs: 1,
        ..Default::default()
    };
    let d = Daemon::start(cfg, common::small_config()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let held = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let c = cuzk::client::connect(&format!("unix://{}", sock.display())).await.unwrap();
        let s = cuzk::client::v1(c).get_status(GetStatusRequest {}).await.unwrap().into_inner();
        let l = grpc_listener(&s);
        assert!(l.listening && l.open_connections >= 1, "{l:?}");
        wait_for(|| async { unix_closed(&sock, "handshake").await }).await;
        drop(held);
    });
    d.shutdown();
    assert!(!sock.exists(), "the socket is removed at shutdown");
}

async fn unix_closed(sock: &Path, reason: &str) -> bool {
    let c = cuzk::client::connect(&format!("unix://{}", sock.display())).await.unwrap();
    let s = cuzk::client::v1(c).get_status(GetStatusRequest {}).await.unwrap().into_inner();
    grpc_listener(&s).closed_total.get(reason).copied().unwrap_or(0) >= 1
}

async fn wait_for<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("condition not met within 15 s");
}
