//! Connection setup scenario: what a new client connection costs before its first request, one
//! connection at a time. Each sample is timed from connect(2) until ApiVersions is answered,
//! with the TLS handshake and SASL authentication in between when they are on; the connection
//! is then closed (its close is in the connections/s rate, not in the per-connection times).
//!
//! Both sides' work is in the time: with SCRAM the client derives the salted password (PBKDF2),
//! with PLAIN the server does; `--server-pid` separates the server's CPU per connection.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::kafka::KafkaConn;
use crate::secure::Security;
use crate::server::process_cpu_time;
use crate::wire::SocketOpts;

#[derive(Debug, Clone)]
pub(crate) struct ConnectOpts {
    /// Connections timed.
    pub(crate) count: usize,
    /// Connections made first and not timed (code and caches warm).
    pub(crate) warmup: usize,
    pub(crate) security: Security,
    pub(crate) server_pid: Option<u32>,
}

/// What was measured.
#[derive(Debug, Clone)]
pub(crate) struct ConnectResult {
    /// Setup time of each connection, sorted.
    pub(crate) samples: Vec<Duration>,
    /// Wall time of the timed connections, closes included.
    pub(crate) elapsed: Duration,
    /// Server CPU (user + system) over the timed connections, when its pid is known.
    pub(crate) server_cpu: Option<Duration>,
}

impl ConnectResult {
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        let i = ((self.samples.len() as f64 * q).ceil() as usize).clamp(1, self.samples.len()) - 1;
        self.samples[i].as_secs_f64() * 1e3
    }

    pub(crate) fn per_second(&self) -> f64 {
        self.samples.len() as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn server_cpu_ms_per_connection(&self) -> Option<f64> {
        self.server_cpu.map(|cpu| cpu.as_secs_f64() * 1e3 / self.samples.len() as f64)
    }
}

pub(crate) async fn run(addr: SocketAddr, opts: &ConnectOpts) -> Result<ConnectResult> {
    // A socket the size the kernel picks, as a client that does not tune it.
    let socket = SocketOpts { rcvbuf: 0 };
    for _ in 0..opts.warmup {
        drop(KafkaConn::connect_with(addr, socket, &opts.security).await?);
    }
    let cpu = || opts.server_pid.and_then(process_cpu_time).map(|(user, system)| user + system);
    let cpu_before = cpu();
    let mut samples = Vec::with_capacity(opts.count.max(1));
    let started = Instant::now();
    for _ in 0..opts.count.max(1) {
        let t = Instant::now();
        let conn = KafkaConn::connect_with(addr, socket, &opts.security).await?;
        samples.push(t.elapsed());
        drop(conn);
    }
    let elapsed = started.elapsed();
    let server_cpu = cpu_before.zip(cpu()).map(|(before, after)| after.saturating_sub(before));
    samples.sort();
    Ok(ConnectResult { samples, elapsed, server_cpu })
}
