//! The `cuzk` binary end to end: srs gen, prove --verify, bench, and its errors.

use std::process::Command;

fn cuzk() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cuzk"));
    c.env("RUST_LOG", "warn");
    c
}

fn run(c: &mut Command) -> (bool, String, String) {
    let o = c.output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn gen_prove_verify_bench() {
    let dir = tempfile::tempdir().unwrap();
    let params = dir.path().join("p.params");
    let (ok, _, err) = run(cuzk()
        .args(["srs", "gen", "--constraints", "500", "--public-inputs", "3", "--seed", "1", "--out"])
        .arg(&params));
    assert!(ok, "{err}");
    let (ok, out, err) = run(cuzk().args(["srs", "info"]).arg(&params));
    assert!(ok && out.contains("inputs 4") && out.contains("2^9"), "{out}{err}");

    let proofs = dir.path().join("proofs.bin");
    let prove = |extra: &[&str]| {
        let mut c = cuzk();
        c.args([
            "prove",
            "--constraints",
            "500",
            "--public-inputs",
            "3",
            "--count",
            "3",
            "--seed",
            "5",
            "--verify",
            "--params",
        ])
        .arg(&params)
        .args(extra);
        c
    };
    let (ok, out, err) = run(&mut prove(&["--out", proofs.to_str().unwrap()]));
    assert!(ok, "{out}{err}");
    assert!(out.contains("verified 3/3"), "{out}");
    let first = std::fs::read(&proofs).unwrap();
    assert_eq!(first.len(), 3 * 192);
    // --seed makes the proofs deterministic.
    let (ok, _, _) = run(&mut prove(&["--out", proofs.to_str().unwrap()]));
    assert!(ok);
    assert_eq!(std::fs::read(&proofs).unwrap(), first);

    // Parameters for another circuit: clear error, non-zero exit.
    let (ok, out, err) = run(cuzk()
        .args(["prove", "--constraints", "900", "--public-inputs", "3", "--verify", "--params"])
        .arg(&params));
    assert!(!ok);
    assert!(err.contains("parameters do not match the circuit"), "{out}{err}");

    // bench with a config file pointing the cache into the temp dir.
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, format!("[srs]\ncache_dir = {:?}\n[bench]\nlog2 = 8\ncount = 4\n", dir.path().join("cache")))
        .unwrap();
    let (ok, out, err) = run(cuzk().arg("--config").arg(&cfg).arg("bench"));
    assert!(ok, "{out}{err}");
    assert!(out.contains("bottleneck:") && out.contains("4 verified"), "{out}");
    assert!(out.contains("prove_gpu") && out.contains("msm_h"), "{out}");
}

#[test]
fn errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[budget]\nhost_memory = -1\n").unwrap();
    let (ok, _, err) = run(cuzk().arg("--config").arg(&cfg).arg("bench"));
    assert!(!ok && err.contains("bad.toml") && err.contains("negative"), "{err}");
    let (ok, _, err) = run(cuzk().args(["prove", "--synthetic", "8", "--params", "/nonexistent.params"]));
    assert!(!ok && err.contains("/nonexistent.params"), "{err}");
    let (ok, _, err) = run(cuzk().args(["srs", "info", "/nonexistent.params"]));
    assert!(!ok && err.matches("No such file").count() == 1, "the cause is said once: {err}");
    let junk = dir.path().join("junk.params");
    std::fs::write(&junk, b"not parameters").unwrap();
    let (ok, _, err) = run(cuzk().args(["srs", "info"]).arg(&junk));
    assert!(!ok && err.contains("truncated"), "{err}");
    let (ok, _, err) =
        run(cuzk().args(["srs", "gen", "--constraints", "2", "--public-inputs", "5", "--out", "/tmp/x"]));
    assert!(!ok && err.contains("too small"), "{err}");
}

/// `cuzk size` sizes a sector size's circuit from its shape (the 2KiB circuit here:
/// 2,687,961 constraints with its inputs, domain 2^22), and exits 1 naming the budget it
/// exceeds and by how much.
#[test]
fn size_answers_and_names_the_budget_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |host: &str| {
        let p = dir.path().join(format!("{host}.toml"));
        std::fs::write(&p, format!("[backend]\nkind = \"cpu\"\n[budget]\nhost_memory = \"{host}\"\n")).unwrap();
        p
    };
    let (ok, out, err) = run(cuzk().arg("--config").arg(cfg("8GiB")).args(["size", "--sector-size", "2KiB"]));
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("StackedDrg2KiBV1_1") && out.contains("2687961 constraints (domain 2^22), 40 inputs"),
        "{out}"
    );
    assert!(out.contains("host budget: 8.00 GiB") && out.trim_end().ends_with("fits"), "{out}");
    let (ok, out, err) = run(cuzk().arg("--config").arg(cfg("100MiB")).args(["size", "--sector-size", "2KiB"]));
    assert!(!ok, "{out}{err}");
    assert!(out.contains("does not fit the host budget") && out.contains("100.00 MiB by"), "{out}");
    let (ok, _, err) = run(cuzk().args(["size", "--sector-size", "3GiB"]));
    assert!(!ok && err.contains("not a Filecoin sector size"), "{err}");
}

/// `cuzk size --gpus N --vram … --host-memory … --cores …` sizes a GPU host that is
/// not this one (no GPU here): one line per planned device, the host budget shared.
#[test]
fn size_answers_for_a_planned_two_gpu_host() {
    let planned = ["size", "--sector-size", "2KiB", "--gpus", "2", "--vram", "141GB", "--host-memory", "256GiB"];
    let (ok, out, err) = run(cuzk().args(planned).args(["--cores", "32"]));
    assert!(ok, "{out}{err}");
    assert!(out.contains("planned host: 2 GPU(s) of 131.32 GiB, 256.00 GiB, 32 cores"), "{out}");
    assert!(out.contains("backend: cuda (2 device(s))"), "{out}");
    assert!(out.contains("device 0: VRAM budget") && out.contains("device 1: VRAM budget"), "{out}");
    assert!(out.contains("synthesizing per device: the 2 devices share"), "{out}");
    let (ok, _, err) = run(cuzk().args(["size", "--sector-size", "2KiB", "--gpus", "2"]));
    assert!(!ok && err.contains("--vram"), "{err}");
    let (ok, _, err) =
        run(cuzk().args(["size", "--sector-size", "2KiB", "--gpus", "1", "--vram", "80GiB", "--host-memory", "3GiB"]));
    assert!(!ok && err.contains("leaves nothing after budget.host_safety_margin"), "{err}");
}

/// `bench kernels --on cpu`: the H-MSM as one call and in chunks, every sum checked
/// against the timing points' discrete logarithms, and the NTT; bad flags refused.
#[test]
fn bench_kernels_times_and_checks_the_msm_on_the_cpu() {
    let (ok, out, err) =
        run(cuzk().args(["bench", "kernels", "--on", "cpu", "--log2", "11", "--chunk-log2", "9", "--reps", "2"]));
    assert!(ok, "{out}{err}");
    assert!(out.contains("kernels on the CPU, 2 repetitions each"), "{out}");
    let row = |name: &str| {
        out.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("no {name} row: {out}")).to_string()
    };
    assert!(row("msm_h one call").ends_with("ok"), "{out}");
    let chunks = row("msm_h chunks of 2^9");
    assert!(chunks.ends_with("ok") && chunks.split_whitespace().nth(5) == Some("4"), "2047 points in 4 calls: {out}");
    assert!(row("ntt forward").starts_with("  11"), "{out}");
    let (ok, _, err) = run(cuzk().args(["bench", "kernels", "--on", "cpu", "--log2", "40"]));
    assert!(!ok && err.contains("log2 40 is outside 1..=32"), "{err}");
    // 2^32 points take ~1 TiB of host memory: refused with the figure, not aborted.
    let (ok, _, err) = run(cuzk().args(["bench", "kernels", "--on", "cpu", "--log2", "11,32"]));
    assert!(!ok && err.contains("log2 32 needs ~") && err.contains("GiB is available"), "{err}");
    let (ok, _, err) = run(cuzk().args(["bench", "kernels", "--on", "cpu", "--reps", "0"]));
    assert!(!ok && err.contains("--reps must be at least 1"), "{err}");
    let (ok, _, err) = run(cuzk().args(["bench", "kernels", "--on", "cpu", "--groups", "3"]));
    assert!(!ok && err.contains("--groups sets the device MSM's windows per launch"), "{err}");
    let (ok, _, err) = run(cuzk().args(["bench", "kernels", "--on", "cpu", "--rounds", "4"]));
    assert!(!ok && err.contains("--rounds sets the device MSM's buckets per launch"), "{err}");
}

/// `prove --grid-synth … --grid-jobs …` (the budget grid, docs/benchmarks.md): every
/// setting of synthesis workers × jobs in flight runs on one engine per worker count,
/// synthesizes no more partitions at once than its worker count, and after each
/// window's cancel every stage drains and every reservation returns to the budget
/// (2KiB shape-only C1 against timing parameters, CPU backend).
#[test]
fn budget_grid_runs_every_setting_and_returns_every_reservation() {
    let dir = tempfile::tempdir().unwrap();
    let c1 = dir.path().join("c1");
    let (ok, out, err) =
        run(cuzk().args(["gen-c1", "--shape-only", "--sector-size", "2KiB", "--seed", "1", "--out"]).arg(&c1));
    assert!(ok, "{out}{err}");
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(c1.join("meta.json")).unwrap()).unwrap();
    let sector_id = meta["sector_id"].to_string();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[backend]\nkind = \"cpu\"\n[ingest]\nparam_cache = {:?}\n[synthesize]\nrecording_dir = {:?}\n",
            dir.path().join("params"),
            dir.path().join("rec")
        ),
    )
    .unwrap();
    let (ok, out, err) = run(cuzk()
        .arg("--config")
        .arg(&cfg)
        .args(["prove", "--c1"])
        .arg(c1.join("c1.json"))
        .args(["--prover-id", meta["prover_id"].as_str().unwrap(), "--sector-id", sector_id.as_str()])
        .args(["--timing-params", "--seed", "1", "--grid-synth", "1,2", "--grid-jobs", "1,2", "--grid-window", "1"]));
    assert!(ok, "{out}{err}");
    assert!(out.contains("budget grid: every setting within its budget, nothing failed"), "{out}");
    for s in [1u64, 2] {
        for j in [1, 2] {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("synth {s:>2} jobs {j}:")))
                .unwrap_or_else(|| panic!("no line for synth {s} jobs {j}: {out}"));
            let at_once: u64 = line
                .split("synthesizing at once max ")
                .nth(1)
                .and_then(|r| r.split(';').next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            assert!(at_once <= s, "{line}");
            assert!(line.contains("drained in") && !line.contains("FAILED"), "{line}");
        }
    }
    // Counts of zero are refused with a clear error.
    let (ok, _, err) = run(cuzk()
        .args(["prove", "--c1"])
        .arg(c1.join("c1.json"))
        .args(["--prover-id", meta["prover_id"].as_str().unwrap(), "--sector-id", "1"])
        .args(["--timing-params", "--grid-synth", "0", "--grid-jobs", "1"]));
    assert!(!ok && err.contains("--grid-synth and --grid-jobs take counts of at least 1"), "{err}");
}

/// `srs gen --synthetic K --timing`: TEST-ONLY timing parameters for a synthetic
/// circuit (what the 2^27 comparison with supraseal-c2 runs on). cuzk and bellperson
/// given the same file, circuits and randomness write the same proof bytes, none of
/// which verifies; an existing file is never replaced.
#[test]
fn synthetic_timing_parameters_give_both_provers_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let params = dir.path().join("t.params");
    let gen = || {
        let mut c = cuzk();
        c.args(["srs", "gen", "--synthetic", "9", "--b-density", "0.25", "--timing", "--seed", "3", "--out"])
            .arg(&params);
        c
    };
    let (ok, out, err) = run(&mut gen());
    assert!(ok, "{out}{err}");
    assert!(out.contains("TIMING PARAMETERS") && out.contains("domain 2^9"), "{out}");
    let (ok, _, err) = run(&mut gen());
    assert!(!ok && err.contains("never replace"), "{err}");

    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[backend]\nkind = \"cpu\"\n[verify]\nenabled = false\n").unwrap();
    let bench = |prover: &str| {
        let json = dir.path().join(format!("{prover}.json"));
        let (_, out, err) = run(cuzk()
            .arg("--config")
            .arg(&cfg)
            .args(["bench", "--log2", "9", "--count", "2", "--b-density", "0.25", "--seed", "1", "--prover", prover])
            .arg("--params")
            .arg(&params)
            .arg("--json")
            .arg(&json));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{prover}: no result ({e}): {out}{err}"));
        assert_eq!(v["verified"], 0, "timing parameters never verify: {out}");
        v["proofs_digest"].as_str().unwrap().to_string()
    };
    assert_eq!(bench("cuzk"), bench("bellperson"), "same parameters, circuits and r, s: same bytes");
}
