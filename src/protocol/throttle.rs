//! Reporting a throttle that is known only once a response is built: the request-time quota
//! counts the time a request took, so its throttle is found after the handler encoded the
//! response, and is written into the response's `throttle_time_ms`.
//!
//! Where that field is comes from the codec itself: a response of the API and version is encoded
//! with a marker in `throttle_time_ms`, and the field is written in place where the marker lands
//! first in the body, where every response of that version has it whatever its other fields hold.
//! That is so for every API with the field but three: Produce and ApiVersions carry it last and
//! OffsetDelete after its error code. Their responses are small (no records), so a throttled one
//! is decoded, given the throttle and encoded again.

use bytes::BytesMut;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{Chunk, Reply};

const MARKER: i32 = 0x5A17_7E11;

/// Whether `throttle_time_ms` is the first field of the body of `api`'s responses at `version`.
pub fn leads_body(api: ApiKey, version: i16) -> bool {
    macro_rules! probe {
        ($($key:ident => $response:ty),* $(,)?) => {
            match api {
                $(ApiKey::$key => marker_first(<$response>::default().with_throttle_time_ms(MARKER), version),)*
                _ => false,
            }
        };
    }
    probe!(
        Fetch => FetchResponse,
        ListOffsets => ListOffsetsResponse,
        Metadata => MetadataResponse,
        OffsetCommit => OffsetCommitResponse,
        OffsetFetch => OffsetFetchResponse,
        FindCoordinator => FindCoordinatorResponse,
        JoinGroup => JoinGroupResponse,
        Heartbeat => HeartbeatResponse,
        LeaveGroup => LeaveGroupResponse,
        SyncGroup => SyncGroupResponse,
        DescribeGroups => DescribeGroupsResponse,
        ListGroups => ListGroupsResponse,
        CreateTopics => CreateTopicsResponse,
        DeleteTopics => DeleteTopicsResponse,
        InitProducerId => InitProducerIdResponse,
        DescribeConfigs => DescribeConfigsResponse,
        AlterConfigs => AlterConfigsResponse,
        IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
        DeleteGroups => DeleteGroupsResponse,
        CreatePartitions => CreatePartitionsResponse,
        DescribeCluster => DescribeClusterResponse,
        DescribeAcls => DescribeAclsResponse,
        CreateAcls => CreateAclsResponse,
        DeleteAcls => DeleteAclsResponse,
        DeleteRecords => DeleteRecordsResponse,
        DescribeLogDirs => DescribeLogDirsResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        ConsumerGroupDescribe => ConsumerGroupDescribeResponse,
    )
}

fn marker_first<R: Encodable>(body: R, version: i16) -> bool {
    let mut buf = BytesMut::new();
    body.encode(&mut buf, version).is_ok() && buf.starts_with(&MARKER.to_be_bytes())
}

/// `reply` with its `throttle_time_ms` raised to `throttle_ms`, for a response of `api` at
/// `version` whose header is `header_version`; unchanged where the version has no such field (or
/// the reply carries no response).
pub fn report(reply: Reply, api: ApiKey, version: i16, header_version: i16, throttle_ms: i32) -> Reply {
    if throttle_ms <= 0 {
        return reply;
    }
    if !leads_body(api, version) {
        return match api {
            ApiKey::Produce if version >= 1 => reencode::<ProduceResponse>(reply, version, header_version, throttle_ms),
            ApiKey::ApiVersions if version >= 1 => reencode::<ApiVersionsResponse>(reply, version, header_version, throttle_ms),
            ApiKey::OffsetDelete => reencode::<OffsetDeleteResponse>(reply, version, header_version, throttle_ms),
            _ => reply,
        };
    }
    // The size prefix, the correlation id, and in flexible headers an empty tagged-field section.
    let at = 4 + 4 + usize::from(header_version >= 1);
    let raise = |frame: &[u8]| -> Option<bytes::Bytes> {
        let current = i32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?);
        let mut patched = BytesMut::from(frame);
        patched[at..at + 4].copy_from_slice(&current.max(throttle_ms).to_be_bytes());
        Some(patched.freeze())
    };
    match reply {
        Reply::Frame(frame) => Reply::Frame(raise(&frame).unwrap_or(frame)),
        Reply::Last(frame) => Reply::Last(raise(&frame).unwrap_or(frame)),
        Reply::Chunks(mut chunked) => {
            if let Some(Chunk::Bytes(first)) = chunked.chunks.first_mut() {
                if let Some(patched) = raise(first) {
                    *first = patched;
                }
            }
            Reply::Chunks(chunked)
        }
        other => other,
    }
}

/// The three responses whose `throttle_time_ms` is not the body's first field.
trait Throttled: Decodable + Encodable {
    fn throttle_ms(&mut self) -> &mut i32;
}

impl Throttled for ProduceResponse {
    fn throttle_ms(&mut self) -> &mut i32 {
        &mut self.throttle_time_ms
    }
}

impl Throttled for ApiVersionsResponse {
    fn throttle_ms(&mut self) -> &mut i32 {
        &mut self.throttle_time_ms
    }
}

impl Throttled for OffsetDeleteResponse {
    fn throttle_ms(&mut self) -> &mut i32 {
        &mut self.throttle_time_ms
    }
}

/// A single-frame `reply` decoded, its throttle raised, and encoded again; unchanged if it does
/// not decode as `R` (a reply the handler built by hand is left as it is rather than dropped).
fn reencode<R: Throttled>(reply: Reply, version: i16, header_version: i16, throttle_ms: i32) -> Reply {
    let raise = |frame: &bytes::Bytes| -> Option<bytes::Bytes> {
        let mut rest = frame.slice(4..);
        let header = ResponseHeader::decode(&mut rest, header_version).ok()?;
        let mut body = R::decode(&mut rest, version).ok()?;
        if !rest.is_empty() {
            return None;
        }
        let throttle = body.throttle_ms();
        *throttle = (*throttle).max(throttle_ms);
        super::encode_frame(header.correlation_id, header_version, &body, version).ok()
    };
    match reply {
        Reply::Frame(frame) => Reply::Frame(raise(&frame).unwrap_or(frame)),
        Reply::Last(frame) => Reply::Last(raise(&frame).unwrap_or(frame)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::encode_frame;

    #[test]
    fn the_field_leads_where_kafka_puts_it_first() {
        assert!(leads_body(ApiKey::Metadata, 12));
        assert!(!leads_body(ApiKey::Metadata, 2), "Metadata has no throttle before v3");
        assert!(leads_body(ApiKey::Heartbeat, 4));
        assert!(!leads_body(ApiKey::Heartbeat, 0));
        assert!(leads_body(ApiKey::Fetch, 16));
        assert!(!leads_body(ApiKey::Produce, 9), "Produce carries it last");
        assert!(!leads_body(ApiKey::ApiVersions, 3));
        assert!(!leads_body(ApiKey::OffsetDelete, 0));
    }

    #[test]
    fn responses_that_carry_it_elsewhere_are_encoded_again() {
        use kafka_protocol::protocol::StrBytes;
        let topic = produce_response::TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_responses(vec![produce_response::PartitionProduceResponse::default().with_base_offset(41)]);
        for (version, header_version) in [(3i16, 0i16), (9, 1)] {
            let body = ProduceResponse::default().with_responses(vec![topic.clone()]);
            let frame = encode_frame(7, header_version, &body, version).unwrap();
            let Reply::Frame(patched) = report(Reply::Frame(frame), ApiKey::Produce, version, header_version, 300) else {
                panic!("not a frame")
            };
            let mut rest = patched.slice(4..);
            assert_eq!(ResponseHeader::decode(&mut rest, header_version).unwrap().correlation_id, 7);
            let decoded = ProduceResponse::decode(&mut rest, version).unwrap();
            assert_eq!(decoded.throttle_time_ms, 300);
            assert_eq!(decoded.responses[0].partition_responses[0].base_offset, 41);
            assert_eq!(u32::from_be_bytes(patched[..4].try_into().unwrap()) as usize, patched.len() - 4);
        }
        // ApiVersions answers with a v0 header whatever its version.
        let body = ApiVersionsResponse::default().with_api_keys(vec![api_versions_response::ApiVersion::default().with_max_version(3)]);
        let frame = encode_frame(5, 0, &body, 3).unwrap();
        let Reply::Frame(patched) = report(Reply::Frame(frame), ApiKey::ApiVersions, 3, 0, 120) else { panic!("not a frame") };
        let mut rest = patched.slice(4..);
        ResponseHeader::decode(&mut rest, 0).unwrap();
        let decoded = ApiVersionsResponse::decode(&mut rest, 3).unwrap();
        assert_eq!((decoded.throttle_time_ms, decoded.api_keys[0].max_version), (120, 3));
        // ApiVersions v0 has no such field: the reply is left as it is.
        let frame = encode_frame(5, 0, &body, 0).unwrap();
        let Reply::Frame(kept) = report(Reply::Frame(frame.clone()), ApiKey::ApiVersions, 0, 0, 120) else { panic!("not a frame") };
        assert_eq!(kept, frame);
    }

    #[test]
    fn a_reported_throttle_is_read_back_by_the_codec() {
        use kafka_protocol::protocol::Decodable;
        for (version, header_version) in [(4i16, 0i16), (4, 1)] {
            let body = HeartbeatResponse::default().with_throttle_time_ms(5).with_error_code(27);
            let frame = encode_frame(9, header_version, &body, version).unwrap();
            let Reply::Frame(patched) = report(Reply::Frame(frame), ApiKey::Heartbeat, version, header_version, 250) else {
                panic!("not a frame")
            };
            let mut rest = patched.slice(4..);
            let header = ResponseHeader::decode(&mut rest, header_version).unwrap();
            let decoded = HeartbeatResponse::decode(&mut rest, version).unwrap();
            assert_eq!((header.correlation_id, decoded.throttle_time_ms, decoded.error_code), (9, 250, 27));
            // A larger throttle already in the response stays.
            let frame = encode_frame(9, header_version, &body.clone().with_throttle_time_ms(900), version).unwrap();
            let Reply::Frame(kept) = report(Reply::Frame(frame.clone()), ApiKey::Heartbeat, version, header_version, 250) else {
                panic!("not a frame")
            };
            assert_eq!(kept, frame);
        }
    }
}
