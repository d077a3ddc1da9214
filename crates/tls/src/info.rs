use boring::ssl::SslRef;

/// What the access log and metrics want to know about a finished handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// IANA-style cipher suite name, such as `TLS_AES_128_GCM_SHA256`.
    pub cipher: &'static str,
    /// Whether the session was resumed (abbreviated handshake).
    pub resumed: bool,
    /// The SNI name the client sent, if any.
    pub sni: Option<String>,
    /// Whether ALPN chose HTTP/2.
    pub h2: bool,
    /// When the handshake began and how long it took (TCP listeners; the trace's handshake
    /// span).
    pub handshake: Option<(std::time::SystemTime, std::time::Duration)>,
    /// Whether it ran on the handshake threads (`[offload.handshakes] isolate`).
    pub isolated: bool,
    /// Its private-key operation (a full handshake with a local or keyless key).
    pub key_operation: Option<crate::offload::KeyOperation>,
    /// The client's certificate, where the listener asked for one and the client sent it.
    pub client_cert: Option<std::sync::Arc<crate::ClientCert>>,
}

impl TlsInfo {
    /// Reads the facts off an established connection.
    pub fn from_ssl(ssl: &SslRef) -> Self {
        TlsInfo {
            version: ssl.version_str(),
            cipher: ssl
                .current_cipher()
                .map_or("", |c| c.standard_name().unwrap_or(c.name())),
            resumed: ssl.session_reused(),
            sni: ssl
                .servername(boring::ssl::NameType::HOST_NAME)
                .map(str::to_owned),
            h2: ssl.selected_alpn_protocol() == Some(b"h2"),
            handshake: None,
            isolated: false,
            key_operation: ssl
                .ex_data(crate::offload::ConnOffload::index())
                .and_then(crate::offload::ConnOffload::take_trace),
            client_cert: crate::client_auth::ClientCert::of(ssl),
        }
    }
}
