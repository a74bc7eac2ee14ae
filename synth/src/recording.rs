//! A [`Precompiled`] recording on disk, so that a new process proves its first
//! partitions pre-compiled instead of synthesizing them the plain way while one of
//! them records (about 3 s of the first 2KiB PoRep proofs on a 16-core host).
//!
//! The file belongs to one parameter set: its header carries an identity the caller
//! derives from the proving key (32 bytes), and a file with another identity is
//! refused. The payload is checked with SHA-256 and every index in it is checked
//! against the recorded sizes, so a damaged file is refused by name, never used.
//!
//! Layout (little-endian): magic `CUZKR1CS`, format version (u32), key identity
//! (32 bytes), inputs and aux counts (u64), the A, B, C matrices (row ends, then
//! entries as variable/coefficient u32 pairs, each list prefixed by its length as
//! u64), the coefficient table (canonical 32-byte scalars), the three densities
//! (bit length, then words), and the SHA-256 of everything before it.

use std::io::{self, Read, Write};

use blstrs::Scalar;
use ff::PrimeField;
use sha2::{Digest, Sha256};

use crate::{
    precompiled::{Entry, Matrix},
    Density, Precompiled,
};

const MAGIC: &[u8; 8] = b"CUZKR1CS";
const VERSION: u32 = 1;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Writes through to `w` and hashes what it writes.
struct Hashing<W> {
    w: W,
    h: Sha256,
}

impl<W: Write> Hashing<W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.h.update(b);
        self.w.write_all(b)
    }
    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.put(&v.to_le_bytes())
    }
    /// `n` values, streamed: no copy of a whole matrix (GBs for large circuits).
    fn u32s(&mut self, n: usize, v: impl Iterator<Item = u32>) -> io::Result<()> {
        self.u64(n as u64)?;
        let mut buf = Vec::with_capacity(1 << 16);
        let mut written = 0usize;
        for x in v {
            written += 1;
            buf.extend_from_slice(&x.to_le_bytes());
            if buf.len() >= 1 << 16 {
                self.put(&buf)?;
                buf.clear();
            }
        }
        // The count is written first: a caller's `n` must match what it streams.
        debug_assert_eq!(written, n, "u32s: announced {n} values, streamed {written}");
        self.put(&buf)
    }
}

impl Precompiled {
    /// Writes the recording for the parameter set identified by `key_id`.
    ///
    /// # Errors
    /// Those of `w`.
    pub fn write_to(&self, w: impl Write, key_id: &[u8; 32]) -> io::Result<()> {
        let mut o = Hashing { w: io::BufWriter::with_capacity(1 << 20, w), h: Sha256::new() };
        o.put(MAGIC)?;
        o.put(&VERSION.to_le_bytes())?;
        o.put(key_id)?;
        o.u64(self.inputs as u64)?;
        o.u64(self.aux as u64)?;
        for m in [&self.a, &self.b, &self.c] {
            o.u32s(m.row_end.len(), m.row_end.iter().copied())?;
            o.u32s(2 * m.entries.len(), m.entries.iter().flat_map(|e| [e.var, e.coeff]))?;
        }
        o.u64(self.coeffs.len() as u64)?;
        for c in &self.coeffs {
            o.put(&c.to_repr())?;
        }
        for d in [&self.a_aux_density, &self.b_input_density, &self.b_aux_density] {
            o.u64(d.len() as u64)?;
            o.u32s(2 * d.words().len(), d.words().iter().flat_map(|w| [*w as u32, (*w >> 32) as u32]))?;
        }
        let digest = o.h.finalize();
        o.w.write_all(&digest)?;
        o.w.flush()
    }

    /// Reads a recording written by [`Precompiled::write_to`] for `key_id`.
    ///
    /// # Errors
    /// `InvalidData`, naming the problem, when the file is not a recording, is of
    /// another format version or parameter set, fails its checksum, or holds an
    /// index out of its own sizes; the reader's errors otherwise.
    pub fn read_from(mut r: impl Read, key_id: &[u8; 32]) -> io::Result<Precompiled> {
        let mut all = Vec::new();
        r.read_to_end(&mut all)?;
        if all.len() < MAGIC.len() + 4 + 32 + 32 || &all[..8] != MAGIC {
            return Err(bad("not a cuzk circuit recording"));
        }
        let (body, digest) = all.split_at(all.len() - 32);
        if Sha256::digest(body).as_slice() != digest {
            return Err(bad("checksum mismatch (damaged file)"));
        }
        let mut p = Parser { b: body, at: 8 };
        let version = p.u32()?;
        if version != VERSION {
            return Err(bad(format!("format version {version}, this build reads {VERSION}")));
        }
        if p.take(32)? != key_id {
            return Err(bad("recorded for another parameter set"));
        }
        let inputs = p.len()?;
        let aux = p.len()?;
        let mut m = [Matrix::default(), Matrix::default(), Matrix::default()];
        for x in &mut m {
            x.row_end = p.u32s()?;
            let e = p.u32s()?;
            x.entries = e.chunks_exact(2).map(|c| Entry { var: c[0], coeff: c[1] }).collect();
            if e.len() % 2 != 0 {
                return Err(bad("odd entry list"));
            }
        }
        let n = p.len()?;
        let mut coeffs = Vec::with_capacity(n.min(1 << 24));
        for _ in 0..n {
            let mut repr = [0u8; 32];
            repr.copy_from_slice(p.take(32)?);
            coeffs.push(Option::from(Scalar::from_repr(repr)).ok_or_else(|| bad("coefficient out of the field"))?);
        }
        let mut dens = Vec::new();
        for _ in 0..3 {
            let len = p.len()?;
            let halves = p.u32s()?;
            let words = halves.chunks_exact(2).map(|c| c[0] as u64 | (c[1] as u64) << 32).collect();
            dens.push(Density::from_words(words, len).ok_or_else(|| bad("density of the wrong length"))?);
        }
        if p.at != body.len() {
            return Err(bad("trailing bytes"));
        }
        let [b_aux_density, b_input_density, a_aux_density] = [dens.pop(), dens.pop(), dens.pop()];
        let [a, b, c] = m;
        let pre = Precompiled {
            inputs,
            aux,
            a,
            b,
            c,
            coeffs,
            a_aux_density: a_aux_density.expect("three read"),
            b_input_density: b_input_density.expect("three read"),
            b_aux_density: b_aux_density.expect("three read"),
        };
        pre.check()?;
        Ok(pre)
    }

    /// Every index within the recorded sizes, so that a recording that passed its
    /// checksum but was written wrong fails here rather than in a product.
    fn check(&self) -> io::Result<()> {
        let rows = self.a.row_end.len();
        if self.b.row_end.len() != rows || self.c.row_end.len() != rows {
            return Err(bad("matrices of different row counts"));
        }
        if self.coeffs.len() < 3 {
            return Err(bad("coefficient table without its fixed slots"));
        }
        for m in [&self.a, &self.b, &self.c] {
            if m.row_end.windows(2).any(|w| w[0] > w[1])
                || m.row_end.last().map_or(0, |e| *e as usize) != m.entries.len()
            {
                return Err(bad("row ends out of order or not matching the entries"));
            }
            for e in &m.entries {
                let (i, input) = ((e.var >> 1) as usize, e.var & 1 == 0);
                if (input && i >= self.inputs) || (!input && i >= self.aux) || e.coeff as usize >= self.coeffs.len() {
                    return Err(bad("entry out of the recorded sizes"));
                }
            }
        }
        if self.a_aux_density.len() != self.aux
            || self.b_aux_density.len() != self.aux
            || self.b_input_density.len() != self.inputs
        {
            return Err(bad("densities not matching the variable counts"));
        }
        Ok(())
    }
}

struct Parser<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| bad("truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn len(&mut self) -> io::Result<usize> {
        let v = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| bad("size out of range"))
    }
    fn u32s(&mut self) -> io::Result<Vec<u32>> {
        let n = self.len()?;
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("size out of range"))?)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{synthesize_precompiled, synthesize_recording, SyntheticCircuit, SyntheticSpec};

    #[test]
    fn round_trip_and_refusals() {
        let spec = SyntheticSpec { constraints: 300, public_inputs: 3, a_density: 0.7, b_density: 0.4 };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(spec, 1).unwrap()).unwrap();
        let pre = pre.unwrap();
        let id = [7u8; 32];
        let mut file = Vec::new();
        pre.write_to(&mut file, &id).unwrap();
        let back = Precompiled::read_from(&file[..], &id).unwrap();
        assert_eq!(back, pre);
        // Proves the same: another instance synthesized with the loaded recording.
        let a = synthesize_precompiled(SyntheticCircuit::new(spec, 2).unwrap(), &back).unwrap();
        assert_eq!(a, crate::synthesize(SyntheticCircuit::new(spec, 2).unwrap()).unwrap());

        let err = |f: &[u8], id: &[u8; 32]| Precompiled::read_from(f, id).unwrap_err().to_string();
        assert!(err(&file, &[8u8; 32]).contains("another parameter set"));
        let mut damaged = file.clone();
        damaged[100] ^= 1;
        assert!(err(&damaged, &id).contains("checksum"));
        assert!(err(&file[..file.len() / 2], &id).contains("checksum"));
        assert!(err(b"hello", &id).contains("not a cuzk circuit recording"));
    }
}
