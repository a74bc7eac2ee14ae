//! `cuzk size`: what a sector size's PoRep circuit needs of this host, as the engine
//! will reserve it (`cuzk_actors::sizing`), with the backend this host would use.

use std::{process::ExitCode, time::Instant};

use anyhow::Result;
use clap::Args;
use cuzk::config::Config;

#[derive(Args)]
pub struct SizeArgs {
    /// Sector size ("32GiB", "64GiB", ...): its latest interactive PoRep proof.
    #[arg(long, value_name = "SIZE")]
    sector_size: String,
}

/// Prints the sizing; exits 1, with the budget exceeded and by how much, when the
/// circuit does not fit this host.
pub fn run(cfg: &Config, a: SizeArgs) -> Result<ExitCode> {
    use cuzk::filecoin as fil;
    let proof = fil::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    // The blank circuit's shape: no witness, no parameters (a minute at 32GiB).
    let (shape, nonzeros) = cuzk::synth::shape_and_nonzeros(fil::blank_circuit(proof)?)?;
    let shape_s = t.elapsed().as_secs_f64();
    let selected = cuzk::actors::services::select_backend(&cfg.engine.backend)?;
    let sizing = cuzk::actors::sizing::size(&shape, nonzeros, usize::from(proof.partitions()), &cfg.engine, &selected)
        .map_err(anyhow::Error::msg)?;
    println!("{proof:?} (shape in {shape_s:.1} s)");
    println!("{sizing}");
    Ok(if sizing.check().is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
