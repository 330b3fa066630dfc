//! The Fetch response, encoded by corral so that record data never passes through memory.
//!
//! The `kafka-protocol` crate holds records as `Bytes`; sending a segment with sendfile(2) needs
//! the response as `[bytes, file range, bytes, file range, …]` with its total length known before
//! the first byte is written. This encoder produces exactly that, for Fetch v4–v18 (flexible
//! encoding from v12). A test checks it byte for byte against the crate's encoder.

use bytes::{BufMut, BytesMut};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{put_uvarint, Chunk, ChunkedFrame};

/// The response of one Fetch, before encoding.
#[derive(Debug, Default)]
pub struct FetchReply {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<FetchTopicReply>,
}

#[derive(Debug)]
pub struct FetchTopicReply {
    /// Used up to v12.
    pub name: StrBytes,
    /// Used from v13.
    pub topic_id: Uuid,
    pub partitions: Vec<FetchPartitionReply>,
}

#[derive(Debug)]
pub struct FetchPartitionReply {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Record data: a segment-file range, or bytes or pipes (from an upstream broker); `None`
    /// is sent as an empty record set.
    pub records: Option<Chunk>,
    /// The aborted transactions among the records, for a read-committed consumer to skip.
    pub aborted_transactions: Vec<AbortedTransaction>,
}

/// A transaction aborted within the fetched records: its producer and its first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

impl FetchPartitionReply {
    /// A partition answered with an error and no data.
    pub fn error(partition_index: i32, error_code: i16) -> FetchPartitionReply {
        FetchPartitionReply {
            partition_index,
            error_code,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: None,
            aborted_transactions: Vec::new(),
        }
    }
}

/// Encodes a whole response frame (size prefix, header, body) as chunks.
pub fn encode(correlation_id: i32, version: i16, reply: FetchReply) -> ChunkedFrame {
    let flexible = version >= 12;
    let mut w = Writer { buf: BytesMut::with_capacity(256), chunks: Vec::new(), len: 0 };
    w.buf.put_i32(0); // size, patched below
    w.buf.put_i32(correlation_id);
    if flexible {
        w.buf.put_u8(0); // response header tagged fields
    }
    w.buf.put_i32(reply.throttle_time_ms);
    if version >= 7 {
        w.buf.put_i16(reply.error_code);
        w.buf.put_i32(reply.session_id);
    }
    w.array_len(reply.topics.len(), flexible);
    for topic in reply.topics {
        if version >= 13 {
            w.buf.put_slice(topic.topic_id.as_bytes());
        } else {
            w.string(&topic.name, flexible);
        }
        w.array_len(topic.partitions.len(), flexible);
        for p in topic.partitions {
            w.buf.put_i32(p.partition_index);
            w.buf.put_i16(p.error_code);
            w.buf.put_i64(p.high_watermark);
            w.buf.put_i64(p.last_stable_offset);
            if version >= 5 {
                w.buf.put_i64(p.log_start_offset);
            }
            w.array_len(p.aborted_transactions.len(), flexible);
            for aborted in &p.aborted_transactions {
                w.buf.put_i64(aborted.producer_id);
                w.buf.put_i64(aborted.first_offset);
                if flexible {
                    w.buf.put_u8(0); // aborted transaction tagged fields
                }
            }
            if version >= 11 {
                w.buf.put_i32(-1); // preferred read replica
            }
            let len = p.records.as_ref().map_or(0, Chunk::len);
            if flexible {
                put_uvarint(&mut w.buf, len as u32 + 1);
            } else {
                w.buf.put_i32(len as i32);
            }
            match p.records {
                Some(records) if !records.is_empty() => w.records(records),
                _ => {}
            }
            if flexible {
                w.buf.put_u8(0); // partition tagged fields
            }
        }
        if flexible {
            w.buf.put_u8(0); // topic tagged fields
        }
    }
    if flexible {
        w.buf.put_u8(0); // response tagged fields
    }
    w.finish()
}

struct Writer {
    buf: BytesMut,
    chunks: Vec<Chunk>,
    len: u64,
}

impl Writer {
    fn array_len(&mut self, n: usize, flexible: bool) {
        if flexible {
            put_uvarint(&mut self.buf, n as u32 + 1);
        } else {
            self.buf.put_i32(n as i32);
        }
    }

    fn string(&mut self, s: &str, flexible: bool) {
        if flexible {
            put_uvarint(&mut self.buf, s.len() as u32 + 1);
        } else {
            self.buf.put_i16(s.len() as i16);
        }
        self.buf.put_slice(s.as_bytes());
    }

    fn flush_bytes(&mut self) {
        if !self.buf.is_empty() {
            let bytes = self.buf.split().freeze();
            self.len += bytes.len() as u64;
            self.chunks.push(Chunk::Bytes(bytes));
        }
    }

    /// Records go out as they are (a file range, bytes from an upstream broker, pipes), not
    /// copied into the frame's buffer.
    fn records(&mut self, records: Chunk) {
        self.flush_bytes();
        self.len += records.len();
        self.chunks.push(records);
    }

    fn finish(mut self) -> ChunkedFrame {
        self.flush_bytes();
        let size = (self.len - 4) as i32;
        if let Some(Chunk::Bytes(first)) = self.chunks.first_mut() {
            let mut patched = BytesMut::from(&first[..]);
            patched[0..4].copy_from_slice(&size.to_be_bytes());
            *first = patched.freeze();
        }
        ChunkedFrame { chunks: self.chunks, len: self.len }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;

    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{AbortedTransaction as TheirAborted, FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};

    use super::encode;
    use super::{AbortedTransaction, Chunk, ChunkedFrame, FetchPartitionReply, FetchReply, FetchTopicReply, StrBytes, Uuid};
    use crate::chunk::FileSlice;
    use crate::protocol::encode_frame;

    /// Concatenates the chunks, reading file ranges.
    fn flatten(frame: &ChunkedFrame) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in &frame.chunks {
            match chunk {
                Chunk::Bytes(b) => out.extend_from_slice(b),
                Chunk::File(s) => {
                    let mut buf = vec![0u8; s.len as usize];
                    s.file.read_exact_at(&mut buf, s.position).unwrap();
                    out.extend_from_slice(&buf);
                }
                Chunk::Pipe(_) => panic!("these responses hold no pipes"),
            }
        }
        out
    }

    #[test]
    fn matches_the_crate_encoder_for_every_version() {
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        let file = Arc::new(file);
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);

        for version in 4..=18i16 {
            let ours = FetchReply {
                throttle_time_ms: 0,
                error_code: 0,
                session_id: 0,
                topics: vec![
                    FetchTopicReply {
                        name: StrBytes::from_static_str("orders"),
                        topic_id: id,
                        partitions: vec![
                            FetchPartitionReply {
                                partition_index: 0,
                                error_code: 0,
                                high_watermark: 100,
                                last_stable_offset: 100,
                                log_start_offset: 3,
                                records: Some(Chunk::File(FileSlice { file: file.clone(), position: 10, len: 1000 })),
                                aborted_transactions: Vec::new(),
                            },
                            FetchPartitionReply::error(1, 1),
                            FetchPartitionReply {
                                partition_index: 2,
                                error_code: 0,
                                high_watermark: 5,
                                last_stable_offset: 5,
                                log_start_offset: 0,
                                records: Some(Chunk::Bytes(Bytes::from_static(b"upstream batch"))),
                                aborted_transactions: vec![
                                    AbortedTransaction { producer_id: 7, first_offset: 1 },
                                    AbortedTransaction { producer_id: 9, first_offset: 3 },
                                ],
                            },
                        ],
                    },
                    FetchTopicReply {
                        name: StrBytes::from_static_str("x"),
                        topic_id: Uuid::nil(),
                        partitions: vec![FetchPartitionReply {
                            partition_index: 7,
                            error_code: 0,
                            high_watermark: 9,
                            last_stable_offset: 9,
                            log_start_offset: 0,
                            records: Some(Chunk::File(FileSlice { file: file.clone(), position: 2000, len: 200 })),
                            aborted_transactions: Vec::new(),
                        }],
                    },
                ],
            };
            let frame = encode(42, version, ours);
            let flat = flatten(&frame);
            assert_eq!(flat.len() as u64, frame.len);

            let partition = |index: i32, err: i16, hw: i64, lso: i64, start: i64, records: Option<Bytes>| {
                PartitionData::default()
                    .with_partition_index(index)
                    .with_error_code(err)
                    .with_high_watermark(hw)
                    .with_last_stable_offset(lso)
                    .with_log_start_offset(start)
                    .with_aborted_transactions(Some(vec![]))
                    .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
                    .with_records(records)
            };
            let theirs = FetchResponse::default().with_responses(vec![
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_static_str("orders")))
                    .with_topic_id(id)
                    .with_partitions(vec![
                        partition(0, 0, 100, 100, 3, Some(Bytes::copy_from_slice(&data[10..1010]))),
                        partition(1, 1, -1, -1, -1, Some(Bytes::new())),
                        partition(2, 0, 5, 5, 0, Some(Bytes::from_static(b"upstream batch"))).with_aborted_transactions(Some(vec![
                            TheirAborted::default().with_producer_id(ProducerId(7)).with_first_offset(1),
                            TheirAborted::default().with_producer_id(ProducerId(9)).with_first_offset(3),
                        ])),
                    ]),
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_static_str("x")))
                    .with_topic_id(Uuid::nil())
                    .with_partitions(vec![partition(7, 0, 9, 9, 0, Some(Bytes::copy_from_slice(&data[2000..2200])))]),
            ]);
            let header_version = if version >= 12 { 1 } else { 0 };
            let expected = encode_frame(42, header_version, &theirs, version).unwrap();
            assert_eq!(flat, expected.to_vec(), "fetch v{version}");
        }
    }
}
