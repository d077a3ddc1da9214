//! Starting the private-key engines: the chain [`crate::chain`] chose, the engines
//! certificates name, and `[offload.crypto]`/`[offload.keyless]` become the crypto crate's
//! `CryptoConfig` and a dispatcher, held by a [`KeyOffload`].

use crate::chain::{Chain, Probe, engine_kinds};
use crate::offload::KeyOffload;
use sluice_config::Snapshot;
use sluice_crypto::{CryptoConfig, EngineKind, MbConfig, VerifyPolicy, build_dispatcher};
use sluice_offload::BreakerConfig;
use std::sync::Arc;

/// The engines to start: the chain's, then any other that a certificate's own
/// `offload_engines` names.
fn engines_to_start(snapshot: &Snapshot, chain: &Chain) -> Vec<EngineKind> {
    let mut engines = chain.engines.clone();
    for cert in &snapshot.certificates {
        for e in engine_kinds(cert.offload_engines.as_deref().unwrap_or_default()) {
            if !engines.contains(&e) {
                engines.push(e);
            }
        }
    }
    engines
}

impl KeyOffload {
    /// Everything the engines [`KeyOffload::from_config`] would build from `snapshot` depend
    /// on: `[offload.crypto]`, the chain chosen for it, the engines certificates name, and
    /// `[offload.keyless]` with its files. Engines are process-wide; a reload keeps them
    /// while this stays the same.
    pub fn identity(snapshot: &Snapshot) -> Vec<u8> {
        let mut h = boring::sha::Sha256::new();
        h.update(format!("{:?}", snapshot.offload.crypto).as_bytes());
        h.update(format!("{:?}", engines_to_start(snapshot, &Chain::of(snapshot))).as_bytes());
        if let Some(k) = &snapshot.offload.keyless {
            // Its Debug leaves out the key material (hashed below) and the ping interval.
            h.update(format!("{k:?}{:?}", k.ping_interval).as_bytes());
            for c in k.ca.iter().chain(&k.certificate) {
                h.update(&c.to_der().unwrap_or_default());
            }
            h.update(&k.key.private_key_to_der().unwrap_or_default());
        }
        h.finish().to_vec()
    }

    /// Starts the engines of the chain `snapshot` asks for on this machine, with every
    /// engine that a certificate's own `offload_engines` names.
    pub fn from_config(snapshot: &Snapshot) -> std::io::Result<Arc<Self>> {
        let c = &snapshot.offload.crypto;
        let chain = Chain::of(snapshot);
        let threads = c.pool_threads.unwrap_or(Probe::machine().cpus);
        let config = CryptoConfig {
            engines: engines_to_start(snapshot, &chain),
            pool_threads: threads,
            pool_capacity: c.pool_capacity.unwrap_or(64 * threads),
            deadline: c.deadline,
            breaker: BreakerConfig {
                failures: c.breaker_failures,
                backoff: c.breaker_backoff,
                max_backoff: c.breaker_backoff.max(std::time::Duration::from_secs(30)),
            },
            verify: if c.verify_all {
                VerifyPolicy::All
            } else {
                VerifyPolicy::Rsa
            },
            mb: MbConfig {
                max_wait: c.mb_max_wait,
                capacity: c.mb_capacity,
                min_batch: c.mb_min_batch,
                on_worker: c.mb_on_worker,
                lanes: c.mb_lanes,
            },
        };
        let keyless =
            match (
                &snapshot.offload.keyless,
                config.engines.contains(&EngineKind::Keyless),
            ) {
                (Some(k), true) => Some(sluice_keyless::Keyless::start(k).map_err(|e| {
                    std::io::Error::other(format!("starting the keyless engine: {e}"))
                })?),
                _ => None,
            };
        let engine = keyless
            .clone()
            .map(|k| k as Arc<dyn sluice_offload::Engine<sluice_crypto::KeyJob>>);
        tracing::info!(engines = %chain.names(), "private-key engines: {}", chain.why);
        let offload = KeyOffload {
            dispatcher: Arc::new(build_dispatcher(&config, engine)?),
            keyless,
            verify: config.verify,
            inline_only: config.engines.is_empty(),
            chain,
        };
        if let Some(k) = &offload.keyless
            && !k.wait_up(std::time::Duration::from_secs(2))
        {
            tracing::warn!("no key server is up yet; handshakes fall back until one is");
        }
        Ok(Arc::new(offload))
    }
}
