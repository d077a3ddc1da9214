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
    /// A TXT record at `_acme-challenge.<name>`, added to the zone by an RFC 2136 dynamic
    /// update signed with TSIG (RFC 8945) and removed after the order: the only challenge
    /// for wildcard names, and one that needs no listener the CA can reach.
    Dns01,
}

impl AcmeChallenge {
    /// Its name as RFC 8555 and the configuration spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
            AcmeChallenge::Dns01 => "dns-01",
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
    /// Where dns-01 answers are published (set exactly when `challenge` is dns-01).
    pub dns: Option<DnsUpdate>,
    /// External Account Binding (RFC 8555 §7.3.4), for CAs that tie ACME accounts to an
    /// account of their own (ZeroSSL, Google Trust Services, Sectigo, a company's CA).
    pub eab: Option<ExternalAccount>,
}

/// A secret from the configuration: compared and hashed like any value, never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A digest, so that a changed secret still reads as a changed order.
        let d = boring::sha::sha256(&self.0);
        write!(
            f,
            "Secret(sha256:{:02x}{:02x}{:02x}{:02x}..)",
            d[0], d[1], d[2], d[3]
        )
    }
}

/// The TSIG algorithms a DNS server accepts for updates (RFC 8945 §6; HMAC-MD5 and SHA-1 are
/// left out as obsolete).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TsigAlgorithm {
    /// hmac-sha256 (the default of `tsig-keygen` and `keymgr -t`).
    HmacSha256,
    /// hmac-sha384.
    HmacSha384,
    /// hmac-sha512.
    HmacSha512,
}

impl TsigAlgorithm {
    /// Its name as BIND, Knot and RFC 8945 spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TsigAlgorithm::HmacSha256 => "hmac-sha256",
            TsigAlgorithm::HmacSha384 => "hmac-sha384",
            TsigAlgorithm::HmacSha512 => "hmac-sha512",
        }
    }

    /// The algorithm named `name` (as `tsig-keygen` writes it).
    pub fn parse(name: &str) -> Option<Self> {
        match name
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase()
            .as_str()
        {
            "hmac-sha256" => Some(TsigAlgorithm::HmacSha256),
            "hmac-sha384" => Some(TsigAlgorithm::HmacSha384),
            "hmac-sha512" => Some(TsigAlgorithm::HmacSha512),
            _ => None,
        }
    }
}

/// `dns = { ... }`: the authoritative server that takes RFC 2136 updates for the names' zone,
/// and the TSIG key it accepts them with (what certbot's and lego's `rfc2136` plugins ask).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DnsUpdate {
    /// `host:port` (port 53 when left out) of the primary server.
    pub server: String,
    /// The zone to update; `None`: found by asking the server for the SOA of each name.
    pub zone: Option<String>,
    /// The TSIG key's name, as the server's configuration spells it.
    pub key_name: String,
    /// The TSIG key's algorithm.
    pub algorithm: TsigAlgorithm,
    /// The TSIG key's secret (decoded from base64).
    pub secret: Secret,
    /// How long to wait after the primary has the record before asking the CA to validate:
    /// time for secondaries to follow (`0s` when the primary answers the CA itself).
    pub propagation_delay: Duration,
}

/// `eab = { kid, hmac_key }`: the key a CA gave for binding new ACME accounts to an account
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExternalAccount {
    /// The key identifier the CA gave.
    pub kid: String,
    /// The HMAC key (decoded from the base64url the CA gives).
    pub hmac_key: Secret,
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
