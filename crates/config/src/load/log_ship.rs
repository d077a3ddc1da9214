//! `[[log.ship]]`: where access log lines go besides the file.

use super::Cx;
use crate::client_tls::ClientIdentity;
use crate::logging::{HttpLogFormat, LogShip, SYSLOG_FACILITIES, ShipSink, SyslogTransport};
use crate::raw::RawLogShip;
use std::collections::HashSet;
use std::time::Duration;

impl Cx<'_> {
    pub(super) fn log_shippers(&mut self, raw: &[RawLogShip]) -> Vec<LogShip> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, r) in raw.iter().enumerate() {
            let name = r
                .name
                .as_ref()
                .map_or_else(|| format!("ship-{}", i + 1), |n| n.get_ref().clone());
            if let Some(n) = &r.name
                && (n.get_ref().is_empty() || !names.insert(name.clone()))
            {
                self.err_at(
                    n,
                    format!("[[log.ship]] name `{name}` is empty or used twice"),
                    "give each [[log.ship]] a unique name, such as \"store\" or \"syslog\"",
                );
            }
            if let Some(ship) = self.log_ship(r, name) {
                out.push(ship);
            }
        }
        out
    }

    fn log_ship(&mut self, r: &RawLogShip, name: String) -> Option<LogShip> {
        let url = r.url.get_ref();
        let scheme = url.split_once("://").map(|(s, _)| s);
        let sink = match scheme {
            Some("http" | "https") => self.http_sink(r, scheme == Some("https"))?,
            Some(s @ ("udp" | "tcp" | "tls")) => self.syslog_sink(r, s)?,
            _ => {
                self.err_at(
                    &r.url,
                    format!("[[log.ship]] url `{url}` is neither http(s):// nor udp://, tcp:// or tls://"),
                    "use \"http://host:port/path\" (or https://) for a log store (batches of JSON lines), or \
                     \"udp://host:port\" / \"tcp://host:port\" / \"tls://host:6514\" for a syslog server",
                );
                return None;
            }
        };
        if let ShipSink::Syslog { transport, .. } = &sink {
            let tls = matches!(transport, SyslogTransport::Tls { .. });
            for (key, given) in [
                ("format", r.format.is_some()),
                ("protocol", r.protocol.is_some()),
                ("index", r.index.is_some()),
                ("headers", r.headers.is_some()),
                ("batch", r.batch.is_some()),
                ("ca", r.ca.is_some() && !tls),
                ("client_cert", r.client_cert.is_some() && !tls),
            ] {
                if given {
                    self.err_at(
                        &r.url,
                        format!("[[log.ship]] `{key}` is not for this syslog shipper"),
                        format!("remove `{key}`, or ship to an http:// url (`ca` and `client_cert`: a tls:// syslog url)"),
                    );
                }
            }
        }
        let queue_bytes = self.size(r.queue.as_ref()).map_or(8 << 20, |n| n as usize);
        if queue_bytes < 64 * 1024
            && let Some(q) = &r.queue
        {
            self.err_at(
                q,
                "[[log.ship]] queue is under 64k",
                "give it room for a few batches, such as \"8m\"",
            );
        }
        let batch_lines = match &r.batch {
            Some(b) if *b.get_ref() == 0 => {
                self.err_at(
                    b,
                    "[[log.ship]] batch must hold at least one line",
                    "use the most lines one request carries, such as 1000",
                );
                1
            }
            Some(b) => *b.get_ref() as usize,
            None => 1000,
        };
        Some(LogShip {
            name,
            sink,
            queue_bytes,
            batch_lines,
            flush_every: self
                .duration(r.flush.as_ref())
                .unwrap_or(Duration::from_secs(1)),
            timeout: self
                .duration(r.timeout.as_ref())
                .unwrap_or(Duration::from_secs(5)),
        })
    }

    /// An `http://` or `https://` log store: batches of lines in `format`.
    fn http_sink(&mut self, r: &RawLogShip, https: bool) -> Option<ShipSink> {
        let url = match r.url.get_ref().parse::<http::Uri>() {
            Ok(u) if u.authority().is_some() && u.port_u16() != Some(0) => u,
            _ => {
                self.err_at(
                    &r.url,
                    format!("[[log.ship]] url `{}` is not an address", r.url.get_ref()),
                    "write it as \"http://host:port/path?query\" (or https://)",
                );
                return None;
            }
        };
        let format = self.http_log_format(r)?;
        self.check_http_format_keys(r, &format);
        let headers = self.ship_headers(r);
        for (key, given) in [("facility", &r.facility), ("app_name", &r.app_name)] {
            if let Some(v) = given {
                self.err_at(
                    v,
                    format!("[[log.ship]] `{key}` is for syslog shippers; this one is HTTP"),
                    format!("remove `{key}`, or ship to a udp:// or tcp:// url"),
                );
            }
        }
        let (ca, client_identity) = self.http_sink_tls(r, https)?;
        Some(ShipSink::Http {
            url,
            format,
            headers,
            ca,
            client_identity,
        })
    }

    /// `format` (default JSON lines) of an HTTP shipper, with `protocol` for OTLP and
    /// `index` for Elasticsearch.
    fn http_log_format(&mut self, r: &RawLogShip) -> Option<HttpLogFormat> {
        Some(match r.format.as_ref().map(|f| f.get_ref().as_str()) {
            None | Some("json_lines") => {
                if let Some(i) = &r.index {
                    self.err_at(
                        i,
                        "[[log.ship]] `index` is for format = \"elasticsearch\"",
                        "remove it, or set format = \"elasticsearch\"",
                    );
                }
                HttpLogFormat::JsonLines
            }
            Some("otlp") => HttpLogFormat::Otlp {
                protocol: self
                    .choice(
                        r.protocol.as_ref(),
                        "protocol",
                        &[
                            ("http/protobuf", crate::tracing::OtlpProtocol::HttpProtobuf),
                            ("grpc", crate::tracing::OtlpProtocol::Grpc),
                        ],
                    )
                    .unwrap_or(crate::tracing::OtlpProtocol::HttpProtobuf),
            },
            Some("elasticsearch") => HttpLogFormat::Elasticsearch {
                index: r
                    .index
                    .as_ref()
                    .map_or_else(|| "sluice".to_owned(), |i| i.get_ref().clone()),
            },
            Some(other) => {
                self.err_at(
                    r.format.as_ref().expect("matched Some"),
                    format!("[[log.ship]] format `{other}` is not known"),
                    "use \"json_lines\" (one JSON object per line), \"elasticsearch\" (the _bulk API) or \"otlp\" (OTLP/HTTP logs)",
                );
                return None;
            }
        })
    }

    /// `protocol` belongs to OTLP shippers, and an Elasticsearch `index` must be a valid
    /// index name.
    fn check_http_format_keys(&mut self, r: &RawLogShip, format: &HttpLogFormat) {
        if let (Some(p), false) = (&r.protocol, matches!(format, HttpLogFormat::Otlp { .. })) {
            self.err_at(
                p,
                "[[log.ship]] `protocol` is for format = \"otlp\"",
                "remove it, or set format = \"otlp\"",
            );
        }
        if let HttpLogFormat::Elasticsearch { index } = format
            && (index.is_empty() || index.contains(['"', '\\', '/', ' ']))
        {
            self.err_at(
                r.index.as_ref().unwrap_or(&r.url),
                format!("[[log.ship]] index `{index}` is not a valid index name"),
                "use lowercase letters, digits, '-' and '_', such as \"sluice-access\"",
            );
        }
    }

    /// `ca`, `client_cert` and `client_key`, for `https://` stores only; `None` when one has
    /// a mistake (reported).
    fn http_sink_tls(
        &mut self,
        r: &RawLogShip,
        https: bool,
    ) -> Option<(Option<Vec<u8>>, Option<ClientIdentity>)> {
        let ca = match &r.ca {
            Some(at) if !https => {
                self.err_at(
                    at,
                    "[[log.ship]] `ca` is for https:// stores",
                    "remove it, or ship to an https:// url",
                );
                None
            }
            Some(at) => Some(self.ca_pem("[[log.ship]]", at)?),
            None => None,
        };
        if let Some(at) = r.client_cert.as_ref().filter(|_| !https) {
            self.err_at(
                at,
                "[[log.ship]] `client_cert` is for https:// stores",
                "remove it, or ship to an https:// url",
            );
        }
        let client_identity = self
            .client_identity(
                "[[log.ship]]",
                r.client_cert.as_ref(),
                r.client_key.as_ref(),
            )
            .ok()?;
        Some((ca, client_identity))
    }
    /// `headers`: each a valid HTTP header.
    fn ship_headers(&mut self, r: &RawLogShip) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        for (k, v) in r.headers.iter().flatten() {
            if http::HeaderName::from_bytes(k.as_bytes()).is_err()
                || http::HeaderValue::from_str(v.get_ref()).is_err()
            {
                self.err_at(
                    v,
                    format!("[[log.ship]] header `{k}` is not a valid HTTP header"),
                    "use a token name and a visible-ASCII value",
                );
            }
            headers.push((k.clone(), v.get_ref().clone()));
        }
        headers
    }

    fn syslog_sink(&mut self, r: &RawLogShip, scheme: &str) -> Option<ShipSink> {
        let rest = r.url.get_ref().split_once("://").map_or("", |(_, a)| a);
        let address = rest.trim_end_matches('/').to_owned();
        if !host_port(&address) {
            self.err_at(
                &r.url,
                format!(
                    "[[log.ship]] url `{}` does not name a host and port",
                    r.url.get_ref()
                ),
                "write the syslog server as \"udp://10.0.0.5:514\", \"tcp://[::1]:601\" or \"tls://logs.example.com:6514\"",
            );
            return None;
        }
        let transport = match scheme {
            "udp" => SyslogTransport::Udp,
            "tcp" => SyslogTransport::Tcp,
            _ => SyslogTransport::Tls {
                ca: match &r.ca {
                    Some(at) => Some(self.ca_pem("[[log.ship]]", at)?),
                    None => None,
                },
                client_identity: self
                    .client_identity(
                        "[[log.ship]]",
                        r.client_cert.as_ref(),
                        r.client_key.as_ref(),
                    )
                    .ok()?,
            },
        };
        let facility = match &r.facility {
            None => 16,
            Some(f) => match SYSLOG_FACILITIES.iter().find(|(n, _)| n == f.get_ref()) {
                Some((_, code)) => *code,
                None => {
                    self.err_at(
                        f,
                        format!("[[log.ship]] facility `{}` is not known", f.get_ref()),
                        "use a name from RFC 5424, such as \"local0\" to \"local7\" or \"daemon\"",
                    );
                    16
                }
            },
        };
        let app_name = r
            .app_name
            .as_ref()
            .map_or_else(|| "sluice".to_owned(), |a| a.get_ref().clone());
        // RFC 5424 §6: APP-NAME is 1-48 printable US-ASCII characters, no spaces.
        if app_name.is_empty()
            || app_name.len() > 48
            || !app_name.bytes().all(|b| (33..=126).contains(&b))
        {
            self.err_at(
                r.app_name.as_ref().unwrap_or(&r.url),
                format!("[[log.ship]] app_name `{app_name}` is not a syslog APP-NAME"),
                "use 1-48 visible ASCII characters without spaces, such as \"sluice\"",
            );
        }
        Some(ShipSink::Syslog {
            address,
            transport,
            facility,
            app_name,
        })
    }
}

/// Whether `text` is `host:port`: an IP address, `[v6]` or a DNS name, and a port.
fn host_port(text: &str) -> bool {
    if text.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok_and(|p| p != 0)
        && !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
