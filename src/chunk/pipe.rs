//! Record bytes held in kernel pipes: moved from an upstream broker's socket with splice(2) and
//! on to a client's socket the same way, so they never pass through this process's memory.
//!
//! A fetch answered by an upstream broker would otherwise be copied twice on its way through
//! (received into memory, then sent from it). With the bytes in a pipe, both moves only pass
//! page references. Besides `net::sendfile`, this is the one module with `unsafe`: the pipe2,
//! fcntl, ioctl, splice and read calls.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// What one pipe is asked to hold: Linux's default ceiling for an unprivileged pipe
/// (`/proc/sys/fs/pipe-max-size`), one typical 1 MiB fetch of one partition.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// A pipe and how many bytes wait in it.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    held: u64,
}

impl Pipe {
    /// A non-blocking pipe of `bytes` (rounded up to pages by the kernel). Fails where the size is refused (an unprivileged
    /// user past `pipe-user-pages-soft`), so the caller reads into memory instead of filling
    /// pipes of one page.
    fn new(bytes: libc::c_int) -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two descriptors for the kernel to fill; nothing else
        // of this process's memory is written.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ takes an int argument and reads no memory of this process; the
        // descriptor is open (owned above).
        if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe { read, write, held: 0 })
    }
}

/// A partition's records from an upstream broker: the first bytes, read into memory with the
/// response around them, then the rest in pipes, in order.
#[derive(Debug)]
pub struct PipedRecords {
    head: Bytes,
    pipes: Vec<Pipe>,
    /// Bytes to send: `head` and then the pipes' bytes, cut where [`Self::truncate`] said.
    len: u64,
}

impl PipedRecords {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes read into memory before the rest went to pipes.
    pub fn head(&self) -> &Bytes {
        &self.head
    }

    /// Sends only the first `len` bytes (a fetch's byte budget cut them); the rest is dropped
    /// with the pipes.
    pub fn truncate(&mut self, len: u64) {
        self.len = self.len.min(len);
        if (self.head.len() as u64) > self.len {
            self.head.truncate(self.len as usize);
        }
    }

    /// Moves `len` bytes of the socket's stream, of which `head` was already read, into pipes.
    /// Gives `Ok(None)` with nothing consumed beyond `head` when no pipe can be had, for the
    /// caller to read the bytes into memory instead.
    pub async fn splice_from(socket: &TcpStream, head: Bytes, len: u64) -> io::Result<Option<PipedRecords>> {
        Self::splice_into_pipes_of(PIPE_BYTES, socket, head, len).await
    }

    async fn splice_into_pipes_of(pipe_bytes: libc::c_int, socket: &TcpStream, head: Bytes, len: u64) -> io::Result<Option<PipedRecords>> {
        let Ok(first) = Pipe::new(pipe_bytes) else { return Ok(None) };
        let mut pipes = vec![first];
        let mut left = len - head.len() as u64;
        while left > 0 {
            socket.readable().await?;
            let pipe = pipes.last_mut().expect("one pipe at least");
            let moved = socket.try_io(Interest::READABLE, || {
                match splice(socket.as_raw_fd(), pipe.write.as_raw_fd(), left, libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK) {
                    // The socket has bytes, so it is the pipe that is full: not a reason to
                    // wait for the socket (its readiness must stay set).
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && bytes_waiting(socket.as_raw_fd())? > 0 => {
                        Err(io::Error::other(PipeFull))
                    }
                    other => other,
                }
            });
            match moved {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    pipe.held += n as u64;
                    left -= n as u64;
                }
                Err(e) if e.get_ref().is_some_and(|inner| inner.is::<PipeFull>()) => pipes.push(Pipe::new(pipe_bytes)?),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(PipedRecords { head, pipes, len }))
    }

    /// Sends the bytes to a plain TCP socket, the piped part with splice(2).
    pub async fn splice_to(self, socket: &TcpStream) -> io::Result<()> {
        let PipedRecords { head, pipes, len } = self;
        let mut unsent = &head[..];
        while !unsent.is_empty() {
            socket.writable().await?;
            match socket.try_write(unsent) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => unsent = &unsent[n..],
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        let mut left = len - head.len() as u64;
        for pipe in &pipes {
            let mut in_pipe = pipe.held.min(left);
            left -= in_pipe;
            while in_pipe > 0 {
                socket.writable().await?;
                let sent = socket.try_io(Interest::WRITABLE, || {
                    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MORE;
                    splice(pipe.read.as_raw_fd(), socket.as_raw_fd(), in_pipe, flags)
                });
                match sent {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => in_pipe -= n as u64,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Sends the bytes to a socket splice(2) cannot serve (TLS), through `buf`.
    pub async fn copy_to<W: AsyncWrite + Unpin>(self, socket: &mut W, buf: &mut Vec<u8>) -> io::Result<()> {
        let PipedRecords { head, pipes, len } = self;
        socket.write_all(&head).await?;
        let mut left = len - head.len() as u64;
        buf.resize(PIPE_BYTES as usize, 0);
        for pipe in &pipes {
            let mut in_pipe = pipe.held.min(left);
            left -= in_pipe;
            while in_pipe > 0 {
                let want = (in_pipe as usize).min(buf.len());
                let n = read(pipe.read.as_raw_fd(), &mut buf[..want])?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                socket.write_all(&buf[..n]).await?;
                in_pipe -= n as u64;
            }
        }
        Ok(())
    }

    /// The bytes, read out of the pipes (tests, and checks that need them in memory).
    pub fn into_bytes(self) -> io::Result<Bytes> {
        let mut out = Vec::with_capacity(self.len as usize);
        out.extend_from_slice(&self.head);
        let mut left = self.len - self.head.len() as u64;
        for pipe in &self.pipes {
            let mut in_pipe = pipe.held.min(left);
            left -= in_pipe;
            let mut buf = vec![0u8; 64 << 10];
            while in_pipe > 0 {
                let want = (in_pipe as usize).min(buf.len());
                let n = read(pipe.read.as_raw_fd(), &mut buf[..want])?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                out.extend_from_slice(&buf[..n]);
                in_pipe -= n as u64;
            }
        }
        Ok(Bytes::from(out))
    }
}

/// The pipe cannot take more now; another one is started.
#[derive(Debug)]
struct PipeFull;

impl std::fmt::Display for PipeFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("pipe full")
    }
}

impl std::error::Error for PipeFull {}

/// One splice(2) call between two descriptors, one of them a pipe.
fn splice(from: RawFd, to: RawFd, count: u64, flags: libc::c_uint) -> io::Result<usize> {
    let count = count.min(isize::MAX as u64) as usize;
    // SAFETY: both descriptors are open for the call (borrowed from their owners); the offset
    // pointers are null, so the kernel uses and advances the descriptors' own positions and
    // writes no memory of this process.
    let n = unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), count, flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Bytes received on a TCP socket and not yet read (FIONREAD).
fn bytes_waiting(socket: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at `n`, valid and
    // exclusive for the call.
    if unsafe { libc::ioctl(socket, libc::FIONREAD, &mut n as *mut libc::c_int) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

/// One read(2) from a non-blocking pipe that holds at least `buf.len()` bytes.
fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid and exclusive for `buf.len()` bytes, which is all the kernel writes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    async fn connected() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(address), listener.accept());
        (a.unwrap(), b.unwrap().0)
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Records larger than one pipe holds move through several (here pipes of one page), in
    /// order, from one socket to another.
    #[tokio::test]
    async fn moves_records_larger_than_a_pipe_between_sockets_in_order() {
        let (mut upstream, from) = connected().await;
        let (to, mut client) = connected().await;
        let data = pattern(3 << 20);
        let sent = data.clone();
        let writer = tokio::spawn(async move { upstream.write_all(&sent).await.unwrap() });
        let head = Bytes::from(vec![7u8; 100]);
        let piped = PipedRecords::splice_into_pipes_of(4096, &from, head, (3 << 20) + 100).await.unwrap().expect("a pipe");
        writer.await.unwrap();
        assert!(piped.pipes.len() > 1, "{} pipes", piped.pipes.len());
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; (3 << 20) + 100];
            client.read_exact(&mut got).await.unwrap();
            got
        });
        piped.splice_to(&to).await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(&got[..100], &[7u8; 100][..]);
        assert!(got[100..] == data[..]);
    }

    #[tokio::test]
    async fn truncated_records_send_only_their_start() {
        let (mut upstream, from) = connected().await;
        let data = pattern(200_000);
        let rest = data[10..].to_vec();
        let writer = tokio::spawn(async move { upstream.write_all(&rest).await.unwrap() });
        let mut piped = PipedRecords::splice_from(&from, Bytes::from(data[..10].to_vec()), 200_000).await.unwrap().unwrap();
        writer.await.unwrap();
        assert_eq!(piped.len(), 200_000);
        piped.truncate(150_000);
        let mut copied = Vec::new();
        piped.copy_to(&mut copied, &mut Vec::new()).await.unwrap();
        assert!(copied[..] == data[..150_000]);
    }
}
