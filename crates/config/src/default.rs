//! The embedded default configuration that `sluice run` serves with no arguments.

use crate::{LoadError, Snapshot, load_str};
use std::path::Path;

/// The default configuration, with one placeholder that the binary fills in at start:
/// `{state_dir}` (where the self-signed certificates and the admin token live).
/// `sluice default-config` prints the filled-in result, which runs as it is and is a good
/// starting point for a real file.
pub const DEFAULT_CONFIG_TEMPLATE: &str = r#"# Sluice's embedded default configuration.
# HTTPS on 127.0.0.1:8443 (HTTP/2 and HTTP/1.1 over TCP, HTTP/3 over QUIC on UDP 8443) and
# HTTP on 127.0.0.1:8080, both proxying to
# a demo origin inside the same process ([demo]). Certificates are self-signed for localhost
# and 127.0.0.1 and were generated on first start.

[global]
shutdown_timeout = "10s"

[log]
level = "info"
access_log = "stdout"
access_format = "text"

[admin]
address = "127.0.0.1:9901"   # /metrics (Prometheus) and /status (JSON)
token_file = '{state_dir}/admin.token'   # admin API writes need it as a bearer token (generated on first start)

[offload.crypto]
# engines = ["mb"]            # unset: chosen at start (`mb` where the CPU has AVX-512 IFMA;
                              # else signatures run on the handshake threads of
                              # [offload.handshakes]); `sluice check` and /status say which and why

[offload.compress]
engines = ["pool"]            # response compression chunks on dedicated threads

[compression]                 # every route; a route can override any key in [route.compression]
enabled = true
codecs = ["zstd", "br", "gzip"]   # server preference; the client's q-values come first
gzip_backend = "isal"         # ISA-L igzip (levels 0-3); "zlib-rs" for levels 1-9
gzip_level = 1
min_length = 256

[[listener]]
name = "https"
address = "127.0.0.1:8443"
protocols = ["h2", "http/1.1"]
http3 = true                  # HTTP/3 on UDP 127.0.0.1:8443, advertised by Alt-Svc

[listener.tls]
# BoringSSL serves ECDSA to clients that support it and RSA to the others.
certificates = ["localhost-ecdsa", "localhost-rsa"]
unknown_sni = "default"
session_tickets = true
ticket_key_rotation = "1h"

[[listener]]
name = "http"
address = "127.0.0.1:8080"

[[certificate]]
name = "localhost-ecdsa"
cert = '{state_dir}/localhost-ecdsa.crt'
key = '{state_dir}/localhost-ecdsa.key'

[[certificate]]
name = "localhost-rsa"
cert = '{state_dir}/localhost-rsa.crt'
key = '{state_dir}/localhost-rsa.key'

# A certificate from an ACME CA (Let's Encrypt by default), ordered at start and renewed
# before it expires: uncomment, name your host, listen on port 80 (http-01) or 443
# (tls-alpn-01) on a public address, and add "site" to [listener.tls] certificates.
# [acme]
# storage = '{state_dir}/acme'     # accounts and certificates (0600); must be writable
# email = "ops@example.com"
# [[certificate]]
# name = "site"
# acme = { names = ["example.com", "www.example.com"] }

[demo]                        # the built-in demo origin: / (page), /api/status, /headers, /stream
address = "127.0.0.1:8081"    # remove [demo] and point the upstream at your own servers

[[upstream]]
name = "demo"
balance = "round_robin"
servers = [{ address = "127.0.0.1:8081" }]

[[route]]
name = "demo"
upstream = "demo"
"#;

/// What the embedded default needs from the running binary.
#[derive(Debug, Clone)]
pub struct DefaultConfigParams<'a> {
    /// Directory holding `localhost-{ecdsa,rsa}.{crt,key}` and `admin.token`.
    pub state_dir: &'a Path,
}

/// The template with its placeholder filled in.
pub fn default_config_text(params: &DefaultConfigParams<'_>) -> String {
    DEFAULT_CONFIG_TEMPLATE.replace("{state_dir}", &params.state_dir.display().to_string())
}

/// Fills in the template and returns its text together with the loaded snapshot.
pub fn default_config(params: &DefaultConfigParams<'_>) -> Result<(String, Snapshot), LoadError> {
    let text = default_config_text(params);
    let snapshot = load_str(&text, "<embedded default>", params.state_dir)?;
    Ok((text, snapshot))
}
