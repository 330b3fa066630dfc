//! What a timed run measured, and how repetitions are summarised.
//!
//! Throughput is in MB/s of 10^6 bytes. Repetitions are summarised by their median (robust to
//! one run disturbed by a noisy neighbour) and their best (the least disturbed run).

use std::time::Duration;

use serde_json::{json, Value};

/// One timed run of one scenario.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Measurement {
    /// Bytes moved: frame bytes for fetch and loopback (what the sender put on the wire),
    /// record-batch bytes acknowledged for produce (what was appended to the log).
    pub(crate) bytes: u64,
    /// Fetch: bytes of whole batches (a fetch can end in a partial batch that the next fetch
    /// sends again). Otherwise equal to `bytes`.
    pub(crate) useful_bytes: u64,
    pub(crate) records: u64,
    pub(crate) requests: u64,
    pub(crate) elapsed: Duration,
    /// CPU time the server process used during the run (user, system), when the benchmark
    /// started the server itself.
    pub(crate) server_cpu: Option<(Duration, Duration)>,
}

impl Measurement {
    pub(crate) fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs() / 1e6
    }

    pub(crate) fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.secs()
    }

    /// Server CPU seconds per GB moved (user + system): the cost side of throughput, which
    /// sendfile should lower even when the wire is the limit.
    pub(crate) fn server_cpu_per_gb(&self) -> Option<(f64, f64)> {
        let gb = self.bytes as f64 / 1e9;
        self.server_cpu.map(|(user, system)| (user.as_secs_f64() / gb, system.as_secs_f64() / gb))
    }

    pub(crate) fn to_json(self) -> Value {
        json!({
            "bytes": self.bytes,
            "useful_bytes": self.useful_bytes,
            "records": self.records,
            "requests": self.requests,
            "seconds": self.secs(),
            "mb_per_sec": self.mb_per_sec(),
            "records_per_sec": self.records_per_sec(),
            "server_cpu_user_seconds": self.server_cpu.map(|c| c.0.as_secs_f64()),
            "server_cpu_system_seconds": self.server_cpu.map(|c| c.1.as_secs_f64()),
        })
    }

    /// One line for the low-level subcommands.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "{:>9.1} MB/s  {:>11.0} records/s  {:>8} requests  {:>7.2} s  {:>8.1} MB",
            self.mb_per_sec(),
            self.records_per_sec(),
            self.requests,
            self.secs(),
            self.bytes as f64 / 1e6
        );
        if self.useful_bytes != self.bytes {
            s += &format!("  (whole batches {:.1} MB/s)", self.useful_bytes as f64 / self.secs() / 1e6);
        }
        s
    }
}

/// The repetitions of one scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    pub(crate) runs: Vec<Measurement>,
}

impl Series {
    pub(crate) fn push(&mut self, m: Measurement) {
        self.runs.push(m);
    }

    pub(crate) fn median_mbps(&self) -> f64 {
        median(self.runs.iter().map(Measurement::mb_per_sec).collect())
    }

    pub(crate) fn best_mbps(&self) -> f64 {
        self.runs.iter().map(Measurement::mb_per_sec).fold(0.0, f64::max)
    }

    pub(crate) fn median_records_per_sec(&self) -> f64 {
        median(self.runs.iter().map(Measurement::records_per_sec).collect())
    }

    pub(crate) fn median_useful_mbps(&self) -> f64 {
        median(self.runs.iter().map(|m| m.useful_bytes as f64 / m.secs() / 1e6).collect())
    }

    /// Median server CPU seconds per GB (user, system), over the runs that have it.
    pub(crate) fn median_server_cpu_per_gb(&self) -> Option<(f64, f64)> {
        let costs: Vec<(f64, f64)> = self.runs.iter().filter_map(Measurement::server_cpu_per_gb).collect();
        if costs.is_empty() {
            return None;
        }
        Some((median(costs.iter().map(|c| c.0).collect()), median(costs.iter().map(|c| c.1).collect())))
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "median_mb_per_sec": self.median_mbps(),
            "best_mb_per_sec": self.best_mbps(),
            "median_records_per_sec": self.median_records_per_sec(),
            "runs": self.runs.iter().map(|m| m.to_json()).collect::<Vec<_>>(),
        })
    }
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The `q` quantile (0..=1, nearest rank) of sorted values; 0 when there are none.
pub(crate) fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize]
}

/// Ratio of paired runs a[i] / b[i] (runs of one repetition ran back to back, so pairing
/// cancels slow drifts of the machine), summarised by the median.
pub(crate) fn paired_ratio(a: &Series, b: &Series) -> f64 {
    median(a.runs.iter().zip(&b.runs).map(|(x, y)| x.mb_per_sec() / y.mb_per_sec().max(1e-9)).collect())
}

/// Samples a process's CPU time (user, system).
pub(crate) type CpuProbe = Box<dyn Fn() -> Option<(Duration, Duration)>>;

/// A probe of process `pid`'s CPU time, if there is a pid.
pub(crate) fn cpu_probe(pid: Option<u32>) -> Option<CpuProbe> {
    pid.map(|pid| Box::new(move || crate::server::process_cpu_time(pid)) as CpuProbe)
}

/// Measures until a deadline after a warm-up that is not counted: the scenarios call
/// [`Window::tick`] after each unit of work and stop when it says so.
pub(crate) struct Window {
    started: std::time::Instant,
    warmup: Duration,
    duration: Duration,
    measuring_since: Option<std::time::Instant>,
    counted: Measurement,
    /// Server CPU is sampled when measuring starts and when it ends, so that it covers the
    /// same period as the bytes.
    cpu_probe: Option<CpuProbe>,
    cpu_at_start: Option<(Duration, Duration)>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("measuring_since", &self.measuring_since).field("counted", &self.counted).finish()
    }
}

impl Window {
    pub(crate) fn new(warmup: Duration, duration: Duration) -> Window {
        let started = std::time::Instant::now();
        Window {
            started,
            warmup,
            duration,
            measuring_since: warmup.is_zero().then_some(started),
            counted: Measurement::default(),
            cpu_probe: None,
            cpu_at_start: None,
        }
    }

    /// Also measure the server's CPU time over the measured period.
    pub(crate) fn with_cpu_probe(mut self, probe: Option<CpuProbe>) -> Window {
        self.cpu_probe = probe;
        if self.measuring_since.is_some() {
            self.cpu_at_start = self.cpu_probe.as_ref().and_then(|p| p());
        }
        self
    }

    fn start_measuring(&mut self, now: std::time::Instant) {
        self.measuring_since = Some(now);
        self.cpu_at_start = self.cpu_probe.as_ref().and_then(|p| p());
    }

    /// Records one unit of work. Returns false once the measured period is over.
    pub(crate) fn tick(&mut self, bytes: u64, useful_bytes: u64, records: u64) -> bool {
        let now = std::time::Instant::now();
        match self.measuring_since {
            None => {
                if now - self.started >= self.warmup {
                    self.start_measuring(now);
                }
                true
            }
            Some(since) => {
                self.counted.bytes += bytes;
                self.counted.useful_bytes += useful_bytes;
                self.counted.records += records;
                self.counted.requests += 1;
                self.counted.elapsed = now - since;
                self.counted.elapsed < self.duration
            }
        }
    }

    pub(crate) fn finish(mut self) -> Measurement {
        if let (Some(probe), Some((user0, system0))) = (&self.cpu_probe, self.cpu_at_start) {
            self.counted.server_cpu = probe().map(|(user, system)| (user.saturating_sub(user0), system.saturating_sub(system0)));
        }
        self.counted
    }
}
