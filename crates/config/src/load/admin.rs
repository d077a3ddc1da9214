//! `[admin]`: the admin listener, its tokens and its TLS.

use super::{Cx, key_belongs};
use crate::raw::{RawAdmin, RawAdminTls};
use crate::snapshot::{Admin, AdminTls};
use std::net::SocketAddr;
use toml::Spanned;

impl Cx<'_> {
    /// `[admin]`: the admin listener (on loopback by default), its tokens and its TLS;
    /// `None` when it is turned off or its address is not one.
    pub(super) fn admin(&mut self, raw: &RawAdmin, allow_insecure: bool) -> Option<Admin> {
        if raw.enabled == Some(false) {
            return None;
        }
        let address = match &raw.address {
            None => SocketAddr::from(([127, 0, 0, 1], 9901)),
            Some(a) => self.ip_port(a, "[admin] address", "write it as \"127.0.0.1:9901\"")?,
        };
        let token = raw
            .token_file
            .as_ref()
            .and_then(|at| self.token_file("[admin] token_file", at, allow_insecure));
        let read_token = raw
            .read_token_file
            .as_ref()
            .and_then(|at| self.token_file("[admin] read_token_file", at, allow_insecure));
        let read_networks = self.cidrs(raw.read_networks.as_ref(), "[admin] read_networks");
        let tls = raw
            .tls
            .as_ref()
            .and_then(|t| self.admin_tls(t, allow_insecure));
        let insecure = raw.insecure.as_ref().is_some_and(|i| *i.get_ref());
        if !address.ip().is_loopback() && raw.tls.is_none() && !insecure {
            let at = raw.address.as_ref().map_or(0, |a| a.span().start);
            self.err(
                at,
                format!(
                    "[admin] address {address} is off loopback and the admin listener has no TLS: its token, /metrics and /status would cross the network in clear"
                ),
                "add [admin.tls] with certificate and key (and client_ca to ask for client certificates), or write insecure = true in [admin] if the network is one you trust",
            );
        }
        Some(Admin {
            address,
            token,
            read_token,
            read_networks,
            tls,
        })
    }

    /// A token file: mode 0600 and one token of at least 16 printable characters.
    fn token_file(
        &mut self,
        what: &str,
        at: &Spanned<String>,
        allow_insecure: bool,
    ) -> Option<String> {
        let path = self.path(at.get_ref());
        let bytes = self.key_file(what, at, &path, allow_insecure)?;
        let token = String::from_utf8_lossy(&bytes).trim().to_owned();
        if token.len() < 16 || token.chars().any(|c| !c.is_ascii_graphic()) {
            self.err_at(
                at,
                format!(
                    "{what} {} must hold one token of at least 16 printable characters",
                    path.display()
                ),
                format!(
                    "write a random one: `openssl rand -hex 32 > {}; chmod 600 {}`",
                    path.display(),
                    path.display()
                ),
            );
            return None;
        }
        Some(token)
    }

    /// `[admin.tls]`: the chain, its key (which must match), the client CAs.
    fn admin_tls(&mut self, raw: &RawAdminTls, allow_insecure: bool) -> Option<AdminTls> {
        let certificate = self.pem_certificates(
            &raw.certificate,
            "[admin.tls] certificate",
            "the admin listener's certificate, leaf first",
        );
        let path = self.path(raw.key.get_ref());
        let key = self.private_key("[admin.tls] key", &raw.key, &path, allow_insecure);
        let client_ca = match &raw.client_ca {
            Some(at) => self.pem_certificates(
                at,
                "[admin.tls] client_ca",
                "the CAs that issue the operators' client certificates",
            ),
            None => Some(Vec::new()),
        };
        let (certificate, key, client_ca) = (certificate?, key?, client_ca?);
        let matches = key_belongs(&certificate[0], &key);
        if !matches {
            self.err_at(
                &raw.key,
                "[admin.tls]: key does not belong to certificate",
                "give the key the certificate was issued for",
            );
            return None;
        }
        Some(AdminTls {
            certificate,
            key,
            client_ca,
        })
    }
}
