//! A request's frame as corral sends it to an upstream broker: the size prefix, the request
//! header (client id `corral` unless the client's own is passed on), the body.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

use super::UpstreamError;

const CLIENT_ID: &str = "corral";

/// The frame of `request`, in one piece.
pub(super) fn encode<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: Option<StrBytes>,
) -> Result<Bytes, UpstreamError> {
    let mut buf = header(R::KEY, R::header_version(version), version, correlation_id, client_id)?;
    request.encode(&mut buf, version).map_err(|e| UpstreamError::Protocol(format!("cannot encode API {} v{version}: {e}", R::KEY)))?;
    let len = u32::try_from(buf.len() - 4).map_err(|_| UpstreamError::Protocol("request too large".into()))?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

/// A frame's first bytes: room for its size prefix, then the request header.
pub(super) fn header(
    key: i16,
    header_version: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<StrBytes>,
) -> Result<BytesMut, UpstreamError> {
    let header = RequestHeader::default()
        .with_request_api_key(key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.unwrap_or_else(|| StrBytes::from_static_str(CLIENT_ID))));
    let mut buf = BytesMut::with_capacity(64);
    buf.put_u32(0);
    header.encode(&mut buf, header_version).map_err(|e| UpstreamError::Protocol(format!("cannot encode API {key} v{version}: {e}")))?;
    Ok(buf)
}
