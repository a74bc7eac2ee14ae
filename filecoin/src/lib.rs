//! cuzk-filecoin: everything Filecoin, above the generic synthesis crate.
//!
//! Use it to turn what a sealing scheduler sends into circuits cuzk can prove, and to
//! check what comes out the way the chain does:
//! - [`c1`]: the PoRep commit phase 1 output, in both formats operators have, parsed
//!   and checked ([`parse_c1`]);
//! - [`porep`]: one circuit per partition ([`partition_circuits`]) and the blank
//!   circuit its parameters are made for ([`blank_circuit`]); the native witness
//!   generators of every kind are in `native/`;
//! - [`post`] and [`update`]: WinningPoSt, WindowPoSt and SnapDeals circuits from
//!   vanilla proofs ([`post_circuits`], [`update_circuits`]);
//! - [`circuit`]: what every kind shares: [`CircuitId`] (parameter files, Curio's
//!   circuit ids) and blank circuits;
//! - [`partition`]: one partition of any kind, its circuit type erased
//!   ([`Partition`]), what the kinds' circuit builders return;
//! - [`params`]: Filecoin's parameter cache and file names;
//! - [`digest`]: parameter, verifying-key and SRS files checked against Filecoin's
//!   published digests ([`DigestChecker`]);
//! - [`verify`]: filecoin-proofs' verifiers;
//! - [`aggregate`]: SnarkPack for non-interactive PoRep, and its inner-product SRS;
//! - [`registry`]: registered proofs and ids as filecoin-ffi numbers them;
//! - [`fixture`]: test sectors sealed with filecoin-proofs.
//!
//! It knows no actors and no GPU: the engine (cuzk-actors) calls it at its edges.

#![deny(unsafe_code)]

pub mod aggregate;
pub mod c1;
pub mod circuit;
pub mod digest;
mod error;
pub mod fixture;
mod native;
pub mod params;
pub mod partition;
pub mod porep;
pub mod post;
pub mod registry;
pub mod shape_only;
pub mod update;
mod vanilla;
pub mod verify;

pub use aggregate::{
    aggregate_ni_porep, ipp_srs_bytes, ipp_srs_file, ipp_srs_load_bytes, load_ipp_srs, write_fake_ipp_srs, IppSrs,
    IPP_SRS_FILE,
};
pub use c1::{parse_c1, C1Format, ParsedC1};
pub use circuit::{blank_circuit_of, BlankCircuit, CircuitId};
pub use digest::{DigestChecker, DigestError, DigestStatus, FileCheck, Manifest};
pub use error::{PorepError, VanillaError};
pub use fixture::{
    generate_c1, generate_post_vanilla, generate_update_vanilla, seal_sector, C1Fixture, PostFixture, SealedSector,
    UpdateFixture,
};
pub use params::{default_parameter_cache, parameter_files};
pub use partition::Partition;
pub use porep::{blank_circuit, check_replica_id, partition_circuits, record_blank_porep, BlankPorep, PorepPartition};
pub use post::{post_circuits, PostRequest};
pub use registry::{
    is_non_interactive, post_from_number, post_number, proof_for_sector_size, proof_from_number, proof_number,
    prover_id_from_actor, update_from_number, update_number, RegisteredPoStProof, RegisteredSealProof,
    RegisteredUpdateProof,
};
pub use shape_only::{shape_only_c1, shape_only_fixture};
pub use update::{update_circuits, UpdateRequest};
pub use vanilla::{commitment, vanilla_json, vanilla_to_json};
pub use verify::{verify_empty_sector_update, verify_seal, verify_window_post, verify_winning_post};
