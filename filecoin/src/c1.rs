//! The C1 output (PoRep commit phase 1), in either format operators have, parsed and
//! checked before any circuit is built.
//!
//! Formats (detected from the first key of the JSON object):
//! - filecoin-proofs-api's `SealCommitPhase1Output` JSON, as filecoin-ffi writes it;
//! - the Lotus/Curio wrapper `{"SectorNum", "Phase1Out" (base64 of that JSON),
//!   "SectorSize"}`. It has no prover id, so the prover id is always a parameter.

use filecoin_proofs::{DefaultPieceHasher, MerkleTreeTrait, SectorShapeBase, SectorShapeSub8, SectorShapeTop2};
use filecoin_proofs_api::seal::SealCommitPhase1Output;
use serde::{de::IgnoredAny, Deserialize};
use storage_proofs_core::{
    drgraph::Graph,
    merkle::{base_path_length, MerkleProof, MerkleProofTrait},
};
use storage_proofs_porep::stacked::{self, ColumnProof, TOTAL_PARENTS};
use typenum::Unsigned;

use crate::{is_non_interactive, porep::vanilla_params, PorepError, RegisteredSealProof};

/// Which of the two formats the input was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum C1Format {
    /// filecoin-proofs-api `SealCommitPhase1Output` JSON.
    Plain,
    /// Lotus/Curio wrapper, with its sector number.
    Wrapper { sector_num: u64 },
}

/// A parsed, validated C1 output.
pub struct ParsedC1 {
    pub format: C1Format,
    pub output: SealCommitPhase1Output,
}

impl ParsedC1 {
    /// The registered seal proof (sector size and API version).
    pub fn registered_proof(&self) -> RegisteredSealProof {
        self.output.registered_proof
    }

    /// Number of partitions (= SNARKs in the proof; aggregated into one for NI-PoRep).
    pub fn partitions(&self) -> usize {
        usize::from(self.output.registered_proof.partitions())
    }

    /// Whether the proof is non-interactive PoRep (API v1.2): its partition proofs
    /// are aggregated with SnarkPack into the returned proof.
    pub fn is_non_interactive(&self) -> bool {
        is_non_interactive(self.output.registered_proof)
    }
}

/// The wrapper, its base64 borrowed from the input (a JSON string without escapes,
/// as base64 is): the input is not copied before it is decoded.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapper<'a> {
    #[serde(rename = "SectorNum")]
    sector_num: u64,
    #[serde(rename = "Phase1Out", borrow)]
    phase1_out: std::borrow::Cow<'a, str>,
    #[serde(rename = "SectorSize")]
    sector_size: u64,
}

/// The first key of a JSON object, without parsing the rest (a 32GiB C1 is tens of
/// megabytes; it is parsed once, by the format it turns out to be).
fn first_key(bytes: &[u8]) -> Option<&str> {
    let s = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[s] != b'{' {
        return None;
    }
    let rest = &bytes[s + 1..];
    let q = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[q] != b'"' {
        return None;
    }
    let key = &rest[q + 1..];
    let end = key.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&key[..end]).ok()
}

/// Parses and validates a C1 output of at most `max_bytes`.
///
/// The vanilla proofs are checked against the registered proof's shape (what
/// filecoin-proofs' circuit builder assumes of them, and what its parameters were
/// made for): challenges per partition, every Merkle path's length and arity per
/// level, column layers, parents. Only the shape: no hash is computed.
///
/// # Errors
/// A [`PorepError`] naming what is wrong: size, JSON (with line and column), base64,
/// sector size, zero commitments or seed, partition count, unsupported proof type;
/// for the vanilla proofs, the partition, the challenge, the path or column, and
/// what it has against what the proof type has.
pub fn parse_c1(bytes: &[u8], max_bytes: usize) -> Result<ParsedC1, PorepError> {
    if bytes.len() > max_bytes {
        return Err(PorepError::TooLarge { len: bytes.len(), max: max_bytes });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(PorepError::Empty);
    }
    let parsed = match first_key(bytes) {
        Some("SectorNum" | "Phase1Out" | "SectorSize") => {
            let w: Wrapper = serde_json::from_slice(bytes)
                .map_err(|source| PorepError::Json { what: "Lotus/Curio wrapper", source })?;
            let output = inner_output(w.phase1_out.trim().as_bytes())?;
            let inner_size = u64::from(output.registered_proof.sector_size());
            if inner_size != w.sector_size {
                return Err(PorepError::SectorSizeMismatch {
                    wrapper: w.sector_size,
                    proof: output.registered_proof,
                    inner: inner_size,
                });
            }
            ParsedC1 { format: C1Format::Wrapper { sector_num: w.sector_num }, output }
        }
        _ => {
            let output: SealCommitPhase1Output = serde_json::from_slice(bytes)
                .map_err(|source| PorepError::Json { what: "SealCommitPhase1Output", source })?;
            ParsedC1 { format: C1Format::Plain, output }
        }
    };
    validate(&parsed)?;
    Ok(parsed)
}

/// The `SealCommitPhase1Output` inside a wrapper's base64, decoded as it is parsed:
/// the decoded JSON (three quarters of the input's size) is never held whole.
fn inner_output(b64: &[u8]) -> Result<SealCommitPhase1Output, PorepError> {
    let decoder = base64::read::DecoderReader::new(b64, &base64::engine::general_purpose::STANDARD);
    serde_json::from_reader(std::io::BufReader::with_capacity(64 << 10, decoder)).map_err(|source| {
        // A base64 error reaches the parser as an I/O error wrapping it.
        if source.is_io() {
            let io = std::io::Error::from(source);
            match io.into_inner().map(|e| e.downcast::<base64::DecodeError>()) {
                Some(Ok(e)) => PorepError::Base64(*e),
                Some(Err(e)) => PorepError::Circuit(format!("reading Phase1Out: {e}")),
                None => PorepError::Circuit("reading Phase1Out failed".into()),
            }
        } else {
            PorepError::Json { what: "SealCommitPhase1Output (inside Phase1Out)", source }
        }
    })
}

fn validate(c1: &ParsedC1) -> Result<(), PorepError> {
    let o = &c1.output;
    let proof = o.registered_proof;
    for (name, v) in [("comm_r", &o.comm_r), ("comm_d", &o.comm_d), ("seed", &o.seed)] {
        if *v == [0; 32] {
            return Err(PorepError::Zero(name));
        }
    }
    let want = c1.partitions();
    let got = vanilla_partitions(o);
    if got != want {
        return Err(PorepError::Partitions { proof, got, want });
    }
    check_vanilla(o)
}

fn vanilla_partitions(o: &SealCommitPhase1Output) -> usize {
    use filecoin_proofs_api::seal::VanillaSealProof::*;
    match &o.vanilla_proofs {
        StackedDrg2KiBV1(v) | StackedDrg8MiBV1(v) | StackedDrg512MiBV1(v) => nonempty(v),
        StackedDrg32GiBV1(v) => nonempty(v),
        StackedDrg64GiBV1(v) => nonempty(v),
    }
}

fn nonempty<T>(v: &[Vec<T>]) -> usize {
    if v.iter().any(Vec::is_empty) {
        0
    } else {
        v.len()
    }
}

/// Checks the vanilla proofs' shape against `o.registered_proof`'s public
/// parameters (the ones its circuits and parameters are built from).
fn check_vanilla(o: &SealCommitPhase1Output) -> Result<(), PorepError> {
    use filecoin_proofs_api::seal::VanillaSealProof::*;
    let proof = o.registered_proof;
    // The variant fixes the proofs' Rust type (as the circuit builder's conversion
    // does, by type); the path lengths below then fix the sector size.
    match (u64::from(proof.sector_size()), &o.vanilla_proofs) {
        (2048 | 8_388_608 | 536_870_912, StackedDrg2KiBV1(v) | StackedDrg8MiBV1(v) | StackedDrg512MiBV1(v)) => {
            check_shape::<SectorShapeBase>(proof, v)
        }
        (34_359_738_368, StackedDrg32GiBV1(v)) => check_shape::<SectorShapeSub8>(proof, v),
        (68_719_476_736, StackedDrg64GiBV1(v)) => check_shape::<SectorShapeTop2>(proof, v),
        (2048 | 8_388_608 | 536_870_912 | 34_359_738_368 | 68_719_476_736, _) => Err(PorepError::WrongShape { proof }),
        _ => Err(PorepError::Unsupported(proof, "unknown sector size")),
    }
}

/// A Merkle tree's shape, as its proofs' paths have it: the arity of each level
/// from the leaves up, and which of filecoin's proof kinds (one tree, or base trees
/// under a sub tree, or under a top tree too) it gives.
pub(crate) struct TreeShape {
    pub(crate) arities: Vec<usize>,
    kind: &'static str,
    /// What `MerkleProofTrait::len` says for a proof of that kind.
    len: usize,
}

impl TreeShape {
    /// The tree over `leaves` nodes with base arity `A` and sub/top tree arities
    /// `B`/`C` (0: none), as filecoin-proofs' `SectorShape*` types and
    /// `storage_proofs_core::merkle::compound_path_length` lay it out.
    pub(crate) fn of<A: Unsigned, B: Unsigned, C: Unsigned>(leaves: usize) -> Self {
        let (a, b, c) = (A::to_usize(), B::to_usize(), C::to_usize());
        let base = base_path_length::<A, B, C>(leaves);
        let mut arities = vec![a; base];
        arities.extend([b, c].into_iter().filter(|x| *x > 0));
        let (kind, len) = match (b, c) {
            (_, c) if c > 0 => ("top-tree", c),
            (b, _) if b > 0 => ("sub-tree", b),
            _ => ("single-tree", base * (a - 1) + 2),
        };
        TreeShape { arities, kind, len }
    }
}

/// Where in the vanilla proofs a check is.
#[derive(Clone, Copy)]
struct At {
    partition: usize,
    challenge: usize,
}

/// What a valid vanilla proof of the registered proof has.
pub(crate) struct Expected {
    pub(crate) challenges: usize,
    pub(crate) layers: usize,
    pub(crate) drg_parents: usize,
    pub(crate) exp_parents: usize,
    /// Tree D: binary SHA-256 over the sector's nodes.
    pub(crate) tree_d: TreeShape,
    /// Trees R (`comm_r_last`) and C (`comm_c`): Poseidon, of the sector shape.
    pub(crate) tree_rc: TreeShape,
}

impl Expected {
    /// From `proof`'s public parameters for sector shape `Tree`.
    pub(crate) fn of<Tree: 'static + MerkleTreeTrait>(proof: RegisteredSealProof) -> Result<Self, PorepError> {
        let params = vanilla_params::<Tree>(proof)?;
        let nodes = params.graph.size();
        Ok(Expected {
            challenges: params.challenges.num_challenges_per_partition(),
            layers: params.num_layers,
            drg_parents: params.graph.base_graph().degree(),
            exp_parents: params.graph.expansion_degree(),
            tree_d: TreeShape::of::<typenum::U2, typenum::U0, typenum::U0>(nodes),
            tree_rc: TreeShape::of::<Tree::Arity, Tree::SubTreeArity, Tree::TopTreeArity>(nodes),
        })
    }
}

fn check_shape<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
    vanilla: &[Vec<stacked::Proof<Tree, DefaultPieceHasher>>],
) -> Result<(), PorepError> {
    let want = Expected::of::<Tree>(proof)?;
    // One buffer for re-reading the parts filecoin keeps private (see `reread`).
    let mut buf = Vec::new();
    for (partition, proofs) in vanilla.iter().enumerate() {
        if proofs.len() != want.challenges {
            return Err(PorepError::ChallengeCount { proof, partition, got: proofs.len(), want: want.challenges });
        }
        for (challenge, p) in proofs.iter().enumerate() {
            check_challenge(p, &want, At { partition, challenge }, &mut buf)?;
        }
    }
    Ok(())
}

/// The parts of a column proof that storage-proofs-porep keeps private.
#[derive(Deserialize)]
struct ColumnParts<P> {
    column: Rows,
    inclusion_proof: P,
}

#[derive(Deserialize)]
struct Rows {
    rows: Vec<IgnoredAny>,
}

/// A labeling or encoding proof's parents (private in storage-proofs-porep).
#[derive(Deserialize)]
struct Parents {
    parents: Vec<IgnoredAny>,
}

/// Reads the private parts of `v` back through its serde form (JSON, the form it
/// was parsed from), in `buf`.
fn reread<T: serde::Serialize, P: serde::de::DeserializeOwned>(
    buf: &mut Vec<u8>,
    v: &T,
    what: &str,
) -> Result<P, PorepError> {
    buf.clear();
    serde_json::to_writer(&mut *buf, v)
        .and_then(|()| serde_json::from_slice(buf))
        .map_err(|e| PorepError::Circuit(format!("reading the {what} of a vanilla proof back: {e}")))
}

type TreeProof<Tree> = MerkleProof<
    <Tree as MerkleTreeTrait>::Hasher,
    <Tree as MerkleTreeTrait>::Arity,
    <Tree as MerkleTreeTrait>::SubTreeArity,
    <Tree as MerkleTreeTrait>::TopTreeArity,
>;

fn check_challenge<Tree: 'static + MerkleTreeTrait>(
    p: &stacked::Proof<Tree, DefaultPieceHasher>,
    want: &Expected,
    at: At,
    buf: &mut Vec<u8>,
) -> Result<(), PorepError> {
    let At { partition, challenge } = at;
    check_path(&p.comm_d_proofs, &want.tree_d, at, || "comm_d proof (tree D)".into())?;
    check_path(&p.comm_r_last_proof, &want.tree_rc, at, || "comm_r_last proof (tree R)".into())?;

    let rcp = &p.replica_column_proofs;
    let parents = |which: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(PorepError::Parents { partition, challenge, which: which.into(), got, want })
        }
    };
    parents("DRG parent columns", rcp.drg_parents.len(), want.drg_parents)?;
    parents("expansion parent columns", rcp.exp_parents.len(), want.exp_parents)?;
    let columns = std::iter::once(("the challenged node's column".to_string(), &rcp.c_x))
        .chain(rcp.drg_parents.iter().enumerate().map(|(i, c)| (format!("DRG parent {i}'s column"), c)))
        .chain(rcp.exp_parents.iter().enumerate().map(|(i, c)| (format!("expansion parent {i}'s column"), c)));
    for (which, column) in columns {
        check_column::<Tree>(column, want, at, &which, buf)?;
    }

    if p.labeling_proofs.len() != want.layers {
        return Err(PorepError::LabelingLayers {
            partition,
            challenge,
            got: p.labeling_proofs.len(),
            want: want.layers,
        });
    }
    for (layer, l) in p.labeling_proofs.iter().enumerate() {
        let got = reread::<_, Parents>(buf, l, "labeling proof")?.parents.len();
        parents(&format!("labeling proof of layer {}", layer + 1), got, TOTAL_PARENTS)?;
    }
    let got = reread::<_, Parents>(buf, &p.encoding_proof, "encoding proof")?.parents.len();
    parents("encoding proof", got, TOTAL_PARENTS)
}

fn check_column<Tree: 'static + MerkleTreeTrait>(
    column: &ColumnProof<TreeProof<Tree>>,
    want: &Expected,
    at: At,
    which: &str,
    buf: &mut Vec<u8>,
) -> Result<(), PorepError> {
    let parts: ColumnParts<TreeProof<Tree>> = reread(buf, column, "column proof")?;
    let got = parts.column.rows.len();
    if got != want.layers {
        let At { partition, challenge } = at;
        return Err(PorepError::ColumnLayers { partition, challenge, which: which.into(), got, want: want.layers });
    }
    check_path(&parts.inclusion_proof, &want.tree_rc, at, || format!("comm_c proof of {which} (tree C)"))
}

/// [`check_path`] for the Merkle proofs of PoSt and SnapDeals vanilla proofs:
/// storage-proofs indexes a path by its positions and hashes by the arity, so a
/// path of another shape must be refused before it verifies one (a panic there).
///
/// # Errors
/// What is wrong with the path: its levels, a level's hashes or position, its kind.
pub(crate) fn path_shape<P: MerkleProofTrait>(p: &P, tree: &TreeShape) -> Result<(), String> {
    let path = p.path();
    if path.len() != tree.arities.len() {
        return Err(format!("Merkle path of {} levels; want {}", path.len(), tree.arities.len()));
    }
    for (level, ((hashes, index), &arity)) in path.iter().zip(&tree.arities).enumerate() {
        if hashes.len() != arity - 1 {
            return Err(format!("Merkle path level {level}: {} sibling hashes; want {}", hashes.len(), arity - 1));
        }
        if *index >= arity {
            return Err(format!("Merkle path level {level}: position {index}; want below {arity}"));
        }
    }
    if p.len() != tree.len {
        return Err(format!("Merkle path is not the {} proof this sector shape's tree gives", tree.kind));
    }
    let field = |what: &dyn Fn() -> String, d: &<P::Hasher as filecoin_hashers::Hasher>::Domain| {
        if crate::vanilla::is_field_element(d.as_ref()) {
            Ok(())
        } else {
            Err(format!("Merkle {} is not a field element (at or above the BLS12-381 scalar modulus)", what()))
        }
    };
    field(&|| "leaf".into(), &p.leaf())?;
    field(&|| "root".into(), &p.root())?;
    for (level, (hashes, _)) in path.iter().enumerate() {
        for (j, h) in hashes.iter().enumerate() {
            field(&|| format!("path level {level}, sibling hash {j}"), h)?;
        }
    }
    Ok(())
}

/// A Merkle proof's path has `tree`'s levels, each with one hash fewer than its
/// arity and a position below it, and is of the kind `tree` gives.
fn check_path<P: MerkleProofTrait>(
    p: &P,
    tree: &TreeShape,
    at: At,
    which: impl Fn() -> String,
) -> Result<(), PorepError> {
    let At { partition, challenge } = at;
    let path = p.path();
    if path.len() != tree.arities.len() {
        return Err(PorepError::PathLength {
            partition,
            challenge,
            which: which(),
            got: path.len(),
            want: tree.arities.len(),
        });
    }
    for (level, ((hashes, index), &arity)) in path.iter().zip(&tree.arities).enumerate() {
        if hashes.len() != arity - 1 {
            return Err(PorepError::PathArity {
                partition,
                challenge,
                which: which(),
                level,
                got: hashes.len(),
                want: arity - 1,
            });
        }
        if *index >= arity {
            return Err(PorepError::PathIndex {
                partition,
                challenge,
                which: which(),
                level,
                got: *index,
                want: arity,
            });
        }
    }
    if p.len() != tree.len {
        return Err(PorepError::PathKind { partition, challenge, which: which(), want: tree.kind });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes checked for every sector size, against the numbers filecoin's
    /// sector shapes have (trees of 2^n nodes; R and C: base arity 8, 32GiB with a
    /// sub tree of 8, 64GiB with a top tree of 2 too).
    #[test]
    fn expected_shapes_per_sector_size() {
        use RegisteredSealProof::*;
        let expected = |p: RegisteredSealProof| match u64::from(p.sector_size()) {
            34_359_738_368 => Expected::of::<SectorShapeSub8>(p),
            68_719_476_736 => Expected::of::<SectorShapeTop2>(p),
            _ => Expected::of::<SectorShapeBase>(p),
        };
        let base = |n: usize| vec![8; n];
        let cases = [
            (StackedDrg2KiBV1_1, 6, base(2), "single-tree", 2 * 7 + 2, 2, 2),
            (StackedDrg8MiBV1_1, 18, base(6), "single-tree", 6 * 7 + 2, 2, 2),
            (StackedDrg512MiBV1_1, 24, base(8), "single-tree", 8 * 7 + 2, 2, 2),
            (StackedDrg32GiBV1_1, 30, base(10), "sub-tree", 8, 18, 11),
            (StackedDrg64GiBV1_1, 31, [base(10), vec![2]].concat(), "top-tree", 2, 18, 11),
        ];
        for (proof, d_levels, rc, kind, len, challenges, layers) in cases {
            let e = expected(proof).unwrap();
            assert_eq!(e.tree_d.arities, vec![2; d_levels], "{proof:?}: tree D");
            assert_eq!((e.tree_d.kind, e.tree_d.len), ("single-tree", d_levels + 2), "{proof:?}");
            assert_eq!(e.tree_rc.arities, rc, "{proof:?}: trees R and C");
            assert_eq!((e.tree_rc.kind, e.tree_rc.len), (kind, len), "{proof:?}");
            assert_eq!((e.challenges, e.layers), (challenges, layers), "{proof:?}: challenges, layers");
            assert_eq!((e.drg_parents, e.exp_parents), (6, 8), "{proof:?}: parents");
        }
        // Non-interactive PoRep: its own challenge count per partition.
        let ni = expected(StackedDrg32GiBV1_2_Feat_NonInteractivePoRep).unwrap();
        let total = usize::from(StackedDrg32GiBV1_2_Feat_NonInteractivePoRep.partitions()) * ni.challenges;
        assert!(ni.challenges > 0 && total >= 2253, "{} x {}", ni.challenges, total);
    }
}
