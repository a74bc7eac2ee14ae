//! `cuzk gen-c1`: seals random data with filecoin-proofs and writes its C1 output
//! (plain and in the Lotus/Curio wrapper) with a meta.json, for tests and benchmarks.

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
}

/// A C1 output for tests and benchmarks: seals random data with filecoin-proofs.
pub fn run(a: GenC1Args) -> Result<ExitCode> {
    use cuzk::filecoin as fil;
    let proof = match a.registered_proof {
        Some(n) => fil::proof_from_number(n).with_context(|| format!("--registered-proof {n}: not a seal proof"))?,
        None => fil::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let pb = progress(None, &format!("sealing a {} sector", a.sector_size));
    let t = Instant::now();
    let f = fil::generate_c1(proof, a.seed, &a.out.join("work"))?;
    pb.finish_and_clear();
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
    Ok(ExitCode::SUCCESS)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
