//! bellperson's parameter file format, read with positioned reads in chunks (not a
//! memory map: a file truncated while it loads would kill the process with SIGBUS;
//! a short read is an error that names the file).
//!
//! Layout (all points uncompressed, lengths big-endian u32):
//! `vk.alpha_g1 vk.beta_g1 vk.beta_g2 vk.gamma_g2 vk.delta_g1 vk.delta_g2 |ic| ic..`
//! then `|h| h.. |l| l.. |a| a.. |b_g1| b_g1.. |b_g2| b_g2..`.

use std::{fs::File, io::Write, os::unix::fs::FileExt, path::Path, sync::Arc};

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
    /// Stands in for an invalid point until its error is returned.
    fn filler() -> Self;
    fn decode(bytes: &[u8], checked: bool) -> Result<Self, &'static str>;
    fn encode(&self) -> Vec<u8>;
}

macro_rules! point {
    ($t:ty, $len:expr) => {
        impl Point for $t {
            const LEN: usize = $len;
            fn filler() -> Self {
                <$t>::default()
            }
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

/// Bytes read per chunk of a point vector (decoded in parallel, then the next read).
const CHUNK_BYTES: usize = 64 << 20;

/// A cursor over the file that reports errors with the file name.
struct Reader<'a> {
    path: &'a Path,
    file: &'a File,
    /// The length when opened; sections are checked against it before reading.
    file_len: usize,
    offset: usize,
    checked: bool,
    buf: Vec<u8>,
}

impl<'a> Reader<'a> {
    /// Whether `n` more bytes of `section` are in the file (as it was opened).
    fn fits(&self, section: &'static str, n: usize) -> Result<(), SrsError> {
        if self.file_len - self.offset < n {
            return Err(SrsError::Truncated {
                path: self.path.to_path_buf(),
                section,
                offset: self.offset,
                needed: n,
                file_len: self.file_len,
            });
        }
        Ok(())
    }

    /// Reads the next `n` bytes into `self.buf`.
    fn take(&mut self, section: &'static str, n: usize) -> Result<(), SrsError> {
        self.fits(section, n)?;
        self.buf.resize(n, 0);
        read_at(self.path, self.file, section, self.offset, &mut self.buf)?;
        self.offset += n;
        Ok(())
    }

    fn len(&mut self, section: &'static str) -> Result<usize, SrsError> {
        self.take(section, 4)?;
        Ok(u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize)
    }

    fn one<P: Point>(&mut self, section: &'static str) -> Result<P, SrsError> {
        let offset = self.offset;
        self.take(section, P::LEN)?;
        P::decode(&self.buf, self.checked).map_err(|reason| SrsError::InvalidPoint {
            path: self.path.to_path_buf(),
            section,
            index: 0,
            offset,
            reason,
        })
    }

    /// The verifying key, at the start of the file.
    fn vk(&mut self) -> Result<VerifyingKey<Bls12>, SrsError> {
        Ok(VerifyingKey::<Bls12> {
            alpha_g1: self.one("vk.alpha_g1")?,
            beta_g1: self.one("vk.beta_g1")?,
            beta_g2: self.one("vk.beta_g2")?,
            gamma_g2: self.one("vk.gamma_g2")?,
            delta_g1: self.one("vk.delta_g1")?,
            delta_g2: self.one("vk.delta_g2")?,
            ic: self.vec("vk.ic")?,
        })
    }

    /// A length-prefixed vector of points, decoded in parallel. A thread reads
    /// the next chunk while this one decodes the last: from a cold disk the load
    /// takes the longer of reading and decoding, not their sum.
    fn vec<P: Point>(&mut self, section: &'static str) -> Result<Vec<P>, SrsError> {
        let n = self.len(section)?;
        let start = self.offset;
        let total = n.saturating_mul(P::LEN);
        self.fits(section, total)?;
        let mut out = Vec::with_capacity(n);
        let per_chunk = (CHUNK_BYTES / P::LEN).max(1);
        let (checked, path, file) = (self.checked, self.path, self.file);
        std::thread::scope(|s| {
            // One chunk read ahead; buffers come back to the reader for reuse.
            let (full, filled) = std::sync::mpsc::sync_channel::<Result<(usize, Vec<u8>), SrsError>>(1);
            let (give_back, free) = std::sync::mpsc::channel::<Vec<u8>>();
            s.spawn(move || {
                for first in (0..n).step_by(per_chunk) {
                    let mut buf = free.try_recv().unwrap_or_default();
                    buf.resize(per_chunk.min(n - first) * P::LEN, 0);
                    let read = read_at(path, file, section, start + first * P::LEN, &mut buf).map(|()| (first, buf));
                    let failed = read.is_err();
                    // A closed channel: the decoder stopped at an invalid point.
                    if full.send(read).is_err() || failed {
                        return;
                    }
                }
            });
            for read in filled {
                let (first, buf) = read?;
                // Decoded straight into `out` on every core (`par_extend` of an
                // indexed iterator writes in place): a collected chunk appended
                // afterwards was a copy and the first touch of its pages on one
                // thread, a third of the load's time. The first invalid point is kept
                // aside and its slot filled with the generator; the chunk then fails.
                let bad = std::sync::Mutex::new(None::<(usize, &'static str)>);
                out.par_extend(buf.par_chunks_exact(P::LEN).enumerate().map(|(i, b)| {
                    P::decode(b, checked).unwrap_or_else(|reason| {
                        let mut bad = bad.lock().unwrap_or_else(|e| e.into_inner());
                        if bad.is_none_or(|(j, _)| i < j) {
                            *bad = Some((i, reason));
                        }
                        P::filler()
                    })
                }));
                if let Some((i, reason)) = bad.into_inner().unwrap_or_else(|e| e.into_inner()) {
                    return Err(SrsError::InvalidPoint {
                        path: path.to_path_buf(),
                        section,
                        index: first + i,
                        offset: start + (first + i) * P::LEN,
                        reason,
                    });
                }
                let _ = give_back.send(buf);
            }
            Ok::<(), SrsError>(())
        })?;
        self.offset = start + total;
        Ok(out)
    }
}

/// Reads `buf.len()` bytes of `section` at `offset`; the error names the file.
fn read_at(path: &Path, file: &File, section: &'static str, offset: usize, buf: &mut [u8]) -> Result<(), SrsError> {
    file.read_exact_at(buf, offset as u64).map_err(|e| SrsError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            e.kind(),
            format!("section `{section}` at offset {offset}: {e} (file changed while loading?)"),
        ),
    })
}

/// What a parameter file says before its points: the verifying key and the length of
/// each point vector. Read in a fraction of a second (the vectors are skipped by their
/// lengths), so a circuit's recording can start while its points load.
#[derive(Clone)]
pub struct KeyHeader {
    pub vk: VerifyingKey<Bls12>,
    /// Lengths of `h`, `l`, `a`, `b_g1` and `b_g2`, in file order.
    pub lens: [usize; 5],
}

impl KeyHeader {
    /// Number of inputs, including `ONE` (as [`ProvingKey::num_inputs`]).
    pub fn num_inputs(&self) -> usize {
        self.vk.ic.len()
    }

    /// Aux variables (the L points).
    pub fn aux(&self) -> usize {
        self.lens[1]
    }

    /// The evaluation domain (as [`ProvingKey::domain_size`]).
    pub fn domain_size(&self) -> usize {
        self.lens[0] + 1
    }
}

impl ProvingKey {
    /// This key's [`KeyHeader`], as its file would give it.
    pub fn header(&self) -> KeyHeader {
        KeyHeader {
            vk: self.vk.clone(),
            lens: [self.h.len(), self.l.len(), self.a.len(), self.b_g1.len(), self.b_g2.len()],
        }
    }
}

pub(crate) fn read_header(path: &Path) -> Result<KeyHeader, SrsError> {
    let io = |source| SrsError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let file_len = usize::try_from(file.metadata().map_err(io)?.len()).unwrap_or(usize::MAX);
    let mut r = Reader { path, file: &file, file_len, offset: 0, checked: false, buf: Vec::new() };
    let vk = r.vk()?;
    let mut lens = [0; 5];
    for (i, (section, size)) in
        [("h", G1_LEN), ("l", G1_LEN), ("a", G1_LEN), ("b_g1", G1_LEN), ("b_g2", G2_LEN)].into_iter().enumerate()
    {
        let n = r.len(section)?;
        let bytes = n.saturating_mul(size);
        r.fits(section, bytes)?;
        r.offset += bytes;
        lens[i] = n;
    }
    if r.offset != file_len {
        return Err(SrsError::TrailingBytes { path: path.to_path_buf(), offset: r.offset, extra: file_len - r.offset });
    }
    Ok(KeyHeader { vk, lens })
}

pub(crate) fn load(path: &Path, opts: LoadOptions) -> Result<ProvingKey, SrsError> {
    let io = |source| SrsError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let file_len = usize::try_from(file.metadata().map_err(io)?.len()).unwrap_or(usize::MAX);
    let mut r = Reader { path, file: &file, file_len, offset: 0, checked: opts.subgroup_checks, buf: Vec::new() };
    let vk = r.vk()?;
    let h = r.vec("h")?;
    let l = r.vec("l")?;
    let a = r.vec("a")?;
    let b_g1 = r.vec("b_g1")?;
    let b_g2 = r.vec("b_g2")?;
    if r.offset != file_len {
        return Err(SrsError::TrailingBytes { path: path.to_path_buf(), offset: r.offset, extra: file_len - r.offset });
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
