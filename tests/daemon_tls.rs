//! TLS on the daemon's TCP listener (`[daemon] tls_cert_file`, `tls_key_file`,
//! `tls_client_ca_file`), alone and with the bearer token, through the same client
//! `cuzk bench batch` uses. Certificates: `tests/fixtures/tls` (test-only).

mod common;

use std::path::PathBuf;

use common::small_config;
use cuzk::{
    client::{connect_with, run_batch, v1, Access, BatchJob},
    daemon::{proto::GetStatusRequest, Daemon, DaemonConfig, Listen},
};
use tonic::Code;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
}

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

fn tls_config(tweak: impl FnOnce(&mut DaemonConfig)) -> DaemonConfig {
    let mut cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        allow_synthetic: true,
        tls_cert_file: path("server.pem"),
        tls_key_file: path("server.key"),
        ..Default::default()
    };
    tweak(&mut cfg);
    cfg
}

fn port(d: &Daemon) -> u16 {
    let Listen::Tcp(a) = d.listen else { panic!("tcp expected") };
    a.port()
}

fn trusting(ca: &str) -> Access {
    Access { tls_ca: Some(fixture(ca)), ..Default::default() }
}

/// GetStatus through a fresh connection: the error, connect or call, as text and code.
async fn status(addr: &str, access: &Access) -> Result<(), (Option<Code>, String)> {
    let conn = connect_with(addr, access).await.map_err(|e| (None, format!("{e:#}")))?;
    v1(conn).get_status(GetStatusRequest {}).await.map(drop).map_err(|e| (Some(e.code()), format!("{e:?}")))
}

/// A TLS daemon with a token proves through a client that trusts its CA and carries
/// the token; a plain-text client, a client trusting another CA, and a TLS client
/// without the token are all refused.
#[test]
fn tls_with_a_token_serves_only_clients_that_present_both() {
    let token = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-tls-token");
    std::fs::write(&token, "tls-token-tls-token\n").unwrap();
    common::owner_only(&token);
    let d = Daemon::start(tls_config(|c| c.auth_token_file = token.display().to_string()), small_config()).unwrap();
    let p = port(&d);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let full = Access { token_file: Some(token.clone()), ..trusting("ca.pem") };
        // Real proofs over TLS, as `cuzk bench batch --tls-ca --token-file` runs them.
        let job = BatchJob::Synthetic { log2: 8, public_inputs: 2, a_density: 1.0, b_density: 1.0, partitions: 1 };
        let s = run_batch(&format!("https://localhost:{p}"), &full, job, 2, 2, |_| {}).await.unwrap();
        assert_eq!(s.ok(), 2, "{}", s.report());
        // The certificate also names 127.0.0.1, and "host:port" with a CA means TLS.
        status(&format!("127.0.0.1:{p}"), &full).await.unwrap();

        let plain = status(&format!("http://127.0.0.1:{p}"), &Access::default()).await.unwrap_err();
        assert_ne!(plain.0, Some(Code::Ok), "plain text must not be served: {plain:?}");
        let stranger = status(&format!("https://localhost:{p}"), &trusting("other-ca.pem")).await.unwrap_err();
        assert!(stranger.1.to_lowercase().contains("certificate"), "{stranger:?}");
        let no_token = status(&format!("https://localhost:{p}"), &trusting("ca.pem")).await.unwrap_err();
        assert_eq!(no_token.0, Some(Code::Unauthenticated), "{no_token:?}");
        // An https address without a CA is a client-side error that says what is missing.
        let no_ca = status(&format!("https://localhost:{p}"), &Access::default()).await.unwrap_err();
        assert!(no_ca.1.contains("--tls-ca"), "{no_ca:?}");
    });
    d.shutdown();
}

/// With `tls_client_ca_file`, only clients with a certificate from that CA get in.
#[test]
fn mutual_tls_requires_a_client_certificate() {
    let d = Daemon::start(tls_config(|c| c.tls_client_ca_file = path("ca.pem")), small_config()).unwrap();
    let addr = format!("https://localhost:{}", port(&d));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let anonymous = status(&addr, &trusting("ca.pem")).await.unwrap_err();
        assert_ne!(anonymous.0, Some(Code::Ok), "{anonymous:?}");
        let with_cert =
            Access { tls_identity: Some((fixture("client.pem"), fixture("client.key"))), ..trusting("ca.pem") };
        status(&addr, &with_cert).await.unwrap();
    });
    d.shutdown();
}

/// Incomplete or unusable TLS settings stop the daemon at start with the key named.
#[test]
fn bad_tls_settings_are_refused_at_start() {
    let start = |tweak: fn(&mut DaemonConfig)| match Daemon::start(tls_config(tweak), small_config()) {
        Ok(d) => {
            d.shutdown();
            panic!("started with bad TLS settings")
        }
        Err(e) => e.to_string(),
    };
    let e = start(|c| c.tls_key_file.clear());
    assert!(e.contains("tls_cert_file is set without tls_key_file"), "{e}");
    let e = start(|c| {
        c.tls_cert_file.clear();
        c.tls_key_file.clear();
        c.tls_client_ca_file = path("ca.pem");
    });
    assert!(e.contains("tls_client_ca_file is set without"), "{e}");
    let e = start(|c| c.tls_cert_file = path("README.md"));
    assert!(e.contains("tls_cert_file") && e.contains("not a PEM file"), "{e}");
    let e = start(|c| c.tls_key_file = path("no-such.key"));
    assert!(e.contains("tls_key_file") && e.contains("no-such.key"), "{e}");
    // A certificate where the key belongs: PEM, but no private key in it.
    let e = start(|c| c.tls_key_file = path("client.pem"));
    assert!(e.contains("tls_cert_file / tls_key_file"), "{e}");
    let e = start(|c| c.listen = "unix:///tmp/cuzk-tls-test.sock".into());
    assert!(e.contains("TLS applies to TCP listeners"), "{e}");
}
