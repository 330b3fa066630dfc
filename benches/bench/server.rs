//! A corral server started by the benchmark: free ports on 127.0.0.1, a data directory, a config
//! file, readiness through the admin port, SIGTERM to stop.
//!
//! Nothing may outlive the benchmark: the child is killed when its handle is dropped (error
//! paths, panics), and asks the kernel for SIGTERM should the benchmark itself die
//! (PR_SET_PDEATHSIG). SIGINT and SIGTERM skip destructors, so [`cleanup_on_signal`] kills the
//! registered servers and removes the registered scratch directories itself before exiting.

#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Servers running and scratch directories in use, for [`cleanup_on_signal`].
static LIVE: Mutex<(Vec<u32>, Vec<PathBuf>)> = Mutex::new((Vec::new(), Vec::new()));

/// Registers a scratch directory to remove if the benchmark is interrupted.
pub(crate) fn register_dir(dir: &Path) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).1.push(dir.to_path_buf());
}

pub(crate) fn unregister_dir(dir: &Path) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).1.retain(|d| d != dir);
}

fn register_pid(pid: u32) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).0.push(pid);
}

fn unregister_pid(pid: u32) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).0.retain(|&p| p != pid);
}

/// On SIGINT or SIGTERM: kill the registered servers, remove the registered directories, exit
/// with 130. Runs on its own thread so it works whatever the main thread is blocked on.
pub(crate) fn cleanup_on_signal() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Installed here, before the thread starts, so that a signal arriving early is not lost.
    let (mut term, mut int) = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        anyhow::Ok((signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?))
    })?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        });
        eprintln!("corral-bench: interrupted; stopping servers and removing scratch data");
        let (pids, dirs) = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in pids {
            // SAFETY: kill(2) on a child we started and have not reaped.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        // Give the kernel a moment to close the servers' files before their directory goes.
        std::thread::sleep(Duration::from_millis(200));
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::process::exit(130);
    })?;
    Ok(())
}

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct ManagedServer {
    child: Option<Child>,
    pub(crate) kafka: SocketAddr,
    log: PathBuf,
}

impl ManagedServer {
    /// Starts `binary serve` and waits until /health/ready answers 200. `extra_args` are passed
    /// through (e.g. `--shards 1`).
    pub(crate) fn start(binary: &Path, data_dir: &Path, config: &Path, log: &Path, extra_args: &[String]) -> Result<ManagedServer> {
        // Ports are found by binding port 0 and releasing it; another process could take one in
        // between, so a start that fails is retried on fresh ports.
        let mut last_error = None;
        for _ in 0..3 {
            let kafka = free_port()?;
            let admin = free_port()?;
            let started = ManagedServer::launch(binary, data_dir, config, log, extra_args, kafka, admin).and_then(|mut server| {
                server.wait_ready_on(admin)?;
                Ok(server)
            });
            match started {
                Ok(server) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    /// Starts `binary serve` on the given ports without waiting for it: a cluster's nodes must
    /// know each other's addresses before any of them starts, and start together. Then
    /// [`ManagedServer::wait_ready_on`].
    pub(crate) fn launch(
        binary: &Path,
        data_dir: &Path,
        config: &Path,
        log: &Path,
        extra_args: &[String],
        kafka: SocketAddr,
        admin: SocketAddr,
    ) -> Result<ManagedServer> {
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(kafka.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--config")
            .arg(config)
            .args(extra_args);
        if std::env::var_os("CORRAL_LOG").is_none() {
            command.env("CORRAL_LOG", "warn");
        }
        ManagedServer::spawn(command, kafka, log)
    }

    /// Waits until a server [`ManagedServer::launch`]ed with admin address `admin` is ready.
    pub(crate) fn wait_ready_on(&mut self, admin: SocketAddr) -> Result<()> {
        self.wait_ready("corral", || ready(admin))
    }

    /// Starts a Tansu broker with memory storage (the peer of the comparison) and waits until
    /// its Kafka port accepts connections.
    pub(crate) fn start_tansu(binary: &Path, log: &Path) -> Result<ManagedServer> {
        let kafka = free_port()?;
        let url = format!("tcp://{kafka}");
        let mut command = Command::new(binary);
        command
            .arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/");
        let mut server = ManagedServer::spawn(command, kafka, log)?;
        server.wait_ready("tansu", || TcpStream::connect_timeout(&kafka, Duration::from_millis(200)).is_ok())?;
        Ok(server)
    }

    /// Starts Apache Kafka (the jars in `libs`, e.g. `.cache/kafka-4.4.0/libs` as scripts/test.sh
    /// installs them) as one KRaft broker and controller with its log under `dir`, formatted
    /// first, and waits until it answers Metadata with itself as a broker. Group settings follow
    /// `initial_rebalance_delay_ms`, as corral's do in the same suite.
    pub(crate) fn start_kafka(libs: &Path, dir: &Path, log: &Path, initial_rebalance_delay_ms: u64) -> Result<ManagedServer> {
        let delay = [("group.initial.rebalance.delay.ms", initial_rebalance_delay_ms.to_string())];
        ManagedServer::start_kafka_with(libs, dir, log, &delay, "-Xmx1g")
    }

    /// [`ManagedServer::start_kafka`] with more broker properties (`settings`, after the
    /// defaults, so they win) and the JVM's heap option (`-Xmx1g`).
    pub(crate) fn start_kafka_with(libs: &Path, dir: &Path, log: &Path, settings: &[(&str, String)], heap: &str) -> Result<ManagedServer> {
        let (kafka, controller) = (free_port()?, free_port()?);
        std::fs::create_dir_all(dir)?;
        let config = dir.join("server.properties");
        let log4j = dir.join("log4j2.properties");
        let properties = [
            ("process.roles", "broker,controller".to_string()),
            ("node.id", "1".into()),
            ("controller.quorum.voters", format!("1@{controller}")),
            ("listeners", format!("PLAINTEXT://{kafka},CONTROLLER://{controller}")),
            ("advertised.listeners", format!("PLAINTEXT://{kafka}")),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".into()),
            ("controller.listener.names", "CONTROLLER".into()),
            ("inter.broker.listener.name", "PLAINTEXT".into()),
            ("log.dirs", dir.join("data").display().to_string()),
            ("num.partitions", "1".into()),
            ("offsets.topic.replication.factor", "1".into()),
            ("transaction.state.log.replication.factor", "1".into()),
            ("transaction.state.log.min.isr", "1".into()),
            ("share.coordinator.state.topic.replication.factor", "1".into()),
            ("share.coordinator.state.topic.min.isr", "1".into()),
            // Two cores for everything: fewer threads than Kafka's defaults.
            ("num.network.threads", "2".into()),
            ("num.io.threads", "4".into()),
            ("background.threads", "4".into()),
        ];
        let lines = properties.iter().map(|(k, v)| (*k, v)).chain(settings.iter().map(|(k, v)| (*k, v)));
        std::fs::write(&config, lines.map(|(k, v)| format!("{k}={v}\n")).collect::<String>())?;
        std::fs::write(&log4j, KAFKA_LOG4J2)?;
        let java = |heap: &str| {
            let mut command = Command::new("java");
            command
                .arg(heap)
                .args(["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"])
                .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
                .arg("-cp")
                .arg(format!("{}/*", libs.display()));
            command
        };
        // A cluster id is 16 random bytes in URL-safe base64; one that starts with '-' would be
        // read as an option.
        let cluster_id = format!("b{}", &uuid::Uuid::new_v4().simple().to_string()[..21]);
        let formatted = java("-Xmx256m")
            .args(["kafka.tools.StorageTool", "format", "--cluster-id", &cluster_id, "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .output()
            .context("cannot run java (Apache Kafka is started with it)")?;
        if !formatted.status.success() {
            bail!(
                "kafka-storage format failed: {}{}",
                String::from_utf8_lossy(&formatted.stdout),
                String::from_utf8_lossy(&formatted.stderr)
            );
        }
        let mut command = java(heap);
        command.arg("kafka.Kafka").arg(&config);
        let mut server = ManagedServer::spawn(command, kafka, log)?;
        server.wait_ready("kafka", || kafka_ready(kafka))?;
        Ok(server)
    }

    /// Spawns a server, output to `log`, dying with the benchmark. The death signal comes when
    /// the spawning *thread* ends, so servers are spawned from the benchmark's main thread.
    fn spawn(mut command: Command, kafka: SocketAddr, log: &Path) -> Result<ManagedServer> {
        let log_file = File::options().create(true).append(true).open(log).with_context(|| format!("{}", log.display()))?;
        command.stdin(Stdio::null()).stdout(log_file.try_clone()?).stderr(log_file);
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2)
        // and get/setrlimit(2), which are async-signal-safe; it allocates nothing and touches no
        // shared state.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                raise_nofile();
                Ok(())
            });
        }
        let child = command.spawn().with_context(|| format!("cannot start {}", command.get_program().to_string_lossy()))?;
        register_pid(child.id());
        Ok(ManagedServer { child: Some(child), kafka, log: log.to_path_buf() })
    }

    /// Polls `ready` until it holds; fails if the server exits or takes too long.
    fn wait_ready(&mut self, name: &str, ready: impl Fn() -> bool) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let Some(child) = self.child.as_mut() else { bail!("{name} is not running") };
            if let Some(status) = child.try_wait()? {
                if let Some(child) = self.child.take() {
                    unregister_pid(child.id());
                }
                bail!("{name} exited during startup ({status}):\n{}", self.log_tail());
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{name} not ready after {READY_TIMEOUT:?}:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Graceful stop: SIGTERM, then wait for exit (killed if it takes too long).
    pub(crate) fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let _registered = Unregister(child.id());
        // SAFETY: kill(2) with a pid we own and have not reaped (so it cannot have been reused).
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                // A signal exit is how some servers (Tansu) answer SIGTERM, and the JVM (Kafka)
                // exits with 128 + SIGTERM.
                if !status.success() && status.code().is_some_and(|code| code != 128 + libc::SIGTERM) {
                    bail!("server exited with {status} on SIGTERM:\n{}", self.log_tail());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("server did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            unregister_pid(child.id());
        }
    }
}

/// Unregisters a pid once its process has been waited for, on every path out of `stop`.
struct Unregister(u32);

impl Drop for Unregister {
    fn drop(&mut self) {
        unregister_pid(self.0);
    }
}

/// Open files a peer broker may need: Kafka keeps a descriptor per segment (its documentation
/// asks for 100,000+); corral keeps at most `storage.max_open_files`. Raised as far as the
/// process is allowed (a privileged one may raise the hard limit too); failures leave the limit
/// as it was.
const WANT_NOFILE: libc::rlim_t = 262_144;

/// Runs between fork and exec: only async-signal-safe calls.
fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= WANT_NOFILE {
            return;
        }
        let raised = libc::rlimit { rlim_cur: WANT_NOFILE, rlim_max: limit.rlim_max.max(WANT_NOFILE) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            let soft = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
    }
}

/// The open-file limit a server started now would get (this process's soft limit, raised as
/// far as allowed first, is what the child inherits before its own attempt).
pub(crate) fn open_file_limit() -> u64 {
    raise_nofile();
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur
}

pub(crate) fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Kafka's log configuration, shared with the tests' Kafka cluster.
const KAFKA_LOG4J2: &str = include_str!("../../tests/kafka/log4j2.properties");

/// A Kafka broker is ready once Metadata names it (the listener accepts connections earlier).
fn kafka_ready(addr: SocketAddr) -> bool {
    let answered = || -> Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut frame = bytes::BytesMut::new();
        let request = kafka_protocol::messages::MetadataRequest::default();
        crate::kafka::encode_frame(&mut frame, 1, 1, &kafka_protocol::protocol::StrBytes::from_static_str("corral-bench"), &request)?;
        stream.write_all(&frame)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut body)?;
        let mut body = bytes::Bytes::from(body);
        let _correlation = bytes::Buf::get_i32(&mut body);
        let response = <kafka_protocol::messages::MetadataResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 1)?;
        Ok(!response.brokers.is_empty())
    };
    answered().unwrap_or(false)
}

/// GET /health/ready; true on a 200.
fn ready(admin: SocketAddr) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&admin, Duration::from_millis(200))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET /health/ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head)?;
        Ok(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
    };
    probe().unwrap_or(false)
}

/// (user, system) CPU time of a process, from fields 14 and 15 of /proc/PID/stat.
pub(crate) fn process_cpu_time(pid: u32) -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields are counted after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = clock_ticks();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((Duration::from_secs_f64(user as f64 / ticks), Duration::from_secs_f64(system as f64 / ticks)))
}

/// USER_HZ: the unit of the CPU times in /proc.
pub(crate) fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// A process's resident memory, from /proc/PID/status (kB).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// VmRSS: resident set, anonymous + file-backed + shared.
    pub(crate) rss_kb: u64,
    /// RssAnon: the heap and stacks (what group state costs).
    pub(crate) anon_kb: u64,
    /// RssFile: mapped files (index files, the binary).
    pub(crate) file_kb: u64,
}

pub(crate) fn process_memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
    };
    Some(Memory { rss_kb: field("VmRSS:")?, anon_kb: field("RssAnon:").unwrap_or(0), file_kb: field("RssFile:").unwrap_or(0) })
}

/// What a server used over one scenario.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Resources {
    /// User + system CPU seconds.
    pub(crate) cpu_seconds: Option<f64>,
    /// The highest VmRSS seen (sampled every 50 ms), in kB.
    pub(crate) peak_rss_kb: Option<u64>,
}

/// Measures a server's CPU time and peak resident memory over one scenario: a thread samples
/// VmRSS until [`ResourceMeter::finish`].
pub(crate) struct ResourceMeter {
    pid: u32,
    cpu_before: Option<(Duration, Duration)>,
    peak_kb: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl ResourceMeter {
    const SAMPLE_EVERY: Duration = Duration::from_millis(50);

    pub(crate) fn start(pid: u32) -> ResourceMeter {
        use std::sync::atomic::Ordering;
        let peak_kb = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (peak, stopped) = (peak_kb.clone(), stop.clone());
        let sampler = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || loop {
                if let Some(m) = process_memory(pid) {
                    peak.fetch_max(m.rss_kb, Ordering::Relaxed);
                }
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Self::SAMPLE_EVERY);
            })
            .ok();
        ResourceMeter { pid, cpu_before: process_cpu_time(pid), peak_kb, stop, sampler }
    }

    pub(crate) fn finish(mut self) -> Resources {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            let _ = sampler.join();
        }
        let cpu =
            self.cpu_before.zip(process_cpu_time(self.pid)).map(|((u0, s0), (u1, s1))| (u1 + s1).saturating_sub(u0 + s0).as_secs_f64());
        let peak = self.peak_kb.load(Ordering::Relaxed);
        Resources { cpu_seconds: cpu, peak_rss_kb: (peak > 0).then_some(peak) }
    }
}
