//! `cuzk daemon`: the engine behind the `cuzk.v1.ProvingEngine` gRPC API (the service
//! Curio's cuzk daemon serves) and a Prometheus `/metrics` endpoint.
//!
//! [`Daemon::start`] runs both on their own tokio runtime and returns the bound
//! addresses; [`Daemon::shutdown`] stops intake, lets jobs in flight finish for up to
//! `shutdown_timeout_secs`, then ends the rest (each gets a terminal result).

mod auth;
mod ext;
mod http;
mod intake;
pub mod listener;
mod notify;
mod results;
mod service;
mod upload;

use std::{
    net::SocketAddr,
    os::unix::fs::FileTypeExt,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering::Relaxed},
        Arc,
    },
    time::{Duration, Instant},
};

use listener::{ConnTable, ListenerStats};
use tokio::sync::{oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn};

pub use crate::config::DaemonConfig;
use crate::{Engine, EngineConfig};

/// The generated gRPC types the daemon serves, under the names they have always had
/// here: `proto` is [`crate::proto::v1`] (`cuzk.v1`), `ext_proto` is
/// [`crate::proto::ext`] (`cuzk.ext.v1`).
pub use crate::proto::{ext as ext_proto, v1 as proto};

/// Where the daemon listens.
#[derive(Clone, Debug)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// A running daemon.
pub struct Daemon {
    /// The gRPC address actually bound (port 0 in config picks a free one).
    pub listen: Listen,
    /// The metrics address actually bound, if enabled.
    pub metrics: Option<SocketAddr>,
    engine: Engine,
    stop: Option<oneshot::Sender<()>>,
    /// Sent once the engine has ended every job, so the server thread stores their
    /// results before its runtime stops.
    engine_done: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    shutdown_timeout: Duration,
    /// Why serving ended on its own (see [`Daemon::failure`]).
    failure: watch::Receiver<Option<String>>,
    /// Set when shutdown is asked for: listeners ending then are no failure.
    stopping: Arc<AtomicBool>,
    notifier: Option<notify::Notifier>,
}

/// Reports that serving ended without a shutdown being asked for.
#[derive(Clone)]
struct Failure {
    tx: Arc<watch::Sender<Option<String>>>,
    stopping: Arc<AtomicBool>,
}

impl Failure {
    fn report(&self, why: String) {
        if self.stopping.load(Relaxed) {
            return;
        }
        // The first reason is the one that matters (serving ending after its
        // listener did says nothing new).
        self.tx.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            tracing::error!(reason = %why, "the daemon stopped serving; shutting down so that a supervisor restarts it");
            *r = Some(why);
            true
        });
    }
}

/// The gRPC accept loop ([`listener::serve_incoming`]) as the daemon runs it: its
/// end, which never comes from an accept error, is reported at once rather than
/// when tonic has drained the connections.
async fn accept_loop<L: listener::Accept>(
    l: L,
    table: Arc<ConnTable>,
    tx: tokio::sync::mpsc::Sender<Result<listener::TrackedIo<L::Io>, std::io::Error>>,
    failure: Failure,
) {
    let serve = listener::serve_incoming(l, table, tx);
    match test_end_listener("grpc") {
        Some(at) => {
            tokio::select! {
                _ = serve => {}
                _ = tokio::time::sleep_until(at) => {}
            }
        }
        None => serve.await,
    }
    failure.report("the gRPC listener stopped accepting".into());
}

/// Test hook: `CUZK_TEST_END_LISTENER=grpc` (or `metrics`) ends that listener's
/// accept loop a second after start, as a bug or a closed descriptor would, so that
/// tests can see the daemon exit non-zero instead of living on without it.
fn test_end_listener(name: &str) -> Option<tokio::time::Instant> {
    let v = std::env::var("CUZK_TEST_END_LISTENER").ok()?;
    (v == name).then(|| tokio::time::Instant::now() + Duration::from_secs(1))
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("engine: {0}")]
    Engine(#[from] crate::EngineError),
    #[error("[daemon] {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
    #[error("every GPU was retired after sticky CUDA errors; restart the daemon to get them back")]
    NoDevice,
    #[error("the daemon stopped serving: {0}")]
    Serving(String),
}

impl Daemon {
    /// Starts the engine, the gRPC server and the metrics endpoint.
    ///
    /// # Errors
    /// [`DaemonError`] for a bad address, a port in use, or an engine that cannot start.
    pub fn start(cfg: DaemonConfig, engine_cfg: EngineConfig) -> Result<Daemon, DaemonError> {
        Self::check(&cfg)?;
        let max_input = engine_cfg.ingest.max_input_bytes.0;
        Self::start_with_engine(cfg, Engine::start(engine_cfg)?, max_input)
    }

    /// Checks what can be checked of `cfg` before an engine is started.
    fn check(cfg: &DaemonConfig) -> Result<(auth::Auth, Option<tonic::transport::ServerTlsConfig>), DaemonError> {
        let auth = auth::Auth::from_config(cfg).map_err(DaemonError::Config)?;
        check_bounds(cfg).map_err(DaemonError::Config)?;
        let tls = auth::tls_config(cfg).map_err(DaemonError::Config)?;
        if tls.is_some() && cfg.listen.starts_with("unix://") {
            return Err(DaemonError::Config(
                "tls_cert_file is set but listen is a unix socket: TLS applies to TCP listeners".into(),
            ));
        }
        // The certificate and key are parsed here, so that a bad file stops the start.
        if let Some(t) = &tls {
            tonic::transport::Server::builder().tls_config(t.clone()).map_err(|e| {
                DaemonError::Config(format!("tls_cert_file / tls_key_file: {}", crate::errors::error_chain(&e)))
            })?;
        }
        Ok((auth, tls))
    }

    /// [`Daemon::start`] in front of an engine the caller started (on a backend of
    /// its own, say); `max_input_bytes` is the engine's `[ingest] max_input_bytes`.
    ///
    /// # Errors
    /// As [`Daemon::start`]. The engine is shut down on error.
    pub fn start_with_engine(cfg: DaemonConfig, engine: Engine, max_input_bytes: u64) -> Result<Daemon, DaemonError> {
        Self::start_inner(cfg, engine.clone(), max_input_bytes).inspect_err(|_| engine.shutdown())
    }

    fn start_inner(cfg: DaemonConfig, engine: Engine, max_input_bytes: u64) -> Result<Daemon, DaemonError> {
        let (auth, tls) = Self::check(&cfg)?;
        // One limit on C1 inputs, applied to the message before anything is parsed.
        let max_input = usize::try_from(cfg.max_message_bytes.0.min(max_input_bytes)).unwrap_or(usize::MAX);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cuzk-daemon")
            .enable_all()
            .build()
            .map_err(DaemonError::Runtime)?;
        let bind = |addr: &str| -> Result<std::net::TcpListener, DaemonError> {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|source| DaemonError::Bind { addr: addr.to_string(), source })?;
            l.set_nonblocking(true).map_err(|source| DaemonError::Bind { addr: addr.to_string(), source })?;
            Ok(l)
        };
        // Bind synchronously so errors surface here and the real addresses are known.
        let (grpc, listen) = if let Some(path) = cfg.listen.strip_prefix("unix://") {
            let path = PathBuf::from(path);
            // A stale socket file from a previous run is removed; a live one is not.
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                let source = std::io::Error::new(std::io::ErrorKind::AddrInUse, "another daemon is serving there");
                return Err(DaemonError::Bind { addr: cfg.listen.clone(), source });
            }
            // Only a socket is ever removed: a path that names a file, a directory or
            // a link by mistake is left alone and the start fails naming it.
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_socket() => {
                    let _ = std::fs::remove_file(&path);
                }
                Ok(m) => {
                    let what = if m.is_dir() {
                        "a directory"
                    } else if m.is_symlink() {
                        "a symbolic link"
                    } else {
                        "a file"
                    };
                    let source = std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!("{} is {what}, not a socket: not removed", path.display()),
                    );
                    return Err(DaemonError::Bind { addr: cfg.listen.clone(), source });
                }
                Err(_) => {}
            }
            let l = std::os::unix::net::UnixListener::bind(&path)
                .map_err(|source| DaemonError::Bind { addr: cfg.listen.clone(), source })?;
            let mode = u32::from_str_radix(&cfg.socket_mode, 8).ok().filter(|m| *m <= 0o777).ok_or_else(|| {
                DaemonError::Config(format!("socket_mode `{}` is not octal permissions", cfg.socket_mode))
            })?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(|source| DaemonError::Bind { addr: cfg.listen.clone(), source })?;
            l.set_nonblocking(true).map_err(|source| DaemonError::Bind { addr: cfg.listen.clone(), source })?;
            (Either::Unix(l), Listen::Unix(path))
        } else {
            let l = bind(&cfg.listen)?;
            let a = l.local_addr().map_err(|source| DaemonError::Bind { addr: cfg.listen.clone(), source })?;
            if !a.ip().is_loopback() && !auth.enabled() && cfg.tls_client_ca_file.is_empty() {
                warn!(listen = %a, "gRPC listens beyond loopback with no auth_token_file and no tls_client_ca_file: any host that reaches it can submit, cancel and evict");
            }
            if !a.ip().is_loopback() && auth.enabled() && tls.is_none() {
                warn!(listen = %a, "the auth token crosses the network in plain text: set tls_cert_file and tls_key_file");
            }
            (Either::Tcp(l), Listen::Tcp(a))
        };
        let metrics_listener = if cfg.metrics_listen.is_empty() { None } else { Some(bind(&cfg.metrics_listen)?) };
        let metrics = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());

        // The listeners' counters, shared by the accept loops, /metrics and GetStatus.
        let grpc_stats = ListenerStats::new("grpc", listen.to_string(), cfg.max_connections);
        let metrics_stats = metrics.map(|a| ListenerStats::new("metrics", a.to_string(), http::MAX_CONNECTIONS));
        let listeners: Arc<[Arc<ListenerStats>]> =
            std::iter::once(grpc_stats.clone()).chain(metrics_stats.clone()).collect();
        let bounds = listener::Bounds::from_config(&cfg, auth.enabled());

        let svc = Arc::new(
            service::Service::new(engine.clone(), &cfg, max_input, listeners.clone()).map_err(DaemonError::Config)?,
        );
        let ext = ext::Ext::new(svc.clone(), cfg.allow_synthetic);
        let svc2 = svc.clone();
        let store = svc.results_store();
        let intake = svc.intake.clone();
        let http_auth = auth.clone();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        // gRPC's own limit sits a little above ours, so that a C1 just over the limit
        // gets our ResourceExhausted with sizes rather than the transport's error.
        let max = usize::try_from(cfg.max_message_bytes.0).unwrap_or(usize::MAX).saturating_add(64 << 10);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        // Why serving ended when nobody asked it to (`None` while serving).
        let (fail_tx, fail_rx) = watch::channel::<Option<String>>(None);
        let stopping = Arc::new(AtomicBool::new(false));
        let failure = Failure { tx: Arc::new(fail_tx), stopping: stopping.clone() };
        let secs = |s: u64| (s > 0).then(|| Duration::from_secs(s));
        let (keepalive, keepalive_timeout) =
            (secs(cfg.http2_keepalive_interval_secs), secs(cfg.http2_keepalive_timeout_secs));
        let max_streams = cfg.max_concurrent_streams;
        let uploads = upload::UploadLayer::new(cfg.max_concurrent_uploads, secs(cfg.upload_timeout_secs));
        let engine2 = engine.clone();
        let handle = rt.handle().clone();
        let health = notify::Health {
            svc: svc.clone(),
            listeners: listeners.clone(),
            stall: Duration::from_secs(cfg.stall_timeout_secs),
        };
        let thread = std::thread::Builder::new()
            .name("cuzk-daemon".into())
            .spawn(move || {
                let failed = |why: String| failure.report(why);
                rt.block_on(async {
                    if let (Some(l), Some(stats)) = (metrics_listener, metrics_stats) {
                        match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => {
                                let task = tokio::spawn(http::serve_metrics(
                                    l,
                                    stats,
                                    http::Pages {
                                        engine: engine2,
                                        listeners,
                                        intake,
                                        store,
                                        auth: http_auth,
                                        debug_slot: Arc::new(tokio::sync::Semaphore::new(1)),
                                    },
                                ));
                                let failure = failure.clone();
                                tokio::spawn(async move {
                                    failure.report(match task.await {
                                        Ok(()) => "the metrics endpoint stopped accepting".to_string(),
                                        Err(e) => format!("the metrics endpoint failed: {e}"),
                                    });
                                });
                            }
                            Err(e) => failed(format!("metrics endpoint: {e}")),
                        }
                    }
                    use tonic::service::interceptor::InterceptedService;
                    let mut builder = tonic::transport::Server::builder()
                        .http2_keepalive_interval(keepalive)
                        .http2_keepalive_timeout(keepalive_timeout)
                        .max_concurrent_streams(max_streams);
                    if let Some(t) = tls {
                        // Checked before the thread started.
                        builder = match builder.tls_config(t) {
                            Ok(b) => b,
                            Err(e) => return failed(format!("TLS configuration: {e}")),
                        };
                    }
                    let server = builder
                        .layer(listener::TrackLayer)
                        .layer(uploads)
                        .add_service(InterceptedService::new(
                            proto::proving_engine_server::ProvingEngineServer::from_arc(svc)
                                .max_decoding_message_size(max)
                                .max_encoding_message_size(max),
                            auth.clone(),
                        ))
                        .add_service(InterceptedService::new(
                            ext_proto::engine_server::EngineServer::new(ext)
                                .max_decoding_message_size(max)
                                .max_encoding_message_size(max),
                            auth,
                        ));
                    let shutdown = async {
                        let _ = stop_rx.await;
                    };
                    let table = ConnTable::new(grpc_stats, bounds);
                    table.spawn_reaper();
                    // Our accept loop feeds tonic through a channel: it never ends on an
                    // accept error (listener.rs), and when it ends at all, serving ends
                    // and `failed` says so.
                    let res = match grpc {
                        Either::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => {
                                let (tx, rx) = tokio::sync::mpsc::channel(1);
                                tokio::spawn(accept_loop(l, table, tx, failure.clone()));
                                server.serve_with_incoming_shutdown(ReceiverStream::new(rx), shutdown).await
                            }
                            Err(e) => return failed(format!("gRPC listener: {e}")),
                        },
                        Either::Unix(l) => match tokio::net::UnixListener::from_std(l) {
                            Ok(l) => {
                                let (tx, rx) = tokio::sync::mpsc::channel(1);
                                tokio::spawn(accept_loop(l, table, tx, failure.clone()));
                                server.serve_with_incoming_shutdown(ReceiverStream::new(rx), shutdown).await
                            }
                            Err(e) => return failed(format!("gRPC listener: {e}")),
                        },
                    };
                    match res {
                        Ok(()) => failed("the gRPC listener stopped accepting".into()),
                        Err(e) => failed(format!("the gRPC server ended with an error: {e}")),
                    }
                    // Jobs ended by the engine's shutdown (interrupted) are stored too.
                    let _ = done_rx.await;
                    svc2.drain(Duration::from_secs(10)).await;
                });
            })
            .map_err(DaemonError::Runtime)?;
        info!(listen = %listen, metrics = ?metrics, backend = engine.backend(), "daemon serving");
        // systemd (Type=notify): READY=1 now, then WATCHDOG=1 only while healthy.
        let notifier = notify::Notifier::start(handle, health);
        Ok(Daemon {
            listen,
            metrics,
            engine,
            stop: Some(stop_tx),
            engine_done: Some(done_tx),
            thread: Some(thread),
            shutdown_timeout: Duration::from_secs(cfg.shutdown_timeout_secs),
            failure: fail_rx,
            stopping,
            notifier,
        })
    }

    /// The engine behind the API.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Changes to `Some(reason)` if the gRPC server or the metrics endpoint ends
    /// without [`Daemon::shutdown`] having been called: the daemon then no longer
    /// serves, and whoever runs it should shut it down and exit non-zero
    /// ([`run_until_signal`] does).
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.failure.clone()
    }

    /// Graceful shutdown: stop serving, let jobs in flight finish for up to the
    /// configured time, end the rest with a shutdown error, stop the engine.
    pub fn shutdown(mut self) {
        self.stopping.store(true, Relaxed);
        if let Some(n) = self.notifier.take() {
            n.stopping();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let t = Instant::now();
        loop {
            let in_flight = self.engine.snapshot_blocking().jobs.in_flight;
            if in_flight == 0 {
                break;
            }
            if t.elapsed() >= self.shutdown_timeout {
                warn!(in_flight, "shutdown timeout: ending the jobs still in flight");
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.engine.shutdown();
        if let Some(done) = self.engine_done.take() {
            let _ = done.send(());
        }
        if let Some(th) = self.thread.take() {
            let _ = th.join();
        }
        if let Listen::Unix(p) = &self.listen {
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(p);
            }
        }
        info!("daemon stopped");
    }
}

/// The connection bounds must let a client through at all.
fn check_bounds(cfg: &DaemonConfig) -> Result<(), String> {
    if cfg.max_connections == 0 {
        return Err("max_connections must be at least 1".into());
    }
    if cfg.max_concurrent_streams == 0 {
        return Err("max_concurrent_streams must be at least 1".into());
    }
    if cfg.max_concurrent_uploads == 0 {
        return Err("max_concurrent_uploads must be at least 1".into());
    }
    if cfg.max_waiting_inputs == 0 {
        return Err("max_waiting_inputs must be at least 1".into());
    }
    for (key, v) in [
        ("handshake_timeout_secs", cfg.handshake_timeout_secs),
        ("first_request_timeout_secs", cfg.first_request_timeout_secs),
        ("auth_timeout_secs", cfg.auth_timeout_secs),
        ("idle_timeout_secs", cfg.idle_timeout_secs),
        ("stall_timeout_secs", cfg.stall_timeout_secs),
    ] {
        if v == 0 {
            return Err(format!("{key} must be at least 1"));
        }
    }
    if cfg.first_request_timeout_secs < cfg.handshake_timeout_secs {
        return Err(format!(
            "first_request_timeout_secs ({}) is below handshake_timeout_secs ({}): the first request comes after the handshake",
            cfg.first_request_timeout_secs, cfg.handshake_timeout_secs
        ));
    }
    Ok(())
}

enum Either {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// Runs the daemon until SIGINT or SIGTERM, then shuts down gracefully.
///
/// # Errors
/// As [`Daemon::start`].
pub fn run_until_signal(cfg: DaemonConfig, engine_cfg: EngineConfig) -> Result<(), DaemonError> {
    let daemon = Daemon::start(cfg, engine_cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(DaemonError::Runtime)?;
    let engine = daemon.engine().clone();
    let mut failure = daemon.failure();
    let ended = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        // Every GPU retired after sticky CUDA errors: only a new process gets them
        // back, so stop (jobs in flight finish on the CPU) and exit non-zero for the
        // supervisor to restart us.
        let devices_lost = async {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if cuzk_gpu::no_device_left(&engine.snapshot().await.devices) {
                    return;
                }
            }
        };
        // Serve or exit: a listener that ended (the reason is logged where it
        // ended) or a server thread that died.
        let serving_ended = async {
            loop {
                if let Some(why) = failure.borrow_and_update().clone() {
                    return why;
                }
                if failure.changed().await.is_err() {
                    return "the daemon's server thread ended".to_string();
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => { info!(signal = "SIGINT", "shutting down"); None }
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {
                info!(signal = "SIGTERM", "shutting down");
                None
            }
            _ = devices_lost => {
                tracing::error!("every GPU was retired after sticky CUDA errors; shutting down so that a supervisor restarts the daemon");
                Some(DaemonError::NoDevice)
            }
            why = serving_ended => Some(DaemonError::Serving(why)),
        }
    });
    daemon.shutdown();
    match ended {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
