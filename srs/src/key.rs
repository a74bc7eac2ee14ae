use std::{path::Path, sync::Arc};

use bellperson::groth16::{Parameters, VerifyingKey};
use blstrs::{Bls12, G1Affine, G2Affine};
use cuzk_core::CircuitShape;

use crate::{file, LoadOptions, SrsError};

/// Decoded Groth16 parameters, resident in memory.
///
/// The vectors are `Arc`s so that converting from and to bellperson's
/// [`Parameters`] shares them instead of copying. The invariants are bellperson's:
/// `h` holds `tau^i * t(tau) / delta` for `i < m - 1` (m = domain size); `l` holds
/// `(beta*u_i + alpha*v_i + w_i)(tau) / delta` for every aux variable; `a` holds
/// `u_i(tau)` for every input then for every aux variable present in the A query;
/// `b_g1`/`b_g2` hold `v_i(tau)` for inputs then aux variables present in the B query.
/// No vector contains the point at infinity.
#[derive(Clone)]
pub struct ProvingKey {
    pub vk: VerifyingKey<Bls12>,
    pub h: Arc<Vec<G1Affine>>,
    pub l: Arc<Vec<G1Affine>>,
    pub a: Arc<Vec<G1Affine>>,
    pub b_g1: Arc<Vec<G1Affine>>,
    pub b_g2: Arc<Vec<G2Affine>>,
}

impl std::fmt::Debug for ProvingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvingKey")
            .field("inputs", &self.vk.ic.len())
            .field("h", &self.h.len())
            .field("l", &self.l.len())
            .field("a", &self.a.len())
            .field("b_g1", &self.b_g1.len())
            .field("b_g2", &self.b_g2.len())
            .finish()
    }
}

impl From<Parameters<Bls12>> for ProvingKey {
    fn from(p: Parameters<Bls12>) -> Self {
        ProvingKey { vk: p.vk, h: p.h, l: p.l, a: p.a, b_g1: p.b_g1, b_g2: p.b_g2 }
    }
}

impl From<&ProvingKey> for Parameters<Bls12> {
    fn from(k: &ProvingKey) -> Self {
        Parameters {
            vk: k.vk.clone(),
            h: k.h.clone(),
            l: k.l.clone(),
            a: k.a.clone(),
            b_g1: k.b_g1.clone(),
            b_g2: k.b_g2.clone(),
        }
    }
}

impl ProvingKey {
    /// Reads a bellperson-format parameter file through a memory map, decoding points
    /// on all cores.
    ///
    /// # Errors
    /// [`SrsError::Io`], [`SrsError::Truncated`], [`SrsError::InvalidPoint`] or
    /// [`SrsError::TrailingBytes`], each naming the file.
    pub fn load(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Self, SrsError> {
        file::load(path.as_ref(), opts)
    }

    /// Reads only the verifying key and the vectors' lengths of a parameter file
    /// ([`KeyHeader`](crate::KeyHeader)); the file's length is checked against them.
    ///
    /// # Errors
    /// As [`ProvingKey::load`], for the header and the file's length.
    pub fn read_header(path: impl AsRef<Path>) -> Result<crate::KeyHeader, SrsError> {
        file::read_header(path.as_ref())
    }

    /// Writes the parameters in bellperson's format (atomically: temporary file, then
    /// rename).
    ///
    /// # Errors
    /// [`SrsError::Io`].
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), SrsError> {
        file::write(self, path.as_ref())
    }

    /// Number of inputs, including `ONE`.
    pub fn num_inputs(&self) -> usize {
        self.vk.ic.len()
    }

    /// Size of the evaluation domain these parameters were made for.
    pub fn domain_size(&self) -> usize {
        self.h.len() + 1
    }

    /// Bytes the decoded points of parameters for a circuit of `shape` occupy in
    /// memory (what [`ProvingKey::heap_bytes`] reports once they are loaded): known
    /// before any parameter exists, for sizing a host.
    pub fn bytes_for_shape(shape: &CircuitShape) -> u64 {
        let g1 = std::mem::size_of::<G1Affine>() as u64;
        let g2 = std::mem::size_of::<G2Affine>() as u64;
        let m = 1u64 << shape.domain_log2();
        (shape.inputs as u64 + (m - 1) + (shape.aux + shape.a_query + shape.b_query) as u64) * g1
            + shape.b_query as u64 * g2
    }

    /// Bytes the decoded points occupy in memory.
    pub fn heap_bytes(&self) -> u64 {
        let g1 = std::mem::size_of::<G1Affine>() as u64;
        let g2 = std::mem::size_of::<G2Affine>() as u64;
        (self.vk.ic.len() + self.h.len() + self.l.len() + self.a.len() + self.b_g1.len()) as u64 * g1
            + self.b_g2.len() as u64 * g2
    }

    /// Checks that these parameters were made for a circuit of `shape`.
    ///
    /// # Errors
    /// [`SrsError::ShapeMismatch`] saying which size differs.
    pub fn check_shape(&self, shape: &CircuitShape) -> Result<(), SrsError> {
        let m = 1usize << shape.domain_log2();
        let checks = [
            ("inputs (vk.ic)", self.vk.ic.len(), shape.inputs),
            ("H points (domain size - 1)", self.h.len(), m - 1),
            ("L points (aux variables)", self.l.len(), shape.aux),
            ("A points (inputs + aux in A)", self.a.len(), shape.a_query),
            ("B_G1 points (inputs + aux in B)", self.b_g1.len(), shape.b_query),
            ("B_G2 points (inputs + aux in B)", self.b_g2.len(), shape.b_query),
        ];
        for (what, have, need) in checks {
            if have != need {
                return Err(SrsError::ShapeMismatch(format!(
                    "{what}: parameters have {have}, the circuit needs {need} \
                     ({} constraints, {} inputs, {} aux); were these parameters made for another circuit?",
                    shape.constraints, shape.inputs, shape.aux
                )));
            }
        }
        Ok(())
    }
}
