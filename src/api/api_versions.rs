//! ApiVersions (key 18): the versions of every API corral serves, generated from the table.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services, NONE, TABLE};
use crate::protocol::{encode_frame, Reply, RequestContext};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ApiVersions, ApiVersionsRequest, 0, 4);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ApiVersionsRequest = ctx.decode(body)?;
    // KIP-511: v3+ clients name themselves; Kafka refuses names outside its pattern.
    let valid = ctx.api_version < 3
        || (valid_client_software(&request.client_software_name) && valid_client_software(&request.client_software_version));
    let error_code = if valid { NONE } else { ResponseError::InvalidRequest.code() };
    let mut keys = api_keys();
    if services.node().upstream.is_some() {
        keys.retain(|k| !LOCAL_STORAGE_APIS.iter().any(|a| *a as i16 == k.api_key));
    }
    if let Some(view) = services.node().upstream.as_ref().and_then(|u| u.view()) {
        keys = clamp(keys, &UPSTREAM_APIS, &view.versions);
    }
    if let Some(view) = services.node().sidecar.as_ref().and_then(|s| s.view()) {
        keys = clamp(keys, &crate::sidecar::FORWARDED_APIS, &view.versions);
        keys = forwardable(keys);
    }
    let response = ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(keys);
    Ok(Handled::Now(ctx.respond(&response)))
}

/// The answer to an ApiVersions version corral does not serve: a v0 body (which every client can
/// read) with UNSUPPORTED_VERSION and the full list, so the client retries with a version it
/// finds there (KIP-511).
pub(crate) fn unsupported_version(ctx: &RequestContext) -> Reply {
    let response = ApiVersionsResponse::default().with_error_code(ResponseError::UnsupportedVersion.code()).with_api_keys(api_keys());
    match encode_frame(ctx.correlation_id, 0, &response, 0) {
        Ok(frame) => Reply::Frame(frame),
        Err(e) => Reply::Failed(e.to_string()),
    }
}

fn api_keys() -> Vec<ApiVersion> {
    TABLE
        .iter()
        .map(|e| ApiVersion::default().with_api_key(e.key as i16).with_min_version(e.advertised_min).with_max_version(e.max))
        .collect()
}

/// The APIs corral passes on to the upstream: advertised no higher than the upstream serves them,
/// and not at all if it does not. Group APIs stay corral's own (a sidecar's go to its group
/// service, and are clamped to what it serves in the same way).
const UPSTREAM_APIS: [ApiKey; 10] = [
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::InitProducerId,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::DeleteRecords,
];

/// APIs about corral's own partition storage: not advertised in front of an upstream cluster,
/// which holds the data.
const LOCAL_STORAGE_APIS: [ApiKey; 1] = [ApiKey::DescribeLogDirs];

/// `keys`, with those of `passed_on` advertised no higher than `versions` (what the cluster
/// they are passed on to serves) and left out if it does not serve them.
fn clamp(keys: Vec<ApiVersion>, passed_on: &[ApiKey], versions: &std::collections::BTreeMap<i16, (i16, i16)>) -> Vec<ApiVersion> {
    keys.into_iter()
        .filter_map(|mut k| {
            if !passed_on.iter().any(|a| *a as i16 == k.api_key) {
                return Some(k);
            }
            let (_, their_max) = *versions.get(&k.api_key)?;
            k.max_version = k.max_version.min(their_max);
            (k.min_version <= k.max_version).then_some(k)
        })
        .collect()
}

/// A sidecar passes group requests on as the codec decodes and encodes them: the versions the
/// handlers decode themselves (KIP-896's removed ones) are not offered for those.
fn forwardable(keys: Vec<ApiVersion>) -> Vec<ApiVersion> {
    keys.into_iter()
        .filter_map(|mut k| {
            let forwarded = crate::sidecar::FORWARDED_APIS.iter().find(|a| **a as i16 == k.api_key);
            if let Some(entry) = forwarded.and_then(|&key| super::entry(key)) {
                k.min_version = k.min_version.max(entry.codec_min);
            }
            (k.min_version <= k.max_version).then_some(k)
        })
        .collect()
}

/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`
fn valid_client_software(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty() && edge(&b[0]) && edge(&b[b.len() - 1]) && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_software_names() {
        assert!(valid_client_software("librdkafka"));
        assert!(valid_client_software("2.16.0"));
        assert!(valid_client_software("confluent-kafka-python"));
        assert!(!valid_client_software(""));
        assert!(!valid_client_software("-x"));
        assert!(!valid_client_software("a b"));
    }

    #[test]
    fn produce_and_fetch_ranges() {
        let keys = api_keys();
        let produce = keys.iter().find(|k| k.api_key == ApiKey::Produce as i16).unwrap();
        assert_eq!(produce.min_version, 0, "Produce is advertised from v0 (KAFKA-18659)");
        let fetch = keys.iter().find(|k| k.api_key == ApiKey::Fetch as i16).unwrap();
        assert_eq!((fetch.min_version, fetch.max_version), (4, 18));
    }
}
