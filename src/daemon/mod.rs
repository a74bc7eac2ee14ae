//! `cuzk daemon`: the engine behind the `cuzk.v1.ProvingEngine` gRPC API (the service
//! Curio's cuzk daemon serves) and a Prometheus `/metrics` endpoint.
//!
//! [`Daemon::start`] runs both on their own tokio runtime and returns the bound
//! addresses; [`Daemon::shutdown`] stops intake, lets jobs in flight finish for up to
//! `shutdown_timeout_secs`, then ends the rest (each gets a terminal result).

mod auth;
mod ext;
mod http;
mod results;
mod service;

use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::sync::oneshot;
use tracing::{info, warn};

pub use crate::config::DaemonConfig;
use crate::{Engine, EngineConfig};

/// The generated gRPC types of `proto/cuzk/v1/proving.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("cuzk.v1");
}

/// The generated gRPC types of `proto/cuzk/ext/v1/ext.proto` (cuzk's own extensions).
pub mod ext_proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("cuzk.ext.v1");
}

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
}

impl Daemon {
    /// Starts the engine, the gRPC server and the metrics endpoint.
    ///
    /// # Errors
    /// [`DaemonError`] for a bad address, a port in use, or an engine that cannot start.
    pub fn start(cfg: DaemonConfig, engine_cfg: EngineConfig) -> Result<Daemon, DaemonError> {
        // One limit on C1 inputs, applied to the message before anything is parsed.
        let max_input = cfg.max_message_bytes.0.min(engine_cfg.ingest.max_input_bytes.0);
        let max_input = usize::try_from(max_input).unwrap_or(usize::MAX);
        let auth = auth::Auth::from_config(&cfg).map_err(DaemonError::Config)?;
        let tls = auth::tls_config(&cfg).map_err(DaemonError::Config)?;
        if tls.is_some() && cfg.listen.starts_with("unix://") {
            return Err(DaemonError::Config(
                "tls_cert_file is set but listen is a unix socket: TLS applies to TCP listeners".into(),
            ));
        }
        // The certificate and key are parsed here, so that a bad file stops the start.
        if let Some(t) = &tls {
            tonic::transport::Server::builder().tls_config(t.clone()).map_err(|e| {
                DaemonError::Config(format!("tls_cert_file / tls_key_file: {}", crate::client::error_chain(&e)))
            })?;
        }
        let engine = Engine::start(engine_cfg)?;
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
            let _ = std::fs::remove_file(&path);
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

        let svc =
            std::sync::Arc::new(service::Service::new(engine.clone(), &cfg, max_input).map_err(DaemonError::Config)?);
        let ext = ext::Ext::new(svc.clone(), cfg.allow_synthetic);
        let svc2 = svc.clone();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        // gRPC's own limit sits a little above ours, so that a C1 just over the limit
        // gets our ResourceExhausted with sizes rather than the transport's error.
        let max = usize::try_from(cfg.max_message_bytes.0).unwrap_or(usize::MAX).saturating_add(64 << 10);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let engine2 = engine.clone();
        let thread = std::thread::Builder::new()
            .name("cuzk-daemon".into())
            .spawn(move || {
                rt.block_on(async move {
                    if let Some(l) = metrics_listener {
                        match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => {
                                tokio::spawn(http::serve_metrics(l, engine2));
                            }
                            Err(e) => warn!(error = %e, "metrics endpoint disabled"),
                        }
                    }
                    use tonic::service::interceptor::InterceptedService;
                    let mut builder = tonic::transport::Server::builder();
                    if let Some(t) = tls {
                        // Checked before the thread started.
                        builder = match builder.tls_config(t) {
                            Ok(b) => b,
                            Err(e) => {
                                warn!(error = %e, "TLS configuration failed");
                                return;
                            }
                        };
                    }
                    let server = builder
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
                    let res = match grpc {
                        Either::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => {
                                server
                                    .serve_with_incoming_shutdown(
                                        tokio_stream::wrappers::TcpListenerStream::new(l),
                                        shutdown,
                                    )
                                    .await
                            }
                            Err(e) => {
                                warn!(error = %e, "gRPC listener failed");
                                return;
                            }
                        },
                        Either::Unix(l) => match tokio::net::UnixListener::from_std(l) {
                            Ok(l) => {
                                server
                                    .serve_with_incoming_shutdown(
                                        tokio_stream::wrappers::UnixListenerStream::new(l),
                                        shutdown,
                                    )
                                    .await
                            }
                            Err(e) => {
                                warn!(error = %e, "gRPC listener failed");
                                return;
                            }
                        },
                    };
                    if let Err(e) = res {
                        warn!(error = %e, "gRPC server ended with an error");
                    }
                    // Jobs ended by the engine's shutdown (interrupted) are stored too.
                    let _ = done_rx.await;
                    svc2.drain(Duration::from_secs(10)).await;
                });
            })
            .map_err(DaemonError::Runtime)?;
        info!(listen = %listen, metrics = ?metrics, backend = engine.backend(), "daemon serving");
        Ok(Daemon {
            listen,
            metrics,
            engine,
            stop: Some(stop_tx),
            engine_done: Some(done_tx),
            thread: Some(thread),
            shutdown_timeout: Duration::from_secs(cfg.shutdown_timeout_secs),
        })
    }

    /// The engine behind the API.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Graceful shutdown: stop serving, let jobs in flight finish for up to the
    /// configured time, end the rest with a shutdown error, stop the engine.
    pub fn shutdown(mut self) {
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
            let _ = std::fs::remove_file(p);
        }
        info!("daemon stopped");
    }
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
    let lost = rt.block_on(async {
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
        tokio::select! {
            _ = tokio::signal::ctrl_c() => { info!(signal = "SIGINT", "shutting down"); false }
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {
                info!(signal = "SIGTERM", "shutting down");
                false
            }
            _ = devices_lost => {
                tracing::error!("every GPU was retired after sticky CUDA errors; shutting down so that a supervisor restarts the daemon");
                true
            }
        }
    });
    daemon.shutdown();
    if lost {
        return Err(DaemonError::NoDevice);
    }
    Ok(())
}
