//! The coordinator's durable records, in Kafka's `__consumer_offsets` key/value layouts (spec §7),
//! so tools that read that topic (LinkedIn Burrow) understand them.
//!
//! Written: offset key type 1 with OffsetCommitValue v3 (v1 when the commit carries an expire
//! time), group metadata key type 2 with GroupMetadataValue v3. Read: offset values v0–v4 and
//! group metadata values v0–v3. A record with a null value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};

const OFFSET_KEY: i16 = 1;
const OFFSET_KEY_LEGACY: i16 = 0;
const GROUP_KEY: i16 = 2;

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

/// One record of a coordinator partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupMetadataValue> },
}

/// A record that could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct RecordError(&'static str);

impl GroupRecord {
    pub fn group(&self) -> &str {
        match self {
            GroupRecord::Offset { group, .. } | GroupRecord::Group { group, .. } => group,
        }
    }

    pub fn key(&self) -> Bytes {
        let mut b = BytesMut::new();
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
        }
        b.freeze()
    }

    /// The value bytes; `None` for a tombstone.
    pub fn value(&self) -> Option<Bytes> {
        let mut b = BytesMut::new();
        match self {
            GroupRecord::Offset { value: None, .. } | GroupRecord::Group { value: None, .. } => return None,
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

fn put_string(b: &mut BytesMut, s: &str) {
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
    let mut len: u32 = 0;
    for i in 0..5 {
        let byte = b.try_get_u8().map_err(|_| RecordError("truncated"))?;
        len |= ((byte & 0x7f) as u32) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    match len {
        0 => Err(RecordError("null string")),
        n => take_str(b, n as usize - 1),
    }
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
        assert_eq!(GroupRecord::decode(&[0, 3, 0, 1, b'x'], None).unwrap(), None, "KIP-848 records are skipped here");
        assert!(GroupRecord::decode(&[0, 1, 0, 9], None).is_err());
    }
}
