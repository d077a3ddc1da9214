//! The private-key engine chain: which engines run a handshake's private-key operations, in
//! which order, and why.
//!
//! An `engines` list in `[offload.crypto]` is obeyed as written. Without one, the chain is
//! chosen at start from what this machine offers, as Tengine and Intel's QAT_Engine detect
//! their accelerators: `mb` first where the CPU has AVX-512 IFMA (RSA keys signed eight at a
//! time; it answers "unsupported" for ECDSA and Ed25519 keys, which go on down the chain),
//! then `inline`, which always ends the chain. Where handshakes run on threads of their own
//! (`[offload.handshakes] isolate`, the default), those threads, one per CPU at a lower
//! priority, are already what the `pool` engine was for: a signature there never holds up the
//! event loop, and signing on the spot saves the hand-off (10% more RSA handshakes a second
//! on one core, `bench/run`). Where handshakes share the event loop, `pool` (a thread per
//! CPU) comes before `inline`, as before. The remote `keyless` engine is never chosen by the probe: where keys live is the
//! operator's decision, not a property of the machine. A certificate's own
//! `offload_engines` adds the engines it names that the chain lacks.
//!
//! This module decides the chain; `engines.rs` turns it and the configuration into the
//! crypto crate's `CryptoConfig` and starts the engines; `offload.rs` only carries jobs
//! between BoringSSL and them.

use sluice_config::{CryptoEngine, CryptoOffload, Snapshot};
use sluice_crypto::{EngineKind, Kernel};
use std::sync::LazyLock;

/// What this machine offers the engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The CPU has AVX-512 F and IFMA, which the `mb` engine's kernel needs.
    pub ifma: bool,
    /// CPUs this process may use (its affinity mask and cgroup quota).
    pub cpus: usize,
}

impl Probe {
    /// This machine, probed once per process.
    pub fn machine() -> Probe {
        static PROBE: LazyLock<Probe> = LazyLock::new(|| Probe {
            ifma: Kernel::detect().is_some(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        });
        *PROBE
    }
}

/// Where a chain came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `[offload.crypto] engines`, obeyed as written.
    Configured,
    /// Chosen at start from the [`Probe`].
    Probed,
}

impl Origin {
    /// `"configured"` or `"probed"`, as `/status` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Configured => "configured",
            Origin::Probed => "probed",
        }
    }
}

/// The engines before `inline`, in order, and why they are these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Tried in this order; `inline` follows them.
    pub engines: Vec<EngineKind>,
    /// Configured or probed.
    pub origin: Origin,
    /// One sentence for `sluice check`, the start-up log and `/status`.
    pub why: String,
}

impl Chain {
    /// The chain `crypto` asks for on a machine that offers `probe`, with handshakes on
    /// threads of their own (`isolated`) or on the event loop.
    pub fn choose(crypto: &CryptoOffload, isolated: bool, probe: Probe) -> Chain {
        let threads = crypto.pool_threads.unwrap_or(probe.cpus);
        if let Some(list) = &crypto.engines {
            return Chain {
                engines: engine_kinds(list),
                origin: Origin::Configured,
                why: "as [offload.crypto] engines names them".to_owned(),
            };
        }
        let cpu = if probe.ifma {
            "this CPU has AVX-512 IFMA, so RSA keys sign on `mb` (eight at a time)"
        } else {
            "this CPU has no AVX-512 IFMA (no `mb`)"
        };
        let mut engines = Vec::new();
        if probe.ifma {
            engines.push(EngineKind::Mb);
        }
        let rest = if isolated {
            format!(
                "{} on the handshake threads (one per CPU, below established traffic)",
                if probe.ifma {
                    "other keys sign"
                } else {
                    "every key signs"
                }
            )
        } else {
            engines.push(EngineKind::Pool);
            format!(
                "{} on `pool` ({threads} thread(s))",
                if probe.ifma {
                    "other keys"
                } else {
                    "every key signs"
                }
            )
        };
        let why = format!("chosen at start: {cpu}; {rest}");
        Chain {
            engines,
            origin: Origin::Probed,
            why,
        }
    }

    /// The engine names, `inline` last: `"mb, pool, inline"`.
    pub fn names(&self) -> String {
        self.engines
            .iter()
            .map(|e| name(*e))
            .chain(["inline"])
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The chain `snapshot` asks for on this machine.
    pub fn of(snapshot: &Snapshot) -> Chain {
        Chain::choose(
            &snapshot.offload.crypto,
            snapshot.offload.handshakes.isolate,
            Probe::machine(),
        )
    }
}

/// An engine's name as the configuration spells it.
pub fn name(e: EngineKind) -> &'static str {
    match e {
        EngineKind::Pool => "pool",
        EngineKind::Mb => "mb",
        EngineKind::Keyless => "keyless",
    }
}

/// The engines a certificate's jobs may use: its own `offload_engines`, or the chain's.
pub(crate) fn certificate_engines(
    snapshot: &Snapshot,
    cert: &sluice_config::Certificate,
) -> Vec<EngineKind> {
    match &cert.offload_engines {
        Some(list) => engine_kinds(list),
        None => Chain::of(snapshot).engines,
    }
}

/// Maps configured engine names to the crypto crate's.
pub(crate) fn engine_kinds(engines: &[CryptoEngine]) -> Vec<EngineKind> {
    engines
        .iter()
        .map(|e| match e {
            CryptoEngine::Pool => EngineKind::Pool,
            CryptoEngine::Mb => EngineKind::Mb,
            CryptoEngine::Keyless => EngineKind::Keyless,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crypto(engines: Option<Vec<CryptoEngine>>) -> CryptoOffload {
        CryptoOffload {
            engines,
            ..CryptoOffload::default()
        }
    }

    const IFMA: Probe = Probe {
        ifma: true,
        cpus: 4,
    };
    const NO_IFMA: Probe = Probe {
        ifma: false,
        cpus: 4,
    };

    #[test]
    fn with_ifma_rsa_goes_to_mb_first() {
        let c = Chain::choose(&crypto(None), true, IFMA);
        assert_eq!(c.engines, vec![EngineKind::Mb]);
        assert_eq!(c.origin, Origin::Probed);
        assert_eq!(c.names(), "mb, inline");
        assert!(c.why.contains("has AVX-512 IFMA"), "{}", c.why);
        assert!(c.why.contains("handshake threads"), "{}", c.why);
        // Handshakes on the event loop: the pool keeps signatures off it.
        let c = Chain::choose(&crypto(None), false, IFMA);
        assert_eq!(c.engines, vec![EngineKind::Mb, EngineKind::Pool]);
        assert!(c.why.contains("4 thread(s)"), "{}", c.why);
    }

    #[test]
    fn without_ifma_the_handshake_threads_or_the_pool() {
        let c = Chain::choose(&crypto(None), true, NO_IFMA);
        assert_eq!((c.engines.len(), c.names()), (0, "inline".to_owned()));
        assert!(c.why.contains("no AVX-512 IFMA"), "{}", c.why);
        let c = Chain::choose(&crypto(None), false, NO_IFMA);
        assert_eq!(c.engines, vec![EngineKind::Pool]);
        assert_eq!(c.origin, Origin::Probed);
    }

    #[test]
    fn pool_threads_from_the_file_are_the_ones_reported() {
        let mut c = crypto(None);
        c.pool_threads = Some(2);
        assert!(
            Chain::choose(&c, false, NO_IFMA)
                .why
                .contains("2 thread(s)")
        );
    }

    #[test]
    fn a_configured_list_is_obeyed_as_written_whatever_the_cpu() {
        for (probe, isolated) in [
            (IFMA, true),
            (NO_IFMA, true),
            (IFMA, false),
            (NO_IFMA, false),
        ] {
            let c = Chain::choose(&crypto(Some(vec![CryptoEngine::Pool])), isolated, probe);
            assert_eq!(
                (c.engines, c.origin),
                (vec![EngineKind::Pool], Origin::Configured)
            );
            // `mb` named on a CPU without IFMA stays: it answers "unsupported" and jobs go on.
            let c = Chain::choose(
                &crypto(Some(vec![CryptoEngine::Mb, CryptoEngine::Keyless])),
                isolated,
                probe,
            );
            assert_eq!(c.engines, vec![EngineKind::Mb, EngineKind::Keyless]);
            let c = Chain::choose(&crypto(Some(vec![])), isolated, probe);
            assert_eq!((c.engines.len(), c.names()), (0, "inline".to_owned()));
        }
    }

    #[test]
    fn the_embedded_default_leaves_the_choice_to_the_probe() {
        let dir = tempfile::tempdir().unwrap();
        let text = sluice_config::default_config_text(&sluice_config::DefaultConfigParams {
            state_dir: dir.path(),
        });
        let raw: toml::Value = toml::from_str(&text).unwrap();
        assert!(
            raw["offload"]["crypto"].get("engines").is_none(),
            "[offload.crypto] engines must be left to the probe: {:?}",
            raw["offload"]["crypto"]
        );
    }
}
