//! bellperson's parameter file format, read through a memory map.
//!
//! Layout (all points uncompressed, lengths big-endian u32):
//! `vk.alpha_g1 vk.beta_g1 vk.beta_g2 vk.gamma_g2 vk.delta_g1 vk.delta_g2 |ic| ic..`
//! then `|h| h.. |l| l.. |a| a.. |b_g1| b_g1.. |b_g2| b_g2..`.

use std::{fs::File, io::Write, path::Path, sync::Arc};

use bellperson::groth16::VerifyingKey;
use blstrs::{Bls12, G1Affine, G2Affine};
use group::prime::PrimeCurveAffine;
use rayon::prelude::*;

use crate::{ProvingKey, SrsError};

const G1_LEN: usize = 96;
const G2_LEN: usize = 192;

/// How to read a parameter file.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Check that every point is in the prime-order subgroup (slower; on-curve and
    /// not-at-infinity checks are always done).
    pub subgroup_checks: bool,
}

trait Point: Sized + Send + Sync + Copy {
    const LEN: usize;
    fn decode(bytes: &[u8], checked: bool) -> Result<Self, &'static str>;
    fn encode(&self) -> Vec<u8>;
}

macro_rules! point {
    ($t:ty, $len:expr) => {
        impl Point for $t {
            const LEN: usize = $len;
            fn decode(bytes: &[u8], checked: bool) -> Result<Self, &'static str> {
                let arr: &[u8; $len] = bytes.try_into().expect("caller slices exact length");
                let p = if checked { <$t>::from_uncompressed(arr) } else { <$t>::from_uncompressed_unchecked(arr) };
                let p: $t = Option::from(p).ok_or(if checked {
                    "not on the curve or not in the subgroup"
                } else {
                    "not on the curve"
                })?;
                if bool::from(p.is_identity()) {
                    return Err("point at infinity");
                }
                Ok(p)
            }
            fn encode(&self) -> Vec<u8> {
                self.to_uncompressed().to_vec()
            }
        }
    };
}

point!(G1Affine, G1_LEN);
point!(G2Affine, G2_LEN);

/// A cursor over the mapped bytes that reports errors with the file name.
struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    offset: usize,
    checked: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, section: &'static str, n: usize) -> Result<&'a [u8], SrsError> {
        if self.bytes.len() - self.offset < n {
            return Err(SrsError::Truncated {
                path: self.path.to_path_buf(),
                section,
                offset: self.offset,
                needed: n,
                file_len: self.bytes.len(),
            });
        }
        let s = &self.bytes[self.offset..self.offset + n];
        self.offset += n;
        Ok(s)
    }

    fn len(&mut self, section: &'static str) -> Result<usize, SrsError> {
        let b = self.take(section, 4)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
    }

    fn one<P: Point>(&mut self, section: &'static str) -> Result<P, SrsError> {
        let offset = self.offset;
        let b = self.take(section, P::LEN)?;
        P::decode(b, self.checked).map_err(|reason| SrsError::InvalidPoint {
            path: self.path.to_path_buf(),
            section,
            index: 0,
            offset,
            reason,
        })
    }

    /// A length-prefixed vector of points, decoded in parallel.
    fn vec<P: Point>(&mut self, section: &'static str) -> Result<Vec<P>, SrsError> {
        let n = self.len(section)?;
        let start = self.offset;
        let raw = self.take(section, n.saturating_mul(P::LEN))?;
        let checked = self.checked;
        raw.par_chunks_exact(P::LEN)
            .enumerate()
            .map(|(index, b)| {
                P::decode(b, checked).map_err(|reason| SrsError::InvalidPoint {
                    path: self.path.to_path_buf(),
                    section,
                    index,
                    offset: start + index * P::LEN,
                    reason,
                })
            })
            .collect()
    }
}

pub(crate) fn load(path: &Path, opts: LoadOptions) -> Result<ProvingKey, SrsError> {
    let io = |source| SrsError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and dropped before this function returns; a
    // concurrent truncation of the file by another process could fault, which is the
    // documented hazard of mapping files that operators must not rewrite in place.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let mut r = Reader { path, bytes: &map, offset: 0, checked: opts.subgroup_checks };
    let vk = VerifyingKey::<Bls12> {
        alpha_g1: r.one("vk.alpha_g1")?,
        beta_g1: r.one("vk.beta_g1")?,
        beta_g2: r.one("vk.beta_g2")?,
        gamma_g2: r.one("vk.gamma_g2")?,
        delta_g1: r.one("vk.delta_g1")?,
        delta_g2: r.one("vk.delta_g2")?,
        ic: r.vec("vk.ic")?,
    };
    let h = r.vec("h")?;
    let l = r.vec("l")?;
    let a = r.vec("a")?;
    let b_g1 = r.vec("b_g1")?;
    let b_g2 = r.vec("b_g2")?;
    if r.offset != map.len() {
        return Err(SrsError::TrailingBytes {
            path: path.to_path_buf(),
            offset: r.offset,
            extra: map.len() - r.offset,
        });
    }
    Ok(ProvingKey { vk, h: Arc::new(h), l: Arc::new(l), a: Arc::new(a), b_g1: Arc::new(b_g1), b_g2: Arc::new(b_g2) })
}

fn write_vec<P: Point, W: Write>(w: &mut W, v: &[P]) -> std::io::Result<()> {
    w.write_all(&(v.len() as u32).to_be_bytes())?;
    // Encode in parallel, write in order.
    for chunk in v.chunks(1 << 16) {
        let bytes: Vec<u8> = chunk.par_iter().flat_map_iter(|p| p.encode()).collect();
        w.write_all(&bytes)?;
    }
    Ok(())
}

pub(crate) fn write(key: &ProvingKey, path: &Path) -> Result<(), SrsError> {
    let io = |source| SrsError::Io { path: path.to_path_buf(), source };
    // Write to a temporary name and rename, so a crash never leaves a truncated file
    // under the final name (parameter caches are shared between processes).
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let file = File::create(&tmp).map_err(io)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 22, file);
    let res = (|| -> std::io::Result<()> {
        key.vk.write(&mut w)?;
        write_vec(&mut w, &key.h)?;
        write_vec(&mut w, &key.l)?;
        write_vec(&mut w, &key.a)?;
        write_vec(&mut w, &key.b_g1)?;
        write_vec(&mut w, &key.b_g2)?;
        w.flush()?;
        w.get_ref().sync_all()
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    std::fs::rename(&tmp, path).map_err(io)
}
