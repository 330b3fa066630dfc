//! What a response is written from: bytes in memory and byte ranges of files.
//!
//! A leaf module: storage makes file ranges, the partition store hands them (or bytes from an
//! upstream broker) to the protocol encoder, and the connection writes them with sendfile(2).

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

/// A byte range of a segment file: what a fetch sends with sendfile(2).
///
/// Holding the `Arc<File>` keeps the bytes readable even if retention deletes the segment while
/// the response is being written.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: u64,
}

/// A piece of a response: in memory, or still in a file.
#[derive(Debug, Clone)]
pub enum Chunk {
    Bytes(Bytes),
    File(FileSlice),
}

impl Chunk {
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File(slice) => slice.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
