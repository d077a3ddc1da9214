//! Fleet mode in the binary: starting from etcd (or the cache file), and `sluice config
//! push|pull`.

use anyhow::Context as _;
use sluice_config::Snapshot;
use sluice_control::ReloadError;
use sluice_fleet::{Etcd, Fleet, Keyring};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The fleet of a file that says `[config] source = "etcd"`, with its objects read; `None`
/// for a file that holds everything.
pub(crate) async fn start(path: &Path) -> anyhow::Result<Option<Arc<Fleet>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let base_dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Some(source) = sluice_config::fleet_source(&text, &path.display().to_string(), base_dir)?
    else {
        return Ok(None);
    };
    let endpoints = source.endpoints.join(", ");
    let prefix = source.prefix.clone();
    let fleet = Fleet::start(source, path, text)
        .await
        .map_err(|e| anyhow::anyhow!("fleet mode: {e}"))?;
    let status = sluice_control::SharedObjects::status(fleet.as_ref());
    eprintln!(
        "sluice: fleet mode: etcd {endpoints} prefix {prefix}: {} route(s), {} upstream(s), {} certificate(s) at revision {} (from {})",
        status["objects"]["routes"],
        status["objects"]["upstreams"],
        status["objects"]["certificates"],
        status["revision"],
        status["started_from"].as_str().unwrap_or("?"),
    );
    Ok(Some(fleet))
}

/// The first configuration of a fleet gateway.
pub(crate) fn initial(fleet: &Fleet) -> anyhow::Result<Snapshot> {
    fleet.initial().map_err(|e| match e {
        ReloadError::Invalid(errors) => {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("{}", lines.join("\n"))
        }
        other => anyhow::anyhow!("{other}"),
    })
}

/// How this gateway announces itself to the fleet: `host:port` as its name (unique where
/// several share a host) and its admin listener's URL (the host name stands for an address
/// that listens on every interface).
pub(crate) fn member(admin: std::net::SocketAddr, tls: bool) -> (String, String) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let scheme = if tls { "https" } else { "http" };
    let reach = if admin.ip().is_unspecified() {
        format!("{host}:{}", admin.port())
    } else {
        admin.to_string()
    };
    (
        format!("{host}:{}", admin.port()),
        format!("{scheme}://{reach}"),
    )
}

/// What `sluice config push|pull` connect with.
pub(crate) struct EtcdArgs {
    pub(crate) endpoints: String,
    pub(crate) prefix: String,
    pub(crate) keyring: Option<PathBuf>,
}

async fn connect(args: &EtcdArgs) -> anyhow::Result<(Etcd, Keyring)> {
    let keyring = match &args.keyring {
        None => Keyring::default(),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Keyring::new(
                sluice_config::parse_keyring(&text)
                    .map_err(|e| anyhow::anyhow!("keyring {}: {e}", p.display()))?,
            )
        }
    };
    let etcd = Etcd::connect_to(&args.endpoints, &args.prefix)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok((etcd, keyring))
}

/// `sluice config push --etcd URL FILE`.
pub(crate) fn push(file: &Path, args: &EtcdArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (etcd, keyring) = connect(args).await?;
        let p = sluice_fleet::push(file, &etcd, &keyring)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        println!(
            "pushed {} route(s), {} upstream(s), {} certificate(s){} to {} at revision {}",
            p.routes,
            p.upstreams,
            p.certificates,
            if p.settings { " and the settings" } else { "" },
            args.prefix,
            p.revision
        );
        Ok(())
    })
}

/// `sluice config pull --etcd URL --out FILE`.
pub(crate) fn pull(out: &Path, args: &EtcdArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (etcd, keyring) = connect(args).await?;
        let n = sluice_fleet::pull(&etcd, &keyring, out)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        println!(
            "wrote {n} object(s) from {} to {}",
            args.prefix,
            out.display()
        );
        Ok(())
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
