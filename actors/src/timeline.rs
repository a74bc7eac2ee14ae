//! The pipeline's timeline: what each stage worker did when, for one look at a run in
//! Perfetto / `chrome://tracing` (Chrome trace JSON) or as a per-stage utilization plot.
//!
//! Recording is off unless `[timeline] enabled` (or `cuzk bench --trace`); when on,
//! each stage worker adds one span per item it processes (job, partition, worker,
//! start, duration) plus the backend operations it timed inside that span (NTT, MSMs,
//! copies), and the tracker adds one span per job from submission to its result. The
//! buffer is bounded (`max_events`): the oldest events are dropped first and counted.

use std::{
    collections::VecDeque,
    fmt::Write as _,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Mutex,
    },
    time::{Duration, Instant},
};

use crate::ground::StageName;

/// What a span shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A stage worker processing one item.
    Busy,
    /// A backend operation inside a stage's busy span (durations measured; laid out
    /// one after another in the order the stage reported them).
    Op(&'static str),
    /// Time a stage worker spent inside its processing blocked on backpressure from
    /// downstream (`WorkItem::blocked`), apart from its busy span: laid out right
    /// after it, since only its length is measured. Not counted as utilization.
    Blocked,
    /// A job from submission to its terminal result; `ok` false for failed/cancelled.
    Job { ok: bool },
}

/// One recorded span, times relative to the engine's start.
#[derive(Clone, Debug)]
pub struct Span {
    pub kind: SpanKind,
    /// None for job spans.
    pub stage: Option<StageName>,
    pub worker: u32,
    pub job: u64,
    pub partition: u32,
    pub start: Duration,
    pub dur: Duration,
}

/// A bounded, thread-safe span recorder shared by every stage of one engine.
pub struct Timeline {
    epoch: Instant,
    enabled: AtomicBool,
    max_events: usize,
    events: Mutex<VecDeque<Span>>,
    dropped: AtomicU64,
}

impl Timeline {
    pub fn new(epoch: Instant, enabled: bool, max_events: usize) -> Self {
        Timeline {
            epoch,
            enabled: AtomicBool::new(enabled),
            max_events: max_events.max(1),
            events: Mutex::new(VecDeque::new()),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Starts or stops recording (recorded spans are kept).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Relaxed);
    }

    /// Spans dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    fn push(&self, spans: impl IntoIterator<Item = Span>) {
        let mut q = self.events.lock().unwrap_or_else(|e| e.into_inner());
        for s in spans {
            if q.len() == self.max_events {
                q.pop_front();
                self.dropped.fetch_add(1, Relaxed);
            }
            q.push_back(s);
        }
    }

    /// Records a stage worker's busy span, the operations timed inside it, and the
    /// time it was blocked on backpressure (when any) as a span of its own after it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_stage(
        &self,
        stage: StageName,
        worker: usize,
        job: u64,
        partition: u32,
        started: Instant,
        busy: Duration,
        blocked: Duration,
        ops: &[(&'static str, Duration)],
    ) {
        if !self.is_enabled() {
            return;
        }
        let start = started.saturating_duration_since(self.epoch);
        let worker = u32::try_from(worker).unwrap_or(u32::MAX);
        let span = |kind, start, dur| Span { kind, stage: Some(stage), worker, job, partition, start, dur };
        let mut at = start;
        let ops = ops.iter().filter(|(_, d)| !d.is_zero()).map(|&(name, d)| {
            let s = span(SpanKind::Op(name), at, d);
            at += d;
            s
        });
        let blocked = (!blocked.is_zero()).then(|| span(SpanKind::Blocked, start + busy, blocked));
        self.push(std::iter::once(span(SpanKind::Busy, start, busy)).chain(ops.collect::<Vec<_>>()).chain(blocked));
    }

    /// Records a job from submission to its terminal result.
    pub(crate) fn record_job(&self, job: u64, submitted: Instant, ok: bool) {
        if !self.is_enabled() {
            return;
        }
        let start = submitted.saturating_duration_since(self.epoch);
        let dur = submitted.elapsed();
        self.push([Span { kind: SpanKind::Job { ok }, stage: None, worker: 0, job, partition: 0, start, dur }]);
    }

    /// A copy of the recorded spans, oldest first.
    pub fn spans(&self) -> Vec<Span> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Forgets the recorded spans.
    pub fn clear(&self) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The recorded spans as Chrome trace JSON (Perfetto, `chrome://tracing`): one
    /// process per stage, one thread per worker; jobs as async spans on process 0.
    pub fn chrome_trace(&self) -> String {
        chrome_trace(&self.spans(), self.dropped())
    }

    /// Busy fraction per stage over `buckets` equal intervals covering the recorded
    /// spans: `(interval length, [(stage, workers seen, [fraction per bucket])])`,
    /// where 1.0 means every worker seen for that stage was busy the whole interval.
    pub fn utilization(&self, buckets: usize) -> Utilization {
        utilization(&self.spans(), buckets)
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn chrome_trace(spans: &[Span], dropped: u64) -> String {
    let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":");
    let _ = write!(out, "{dropped}}},\"traceEvents\":[");
    let mut first = true;
    let mut event = |out: &mut String, body: std::fmt::Arguments| {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = out.write_fmt(body);
        out.push('\n');
    };
    event(
        &mut out,
        format_args!("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{{\"name\":\"jobs\"}}}}"),
    );
    for s in StageName::ALL {
        let pid = s.index() + 1;
        event(
            &mut out,
            format_args!("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{s}\"}}}}"),
        );
        event(
            &mut out,
            format_args!(
                "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"sort_index\":{pid}}}}}"
            ),
        );
    }
    for s in spans {
        let (ts, dur) = (us(s.start), us(s.dur));
        match (&s.kind, s.stage) {
            (SpanKind::Job { ok }, _) => {
                let (name, id) = (format!("job {}", s.job), s.job);
                event(
                    &mut out,
                    format_args!(
                        "{{\"name\":\"{name}\",\"cat\":\"job\",\"ph\":\"b\",\"id\":{id},\"pid\":0,\"tid\":0,\"ts\":{ts:.3},\"args\":{{\"ok\":{ok}}}}}"
                    ),
                );
                let end = ts + dur;
                event(
                    &mut out,
                    format_args!(
                        "{{\"name\":\"{name}\",\"cat\":\"job\",\"ph\":\"e\",\"id\":{id},\"pid\":0,\"tid\":0,\"ts\":{end:.3}}}"
                    ),
                );
            }
            (kind, Some(stage)) => {
                let (pid, tid) = (stage.index() + 1, s.worker);
                let (name, cat) = match kind {
                    SpanKind::Op(op) => ((*op).to_string(), "op"),
                    SpanKind::Blocked => (format!("blocked: job {} p{}", s.job, s.partition), "blocked"),
                    _ => (format!("job {} p{}", s.job, s.partition), "busy"),
                };
                event(
                    &mut out,
                    format_args!(
                        "{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{\"job\":{},\"partition\":{}}}}}",
                        s.job, s.partition
                    ),
                );
            }
            (_, None) => {}
        }
    }
    out.push_str("]}\n");
    out
}

/// Per-stage busy fractions over time (see [`Timeline::utilization`]).
#[derive(Clone, Debug, Default)]
pub struct Utilization {
    pub start: Duration,
    pub bucket: Duration,
    pub stages: Vec<(StageName, usize, Vec<f64>)>,
}

fn utilization(spans: &[Span], buckets: usize) -> Utilization {
    let busy: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Busy && s.stage.is_some()).collect();
    let (Some(t0), Some(t1)) = (busy.iter().map(|s| s.start).min(), busy.iter().map(|s| s.start + s.dur).max()) else {
        return Utilization::default();
    };
    let buckets = buckets.max(1);
    // Rounded up, so that `buckets` intervals cover the last span's end.
    let n = u32::try_from(buckets).unwrap_or(u32::MAX);
    let bucket = Duration::from_nanos(((t1 - t0).as_nanos() as u64).div_ceil(u64::from(n)).max(1_000));
    let mut stages = Vec::new();
    for stage in StageName::ALL {
        let mine: Vec<&&Span> = busy.iter().filter(|s| s.stage == Some(stage)).collect();
        if mine.is_empty() {
            continue;
        }
        let workers = mine.iter().map(|s| s.worker).collect::<std::collections::BTreeSet<_>>().len();
        let mut frac = vec![0.0; buckets];
        for s in mine {
            let (a, b) = (s.start - t0, s.start + s.dur - t0);
            let first = (a.as_nanos() / bucket.as_nanos()) as usize;
            let last = ((b.as_nanos() / bucket.as_nanos()) as usize).min(buckets - 1);
            for (i, f) in frac.iter_mut().enumerate().take(last + 1).skip(first) {
                let lo = bucket * u32::try_from(i).unwrap_or(u32::MAX);
                let hi = lo + bucket;
                let overlap = b.min(hi).saturating_sub(a.max(lo));
                *f += overlap.as_secs_f64() / bucket.as_secs_f64() / workers as f64;
            }
        }
        stages.push((stage, workers, frac));
    }
    Utilization { start: t0, bucket, stages }
}

/// An SVG line plot of per-stage utilization over time (no plotting dependency: the
/// figure is a few polylines).
pub fn utilization_svg(u: &Utilization) -> String {
    const W: f64 = 900.0;
    const H: f64 = 360.0;
    const L: f64 = 60.0;
    const B: f64 = 40.0;
    const COLORS: [&str; 7] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"];
    let (pw, ph) = (W - L - 170.0, H - B - 20.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{L}\" y=\"14\">cuzk stage utilization (busy workers / workers)</text>\n"
    );
    let n = u.stages.first().map_or(0, |(_, _, f)| f.len());
    let total = u.bucket.as_secs_f64() * n as f64;
    for i in 0..=4 {
        let y = 20.0 + ph * (1.0 - f64::from(i) / 4.0);
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}%</text>",
            L + pw,
            L - 6.0,
            y + 4.0,
            i * 25
        );
    }
    for i in 0..=5 {
        let x = L + pw * f64::from(i) / 5.0;
        let t = (u.start.as_secs_f64() + total * f64::from(i) / 5.0).max(0.0);
        let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t:.1}s</text>", 20.0 + ph + 16.0);
    }
    for (k, (stage, workers, frac)) in u.stages.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let pts: Vec<String> = frac
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let x = L + pw * (i as f64 + 0.5) / n.max(1) as f64;
                let y = 20.0 + ph * (1.0 - f.clamp(0.0, 1.0));
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{stage} ({workers})</text>",
            pts.join(" "),
            L + pw + 15.0,
            24.0 + 18.0 * k as f64,
            L + pw + 30.0,
            33.0 + 18.0 * k as f64
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_exported() {
        let t0 = Instant::now();
        let tl = Timeline::new(t0, true, 3);
        tl.record_stage(StageName::Synthesize, 0, 1, 0, t0, Duration::from_millis(10), Duration::ZERO, &[]);
        tl.record_stage(
            StageName::ProveGpu,
            1,
            1,
            0,
            t0 + Duration::from_millis(10),
            Duration::from_millis(10),
            Duration::ZERO,
            &[("ntt_h", Duration::from_millis(4)), ("msm_l", Duration::from_millis(6))],
        );
        // 4 spans into a buffer of 3: the oldest is dropped and counted.
        assert_eq!(tl.spans().len(), 3);
        assert_eq!(tl.dropped(), 1);
        let json: serde_json::Value = serde_json::from_str(&tl.chrome_trace()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let x: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 3);
        let msm = x.iter().find(|e| e["name"] == "msm_l").unwrap();
        assert_eq!(msm["ts"].as_f64().unwrap(), 14_000.0, "ops laid out after each other inside the busy span");
        assert_eq!(msm["dur"].as_f64().unwrap(), 6_000.0);
        assert_eq!(msm["pid"].as_u64().unwrap(), StageName::ProveGpu.index() as u64 + 1);
        tl.set_enabled(false);
        tl.record_job(1, t0, true);
        assert_eq!(tl.spans().len(), 3, "nothing recorded while disabled");
    }

    #[test]
    fn utilization_per_bucket() {
        let t0 = Instant::now();
        let tl = Timeline::new(t0, true, 100);
        // Worker 0 busy for the whole 0..10 ms, worker 1 for the first half.
        tl.record_stage(StageName::Synthesize, 0, 1, 0, t0, Duration::from_millis(10), Duration::ZERO, &[]);
        // Worker 1's 5 ms blocked after its busy half are not utilization.
        let blocked = Duration::from_millis(5);
        tl.record_stage(StageName::Synthesize, 1, 2, 0, t0, Duration::from_millis(5), blocked, &[]);
        let spans = tl.spans();
        let b = spans.iter().find(|s| s.kind == SpanKind::Blocked).expect("a blocked span");
        assert_eq!((b.start, b.dur, b.worker), (Duration::from_millis(5), blocked, 1), "after the busy span");
        assert!(tl.chrome_trace().contains("\"cat\":\"blocked\""));
        let u = tl.utilization(2);
        let (stage, workers, frac) = &u.stages[0];
        assert_eq!((*stage, *workers), (StageName::Synthesize, 2));
        assert!((frac[0] - 1.0).abs() < 1e-9 && (frac[1] - 0.5).abs() < 1e-9, "{frac:?}");
        assert!(utilization_svg(&u).contains("<polyline"));
    }
}
