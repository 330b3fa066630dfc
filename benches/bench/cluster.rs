//! A corral cluster started by the benchmark: `size` `corral serve` processes on 127.0.0.1 with
//! static `[cluster] nodes` (ids 0..size, direct Raft links) and otherwise the defaults.
//!
//! Every coordinator partition is then a Raft group of all the nodes, and its leader coordinates
//! the partition's groups; the other nodes answer group requests with NOT_COORDINATOR. So a
//! client sends each group's requests to the node FindCoordinator names, as Kafka clients do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;

use crate::kafka::{self, KafkaConn};
use crate::server::{free_port, ManagedServer};
use crate::wire::SocketOpts;

/// The secret the benchmark's nodes prove to each other on their Raft ports.
const CLUSTER_SECRET: &str = "corral-bench-cluster-secret";

/// Nodes of one cluster; node `i` has id `i`.
#[derive(Debug)]
pub(crate) struct ManagedCluster {
    pub(crate) nodes: Vec<ManagedServer>,
}

impl ManagedCluster {
    /// Starts `size` nodes at once, data and logs under `dir`, and waits until each is ready.
    pub(crate) fn start(binary: &Path, dir: &Path, size: usize, extra_args: &[String]) -> Result<ManagedCluster> {
        // Every config lists every port, so they are all chosen first; another process may take
        // one meanwhile, and the retry needs fresh data directories too, because a data directory
        // is bound to the node list it was created with.
        let mut last_error = None;
        for attempt in 0..3 {
            match ManagedCluster::start_once(binary, &dir.join(format!("cluster-{attempt}")), size, extra_args) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    fn start_once(binary: &Path, dir: &Path, size: usize, extra_args: &[String]) -> Result<ManagedCluster> {
        let ports = (0..3 * size).map(|_| free_port()).collect::<Result<Vec<_>>>()?;
        if ports.iter().collect::<std::collections::HashSet<_>>().len() != ports.len() {
            bail!("the same free port came back twice");
        }
        let (kafka, rest) = ports.split_at(size);
        let (admin, raft) = rest.split_at(size);
        let list: Vec<String> = (0..size).map(|j| format!("  {{ id = {j}, raft = \"{}\", kafka = \"{}\" }}", raft[j], kafka[j])).collect();
        let mut configs = Vec::with_capacity(size);
        for (i, raft_listen) in raft.iter().enumerate() {
            let node_dir = dir.join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let config = node_dir.join("corral.toml");
            let text = format!(
                "[node]\nid = {i}\n[cluster]\nraft_listen = \"{raft_listen}\"\nsecret = \"{CLUSTER_SECRET}\"\nnodes = [\n{}\n]\n",
                list.join(",\n")
            );
            std::fs::write(&config, text)?;
            configs.push((node_dir, config));
        }
        // Started together, as a deployment's nodes would be: a node started seconds after the
        // others finds its preferred coordinator partitions already led by them (openraft 0.9
        // does not transfer leadership), and the load would not spread.
        let mut nodes = Vec::with_capacity(size);
        for (i, (node_dir, config)) in configs.iter().enumerate() {
            nodes.push(ManagedServer::launch(
                binary,
                &node_dir.join("data"),
                config,
                &node_dir.join("corral.log"),
                extra_args,
                kafka[i],
                admin[i],
            )?);
        }
        for (node, &admin) in nodes.iter_mut().zip(admin) {
            node.wait_ready_on(admin)?;
        }
        Ok(ManagedCluster { nodes })
    }

    pub(crate) fn kafka(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.kafka).collect()
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(ManagedServer::pid).collect()
    }

    /// Stops every node (SIGTERM), even when one of them fails to stop cleanly.
    pub(crate) fn stop(self) -> Result<()> {
        let mut first_error = None;
        for node in self.nodes {
            if let Err(e) = node.stop() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Each group's coordinator as node `addr` sees it: (error code, node id) per key, in order, from
/// one batched FindCoordinator (v4+).
pub(crate) async fn find_coordinators(addr: SocketAddr, groups: &[String]) -> Result<Vec<(i16, i32)>> {
    let mut conn = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(groups.iter().map(|g| StrBytes::from_string(g.clone())).collect());
    let (version, response) = conn.call(6, &request).await?;
    if version < 4 {
        bail!("{addr} speaks FindCoordinator up to v{version}; batched keys need v4");
    }
    let answers: HashMap<&str, (i16, i32)> = response.coordinators.iter().map(|c| (c.key.as_str(), (c.error_code, c.node_id.0))).collect();
    groups.iter().map(|g| answers.get(g.as_str()).copied().ok_or_else(|| anyhow!("{addr} did not name a coordinator for {g}"))).collect()
}

/// The coordinator (node index) of every group, once all nodes name the same one for each.
pub(crate) async fn agreed_coordinators(nodes: &[SocketAddr], groups: &[String], timeout: Duration) -> Result<Vec<usize>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut views = Vec::with_capacity(nodes.len());
        for &addr in nodes {
            views.push(find_coordinators(addr, groups).await?);
        }
        let agreed: Option<Vec<usize>> = (0..groups.len())
            .map(|g| {
                let (error, node) = views[0][g];
                let node = usize::try_from(node).ok().filter(|&n| error == 0 && n < nodes.len())?;
                views.iter().all(|v| v[g] == (0, node as i32)).then_some(node)
            })
            .collect();
        if let Some(agreed) = agreed {
            return Ok(agreed);
        }
        if Instant::now() > deadline {
            let open = (0..groups.len()).filter(|&g| views.iter().any(|v| v[g] != views[0][g] || v[g].0 != 0)).count();
            bail!("after {timeout:?}, the nodes still disagree on (or do not know) the coordinator of {open} of {} groups", groups.len());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every coordinator partition is led by its preferred node (partition `p` by node
/// `p mod n`) and every node names it; returns the leader (node index) of each partition. A
/// partition led elsewhere at start is handed to its preferred node within seconds; measuring
/// before that would count the move's NOT_COORDINATOR answers as errors.
pub(crate) async fn wait_for_leaders(nodes: &[SocketAddr], timeout: Duration) -> Result<Vec<usize>> {
    let mut admin = KafkaConn::connect(nodes[0], SocketOpts { rcvbuf: 0 }).await?;
    let partitions = kafka::partitions(&mut admin, nodes[0], "__consumer_offsets").await?.len();
    let deadline = Instant::now() + timeout;
    loop {
        let leaders = agreed_coordinators(nodes, &probe_groups(partitions), deadline.saturating_duration_since(Instant::now())).await?;
        let elsewhere = leaders.iter().enumerate().filter(|&(p, &leader)| leader != p % nodes.len()).count();
        if elsewhere == 0 {
            return Ok(leaders);
        }
        if Instant::now() > deadline {
            bail!("after {timeout:?}, {elsewhere} of {partitions} coordinator partitions are still led by a node they do not prefer");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One group name per coordinator partition, in partition order.
pub(crate) fn probe_groups(partitions: usize) -> Vec<String> {
    let mut probes: Vec<Option<String>> = vec![None; partitions];
    let mut left = partitions;
    let mut i = 0;
    while left > 0 {
        let name = format!("corral-bench-probe-{i}");
        let slot = &mut probes[coordinator_partition(&name, partitions)];
        if slot.is_none() {
            *slot = Some(name);
            left -= 1;
        }
        i += 1;
    }
    probes.into_iter().flatten().collect()
}

/// Kafka's coordinator partition of a group: abs(Java `String.hashCode`) % partitions, with
/// `Utils.abs` mapping i32::MIN to 0.
fn coordinator_partition(group: &str, partitions: usize) -> usize {
    let hash = group.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)));
    (if hash == i32::MIN { 0 } else { hash.unsigned_abs() as usize }) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_partition_matches_kafka() {
        // Java: Math.abs("my-group".hashCode()) % 50 == 12; "polygenelubricants".hashCode() is
        // Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
        assert_eq!(coordinator_partition("my-group", 50), 12);
        assert_eq!(coordinator_partition("polygenelubricants", 50), 0);
    }

    #[test]
    fn one_probe_per_partition() {
        let probes = probe_groups(50);
        assert_eq!(probes.len(), 50);
        for (p, name) in probes.iter().enumerate() {
            assert_eq!(coordinator_partition(name, 50), p);
        }
    }
}
