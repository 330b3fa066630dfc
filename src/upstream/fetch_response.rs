//! An upstream broker's Fetch response (v4–v12), parsed as it arrives: each partition's fields
//! into memory, its records as a [`Chunk`] — spliced into pipes when large, so corral never
//! copies them (see [`super::frame`]).
//!
//! Only what corral passes on is kept; tagged fields (a partition's diverging epoch, current
//! leader and snapshot id) are skipped, since a leader hint names upstream brokers.

use bytes::Buf;

use super::frame::Frame;
use super::UpstreamError;
use crate::chunk::pipe::PipeFiller;
use crate::chunk::Chunk;
use crate::protocol::fetch_response::AbortedTransaction;

/// A Fetch response as corral uses it.
#[derive(Debug, Default)]
pub struct FetchAnswer {
    pub error_code: i16,
    pub topics: Vec<FetchAnswerTopic>,
}

#[derive(Debug)]
pub struct FetchAnswerTopic {
    pub name: String,
    pub partitions: Vec<FetchAnswerPartition>,
}

#[derive(Debug)]
pub struct FetchAnswerPartition {
    pub index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub aborted_transactions: Vec<AbortedTransaction>,
    /// `None` for a null or empty record set.
    pub records: Option<Chunk>,
}

/// Reads the response header; gives its correlation id.
pub async fn read_header(frame: &mut Frame<'_>, header_version: i16) -> Result<i32, UpstreamError> {
    let correlation_id = frame.field(4).await?.get_i32();
    if header_version >= 1 {
        skip_tags(frame).await?;
    }
    Ok(correlation_id)
}

/// Reads the body of a Fetch response of `version` (after its header) from `frame`, and gives
/// the answer to `deliver` as soon as all but the last partition's records are read: those can
/// still be arriving into pipes, to be sent on to the client as they arrive. Gives the error
/// that ends the connection, if any (which `deliver` gets too when it comes before the answer).
pub async fn read(
    frame: &mut Frame<'_>,
    version: i16,
    deliver: impl FnOnce(Result<FetchAnswer, UpstreamError>),
) -> Result<(), UpstreamError> {
    let flexible = version >= 12;
    match parse(frame, version).await {
        Err(e) => {
            deliver(Err(e.clone()));
            Err(e)
        }
        Ok((answer, None)) => {
            deliver(Ok(answer));
            Ok(())
        }
        Ok((answer, Some(filler))) => {
            deliver(Ok(answer));
            frame.fill_pipes(filler).await?;
            if flexible {
                skip_tags(frame).await?; // the last partition's
                skip_tags(frame).await?; // the last topic's
            }
            end(frame, flexible).await
        }
    }
}

/// The response; when the last partition's records are being piped, their filler, with the
/// frame left just after the records.
async fn parse(frame: &mut Frame<'_>, version: i16) -> Result<(FetchAnswer, Option<PipeFiller>), UpstreamError> {
    let flexible = version >= 12;
    let mut answer = FetchAnswer::default();
    let _throttle_time_ms = frame.field(4).await?.get_i32();
    if version >= 7 {
        let mut fields = frame.field(6).await?;
        answer.error_code = fields.get_i16();
        let _session_id = fields.get_i32();
    }
    let topics = array_len(frame, flexible).await?.unwrap_or(0);
    for t in 0..topics {
        let name = string(frame, flexible).await?;
        let count = array_len(frame, flexible).await?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(count.min(1024));
        for p in 0..count {
            let last = t + 1 == topics && p + 1 == count;
            let (partition, filler) = partition(frame, version, last).await?;
            partitions.push(partition);
            if filler.is_some() {
                answer.topics.push(FetchAnswerTopic { name, partitions });
                return Ok((answer, filler));
            }
        }
        if flexible {
            skip_tags(frame).await?;
        }
        answer.topics.push(FetchAnswerTopic { name, partitions });
    }
    end(frame, flexible).await?;
    Ok((answer, None))
}

/// The response's own tagged fields, and nothing after them.
async fn end(frame: &mut Frame<'_>, flexible: bool) -> Result<(), UpstreamError> {
    if flexible {
        skip_tags(frame).await?;
    }
    if frame.left() != 0 {
        return Err(frame.malformed("bytes after the Fetch response's last field"));
    }
    Ok(())
}

/// A partition; when it is the response's last and its records are being piped, their filler,
/// with the partition's tagged fields still to read.
async fn partition(frame: &mut Frame<'_>, version: i16, last: bool) -> Result<(FetchAnswerPartition, Option<PipeFiller>), UpstreamError> {
    let flexible = version >= 12;
    let mut fields = frame.field(if version >= 5 { 30 } else { 22 }).await?;
    let index = fields.get_i32();
    let error_code = fields.get_i16();
    let high_watermark = fields.get_i64();
    let last_stable_offset = fields.get_i64();
    let log_start_offset = if version >= 5 { fields.get_i64() } else { -1 };
    let mut aborted_transactions = Vec::new();
    for _ in 0..array_len(frame, flexible).await?.unwrap_or(0) {
        let mut fields = frame.field(16).await?;
        aborted_transactions.push(AbortedTransaction { producer_id: fields.get_i64(), first_offset: fields.get_i64() });
        if flexible {
            skip_tags(frame).await?;
        }
    }
    if version >= 11 {
        let _preferred_read_replica = frame.field(4).await?.get_i32();
    }
    let len = match flexible {
        true => uvarint(frame).await?.checked_sub(1).map(|n| n as usize),
        false => usize::try_from(frame.field(4).await?.get_i32()).ok(),
    };
    let (records, filler) = match len {
        Some(len) if len > 0 && last => {
            let (records, filler) = frame.records_streamed(len).await?;
            (Some(records), filler)
        }
        Some(len) if len > 0 => (Some(frame.records(len).await?), None),
        _ => (None, None),
    };
    if flexible && filler.is_none() {
        skip_tags(frame).await?;
    }
    let partition =
        FetchAnswerPartition { index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted_transactions, records };
    Ok((partition, filler))
}

/// An array's length; `None` for a null array.
async fn array_len(frame: &mut Frame<'_>, flexible: bool) -> Result<Option<usize>, UpstreamError> {
    let len = match flexible {
        true => uvarint(frame).await?.checked_sub(1).map(|n| n as usize),
        false => usize::try_from(frame.field(4).await?.get_i32()).ok(),
    };
    // Each element takes a byte at least: a longer array cannot be in the frame.
    match len {
        Some(n) if n > frame.left() => Err(frame.malformed("an array longer than the frame")),
        other => Ok(other),
    }
}

async fn string(frame: &mut Frame<'_>, flexible: bool) -> Result<String, UpstreamError> {
    let len = match flexible {
        true => uvarint(frame).await?.checked_sub(1).map(|n| n as usize),
        false => usize::try_from(frame.field(2).await?.get_i16()).ok(),
    };
    let Some(len) = len else { return Err(frame.malformed("a null topic name")) };
    let bytes = frame.field(len).await?;
    String::from_utf8(bytes.to_vec()).map_err(|_| frame.malformed("a topic name that is not UTF-8"))
}

async fn uvarint(frame: &mut Frame<'_>) -> Result<u32, UpstreamError> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = frame.field(1).await?[0];
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(frame.malformed("a varint longer than five bytes"))
}

async fn skip_tags(frame: &mut Frame<'_>) -> Result<(), UpstreamError> {
    for _ in 0..uvarint(frame).await? {
        let _tag = uvarint(frame).await?;
        let size = uvarint(frame).await? as usize;
        frame.field(size).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction as TheirAborted, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::upstream::frame::{FrameReader, ReadHalf};

    fn records(len: usize, seed: u8) -> Bytes {
        Bytes::from((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>())
    }

    /// A response as Kafka would send it: a large record set (spliced), a small one, an error
    /// with a leader hint (tagged), aborted transactions, and a second topic.
    fn response() -> FetchResponse {
        let partition = |index: i32, data: Option<Bytes>| {
            PartitionData::default()
                .with_partition_index(index)
                .with_high_watermark(100 + i64::from(index))
                .with_last_stable_offset(90 + i64::from(index))
                .with_log_start_offset(3)
                .with_records(data)
        };
        let topic = |name: &str, partitions| {
            FetchableTopicResponse::default().with_topic(TopicName(StrBytes::from_string(name.to_string()))).with_partitions(partitions)
        };
        FetchResponse::default().with_error_code(0).with_responses(vec![
            topic(
                "large",
                vec![
                    partition(0, Some(records(300_000, 1))).with_aborted_transactions(Some(vec![TheirAborted::default()
                        .with_producer_id(ProducerId(7))
                        .with_first_offset(11)])),
                    partition(1, Some(records(500, 2))),
                    partition(2, None)
                        .with_error_code(6)
                        .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(BrokerId(3)).with_leader_epoch(9)),
                ],
            ),
            topic("small", vec![partition(0, Some(records(70_000, 3)))]),
        ])
    }

    fn frame(version: i16, correlation_id: i32) -> Bytes {
        let mut body = BytesMut::new();
        let header_version = FetchResponse::header_version(version);
        ResponseHeader::default().with_correlation_id(correlation_id).encode(&mut body, header_version).unwrap();
        response().encode(&mut body, version).unwrap();
        let mut out = BytesMut::new();
        out.put_u32(body.len() as u32);
        out.extend_from_slice(&body);
        out.freeze()
    }

    async fn into_bytes(chunk: Option<Chunk>) -> Option<Bytes> {
        match chunk? {
            Chunk::Bytes(b) => Some(b),
            Chunk::Pipe(piped) => Some(piped.into_bytes().await.unwrap()),
            Chunk::File(_) => panic!("no files here"),
        }
    }

    /// The answer `read` delivers, once it has read the whole frame.
    async fn read_whole(frame: &mut Frame<'_>, version: i16) -> Result<FetchAnswer, UpstreamError> {
        let mut delivered = None;
        let read = read(frame, version, |answer| delivered = Some(answer)).await;
        let answer = delivered.expect("an answer is always delivered");
        read.and(answer)
    }

    /// Every version corral asks an upstream for, over plain TCP (pipes) and as a stream
    /// (memory), read as the crate's encoder wrote it; two responses back to back stay apart.
    #[tokio::test]
    async fn reads_what_kafka_encodes_in_every_version_over_tcp_and_streams() {
        for version in 4..=12i16 {
            for tcp in [true, false] {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let (sender, accepted) = tokio::join!(TcpStream::connect(listener.local_addr().unwrap()), listener.accept());
                let (mut sender, receiver) = (sender.unwrap(), accepted.unwrap().0);
                let (first, second) = (frame(version, 41), frame(version, 42));
                let writer = tokio::spawn(async move {
                    sender.write_all(&first).await.unwrap();
                    sender.write_all(&second).await.unwrap();
                });
                let half = match tcp {
                    true => ReadHalf::Tcp(receiver.into_split().0),
                    false => ReadHalf::Stream(Box::new(receiver)),
                };
                let mut reader = FrameReader::new(half, "test".into(), 16 << 20);
                for expected_id in [41, 42] {
                    let mut frame = reader.next_frame().await.unwrap().unwrap();
                    let header_version = FetchResponse::header_version(version);
                    assert_eq!(read_header(&mut frame, header_version).await.unwrap(), expected_id);
                    let answer = read_whole(&mut frame, version).await.unwrap();
                    let theirs = response();
                    assert_eq!(answer.topics.len(), 2, "v{version}");
                    for (ours, theirs) in answer.topics.into_iter().zip(theirs.responses) {
                        assert_eq!(ours.name, theirs.topic.0.as_str());
                        for (ours, theirs) in ours.partitions.into_iter().zip(theirs.partitions) {
                            assert_eq!(ours.index, theirs.partition_index);
                            assert_eq!(ours.error_code, theirs.error_code);
                            assert_eq!(ours.high_watermark, theirs.high_watermark);
                            assert_eq!(ours.last_stable_offset, theirs.last_stable_offset);
                            let log_start = if version >= 5 { theirs.log_start_offset } else { -1 };
                            assert_eq!(ours.log_start_offset, log_start);
                            let aborted: Vec<(i64, i64)> =
                                theirs.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
                            let ours_aborted: Vec<(i64, i64)> =
                                ours.aborted_transactions.iter().map(|a| (a.producer_id, a.first_offset)).collect();
                            assert_eq!(ours_aborted, aborted);
                            if tcp && theirs.records.as_ref().is_some_and(|r| r.len() > 100_000) {
                                assert!(matches!(ours.records, Some(Chunk::Pipe(_))), "v{version}: a large set is piped");
                            }
                            assert_eq!(into_bytes(ours.records).await, theirs.records.filter(|r| !r.is_empty()), "v{version}");
                        }
                    }
                }
                writer.await.unwrap();
            }
        }
    }

    /// The answer is delivered while the last partition's records still arrive, and those
    /// records can be read as they do: the broker sends the end of them only after that.
    #[tokio::test]
    async fn the_answer_comes_before_the_last_records_have_arrived() {
        let version = 12;
        let data = records(1 << 20, 9);
        let response = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(5)
                .with_records(Some(data.clone()))])]);
        let mut body = BytesMut::new();
        ResponseHeader::default().with_correlation_id(3).encode(&mut body, FetchResponse::header_version(version)).unwrap();
        response.encode(&mut body, version).unwrap();
        let mut whole = BytesMut::new();
        whole.put_u32(body.len() as u32);
        whole.extend_from_slice(&body);
        let cut = whole.len() - 200_000;

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (sender, accepted) = tokio::join!(TcpStream::connect(listener.local_addr().unwrap()), listener.accept());
        let mut sender = sender.unwrap();
        sender.write_all(&whole[..cut]).await.unwrap();
        let mut reader = FrameReader::new(ReadHalf::Tcp(accepted.unwrap().0.into_split().0), "test".into(), 16 << 20);
        let mut frame = reader.next_frame().await.unwrap().unwrap();
        assert_eq!(read_header(&mut frame, FetchResponse::header_version(version)).await.unwrap(), 3);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reading = read(&mut frame, version, |answer| tx.send(answer).unwrap());
        let using = async {
            let mut answer = rx.await.unwrap().unwrap();
            let partition = answer.topics[0].partitions.pop().unwrap();
            assert_eq!(partition.high_watermark, 5);
            assert!(matches!(partition.records, Some(Chunk::Pipe(_))));
            sender.write_all(&whole[cut..]).await.unwrap();
            into_bytes(partition.records).await
        };
        let (read, got) = tokio::time::timeout(std::time::Duration::from_secs(20), async { tokio::join!(reading, using) }).await.unwrap();
        read.unwrap();
        assert!(got.unwrap() == data);
    }

    #[tokio::test]
    async fn a_record_set_longer_than_its_frame_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (sender, accepted) = tokio::join!(TcpStream::connect(listener.local_addr().unwrap()), listener.accept());
        let mut sender = sender.unwrap();
        let mut body = BytesMut::new();
        body.put_i32(5); // correlation id
        body.put_i32(0); // throttle
        body.put_i16(0);
        body.put_i32(0); // error, session
        body.put_i32(1); // one topic
        body.put_i16(1);
        body.put_u8(b't');
        body.put_i32(1); // one partition
        body.put_slice(&[0u8; 30]);
        body.put_i32(0); // no aborted transactions
        body.put_i32(-1); // preferred read replica
        body.put_i32(1 << 20); // records: more than the frame holds
        let mut out = BytesMut::new();
        out.put_u32(body.len() as u32);
        out.extend_from_slice(&body);
        sender.write_all(&out).await.unwrap();
        let mut reader = FrameReader::new(ReadHalf::Tcp(accepted.unwrap().0.into_split().0), "test".into(), 16 << 20);
        let mut frame = reader.next_frame().await.unwrap().unwrap();
        assert_eq!(read_header(&mut frame, 0).await.unwrap(), 5);
        let e = read_whole(&mut frame, 11).await.unwrap_err();
        assert!(e.to_string().contains("past the end of the frame"), "{e}");
    }
}
