//! `cuzk gen-vanilla winning-post|window-post|snap-prove`: seals test sectors with
//! filecoin-proofs and writes the vanilla proofs a scheduler would send for each
//! proof kind, with the request's other fields, for tests and benchmarks.

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use cuzk::filecoin as fil;

use super::progress;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// WinningPoSt: one challenged sector's vanilla proof.
    WinningPost,
    /// WindowPoSt: every sector's vanilla proof, split per partition.
    WindowPost,
    /// SnapDeals: a committed-capacity sector filled with data; its partition proofs.
    SnapProve,
}

#[derive(Args)]
pub struct GenVanillaArgs {
    /// Which proof's vanilla proofs.
    kind: Kind,
    /// Sector size: 2KiB or 8MiB (larger ones work but take long).
    #[arg(long, default_value = "2KiB")]
    sector_size: String,
    /// WindowPoSt: sectors to seal (2KiB partitions hold 2 sectors each).
    #[arg(long, default_value_t = 3)]
    sectors: usize,
    /// Seed of the data, randomness and ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Seals, makes the vanilla proofs, writes `vanilla.json` (a JSON array of base64
/// proofs, as Curio stores them and Curio's `cuzk-bench --vanilla` reads them),
/// per-partition files for WindowPoSt, and `request.json` with the other fields of
/// the cuzk.v1 request (filecoin-ffi's proof numbering) and what verifying needs.
pub fn run(a: GenVanillaArgs) -> Result<ExitCode> {
    let seal = fil::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?;
    let size = u64::from(seal.sector_size());
    let i = [2048u64, 8 << 20, 512 << 20, 32 << 30, 64 << 30].iter().position(|&s| s == size).expect("a sector size");
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let work = a.out.join("work");
    let t = Instant::now();
    let pb = progress(None, &format!("sealing {} sector(s)", a.sector_size));
    let (files, request) = match a.kind {
        Kind::WinningPost | Kind::WindowPost => {
            let winning = a.kind == Kind::WinningPost;
            let number = if winning { i as u64 } else { 10 + i as u64 };
            let proof = fil::post_from_number(number).expect("0-4 and 10-14 are PoSt proofs");
            let f = fil::generate_post_vanilla(proof, if winning { 1 } else { a.sectors.max(1) }, a.seed, &work)?;
            let mut files = vec![("vanilla.json".to_string(), fil::vanilla_to_json(&f.vanilla_proofs))];
            if !winning {
                for (k, p) in f.partitions.iter().enumerate() {
                    files.push((format!("partition-{k}.json"), fil::vanilla_to_json(p)));
                }
            }
            let sectors = |s: &[(u64, [u8; 32])]| {
                s.iter().map(|(id, c)| serde_json::json!({"sector_id": id, "comm_r": hex(c)})).collect::<Vec<_>>()
            };
            let request = serde_json::json!({
                "proof_kind": if winning { "WINNING_POST" } else { "WINDOW_POST_PARTITION" },
                "registered_proof": number,
                "registered_proof_name": format!("{proof:?}"),
                "sector_size": size,
                "miner_id": f.miner_id,
                "prover_id": hex(&f.prover_id),
                "randomness": hex(&f.randomness),
                "partitions": f.partitions.len(),
                "sectors": sectors(&f.sectors),
                "challenged": sectors(&f.challenged),
            });
            (files, request)
        }
        Kind::SnapProve => {
            let proof = fil::update_from_number(i as u64).expect("0-4 are update proofs");
            let f = fil::generate_update_vanilla(proof, a.seed, &work)?;
            let files = vec![("vanilla.json".to_string(), fil::vanilla_to_json(&f.vanilla_proofs))];
            let request = serde_json::json!({
                "proof_kind": "SNAP_DEALS_UPDATE",
                "registered_proof": i,
                "registered_proof_name": format!("{proof:?}"),
                "sector_size": size,
                "miner_id": f.miner_id,
                "sector_number": f.sector_id,
                "comm_r_old": hex(&f.comm_r_old),
                "comm_r_new": hex(&f.comm_r_new),
                "comm_d_new": hex(&f.comm_d_new),
            });
            (files, request)
        }
    };
    pb.finish_and_clear();
    for (name, bytes) in &files {
        std::fs::write(a.out.join(name), bytes)?;
    }
    std::fs::write(a.out.join("request.json"), serde_json::to_vec_pretty(&request)?)?;
    let _ = std::fs::remove_dir_all(&work);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    println!(
        "{}: {}, request.json ({}) in {:.1} s",
        a.out.display(),
        names.join(", "),
        request["registered_proof_name"].as_str().unwrap_or(""),
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
