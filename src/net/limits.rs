//! What clients may hold of the node, across every shard: connections in total and per client
//! address (Kafka's `max.connections` and `max.connections.per.ip`), and the bytes of requests
//! read but not yet answered (`queued.max.request.bytes`). Shared by all shards.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::KafkaConfig;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Total,
    PerIp,
}

impl Refused {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refused::Total => crate::metrics::labels::REFUSED_MAX_CONNECTIONS,
            Refused::PerIp => crate::metrics::labels::REFUSED_MAX_CONNECTIONS_PER_IP,
        }
    }
}

/// The node's connection and request-byte budgets.
#[derive(Debug)]
pub(crate) struct ClientLimits {
    max_total: usize,
    max_per_ip: usize,
    open: Mutex<Open>,
    /// `None`: unlimited (`queued_max_request_bytes = -1`).
    request_bytes: Option<Arc<Semaphore>>,
    request_budget: usize,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl ClientLimits {
    pub(crate) fn new(config: &KafkaConfig) -> Arc<ClientLimits> {
        let budget = usize::try_from(config.queued_max_request_bytes).ok();
        Arc::new(ClientLimits {
            max_total: config.max_connections,
            max_per_ip: config.max_connections_per_ip,
            open: Mutex::default(),
            request_bytes: budget.map(|b| Arc::new(Semaphore::new(b))),
            request_budget: budget.unwrap_or(usize::MAX),
        })
    }

    /// Admits a connection from `ip`, or says which limit it would pass.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refused> {
        let mut open = self.open.lock().expect("never poisoned: no panics while held");
        if open.total >= self.max_total {
            return Err(Refused::Total);
        }
        let from_ip = open.per_ip.entry(ip).or_default();
        if *from_ip >= self.max_per_ip {
            return Err(Refused::PerIp);
        }
        *from_ip += 1;
        open.total += 1;
        Ok(ConnectionSlot { limits: self.clone(), ip })
    }

    /// Waits until `bytes` more request bytes may be held (a request larger than the whole
    /// budget takes all of it). The permit returns them when dropped.
    pub(crate) async fn hold_request(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let semaphore = self.request_bytes.as_ref()?;
        let n = bytes.clamp(1, self.request_budget.min(u32::MAX as usize)) as u32;
        semaphore.clone().acquire_many_owned(n).await.ok()
    }

    /// Request bytes held now.
    pub(crate) fn held_request_bytes(&self) -> usize {
        self.request_bytes.as_ref().map_or(0, |s| self.request_budget - s.available_permits())
    }
}

/// One admitted connection; its place is given back when dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    limits: Arc<ClientLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().expect("never poisoned: no panics while held");
        open.total -= 1;
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_ip: usize, bytes: i64) -> Arc<ClientLimits> {
        let config = KafkaConfig {
            max_connections: total,
            max_connections_per_ip: per_ip,
            queued_max_request_bytes: bytes,
            ..KafkaConfig::default()
        };
        ClientLimits::new(&config)
    }

    #[test]
    fn connections_are_limited_in_total_and_per_address() {
        let l = limits(3, 2, -1);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), Refused::PerIp);
        let _b1 = l.admit(b).unwrap();
        assert_eq!(l.admit(b).unwrap_err(), Refused::Total);
        drop(a1);
        let _a3 = l.admit(a).expect("a closed connection gives its place back");
    }

    #[tokio::test(start_paused = true)]
    async fn request_bytes_wait_for_the_budget() {
        let l = limits(10, 10, 100);
        let first = l.hold_request(80).await.unwrap();
        assert_eq!(l.held_request_bytes(), 80);
        let waiting = tokio::time::timeout(std::time::Duration::from_secs(1), l.hold_request(30)).await;
        assert!(waiting.is_err(), "over the budget: the reader waits");
        drop(first);
        let big = l.hold_request(1_000).await.expect("a request larger than the budget takes all of it");
        assert_eq!(l.held_request_bytes(), 100);
        drop(big);
        assert!(limits(10, 10, -1).hold_request(1 << 30).await.is_none(), "unlimited");
    }
}
