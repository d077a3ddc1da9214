//! `[offload]`: the crypto and compression engine chains and the key servers.

use super::{Cx, RawConfig, key_belongs};
use crate::compression::*;
use crate::raw::*;
use crate::snapshot::*;
use boring::pkey::{PKey, Private};
use boring::x509::X509;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `[offload]`: where TLS key operations and compression run, and the key servers.
    pub(super) fn offload(&mut self, raw: &RawOffload, allow_insecure_keys: bool) -> Offload {
        Offload {
            crypto: self.crypto_offload(raw.crypto.as_ref()),
            compress: self.compress_offload(raw.compress.as_ref()),
            keyless: raw
                .keyless
                .as_ref()
                .and_then(|k| self.keyless_offload(k, allow_insecure_keys)),
            handshakes: self.handshakes(raw.handshakes.as_ref()),
        }
    }

    pub(super) fn crypto_engines(
        &mut self,
        list: &Spanned<Vec<String>>,
        key: &str,
    ) -> Vec<CryptoEngine> {
        let mut engines = Vec::new();
        for e in list.get_ref() {
            match e.as_str() {
                "pool" => engines.push(CryptoEngine::Pool),
                "mb" => engines.push(CryptoEngine::Mb),
                "keyless" => engines.push(CryptoEngine::Keyless),
                // The software engine ends every chain; naming it changes nothing.
                "inline" => {}
                other => self.err_at(
                    list,
                    format!("{key} names \"{other}\", which this build does not have"),
                    "use \"pool\" (dedicated threads), \"mb\" (AVX-512 IFMA multi-buffer RSA), \"keyless\" (remote key servers, [offload.keyless]) or [] (sign on the event loop); \"inline\" always ends the chain",
                ),
            }
        }
        engines
    }

    pub(super) fn handshakes(&mut self, raw: Option<&RawOffloadHandshakes>) -> Handshakes {
        let d = Handshakes::default();
        let Some(raw) = raw else { return d };
        let share_percent = match &raw.share_percent {
            Some(v) if *v.get_ref() > 50 => {
                self.err_at(
                    v,
                    format!("[offload.handshakes] share_percent = {} is over 50", v.get_ref()),
                    "use 0 (the default: handshakes run only on cycles established traffic leaves) or a share such as 10 (a tenth of a busy core kept for handshakes)",
                );
                d.share_percent
            }
            Some(v) => *v.get_ref(),
            None => d.share_percent,
        };
        let max_in_progress = match &raw.max_in_progress {
            Some(v) if *v.get_ref() == 0 => {
                self.err_at(
                    v,
                    "[offload.handshakes] max_in_progress must be at least 1",
                    "remove it for the default (128 per CPU)",
                );
                None
            }
            Some(v) => Some(*v.get_ref() as usize),
            None => None,
        };
        Handshakes {
            isolate: raw.isolate.as_ref().map_or(d.isolate, |v| *v.get_ref()),
            share_percent,
            max_in_progress,
        }
    }

    pub(super) fn crypto_offload(&mut self, raw: Option<&RawOffloadCrypto>) -> CryptoOffload {
        let d = CryptoOffload::default();
        let Some(raw) = raw else { return d };
        let engines = raw
            .engines
            .as_ref()
            .map(|list| self.crypto_engines(list, "[offload.crypto] engines"));
        let positive = |cx: &mut Self, v: Option<&Spanned<u32>>, key: &str| -> Option<usize> {
            let v = v?;
            if *v.get_ref() == 0 {
                cx.err_at(
                    v,
                    format!("[offload.crypto] {key} must be at least 1"),
                    "remove it for the default",
                );
                return None;
            }
            Some(*v.get_ref() as usize)
        };
        let pool_threads = positive(self, raw.pool_threads.as_ref(), "pool_threads");
        let pool_capacity = positive(self, raw.pool_capacity.as_ref(), "pool_capacity");
        let breaker_failures = positive(self, raw.breaker_failures.as_ref(), "breaker_failures")
            .map_or(d.breaker_failures, |n| n as u32);
        let verify_all = self
            .choice(
                raw.verify.as_ref(),
                "verify",
                &[("all", true), ("rsa", false)],
            )
            .unwrap_or(d.verify_all);
        CryptoOffload {
            engines,
            pool_threads,
            pool_capacity,
            deadline: self.duration(raw.deadline.as_ref()).unwrap_or(d.deadline),
            breaker_failures,
            breaker_backoff: self
                .duration(raw.breaker_backoff.as_ref())
                .unwrap_or(d.breaker_backoff),
            verify_all,
            mb_max_wait: self
                .duration(raw.mb_max_wait.as_ref())
                .unwrap_or(d.mb_max_wait),
            mb_capacity: positive(self, raw.mb_capacity.as_ref(), "mb_capacity")
                .unwrap_or(d.mb_capacity),
            mb_min_batch: positive(self, raw.mb_min_batch.as_ref(), "mb_min_batch")
                .or(d.mb_min_batch),
            mb_on_worker: self
                .choice(
                    raw.mb_run_on.as_ref(),
                    "mb_run_on",
                    &[("thread", false), ("worker", true)],
                )
                .unwrap_or(d.mb_on_worker),
            mb_lanes: self.mb_lanes(raw.mb_lanes.as_ref()),
        }
    }

    /// `mb_lanes`: `"auto"`, 4 or 8.
    pub(super) fn mb_lanes(&mut self, v: Option<&Spanned<toml::Value>>) -> Option<usize> {
        let v = v?;
        match v.get_ref() {
            toml::Value::String(s) if s == "auto" => None,
            toml::Value::Integer(n @ (4 | 8)) => Some(*n as usize),
            other => {
                self.err_at(
                    v,
                    format!("[offload.crypto] mb_lanes = {other} is not a batch width"),
                    "use 8 (512-bit IFMA, the default: most signatures per core) or 4 (256-bit IFMA: half the time per batch)",
                );
                None
            }
        }
    }

    /// `[offload.keyless]`: the key servers, and this gateway's client certificate for them.
    pub(super) fn keyless_offload(
        &mut self,
        raw: &RawOffloadKeyless,
        allow_insecure: bool,
    ) -> Option<KeylessOffload> {
        let servers = self.key_servers(raw)?;
        let server_name = raw.server_name.as_ref().map_or_else(
            || {
                let host = servers[0].rsplit_once(':').map_or("", |(h, _)| h);
                host.trim_matches(['[', ']']).to_owned()
            },
            |n| n.get_ref().clone(),
        );
        let (ca, certificate, key) = self.keyless_identity(raw, allow_insecure)?;
        let connections = match &raw.connections {
            Some(c) if *c.get_ref() == 0 => {
                self.err_at(
                    c,
                    "[offload.keyless] connections must be at least 1",
                    "remove it for the default (2)",
                );
                2
            }
            Some(c) => *c.get_ref() as usize,
            None => 2,
        };
        let fallback_local = self
            .choice(
                raw.fallback.as_ref(),
                "fallback",
                &[("local", true), ("none", false)],
            )
            .unwrap_or(true);
        Some(KeylessOffload {
            servers,
            server_name,
            ca,
            certificate,
            key,
            connections,
            timeout: self
                .duration(raw.timeout.as_ref())
                .unwrap_or(Duration::from_millis(50)),
            ping_interval: self
                .duration(raw.ping_interval.as_ref())
                .unwrap_or(Duration::from_secs(1)),
            fallback_local,
        })
    }

    /// `servers`: at least one key server, each host:port.
    fn key_servers(&mut self, raw: &RawOffloadKeyless) -> Option<Vec<String>> {
        let servers = raw.servers.get_ref().clone();
        if servers.is_empty() {
            self.err_at(
                &raw.servers,
                "[offload.keyless] servers is empty",
                "list the key servers, e.g. servers = [\"10.0.0.5:2407\", \"10.0.0.6:2407\"]",
            );
            return None;
        }
        for a in &servers {
            let ok = a
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                self.err_at(
                    &raw.servers,
                    format!("[offload.keyless] server \"{a}\" is not host:port"),
                    "write each key server as host:port, e.g. \"10.0.0.5:2407\"",
                );
                return None;
            }
        }
        Some(servers)
    }

    /// `ca`, `certificate` and `key`: the CAs key servers' certificates chain to, and the
    /// client certificate (with its key, which must match) this gateway presents to them.
    fn keyless_identity(
        &mut self,
        raw: &RawOffloadKeyless,
        allow_insecure: bool,
    ) -> Option<(Vec<X509>, Vec<X509>, PKey<Private>)> {
        let ca = self.pem_certificates(
            &raw.ca,
            "[offload.keyless] ca",
            "the CA (or the certificates) that key servers' certificates chain to",
        );
        let certificate = self.pem_certificates(
            &raw.certificate,
            "[offload.keyless] certificate",
            "this gateway's client certificate, leaf first",
        );
        let key_path = self.path(raw.key.get_ref());
        let key = self.private_key("[offload.keyless]", &raw.key, &key_path, allow_insecure);
        let (ca, certificate, key) = (ca?, certificate?, key?);
        let matches = key_belongs(&certificate[0], &key);
        if !matches {
            self.err_at(
                &raw.key,
                "[offload.keyless]: key does not belong to certificate",
                "give the key the client certificate was issued for",
            );
            return None;
        }
        Some((ca, certificate, key))
    }
    /// Reads a non-empty PEM certificate list for `key`.
    pub(super) fn pem_certificates(
        &mut self,
        at: &Spanned<String>,
        key: &str,
        what: &str,
    ) -> Option<Vec<X509>> {
        let path = self.path(at.get_ref());
        match self.read_file(&path) {
            Err(e) => {
                self.err_at(
                    at,
                    format!("{key}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                None
            }
            Ok(pem) => match X509::stack_from_pem(&pem) {
                Ok(c) if !c.is_empty() => Some(c),
                _ => {
                    self.err_at(
                        at,
                        format!("{key}: {} holds no PEM certificate", path.display()),
                        format!("give {what} in PEM"),
                    );
                    None
                }
            },
        }
    }

    /// `"keyless"` in an engine list needs `[offload.keyless]`.
    pub(super) fn check_keyless_wiring(&mut self, raw: &RawConfig) {
        if raw.offload.keyless.is_some() {
            return;
        }
        let lists = raw
            .offload
            .crypto
            .as_ref()
            .and_then(|c| c.engines.as_ref())
            .into_iter()
            .chain(
                raw.certificates
                    .iter()
                    .filter_map(|c| c.offload_engines.as_ref()),
            );
        for list in lists {
            if list.get_ref().iter().any(|e| e == "keyless") {
                self.err_at(
                    list,
                    "\"keyless\" is named but [offload.keyless] is missing",
                    "add [offload.keyless] with servers, ca, certificate and key (see docs/features.md, \"Keyless: private keys on key servers\")",
                );
                return;
            }
        }
    }

    pub(super) fn compress_offload(&mut self, raw: Option<&RawOffloadCompress>) -> CompressOffload {
        let d = CompressOffload::default();
        let Some(raw) = raw else { return d };
        let mut engines = d.engines.clone();
        if let Some(list) = &raw.engines {
            engines.clear();
            for e in list.get_ref() {
                match e.as_str() {
                    "pool" => engines.push(CompressEngineName::Pool),
                    "inline" => {}
                    other => self.err_at(
                        list,
                        format!("[offload.compress] engines names \"{other}\", which this build does not have"),
                        "use \"pool\" (dedicated threads) or [] (compress on the event loop); \"inline\" always ends the chain",
                    ),
                }
            }
        }
        let positive = |cx: &mut Self, v: Option<&Spanned<u32>>, key: &str| -> Option<usize> {
            let v = v?;
            if *v.get_ref() == 0 {
                cx.err_at(
                    v,
                    format!("[offload.compress] {key} must be at least 1"),
                    "remove it for the default",
                );
                return None;
            }
            Some(*v.get_ref() as usize)
        };
        CompressOffload {
            engines,
            pool_threads: positive(self, raw.pool_threads.as_ref(), "pool_threads"),
            pool_capacity: positive(self, raw.pool_capacity.as_ref(), "pool_capacity"),
            deadline: self.duration(raw.deadline.as_ref()).unwrap_or(d.deadline),
        }
    }
}
