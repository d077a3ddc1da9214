//! `sluice`: the gateway and its tools. This file only parses the command line and hands off;
//! see `run.rs` for start-up and shutdown and `demo.rs` for the built-in demo origin.

mod demo;
mod run;

use clap::{Parser, Subcommand};
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}
