//! Kafka's record batch, format v2 ("magic 2"): the unit that producers send, segments store and
//! consumers fetch.
//!
//! corral never re-encodes a batch on the produce or fetch path. It reads and checks the 61-byte
//! header, verifies the CRC-32C that covers everything after it, and rewrites only the fields the
//! broker owns (base offset and partition leader epoch), which lie outside the CRC. Records stay
//! compressed as the producer sent them. Only log compaction writes a batch anew, with the records
//! it keeps, byte for byte ([`records`] walks them), or with their timestamps based on the batch's
//! delete horizon.
//!
//! The delete horizon (KIP-534) is when a compacted batch's tombstones may go: the first
//! compaction that keeps a tombstone sets it to its own time plus `delete.retention.ms`, in the
//! base timestamp, with attribute bit 6. Each record's timestamp delta is then counted from it, so
//! every record's timestamp stays what it was.
//!
//! ```text
//! offset  size  field
//!      0     8  base_offset
//!      8     4  batch_length            (bytes after this field)
//!     12     4  partition_leader_epoch
//!     16     1  magic                   (2)
//!     17     4  crc                     (CRC-32C of bytes 21..end)
//!     21     2  attributes              (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control,
//!                                         6 delete horizon)
//!     23     4  last_offset_delta
//!     27     8  base_timestamp          (the delete horizon when bit 6 is set)
//!     35     8  max_timestamp
//!     43     8  producer_id
//!     51     2  producer_epoch
//!     53     4  base_sequence
//!     57     4  records_count
//!     61        records
//! ```

use bytes::Buf;

pub use crate::decompress::Compression;

/// Size of the fixed batch header.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batch_length` counts: base offset and the length itself.
pub const LOG_OVERHEAD: usize = 12;
/// Position of the first byte covered by the CRC.
const CRC_START: usize = 21;
const MAGIC_V2: i8 = 2;
/// The codec bits of a batch's attributes.
const COMPRESSION_MASK: i16 = 0x07;
/// The attribute bit of a batch whose base timestamp is its delete horizon.
const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Why a batch was refused. Each maps to one Kafka error code in the produce handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch is truncated: {have} bytes, need {need}")]
    Truncated { have: usize, need: usize },
    #[error("record batch magic {0} is not supported (only v2)")]
    UnsupportedMagic(i8),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record batch has invalid compression codec {0}")]
    InvalidCompression(u8),
    #[error("record batch is inconsistent: {0}")]
    Invalid(&'static str),
    #[error("record batch cannot be looked inside: {0}")]
    Decompress(#[from] crate::decompress::DecompressError),
}

/// The decoded fixed header of a v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header without checking the CRC. Needs [`HEADER_LEN`] bytes.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_LEN {
            return Err(BatchError::Truncated { have: buf.len(), need: HEADER_LEN });
        }
        let mut b = &buf[..HEADER_LEN];
        let header = BatchHeader {
            base_offset: b.get_i64(),
            batch_length: b.get_i32(),
            partition_leader_epoch: b.get_i32(),
            magic: b.get_i8(),
            crc: b.get_u32(),
            attributes: b.get_i16(),
            last_offset_delta: b.get_i32(),
            base_timestamp: b.get_i64(),
            max_timestamp: b.get_i64(),
            producer_id: b.get_i64(),
            producer_epoch: b.get_i16(),
            base_sequence: b.get_i32(),
            records_count: b.get_i32(),
        };
        if header.magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(header.magic));
        }
        Ok(header)
    }

    /// Total bytes of the batch on the wire, including the offset and length fields.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    pub fn compression(&self) -> Result<Compression, BatchError> {
        match self.attributes & COMPRESSION_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::InvalidCompression(other as u8)),
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    /// When compaction may remove the batch's tombstones, once a compaction has set it.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_FLAG != 0).then_some(self.base_timestamp)
    }

    /// An idempotent or transactional producer wrote this batch.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence number of the last record (sequences wrap at `i32::MAX`).
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        (last % (i32::MAX as i64 + 1)) as i32
    }
}

/// Checks one complete batch (`buf` holds exactly the batch) and returns its header.
///
/// Checks: magic 2, declared length equals the buffer, CRC-32C, codec, record count against the
/// offset delta, and for uncompressed batches that the records exactly fill the payload.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = validate_stored(buf)?;
    if header.records_count == 0 {
        return Err(BatchError::Invalid("record count must be positive"));
    }
    if header.last_offset_delta != header.records_count - 1 {
        return Err(BatchError::Invalid("last offset delta does not match the record count"));
    }
    Ok(header)
}

/// [`validate`] for a batch read back from a segment: compaction may have removed records from
/// it, keeping its last offset delta (as Kafka's cleaner does, so producer sequences stay whole),
/// so it may hold fewer records than its offsets span, or none (a producer's last batch).
pub fn validate_stored(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    if header.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(BatchError::Invalid("batch length smaller than the header"));
    }
    if header.total_len() != buf.len() {
        return Err(BatchError::Truncated { have: buf.len(), need: header.total_len() });
    }
    let computed = crc32c::crc32c(&buf[CRC_START..]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch { stored: header.crc, computed });
    }
    let compression = header.compression()?;
    if header.records_count < 0 {
        return Err(BatchError::Invalid("record count is negative"));
    }
    if header.last_offset_delta < header.records_count - 1 || header.last_offset_delta < 0 {
        return Err(BatchError::Invalid("more records than the offsets the batch spans"));
    }
    let base_is_first_timestamp = header.delete_horizon_ms().is_none();
    if base_is_first_timestamp && header.max_timestamp < header.base_timestamp && header.max_timestamp != -1 {
        return Err(BatchError::Invalid("max timestamp is below the base timestamp"));
    }
    if compression == Compression::None {
        check_record_framing(&buf[HEADER_LEN..], header.records_count)?;
    } else if header.records_count as usize > crate::decompress::MAX_DECOMPRESSED_BYTES / crate::decompress::MIN_RECORD_BYTES {
        // More records than could ever be looked inside: no real producer writes such a batch.
        return Err(BatchError::Invalid("record count does not fit any batch corral can decompress"));
    }
    Ok(header)
}

/// Walks the length prefixes of uncompressed records: exactly `count` records must fill `payload`.
fn check_record_framing(mut payload: &[u8], count: i32) -> Result<(), BatchError> {
    for _ in 0..count {
        let len = read_varint(&mut payload).ok_or(BatchError::Invalid("record length is not a varint"))?;
        if len < 0 || len as usize > payload.len() {
            return Err(BatchError::Invalid("record length exceeds the batch"));
        }
        payload = &payload[len as usize..];
    }
    if !payload.is_empty() {
        return Err(BatchError::Invalid("bytes after the last record"));
    }
    Ok(())
}

/// Reads a zig-zag varint (Kafka's signed varint) of at most 5 bytes.
pub fn read_varint(buf: &mut &[u8]) -> Option<i32> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let byte = *buf.first()?;
        *buf = &buf[1..];
        value |= ((byte & 0x7f) as u32) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    None
}

/// Reads a zig-zag varlong of at most 10 bytes.
pub fn read_varlong(buf: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let byte = *buf.first()?;
        *buf = &buf[1..];
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

/// Offset and timestamp of each record in a batch, decompressing if needed (with a cap: see
/// [`crate::decompress`]). Used by the rare paths that must look inside a batch (ListOffsets by
/// timestamp or max timestamp). Only each record's framing is read, nothing is decoded whole.
pub fn record_timestamps(batch: &[u8]) -> Result<Vec<(i64, i64)>, BatchError> {
    let (header, payload) = payload(batch)?;
    Ok(records(&header, &payload)?.iter().map(|r| (r.offset, r.timestamp)).collect())
}

/// One record of a batch, as stored.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// The record's bytes, its length prefix included, to be written again unchanged.
    pub bytes: &'a [u8],
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    /// A null value: a tombstone, which deletes its key in a compacted topic.
    pub tombstone: bool,
}

/// The records of a batch (`payload` is what [`payload`] gave for it), in order.
pub fn records<'a>(header: &BatchHeader, payload: &'a [u8]) -> Result<Vec<RawRecord<'a>>, BatchError> {
    let bad = || BatchError::Invalid("record framing does not match the record count");
    let log_append = header.attributes & 0x08 != 0;
    let mut out = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut rest = payload;
    for _ in 0..header.records_count {
        let before = rest;
        let len = usize::try_from(read_varint(&mut rest).ok_or_else(bad)?).map_err(|_| bad())?;
        let mut record = rest.get(..len).ok_or_else(bad)?;
        rest = &rest[len..];
        let bytes = &before[..before.len() - rest.len()];
        record = record.get(1..).ok_or_else(bad)?; // attributes
        let timestamp_delta = read_varlong(&mut record).ok_or_else(bad)?;
        let offset_delta = read_varint(&mut record).ok_or_else(bad)?;
        let key = read_nullable_bytes(&mut record).ok_or_else(bad)?;
        let value_len = read_varint(&mut record).ok_or_else(bad)?;
        let timestamp = if log_append { header.max_timestamp } else { header.base_timestamp.saturating_add(timestamp_delta) };
        out.push(RawRecord {
            bytes,
            offset: header.base_offset.saturating_add(offset_delta as i64),
            timestamp,
            key,
            tombstone: value_len < 0,
        });
    }
    if !rest.is_empty() {
        return Err(BatchError::Invalid("bytes after the last record"));
    }
    Ok(out)
}

/// A batch's records uncompressed (with the cap of [`crate::decompress`]).
pub fn payload(batch: &[u8]) -> Result<(BatchHeader, bytes::Bytes), BatchError> {
    let header = BatchHeader::parse(batch)?;
    let data = batch.get(HEADER_LEN..header.total_len()).ok_or(BatchError::Truncated { have: batch.len(), need: header.total_len() })?;
    Ok((header, crate::decompress::decompress(data, header.compression()?, header.records_count)?))
}

/// The indexes of the records without a key: a compacted topic refuses a batch that has one.
pub fn records_without_key(batch: &[u8]) -> Result<Vec<usize>, BatchError> {
    let (header, payload) = payload(batch)?;
    Ok(records(&header, &payload)?.iter().enumerate().filter(|(_, r)| r.key.is_none()).map(|(i, _)| i).collect())
}

fn read_nullable_bytes<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = read_varint(buf)?;
    if len < 0 {
        return Some(None);
    }
    let bytes = buf.get(..len as usize)?;
    *buf = &buf[len as usize..];
    Some(Some(bytes))
}

/// A batch holding only `records` (some of `original`'s, uncompressed), compressed with the
/// original's codec. Its offsets and producer fields stay the original's. With `delete_horizon`
/// (a batch that has none yet), the base timestamp becomes that horizon and each record's
/// timestamp delta is counted from it; otherwise the records' bytes are unchanged and their deltas
/// still hold. The max timestamp is that of the records kept (the batch's own under log-append
/// time, and the original's when none is kept).
pub fn with_records(
    original: &BatchHeader,
    original_bytes: &[u8],
    records: &[RawRecord<'_>],
    delete_horizon: Option<i64>,
) -> Result<Vec<u8>, BatchError> {
    let mut payload = Vec::with_capacity(records.iter().map(|r| r.bytes.len() + 8).sum());
    for record in records {
        match delete_horizon {
            None => payload.extend_from_slice(record.bytes),
            Some(horizon) => rebased(record, horizon, &mut payload)?,
        }
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&original_bytes[..HEADER_LEN]);
    let mut attributes = original.attributes;
    if let Some(horizon) = delete_horizon {
        attributes |= DELETE_HORIZON_FLAG;
        out[27..35].copy_from_slice(&horizon.to_be_bytes());
    }
    if records.is_empty() {
        // An empty batch is written uncompressed, as Kafka writes one.
        attributes &= !COMPRESSION_MASK;
    } else {
        out.extend_from_slice(&crate::decompress::compress(&payload, original.compression()?)?);
    }
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    if original.attributes & 0x08 == 0 {
        let max = records.iter().map(|r| r.timestamp).max().unwrap_or(original.max_timestamp);
        out[35..43].copy_from_slice(&max.to_be_bytes());
    }
    out[57..61].copy_from_slice(&(records.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Appends `record` with its timestamp delta counted from `base`: the length prefix and the delta
/// are written anew, the rest of its bytes as they were.
fn rebased(record: &RawRecord<'_>, base: i64, out: &mut Vec<u8>) -> Result<(), BatchError> {
    let bad = || BatchError::Invalid("record framing does not match the record count");
    let mut rest = record.bytes;
    read_varint(&mut rest).ok_or_else(bad)?;
    let (&attributes, mut after) = rest.split_first().ok_or_else(bad)?;
    read_varlong(&mut after).ok_or_else(bad)?;
    let mut body = Vec::with_capacity(1 + 10 + after.len());
    body.push(attributes);
    put_varlong(&mut body, record.timestamp.wrapping_sub(base));
    body.extend_from_slice(after);
    put_varlong(out, body.len() as i64);
    out.extend_from_slice(&body);
    Ok(())
}

/// Writes a zig-zag varlong (Kafka's signed varint, of any width up to 64 bits).
fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    /// Encodes `n` records as one batch, the way a producer would.
    pub(crate) fn batch(n: usize, codec: Codec, producer: Option<(i64, i16, i32)>, ts: i64) -> BytesMut {
        let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
        let value = [b'v'; 100];
        let pairs: Vec<_> = keys.iter().map(|k| (Some(k.as_str()), Some(&value[..]))).collect();
        batch_of(&pairs, codec, producer, ts, 1)
    }

    /// Encodes `(key, value)` records as one batch; record `i` is written at `ts + i * step`.
    pub(crate) fn batch_of(
        pairs: &[(Option<&str>, Option<&[u8]>)],
        codec: Codec,
        producer: Option<(i64, i16, i32)>,
        ts: i64,
        step: i64,
    ) -> BytesMut {
        let records: Vec<Record> = pairs
            .iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: -1,
                producer_id: producer.map_or(-1, |p| p.0),
                producer_epoch: producer.map_or(-1, |p| p.1),
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: producer.map_or(i as i32 - 1, |p| p.2.wrapping_add(i as i32)),
                timestamp: ts + i as i64 * step,
                key: key.map(|k| k.as_bytes().to_vec().into()),
                value: value.map(|v| v.to_vec().into()),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: codec }).unwrap();
        buf
    }

    #[test]
    fn validates_a_producer_batch() {
        let b = batch(3, Codec::None, None, 1000);
        let h = validate(&b).unwrap();
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1000);
        assert_eq!(h.max_timestamp, 1002);
        assert_eq!(h.total_len(), b.len());
        assert!(!h.has_producer_id());
    }

    #[test]
    fn every_codec_validates() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let b = batch(10, codec, None, 5);
            let h = validate(&b).unwrap();
            assert_ne!(h.compression().unwrap(), Compression::None);
            let ts = record_timestamps(&b).unwrap();
            assert_eq!(ts.len(), 10);
            assert_eq!(ts[9], (9, 14));
        }
    }

    #[test]
    fn a_delete_horizon_keeps_every_records_timestamp() {
        let value = [b'v'; 10];
        let pairs: Vec<(Option<&str>, Option<&[u8]>)> = vec![(Some("a"), Some(&value[..])), (Some("b"), None), (Some("c"), None)];
        for codec in [Codec::None, Codec::Zstd] {
            // Records written long before the horizon, 1 s apart.
            let original = batch_of(&pairs, codec, None, 1_000, 1_000);
            let (header, payload) = payload(&original).unwrap();
            let kept: Vec<RawRecord<'_>> = records(&header, &payload).unwrap().into_iter().skip(1).collect();
            let horizon = 9_000_000_000_000;
            let rebuilt = with_records(&header, &original, &kept, Some(horizon)).unwrap();
            let stored = validate_stored(&rebuilt).unwrap();
            assert_eq!(stored.delete_horizon_ms(), Some(horizon), "{codec:?}");
            assert_eq!(stored.max_timestamp, 3_000);
            assert_eq!(record_timestamps(&rebuilt).unwrap(), vec![(1, 2_000), (2, 3_000)]);
            // kafka-protocol's decoder, as a client's, reads the same timestamps.
            let decoded = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes::Bytes::from(rebuilt)).unwrap();
            let seen: Vec<(i64, i64, bool)> = decoded.records.iter().map(|r| (r.offset, r.timestamp, r.value.is_none())).collect();
            assert_eq!(seen, vec![(1, 2_000, true), (2, 3_000, true)], "{codec:?}");
            // A batch without the flag: its base timestamp is its first record's.
            assert_eq!(header.delete_horizon_ms(), None);
        }
    }

    #[test]
    fn crc_mismatch_is_detected() {
        let mut b = batch(2, Codec::None, None, 0);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(validate(&b), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn truncated_and_wrong_magic() {
        let b = batch(2, Codec::None, None, 0);
        assert!(matches!(validate(&b[..b.len() - 1]), Err(BatchError::Truncated { .. })));
        assert!(matches!(validate(&b[..20]), Err(BatchError::Truncated { .. })));
        let mut m = b.clone();
        m[16] = 1;
        assert_eq!(validate(&m), Err(BatchError::UnsupportedMagic(1)));
    }

    #[test]
    fn base_offset_and_epoch_are_outside_the_crc() {
        let mut b = batch(2, Codec::None, None, 0);
        b[0..8].copy_from_slice(&1234i64.to_be_bytes());
        b[12..16].copy_from_slice(&7i32.to_be_bytes());
        let h = validate(&b).unwrap();
        assert_eq!(h.base_offset, 1234);
        assert_eq!(h.partition_leader_epoch, 7);
    }

    #[test]
    fn sequences() {
        let b = batch(3, Codec::None, Some((7, 1, 5)), 0);
        let mut h = validate(&b).unwrap();
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (7, 1, 5));
        assert_eq!(h.last_sequence(), 7);
        // Sequences wrap from i32::MAX to 0.
        h.base_sequence = i32::MAX - 1;
        assert_eq!(h.last_sequence(), 0);
    }

    #[test]
    fn varints() {
        let mut b: &[u8] = &[0x01, 0x02, 0xac, 0x02];
        assert_eq!(read_varint(&mut b), Some(-1));
        assert_eq!(read_varint(&mut b), Some(1));
        assert_eq!(read_varint(&mut b), Some(150));
        let mut long: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(read_varint(&mut long), None);
    }
}
