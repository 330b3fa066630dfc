//! Byte-level plumbing shared by every scenario: client sockets with the benchmark's buffer
//! sizes, and reading length-prefixed frames into a reused buffer.
//!
//! The fetch reader and the loopback reader both read through [`FrameReader`] on sockets made
//! by [`connect`], so the loopback limit is measured with exactly the read pattern (syscall
//! sizes, buffer reuse, receive buffer) that the fetch numbers are compared against.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpSocket, TcpStream};

/// Socket options of the benchmark's client side.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketOpts {
    /// SO_RCVBUF in bytes; 0 leaves the kernel's receive-buffer autotuning on. Linux doubles the
    /// value and caps the request at net.core.rmem_max (a fixed buffer also turns autotuning off),
    /// so [`recv_buffer`] reports what was actually granted.
    pub(crate) rcvbuf: usize,
}

/// Connects with `opts` applied before the handshake: the window scale is fixed by the SYN, so a
/// receive buffer enlarged after connecting could not be advertised in full.
pub(crate) async fn connect(addr: SocketAddr, opts: SocketOpts) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if opts.rcvbuf > 0 {
        socket.set_recv_buffer_size(u32::try_from(opts.rcvbuf).unwrap_or(u32::MAX))?;
    }
    let stream = socket.connect(addr).await?;
    // Requests are small and each one is waited for; Nagle would hold them back.
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The receive buffer the kernel actually gave a socket.
pub(crate) fn recv_buffer(stream: &TcpStream) -> usize {
    socket2::SockRef::from(stream).recv_buffer_size().unwrap_or(0)
}

/// Reads `[i32 size][size bytes]` frames (Kafka's framing) into one buffer that is reused, so the
/// steady state allocates nothing and touches the same memory, as a tuned consumer would.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Reads one frame and returns its body (without the size prefix). Each read(2) asks for the
    /// rest of the frame, so syscall sizes are bounded by the frame, not by a small scratch
    /// buffer. Frames larger than `max` are refused rather than allocated.
    pub(crate) async fn read_frame<R: AsyncRead + Unpin>(&mut self, reader: &mut R, max: usize) -> io::Result<&[u8]> {
        let mut size = [0u8; 4];
        reader.read_exact(&mut size).await?;
        let len = i32::from_be_bytes(size);
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= max)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("frame size {len} outside 0..={max}")))?;
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        reader.read_exact(&mut self.buf[..len]).await?;
        Ok(&self.buf[..len])
    }
}

/// Big-endian reader over a response body, for the few fields the benchmark parses by hand
/// (the Fetch response skim, response headers). Every getter fails cleanly on a short buffer.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let bytes = self.buf.get(self.pos..self.pos + N).ok_or_else(short)?;
        self.pos += N;
        Ok(bytes.try_into().expect("length checked"))
    }

    pub(crate) fn skip(&mut self, n: usize) -> io::Result<()> {
        if self.buf.len() - self.pos < n {
            return Err(short());
        }
        self.pos += n;
        Ok(())
    }

    pub(crate) fn i8(&mut self) -> io::Result<i8> {
        Ok(i8::from_be_bytes(self.take()?))
    }

    pub(crate) fn i16(&mut self) -> io::Result<i16> {
        Ok(i16::from_be_bytes(self.take()?))
    }

    pub(crate) fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_be_bytes(self.take()?))
    }

    pub(crate) fn i64(&mut self) -> io::Result<i64> {
        Ok(i64::from_be_bytes(self.take()?))
    }

    pub(crate) fn uvarint(&mut self) -> io::Result<u32> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let [b] = self.take::<1>()?;
            value |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(io::Error::new(io::ErrorKind::InvalidData, "unsigned varint longer than 5 bytes"))
    }

    /// Array length: INT32 in classic versions, UNSIGNED_VARINT(n + 1) in flexible ones. Null
    /// (-1 / 0) is returned as 0: the benchmark never needs to tell null from empty.
    pub(crate) fn array_len(&mut self, flexible: bool) -> io::Result<usize> {
        let n = if flexible { i64::from(self.uvarint()?) - 1 } else { i64::from(self.i32()?) };
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Skips a string (STRING/COMPACT_STRING, nullable or not).
    pub(crate) fn skip_string(&mut self, flexible: bool) -> io::Result<()> {
        let n = if flexible { i64::from(self.uvarint()?) - 1 } else { i64::from(self.i16()?) };
        self.skip(usize::try_from(n).unwrap_or(0))
    }

    /// Skips a flexible version's tagged-field section.
    pub(crate) fn skip_tagged_fields(&mut self) -> io::Result<()> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(size as usize)?;
        }
        Ok(())
    }
}

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "response shorter than its fields")
}
