//! Reading an upstream connection's response frames: whole into memory, or piece by piece as a
//! parser asks for them, with large record sets moved into pipes (see [`crate::chunk::pipe`])
//! instead of memory when the connection is plain TCP.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::tcp::OwnedReadHalf;

use super::UpstreamError;
use crate::chunk::pipe::{PipeFiller, PipedRecords};
use crate::chunk::Chunk;

/// Records shorter than this (beyond what is already in memory) are read into memory: a pipe
/// costs more than copying a few pages.
const SPLICE_AT_LEAST: u64 = 64 << 10;
/// While a parser reads a frame piece by piece, one read takes at most this much, so that little
/// of a record set that follows is read into memory.
const PIECE_READ: usize = 16 << 10;
/// A whole frame is read this much at a time.
const FRAME_READ: usize = 64 << 10;

/// The read half of an upstream connection.
pub enum ReadHalf {
    /// Plain TCP: record sets can be spliced.
    Tcp(OwnedReadHalf),
    /// TLS: every byte is decrypted into memory.
    Stream(Box<dyn AsyncRead + Unpin>),
}

impl std::fmt::Debug for ReadHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadHalf::Tcp(_) => "ReadHalf::Tcp",
            ReadHalf::Stream(_) => "ReadHalf::Stream",
        })
    }
}

/// A connection's read half and the bytes read from it but not yet taken.
#[derive(Debug)]
pub struct FrameReader {
    half: ReadHalf,
    buf: BytesMut,
    address: String,
    max_frame: usize,
}

impl FrameReader {
    pub fn new(half: ReadHalf, address: String, max_frame: usize) -> FrameReader {
        FrameReader { half, buf: BytesMut::with_capacity(FRAME_READ), address, max_frame }
    }

    /// The next frame's size prefix, or `None` when the broker closed the connection between
    /// frames.
    pub async fn next_frame(&mut self) -> Result<Option<Frame<'_>>, UpstreamError> {
        while self.buf.len() < 4 {
            // A small read: the frame may be a Fetch whose records are to be spliced.
            if self.read_some(PIECE_READ).await? == 0 {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(self.lost("closed within a frame")),
                };
            }
        }
        let size = self.buf.get_u32() as usize;
        if size > self.max_frame {
            return Err(UpstreamError::Protocol(format!("{}: a response frame of {size} bytes, over {}", self.address, self.max_frame)));
        }
        Ok(Some(Frame { reader: self, left: size }))
    }

    /// One read of at most `limit` bytes into the buffer; gives how many (0 at the end).
    async fn read_some(&mut self, limit: usize) -> Result<usize, UpstreamError> {
        self.buf.reserve(limit);
        let read = match &mut self.half {
            ReadHalf::Tcp(tcp) => tcp.take(limit as u64).read_buf(&mut self.buf).await,
            ReadHalf::Stream(stream) => stream.take(limit as u64).read_buf(&mut self.buf).await,
        };
        read.map_err(|e| self.lost(&e.to_string()))
    }

    fn lost(&self, why: &str) -> UpstreamError {
        UpstreamError::Disconnected(format!("{}: {why}", self.address))
    }
}

/// One response frame, taken from the front as it is asked for.
#[derive(Debug)]
pub struct Frame<'a> {
    reader: &'a mut FrameReader,
    /// Bytes of the frame not yet taken.
    left: usize,
}

impl Frame<'_> {
    pub fn left(&self) -> usize {
        self.left
    }

    /// The rest of the frame, in memory.
    pub async fn rest(mut self) -> Result<Bytes, UpstreamError> {
        let n = self.left;
        self.take(n, FRAME_READ).await
    }

    /// The next `n` bytes of the frame, in memory. Each read takes what is missing or up to
    /// `read_limit`, whichever is more, and never reads past the frame.
    pub async fn take(&mut self, n: usize, read_limit: usize) -> Result<Bytes, UpstreamError> {
        self.fill(n, read_limit).await?;
        self.left -= n;
        Ok(self.reader.buf.split_to(n).freeze())
    }

    /// Reads until the buffer holds the frame's next `n` bytes (and maybe more of it).
    async fn fill(&mut self, n: usize, read_limit: usize) -> Result<(), UpstreamError> {
        if n > self.left {
            return Err(self.malformed("a field runs past the end of the frame"));
        }
        while self.reader.buf.len() < n {
            let missing = n - self.reader.buf.len();
            // Never past the frame: what follows may be another frame's records, to be spliced.
            let limit = missing.max(read_limit).min(self.left - self.reader.buf.len());
            if self.reader.read_some(limit).await? == 0 {
                return Err(self.reader.lost("closed within a frame"));
            }
        }
        Ok(())
    }

    /// The next `n` bytes, read in small pieces (the fields of a response being parsed).
    pub async fn field(&mut self, n: usize) -> Result<Bytes, UpstreamError> {
        self.take(n, PIECE_READ).await
    }

    /// The next `len` bytes as a record set: what is already in memory, and the rest spliced
    /// into pipes when it is large and the connection is plain TCP, else read into memory.
    pub async fn records(&mut self, len: usize) -> Result<Chunk, UpstreamError> {
        let (records, filler) = self.records_streamed(len).await?;
        if let Some(filler) = filler {
            self.fill_pipes(filler).await?;
        }
        Ok(records)
    }

    /// As [`Self::records`], but a piped set is given at once, its filler with it: the frame's
    /// bytes after the set can be read only once [`Self::fill_pipes`] has run it.
    pub async fn records_streamed(&mut self, len: usize) -> Result<(Chunk, Option<PipeFiller>), UpstreamError> {
        if len > self.left {
            return Err(self.malformed("a record set runs past the end of the frame"));
        }
        // The first batch's header at least (its length field is what a fetch's byte budget
        // looks at), and whatever else the buffer already holds of the set.
        self.fill(len.min(12), PIECE_READ).await?;
        let in_memory = self.reader.buf.len().min(len);
        let rest = (len - in_memory) as u64;
        if matches!(self.reader.half, ReadHalf::Tcp(_)) && rest >= SPLICE_AT_LEAST {
            let head = self.field(in_memory).await?;
            if let Some((piped, filler)) = PipedRecords::start(head.clone(), len as u64) {
                self.left -= rest as usize;
                return Ok((Chunk::Pipe(piped), Some(filler)));
            }
            // No pipe to be had: the rest comes into memory after the head.
            let tail = self.take(rest as usize, FRAME_READ).await?;
            let mut whole = BytesMut::with_capacity(len);
            whole.extend_from_slice(&head);
            whole.extend_from_slice(&tail);
            return Ok((Chunk::Bytes(whole.freeze()), None));
        }
        Ok((Chunk::Bytes(self.take(len, FRAME_READ).await?), None))
    }

    /// Moves a piped record set's bytes from the connection into its pipes.
    pub async fn fill_pipes(&mut self, filler: PipeFiller) -> Result<(), UpstreamError> {
        match &self.reader.half {
            ReadHalf::Tcp(tcp) => filler.fill_from(tcp.as_ref()).await.map_err(|e| self.reader.lost(&e.to_string())),
            ReadHalf::Stream(_) => Err(self.reader.lost("records piped from a connection that is not plain TCP")),
        }
    }

    pub fn malformed(&self, why: &str) -> UpstreamError {
        UpstreamError::Protocol(format!("{}: malformed response: {why}", self.reader.address))
    }
}
