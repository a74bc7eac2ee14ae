//! Engine-wide services that stages are handed through the traits of
//! `ground::services` (or, for the backend, as an `Arc<dyn Backend>`): each lives in
//! its own module, imports only the ground and the budget, and is created and wired
//! by `topology.rs`.
//!
//! - `params`: the parameter cache (Filecoin parameter files, charged to the host
//!   budget, evicted least recently used);
//! - `recordings`: the recording cache (circuit structures per parameter set);
//! - `backend`: the `[backend]` section and the backend it selects.

pub mod backend;
pub mod params;
pub mod recordings;

pub use backend::{select_backend, BackendConfig, BackendKind, SelectedBackend};
pub use params::ParamCache;
pub use recordings::RecordingCache;
