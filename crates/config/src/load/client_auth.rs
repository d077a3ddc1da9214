//! `[listener.tls] client_auth`, `client_ca`, `client_crl`, `client_crl_missing` and
//! `forward_client_cert`, and a certificate's own `client_auth`.

use super::Cx;
use crate::client_tls::{ClientAuth, ClientAuthMode};
use crate::raw::{RawListenerTls, SpannedStr};
use std::sync::Arc;
use toml::Spanned;

impl Cx<'_> {
    /// A `client_auth` value; `None` when absent or wrong (reported).
    pub(super) fn client_auth_mode(
        &mut self,
        v: Option<&Spanned<String>>,
    ) -> Option<ClientAuthMode> {
        self.choice(
            v,
            "client_auth",
            &[
                ("off", ClientAuthMode::Off),
                ("optional", ClientAuthMode::Optional),
                ("required", ClientAuthMode::Required),
            ],
        )
    }

    /// The listener's client authentication; `Err(())` when a mistake was reported.
    pub(super) fn client_auth(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        http3: bool,
    ) -> Result<Option<Arc<ClientAuth>>, ()> {
        let mode = self
            .client_auth_mode(raw.client_auth.as_ref())
            .unwrap_or_default();
        let Some(ca_at) = &raw.client_ca else {
            if let Some(at) = raw
                .client_auth
                .as_ref()
                .filter(|_| mode != ClientAuthMode::Off)
            {
                self.err_at(
                    at,
                    format!("listener `{listener}`: client_auth needs client_ca"),
                    "give client_ca = \"clients-ca.pem\", the CAs client certificates must chain to",
                );
                return Err(());
            }
            if let Some(at) = &raw.client_crl {
                self.err_at(
                    at,
                    format!("listener `{listener}`: client_crl without client_ca"),
                    "give client_ca too, or remove client_crl",
                );
                return Err(());
            }
            if let Some(at) = &raw.client_crl_missing {
                self.err_at(
                    at,
                    format!("listener `{listener}`: client_crl_missing without client_ca"),
                    "give client_ca and client_crl too, or remove client_crl_missing",
                );
                return Err(());
            }
            return Ok(None);
        };
        if http3 && mode != ClientAuthMode::Off {
            self.err_at(
                ca_at,
                format!(
                    "listener `{listener}`: client certificates are not asked for over HTTP/3 yet"
                ),
                "serve client-certificate hosts on a listener without http3",
            );
            return Err(());
        }
        let ca_pem = self.pem_blocks(listener, ca_at, "CERTIFICATE", "client_ca")?;
        if boring::x509::X509::stack_from_pem(&ca_pem).is_err() {
            self.err_at(
                ca_at,
                format!("listener `{listener}`: client_ca does not parse"),
                "give PEM CA certificates",
            );
            return Err(());
        }
        let crl_pem = match &raw.client_crl {
            Some(at) => Some(self.pem_blocks(listener, at, "X509 CRL", "client_crl")?),
            None => None,
        };
        let allow_missing_crl = self.client_crl_missing(listener, raw)?;
        Ok(Some(Arc::new(ClientAuth {
            mode,
            ca_pem,
            crl_pem,
            allow_missing_crl,
            forward_client_cert: raw
                .forward_client_cert
                .as_ref()
                .is_some_and(|f| *f.get_ref()),
        })))
    }

    /// `client_crl_missing`: whether a chain certificate whose issuer has no CRL in
    /// `client_crl` is allowed (default refused, as NGINX); `Err(())` when a mistake was
    /// reported.
    fn client_crl_missing(&mut self, listener: &str, raw: &RawListenerTls) -> Result<bool, ()> {
        let Some(at) = &raw.client_crl_missing else {
            return Ok(false);
        };
        if raw.client_crl.is_none() {
            self.err_at(
                at,
                format!(
                    "listener `{listener}`: client_crl_missing without client_crl: no CRL is checked, so none can be missing"
                ),
                "give client_crl = \"clients.crl\" (PEM CRLs of the client CAs), or remove client_crl_missing",
            );
            return Err(());
        }
        self.choice(
            Some(at),
            "client_crl_missing",
            &[("refuse", false), ("allow", true)],
        )
        .ok_or(())
    }

    /// The file at `at`, which must hold PEM blocks labelled `label`.
    fn pem_blocks(
        &mut self,
        listener: &str,
        at: &SpannedStr,
        label: &str,
        key: &str,
    ) -> Result<Vec<u8>, ()> {
        let path = self.path(at.get_ref());
        match self.read_file(&path) {
            Ok(pem)
                if String::from_utf8_lossy(&pem).contains(&format!("-----BEGIN {label}-----")) =>
            {
                Ok(pem)
            }
            Ok(_) => {
                self.err_at(
                    at,
                    format!(
                        "listener `{listener}`: {key} {} holds no `{label}` PEM block",
                        path.display()
                    ),
                    format!("give a PEM file of -----BEGIN {label}----- blocks"),
                );
                Err(())
            }
            Err(e) => {
                self.err_at(
                    at,
                    format!("listener `{listener}`: {key} {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                Err(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
