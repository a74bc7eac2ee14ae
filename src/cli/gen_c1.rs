//! `cuzk gen-c1`: seals random data with filecoin-proofs and writes its C1 output
//! (plain and in the Lotus/Curio wrapper) with a meta.json, for tests and benchmarks;
//! or, with `--shape-only`, a C1 of the real structure with fabricated values, made
//! in seconds at any size (its proofs never verify).

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::{Context, Result};
use clap::Args;

use super::progress;

#[derive(Args)]
pub struct GenC1Args {
    /// Sector size: 2KiB or 8MiB (larger ones work but take long).
    #[arg(long, default_value = "2KiB")]
    sector_size: String,
    /// Registered seal proof, Filecoin's numbering (e.g. 10 = 2KiB synthetic PoRep);
    /// overrides --sector-size (default: that size's v1.1 proof).
    #[arg(long)]
    registered_proof: Option<u64>,
    /// Seed of the data, ticket, seed and ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Test and benchmark input only: no sealing; a C1 with exactly the structure of
    /// a real one of that proof type (partitions, challenges, Merkle paths, columns,
    /// parents) and fabricated values, so its real circuits are synthesized and proved
    /// at full size (32GiB: seconds instead of hours of sealing). Proofs made from it
    /// NEVER verify: prove it with `[verify] enabled = false`.
    #[arg(long)]
    shape_only: bool,
}

/// A C1 output for tests and benchmarks: seals random data with filecoin-proofs.
pub fn run(a: GenC1Args) -> Result<ExitCode> {
    use cuzk::filecoin as fil;
    let proof = match a.registered_proof {
        Some(n) => fil::proof_from_number(n).with_context(|| format!("--registered-proof {n}: not a seal proof"))?,
        None => fil::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let t = Instant::now();
    let f = if a.shape_only {
        fil::shape_only_fixture(proof, a.seed)?
    } else {
        let pb = progress(None, &format!("sealing a {} sector", a.sector_size));
        let f = fil::generate_c1(proof, a.seed, &a.out.join("work"))?;
        pb.finish_and_clear();
        f
    };
    std::fs::write(a.out.join("c1.json"), &f.c1_json)?;
    std::fs::write(a.out.join("c1-wrapper.json"), &f.wrapper_json)?;
    let meta = serde_json::json!({
        "registered_proof": format!("{:?}", f.registered_proof),
        "prover_id": hex(&f.prover_id),
        "miner_id": f.miner_id,
        "sector_id": f.sector_id,
        "ticket": hex(&f.ticket),
        "seed": hex(&f.seed),
        "comm_r": hex(&f.comm_r),
        "comm_d": hex(&f.comm_d),
        // Read by tools: proofs of a shape-only C1 never verify.
        "shape_only": a.shape_only,
    });
    std::fs::write(a.out.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
    let _ = std::fs::remove_dir_all(a.out.join("work"));
    println!(
        "{}: c1.json, c1-wrapper.json, meta.json (prover id {}, sector {}) in {:.1} s",
        a.out.display(),
        hex(&f.prover_id),
        f.sector_id,
        t.elapsed().as_secs_f64()
    );
    if a.shape_only {
        println!(
            "SHAPE-ONLY C1 ({:?}, {:.1} MB): the real structure with fabricated values, for benchmarks; \
             proofs made from it never verify (prove with [verify] enabled = false)",
            f.registered_proof,
            f.c1_json.len() as f64 / 1e6
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
