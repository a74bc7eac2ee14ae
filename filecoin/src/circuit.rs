//! What every Filecoin proof kind shares: the circuit a parameter file is made for
//! ([`CircuitId`]: PoRep, WinningPoSt, WindowPoSt, SnapDeals update), its name in
//! filecoin-proofs' parameter cache and in Curio's API ("porep-32g", "wpost-32g",
//! "winning-32g", "snap-32g"), and its blank circuit. One partition's circuit with
//! its type erased, [`Partition`], is in `partition.rs` (re-exported here): the
//! circuits of each kind (`porep.rs`, `post.rs`, `update.rs`) build it, and this
//! module builds on them.

use std::fmt;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use filecoin_proofs::{SectorShapeBase, SectorShapeSub8, SectorShapeTop2};
use storage_proofs_core::parameter_cache::CacheableParameters;
use storage_proofs_update::EmptySectorUpdateCompound;

pub use crate::partition::Partition;
use crate::{
    porep::BlankPorep, post, update, PorepError, RegisteredPoStProof, RegisteredSealProof, RegisteredUpdateProof,
};

/// The circuit a parameter file is made for: one per registered proof, except that
/// registered proofs sharing a circuit (PoRep v1.1 and its synthetic variant,
/// WindowPoSt v1 and v1.2) share its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CircuitId {
    Seal(RegisteredSealProof),
    PoSt(RegisteredPoStProof),
    Update(RegisteredUpdateProof),
}

impl From<RegisteredSealProof> for CircuitId {
    fn from(p: RegisteredSealProof) -> Self {
        CircuitId::Seal(p)
    }
}
impl From<RegisteredPoStProof> for CircuitId {
    fn from(p: RegisteredPoStProof) -> Self {
        CircuitId::PoSt(p)
    }
}
impl From<RegisteredUpdateProof> for CircuitId {
    fn from(p: RegisteredUpdateProof) -> Self {
        CircuitId::Update(p)
    }
}

impl fmt::Display for CircuitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CircuitId::Seal(p) => write!(f, "{p:?}"),
            CircuitId::PoSt(p) => write!(f, "{p:?}"),
            CircuitId::Update(p) => write!(f, "{p:?}"),
        }
    }
}

/// The sector sizes in Curio's short form, in filecoin-ffi's order.
const SIZES: [(u64, &str); 5] =
    [(2048, "2k"), (8 << 20, "8m"), (512 << 20, "512m"), (32 << 30, "32g"), (64 << 30, "64g")];

impl CircuitId {
    /// Bytes of the sector size this circuit proves.
    pub fn sector_size(self) -> u64 {
        match self {
            CircuitId::Seal(p) => u64::from(p.sector_size()),
            CircuitId::PoSt(p) => u64::from(p.sector_size()),
            CircuitId::Update(p) => u64::from(p.sector_size()),
        }
    }

    /// The kind, as metrics and Curio's circuit ids name it.
    pub fn kind(self) -> &'static str {
        match self {
            CircuitId::Seal(_) => "porep",
            CircuitId::PoSt(p) => post::post_kind(p),
            CircuitId::Update(_) => "snap_deals",
        }
    }

    /// filecoin-proofs' cache identifier of the circuit (the file name without
    /// `v28-` and the extension).
    ///
    /// # Errors
    /// When filecoin-proofs cannot name it.
    pub fn identifier(self) -> Result<String, PorepError> {
        let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
        match self {
            CircuitId::Seal(p) => p.circuit_identifier().map_err(err),
            CircuitId::PoSt(p) => p.circuit_identifier().map_err(err),
            // filecoin-proofs-api's `RegisteredUpdateProof::circuit_identifier` names the
            // PoRep circuit; the prover and verifier read the update circuit's own file.
            CircuitId::Update(p) => {
                let pp = update::public_params(p);
                Ok(match self.sector_size() {
                    34_359_738_368 => EmptySectorUpdateCompound::<SectorShapeSub8>::cache_identifier(&pp),
                    68_719_476_736 => EmptySectorUpdateCompound::<SectorShapeTop2>::cache_identifier(&pp),
                    _ => EmptySectorUpdateCompound::<SectorShapeBase>::cache_identifier(&pp),
                })
            }
        }
    }

    /// The id Curio's API uses for this circuit's parameters: `porep-32g`,
    /// `winning-32g`, `wpost-32g`, `snap-32g`.
    pub fn curio_id(self) -> String {
        let size = self.sector_size();
        let s = SIZES.iter().find(|(b, _)| *b == size).map_or_else(|| size.to_string(), |(_, s)| s.to_string());
        let kind = match self {
            CircuitId::Seal(_) => "porep",
            CircuitId::PoSt(p) if post::is_winning(p) => "winning",
            CircuitId::PoSt(_) => "wpost",
            CircuitId::Update(_) => "snap",
        };
        format!("{kind}-{s}")
    }

    /// Parses a Curio circuit id (`porep-32g`, `winning-2k`, `wpost-64g`,
    /// `snap-512m`; sizes also as `32GiB` or bytes) into the latest registered proof
    /// of that kind and size.
    ///
    /// # Errors
    /// A message naming what is not understood.
    pub fn from_curio_id(id: &str) -> Result<CircuitId, String> {
        let (kind, size) =
            id.split_once('-').ok_or_else(|| format!("circuit `{id}` is not <kind>-<size> (e.g. porep-32g)"))?;
        let bytes = SIZES
            .iter()
            .find(|(_, s)| s.eq_ignore_ascii_case(size))
            .map(|(b, _)| *b)
            .or_else(|| crate::proof_for_sector_size(size).ok().map(|p| u64::from(p.sector_size())))
            .ok_or_else(|| format!("circuit `{id}`: `{size}` is not a sector size (2k, 8m, 512m, 32g, 64g)"))?;
        let i = SIZES.iter().position(|(b, _)| *b == bytes).expect("a known size");
        Ok(match kind {
            "porep" => CircuitId::Seal(crate::registry::seal_proof_v1_1(i)),
            "winning" => CircuitId::PoSt(crate::registry::post_from_number(i as u64).expect("0-4 are winning")),
            "wpost" | "window" => {
                CircuitId::PoSt(crate::registry::post_from_number(10 + i as u64).expect("10-14 are window v1.1"))
            }
            "snap" | "update" => {
                CircuitId::Update(crate::registry::update_from_number(i as u64).expect("0-4 are updates"))
            }
            _ => return Err(format!("circuit `{id}`: kind `{kind}` is not porep, winning, wpost or snap")),
        })
    }
}

/// The blank (witness-free) circuit of any Filecoin circuit: what its parameters
/// are made for (`cuzk srs gen`, `cuzk size`). Boxed: the circuits differ in size.
pub enum BlankCircuit {
    Porep(Box<BlankPorep>),
    PostBase(Box<storage_proofs_post::fallback::FallbackPoStCircuit<SectorShapeBase>>),
    PostSub8(Box<storage_proofs_post::fallback::FallbackPoStCircuit<SectorShapeSub8>>),
    PostTop2(Box<storage_proofs_post::fallback::FallbackPoStCircuit<SectorShapeTop2>>),
    UpdateBase(Box<storage_proofs_update::EmptySectorUpdateCircuit<SectorShapeBase>>),
    UpdateSub8(Box<storage_proofs_update::EmptySectorUpdateCircuit<SectorShapeSub8>>),
    UpdateTop2(Box<storage_proofs_update::EmptySectorUpdateCircuit<SectorShapeTop2>>),
}

impl Circuit<Scalar> for BlankCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        match self {
            BlankCircuit::Porep(c) => c.synthesize(cs),
            BlankCircuit::PostBase(c) => c.synthesize(cs),
            BlankCircuit::PostSub8(c) => c.synthesize(cs),
            BlankCircuit::PostTop2(c) => c.synthesize(cs),
            BlankCircuit::UpdateBase(c) => c.synthesize(cs),
            BlankCircuit::UpdateSub8(c) => c.synthesize(cs),
            BlankCircuit::UpdateTop2(c) => c.synthesize(cs),
        }
    }
}

/// The blank circuit of `id`.
///
/// # Errors
/// An unknown sector size; filecoin-proofs' setup errors.
pub fn blank_circuit_of(id: CircuitId) -> Result<BlankCircuit, PorepError> {
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    Ok(match (id, id.sector_size()) {
        (CircuitId::Seal(p), _) => BlankCircuit::Porep(Box::new(crate::blank_circuit(p)?)),
        (CircuitId::PoSt(p), 34_359_738_368) => BlankCircuit::PostSub8(Box::new(post::blank(p).map_err(err)?)),
        (CircuitId::PoSt(p), 68_719_476_736) => BlankCircuit::PostTop2(Box::new(post::blank(p).map_err(err)?)),
        (CircuitId::PoSt(p), _) => BlankCircuit::PostBase(Box::new(post::blank(p).map_err(err)?)),
        (CircuitId::Update(p), 34_359_738_368) => BlankCircuit::UpdateSub8(Box::new(update::blank(p))),
        (CircuitId::Update(p), 68_719_476_736) => BlankCircuit::UpdateTop2(Box::new(update::blank(p))),
        (CircuitId::Update(p), _) => BlankCircuit::UpdateBase(Box::new(update::blank(p))),
    })
}
