//! `sluice-keyserver`: holds private keys and signs for Sluice gateways over mutual TLS.
//!
//! With `--config FILE` it serves what the file says (see `sluice_keyless::server_config`).
//! Without, it runs a demo: it serves the keys of the gateway's embedded default certificates
//! (`localhost-rsa`, `localhost-ecdsa` in the state directory, generated if missing), with a
//! self-signed server certificate and a self-signed client certificate for the gateway
//! (pinned by fingerprint), and prints the `[offload.keyless]` block a gateway needs.

use anyhow::Context as _;
use clap::Parser;
use sluice_keyless::server_config::{KeyEntry, PinnedClient};
use sluice_keyless::{KeyServer, ServerConfig};
use sluice_tls::selfsigned;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Sluice's key server: private keys stay here; gateways ask for signatures.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    /// Configuration file (TOML). Without it: the demo described in `--help`.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The demo's directory (the gateway's state directory, so both use the same keys).
    #[arg(long, env = "SLUICE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
    /// Write this program's man page (sluice-keyserver.1) into DIR and exit.
    #[arg(long, value_name = "DIR")]
    manpage: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-keyserver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(dir) = &cli.manpage {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let command = <Cli as clap::CommandFactory>::command().name("sluice-keyserver");
        return clap_mangen::generate_to(command, dir)
            .with_context(|| format!("writing the man page into {}", dir.display()));
    }
    let config = match &cli.config {
        Some(path) => ServerConfig::load(path)?,
        None => demo_config(
            &cli.state_dir
                .unwrap_or_else(sluice_tls::selfsigned::default_state_dir),
        )?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let server = KeyServer::bind(&config).await?;
        if cli.check {
            println!("configuration OK");
            return Ok(());
        }
        tracing::info!(
            listen = %server.local_addr()?,
            metrics = ?server.metrics_addr(),
            "sluice-keyserver serving"
        );
        tokio::select! {
            () = server.run() => {}
            _ = tokio::signal::ctrl_c() => tracing::info!("stopping"),
        }
        anyhow::Ok(())
    })
}

fn demo_config(dir: &Path) -> anyhow::Result<ServerConfig> {
    selfsigned::ensure_default_certificates(dir)?;
    let pair = |stem: &str, hosts: &[&str]| -> anyhow::Result<(PathBuf, PathBuf)> {
        let (crt, key) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        if !crt.exists() || !key.exists() {
            let (c, k) = selfsigned::generate(selfsigned::KeyKind::EcdsaP256, hosts, 365)?;
            selfsigned::write_pair(dir, stem, &c, &k)?;
        }
        Ok((crt, key))
    };
    let (server_crt, server_key) = pair("keyserver", &["localhost", "127.0.0.1"])?;
    let (client_crt, client_key) = pair("keyless-client", &["sluice-gateway"])?;
    let client = boring::x509::X509::from_pem(&std::fs::read(&client_crt)?)?;
    let fingerprint =
        sluice_keyless::fingerprint(&client).context("fingerprinting the client certificate")?;
    println!(
        "# Demo key server on 127.0.0.1:2407 (metrics on 127.0.0.1:9902), serving the keys of
# the gateway's default certificates in {dir}.
# A gateway signs through it with this in its configuration:
[offload.crypto]
engines = [\"keyless\", \"pool\"]

[offload.keyless]
servers = [\"127.0.0.1:2407\"]
server_name = \"localhost\"
ca = '{server_crt}'
certificate = '{client_crt}'
key = '{client_key}'
fallback = \"local\"
",
        dir = dir.display(),
        server_crt = server_crt.display(),
        client_crt = client_crt.display(),
        client_key = client_key.display(),
    );
    Ok(ServerConfig {
        listen: "127.0.0.1:2407".parse()?,
        metrics: Some("127.0.0.1:9902".parse()?),
        certificate: server_crt,
        key: server_key,
        client_ca: None,
        clients: vec![PinnedClient {
            name: "demo-gateway".into(),
            fingerprint,
        }],
        keys: ["localhost-rsa", "localhost-ecdsa"]
            .iter()
            .map(|k| KeyEntry {
                file: dir.join(format!("{k}.key")),
                clients: None,
            })
            .collect(),
        engines: vec![sluice_crypto::EngineKind::Pool],
        pool_threads: None,
        max_pending: 128,
    })
}
