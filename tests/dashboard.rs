//! deploy/: the Grafana dashboard queries only series the daemon really exports, and
//! the example config is the one the systemd unit expects.
//!
//! A real daemon (CPU backend) proves one small circuit, its `/metrics` page is read
//! over HTTP, and every `cuzk_*` name in the dashboard's PromQL (panel `expr`s and
//! the template variables' queries) must be a series in that page. Series only a
//! CUDA backend exports (`cuzk_pinned_*`, `cuzk_device_*`) are checked against the
//! same renderer fed a snapshot that has a pinned pool and a device; `cuzk_gpu_*`
//! (read from NVML, absent without the NVIDIA driver) against the names
//! src/metrics.rs renders, when the scrape lacks them.

mod common;

use std::{
    collections::{BTreeSet, HashSet},
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use common::{cpu_daemon, params, spec};
use cuzk::{config::Config, JobSpec, SyntheticCircuit};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../deploy/grafana-dashboard.json");
const UNIT: &str = include_str!("../deploy/cuzk.service");
const DEPLOY_CONFIG: &str = include_str!("../deploy/config.toml");
const METRICS_SOURCE: &str = include_str!("../src/metrics.rs");

/// Every PromQL text in a dashboard: panel targets' `expr`, and template variables'
/// `definition` and `query` (a string, or an object holding one).
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition" | "query", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The `cuzk_[a-z0-9_]+` identifiers in a PromQL text (not parts of longer names).
fn metric_names(promql: &str) -> Vec<String> {
    let b = promql.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = promql[i..].find("cuzk_").map(|p| p + i) {
        let mut end = at + "cuzk_".len();
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_') {
            end += 1;
        }
        if (at == 0 || !ident(b[at - 1])) && (end == b.len() || !ident(b[end])) {
            out.push(promql[at..end].to_string());
        }
        i = end;
    }
    out
}

/// What a Prometheus text page exports: the sample names (a histogram `h` appears
/// as `h_bucket`, `h_sum` and `h_count`, a summary as `s`, `s_sum`, `s_count`) and
/// each family's type from its `# TYPE` line.
struct Exported {
    samples: HashSet<String>,
    types: Vec<(String, String)>,
}

fn exported(text: &str) -> Exported {
    let mut samples = HashSet::new();
    let mut types = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let mut it = t.split_whitespace();
            if let (Some(name), Some(kind)) = (it.next(), it.next()) {
                types.push((name.to_string(), kind.to_string()));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            samples.insert(line[..end].to_string());
        }
    }
    Exported { samples, types }
}

/// Whether a series named `name` is in `e`; if not, why.
fn check(name: &str, e: &Exported) -> Result<(), String> {
    if e.samples.contains(name) {
        return Ok(());
    }
    // A histogram's family name is no series; its samples carry a suffix.
    if let Some((_, kind)) = e.types.iter().find(|(n, _)| n == name) {
        return Err(format!("{name} is a {kind} family: query {name}_bucket, {name}_sum or {name}_count"));
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some((_, kind)) = e.types.iter().find(|(n, _)| n == base) {
                return Err(format!("{name}: the {kind} {base} exports no {suffix} series"));
            }
        }
    }
    Err(format!("{name}: no such series"))
}

/// The dashboard's names that are not exported: checked against the scrape, then
/// the CUDA-only families against `cuda`, then the NVML families (absent from
/// `scrape` on a host without the driver) against the names src/metrics.rs renders.
fn missing(dashboard: &str, scrape: &Exported, cuda: &Exported) -> BTreeSet<String> {
    let dash: Value = serde_json::from_str(dashboard).expect("deploy/grafana-dashboard.json is not valid JSON");
    let mut texts = Vec::new();
    queries(&dash, &mut texts);
    assert!(texts.len() > 20, "only {} queries found in the dashboard", texts.len());
    let names: BTreeSet<String> = texts.iter().flat_map(|q| metric_names(q)).collect();
    assert!(names.len() > 20, "only {} metric names found in the dashboard", names.len());
    names
        .into_iter()
        .filter_map(|n| {
            let r = check(&n, scrape).or_else(|e| {
                if n.starts_with("cuzk_pinned_") || n.starts_with("cuzk_device_") {
                    check(&n, cuda)
                } else if n.starts_with("cuzk_gpu_") && METRICS_SOURCE.contains(&format!("\"{n}\"")) {
                    // Read from NVML at each scrape: absent without the driver, and a
                    // field the device does not report is left out even with it.
                    Ok(())
                } else {
                    Err(e)
                }
            });
            r.err()
        })
        .collect()
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn dashboard_queries_only_exported_series() {
    let d = cpu_daemon();
    // One small proof, so that every stage has worked and every counter moved.
    let sp = spec(256, 1, 1.0, 1.0);
    let job = JobSpec::circuits(params(sp), vec![SyntheticCircuit::new(sp, 1).unwrap()]);
    d.engine().submit_blocking(job).unwrap().wait_blocking().unwrap();

    let text = scrape(d.metrics.unwrap());
    assert!(text.contains("cuzk_jobs_succeeded_total 1"), "{text}");
    // The job is timed under its kind; the other kinds and outcomes show at zero.
    assert!(text.contains("cuzk_job_duration_seconds_count{kind=\"circuits\",outcome=\"succeeded\"} 1"), "{text}");
    assert!(text.contains("cuzk_job_duration_seconds_bucket{kind=\"circuits\",outcome=\"succeeded\",le=\"+Inf\"} 1"));
    assert!(text.contains("cuzk_job_duration_seconds_count{kind=\"porep\",outcome=\"failed\"} 0"), "{text}");
    let live = exported(&text);
    // What a CUDA backend adds: the same renderer, given a pinned pool and a device.
    let mut snap = d.engine().snapshot_blocking();
    snap.pinned.get_or_insert_with(Default::default);
    if snap.devices.is_empty() {
        snap.devices.push(Default::default());
    }
    let cuda = exported(&cuzk::metrics::render(&snap));
    d.shutdown();

    let bad = missing(DASHBOARD, &live, &cuda);
    assert!(bad.is_empty(), "deploy/grafana-dashboard.json queries series the daemon does not export:\n{bad:#?}");

    // The check bites: a query naming a series nobody exports is reported, a
    // histogram named without its suffix too.
    let mut dash: Value = serde_json::from_str(DASHBOARD).unwrap();
    dash["panels"].as_array_mut().unwrap().push(serde_json::json!({
        "type": "timeseries",
        "targets": [{ "expr": "rate(cuzk_jobs_bogus_total[5m]) + cuzk_gpu_bogus_ratio", "refId": "A" }],
    }));
    let bad = missing(&dash.to_string(), &live, &cuda);
    let expected: BTreeSet<String> = ["cuzk_gpu_bogus_ratio", "cuzk_jobs_bogus_total"].map(String::from).into();
    assert_eq!(bad.iter().map(|e| e.split(':').next().unwrap().to_string()).collect::<BTreeSet<_>>(), expected);
    let hist = exported("# TYPE cuzk_job_seconds histogram\ncuzk_job_seconds_bucket{le=\"1\"} 0\ncuzk_job_seconds_sum 0\ncuzk_job_seconds_count 0\n");
    assert!(check("cuzk_job_seconds_bucket", &hist).is_ok());
    assert!(check("cuzk_job_seconds_count", &hist).is_ok());
    assert!(check("cuzk_job_seconds", &hist).unwrap_err().contains("histogram"));
    assert_eq!(metric_names("sum(rate(cuzk_a_total[5m])) / xcuzk_c + cuzk_d:rate5m"), ["cuzk_a_total"]);
}

#[test]
fn deploy_config_is_what_the_unit_expects() {
    let cfg = Config::parse(DEPLOY_CONFIG, "deploy/config.toml").unwrap();
    let key = |k: &str| -> Vec<&str> {
        UNIT.lines().filter_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('='))).collect()
    };
    // The socket lives in the unit's RuntimeDirectory.
    let runtime = key("RuntimeDirectory");
    assert_eq!(runtime, ["cuzk"]);
    assert_eq!(cfg.daemon.listen, "unix:///run/cuzk/cuzk.sock");
    assert!(key("ExecStart")[0].ends_with(" daemon --config /etc/cuzk/config.toml"), "{:?}", key("ExecStart"));
    assert_eq!(key("User"), ["cuzk"]);
    assert_eq!(key("Restart"), ["on-failure"]);
    assert_eq!(key("LimitMEMLOCK"), ["infinity"]);
    for k in ["NoNewPrivileges", "ProtectHome", "PrivateTmp"] {
        assert_eq!(key(k), ["yes"], "{k}");
    }
    assert_eq!(key("ProtectSystem"), ["strict"]);
    // The daemon can write its parameter cache (recordings) and /var/lib/cuzk, and the
    // cache is not under /var/tmp, which PrivateTmp replaces.
    let cache = cfg.engine.ingest.param_cache.to_str().unwrap().to_string();
    let rw: Vec<&str> = key("ReadWritePaths").iter().flat_map(|l| l.split_whitespace()).collect();
    assert!(rw.contains(&cache.as_str()) && rw.contains(&"/var/lib/cuzk"), "{rw:?} lacks {cache}");
    assert!(!cache.starts_with("/var/tmp") && !cache.starts_with("/tmp"), "{cache} is hidden by PrivateTmp");
    assert!(key("Environment").contains(&format!("FIL_PROOFS_PARAMETER_CACHE={cache}").as_str()));
    // systemd waits longer than the daemon's own drain before it kills it.
    let stop = key("TimeoutStopSec")[0].trim_end_matches('s').parse::<u64>().unwrap();
    assert!(stop > cfg.daemon.shutdown_timeout_secs + 10, "TimeoutStopSec {stop}");
    assert_eq!(cfg.daemon.metrics_listen, "127.0.0.1:9821");
}

/// deploy/cuzk.service passes `systemd-analyze verify` (the binary path swapped for
/// the one this build made), and asks for what the daemon speaks: `Type=notify`, a
/// watchdog, and a restart.
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "systemd units are Linux only")]
fn systemd_unit_verifies_and_uses_the_notify_protocol() {
    let unit = include_str!("../deploy/cuzk.service");
    for want in ["Type=notify", "NotifyAccess=main", "WatchdogSec=", "Restart=on-failure"] {
        assert!(unit.lines().any(|l| l.starts_with(want)), "deploy/cuzk.service lacks {want}");
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cuzk.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/cuzk", env!("CARGO_BIN_EXE_cuzk"))).unwrap();
    let out = std::process::Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap_or_else(|e| {
        panic!("systemd-analyze: {e}: install systemd (Debian: apt-get install systemd) to check the unit")
    });
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify deploy/cuzk.service:\n{said}");
    // verify exits 0 on some warnings: none may concern the unit itself.
    let ours: Vec<_> = said.lines().filter(|l| l.contains("cuzk.service")).collect();
    assert!(ours.is_empty(), "systemd-analyze verify deploy/cuzk.service:\n{}", ours.join("\n"));
}
