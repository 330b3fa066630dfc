//! The network between a Raft group's members.
//!
//! A single node is a one-voter cluster: every group has this node as its only voter, so
//! openraft never sends it an RPC. [`SoloNetwork`] answers any RPC it is asked to send with
//! "unreachable", which is what a peer that does not exist is. Clusters use
//! [`super::transport`].

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use super::{NodeId, TypeConfig};

/// The network of a group whose only member is this node.
#[derive(Debug, Clone, Copy, Default)]
pub struct SoloNetwork;

fn unreachable<E: std::error::Error>(target: NodeId) -> RPCError<NodeId, BasicNode, E> {
    let reason = std::io::Error::other(format!("node {target} is not a member: this node runs a one-voter cluster"));
    RPCError::Unreachable(Unreachable::new(&reason))
}

/// The client for one peer: it remembers which, for the error.
#[derive(Debug, Clone, Copy)]
pub struct NoPeer(NodeId);

impl RaftNetworkFactory<TypeConfig> for SoloNetwork {
    type Network = NoPeer;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> NoPeer {
        NoPeer(target)
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>> {
        Err(unreachable(self.0))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }
}

impl super::election::Canvass for SoloNetwork {
    async fn pre_vote(&self, target: NodeId, _last_log_id: Option<super::LogId>) -> Result<bool, String> {
        Err(format!("node {target} is not a member: this node runs a one-voter cluster"))
    }

    async fn ask_to_stand(&self, target: NodeId) -> Result<(), String> {
        Err(format!("node {target} is not a member: this node runs a one-voter cluster"))
    }
}
