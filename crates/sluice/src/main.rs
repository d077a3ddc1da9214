//! `sluice`: the gateway and its tools. This file only parses the command line and hands off;
//! see `run.rs` for start-up and shutdown and `demo.rs` for the built-in demo origin.

mod demo;
mod run;

use clap::{Parser, Subcommand};

/// mimalloc: the proxy allocates and frees small buffers and header maps per request, where
/// glibc's malloc cost about 7% of a keep-alive benchmark's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
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
        /// Where the default configuration keeps its generated certificates.
        #[arg(long, env = "SLUICE_STATE_DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Validate a configuration file without starting; exit status 1 if it has errors.
    Check {
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the embedded default configuration (a starting point for a real file).
    DefaultConfig,
    /// Print the demo origin's ~100 KiB HTML page (the benchmark's compression body).
    DemoPage,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Run {
        config: None,
        state_dir: None,
    }) {
        Command::Run { config, state_dir } => run::run(config, state_dir),
        Command::Check { config } => return run::check(&config),
        Command::DefaultConfig => {
            print!("{}", sluice_config::DEFAULT_CONFIG_TEMPLATE);
            Ok(())
        }
        Command::DemoPage => {
            use std::io::Write;
            std::io::stdout()
                .write_all(demo::page())
                .map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}
