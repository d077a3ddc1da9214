//! The embedded default configuration that `sluice run` serves with no arguments.

use crate::{LoadError, Snapshot, load_str};
use std::net::SocketAddr;
use std::path::Path;

/// The default configuration, with two placeholders that the binary fills in at start:
/// `{state_dir}` (where the self-signed certificates live) and `{demo_origin}` (the address of
/// the demo origin it starts). `sluice default-config` prints the filled-in result, a good
/// starting point for a real file.
pub const DEFAULT_CONFIG_TEMPLATE: &str = r#"# Sluice's embedded default configuration.
# HTTPS on 127.0.0.1:8443 (HTTP/2 and HTTP/1.1) and HTTP on 127.0.0.1:8080, both proxying to
# a demo origin inside the same process. Certificates are self-signed for localhost and
# 127.0.0.1 and were generated on first start.

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
engines = ["pool"]            # handshake signatures on dedicated threads; "inline" ends the chain

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

[[upstream]]
name = "demo"
balance = "round_robin"
servers = [{ address = "{demo_origin}" }]

[[route]]
name = "demo"
upstream = "demo"
"#;

/// What the embedded default needs from the running binary.
#[derive(Debug, Clone)]
pub struct DefaultConfigParams<'a> {
    /// Directory holding `localhost-{ecdsa,rsa}.{crt,key}`.
    pub state_dir: &'a Path,
    /// Where the demo origin listens.
    pub demo_origin: SocketAddr,
}

/// Fills in the template and returns its text together with the loaded snapshot.
pub fn default_config(params: &DefaultConfigParams<'_>) -> Result<(String, Snapshot), LoadError> {
    let text = DEFAULT_CONFIG_TEMPLATE
        .replace("{state_dir}", &params.state_dir.display().to_string())
        .replace("{demo_origin}", &params.demo_origin.to_string());
    let snapshot = load_str(&text, "<embedded default>", params.state_dir)?;
    Ok((text, snapshot))
}
