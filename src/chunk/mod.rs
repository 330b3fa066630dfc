//! What a response is written from: bytes in memory, byte ranges of files, and bytes waiting in
//! pipes.
//!
//! A leaf module: storage makes file ranges, the upstream store moves an upstream broker's
//! records into pipes (or memory), the partition store hands them to the protocol encoder, and
//! the connection writes them with sendfile(2) and splice(2).

pub mod pipe;

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use self::pipe::PipedRecords;

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

/// A piece of a response: in memory, still in a file, or in pipes. Not `Clone`: piped bytes
/// can be sent once.
#[derive(Debug)]
pub enum Chunk {
    Bytes(Bytes),
    File(FileSlice),
    Pipe(PipedRecords),
}

impl Chunk {
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File(slice) => slice.len,
            Chunk::Pipe(piped) => piped.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
