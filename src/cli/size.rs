//! `cuzk size`: what a sector size's PoRep circuit needs of a host, as the engine
//! will reserve it (`cuzk_actors::sizing`): this host with the backend it would use,
//! or with `--gpus` a GPU host being planned (e.g. the 2× row before renting one).

use std::{process::ExitCode, time::Instant};

use anyhow::Result;
use clap::Args;
use cuzk::{
    actors::{sizing::Target, ByteSize},
    config::Config,
};

#[derive(Args)]
pub struct SizeArgs {
    /// Sector size ("32GiB", "64GiB", ...): its latest interactive PoRep proof.
    #[arg(long, value_name = "SIZE")]
    sector_size: String,
    /// Size a planned host with this many GPUs instead of this one (no GPU needed
    /// here); with --vram and, optionally, --host-memory and --cores.
    #[arg(long, value_name = "N", requires = "vram")]
    gpus: Option<usize>,
    /// Each planned GPU's memory ("141GB", "80GiB"); the device budget is this
    /// less backend.vram_margin.
    #[arg(long, value_name = "SIZE", requires = "gpus")]
    vram: Option<ByteSize>,
    /// The planned host's RAM ("256GiB"; default: this machine's); an "auto"
    /// budget.host_memory is taken from it as the engine would.
    #[arg(long, value_name = "SIZE", requires = "gpus")]
    host_memory: Option<ByteSize>,
    /// The planned host's cores (default: this machine's): the synthesis workers
    /// when synthesize.max_concurrency is 0.
    #[arg(long, value_name = "N", requires = "gpus")]
    cores: Option<usize>,
}

/// Prints the sizing; exits 1, with the budget exceeded and by how much, when the
/// circuit does not fit the host.
pub fn run(cfg: &Config, a: SizeArgs) -> Result<ExitCode> {
    use cuzk::filecoin as fil;
    let proof = fil::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?;
    // Checked before the minute the shape takes at 32GiB.
    let target = match (a.gpus, a.vram) {
        (Some(n), Some(v)) => Target::planned(&cfg.engine, n, v.0, a.host_memory.map(|b| b.0), a.cores),
        _ => Target::this_host(&cuzk::actors::services::select_backend(&cfg.engine.backend)?, &cfg.engine),
    }
    .map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    // The blank circuit's shape: no witness, no parameters (a minute at 32GiB).
    let (shape, nonzeros) = cuzk::synth::shape_and_nonzeros(fil::blank_circuit(proof)?)?;
    let shape_s = t.elapsed().as_secs_f64();
    let sizing = cuzk::actors::sizing::size(&shape, nonzeros, usize::from(proof.partitions()), &cfg.engine, &target);
    println!("{proof:?} (shape in {shape_s:.1} s)");
    println!("{sizing}");
    Ok(if sizing.check().is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
