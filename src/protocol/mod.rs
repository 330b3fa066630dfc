//! Kafka wire protocol glue over the `kafka-protocol` crate: request headers in, response frames
//! out, and the one response corral encodes itself (Fetch, for zero-copy).
//!
//! Nothing here performs I/O: a [`Reply`] is a description of bytes (and file ranges) for the
//! connection to write.

pub mod fetch_response;
pub mod old_versions;
pub mod throttle;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

pub use crate::chunk::Chunk;

/// Why a frame could not be turned into a request. Each closes the connection, as Kafka does.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("frame of {0} bytes is too short for a request header")]
    ShortFrame(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api:?} v{version} is not supported")]
    UnsupportedVersion { api: ApiKey, version: i16 },
    #[error("cannot decode {api:?} v{version}: {source}")]
    Decode {
        api: ApiKey,
        version: i16,
        #[source]
        source: anyhow::Error,
    },
}

/// What a handler knows about the request it serves.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<StrBytes>,
    /// The client's address (set by the connection).
    pub peer: Option<std::net::SocketAddr>,
    /// The connection's number on its shard (set by the connection): tells apart the
    /// connections of one client.
    pub connection: u64,
    /// The connection's listener and authentication (set by the connection).
    pub security: Option<std::rc::Rc<crate::security::session::ConnectionSecurity>>,
}

impl RequestContext {
    /// Reads the request header at the front of `frame`, leaving the body.
    pub fn parse(frame: &mut Bytes) -> Result<RequestContext, RequestError> {
        if frame.len() < 8 {
            return Err(RequestError::ShortFrame(frame.len()));
        }
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let api_key = ApiKey::try_from(key).map_err(|_| RequestError::UnknownApiKey(key))?;
        let header_version = api_key.request_header_version(version);
        let header =
            RequestHeader::decode(frame, header_version).map_err(|source| RequestError::Decode { api: api_key, version, source })?;
        Ok(RequestContext {
            api_key,
            api_version: version,
            correlation_id: header.correlation_id,
            client_id: header.client_id,
            peer: None,
            connection: 0,
            security: None,
        })
    }

    /// Who the request comes from: `User:ANONYMOUS` unless the connection authenticated.
    pub fn principal(&self) -> crate::security::Principal {
        self.security.as_ref().map_or_else(crate::security::Principal::anonymous, |s| s.principal())
    }

    /// The principal and the client's address, as ACLs are checked against them.
    pub fn caller(&self) -> crate::security::Caller {
        crate::security::Caller { principal: self.principal(), host: self.peer.map(|p| p.ip()) }
    }

    /// Decodes the request body.
    pub fn decode<R: Decodable>(&self, mut body: Bytes) -> Result<R, RequestError> {
        R::decode(&mut body, self.api_version).map_err(|source| RequestError::Decode {
            api: self.api_key,
            version: self.api_version,
            source,
        })
    }

    /// Encodes `body` as this request's response frame.
    pub fn respond<R: Encodable>(&self, body: &R) -> Reply {
        self.respond_as(body, self.api_version)
    }

    /// Encodes `body` in the layout of `codec_version`: for a version the codec has no schema
    /// for whose response is laid out as a later one's.
    pub fn respond_as<R: Encodable>(&self, body: &R, codec_version: i16) -> Reply {
        match encode_frame(self.correlation_id, self.response_header_version(), body, codec_version) {
            Ok(frame) => Reply::Frame(frame),
            Err(e) => Reply::Failed(format!("cannot encode {:?} v{} response: {e}", self.api_key, self.api_version)),
        }
    }

    pub fn response_header_version(&self) -> i16 {
        self.api_key.response_header_version(self.api_version)
    }
}

/// `[size][response header][body]`, ready to write.
pub fn encode_frame<R: Encodable>(correlation_id: i32, header_version: i16, body: &R, version: i16) -> anyhow::Result<Bytes> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let size = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// An unsigned varint, as compact lengths and tag counts are written in flexible versions.
pub fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A response as the connection writes it.
#[derive(Debug)]
pub enum Reply {
    /// No response on the wire (Produce with acks=0).
    None,
    /// A complete frame, size prefix included.
    Frame(Bytes),
    /// A frame made of in-memory chunks and segment-file ranges (Fetch).
    Chunks(ChunkedFrame),
    /// No response, and the connection is closed once earlier responses are written.
    Close(&'static str),
    /// A complete frame, after which the connection is closed (a failed authentication).
    Last(Bytes),
    /// The response could not be built (a bug, logged); the connection is closed.
    Failed(String),
}

/// A response whose record data stays in segment files until it is written.
#[derive(Debug, Default)]
pub struct ChunkedFrame {
    pub chunks: Vec<Chunk>,
    /// Total bytes on the wire, size prefix included; known before any is written.
    pub len: u64,
}

impl Reply {
    /// Bytes this reply puts on the wire.
    pub fn wire_len(&self) -> u64 {
        match self {
            Reply::None | Reply::Close(_) | Reply::Failed(_) => 0,
            Reply::Frame(b) | Reply::Last(b) => b.len() as u64,
            Reply::Chunks(c) => c.len,
        }
    }
}
