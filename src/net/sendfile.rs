//! Writing segment-file ranges to a socket: sendfile(2), or pread + write.
//!
//! This is the only module with `unsafe`: the one `libc::sendfile` call.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::chunk::FileSlice;

/// Largest count Linux transfers in one sendfile call.
const MAX_SENDFILE: u64 = 0x7fff_f000;
/// Buffer size of the pread path: a typical 1 MiB fetch in one read and one write.
const PREAD_CHUNK: usize = 1024 * 1024;

/// Sends the whole range from the page cache straight to the socket.
pub(crate) async fn send(stream: &TcpStream, slice: &FileSlice) -> io::Result<()> {
    let mut offset = slice.position as libc::off_t;
    let end = (slice.position + slice.len) as libc::off_t;
    while offset < end {
        let count = ((end - offset) as u64).min(MAX_SENDFILE) as usize;
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || sendfile(stream.as_raw_fd(), slice.file.as_raw_fd(), &mut offset, count));
        match sent {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "segment file is shorter than the fetch range")),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One sendfile(2) call; advances `offset` by what was sent.
fn sendfile(socket: i32, file: i32, offset: &mut libc::off_t, count: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the duration of the call (the socket is borrowed from
    // its owner, the file from an `Arc<File>` held by the caller); `offset` is a valid, exclusive
    // pointer to an `off_t` that the kernel reads and updates; no memory of this process is
    // written other than `*offset`.
    let n = unsafe { libc::sendfile(socket, file, offset as *mut libc::off_t, count) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Reads the range into memory and writes it: the path for sockets sendfile cannot serve (TLS).
pub(crate) async fn copy<W: AsyncWrite + Unpin>(socket: &mut W, slice: &FileSlice, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut position = slice.position;
    let end = slice.position + slice.len;
    buf.resize(PREAD_CHUNK.min(slice.len as usize), 0);
    while position < end {
        let n = ((end - position) as usize).min(buf.len());
        slice.file.read_exact_at(&mut buf[..n], position)?;
        socket.write_all(&buf[..n]).await?;
        position += n as u64;
    }
    Ok(())
}
