//! `sluice`: the gateway and its tools. This file only parses the command line and hands off;
//! see `run.rs` for start-up and shutdown and `demo.rs` for the built-in demo origin.

mod allocator;
mod corpus;
mod ct;
mod demo;
mod fleet;
mod instance;
mod liveness;
mod run;
mod service;
mod speed;
mod upgrade;

use clap::{Parser, Subcommand};

/// mimalloc: the proxy allocates and frees small buffers and header maps per request, where
/// glibc's malloc cost about 7% of a keep-alive benchmark's CPU (see `allocator.rs` for how
/// it is called).
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;
use std::path::PathBuf;
use std::process::ExitCode;

/// Sluice, an HTTPS access gateway.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway (on the embedded default configuration when no --config is given).
    Run {
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Where the default configuration keeps its generated certificates, and where the
        /// pid file goes.
        #[arg(long, env = "SLUICE_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// The pid file (default: sluice.pid in the state directory).
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// Reload the running gateway's configuration (SIGHUP) and print the outcome; exit status
    /// 1 if it was refused (the old configuration keeps serving).
    Reload {
        /// The running gateway's state directory (its pid file is sluice.pid there).
        #[arg(long, env = "SLUICE_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// The running gateway's pid file (instead of the state directory's).
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// How long to wait for the outcome.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Replace the running gateway by the binary now at its path, without dropping a
    /// connection (SIGUSR2): the new process takes over the listening sockets, the old one
    /// drains. Exit status 1 if the new binary did not start (the old one keeps serving).
    Upgrade {
        /// The running gateway's state directory (its pid file is sluice.pid there).
        #[arg(long, env = "SLUICE_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// The running gateway's pid file (instead of the state directory's).
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// How long to wait for the outcome.
        #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Validate a configuration file without starting; exit status 1 if it has errors.
    Check {
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the embedded default configuration as a file that runs as it is (a starting
    /// point for a real file); its certificates and admin token are made in the state
    /// directory if missing.
    DefaultConfig {
        /// Where the certificates and the admin token are (default: as `sluice run`).
        #[arg(long, env = "SLUICE_STATE_DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Fleet mode: move a file's routes, upstreams, certificates and settings into etcd
    /// (`push`), or write the fleet's back out as TOML (`pull`).
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print an API key file line (`NAME:sha256:HEX`) for the key read from standard input
    /// (one line), for `[route.auth] keys = { file = ... }`: the file holds only the hash.
    HashKey {
        /// The key's name (the subject of requests that present it).
        name: String,
    },
    /// Print the demo origin's ~100 KiB HTML page (the benchmark's compression body).
    DemoPage,
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish or powershell),
    /// e.g. `sluice completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (sluice.1, and sluice-run.1 and so on for each command) into DIR.
    Manpages {
        /// The directory to write them to (made if missing).
        dir: PathBuf,
    },
    /// dudect on the mb kernel: do RSA-2048 batches take the same time whatever the private
    /// keys? Welch's t between a fixed key and random keys (fails at |t| >= 4.5).
    CtCheck {
        /// auto (IFMA where the CPU has it), ifma, ifma4, portable, or leaky (the portable
        /// kernel made to leak: the method's self-test, with --expect-leak).
        #[arg(long, default_value = "auto")]
        kernel: String,
        /// RSA key size: 2048, 3072 or 4096.
        #[arg(long, default_value_t = 2048)]
        bits: u32,
        /// How long to measure (dudect wants ~10^6 batches for a verdict).
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// At most this many batches.
        #[arg(long, default_value_t = 100_000_000)]
        max_samples: usize,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        /// |t| at or above this fails (dudect's 4.5 for ~10^6 batches; a short run takes a
        /// higher bound it can afford).
        #[arg(long, default_value_t = 4.5)]
        bound: f64,
        /// Print the result without failing on it.
        #[arg(long)]
        report_only: bool,
        /// Fail unless the times depend on the key (with --kernel leaky).
        #[arg(long)]
        expect_leak: bool,
    },
    /// Signatures per second per algorithm and engine, like `openssl speed -async_jobs`;
    /// gzip, br and zstd: compression MB/s and ratio on a bundled corpus.
    Speed {
        /// rsa2048 rsa3072 rsa4096 ecdsap256 ecdsap384 ed25519 gzip br zstd (default: the
        /// signature algorithms).
        algorithms: Vec<String>,
        /// inline, pool, mb (AVX-512 IFMA multi-buffer RSA on its own thread), mb-worker (the
        /// same, batches computed on the submitting task's thread), or boringssl (BoringSSL's own
        /// signing, for reference).
        #[arg(long, default_value = "inline")]
        engine: String,
        /// Jobs in flight at once.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Seconds per algorithm.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Threads of the pool engine (default: the CPUs this process may use).
        #[arg(long)]
        threads: Option<usize>,
        /// Verify "rsa" signatures before release (the default), or "all".
        #[arg(long, default_value = "rsa")]
        verify: String,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Compression level (default: gzip 1, br 4, zstd 3).
        #[arg(long)]
        level: Option<u32>,
        /// gzip backend: isal (levels 0-3) or zlib-rs (1-9).
        #[arg(long, default_value = "isal")]
        backend: String,
        /// Lanes per RSA-2048 mb batch: 8 (512-bit IFMA, the default) or 4 (256-bit).
        #[arg(long, value_parser = clap::builder::TypedValueParser::map(clap::builder::PossibleValuesParser::new(["4", "8"]),
            |s: String| s.parse::<usize>().unwrap_or(8)))]
        mb_lanes: Option<usize>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigAction {
    /// Import FILE's routes, upstreams, certificates (keys sealed with --keyring) and
    /// [compression]/[rate_limit] into etcd; objects etcd has that FILE lacks are kept.
    Push {
        /// Configuration file (TOML); it must pass `sluice check`.
        file: PathBuf,
        #[command(flatten)]
        etcd: EtcdOpts,
    },
    /// Write the fleet's objects to a TOML file (certificates as PEM files in certs/ beside it).
    Pull {
        /// The TOML file to write.
        #[arg(long, short)]
        out: PathBuf,
        #[command(flatten)]
        etcd: EtcdOpts,
    },
}

#[derive(clap::Args, Debug)]
struct EtcdOpts {
    /// etcd endpoints, comma-separated (host:port or http(s)://host:port).
    #[arg(long)]
    etcd: String,
    /// The fleet's key prefix.
    #[arg(long, default_value = "/sluice")]
    prefix: String,
    /// Keyring file (`ID HEX` lines) that seals and opens private keys.
    #[arg(long)]
    keyring: Option<PathBuf>,
}

impl EtcdOpts {
    fn args(self) -> fleet::EtcdArgs {
        fleet::EtcdArgs {
            endpoints: self.etcd,
            prefix: self.prefix,
            keyring: self.keyring,
        }
    }
}

/// The pid file a tool command looks for.
fn pid_file_of(state_dir: Option<PathBuf>, pid_file: Option<PathBuf>) -> PathBuf {
    pid_file.unwrap_or_else(|| {
        state_dir
            .unwrap_or_else(sluice_tls::selfsigned::default_state_dir)
            .join("sluice.pid")
    })
}

/// 0 when the tool's operation succeeded, 1 when it was refused, 2 when it could not run.
fn exit_code(result: anyhow::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `sluice manpages DIR`: one page for the program and one per command, from the same
/// definitions as `--help`, so they cannot drift.
fn manpages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let command = <Cli as clap::CommandFactory>::command().name("sluice");
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Run {
        config: None,
        state_dir: None,
        pid_file: None,
    }) {
        Command::Run {
            config,
            state_dir,
            pid_file,
        } => run::run(run::RunArgs {
            config,
            state_dir,
            pid_file,
        }),
        Command::Reload {
            state_dir,
            pid_file,
            timeout,
        } => {
            return exit_code(instance::reload(&pid_file_of(state_dir, pid_file), timeout));
        }
        Command::Upgrade {
            state_dir,
            pid_file,
            timeout,
        } => {
            return exit_code(upgrade::upgrade(&pid_file_of(state_dir, pid_file), timeout));
        }
        Command::Check { config } => return run::check(&config),
        Command::HashKey { name } => return hash_key(&name),
        command => tool(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The commands that print, write or measure something and succeed or fail; `main` answers
/// the others, which have exit statuses of their own.
fn tool(command: Command) -> anyhow::Result<()> {
    match command {
        Command::DefaultConfig { state_dir } => run::default_config_file(state_dir),
        Command::Config {
            action: ConfigAction::Push { file, etcd },
        } => fleet::push(&file, &etcd.args()),
        Command::Config {
            action: ConfigAction::Pull { out, etcd },
        } => fleet::pull(&out, &etcd.args()),
        Command::Speed {
            algorithms,
            engine,
            jobs,
            seconds,
            threads,
            verify,
            json,
            level,
            backend,
            mb_lanes,
        } => speed::run(speed::SpeedArgs {
            algorithms,
            engine,
            jobs,
            seconds,
            threads,
            verify,
            json,
            level,
            backend,
            mb_lanes,
        }),
        Command::CtCheck {
            kernel,
            bits,
            seconds,
            max_samples,
            json,
            bound,
            report_only,
            expect_leak,
        } => ct::run(
            &kernel,
            bits,
            seconds,
            max_samples,
            json,
            &ct::Verdict {
                bound,
                report_only,
                expect_leak,
            },
        ),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "sluice", &mut std::io::stdout());
            Ok(())
        }
        Command::Manpages { dir } => manpages(&dir),
        Command::DemoPage => {
            use std::io::Write;
            std::io::stdout()
                .write_all(demo::page())
                .map_err(Into::into)
        }
        Command::Run { .. }
        | Command::Reload { .. }
        | Command::Upgrade { .. }
        | Command::Check { .. }
        | Command::HashKey { .. } => unreachable!("`main` answers {command:?} itself"),
    }
}

/// `sluice hash-key NAME`: the key file line for the key on standard input.
fn hash_key(name: &str) -> ExitCode {
    let mut key = String::new();
    if std::io::stdin().read_line(&mut key).is_err() || key.trim().is_empty() {
        eprintln!(
            "sluice hash-key: give the key on standard input (echo KEY | sluice hash-key NAME)"
        );
        return ExitCode::FAILURE;
    }
    if name.contains([':', '\n']) || name.is_empty() {
        eprintln!("sluice hash-key: a key name may not be empty or hold ':'");
        return ExitCode::FAILURE;
    }
    println!(
        "{}",
        sluice_auth::key_line(name, key.trim_end_matches(['\r', '\n']).as_bytes())
    );
    ExitCode::SUCCESS
}
