//! A minimal Kafka client connection for load generation: requests are encoded with the
//! `kafka-protocol` crate and written as they are; responses are read as raw frames and matched
//! to their requests by correlation id. Nothing is hidden behind a client library, so what the
//! scenarios time is the server and the socket, not record parsing or batching policies.
//!
//! Scenarios decide per API whether a response is worth decoding: admin and produce responses
//! are small and decoded with the crate; fetch responses are only skimmed ([`skim_fetch`]) for
//! the offsets needed to ask for the next chunk, never decoded.
//!
//! Also here: the topic admin helpers every scenario needs, and record-batch construction.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId,
    ListOffsetsRequest, MetadataRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::ResponseError;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::secure::{BenchStream, Security};
use crate::wire::{Cursor, FrameReader, SocketOpts};

/// Largest response frame accepted: Kafka's default socket.request.max.bytes, far above any
/// response the scenarios ask for.
pub(crate) const MAX_RESPONSE: usize = 100 * 1024 * 1024;

/// Kafka's UNSUPPORTED_VERSION: ApiVersions answers with it (and v0 of the body) when it does not
/// serve the version it was asked in.
const UNSUPPORTED_VERSION: i16 = 35;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;

/// A request that was written and not answered yet.
#[derive(Debug, Clone, Copy)]
struct Sent {
    correlation_id: i32,
    api_key: i16,
    version: i16,
}

/// One client connection. Requests may be pipelined: [`KafkaConn::send`] returns at once, and
/// responses come back in request order (Kafka answers each connection in order), which
/// [`KafkaConn::recv_raw`] checks against the correlation ids it handed out.
#[derive(Debug)]
pub(crate) struct KafkaConn {
    stream: BenchStream,
    /// How this connection was secured: connections it opens to other brokers are secured alike.
    security: Security,
    frames: FrameReader,
    client_id: StrBytes,
    next_correlation_id: i32,
    in_flight: VecDeque<Sent>,
    /// The server's version ranges from ApiVersions, by API key.
    versions: HashMap<i16, (i16, i16)>,
    encode_buf: BytesMut,
}

/// A response frame that has been matched to its request, header already consumed.
#[derive(Debug)]
pub(crate) struct RawResponse<'a> {
    pub(crate) version: i16,
    /// Bytes on the wire, size prefix included.
    pub(crate) wire_len: usize,
    pub(crate) body: &'a [u8],
}

/// The server's version range per API key, from ApiVersions.
pub(crate) type VersionRanges = HashMap<i16, (i16, i16)>;

impl KafkaConn {
    /// Connects over plain TCP and negotiates API versions.
    pub(crate) async fn connect(addr: SocketAddr, opts: SocketOpts) -> Result<KafkaConn> {
        KafkaConn::connect_with(addr, opts, &Security::default()).await
    }

    /// Connects, secures the connection as `security` says (TLS handshake, SASL
    /// authentication), then negotiates API versions.
    pub(crate) async fn connect_with(addr: SocketAddr, opts: SocketOpts, security: &Security) -> Result<KafkaConn> {
        let stream = security.connect(addr, opts).await?;
        let mut conn = KafkaConn {
            stream,
            security: security.clone(),
            frames: FrameReader::default(),
            client_id: StrBytes::from_static_str("corral-bench"),
            next_correlation_id: 1,
            in_flight: VecDeque::new(),
            versions: HashMap::new(),
            encode_buf: BytesMut::with_capacity(4096),
        };
        security.login(&mut conn).await.with_context(|| format!("SASL with {addr}"))?;
        conn.negotiate().await.with_context(|| format!("ApiVersions with {addr}"))?;
        Ok(conn)
    }

    /// Requests written and not yet answered.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The negotiated socket and the server's version ranges, for a connection that is driven
    /// differently from here on (the multiplexed connections of the group scenarios). Nothing
    /// may be in flight.
    pub(crate) fn into_parts(self) -> Result<(TcpStream, VersionRanges)> {
        if !self.in_flight.is_empty() {
            bail!("{} requests still in flight", self.in_flight.len());
        }
        Ok((self.stream.into_plain()?, self.versions))
    }

    async fn negotiate(&mut self) -> Result<()> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("corral-bench"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        // A server that does not know v3 answers in v0 (error UNSUPPORTED_VERSION), which may not
        // even decode as v3; either way it is asked again in v0.
        let response = match self.call_at(3, &request).await {
            Ok(response) if response.error_code != UNSUPPORTED_VERSION => response,
            _ => self.call_at(0, &ApiVersionsRequest::default()).await?,
        };
        if response.error_code != 0 {
            bail!("ApiVersions failed: {}", error_name(response.error_code));
        }
        self.versions = response.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
        Ok(())
    }

    /// The version to speak for `R`: the highest one at most `preferred` that both this crate
    /// and the server support.
    pub(crate) fn version<R: Request>(&self, preferred: i16) -> Result<i16> {
        pick_version::<R>(&self.versions, preferred)
    }

    /// Encodes a request frame (size prefix included) with the given correlation id.
    fn encode<R: Request>(&mut self, version: i16, correlation_id: i32, request: &R) -> Result<Bytes> {
        let buf = &mut self.encode_buf;
        buf.clear();
        encode_frame(buf, version, correlation_id, &self.client_id, request)?;
        Ok(buf.split().freeze())
    }

    fn next_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        id
    }

    /// Writes a request without waiting for its response; returns its correlation id.
    pub(crate) async fn send<R: Request>(&mut self, version: i16, request: &R) -> Result<i32> {
        let correlation_id = self.next_correlation_id();
        let frame = self.encode(version, correlation_id, request)?;
        self.stream.write_all(&frame).await?;
        // TLS may keep the end of the request in rustls's buffer; plain TCP flushes nothing.
        self.stream.flush().await?;
        self.in_flight.push_back(Sent { correlation_id, api_key: R::KEY, version });
        Ok(correlation_id)
    }

    /// Encodes a request once so that it can be sent many times ([`KafkaConn::send_prepared`]):
    /// load generators resend the same megabyte-sized produce request without re-encoding it.
    pub(crate) fn prepare<R: Request>(&mut self, version: i16, request: &R) -> Result<PreparedRequest> {
        let frame = self.encode(version, 0, request)?;
        Ok(PreparedRequest { frame: frame.to_vec(), api_key: R::KEY, version })
    }

    /// Writes a prepared request with a fresh correlation id.
    pub(crate) async fn send_prepared(&mut self, request: &mut PreparedRequest) -> Result<i32> {
        let correlation_id = self.next_correlation_id();
        // Every request header version starts with api_key (2), api_version (2), correlation_id.
        request.frame[8..12].copy_from_slice(&correlation_id.to_be_bytes());
        self.stream.write_all(&request.frame).await?;
        self.stream.flush().await?;
        self.in_flight.push_back(Sent { correlation_id, api_key: request.api_key, version: request.version });
        Ok(correlation_id)
    }

    /// Reads the response to the oldest request in flight, without decoding its body.
    pub(crate) async fn recv_raw(&mut self) -> Result<RawResponse<'_>> {
        let sent = *self.in_flight.front().ok_or_else(|| anyhow!("no request in flight"))?;
        let frame = self.frames.read_frame(&mut self.stream, MAX_RESPONSE).await.context("reading a response")?;
        self.in_flight.pop_front();
        let api = ApiKey::try_from(sent.api_key).map_err(|()| anyhow!("unknown API key {}", sent.api_key))?;
        let mut cursor = Cursor::new(frame);
        let correlation_id = cursor.i32()?;
        if correlation_id != sent.correlation_id {
            bail!("response to correlation id {correlation_id}, expected {} ({})", sent.correlation_id, api_name(sent.api_key));
        }
        if api.response_header_version(sent.version) >= 1 {
            cursor.skip_tagged_fields()?;
        }
        Ok(RawResponse { version: sent.version, wire_len: frame.len() + 4, body: cursor.rest() })
    }

    /// Reads and decodes the response to the oldest request in flight, which must be an `R`.
    pub(crate) async fn recv<R: Request>(&mut self) -> Result<R::Response> {
        if let Some(sent) = self.in_flight.front() {
            if sent.api_key != R::KEY {
                bail!("next response answers {}, not {}", api_name(sent.api_key), api_name(R::KEY));
            }
        }
        let raw = self.recv_raw().await?;
        let mut body = raw.body;
        R::Response::decode(&mut body, raw.version).with_context(|| format!("decoding {} v{} response", api_name(R::KEY), raw.version))
    }

    pub(crate) async fn call_at<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response> {
        self.send(version, request).await?;
        self.recv::<R>().await
    }

    /// Sends a request at the best common version up to `preferred` and waits for its response.
    pub(crate) async fn call<R: Request>(&mut self, preferred: i16, request: &R) -> Result<(i16, R::Response)> {
        let version = self.version::<R>(preferred)?;
        Ok((version, self.call_at(version, request).await?))
    }
}

/// The version to speak for `R` with a server whose ranges are `versions`: the highest one at
/// most `preferred` that both this crate and the server support.
pub(crate) fn pick_version<R: Request>(versions: &HashMap<i16, (i16, i16)>, preferred: i16) -> Result<i16> {
    let name = api_name(R::KEY);
    let &(server_min, server_max) = versions.get(&R::KEY).ok_or_else(|| anyhow!("server does not serve {name}"))?;
    let version = preferred.min(server_max).min(R::VERSIONS.max);
    if version < server_min.max(R::VERSIONS.min) {
        bail!("no common {name} version: server {server_min}..={server_max}, client up to {preferred}");
    }
    Ok(version)
}

/// Appends one request frame (size prefix included) to `buf`. Every request header version
/// starts with api_key (2), api_version (2), correlation_id (4), so the correlation id is at
/// bytes 8..12 of the frame and can be patched later.
pub(crate) fn encode_frame<R: Request>(
    buf: &mut BytesMut,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    request: &R,
) -> Result<()> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let start = buf.len();
    buf.put_i32(0);
    header.encode(buf, R::header_version(version))?;
    request.encode(buf, version).with_context(|| format!("encoding {} v{version}", api_name(R::KEY)))?;
    let size = i32::try_from(buf.len() - start - 4)?;
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// A request encoded once, resent with [`KafkaConn::send_prepared`].
#[derive(Debug, Clone)]
pub(crate) struct PreparedRequest {
    frame: Vec<u8>,
    api_key: i16,
    version: i16,
}

pub(crate) fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|()| format!("API {key}"), |k| format!("{k:?}"))
}

pub(crate) fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?} ({code})"),
        None => format!("error {code}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Topic admin

/// A partition's leader as Metadata reports it.
#[derive(Debug, Clone)]
pub(crate) struct PartitionInfo {
    pub(crate) index: i32,
    /// Where to connect for this partition; the bootstrap address when the leader's advertised
    /// address cannot be resolved.
    pub(crate) leader: SocketAddr,
}

/// Partitions of one topic, by index.
pub(crate) async fn partitions(conn: &mut KafkaConn, bootstrap: SocketAddr, topic: &str) -> Result<Vec<PartitionInfo>> {
    match topic_partitions(conn, bootstrap, topic).await? {
        Ok(partitions) => Ok(partitions),
        Err(code) => bail!("topic {topic}: {}", error_name(code)),
    }
}

/// [`partitions`], or the topic's error code in Metadata.
async fn topic_partitions(conn: &mut KafkaConn, bootstrap: SocketAddr, topic: &str) -> Result<Result<Vec<PartitionInfo>, i16>> {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(topic)))]))
        .with_allow_auto_topic_creation(false);
    let (_, response) = conn.call(12, &request).await?;
    let mut brokers = HashMap::new();
    for b in &response.brokers {
        let addr = tokio::net::lookup_host((b.host.as_str(), u16::try_from(b.port).unwrap_or(0))).await.ok().and_then(|mut a| a.next());
        brokers.insert(b.node_id.0, addr.unwrap_or(bootstrap));
    }
    let t = response.topics.first().ok_or_else(|| anyhow!("Metadata returned no topic for {topic}"))?;
    if t.error_code != 0 {
        return Ok(Err(t.error_code));
    }
    let mut out: Vec<PartitionInfo> = t
        .partitions
        .iter()
        .map(|p| PartitionInfo { index: p.partition_index, leader: brokers.get(&p.leader_id.0).copied().unwrap_or(bootstrap) })
        .collect();
    out.sort_by_key(|p| p.index);
    Ok(Ok(out))
}

/// Creates a topic; an existing topic is not an error (its partition count is not checked).
pub(crate) async fn create_topic(conn: &mut KafkaConn, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> Result<()> {
    send_create_topic(conn, topic, partitions, configs).await?;
    wait_partitions_led(conn, topic, partitions, READY_TIMEOUT).await
}

/// CreateTopics alone: returns once the server has answered (Kafka: once its controller has
/// committed the topic; its partitions are led a moment later, see [`wait_partitions_led`]).
pub(crate) async fn send_create_topic(conn: &mut KafkaConn, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> Result<()> {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(configs)])
        .with_timeout_ms(30_000);
    let (_, response) = conn.call(7, &request).await?;
    for t in &response.topics {
        if t.error_code != 0 && t.error_code != TOPIC_ALREADY_EXISTS {
            let message = t.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
            bail!("cannot create topic {topic}: {} {message}", error_name(t.error_code));
        }
    }
    Ok(())
}

/// How long a new topic or the group coordinator may take to be usable.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// Waits until every partition of a topic just created is led where Metadata says: Kafka answers
/// NOT_LEADER_OR_FOLLOWER for a moment after CreateTopics (its metadata is published before its
/// replica manager takes the lead), and its Metadata may not know the topic yet (UNKNOWN_TOPIC_OR_PARTITION,
/// LEADER_NOT_AVAILABLE), which a client retries. ListOffsets (latest), sent to each
/// partition's leader, asks the same replica manager and writes nothing. corral and Tansu pass
/// at once.
pub(crate) async fn wait_partitions_led(conn: &mut KafkaConn, topic: &str, partitions: i32, timeout: Duration) -> Result<()> {
    let here = conn.stream.peer_addr()?;
    let deadline = Instant::now() + timeout;
    loop {
        let mut by_leader: HashMap<SocketAddr, Vec<i32>> = HashMap::new();
        match topic_partitions(conn, here, topic).await? {
            Ok(partitions) => partitions.into_iter().for_each(|p| by_leader.entry(p.leader).or_default().push(p.index)),
            Err(UNKNOWN_TOPIC_OR_PARTITION | LEADER_NOT_AVAILABLE) if Instant::now() < deadline => {
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
            Err(code) => bail!("topic {topic}: {}", error_name(code)),
        }
        let listed: usize = by_leader.values().map(Vec::len).sum();
        let mut failing = (listed != partitions as usize).then_some(-1);
        for (leader, indexes) in &by_leader {
            let request = ListOffsetsRequest::default().with_replica_id(kafka_protocol::messages::BrokerId(-1)).with_topics(vec![
                ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(
                    indexes.iter().map(|&p| ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1)).collect(),
                ),
            ]);
            let (_, response) = if *leader == here {
                conn.call(7, &request).await?
            } else {
                KafkaConn::connect_with(*leader, SocketOpts { rcvbuf: 0 }, &conn.security).await?.call(7, &request).await?
            };
            let answered: Vec<_> = response.topics.iter().flat_map(|t| &t.partitions).collect();
            failing = failing.or(answered.iter().find(|p| p.error_code != 0).map(|p| p.error_code));
            if answered.len() != indexes.len() {
                failing = failing.or(Some(-1));
            }
        }
        match failing {
            None => return Ok(()),
            Some(code) if Instant::now() > deadline => bail!("topic {topic} not led after {timeout:?}: {}", error_name(code)),
            Some(_) => tokio::time::sleep(RETRY_EVERY).await,
        }
    }
}

/// Waits until the server coordinates groups, as a client retries COORDINATOR_NOT_AVAILABLE,
/// NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS: FindCoordinator answers (Kafka creates
/// `__consumer_offsets` at the first one) and DescribeGroups of `probes` (a group per coordinator
/// partition) answers each without an error once every partition is loaded. corral and Tansu
/// pass at once.
pub(crate) async fn wait_for_coordinator(conn: &mut KafkaConn, probes: &[String]) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(probes[0].clone()));
    loop {
        let (_, response) = conn.call(3, &find).await?;
        let code = if response.coordinators.is_empty() { response.error_code } else { response.coordinators[0].error_code };
        if code == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("FindCoordinator still answers {} after {READY_TIMEOUT:?}", error_name(code));
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
    let describe = DescribeGroupsRequest::default().with_groups(probes.iter().map(|g| GroupId(StrBytes::from_string(g.clone()))).collect());
    loop {
        let (_, response) = conn.call(5, &describe).await?;
        let Some(code) = response.groups.iter().map(|g| g.error_code).find(|&c| c != 0) else { return Ok(()) };
        if Instant::now() > deadline {
            bail!("DescribeGroups still answers {} after {READY_TIMEOUT:?}", error_name(code));
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

pub(crate) async fn delete_topic(conn: &mut KafkaConn, topic: &str) -> Result<()> {
    let version = conn.version::<DeleteTopicsRequest>(6)?;
    let request = if version >= 6 {
        DeleteTopicsRequest::default().with_topics(vec![DeleteTopicState::default().with_name(Some(topic_name(topic)))])
    } else {
        DeleteTopicsRequest::default().with_topic_names(vec![topic_name(topic)])
    }
    .with_timeout_ms(30_000);
    let (_, response) = conn.call(version, &request).await?;
    for t in &response.responses {
        if t.error_code != 0 {
            bail!("cannot delete topic {topic}: {}", error_name(t.error_code));
        }
    }
    Ok(())
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Record batches

/// One uncompressed v2 record batch of `count` records with `value_len`-byte values and no keys,
/// encoded once and resent: the server rewrites the base offset and, without a producer id, has
/// no sequence to check, so identical batches are valid appends.
pub(crate) fn record_batch(count: usize, value_len: usize) -> Result<Bytes> {
    // Values are pseudo-random so that nothing along the way (a compressing broker, a
    // deduplicating disk) can shortcut them.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let value: Bytes = (0..value_len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect::<Vec<u8>>()
        .into();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder groups records whose offset - sequence is constant; base sequence -1
            // is what a non-idempotent producer sends.
            sequence: i as i32 - 1,
            timestamp: now,
            key: None,
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::with_capacity(count * (value_len + 16) + 64);
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None })?;
    Ok(buf.freeze())
}

// ---------------------------------------------------------------------------------------------
// Fetch responses, skimmed

/// What the fetch reader needs from one partition of a Fetch response.
#[derive(Debug, Clone)]
pub(crate) struct PartitionSkim {
    pub(crate) partition: i32,
    pub(crate) error_code: i16,
    pub(crate) high_watermark: i64,
    pub(crate) log_start_offset: i64,
    /// Where the partition's record bytes are in the response body.
    pub(crate) records: Range<usize>,
}

/// Walks a Fetch response body (v4–v12, topics by name) down to each partition's record bytes,
/// reading only fixed fields and lengths. Returns the top-level error code (v7+, else 0).
pub(crate) fn skim_fetch(body: &[u8], version: i16, out: &mut Vec<PartitionSkim>) -> Result<i16> {
    if !(4..=12).contains(&version) {
        bail!("Fetch v{version}: the skim reads v4..=12");
    }
    out.clear();
    let flexible = version >= 12;
    let mut c = Cursor::new(body);
    let _throttle = c.i32()?;
    let mut error_code = 0;
    if version >= 7 {
        error_code = c.i16()?;
        let _session_id = c.i32()?;
    }
    for _ in 0..c.array_len(flexible)? {
        c.skip_string(flexible)?;
        for _ in 0..c.array_len(flexible)? {
            let partition = c.i32()?;
            let error_code = c.i16()?;
            let high_watermark = c.i64()?;
            let _last_stable = c.i64()?;
            let log_start_offset = if version >= 5 { c.i64()? } else { -1 };
            for _ in 0..c.array_len(flexible)? {
                // aborted transaction: producer id, first offset
                c.skip(16)?;
                if flexible {
                    c.skip_tagged_fields()?;
                }
            }
            if version >= 11 {
                let _preferred_read_replica = c.i32()?;
            }
            let len = if flexible { i64::from(c.uvarint()?) - 1 } else { i64::from(c.i32()?) };
            let len = usize::try_from(len).unwrap_or(0);
            let start = c.position();
            c.skip(len)?;
            if flexible {
                c.skip_tagged_fields()?;
            }
            out.push(PartitionSkim { partition, error_code, high_watermark, log_start_offset, records: start..start + len });
        }
        if flexible {
            c.skip_tagged_fields()?;
        }
    }
    Ok(error_code)
}

/// The whole record batches at the front of a record set (a fetch may end in a partial batch).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BatchSpan {
    /// Offset after the last whole batch, if there is one.
    pub(crate) next_offset: Option<i64>,
    /// Bytes of whole batches.
    pub(crate) bytes: usize,
    /// Records in whole batches, from each batch's last offset delta (records are not read).
    pub(crate) records: u64,
}

/// Follows v2 batch headers (base offset, length, last offset delta) through a record set.
pub(crate) fn whole_batches(records: &[u8]) -> Result<BatchSpan> {
    // Batch header offsets: base_offset 0, batch_length 8, magic 16, last_offset_delta 23.
    const HEADER: usize = 61;
    let mut span = BatchSpan::default();
    let mut at = 0;
    while records.len() - at >= HEADER {
        let mut c = Cursor::new(&records[at..]);
        let base_offset = c.i64()?;
        let total = 12 + usize::try_from(c.i32()?).map_err(|_| anyhow!("negative batch length at byte {at}"))?;
        c.skip(4)?;
        let magic = c.i8()?;
        if magic != 2 {
            bail!("record batch magic {magic} at byte {at}; only v2 batches are expected");
        }
        if total > records.len() - at {
            break;
        }
        c.skip(6)?;
        let last_offset_delta = c.i32()?;
        span.next_offset = Some(base_offset + i64::from(last_offset_delta) + 1);
        span.bytes += total;
        span.records += u64::try_from(last_offset_delta).unwrap_or(0) + 1;
        at += total;
    }
    Ok(span)
}
