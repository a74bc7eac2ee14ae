//! Errors as one line of text, for what the daemon and its client report (a TLS
//! setting the daemon refuses, a daemon the client cannot reach).

/// An error and its sources on one line (tonic's transport errors say little alone),
/// a source that repeats the text before it left out.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    s
}
