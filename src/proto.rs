//! The generated gRPC types of `proto/` (compiled by `build.rs`), shared by the
//! daemon that serves them (`daemon/`, which re-exports them as `daemon::proto` and
//! `daemon::ext_proto`) and the client that calls them (`client.rs`).

/// The generated gRPC types of `proto/cuzk/v1/proving.proto`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("cuzk.v1");
}

/// The generated gRPC types of `proto/cuzk/ext/v1/ext.proto` (cuzk's own extensions).
pub mod ext {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("cuzk.ext.v1");
}
