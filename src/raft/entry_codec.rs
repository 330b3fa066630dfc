//! The binary encoding of Raft log entries and of the small state files beside the log.
//!
//! Everything is big-endian, as in Kafka's own formats.
//!
//! # Log record
//!
//! ```text
//! record  := length u32 | crc u32 | body[length]
//!            crc = CRC-32C over the 4 length bytes followed by the body, so a torn or corrupt
//!            length is caught as surely as a torn body
//! body    := index u64 | term u64 | leader node id u64 | kind u8 | payload
//! kind 0  Blank        payload is empty
//! kind 1  Normal       payload is the command's bytes, verbatim (never interpreted here)
//! kind 2  Membership   payload := configs u32, per config: voters u32, voter ids u64…
//!                                 nodes u32, per node: id u64, addr length u32, addr (UTF-8)
//! ```
//!
//! Kinds 3 and above are reserved; a reader that meets one reports the record as invalid.
//!
//! # State file
//!
//! ```text
//! state   := crc u32 | payload      crc = CRC-32C of the payload
//! ```
//!
//! The payloads are the vote (`term u64 | node id u64 | committed u8`), the last purged log id
//! (`term u64 | node id u64 | index u64`) and the committed log id (`present u8`, then a log id
//! when present).

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, LeaderId};

use super::{Command, Entry, LogId, Membership, NodeId, StoredMembership, Vote};

/// Bytes before a record's body: its length and its CRC.
pub(crate) const RECORD_HEADER_LEN: usize = 8;
/// Bytes of a body before its payload: index, term, node id, kind.
pub(crate) const BODY_HEADER_LEN: usize = 25;
/// The largest body a record may have. Recovery treats a larger length as corruption, and
/// append refuses entries that would need one.
pub(crate) const MAX_BODY_LEN: usize = 128 << 20;

const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("record truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("record CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc { stored: u32, computed: u32 },
    #[error("record length {0} is outside [{BODY_HEADER_LEN}, {MAX_BODY_LEN}]")]
    BadLength(u32),
    #[error("unknown entry kind {0}")]
    UnknownKind(u8),
    #[error("node address is not UTF-8")]
    BadAddress,
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
}

/// The fixed part of a record body, enough to index an entry without decoding its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyHeader {
    pub(crate) log_id: LogId,
    pub(crate) kind: u8,
}

// === records ===

/// Appends one record holding `entry` to `out`; returns the record's length (header included).
pub(crate) fn encode_entry(entry: &Entry, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
    put_log_id_index_first(out, &entry.log_id);
    match &entry.payload {
        EntryPayload::Blank => out.put_u8(KIND_BLANK),
        EntryPayload::Normal(command) => {
            out.put_u8(KIND_NORMAL);
            out.extend_from_slice(command.payload());
        }
        EntryPayload::Membership(membership) => {
            out.put_u8(KIND_MEMBERSHIP);
            put_membership(out, membership);
        }
    }
    let body_len = out.len() - start - RECORD_HEADER_LEN;
    let len_bytes = (body_len as u32).to_be_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len_bytes), &out[start + RECORD_HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&len_bytes);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    out.len() - start
}

/// Splits a record header into `(body length, stored crc)`, checking the length's bounds.
pub(crate) fn parse_record_header(header: &[u8; RECORD_HEADER_LEN]) -> Result<(usize, u32), CodecError> {
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if (len as usize) < BODY_HEADER_LEN || len as usize > MAX_BODY_LEN {
        return Err(CodecError::BadLength(len));
    }
    Ok((len as usize, crc))
}

/// Checks a body against the CRC stored in its record header and parses its fixed part.
pub(crate) fn check_body(stored_crc: u32, body: &[u8]) -> Result<BodyHeader, CodecError> {
    let len_bytes = (body.len() as u32).to_be_bytes();
    let computed = crc32c::crc32c_append(crc32c::crc32c(&len_bytes), body);
    if computed != stored_crc {
        return Err(CodecError::Crc { stored: stored_crc, computed });
    }
    let mut b = body;
    let log_id = get_log_id_index_first(&mut b)?;
    let kind = b.get_u8();
    if kind > KIND_MEMBERSHIP {
        return Err(CodecError::UnknownKind(kind));
    }
    Ok(BodyHeader { log_id, kind })
}

/// Decodes one whole record (header and body) into an entry, verifying its CRC. A normal entry's
/// command shares `record`'s buffer rather than copying it.
pub(crate) fn decode_record(record: Bytes) -> Result<Entry, CodecError> {
    let header: [u8; RECORD_HEADER_LEN] = record
        .get(..RECORD_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| CodecError::Truncated { needed: RECORD_HEADER_LEN - record.len() })?;
    let (len, crc) = parse_record_header(&header)?;
    if record.len() < RECORD_HEADER_LEN + len {
        return Err(CodecError::Truncated { needed: RECORD_HEADER_LEN + len - record.len() });
    }
    if record.len() > RECORD_HEADER_LEN + len {
        return Err(CodecError::Trailing(record.len() - RECORD_HEADER_LEN - len));
    }
    let fixed = check_body(crc, &record[RECORD_HEADER_LEN..])?;
    let payload_start = RECORD_HEADER_LEN + BODY_HEADER_LEN;
    let payload = match fixed.kind {
        KIND_BLANK => {
            if record.len() > payload_start {
                return Err(CodecError::Trailing(record.len() - payload_start));
            }
            EntryPayload::Blank
        }
        KIND_NORMAL => EntryPayload::Normal(Command::new(record.slice(payload_start..))),
        KIND_MEMBERSHIP => {
            let mut b = &record[payload_start..];
            let membership = get_membership(&mut b)?;
            if !b.is_empty() {
                return Err(CodecError::Trailing(b.len()));
            }
            EntryPayload::Membership(membership)
        }
        other => return Err(CodecError::UnknownKind(other)),
    };
    Ok(Entry { log_id: fixed.log_id, payload })
}

// === state files ===

/// Wraps a state-file payload with its CRC.
pub(crate) fn seal_state(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + payload.len());
    out.put_u32(crc32c::crc32c(payload));
    out.extend_from_slice(payload);
    out
}

/// Checks a state file's CRC and returns its payload.
pub(crate) fn open_state(file: &[u8]) -> Result<&[u8], CodecError> {
    if file.len() < 4 {
        return Err(CodecError::Truncated { needed: 4 - file.len() });
    }
    let (crc, payload) = file.split_at(4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32c::crc32c(payload);
    if stored != computed {
        return Err(CodecError::Crc { stored, computed });
    }
    Ok(payload)
}

pub(crate) fn encode_vote(vote: &Vote) -> Vec<u8> {
    let mut out = Vec::with_capacity(17);
    out.put_u64(vote.leader_id.term);
    out.put_u64(vote.leader_id.node_id);
    out.put_u8(vote.committed as u8);
    out
}

pub(crate) fn decode_vote(mut b: &[u8]) -> Result<Vote, CodecError> {
    need(b, 17)?;
    let leader_id = LeaderId::new(b.get_u64(), b.get_u64());
    let committed = b.get_u8() != 0;
    finish(b)?;
    Ok(Vote { leader_id, committed })
}

pub(crate) fn encode_log_id(log_id: &LogId) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    put_log_id(&mut out, log_id);
    out
}

pub(crate) fn decode_log_id(mut b: &[u8]) -> Result<LogId, CodecError> {
    let log_id = get_log_id(&mut b)?;
    finish(b)?;
    Ok(log_id)
}

pub(crate) fn encode_optional_log_id(log_id: Option<&LogId>) -> Vec<u8> {
    let mut out = Vec::with_capacity(25);
    put_optional_log_id(&mut out, log_id);
    out
}

pub(crate) fn decode_optional_log_id(mut b: &[u8]) -> Result<Option<LogId>, CodecError> {
    let log_id = get_optional_log_id(&mut b)?;
    finish(b)?;
    Ok(log_id)
}

/// A state machine's last applied membership: `log id (optional) | membership`.
pub(crate) fn encode_stored_membership(stored: &StoredMembership) -> Vec<u8> {
    let mut out = Vec::new();
    put_optional_log_id(&mut out, stored.log_id().as_ref());
    put_membership(&mut out, stored.membership());
    out
}

pub(crate) fn decode_stored_membership(mut b: &[u8]) -> Result<StoredMembership, CodecError> {
    let log_id = get_optional_log_id(&mut b)?;
    let membership = get_membership(&mut b)?;
    finish(b)?;
    Ok(StoredMembership::new(log_id, membership))
}

// === pieces, shared with snapshot encodings ===

/// `term u64 | node id u64 | index u64`.
pub(crate) fn put_log_id(out: &mut Vec<u8>, log_id: &LogId) {
    out.put_u64(log_id.leader_id.term);
    out.put_u64(log_id.leader_id.node_id);
    out.put_u64(log_id.index);
}

pub(crate) fn get_log_id(b: &mut &[u8]) -> Result<LogId, CodecError> {
    need(b, 24)?;
    let leader_id = CommittedLeaderId::new(b.get_u64(), b.get_u64());
    Ok(LogId { leader_id, index: b.get_u64() })
}

/// `present u8`, then a log id when present.
pub(crate) fn put_optional_log_id(out: &mut Vec<u8>, log_id: Option<&LogId>) {
    match log_id {
        None => out.put_u8(0),
        Some(id) => {
            out.put_u8(1);
            put_log_id(out, id);
        }
    }
}

pub(crate) fn get_optional_log_id(b: &mut &[u8]) -> Result<Option<LogId>, CodecError> {
    need(b, 1)?;
    match b.get_u8() {
        0 => Ok(None),
        _ => get_log_id(b).map(Some),
    }
}

pub(crate) fn put_membership(out: &mut Vec<u8>, membership: &Membership) {
    let configs = membership.get_joint_config();
    out.put_u32(configs.len() as u32);
    for config in configs {
        out.put_u32(config.len() as u32);
        for id in config {
            out.put_u64(*id);
        }
    }
    let nodes: Vec<(&NodeId, &BasicNode)> = membership.nodes().collect();
    out.put_u32(nodes.len() as u32);
    for (id, node) in nodes {
        out.put_u64(*id);
        out.put_u32(node.addr.len() as u32);
        out.extend_from_slice(node.addr.as_bytes());
    }
}

pub(crate) fn get_membership(b: &mut &[u8]) -> Result<Membership, CodecError> {
    need(b, 4)?;
    let config_count = b.get_u32() as usize;
    // Counts come from a CRC-checked record, but cap pre-allocation by what the bytes can hold.
    let mut configs = Vec::with_capacity(config_count.min(b.len() / 4));
    for _ in 0..config_count {
        need(b, 4)?;
        let voters = b.get_u32() as usize;
        need(b, voters.saturating_mul(8))?;
        configs.push((0..voters).map(|_| b.get_u64()).collect::<BTreeSet<NodeId>>());
    }
    need(b, 4)?;
    let node_count = b.get_u32() as usize;
    let mut nodes = BTreeMap::new();
    for _ in 0..node_count {
        need(b, 12)?;
        let id = b.get_u64();
        let len = b.get_u32() as usize;
        need(b, len)?;
        let addr = std::str::from_utf8(&b[..len]).map_err(|_| CodecError::BadAddress)?.to_owned();
        b.advance(len);
        nodes.insert(id, BasicNode { addr });
    }
    // Every voter is in `nodes` (Membership::new put it there), so this rebuilds it exactly.
    Ok(Membership::new(configs, nodes))
}

/// Index first so a record's body starts with the field recovery checks first.
fn put_log_id_index_first(out: &mut Vec<u8>, log_id: &LogId) {
    out.put_u64(log_id.index);
    out.put_u64(log_id.leader_id.term);
    out.put_u64(log_id.leader_id.node_id);
}

fn get_log_id_index_first(b: &mut &[u8]) -> Result<LogId, CodecError> {
    need(b, BODY_HEADER_LEN)?;
    let index = b.get_u64();
    let leader_id = CommittedLeaderId::new(b.get_u64(), b.get_u64());
    Ok(LogId { leader_id, index })
}

fn need(b: &[u8], n: usize) -> Result<(), CodecError> {
    if b.len() < n {
        return Err(CodecError::Truncated { needed: n - b.len() });
    }
    Ok(())
}

fn finish(b: &[u8]) -> Result<(), CodecError> {
    if !b.is_empty() {
        return Err(CodecError::Trailing(b.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(term: u64, node: u64, index: u64) -> LogId {
        LogId { leader_id: CommittedLeaderId::new(term, node), index }
    }

    fn round_trip(entry: Entry) {
        let mut buf = Vec::new();
        let len = encode_entry(&entry, &mut buf);
        assert_eq!(len, buf.len());
        let decoded = decode_record(Bytes::from(buf)).unwrap();
        assert_eq!(decoded, entry);
    }

    #[test]
    fn entries_round_trip() {
        round_trip(Entry { log_id: log_id(3, 1, 7), payload: EntryPayload::Blank });
        round_trip(Entry { log_id: log_id(u64::MAX, 9, 0), payload: EntryPayload::Normal(Command::new(Bytes::new())) });
        let batch = Bytes::from((0..=255u8).cycle().take(5000).collect::<Vec<u8>>());
        round_trip(Entry { log_id: log_id(1, 2, 3), payload: EntryPayload::Normal(Command::new(batch)) });

        let joint = vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([3, 4])];
        let nodes = BTreeMap::from([
            (1, BasicNode::new("corral-0.corral:9094")),
            (2, BasicNode::new("corral-1.corral:9094")),
            (3, BasicNode::new("")),
            (4, BasicNode::new("ünïcode:1")),
            (7, BasicNode::new("learner:9094")),
        ]);
        let membership = Membership::new(joint, nodes);
        assert_eq!(membership.learner_ids().collect::<Vec<_>>(), vec![7]);
        round_trip(Entry { log_id: log_id(4, 1, 100), payload: EntryPayload::Membership(membership) });
        round_trip(Entry { log_id: log_id(1, 0, 1), payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([5])], None)) });
    }

    #[test]
    fn record_layout_is_stable() {
        let entry = Entry { log_id: log_id(2, 1, 5), payload: EntryPayload::Normal(Command::new(Bytes::from_static(b"kv"))) };
        let mut buf = Vec::new();
        encode_entry(&entry, &mut buf);
        let body: &[u8] = &[
            0, 0, 0, 0, 0, 0, 0, 5, // index
            0, 0, 0, 0, 0, 0, 0, 2, // term
            0, 0, 0, 0, 0, 0, 0, 1, // leader node id
            1, // kind: normal
            b'k', b'v',
        ];
        assert_eq!(&buf[..4], &(body.len() as u32).to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&(body.len() as u32).to_be_bytes()), body);
        assert_eq!(&buf[4..8], &crc.to_be_bytes());
        assert_eq!(&buf[8..], body);
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let entry = Entry { log_id: log_id(2, 1, 5), payload: EntryPayload::Normal(Command::new(Bytes::from_static(b"abc"))) };
        let mut clean = Vec::new();
        encode_entry(&entry, &mut clean);
        for byte in 0..clean.len() {
            for bit in 0..8 {
                let mut bad = clean.clone();
                bad[byte] ^= 1 << bit;
                assert!(decode_record(Bytes::from(bad)).is_err(), "flip of byte {byte} bit {bit} went unnoticed");
            }
        }
        for cut in 0..clean.len() {
            assert!(decode_record(Bytes::copy_from_slice(&clean[..cut])).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn state_payloads_round_trip() {
        let vote = Vote { leader_id: LeaderId::new(7, 3), committed: true };
        assert_eq!(decode_vote(open_state(&seal_state(&encode_vote(&vote))).unwrap()).unwrap(), vote);
        let id = log_id(5, 2, 99);
        assert_eq!(decode_log_id(open_state(&seal_state(&encode_log_id(&id))).unwrap()).unwrap(), id);
        for committed in [None, Some(id)] {
            let file = seal_state(&encode_optional_log_id(committed.as_ref()));
            assert_eq!(decode_optional_log_id(open_state(&file).unwrap()).unwrap(), committed);
        }
        let mut bad = seal_state(&encode_vote(&vote));
        bad[6] ^= 0x40;
        assert!(matches!(open_state(&bad), Err(CodecError::Crc { .. })));
        assert!(open_state(&[1, 2]).is_err());
    }
}
