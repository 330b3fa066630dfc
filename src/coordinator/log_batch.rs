//! A coordinator partition's record batches as `__consumer_offsets` stores them: group records
//! in one uncompressed v2 batch whose first record carries the Raft entry it was applied from
//! (built here, stamped when applied, read back at load), and the bytes such a batch takes.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use super::records::{GroupRecord, StoredRecord};
use crate::raft::{LogId, LOG_ID_LEN};
use crate::record_batch::{read_varint, HEADER_LEN};

/// The record header that carries the Raft entry a batch was applied from.
pub const LOG_ID_HEADER: &str = "corral.log_id";
/// Where the CRC of a v2 batch sits, and where the bytes it covers begin.
const CRC_AT: usize = 17;
const CRC_START: usize = 21;

/// Encodes records as one uncompressed v2 batch. The first record carries a zeroed
/// [`LOG_ID_HEADER`], filled in by [`stamp_log_id`] when the batch is applied.
pub fn encode_batch(records: &[StoredRecord], now: i64) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: now,
            key: Some(r.key.clone()),
            value: r.value.clone(),
            headers: if i == 0 {
                [(StrBytes::from_static_str(LOG_ID_HEADER), Some(Bytes::from_static(&[0; LOG_ID_LEN])))].into_iter().collect()
            } else {
                Default::default()
            },
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None })
        .expect("coordinator records always encode");
    buf.freeze()
}

/// Writes `log_id` into the [`LOG_ID_HEADER`] of a batch built by [`encode_batch`] and recomputes
/// its CRC. The header value is the last bytes of the first record.
pub fn stamp_log_id(batch: &mut [u8], log_id: &LogId) -> Result<(), &'static str> {
    let mut rest = batch.get(HEADER_LEN..).ok_or("batch shorter than its header")?;
    let before = rest.len();
    let record_len = read_varint(&mut rest).ok_or("bad first record length")?;
    let end = HEADER_LEN + (before - rest.len()) + usize::try_from(record_len).map_err(|_| "negative record length")?;
    let value_at = end.checked_sub(LOG_ID_LEN).ok_or("first record too short")?;
    // The header's key and value length precede the value; check them, so only our batches are
    // ever written into.
    let key = LOG_ID_HEADER.as_bytes();
    let key_at = value_at.checked_sub(1 + key.len()).ok_or("first record too short")?;
    if end > batch.len() || batch[value_at - 1] != (LOG_ID_LEN as u8) << 1 || &batch[key_at..value_at - 1] != key {
        return Err("first record does not end with a log id header");
    }
    batch[value_at..end].copy_from_slice(&crate::raft::log_id_bytes(log_id));
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The log id stamped into a record, if it carries one (records of batches written before the
/// coordinator ran on Raft carry none).
pub fn stamped_log_id(record: &Record) -> Option<LogId> {
    let value = record.headers.get(&StrBytes::from_static_str(LOG_ID_HEADER))?.as_ref()?;
    crate::raft::parse_log_id(value).ok().filter(|id| id.index > 0 || id.leader_id.term > 0)
}

/// Decodes one batch into its records.
pub fn decode_batch(mut batch: Bytes) -> Result<Vec<Record>, &'static str> {
    RecordBatchDecoder::decode(&mut batch).map(|set| set.records).map_err(|_| "coordinator batch does not decode")
}

/// The group records of decoded records, skipping (with a warning) any that do not parse.
pub fn group_records(records: Vec<Record>, min_offset: i64) -> impl Iterator<Item = GroupRecord> {
    records.into_iter().filter(move |r| r.offset >= min_offset).filter_map(|record| {
        let key = record.key?;
        match GroupRecord::decode(&key, record.value.as_deref()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(offset = record.offset, error = %e, "skipping unreadable coordinator record");
                None
            }
        }
    })
}

/// A v2 record's framing at its longest: length, attributes, timestamp and offset deltas, key
/// and value lengths, header count (varints of 5 bytes, 10 for the timestamp).
const RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;

/// The bytes a batch of `records` takes at most (see [`StoredRecord::batch_bytes`]); the first
/// record's log-id header and the batch header are included.
pub fn batch_bytes(records: &[StoredRecord]) -> usize {
    HEADER_LEN + LOG_ID_HEADER_BYTES + records.iter().map(StoredRecord::batch_bytes).sum::<usize>()
}

/// The first record's `corral.log_id` header: its key and value with their lengths.
const LOG_ID_HEADER_BYTES: usize = 5 + LOG_ID_HEADER.len() + 5 + crate::raft::LOG_ID_LEN;

impl StoredRecord {
    /// The bytes this record takes in a v2 record batch, at most: its key and value plus the
    /// record's own framing with every varint at its longest.
    pub fn batch_bytes(&self) -> usize {
        RECORD_OVERHEAD + self.key.len() + self.value.as_ref().map_or(0, Bytes::len)
    }
}

/// Records per batch written, at most (batches are bounded by bytes too).
const MAX_RECORDS_PER_BATCH: usize = 500;

/// Splits records into batches of at most `max_bytes` and [`MAX_RECORDS_PER_BATCH`] records each, in
/// order; a record larger than `max_bytes` on its own is a batch of its own (the partition's log
/// takes any batch the Raft log committed).
pub fn split_records(records: Vec<StoredRecord>, max_bytes: usize) -> Vec<Vec<StoredRecord>> {
    let empty = batch_bytes(&[]);
    let mut pieces: Vec<Vec<StoredRecord>> = Vec::new();
    let mut bytes = empty;
    for record in records {
        let size = record.batch_bytes();
        match pieces.last_mut() {
            Some(piece) if bytes + size <= max_bytes && piece.len() < MAX_RECORDS_PER_BATCH => {
                bytes += size;
                piece.push(record);
            }
            _ => {
                bytes = empty + size;
                pieces.push(vec![record]);
            }
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;
    use crate::coordinator::records::OffsetValue;

    fn encoded(records: &[GroupRecord]) -> Vec<StoredRecord> {
        records.iter().map(GroupRecord::encode).collect()
    }

    fn offset(partition: i32, offset: i64) -> GroupRecord {
        GroupRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition,
            value: Some(OffsetValue { offset, leader_epoch: -1, metadata: String::new(), commit_timestamp: 1, expire_timestamp: None }),
        }
    }

    #[test]
    fn a_stamped_batch_is_valid_and_carries_its_log_id() {
        let batch = encode_batch(&encoded(&[offset(0, 5), offset(1, 7)]), 1_000);
        let decoded = decode_batch(batch.clone()).unwrap();
        assert_eq!(stamped_log_id(&decoded[0]), None, "unstamped batches carry zeros");

        let log_id = LogId { leader_id: CommittedLeaderId::new(3, 1), index: 4242 };
        let mut stamped = batch.to_vec();
        stamp_log_id(&mut stamped, &log_id).unwrap();
        crate::record_batch::validate(&stamped).expect("CRC recomputed");
        let decoded = decode_batch(Bytes::from(stamped)).unwrap();
        assert_eq!(stamped_log_id(&decoded[0]), Some(log_id));
        assert!(decoded[1].headers.is_empty());
        let records: Vec<GroupRecord> = group_records(decoded, 0).collect();
        assert_eq!(records, vec![offset(0, 5), offset(1, 7)]);
    }

    #[test]
    fn stamping_refuses_a_batch_without_the_header() {
        // Our own batch with the header's key changed (and the CRC made valid again): nothing in
        // it may be overwritten.
        let mut bytes = encode_batch(&encoded(&[offset(0, 5)]), 1_000).to_vec();
        let key = LOG_ID_HEADER.as_bytes();
        let at = bytes.windows(key.len()).position(|w| w == key).expect("header key in the batch");
        bytes[at] = b'C';
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
        let original = bytes.clone();
        let log_id = LogId { leader_id: CommittedLeaderId::new(1, 1), index: 1 };
        assert!(stamp_log_id(&mut bytes, &log_id).is_err());
        assert_eq!(bytes, original, "nothing written");
        assert!(stamp_log_id(&mut [0u8; 10], &log_id).is_err());
    }
}
