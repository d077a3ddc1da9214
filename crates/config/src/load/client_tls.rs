//! A client certificate that Sluice presents when it is the TLS client (to upstreams, log
//! stores, syslog servers, trace collectors): `client_cert` and `client_key` read, checked to
//! belong together, and kept as PEM for the connector that presents them.

use super::{Cx, key_belongs};
use crate::client_tls::ClientIdentity;
use crate::raw::SpannedStr;

impl Cx<'_> {
    /// `client_cert` and `client_key` of `what`: both or neither. `Err(())`: a mistake was
    /// reported.
    pub(super) fn client_identity(
        &mut self,
        what: &str,
        cert: Option<&SpannedStr>,
        key: Option<&SpannedStr>,
    ) -> Result<Option<ClientIdentity>, ()> {
        let (cert_at, key_at) = match (cert, key) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c, k),
            (Some(at), None) | (None, Some(at)) => {
                self.err_at(
                    at,
                    format!("{what}: client_cert and client_key go together"),
                    "give both: the PEM certificate presented to the server and its key",
                );
                return Err(());
            }
        };
        let cert_path = self.path(cert_at.get_ref());
        let cert_pem = match self.read_file(&cert_path) {
            Ok(p) => p,
            Err(e) => {
                self.err_at(
                    cert_at,
                    format!("{what}: cannot read {}: {e}", cert_path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                return Err(());
            }
        };
        let key_path = self.path(key_at.get_ref());
        let key_pem = self
            .key_file(&format!("{what}: client_key"), key_at, &key_path, false)
            .ok_or(())?;
        let leaf = boring::x509::X509::stack_from_pem(&cert_pem)
            .ok()
            .and_then(|c| c.into_iter().next());
        let key = boring::pkey::PKey::private_key_from_pem(&key_pem).ok();
        match (leaf, key) {
            (Some(leaf), Some(key)) if key_belongs(&leaf, &key) => {
                Ok(Some(ClientIdentity { cert_pem, key_pem }))
            }
            (Some(_), Some(_)) => {
                self.err_at(
                    key_at,
                    format!("{what}: client_key does not belong to client_cert"),
                    "give the key the certificate was issued for",
                );
                Err(())
            }
            _ => {
                self.err_at(
                    cert_at,
                    format!("{what}: client_cert or client_key is not PEM"),
                    "give a PEM certificate (leaf first) and its PEM private key",
                );
                Err(())
            }
        }
    }
}
