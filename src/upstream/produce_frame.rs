//! A Produce to an upstream broker as the pieces of one frame: its fields encoded into memory,
//! each large record set a piece of its own, so a producer's batches go on from the bytes they
//! arrived in instead of being copied into the frame. The connection writes the pieces with one
//! vectored write.
//!
//! The fields are written here as the Produce schema lays them out (v3–v12: topics by name); a
//! test checks the pieces against kafka-protocol's own encoding of the same request in every
//! version.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::Encodable;

use super::UpstreamError;
use crate::protocol::put_uvarint;

/// Record sets shorter than this are copied into the frame: an iovec of their own costs more.
const OWN_PIECE_AT_LEAST: usize = 8 << 10;
/// The first version whose fields are compact and tagged.
const FLEXIBLE_SINCE: i16 = 9;

/// The frame of `request` in `version`: `head` holds the size prefix (filled in here) and the
/// request header; the body follows in pieces.
pub(super) fn pieces(mut head: BytesMut, request: &ProduceRequest, version: i16) -> Result<Vec<Bytes>, UpstreamError> {
    if !(3..=12).contains(&version) {
        return Err(UpstreamError::Protocol(format!("Produce v{version} is not sent to an upstream")));
    }
    let failed = |e: anyhow::Error| UpstreamError::Protocol(format!("cannot encode Produce v{version}: {e}"));
    let size = head.len() - 4 + request.compute_size(version).map_err(failed)?;
    let prefix = u32::try_from(size).map_err(|_| UpstreamError::Protocol("request too large".into()))?;
    head[..4].copy_from_slice(&prefix.to_be_bytes());
    let mut frame = Frame { pieces: Vec::new(), buf: head, flexible: version >= FLEXIBLE_SINCE };
    frame.body(request).map_err(failed)?;
    let pieces = frame.finish();
    let encoded: usize = pieces.iter().map(Bytes::len).sum();
    match encoded == size + 4 {
        true => Ok(pieces),
        false => Err(UpstreamError::Protocol(format!("Produce v{version} encoded as {encoded} bytes, not {}", size + 4))),
    }
}

/// A frame being encoded: the pieces done, and the bytes in memory that come next.
struct Frame {
    pieces: Vec<Bytes>,
    buf: BytesMut,
    flexible: bool,
}

impl Frame {
    fn body(&mut self, request: &ProduceRequest) -> anyhow::Result<()> {
        self.string(request.transactional_id.as_ref().map(|id| &*id.0))?;
        self.buf.put_i16(request.acks);
        self.buf.put_i32(request.timeout_ms);
        self.len(request.topic_data.len())?;
        for topic in &request.topic_data {
            self.string(Some(&*topic.name.0))?;
            self.len(topic.partition_data.len())?;
            for partition in &topic.partition_data {
                self.partition(partition)?;
            }
            self.no_tagged_fields(topic.unknown_tagged_fields.is_empty())?;
        }
        self.no_tagged_fields(request.unknown_tagged_fields.is_empty())
    }

    fn partition(&mut self, partition: &PartitionProduceData) -> anyhow::Result<()> {
        self.buf.put_i32(partition.index);
        match &partition.records {
            None => self.null(),
            Some(records) => {
                self.len(records.len())?;
                if records.len() >= OWN_PIECE_AT_LEAST {
                    // The bytes so far become a piece, and the records the next one.
                    self.pieces.push(self.buf.split().freeze());
                    self.pieces.push(records.clone());
                } else {
                    self.buf.put_slice(records);
                }
            }
        }
        self.no_tagged_fields(partition.unknown_tagged_fields.is_empty())
    }

    /// A nullable string (a topic name is never null, and is written alike).
    fn string(&mut self, value: Option<&str>) -> anyhow::Result<()> {
        match value {
            None if self.flexible => self.buf.put_u8(0),
            None => self.buf.put_i16(-1),
            Some(s) if self.flexible => {
                put_uvarint(&mut self.buf, u32::try_from(s.len() + 1)?);
                self.buf.put_slice(s.as_bytes());
            }
            Some(s) => {
                self.buf.put_i16(i16::try_from(s.len())?);
                self.buf.put_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    /// The length of an array or of bytes that follow.
    fn len(&mut self, len: usize) -> anyhow::Result<()> {
        match self.flexible {
            true => put_uvarint(&mut self.buf, u32::try_from(len + 1)?),
            false => self.buf.put_i32(i32::try_from(len)?),
        }
        Ok(())
    }

    /// Null bytes or a null array.
    fn null(&mut self) {
        match self.flexible {
            true => self.buf.put_u8(0),
            false => self.buf.put_i32(-1),
        }
    }

    /// corral adds no tagged field to what it sends upstream, and passes on none.
    fn no_tagged_fields(&mut self, none: bool) -> anyhow::Result<()> {
        anyhow::ensure!(none, "tagged fields are not passed on");
        if self.flexible {
            self.buf.put_u8(0);
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<Bytes> {
        if !self.buf.is_empty() {
            self.pieces.push(self.buf.freeze());
        }
        self.pieces
    }
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use kafka_protocol::messages::produce_request::TopicProduceData;
    use kafka_protocol::messages::{TopicName, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn partition(index: i32, records: Option<usize>) -> PartitionProduceData {
        let records = records.map(|len| Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>()));
        PartitionProduceData::default().with_index(index).with_records(records)
    }

    fn request(transactional_id: Option<&str>) -> ProduceRequest {
        let topic = |name: &str, partitions| {
            TopicProduceData::default().with_name(TopicName(StrBytes::from_string(name.into()))).with_partition_data(partitions)
        };
        ProduceRequest::default()
            .with_transactional_id(transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.into()))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                topic("orders", vec![partition(0, Some(100 << 10)), partition(3, Some(100)), partition(1, None)]),
                topic("payments", vec![partition(7, Some(OWN_PIECE_AT_LEAST)), partition(2, Some(OWN_PIECE_AT_LEAST - 1))]),
            ])
    }

    #[test]
    fn the_pieces_are_what_kafka_protocol_encodes_in_every_version() {
        for version in 3..=12 {
            for transactional_id in [None, Some("tx-1")] {
                let request = request(transactional_id);
                let mut head = BytesMut::new();
                head.put_slice(b"\0\0\0\0head");
                let pieces = pieces(head, &request, version).unwrap();
                let mut expected = BytesMut::new();
                request.encode(&mut expected, version).unwrap();
                let prefix = ((4 + expected.len()) as u32).to_be_bytes();
                let expected = [&prefix[..], b"head", &expected].concat();
                assert_eq!(pieces.concat(), expected, "v{version}, transactional id {transactional_id:?}");
            }
        }
    }

    #[test]
    fn large_record_sets_are_pieces_of_their_own_not_copies() {
        let request = request(None);
        let pieces = pieces(BytesMut::from(&[0u8; 4][..]), &request, 9).unwrap();
        let records: Vec<&Bytes> = request.topic_data.iter().flat_map(|t| &t.partition_data).filter_map(|p| p.records.as_ref()).collect();
        let own_piece = |r: &Bytes| pieces.iter().any(|p| p.as_ptr() == r.as_ptr() && p.len() == r.len());
        assert!(own_piece(records[0]), "100 KiB");
        assert!(own_piece(records[2]), "exactly the threshold");
        assert!(!own_piece(records[1]) && !own_piece(records[3]), "small record sets are copied");
        assert_eq!(pieces.len(), 5, "fields, records, fields, records, fields");
    }

    #[test]
    fn versions_it_does_not_send_and_tagged_fields_are_refused() {
        assert!(pieces(BytesMut::from(&[0u8; 4][..]), &request(None), 13).is_err());
        let mut tagged = request(None);
        tagged.unknown_tagged_fields.insert(5, Bytes::from_static(b"x"));
        assert!(pieces(BytesMut::from(&[0u8; 4][..]), &tagged, 9).is_err());
    }
}
