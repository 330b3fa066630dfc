//! corral: a Kafka wire-protocol server that runs consumer groups itself, on a thread-per-core
//! runtime, with partitions stored in Kafka's own segment format and fetched with sendfile(2).
//!
//! # Layout
//!
//! - [`server`]: startup and shutdown of a node; [`cli`] and [`config`] feed it.
//! - [`runtime`]: one pinned thread and tokio runtime per shard, and the [`runtime::Mesh`] that
//!   carries work between shards.
//! - `net`: listeners (SO_REUSEPORT per shard), connections (ordered, pipelined), sendfile.
//! - [`protocol`]: request headers and response frames over the `kafka-protocol` crate, and the
//!   chunked Fetch encoder.
//! - `api`: one file per Kafka API and the table ApiVersions is generated from; handlers see
//!   only `api::Services` (node state, metrics, the partition store, the group router).
//! - [`cluster`]: the topic catalog, topic admin, producer ids.
//! - [`store`]: the partition store the data APIs call, and where a partition's data lives.
//! - [`storage`]: partition logs (segments, indexes, recovery, retention).
//! - [`raft`]: the openraft type config and the Raft log store (segment files, group commit).
//! - [`record_batch`]: the v2 record batch format; [`chunk`]: the bytes and file ranges a
//!   response is written from.
//! - [`metrics`] and `admin`: Prometheus metrics and the HTTP admin listener.
//!
//! # Request path
//!
//! A client connects to any shard. Each request is decoded and dispatched by API key; work on a
//! partition runs on the shard that owns it (reached through the mesh when that is another
//! shard), and responses leave the connection in request order.

mod admin;
mod api;
pub use api::decode_request;
pub mod chunk;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod decompress;
pub mod metrics;
mod net;
pub mod node;
pub mod protocol;
pub mod raft;
pub mod record_batch;
pub mod runtime;
pub mod security;
pub mod server;
pub mod sidecar;
pub mod storage;
pub mod store;
pub mod upstream;
