//! Raft requests from the peers, run on the shard that owns their group: the metadata group's
//! on [`METADATA_SHARD`], a coordinator partition's on the shard that hosts it.

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::Shard;
use crate::cluster::metadata_group::{METADATA_GROUP, METADATA_SHARD};
use crate::node::Node;
use crate::raft::transport::{encode, Inbound, PeerRequest};

/// The node's shards, as the `raft-net` thread sees them.
#[derive(Debug)]
pub struct ShardsInbound {
    pub node: Arc<Node>,
}

impl Inbound for ShardsInbound {
    fn serve(&self, group: u32, request: PeerRequest) -> BoxFuture<'static, Result<Bytes, String>> {
        let node = self.node.clone();
        Box::pin(async move {
            let owner = match group {
                METADATA_GROUP => METADATA_SHARD,
                _ => *node.coordinator_shards.get(group as usize).ok_or_else(|| format!("no coordinator partition {group}"))?,
            };
            node.mesh.run_on(owner, move |shard| handle(shard, group, request)).await.map_err(|e| e.to_string())?
        })
    }
}

/// Hands a request to the group's Raft; returns its `Result`, encoded.
async fn handle(shard: Rc<Shard>, group: u32, request: PeerRequest) -> Result<Bytes, String> {
    let election = if group == METADATA_GROUP {
        let metadata = shard.metadata().ok_or("the metadata group is not running here yet")?;
        if let PeerRequest::Propose(change) = request {
            return encode(&metadata.write(change).await);
        }
        metadata.election().clone()
    } else {
        let runner = shard.coordinator(group as i32).ok_or_else(|| format!("coordinator partition {group} is not running here yet"))?;
        runner.election().cloned().ok_or_else(|| format!("coordinator partition {group} has no Raft group yet"))?
    };
    match request {
        PeerRequest::AppendEntries(rpc) => encode(&election.append_entries(rpc).await),
        PeerRequest::Vote(rpc) => encode(&election.vote(rpc).await),
        PeerRequest::InstallSnapshot(rpc) => encode(&election.install_snapshot(rpc).await),
        PeerRequest::PreVote(last) => encode(&election.pre_vote(last)),
        PeerRequest::Elect => encode(&election.stand_now().await),
        PeerRequest::Propose(_) => Err(format!("group {group} takes no proposals from peers")),
    }
}
