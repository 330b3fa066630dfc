//! The `corral` binary: parse the command line, validate the config before binding anything,
//! start the node, and stop it cleanly on SIGTERM or SIGINT.

use std::process::ExitCode;

use clap::Parser;
use corral::cli::{Cli, Command};
use corral::config::Config;
use corral::server::Server;

/// mimalloc reserves large allocations lazily (MAP_NORESERVE under Linux's default overcommit),
/// so a request whose array header claims billions of elements costs address space, not memory,
/// until decoding rejects it; the codec sizes vectors from such headers before checking them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for an invalid configuration (also clap's code for bad arguments).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CORRAL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=off")),
        )
        .with_writer(std::io::stderr)
        .init();

    match cli.command {
        Command::CheckConfig { file } => {
            let checked = Config::load(&file)
                .and_then(|c| c.validate().map(|()| c))
                .and_then(|c| corral::security::check_files(&c).map(|()| c))
                .and_then(|c| corral::upstream::dialer::check_files(&c).map(|()| c));
            match checked {
                Ok(_) => {
                    println!("{}: valid", file.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("corral: {e}");
                    ExitCode::from(EXIT_CONFIG)
                }
            }
        }
        Command::Groups(args) => corral::cli::groups::run(args),
        Command::SaslCredential(args) => corral::cli::sasl_credential::run(args),
        Command::Serve(args) => {
            let config = match args.config() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("corral: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            serve(config)
        }
    }
}

fn serve(config: Config) -> ExitCode {
    // SIGTERM and SIGINT are caught from before the node starts: a signal that arrives as soon as
    // it reports ready must drain it, not kill it.
    let signals = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("signal runtime");
    let mut caught = {
        let _runtime = signals.enter();
        Signals::install()
    };
    let server = match Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("corral: {e}");
            return ExitCode::FAILURE;
        }
    };
    signals.block_on(async {
        let signal = caught.next().await;
        tracing::info!(signal, "shutting down: draining connections");
        server.shutdown();
    });
    // A second signal while draining stops at once.
    let waiter = std::thread::spawn(move || server.wait());
    let finished = signals.block_on(async {
        loop {
            tokio::select! {
                _ = caught.next() => return false,
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                    if waiter.is_finished() {
                        return true;
                    }
                }
            }
        }
    });
    if !finished {
        eprintln!("corral: second signal, exiting without a clean shutdown");
        return ExitCode::from(130);
    }
    match waiter.join() {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("corral: {e}");
            ExitCode::FAILURE
        }
        Err(_) => ExitCode::FAILURE,
    }
}

/// The signals that stop the server.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
        }
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
