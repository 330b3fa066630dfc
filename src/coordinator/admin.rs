//! Group administration: ListGroups, DescribeGroups, DeleteGroups (spec §5).

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::group::{GroupState, Token};
use super::outbox::{Continuation, Response};
use super::records::GroupRecord;
use super::state::CoordinatorState;

const NONE: i16 = 0;

/// One ListGroups entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    pub group_type: &'static str,
}

/// A DescribeGroups answer for one group that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

impl CoordinatorState {
    /// Groups matching the filters. Empty filters match everything; states compare
    /// case-insensitively, types too (only `classic` groups exist here).
    pub fn list_groups(&self, states: &[String], types: &[String]) -> Vec<ListedGroup> {
        let state_ok = |s: &str| states.is_empty() || states.iter().any(|f| f.trim().eq_ignore_ascii_case(s));
        let type_ok = types.is_empty() || types.iter().any(|t| t.trim().eq_ignore_ascii_case("classic"));
        let mut out: Vec<ListedGroup> = self
            .groups
            .values()
            .filter(|g| type_ok && state_ok(g.state.name()) && !g.is(GroupState::Dead))
            .map(|g| ListedGroup {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state.name(),
                group_type: "classic",
            })
            .collect();
        let consumer_ok = types.is_empty() || types.iter().any(|t| t.trim().eq_ignore_ascii_case("consumer"));
        if consumer_ok {
            out.extend(self.consumer_groups.values().filter(|g| state_ok(g.state_name())).map(|g| ListedGroup {
                group_id: g.id.clone(),
                protocol_type: "consumer".to_string(),
                state: g.state_name(),
                group_type: "consumer",
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// DescribeGroups for one group; `None` when it does not exist.
    pub fn describe_group(&self, group_id: &str) -> Option<DescribedGroup> {
        let g = self.groups.get(group_id).filter(|g| !g.is(GroupState::Dead))?;
        let stable = g.is(GroupState::Stable);
        let protocol = g.protocol_name.clone().unwrap_or_default();
        Some(DescribedGroup {
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_data: if stable { protocol.clone() } else { String::new() },
            members: g
                .members
                .values()
                .map(|m| DescribedMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable { m.metadata_for(&protocol) } else { Bytes::new() },
                    // Kafka 4's coordinator reports the last synced assignment in every state.
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// DeleteGroups (§5.3): one code per group; answered as `Response::DeleteGroups` for `token`
    /// once the tombstones are stored.
    pub fn delete_groups(&mut self, now: i64, group_ids: &[String], token: Token) {
        let mut codes = Vec::with_capacity(group_ids.len());
        let mut records = Vec::new();
        for id in group_ids {
            if let Some(consumer) = self.consumer_groups.get(id) {
                if !consumer.members.is_empty() {
                    codes.push(ResponseError::NonEmptyGroup.code());
                    continue;
                }
                for (topic, partition) in self.offsets.remove(id).unwrap_or_default().into_keys() {
                    records.push(GroupRecord::Offset { group: id.clone(), topic, partition, value: None });
                }
                records.extend(self.delete_consumer_group(id));
                codes.push(NONE);
                continue;
            }
            let code = match self.groups.get(id).map(|g| g.state) {
                None | Some(GroupState::Dead) => ResponseError::GroupIdNotFound.code(),
                Some(GroupState::PreparingRebalance | GroupState::CompletingRebalance | GroupState::Stable) => {
                    ResponseError::NonEmptyGroup.code()
                }
                Some(GroupState::Empty) => {
                    let mut g = self.groups.remove(id).expect("present");
                    for (topic, partition) in self.offsets.remove(id).unwrap_or_default().into_keys() {
                        records.push(GroupRecord::Offset { group: id.clone(), topic, partition, value: None });
                    }
                    records.push(GroupRecord::Group { group: id.clone(), value: None });
                    super::classic::set_state(&mut g, &mut self.out, GroupState::Dead, now);
                    NONE
                }
            };
            codes.push(code);
        }
        if records.is_empty() {
            self.out.reply(token, Response::DeleteGroups(codes));
        } else {
            self.out.append(records, Continuation::DeleteGroups { token, codes });
        }
    }
}
