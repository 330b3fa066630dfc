//! Record bytes held in kernel pipes: moved from an upstream broker's socket with splice(2) and
//! on to a client's socket the same way, so they never pass through this process's memory.
//!
//! A fetch answered by an upstream broker would otherwise be copied twice on its way through
//! (received into memory, then sent from it). With the bytes in a pipe, both moves only pass
//! page references. The last record set of a response is sent on while it still arrives (a
//! [`PipeFiller`] fills its pipes as a client's connection drains them), so a fetch through
//! corral is not received whole before it is sent. Besides `net::sendfile`, this is the one
//! module with `unsafe`: the pipe2, fcntl, ioctl, splice and read calls.
//!
//! A pipe emptied by its sending is kept for the next record set (a few in all): a 1 MiB
//! fetch fills three or four pipes (a pipe holds 256 pieces, and the pieces spliced from a
//! socket are often smaller than a page), and making each anew costs four system calls and the
//! kernel's allocations of it.

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// What one pipe is asked to hold: Linux's default ceiling for an unprivileged pipe
/// (`/proc/sys/fs/pipe-max-size`), one typical 1 MiB fetch of one partition.
const PIPE_BYTES: libc::c_int = 1 << 20;
/// Records whose next bytes take longer than this to arrive fail, so that a client is not kept
/// waiting forever by an upstream broker that stopped within a response (Kafka's default
/// `request.timeout.ms`).
const STALLED_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Empty pipes kept for reuse, by all threads together: enough for the record sets the shards
/// send at once in the usual case, and a quarter of what an unprivileged user's pipes may take
/// (`pipe-user-pages-soft`, 64 MiB by default), since a pipe's pages count whether it is empty
/// or not. Unit tests run side by side in one process, each keeping its own thread's spares: the
/// cap there is out of their way, so that one test's count of its spares is not another's.
const SPARE_PIPES: usize = if cfg!(test) { 1 << 10 } else { 16 };

/// Spare pipes held now, by all threads.
static SPARE_HELD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's spare pipes: a pipe is taken and given back on the shard that uses it.
    static SPARE: RefCell<Spares> = const { RefCell::new(Spares(Vec::new())) };
}

struct Spares(Vec<Pipe>);

impl Drop for Spares {
    fn drop(&mut self) {
        // The thread ends: its pipes are closed (their `Drop` finds no spares to go back to).
        SPARE_HELD.fetch_sub(self.0.len(), Ordering::Relaxed);
    }
}

/// Both ends of a pipe. Dropped empty, it goes back to its thread's spares.
#[derive(Debug)]
struct Pipe {
    /// Its read and write ends; taken out only by `Drop`.
    ends: Option<(OwnedFd, OwnedFd)>,
    /// The capacity asked for: only pipes of [`PIPE_BYTES`] are kept.
    bytes: libc::c_int,
    /// Bytes put in and not yet taken out.
    level: AtomicU64,
}

impl Pipe {
    /// A spare pipe of `bytes` if this thread has one, else a new one.
    fn take(bytes: libc::c_int) -> io::Result<Pipe> {
        let spare = if bytes == PIPE_BYTES { SPARE.try_with(|spare| spare.borrow_mut().0.pop()).ok().flatten() } else { None };
        match spare {
            Some(pipe) => {
                SPARE_HELD.fetch_sub(1, Ordering::Relaxed);
                Ok(pipe)
            }
            None => Ok(Pipe { ends: Some(new_pipe(bytes)?), bytes, level: AtomicU64::new(0) }),
        }
    }

    fn read(&self) -> RawFd {
        self.ends.as_ref().expect("ends taken only on drop").0.as_raw_fd()
    }

    fn write(&self) -> RawFd {
        self.ends.as_ref().expect("ends taken only on drop").1.as_raw_fd()
    }

    fn put_in(&self, n: usize) {
        self.level.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn took_out(&self, n: usize) {
        self.level.fetch_sub(n as u64, Ordering::Relaxed);
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let Some((read, write)) = self.ends.take() else { return };
        // Bytes left behind (records cut short, a sending that failed) would go out with the next
        // record set: only an empty pipe is kept.
        if self.bytes != PIPE_BYTES || *self.level.get_mut() != 0 {
            return;
        }
        // At thread exit the spares are gone (`try_with` fails) and the ends are just closed.
        let _ = SPARE.try_with(|spare| {
            let Ok(mut spare) = spare.try_borrow_mut() else { return };
            if SPARE_HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| (held < SPARE_PIPES).then_some(held + 1)).is_ok() {
                spare.0.push(Pipe { ends: Some((read, write)), bytes: self.bytes, level: AtomicU64::new(0) });
            }
        });
    }
}

/// A new non-blocking pipe of `bytes` (rounded up to pages by the kernel): its read and write
/// ends. Fails where the size is refused (an unprivileged user past `pipe-user-pages-soft`), so
/// the caller reads into memory instead of filling pipes of one page.
fn new_pipe(bytes: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
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
    Ok((read, write))
}

/// What the filler has put in pipes so far, shared with the records' reader.
#[derive(Debug, Default)]
struct Filled {
    /// The pipes in order, each with the bytes put in it so far.
    pipes: Vec<(Arc<Pipe>, u64)>,
    /// Why the filler stopped before the end.
    failed: Option<String>,
}

/// A partition's records from an upstream broker: the first bytes, read into memory with the
/// response around them, then the rest in pipes, in order — maybe still being filled by a
/// [`PipeFiller`] while they are sent on, so a client receives a record set while corral still
/// receives it.
#[derive(Debug)]
pub struct PipedRecords {
    head: Bytes,
    filled: watch::Receiver<Filled>,
    /// Bytes to send: `head` and then the pipes' bytes, cut where [`Self::truncate`] said.
    len: u64,
}

/// Moves the rest of a record set from an upstream broker's socket into the pipes of its
/// [`PipedRecords`]. Never waits for the records to be sent on, so a slow client cannot hold up
/// the upstream connection; dropped before the end, it makes the records fail.
#[derive(Debug)]
pub struct PipeFiller {
    pipe_bytes: libc::c_int,
    /// The pipe being filled.
    pipe: Arc<Pipe>,
    /// Bytes still to come from the socket.
    left: u64,
    filled: watch::Sender<Filled>,
}

impl PipedRecords {
    /// Records of `len` bytes of which `head` is read; the rest to be moved by the filler. `None`
    /// when no pipe can be had, for the caller to read the bytes into memory instead.
    pub fn start(head: Bytes, len: u64) -> Option<(PipedRecords, PipeFiller)> {
        Self::start_with_pipes_of(PIPE_BYTES, head, len)
    }

    fn start_with_pipes_of(pipe_bytes: libc::c_int, head: Bytes, len: u64) -> Option<(PipedRecords, PipeFiller)> {
        let pipe = Arc::new(Pipe::take(pipe_bytes).ok()?);
        let (tx, rx) = watch::channel(Filled { pipes: vec![(pipe.clone(), 0)], failed: None });
        let left = len - head.len() as u64;
        Some((PipedRecords { head, filled: rx, len }, PipeFiller { pipe_bytes, pipe, left, filled: tx }))
    }

    /// Moves `len` bytes of the socket's stream, of which `head` was already read, into pipes,
    /// and gives them once all are there. `Ok(None)` with nothing consumed beyond `head` when no
    /// pipe can be had.
    pub async fn splice_from(socket: &TcpStream, head: Bytes, len: u64) -> io::Result<Option<PipedRecords>> {
        let Some((records, filler)) = Self::start(head, len) else { return Ok(None) };
        filler.fill_from(socket).await?;
        Ok(Some(records))
    }

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

    /// Waits until the pipes hold bytes not yet taken: the pipe (read end) they are in and how
    /// many. `at` is the pipe being read and how much of it was taken; it moves on to the next
    /// pipe when this one is done.
    async fn next_bytes(&mut self, at: &mut (usize, u64)) -> io::Result<(Arc<Pipe>, u64)> {
        loop {
            let (index, taken) = *at;
            let ready = |f: &Filled| f.failed.is_some() || f.pipes.len() > index + 1 || f.pipes.get(index).is_some_and(|p| p.1 > taken);
            let filled = match tokio::time::timeout(STALLED_AFTER, self.filled.wait_for(ready)).await {
                Ok(filled) => filled.map_err(|_| io::Error::other("the upstream connection closed within a record set"))?,
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "the upstream broker stopped within a record set")),
            };
            match filled.pipes.get(index) {
                Some((fd, held)) if *held > taken => return Ok((fd.clone(), held - taken)),
                _ if filled.pipes.len() > index + 1 => *at = (index + 1, 0),
                _ => {
                    return Err(io::Error::other(format!(
                        "the upstream connection failed within a record set: {}",
                        filled.failed.as_deref().unwrap_or("?")
                    )))
                }
            }
        }
    }

    /// Sends the bytes to a plain TCP socket, the piped part with splice(2), as they arrive.
    pub async fn splice_to(mut self, socket: &TcpStream) -> io::Result<()> {
        let mut unsent = &self.head[..];
        while !unsent.is_empty() {
            socket.writable().await?;
            match socket.try_write(unsent) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => unsent = &unsent[n..],
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        let mut left = self.len - self.head.len() as u64;
        let mut at = (0, 0);
        while left > 0 {
            let (pipe, available) = self.next_bytes(&mut at).await?;
            let mut in_pipe = available.min(left);
            while in_pipe > 0 {
                socket.writable().await?;
                // More to come only while the set goes on: the kernel holds back a last partial
                // segment sent with MSG_MORE, and a response can end with these records.
                let more = if left > in_pipe { libc::SPLICE_F_MORE } else { 0 };
                let sent = socket.try_io(Interest::WRITABLE, || {
                    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | more;
                    splice(pipe.read(), socket.as_raw_fd(), in_pipe, flags)
                });
                match sent {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        pipe.took_out(n);
                        in_pipe -= n as u64;
                        left -= n as u64;
                        at.1 += n as u64;
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Sends the bytes to a socket splice(2) cannot serve (TLS), through `buf`.
    pub async fn copy_to<W: AsyncWrite + Unpin>(mut self, socket: &mut W, buf: &mut Vec<u8>) -> io::Result<()> {
        socket.write_all(&self.head).await?;
        let mut left = self.len - self.head.len() as u64;
        let mut at = (0, 0);
        buf.resize(PIPE_BYTES as usize, 0);
        while left > 0 {
            let (pipe, available) = self.next_bytes(&mut at).await?;
            let want = available.min(left).min(buf.len() as u64) as usize;
            let n = read(pipe.read(), &mut buf[..want])?;
            pipe.took_out(n);
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            socket.write_all(&buf[..n]).await?;
            left -= n as u64;
            at.1 += n as u64;
        }
        Ok(())
    }

    /// The bytes, read out of the pipes (tests, and checks that need them in memory).
    pub async fn into_bytes(self) -> io::Result<Bytes> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.copy_to(&mut out, &mut Vec::new()).await?;
        Ok(Bytes::from(out))
    }
}

impl PipeFiller {
    /// Moves the rest of the records from the socket into pipes, starting another pipe each
    /// time one is full.
    pub async fn fill_from(mut self, socket: &TcpStream) -> io::Result<()> {
        let result = self.fill(socket).await;
        if let Err(e) = &result {
            self.filled.send_modify(|f| f.failed = Some(e.to_string()));
        }
        result
    }

    async fn fill(&mut self, socket: &TcpStream) -> io::Result<()> {
        while self.left > 0 {
            socket.readable().await?;
            let write = self.pipe.write();
            let moved = socket.try_io(Interest::READABLE, || {
                match splice(socket.as_raw_fd(), write, self.left, libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK) {
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
                    self.pipe.put_in(n);
                    self.left -= n as u64;
                    self.filled.send_modify(|f| f.pipes.last_mut().expect("one pipe at least").1 += n as u64);
                }
                Err(e) if e.get_ref().is_some_and(|inner| inner.is::<PipeFull>()) => {
                    self.pipe = Arc::new(Pipe::take(self.pipe_bytes)?);
                    self.filled.send_modify(|f| f.pipes.push((self.pipe.clone(), 0)));
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
        let (piped, filler) = PipedRecords::start_with_pipes_of(4096, head, (3 << 20) + 100).expect("a pipe");
        filler.fill_from(&from).await.unwrap();
        writer.await.unwrap();
        let pipes = piped.filled.borrow().pipes.len();
        assert!(pipes > 1, "{pipes} pipes");
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

    /// A record set is sent on while it still arrives: the upstream sends its second half only
    /// once the client has received the first.
    #[tokio::test]
    async fn sends_records_on_while_they_arrive() {
        let (mut upstream, from) = connected().await;
        let (to, mut client) = connected().await;
        let data = pattern(4 << 20);
        let half = data.len() / 2;
        let (piped, filler) = PipedRecords::start(Bytes::new(), data.len() as u64).expect("a pipe");
        let (first_received_tx, first_received) = tokio::sync::oneshot::channel();
        let sent = data.clone();
        let upstream_side = async move {
            upstream.write_all(&sent[..half]).await.unwrap();
            first_received.await.unwrap();
            upstream.write_all(&sent[half..]).await.unwrap();
        };
        let client_side = async move {
            let mut got = vec![0u8; data.len()];
            client.read_exact(&mut got[..half]).await.unwrap();
            first_received_tx.send(()).unwrap();
            client.read_exact(&mut got[half..]).await.unwrap();
            assert!(got == data);
        };
        let all = async { tokio::join!(upstream_side, client_side, filler.fill_from(&from), piped.splice_to(&to)) };
        let (_, _, filled, spliced) = tokio::time::timeout(std::time::Duration::from_secs(20), all).await.expect("no deadlock");
        filled.unwrap();
        spliced.unwrap();
    }

    /// A filler that stops before the end (its connection failed) fails the records' sending.
    #[tokio::test]
    async fn records_whose_filler_stops_fail() {
        let (mut upstream, from) = connected().await;
        let (piped, filler) = PipedRecords::start(Bytes::new(), 100_000).expect("a pipe");
        upstream.write_all(&pattern(10_000)).await.unwrap();
        drop(upstream);
        assert!(filler.fill_from(&from).await.is_err());
        assert!(piped.into_bytes().await.is_err());
    }

    fn spare_pipes() -> usize {
        SPARE.with_borrow(|spare| spare.0.len())
    }

    /// Pipes emptied by a sending are kept for the next record set, which then arrives whole
    /// and alone; a pipe still holding bytes (records cut short) is closed instead.
    #[tokio::test]
    async fn emptied_pipes_are_reused_and_others_closed() {
        for mut pipe in SPARE.with_borrow_mut(|spare| std::mem::take(&mut spare.0)) {
            SPARE_HELD.fetch_sub(1, Ordering::Relaxed);
            pipe.ends.take(); // closed, not given back
        }
        for (round, cut) in [(0u8, None), (1, None), (2, Some(1_000_000u64))] {
            let (mut upstream, from) = connected().await;
            let (to, mut client) = connected().await;
            let data: Vec<u8> = pattern(3 << 20).into_iter().map(|b| b.wrapping_add(round)).collect();
            let sent = data.clone();
            let writer = tokio::spawn(async move { upstream.write_all(&sent).await.unwrap() });
            let before = spare_pipes();
            let mut piped = PipedRecords::splice_from(&from, Bytes::new(), data.len() as u64).await.unwrap().unwrap();
            writer.await.unwrap();
            if before > 0 {
                assert!(spare_pipes() < before, "round {round}: no spare pipe taken");
            }
            let pipes = piped.filled.borrow().pipes.len();
            let len = cut.unwrap_or(data.len() as u64) as usize;
            piped.truncate(len as u64);
            let reader = tokio::spawn(async move {
                let mut got = vec![0u8; len];
                client.read_exact(&mut got).await.unwrap();
                got
            });
            piped.splice_to(&to).await.unwrap();
            assert!(reader.await.unwrap() == data[..len], "round {round}: other bytes than sent");
            match cut {
                None if round == 0 => assert_eq!(spare_pipes(), pipes.min(SPARE_PIPES)),
                None => assert!(spare_pipes() >= before, "round {round}: {} spares, {before} before", spare_pipes()),
                Some(_) => assert!(spare_pipes() < before, "round {round}: a pipe with bytes left was kept"),
            }
        }
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
