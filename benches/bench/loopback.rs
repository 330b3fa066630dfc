//! Loopback scenario: the TCP limit of this machine for the fetch reader's shape, measured as a
//! plain socket-to-socket copy between two threads. A writer thread sends length-prefixed
//! chunks from memory with blocking write(2); the reader is the fetch reader's code path
//! ([`crate::wire::connect`] + [`crate::wire::FrameReader`], same receive buffer, same
//! runtime), discarding what it reads.
//!
//! Two shapes:
//! - `stream`: the writer sends back to back. This is the ceiling any server could reach on
//!   this machine, and what fetch throughput is compared against.
//! - `rr` (request/response): the reader sends a small request for each chunk, like a consumer
//!   with one fetch in flight. The gap between the two is the cost of the round trip itself,
//!   which no server can avoid when the client waits for each response.
//!
//! The writer sends from one chunk of memory (hot in the CPU cache) by default. As a
//! diagnostic it can instead sendfile(2) consecutive chunks of a file, e.g. corral's own segment
//! file: that is the kernel path corral's sendfile fetch takes with no server around it, so the
//! gap between that and fetch(sendfile) is what corral itself costs.

#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::io::AsyncWriteExt;

use crate::stats::{Measurement, Window};
use crate::wire::{self, FrameReader, SocketOpts};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Writer sends chunks back to back.
    Stream,
    /// Reader requests each chunk and waits for it (one in flight).
    Rr,
}

impl Mode {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Stream => "stream",
            Mode::Rr => "1 request in flight",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LoopbackOpts {
    pub(crate) mode: Mode,
    /// Payload per frame: the fetch size.
    pub(crate) chunk: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    pub(crate) socket: SocketOpts,
    /// Send consecutive chunks of this file with sendfile(2) instead of one chunk of memory.
    pub(crate) file: Option<PathBuf>,
}

/// Size of the rr request: about what an encoded Fetch request is.
const REQUEST_LEN: usize = 96;

pub(crate) async fn run(opts: &LoopbackOpts) -> Result<Measurement> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr: SocketAddr = listener.local_addr()?;
    let (mode, chunk) = (opts.mode, opts.chunk);
    let file = opts.file.as_ref().map(File::open).transpose().context("loopback source file")?;
    let writer = thread::Builder::new().name("loopback-writer".into()).spawn(move || write_side(listener, mode, chunk, file))?;

    let result = read_side(addr, opts).await;
    if result.is_err() {
        // The reader may have failed before connecting; wake the writer's accept.
        let _ = TcpStream::connect(addr);
    }
    // The reader's socket is closed by now, so the writer's next write or read ends it.
    let written = writer.join().map_err(|_| anyhow!("loopback writer panicked"))?;
    // The writer's error explains the reader's (which then only saw the connection close).
    written.context("loopback writer")?;
    result
}

async fn read_side(addr: SocketAddr, opts: &LoopbackOpts) -> Result<Measurement> {
    let mut stream = wire::connect(addr, opts.socket).await?;
    let mut frames = FrameReader::default();
    let mut request = vec![0u8; REQUEST_LEN];
    request[..4].copy_from_slice(&(REQUEST_LEN as i32 - 4).to_be_bytes());
    let mut window = Window::new(opts.warmup, opts.duration);
    loop {
        if opts.mode == Mode::Rr {
            stream.write_all(&request).await?;
        }
        let len = frames.read_frame(&mut stream, opts.chunk + 4096).await?.len() as u64 + 4;
        if !window.tick(len, len, 0) {
            break;
        }
    }
    Ok(window.finish())
}

fn write_side(listener: TcpListener, mode: Mode, chunk: usize, file: Option<File>) -> Result<()> {
    let (mut stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    // One frame in memory, as a server would have a response ready.
    let mut frame = vec![0x5a; chunk + 4];
    frame[..4].copy_from_slice(&(chunk as i32).to_be_bytes());
    let file = file.map(|f| f.metadata().map(|m| (f, m.len()))).transpose()?;
    if file.as_ref().is_some_and(|(_, len)| *len < chunk as u64) {
        return Err(anyhow!("loopback source file is smaller than one chunk"));
    }
    let mut position = 0u64;
    let mut request = [0u8; REQUEST_LEN];
    loop {
        if mode == Mode::Rr && !read_request(&mut stream, &mut request)? {
            return Ok(());
        }
        let sent = match &file {
            None => stream.write_all(&frame),
            Some((file, len)) => {
                if position + chunk as u64 > *len {
                    position = 0;
                }
                let sent = send_file_frame(&stream, file, position, chunk);
                position += chunk as u64;
                sent
            }
        };
        if let Err(e) = sent {
            return if reader_gone(&e) { Ok(()) } else { Err(e.into()) };
        }
    }
}

/// Size prefix with MSG_MORE (so it shares a segment with the data), then the chunk with
/// sendfile(2), blocking.
fn send_file_frame(stream: &TcpStream, file: &File, position: u64, chunk: usize) -> std::io::Result<()> {
    let prefix = (chunk as i32).to_be_bytes();
    // SAFETY: send(2) reads `prefix.len()` bytes from a live stack array; the socket is open.
    let n = unsafe { libc::send(stream.as_raw_fd(), prefix.as_ptr().cast(), prefix.len(), libc::MSG_MORE | libc::MSG_NOSIGNAL) };
    if n != prefix.len() as isize {
        return Err(if n < 0 { std::io::Error::last_os_error() } else { std::io::Error::other("short send of a 4-byte prefix") });
    }
    let mut offset = position as libc::off_t;
    let end = offset + chunk as libc::off_t;
    while offset < end {
        // SAFETY: both descriptors are open for the call; `offset` is a valid, exclusive off_t
        // the kernel reads and advances.
        let n = unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut offset, (end - offset) as usize) };
        match n {
            0 => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shorter than expected")),
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads one fixed-size request; false when the reader has closed the connection.
fn read_request(stream: &mut TcpStream, buf: &mut [u8]) -> Result<bool> {
    match stream.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof || reader_gone(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn reader_gone(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
}
