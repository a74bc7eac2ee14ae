//! Optional shared-secret authentication of every gRPC call (`[daemon]
//! auth_token_file`): the call must carry `authorization: Bearer <secret>`.

use std::sync::Arc;

use tonic::{service::Interceptor, Request, Status};

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
        let token = text.trim();
        if token.len() < 16 {
            return Err(format!("auth_token_file {}: the secret must be at least 16 characters", cfg.auth_token_file));
        }
        Ok(Auth(Some(token.as_bytes().into())))
    }

    pub(super) fn enabled(&self) -> bool {
        self.0.is_some()
    }
}

/// Compares without an early exit, so timing does not reveal a matching prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Interceptor for Auth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.0 else { return Ok(req) };
        let given =
            req.metadata().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(g) if same(g.as_bytes(), token) => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong token")),
            None => Err(Status::unauthenticated("this daemon requires `authorization: Bearer <token>`")),
        }
    }
}
