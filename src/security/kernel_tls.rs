//! Kernel TLS (kTLS) on the Kafka listeners: after rustls's handshake the session's keys go to the
//! kernel, which from then on encrypts what is written to the socket and decrypts what is read
//! from it. The connection is then served as a plain socket, so fetches keep sendfile(2).
//!
//! Whether the kernel offers it (the `tls` TCP upper-layer protocol, per cipher suite) is probed
//! once at start. A connection whose agreed suite the kernel does not take stays in rustls.
//!
//! The kernel hands the reader only application data: a record of another type (an alert, a
//! TLS 1.3 key update) fails the read with EIO, and the connection is closed like after any read
//! error. Kafka clients send neither while a connection is in use; a client that closes sends
//! its close_notify last. When corral closes a connection, its writer sends the close_notify
//! alert before the TCP FIN ([`writer`]), so the client can tell a closed stream from a cut one.

use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ktls::{CompatibleCiphers, CorkStream};
use rustls::SupportedCipherSuite;
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The cipher suites for which this kernel takes a TLS session.
#[derive(Debug)]
pub(crate) struct KernelTls(CompatibleCiphers);

/// Where the node's TLS listeners may hand sessions to the kernel: `tls.ktls` is on, a Kafka
/// listener uses TLS, and the kernel takes some suite. Probed at start, and logged either way.
pub(crate) fn for_config(config: &crate::config::Config) -> Option<Arc<KernelTls>> {
    if !config.tls.ktls || !config.listeners().iter().any(|l| l.protocol.uses_tls()) {
        return None;
    }
    let kernel = KernelTls::probe();
    match &kernel {
        Some(kernel) => tracing::info!(
            suites = %kernel,
            aes_gcm = KernelTls::aes_gcm_driver().as_deref().unwrap_or("?"),
            "kTLS: the kernel takes the TLS sessions of the Kafka listeners"
        ),
        None => tracing::info!("kTLS: not offered by this kernel (no `tls` TCP ULP); TLS listeners encrypt in rustls"),
    }
    kernel
}

impl KernelTls {
    /// Asks the kernel, on loopback sockets of its own. None when it offers kTLS for no suite:
    /// no `tls` module, or a kernel built without it.
    fn probe() -> Option<Arc<KernelTls>> {
        // Its own thread and runtime: the probe is async, and the caller may or may not be inside
        // a runtime already.
        let probe = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().ok()?;
            runtime.block_on(CompatibleCiphers::new()).ok()
        });
        let ciphers = probe.join().ok().flatten()?;
        let offered = [&ciphers.tls12, &ciphers.tls13].iter().any(|v| v.aes_gcm_128 || v.aes_gcm_256 || v.chacha20_poly1305);
        offered.then(|| Arc::new(KernelTls(ciphers)))
    }

    /// The kernel's AES-GCM implementation of highest priority (`/proc/crypto`, once the probe
    /// has used it): kTLS is only as fast as this. One made of generic parts
    /// (`gcm_base(ctr(aes-generic),ghash-generic)`) is slower than rustls, which uses the CPU's
    /// AES instructions; see BENCHMARKS.md.
    fn aes_gcm_driver() -> Option<String> {
        aes_gcm_driver_in(&std::fs::read_to_string("/proc/crypto").ok()?)
    }

    fn takes(&self, suite: SupportedCipherSuite) -> bool {
        self.0.is_compatible(suite)
    }
}

/// [`KernelTls::aes_gcm_driver`] from the text of `/proc/crypto`.
fn aes_gcm_driver_in(crypto: &str) -> Option<String> {
    let mut best: Option<(u32, &str)> = None;
    // One blank-line-separated block per implementation.
    for block in crypto.split("\n\n") {
        let field =
            |name: &str| block.lines().find_map(|line| line.split_once(':').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim()));
        if field("name") != Some("gcm(aes)") {
            continue;
        }
        let (Some(driver), priority) = (field("driver"), field("priority").and_then(|p| p.parse().ok()).unwrap_or(0)) else { continue };
        if best.is_none_or(|(p, _)| priority > p) {
            best = Some((priority, driver));
        }
    }
    best.map(|(_, driver)| driver.to_string())
}

impl std::fmt::Display for KernelTls {
    /// The suites the kernel takes, as `TLS1.3:AES-128-GCM,AES-256-GCM TLS1.2:...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, v) in [("TLS1.3", &self.0.tls13), ("TLS1.2", &self.0.tls12)] {
            let suites: Vec<&str> =
                [(v.aes_gcm_128, "AES-128-GCM"), (v.aes_gcm_256, "AES-256-GCM"), (v.chacha20_poly1305, "CHACHA20-POLY1305")]
                    .into_iter()
                    .filter_map(|(on, suite)| on.then_some(suite))
                    .collect();
            if !suites.is_empty() {
                write!(f, "{}{name}:{}", if name == "TLS1.2" { " " } else { "" }, suites.join(","))?;
            }
        }
        Ok(())
    }
}

/// A client connection whose TLS handshake is done.
pub(crate) enum Accepted {
    /// The kernel holds the session: the socket, and what the client sent that rustls had
    /// already decrypted (a request sent right behind the handshake).
    Kernel { stream: TcpStream, early: Vec<u8> },
    /// rustls goes on encrypting: no kTLS for the suite agreed.
    Userspace(Box<TlsStream<CorkStream<TcpStream>>>),
}

/// Gives the session to the kernel if it takes the agreed suite. An error leaves the connection
/// unusable (rustls has given up its keys): the caller closes it.
pub(crate) async fn hand_over(stream: TlsStream<CorkStream<TcpStream>>, kernel: &KernelTls) -> Result<Accepted, ktls::Error> {
    let suite = stream.get_ref().1.negotiated_cipher_suite();
    if !suite.is_some_and(|suite| kernel.takes(suite)) {
        return Ok(Accepted::Userspace(Box::new(stream)));
    }
    // `into_raw` rather than the crate's stream type: reads and writes go to the socket itself.
    let (early, stream) = ktls::config_ktls_server(stream).await?.into_raw();
    Ok(Accepted::Kernel { stream, early: early.unwrap_or_default() })
}

/// The writing half of a kTLS connection, as the `ktls` crate's stream: its shutdown sends the
/// close_notify alert (a record only the kernel can encrypt) and then the FIN.
pub(crate) type Writer = ktls::KtlsStream<WriteHalf>;

pub(crate) fn writer(half: OwnedWriteHalf) -> Writer {
    ktls::KtlsStream::new(WriteHalf(half), None)
}

/// A socket's write half that also gives its descriptor, which the alert is sent on.
pub(crate) struct WriteHalf(OwnedWriteHalf);

impl WriteHalf {
    pub(crate) fn tcp(&self) -> &TcpStream {
        self.0.as_ref()
    }
}

impl AsRawFd for WriteHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_aes_gcm_driver_of_highest_priority_is_named() {
        let crypto =
            "name         : gcm(aes)\ndriver       : gcm_base(ctr(aes-generic),ghash-generic)\nmodule       : gcm\npriority     : 100\n\n\
                      name         : ctr(aes)\ndriver       : ctr-aes-aesni\npriority     : 400\n\n\
                      name         : gcm(aes)\ndriver       : generic-gcm-aesni\nmodule       : aesni_intel\npriority     : 400\n";
        assert_eq!(super::aes_gcm_driver_in(crypto).as_deref(), Some("generic-gcm-aesni"));
        assert_eq!(super::aes_gcm_driver_in("name : ctr(aes)\ndriver : ctr-aes-aesni\n"), None);
    }
}
