//! Optional shared-secret authentication of every gRPC call (`[daemon]
//! auth_token_file`): the call must carry `authorization: Bearer <secret>`; and the
//! optional TLS of a TCP listener (`tls_cert_file`, `tls_key_file`, and for mutual
//! TLS `tls_client_ca_file`), through tonic's rustls.

use std::sync::Arc;

// Constant-time comparison (the same crate the field arithmetic uses), so timing does
// not reveal a matching prefix of the token.
use subtle::ConstantTimeEq;
use tonic::{
    service::Interceptor,
    transport::{Certificate, Identity, ServerTlsConfig},
    Request, Status,
};

use super::DaemonConfig;

/// The interceptor on both gRPC services; passes everything when no token is set.
#[derive(Clone)]
pub(super) struct Auth(Option<Arc<[u8]>>);

impl Auth {
    /// Reads the token file named in `cfg`, if any.
    pub(super) fn from_config(cfg: &DaemonConfig) -> Result<Auth, String> {
        if cfg.auth_token_file.is_empty() {
            return Ok(Auth(None));
        }
        let text = std::fs::read_to_string(&cfg.auth_token_file)
            .map_err(|e| format!("auth_token_file {}: {e}", cfg.auth_token_file))?;
        // As ssh does with keys: a secret other users can read is no secret.
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&cfg.auth_token_file)
                .map_err(|e| format!("auth_token_file {}: {e}", cfg.auth_token_file))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(format!(
                    "auth_token_file {}: its mode is {:04o}, so other users can read the secret; `chmod 600` it",
                    cfg.auth_token_file,
                    mode & 0o7777
                ));
            }
        }
        let token = text.trim();
        if token.len() < 16 {
            return Err(format!("auth_token_file {}: the secret must be at least 16 characters", cfg.auth_token_file));
        }
        Ok(Auth(Some(token.as_bytes().into())))
    }

    pub(super) fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// Checks an `authorization` header value (gRPC metadata or HTTP header).
    pub(super) fn check(&self, authorization: Option<&str>) -> Result<(), &'static str> {
        let Some(token) = &self.0 else { return Ok(()) };
        match authorization.and_then(|v| v.strip_prefix("Bearer ")) {
            Some(g) if bool::from(g.as_bytes().ct_eq(token)) => Ok(()),
            Some(_) => Err("wrong token"),
            None => Err("this daemon requires `authorization: Bearer <token>`"),
        }
    }
}

/// The TLS configuration the `[daemon]` section names, `None` for plain text.
/// Files are read here; their PEM contents are parsed when the server is built.
pub(super) fn tls_config(cfg: &DaemonConfig) -> Result<Option<ServerTlsConfig>, String> {
    let read = |key: &str, path: &str| -> Result<Vec<u8>, String> {
        let pem = std::fs::read(path).map_err(|e| format!("{key} {path}: {e}"))?;
        if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(format!("{key} {path}: not a PEM file (no -----BEGIN line)"));
        }
        Ok(pem)
    };
    match (cfg.tls_cert_file.is_empty(), cfg.tls_key_file.is_empty()) {
        (true, true) => {
            if !cfg.tls_client_ca_file.is_empty() {
                return Err("tls_client_ca_file is set without tls_cert_file and tls_key_file".into());
            }
            Ok(None)
        }
        (false, true) => Err("tls_cert_file is set without tls_key_file".into()),
        (true, false) => Err("tls_key_file is set without tls_cert_file".into()),
        (false, false) => {
            let identity = Identity::from_pem(
                read("tls_cert_file", &cfg.tls_cert_file)?,
                read("tls_key_file", &cfg.tls_key_file)?,
            );
            let mut tls = ServerTlsConfig::new().identity(identity);
            if !cfg.tls_client_ca_file.is_empty() {
                tls = tls.client_ca_root(Certificate::from_pem(read("tls_client_ca_file", &cfg.tls_client_ca_file)?));
            }
            Ok(Some(tls))
        }
    }
}

impl Interceptor for Auth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let given = req.metadata().get("authorization").and_then(|v| v.to_str().ok());
        match self.check(given) {
            Ok(()) if self.enabled() => {
                // The connection has authenticated: `auth_timeout_secs` no longer
                // applies to it, and it is not among the first closed at the cap.
                if let Some(c) = req.extensions().get::<super::listener::ConnInfo>() {
                    c.conn.authenticated();
                }
                Ok(req)
            }
            Ok(()) => Ok(req),
            Err(why) => Err(Status::unauthenticated(why)),
        }
    }
}
