//! What Sluice presents when it is the TLS client and a server asks for a certificate.

/// A client certificate (PEM chain, leaf first) and its key (PEM), checked to belong together
/// when loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The chain.
    pub cert_pem: Vec<u8>,
    /// The key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity(..)")
    }
}

/// Whether a TLS listener asks clients for certificates (NGINX's `ssl_verify_client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuthMode {
    /// Never asks.
    #[default]
    Off,
    /// Asks; a client without one goes on, one with a certificate that does not verify is
    /// refused (400, as NGINX).
    Optional,
    /// Asks; a request without a verified certificate is refused (400, as NGINX).
    Required,
}

/// `[listener.tls] client_auth` and its CAs.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// The listener's mode (a certificate's `client_auth` may differ for its names).
    pub mode: ClientAuthMode,
    /// PEM of the CAs client certificates must chain to.
    pub ca_pem: Vec<u8>,
    /// PEM CRLs, if any: then every certificate of a client's chain (the client's and each
    /// CA's, as NGINX's `ssl_crl`) is checked against its issuer's CRL.
    pub crl_pem: Option<Vec<u8>>,
    /// `client_crl_missing = "allow"`: a certificate of the chain whose issuer has no CRL in
    /// `crl_pem` still verifies, for a PKI where some CAs publish none. False
    /// (`"refuse"`, the default) refuses it, as NGINX and `openssl verify -crl_check_all` do,
    /// so that a CRL left out of the file by mistake cannot let a revoked CA through.
    pub allow_missing_crl: bool,
    /// `X-Forwarded-Client-Cert` upstream.
    pub forward_client_cert: bool,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("mode", &self.mode)
            .field("crl", &self.crl_pem.is_some())
            .field("allow_missing_crl", &self.allow_missing_crl)
            .field("forward_client_cert", &self.forward_client_cert)
            .finish()
    }
}
