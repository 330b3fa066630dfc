//! Starting in-process servers on port 0, and a minimal blocking Kafka client that speaks the
//! protocol through the `kafka-protocol` crate (so these tests exercise corral's framing, not a
//! client library's).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use corral::config::Config;
use corral::server::Server;
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// A node running inside the test process, on ephemeral ports, in a temporary directory.
pub struct TestServer {
    server: Option<Server>,
    pub addr: SocketAddr,
    data_dir: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

pub fn config(data_dir: &Path) -> Config {
    let mut config = Config::default();
    config.kafka.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config.storage.data_dir = data_dir.to_path_buf();
    config.runtime.shards = 2;
    config.runtime.pin_threads = false;
    // Fewer coordinator partitions than Kafka's 50 keep startup quick; routing is the same.
    config.groups.offsets_partitions = 4;
    config
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    pub fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let mut server = Self::start_in(&path, tweak);
        server._dir = Some(dir);
        server
    }

    /// Starts on an existing data directory (which the caller keeps alive).
    pub fn start_in(data_dir: &Path, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = config(data_dir);
        tweak(&mut config);
        let server = Server::start(config).expect("server starts");
        TestServer { addr: server.kafka_addr, server: Some(server), data_dir: data_dir.to_path_buf(), _dir: None }
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// The running node (for tests that reach its shards through the mesh).
    pub fn node(&self) -> &std::sync::Arc<corral::node::Node> {
        self.server.as_ref().expect("the server runs").node()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Graceful shutdown; returns once every shard has stopped.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            server.wait().expect("clean shutdown");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// A blocking client connection.
pub struct Client {
    stream: TcpStream,
    next_correlation: i32,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream.set_nodelay(true).unwrap();
        Client { stream, next_correlation: 1 }
    }

    /// Sends a request without waiting; returns its correlation id.
    pub fn send<R: Request>(&mut self, version: i16, request: &R) -> i32 {
        let id = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str("corral-it")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).unwrap();
        request.encode(&mut buf, version).unwrap();
        let size = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).unwrap();
        id
    }

    /// Reads one response frame (without its size prefix).
    pub fn read_frame(&mut self) -> std::io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame)?;
        Ok(Bytes::from(frame))
    }

    /// Reads the next response, which must be for `R` at `version`; returns (correlation, body).
    pub fn recv<R: Request>(&mut self, version: i16) -> (i32, R::Response) {
        let mut frame = self.read_frame().expect("a response frame");
        let header = ResponseHeader::decode(&mut frame, <R::Response as HeaderVersion>::header_version(version)).unwrap();
        let body = R::Response::decode(&mut frame, version).unwrap_or_else(|e| panic!("decode {} v{version}: {e}", R::KEY));
        assert!(!frame.has_remaining(), "{} v{version}: {} bytes left after the body", R::KEY, frame.remaining());
        (header.correlation_id, body)
    }

    pub fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let id = self.send(version, request);
        let (got, body) = self.recv::<R>(version);
        assert_eq!(got, id);
        body
    }

    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// True once the server has closed the connection.
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf), Ok(0) | Err(_))
    }
}
