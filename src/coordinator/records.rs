//! The coordinator's durable records, in Kafka's `__consumer_offsets` key/value layouts (spec §7),
//! so tools that read that topic (LinkedIn Burrow) understand them.
//!
//! Written: offset key type 1 with OffsetCommitValue v3 (v1 when the commit carries an expire
//! time), group metadata key type 2 with GroupMetadataValue v3, and for KIP-848 consumer groups
//! the key types 3 (group epoch), 5 (member), 6 (target assignment epoch), 7 (member target
//! assignment) and 8 (member current assignment) with their v0 values (flexible encoding). Read:
//! offset values v0–v4, group metadata values v0–v3, the consumer group values v0. A record with a
//! null value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};

const OFFSET_KEY: i16 = 1;
const OFFSET_KEY_LEGACY: i16 = 0;
const GROUP_KEY: i16 = 2;
const CONSUMER_GROUP_KEY: i16 = 3;
const CONSUMER_MEMBER_KEY: i16 = 5;
const TARGET_EPOCH_KEY: i16 = 6;
const TARGET_MEMBER_KEY: i16 = 7;
const CURRENT_MEMBER_KEY: i16 = 8;

/// A record as it goes into a batch: its key and value bytes (`None` for a tombstone). Records
/// are encoded once, when they are queued, and measured from these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// Partitions by topic id, as KIP-848 records and responses carry them.
pub type TopicPartitions = std::collections::BTreeMap<uuid::Uuid, std::collections::BTreeSet<i32>>;

/// The member epoch at which each partition was assigned to a member (KIP-1251): an offset
/// commit from an older epoch is fenced for partitions assigned after it.
pub type AssignmentEpochs = std::collections::BTreeMap<(uuid::Uuid, i32), i32>;

/// A committed offset (spec §4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when the client sent none.
    pub leader_epoch: i32,
    /// Never null: a null from the client is stored as "".
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only from OffsetCommit v2–v4 with an explicit retention time.
    pub expire_timestamp: Option<i64>,
}

/// A classic group as persisted at SyncGroup completion (and when it empties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A KIP-848 member's subscription and settings (ConsumerGroupMemberMetadataValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set for a member that speaks the classic protocol inside a consumer group.
    pub classic: Option<ClassicMemberMetadata>,
}

/// What a classic-protocol member of a consumer group sent in JoinGroup (the tagged
/// `ClassicMemberMetadata` of ConsumerGroupMemberMetadataValue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// In the member's order of preference, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
}

/// Tag of `ClassicMemberMetadata` in ConsumerGroupMemberMetadataValue.
const CLASSIC_MEMBER_METADATA_TAG: u32 = 0;

/// A KIP-848 member's reconciliation state (ConsumerGroupCurrentMemberAssignmentValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: i8,
    pub assigned: TopicPartitions,
    pub pending_revocation: TopicPartitions,
    /// Of the assigned and pending partitions (the `AssignmentEpochs` tagged field of each
    /// topic). A topic written without it (by a version of Kafka or corral before KIP-1251) has
    /// none here.
    pub epochs: AssignmentEpochs,
}

/// Tag of `AssignmentEpochs` in a current assignment's `TopicPartitions`.
const ASSIGNMENT_EPOCHS_TAG: u32 = 0;

/// One record of a coordinator partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<OffsetValue>,
    },
    Group {
        group: String,
        value: Option<GroupMetadataValue>,
    },
    /// A consumer group's epoch (key type 3).
    ConsumerGroup {
        group: String,
        epoch: Option<i32>,
    },
    /// A consumer group member's subscription (key type 5).
    ConsumerMember {
        group: String,
        member: String,
        value: Option<ConsumerMemberValue>,
    },
    /// The epoch of a consumer group's target assignment (key type 6).
    TargetEpoch {
        group: String,
        epoch: Option<i32>,
    },
    /// One member's target assignment (key type 7).
    TargetAssignment {
        group: String,
        member: String,
        partitions: Option<TopicPartitions>,
    },
    /// One member's current assignment and reconciliation state (key type 8).
    CurrentAssignment {
        group: String,
        member: String,
        value: Option<CurrentAssignmentValue>,
    },
}

/// A record that could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct RecordError(&'static str);

impl GroupRecord {
    pub fn group(&self) -> &str {
        match self {
            GroupRecord::Offset { group, .. }
            | GroupRecord::Group { group, .. }
            | GroupRecord::ConsumerGroup { group, .. }
            | GroupRecord::ConsumerMember { group, .. }
            | GroupRecord::TargetEpoch { group, .. }
            | GroupRecord::TargetAssignment { group, .. }
            | GroupRecord::CurrentAssignment { group, .. } => group,
        }
    }

    pub fn key(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        match self {
            GroupRecord::Offset { group, topic, partition, .. } => {
                b.put_i16(OFFSET_KEY);
                put_string(&mut b, group);
                put_string(&mut b, topic);
                b.put_i32(*partition);
            }
            GroupRecord::Group { group, .. } => {
                b.put_i16(GROUP_KEY);
                put_string(&mut b, group);
            }
            GroupRecord::ConsumerGroup { group, .. } => {
                b.put_i16(CONSUMER_GROUP_KEY);
                put_string(&mut b, group);
            }
            GroupRecord::TargetEpoch { group, .. } => {
                b.put_i16(TARGET_EPOCH_KEY);
                put_string(&mut b, group);
            }
            GroupRecord::ConsumerMember { group, member, .. } => {
                b.put_i16(CONSUMER_MEMBER_KEY);
                put_string(&mut b, group);
                put_string(&mut b, member);
            }
            GroupRecord::TargetAssignment { group, member, .. } => {
                b.put_i16(TARGET_MEMBER_KEY);
                put_string(&mut b, group);
                put_string(&mut b, member);
            }
            GroupRecord::CurrentAssignment { group, member, .. } => {
                b.put_i16(CURRENT_MEMBER_KEY);
                put_string(&mut b, group);
                put_string(&mut b, member);
            }
        }
        b.freeze()
    }

    /// The value bytes; `None` for a tombstone.
    pub fn value(&self) -> Option<Bytes> {
        let mut b = BytesMut::with_capacity(64);
        match self {
            GroupRecord::Offset { value: None, .. }
            | GroupRecord::Group { value: None, .. }
            | GroupRecord::ConsumerGroup { epoch: None, .. }
            | GroupRecord::ConsumerMember { value: None, .. }
            | GroupRecord::TargetEpoch { epoch: None, .. }
            | GroupRecord::TargetAssignment { partitions: None, .. }
            | GroupRecord::CurrentAssignment { value: None, .. } => return None,
            GroupRecord::ConsumerGroup { epoch: Some(epoch), .. } | GroupRecord::TargetEpoch { epoch: Some(epoch), .. } => {
                b.put_i16(0);
                b.put_i32(*epoch);
                b.put_u8(0); // tagged fields
            }
            GroupRecord::ConsumerMember { value: Some(v), .. } => {
                b.put_i16(0);
                put_compact_nullable_string(&mut b, v.instance_id.as_deref());
                put_compact_nullable_string(&mut b, v.rack_id.as_deref());
                put_compact_nullable_string(&mut b, Some(&v.client_id));
                put_compact_nullable_string(&mut b, Some(&v.client_host));
                put_uvarint(&mut b, v.subscribed_names.len() as u32 + 1);
                for name in &v.subscribed_names {
                    put_compact_nullable_string(&mut b, Some(name));
                }
                put_compact_nullable_string(&mut b, v.subscribed_regex.as_deref());
                b.put_i32(v.rebalance_timeout_ms);
                put_compact_nullable_string(&mut b, v.server_assignor.as_deref());
                match &v.classic {
                    None => b.put_u8(0),
                    Some(classic) => {
                        // A nullable struct as a tagged field: its size, then 1 for "present".
                        let mut body = BytesMut::new();
                        put_uvarint(&mut body, 1);
                        body.put_i32(classic.session_timeout_ms);
                        put_uvarint(&mut body, classic.protocols.len() as u32 + 1);
                        for (name, metadata) in &classic.protocols {
                            put_compact_nullable_string(&mut body, Some(name));
                            put_uvarint(&mut body, metadata.len() as u32 + 1);
                            body.put_slice(metadata);
                            body.put_u8(0);
                        }
                        body.put_u8(0);
                        put_uvarint(&mut b, 1);
                        put_uvarint(&mut b, CLASSIC_MEMBER_METADATA_TAG);
                        put_uvarint(&mut b, body.len() as u32);
                        b.put_slice(&body);
                    }
                }
            }
            GroupRecord::TargetAssignment { partitions: Some(p), .. } => {
                b.put_i16(0);
                put_topic_partitions(&mut b, p, None);
                b.put_u8(0);
            }
            GroupRecord::CurrentAssignment { value: Some(v), .. } => {
                b.put_i16(0);
                b.put_i32(v.epoch);
                b.put_i32(v.previous_epoch);
                b.put_i8(v.state);
                put_topic_partitions(&mut b, &v.assigned, Some(&v.epochs));
                put_topic_partitions(&mut b, &v.pending_revocation, Some(&v.epochs));
                b.put_u8(0);
            }
            GroupRecord::Offset { value: Some(v), .. } => match v.expire_timestamp {
                Some(expire) => {
                    b.put_i16(1);
                    b.put_i64(v.offset);
                    put_string(&mut b, &v.metadata);
                    b.put_i64(v.commit_timestamp);
                    b.put_i64(expire);
                }
                None => {
                    b.put_i16(3);
                    b.put_i64(v.offset);
                    b.put_i32(v.leader_epoch);
                    put_string(&mut b, &v.metadata);
                    b.put_i64(v.commit_timestamp);
                }
            },
            GroupRecord::Group { value: Some(v), .. } => {
                b.put_i16(3);
                put_string(&mut b, &v.protocol_type);
                b.put_i32(v.generation);
                put_nullable_string(&mut b, v.protocol.as_deref());
                put_nullable_string(&mut b, v.leader.as_deref());
                b.put_i64(v.state_timestamp);
                b.put_i32(v.members.len() as i32);
                for m in &v.members {
                    put_string(&mut b, &m.member_id);
                    put_nullable_string(&mut b, m.instance_id.as_deref());
                    put_string(&mut b, &m.client_id);
                    put_string(&mut b, &m.client_host);
                    b.put_i32(m.rebalance_timeout_ms);
                    b.put_i32(m.session_timeout_ms);
                    put_bytes(&mut b, &m.subscription);
                    put_bytes(&mut b, &m.assignment);
                }
            }
        }
        Some(b.freeze())
    }

    /// The key and value bytes, as they are stored.
    pub fn encode(&self) -> StoredRecord {
        StoredRecord { key: self.key(), value: self.value() }
    }

    /// Reads a record back. `Ok(None)` for record types the classic coordinator does not use
    /// (they are skipped, as Kafka skips unknown types).
    pub fn decode(mut key: &[u8], value: Option<&[u8]>) -> Result<Option<GroupRecord>, RecordError> {
        let kind = get_i16(&mut key)?;
        match kind {
            OFFSET_KEY | OFFSET_KEY_LEGACY => {
                let group = get_string(&mut key)?;
                let topic = get_string(&mut key)?;
                let partition = get_i32(&mut key)?;
                let value = value.map(decode_offset_value).transpose()?;
                Ok(Some(GroupRecord::Offset { group, topic, partition, value }))
            }
            GROUP_KEY => {
                let group = get_string(&mut key)?;
                let value = value.map(decode_group_value).transpose()?;
                Ok(Some(GroupRecord::Group { group, value }))
            }
            CONSUMER_GROUP_KEY | TARGET_EPOCH_KEY => {
                let group = get_string(&mut key)?;
                let epoch = value
                    .map(|mut v| {
                        get_i16(&mut v)?;
                        get_i32(&mut v)
                    })
                    .transpose()?;
                Ok(Some(if kind == CONSUMER_GROUP_KEY {
                    GroupRecord::ConsumerGroup { group, epoch }
                } else {
                    GroupRecord::TargetEpoch { group, epoch }
                }))
            }
            CONSUMER_MEMBER_KEY | TARGET_MEMBER_KEY | CURRENT_MEMBER_KEY => {
                let group = get_string(&mut key)?;
                let member = get_string(&mut key)?;
                Ok(Some(match kind {
                    CONSUMER_MEMBER_KEY => {
                        GroupRecord::ConsumerMember { group, member, value: value.map(decode_consumer_member).transpose()? }
                    }
                    TARGET_MEMBER_KEY => GroupRecord::TargetAssignment {
                        group,
                        member,
                        partitions: value
                            .map(|mut v| {
                                get_i16(&mut v)?;
                                get_topic_partitions(&mut v, None)
                            })
                            .transpose()?,
                    },
                    _ => GroupRecord::CurrentAssignment { group, member, value: value.map(decode_current_assignment).transpose()? },
                }))
            }
            _ => Ok(None),
        }
    }
}

fn decode_offset_value(mut v: &[u8]) -> Result<OffsetValue, RecordError> {
    let version = get_i16(&mut v)?;
    Ok(match version {
        0 | 2 => OffsetValue {
            offset: get_i64(&mut v)?,
            leader_epoch: -1,
            metadata: get_string(&mut v)?,
            commit_timestamp: get_i64(&mut v)?,
            expire_timestamp: None,
        },
        1 => OffsetValue {
            offset: get_i64(&mut v)?,
            leader_epoch: -1,
            metadata: get_string(&mut v)?,
            commit_timestamp: get_i64(&mut v)?,
            expire_timestamp: Some(get_i64(&mut v)?).filter(|&t| t >= 0),
        },
        3 => OffsetValue {
            offset: get_i64(&mut v)?,
            leader_epoch: get_i32(&mut v)?,
            metadata: get_string(&mut v)?,
            commit_timestamp: get_i64(&mut v)?,
            expire_timestamp: None,
        },
        4 => OffsetValue {
            offset: get_i64(&mut v)?,
            leader_epoch: get_i32(&mut v)?,
            metadata: get_compact_string(&mut v)?,
            commit_timestamp: get_i64(&mut v)?,
            expire_timestamp: None,
        },
        _ => return Err(RecordError("unknown offset value version")),
    })
}

fn decode_group_value(mut v: &[u8]) -> Result<GroupMetadataValue, RecordError> {
    let version = get_i16(&mut v)?;
    if !(0..=3).contains(&version) {
        return Err(RecordError("unknown group metadata value version"));
    }
    let protocol_type = get_string(&mut v)?;
    let generation = get_i32(&mut v)?;
    let protocol = get_nullable_string(&mut v)?;
    let leader = get_nullable_string(&mut v)?;
    let state_timestamp = if version >= 2 { get_i64(&mut v)? } else { -1 };
    let count = get_i32(&mut v)?;
    if count < 0 || count as usize > v.len() {
        return Err(RecordError("member count"));
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let member_id = get_string(&mut v)?;
        let instance_id = if version >= 3 { get_nullable_string(&mut v)? } else { None };
        let client_id = get_string(&mut v)?;
        let client_host = get_string(&mut v)?;
        let session_then_rebalance = version == 0;
        let rebalance = if session_then_rebalance { None } else { Some(get_i32(&mut v)?) };
        let session_timeout_ms = get_i32(&mut v)?;
        let subscription = get_bytes(&mut v)?;
        let assignment = get_bytes(&mut v)?;
        members.push(MemberMetadata {
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: rebalance.unwrap_or(session_timeout_ms),
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(GroupMetadataValue { protocol_type, generation, protocol, leader, state_timestamp, members })
}

fn decode_consumer_member(mut v: &[u8]) -> Result<ConsumerMemberValue, RecordError> {
    get_i16(&mut v)?;
    let instance_id = get_compact_nullable_string(&mut v)?;
    let rack_id = get_compact_nullable_string(&mut v)?;
    let client_id = get_compact_nullable_string(&mut v)?.unwrap_or_default();
    let client_host = get_compact_nullable_string(&mut v)?.unwrap_or_default();
    let count = get_uvarint(&mut v)?.saturating_sub(1) as usize;
    if count > v.len() {
        return Err(RecordError("topic name count"));
    }
    let mut subscribed_names = Vec::with_capacity(count);
    for _ in 0..count {
        subscribed_names.push(get_compact_nullable_string(&mut v)?.unwrap_or_default());
    }
    let subscribed_regex = get_compact_nullable_string(&mut v)?;
    let rebalance_timeout_ms = get_i32(&mut v)?;
    let server_assignor = get_compact_nullable_string(&mut v)?;
    let mut classic = None;
    for _ in 0..get_uvarint(&mut v)? {
        let tag = get_uvarint(&mut v)?;
        let size = get_uvarint(&mut v)? as usize;
        if v.len() < size {
            return Err(RecordError("truncated"));
        }
        let (mut field, rest) = v.split_at(size);
        v = rest;
        if tag == CLASSIC_MEMBER_METADATA_TAG && get_uvarint(&mut field)? > 0 {
            classic = Some(decode_classic_member(&mut field)?);
        }
    }
    Ok(ConsumerMemberValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_names,
        subscribed_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    })
}

fn decode_classic_member(v: &mut &[u8]) -> Result<ClassicMemberMetadata, RecordError> {
    let session_timeout_ms = get_i32(v)?;
    let count = get_uvarint(v)?.saturating_sub(1) as usize;
    if count > v.len() {
        return Err(RecordError("protocol count"));
    }
    let mut protocols = Vec::with_capacity(count);
    for _ in 0..count {
        let name = get_compact_string(v)?;
        let len = get_uvarint(v)?.checked_sub(1).ok_or(RecordError("null protocol metadata"))? as usize;
        if v.len() < len {
            return Err(RecordError("truncated"));
        }
        protocols.push((name, Bytes::copy_from_slice(&v[..len])));
        v.advance(len);
        skip_tagged_fields(v)?;
    }
    skip_tagged_fields(v)?;
    Ok(ClassicMemberMetadata { session_timeout_ms, protocols })
}

fn decode_current_assignment(mut v: &[u8]) -> Result<CurrentAssignmentValue, RecordError> {
    get_i16(&mut v)?;
    let mut epochs = AssignmentEpochs::new();
    Ok(CurrentAssignmentValue {
        epoch: get_i32(&mut v)?,
        previous_epoch: get_i32(&mut v)?,
        state: v.try_get_i8().map_err(|_| RecordError("truncated"))?,
        assigned: get_topic_partitions(&mut v, Some(&mut epochs))?,
        pending_revocation: get_topic_partitions(&mut v, Some(&mut epochs))?,
        epochs,
    })
}

/// `[]{TopicId uuid, Partitions []int32, tagged fields}`, compact. With `epochs`, a topic whose
/// every partition has one carries them as the `AssignmentEpochs` tagged field, in the
/// partitions' order.
fn put_topic_partitions(b: &mut BytesMut, tp: &TopicPartitions, epochs: Option<&AssignmentEpochs>) {
    put_uvarint(b, tp.len() as u32 + 1);
    for (topic, partitions) in tp {
        b.put_slice(topic.as_bytes());
        put_uvarint(b, partitions.len() as u32 + 1);
        for p in partitions {
            b.put_i32(*p);
        }
        let topic_epochs: Option<Vec<i32>> = epochs.and_then(|e| partitions.iter().map(|p| e.get(&(*topic, *p)).copied()).collect());
        match topic_epochs {
            Some(list) => {
                let mut field = BytesMut::new();
                put_uvarint(&mut field, list.len() as u32 + 1);
                for epoch in list {
                    field.put_i32(epoch);
                }
                b.put_u8(1);
                put_uvarint(b, ASSIGNMENT_EPOCHS_TAG);
                put_uvarint(b, field.len() as u32);
                b.put_slice(&field);
            }
            None => b.put_u8(0),
        }
    }
}

/// Reads what [`put_topic_partitions`] writes; with `epochs`, adds the `AssignmentEpochs` of
/// the topics that carry them (a list of another length than the partitions' is malformed).
fn get_topic_partitions(b: &mut &[u8], mut epochs: Option<&mut AssignmentEpochs>) -> Result<TopicPartitions, RecordError> {
    let topics = get_uvarint(b)?.saturating_sub(1) as usize;
    if topics > b.len() {
        return Err(RecordError("topic count"));
    }
    let mut out = TopicPartitions::new();
    for _ in 0..topics {
        if b.len() < 16 {
            return Err(RecordError("truncated"));
        }
        let id = uuid::Uuid::from_slice(&b[..16]).map_err(|_| RecordError("topic id"))?;
        b.advance(16);
        let count = get_uvarint(b)?.saturating_sub(1) as usize;
        if count > b.len() / 4 {
            return Err(RecordError("partition count"));
        }
        let mut listed = Vec::with_capacity(count);
        for _ in 0..count {
            listed.push(get_i32(b)?);
        }
        let tags = get_uvarint(b)?;
        for _ in 0..tags {
            let tag = get_uvarint(b)?;
            let size = get_uvarint(b)? as usize;
            if b.len() < size {
                return Err(RecordError("truncated"));
            }
            let (mut field, rest) = b.split_at(size);
            *b = rest;
            match epochs.as_deref_mut() {
                Some(epochs) if tag == ASSIGNMENT_EPOCHS_TAG => {
                    // Nullable: 0 is null, as if the field were not there.
                    let n = get_uvarint(&mut field)?;
                    if n != 0 && n as usize - 1 != listed.len() {
                        return Err(RecordError("assignment epochs"));
                    }
                    for p in listed.iter().take(n.saturating_sub(1) as usize) {
                        epochs.insert((id, *p), get_i32(&mut field)?);
                    }
                }
                _ => {}
            }
        }
        out.entry(id).or_default().extend(listed);
    }
    Ok(out)
}

fn skip_tagged_fields(b: &mut &[u8]) -> Result<(), RecordError> {
    let count = get_uvarint(b)?;
    for _ in 0..count {
        get_uvarint(b)?;
        let size = get_uvarint(b)? as usize;
        if b.len() < size {
            return Err(RecordError("truncated"));
        }
        b.advance(size);
    }
    Ok(())
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn get_uvarint(b: &mut &[u8]) -> Result<u32, RecordError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let byte = b.try_get_u8().map_err(|_| RecordError("truncated"))?;
        value |= ((byte & 0x7f) as u32) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RecordError("varint too long"))
}

fn put_compact_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            put_uvarint(b, s.len() as u32 + 1);
            b.put_slice(s.as_bytes());
        }
        None => b.put_u8(0),
    }
}

fn get_compact_nullable_string(b: &mut &[u8]) -> Result<Option<String>, RecordError> {
    match get_uvarint(b)? {
        0 => Ok(None),
        n => take_str(b, n as usize - 1).map(Some),
    }
}

/// Callers refuse longer strings where they enter (MAX_RECORD_STRING_BYTES, MAX_ID_BYTES).
fn put_string(b: &mut BytesMut, s: &str) {
    debug_assert!(s.len() <= i16::MAX as usize, "a {}-byte string in a 16-bit-length field", s.len());
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn put_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, bytes: &[u8]) {
    b.put_i32(bytes.len() as i32);
    b.put_slice(bytes);
}

fn get_i16(b: &mut &[u8]) -> Result<i16, RecordError> {
    b.try_get_i16().map_err(|_| RecordError("truncated"))
}

fn get_i32(b: &mut &[u8]) -> Result<i32, RecordError> {
    b.try_get_i32().map_err(|_| RecordError("truncated"))
}

fn get_i64(b: &mut &[u8]) -> Result<i64, RecordError> {
    b.try_get_i64().map_err(|_| RecordError("truncated"))
}

fn get_nullable_string(b: &mut &[u8]) -> Result<Option<String>, RecordError> {
    let len = get_i16(b)?;
    if len < 0 {
        return Ok(None);
    }
    take_str(b, len as usize).map(Some)
}

fn get_string(b: &mut &[u8]) -> Result<String, RecordError> {
    get_nullable_string(b)?.ok_or(RecordError("null string"))
}

fn get_compact_string(b: &mut &[u8]) -> Result<String, RecordError> {
    get_compact_nullable_string(b)?.ok_or(RecordError("null string"))
}

fn take_str(b: &mut &[u8], len: usize) -> Result<String, RecordError> {
    if b.len() < len {
        return Err(RecordError("truncated"));
    }
    let s = std::str::from_utf8(&b[..len]).map_err(|_| RecordError("invalid UTF-8"))?.to_string();
    b.advance(len);
    Ok(s)
}

fn get_bytes(b: &mut &[u8]) -> Result<Bytes, RecordError> {
    let len = get_i32(b)?;
    if len < 0 {
        return Ok(Bytes::new());
    }
    if b.len() < len as usize {
        return Err(RecordError("truncated"));
    }
    let out = Bytes::copy_from_slice(&b[..len as usize]);
    b.advance(len as usize);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_record_layout_is_kafkas() {
        let r = GroupRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
            value: Some(OffsetValue { offset: 42, leader_epoch: 5, metadata: "m".into(), commit_timestamp: 7, expire_timestamp: None }),
        };
        // key: type 1, "g", "t", partition 3
        assert_eq!(&r.key()[..], &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3]);
        // value v3: offset, leader epoch, metadata, commit timestamp
        let mut v = vec![0, 3];
        v.extend_from_slice(&42i64.to_be_bytes());
        v.extend_from_slice(&5i32.to_be_bytes());
        v.extend_from_slice(&[0, 1, b'm']);
        v.extend_from_slice(&7i64.to_be_bytes());
        assert_eq!(&r.value().unwrap()[..], &v[..]);
        assert_eq!(GroupRecord::decode(&r.key(), r.value().as_deref()).unwrap(), Some(r));
    }

    #[test]
    fn assignment_epochs_are_the_tagged_field_kafka_writes() {
        let topic = uuid::Uuid::from_u64_pair(1, 2);
        let value = CurrentAssignmentValue {
            epoch: 5,
            previous_epoch: 4,
            state: 0,
            assigned: TopicPartitions::from([(topic, [1, 3].into())]),
            pending_revocation: TopicPartitions::new(),
            epochs: AssignmentEpochs::from([((topic, 1), 2), ((topic, 3), 5)]),
        };
        let record = GroupRecord::CurrentAssignment { group: "g".into(), member: "m".into(), value: Some(value) };
        // What Kafka 4.4's ConsumerGroupCurrentMemberAssignmentValue serializes for the same value.
        let kafka = "000000000005000000040002000000000000000100000000000000020300000001000000030100090300000002000000050100";
        let bytes = record.value().unwrap();
        assert_eq!(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>(), kafka);
        assert_eq!(GroupRecord::decode(&record.key(), Some(&bytes)).unwrap(), Some(record));
    }

    #[test]
    fn classic_member_metadata_is_the_tagged_field_kafka_writes() {
        let value = ConsumerMemberValue {
            instance_id: None,
            rack_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            subscribed_names: vec![],
            subscribed_regex: None,
            rebalance_timeout_ms: 1,
            server_assignor: None,
            classic: Some(ClassicMemberMetadata { session_timeout_ms: 45_000, protocols: vec![("r".into(), Bytes::from_static(&[9]))] }),
        };
        let record = GroupRecord::ConsumerMember { group: "g".into(), member: "m".into(), value: Some(value) };
        let bytes = record.value().unwrap();
        // ... ServerAssignor null, then one tagged field: tag 0, size 12, and the nullable struct
        // (1 = present, SessionTimeoutMs, SupportedProtocols [{Name "r", Metadata [9]}], no tags).
        let tail = [0, 1, 0, 12, 1, 0, 0, 0xaf, 0xc8, 2, 2, b'r', 2, 9, 0, 0];
        assert_eq!(&bytes[bytes.len() - tail.len()..], &tail);
    }

    #[test]
    fn consumer_group_records_round_trip() {
        let id = uuid::Uuid::from_u128(7);
        let mut tp = TopicPartitions::new();
        tp.entry(id).or_default().extend([0, 2, 5]);
        let records = vec![
            GroupRecord::ConsumerGroup { group: "g".into(), epoch: Some(3) },
            GroupRecord::TargetEpoch { group: "g".into(), epoch: Some(3) },
            GroupRecord::ConsumerMember {
                group: "g".into(),
                member: "m".into(),
                value: Some(ConsumerMemberValue {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    subscribed_names: vec!["a".into(), "b".into()],
                    subscribed_regex: Some("t.*".into()),
                    rebalance_timeout_ms: 300_000,
                    server_assignor: Some("range".into()),
                    classic: None,
                }),
            },
            GroupRecord::ConsumerMember {
                group: "g".into(),
                member: "classic".into(),
                value: Some(ConsumerMemberValue {
                    instance_id: None,
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    subscribed_names: vec!["a".into()],
                    subscribed_regex: None,
                    rebalance_timeout_ms: 300_000,
                    server_assignor: None,
                    classic: Some(ClassicMemberMetadata {
                        session_timeout_ms: 45_000,
                        protocols: vec![("range".into(), Bytes::from_static(&[0, 3, 1, 2])), ("roundrobin".into(), Bytes::new())],
                    }),
                }),
            },
            GroupRecord::TargetAssignment { group: "g".into(), member: "m".into(), partitions: Some(tp.clone()) },
            GroupRecord::CurrentAssignment {
                group: "g".into(),
                member: "m".into(),
                value: Some(CurrentAssignmentValue {
                    epoch: 3,
                    previous_epoch: 2,
                    state: 1,
                    assigned: tp.clone(),
                    pending_revocation: TopicPartitions::new(),
                    epochs: AssignmentEpochs::new(),
                }),
            },
            GroupRecord::CurrentAssignment { group: "g".into(), member: "m".into(), value: None },
        ];
        for r in records {
            assert_eq!(GroupRecord::decode(&r.key(), r.value().as_deref()).unwrap(), Some(r));
        }
    }

    #[test]
    fn round_trips() {
        let with_expiry = GroupRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
            value: Some(OffsetValue { offset: 1, leader_epoch: -1, metadata: "".into(), commit_timestamp: 2, expire_timestamp: Some(9) }),
        };
        assert_eq!(with_expiry.value().unwrap()[..2], [0, 1]);
        let group = GroupRecord::Group {
            group: "grp".into(),
            value: Some(GroupMetadataValue {
                protocol_type: "consumer".into(),
                generation: 4,
                protocol: Some("range".into()),
                leader: Some("m1".into()),
                state_timestamp: 100,
                members: vec![MemberMetadata {
                    member_id: "m1".into(),
                    instance_id: Some("i1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 10_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                }],
            }),
        };
        let tombstone = GroupRecord::Group { group: "grp".into(), value: None };
        for r in [with_expiry, group, tombstone] {
            assert_eq!(GroupRecord::decode(&r.key(), r.value().as_deref()).unwrap(), Some(r));
        }
        assert_eq!(GroupRecord::decode(&[0, 4, 0, 1, b'x'], None).unwrap(), None, "unused record types are skipped");
        assert!(GroupRecord::decode(&[0, 1, 0, 9], None).is_err());
    }
}
