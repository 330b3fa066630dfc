//! JoinGroup and SyncGroup as the state machine takes and answers them, before and after the
//! version shaping of the API handlers.

use bytes::Bytes;
use kafka_protocol::ResponseError;

/// JoinGroup as the state machine sees it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub client_id: String,
    pub client_host: String,
    pub version: i16,
}

/// A JoinGroup answer, before version shaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Only for the leader: every member with its metadata for the selected protocol.
    pub members: Vec<JoinedMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

impl JoinResult {
    pub fn error(error: ResponseError, member_id: &str) -> JoinResult {
        JoinResult {
            error: error.code(),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ResponseError) -> SyncResult {
        SyncResult { error: error.code(), protocol_type: None, protocol_name: None, assignment: Bytes::new() }
    }
}
