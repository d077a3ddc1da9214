//! What a configuration asks of ACME (RFC 8555): certificates a CA issues and renews, and
//! where their accounts and certificates are kept.
//!
//! The loader only describes the order and reads what an earlier order left in storage; the
//! ordering itself (network, challenges, renewal) belongs to the `sluice-acme` crate.

use std::path::PathBuf;
use std::time::Duration;

/// Let's Encrypt's production directory: the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `[acme]`: settings shared by every ACME certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// Where accounts (`accounts/`) and certificates (`<name>/cert.pem`, `key.pem`) live.
    pub storage: PathBuf,
    /// First wait after a failed order; doubled after each failure up to `retry_max`.
    pub retry_min: Duration,
    /// Longest wait between failed orders.
    pub retry_max: Duration,
}

impl Default for AcmeSettings {
    fn default() -> Self {
        AcmeSettings {
            storage: PathBuf::from("acme"),
            retry_min: Duration::from_secs(60),
            retry_max: Duration::from_secs(3600),
        }
    }
}

/// How the CA checks that this gateway answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcmeChallenge {
    /// A token served at `http://<name>/.well-known/acme-challenge/<token>` by a plain-HTTP
    /// listener (port 80 for a public CA).
    Http01,
    /// A special certificate served by a TLS listener to ALPN `acme-tls/1` (RFC 8737; port
    /// 443 for a public CA).
    TlsAlpn01,
}

impl AcmeChallenge {
    /// Its name as RFC 8555 and the configuration spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// The key an ACME certificate is issued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcmeKeyType {
    /// ECDSA P-256 (the default: the cheapest handshake).
    EcdsaP256,
    /// RSA-2048 (for clients without ECDSA).
    Rsa2048,
}

/// One certificate's order: `[[certificate]] acme = { ... }` with `[acme]`'s defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeOrder {
    /// The directory URL of the CA.
    pub directory: String,
    /// Contact address, if any.
    pub email: Option<String>,
    /// DNS names, the first one the subject's.
    pub names: Vec<String>,
    /// How the CA validates the names.
    pub challenge: AcmeChallenge,
    /// PEM of the CA that the ACME server's HTTPS certificate chains to (a test CA such as
    /// Pebble's); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Renew this long before expiry.
    pub renew_before: Duration,
    /// The certificate's key.
    pub key_type: AcmeKeyType,
    /// This certificate's directory in storage (`cert.pem`, `key.pem`).
    pub dir: PathBuf,
    /// `[acme]`'s retry settings.
    pub settings: AcmeSettings,
}

impl AcmeOrder {
    /// Where the issued chain is kept (PEM, leaf first).
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    /// Where its private key is kept (PEM, mode 0600).
    pub fn key_path(&self) -> PathBuf {
        self.dir.join("key.pem")
    }
}
