use std::fmt;

/// A host name pattern: an exact name (`example.com`) or a wildcard (`*.example.com`) that
/// matches exactly one more label, as in certificates (RFC 6125) and NGINX `server_name`.
///
/// Names are compared in lower case without a trailing dot or port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Matches this name only.
    Exact(String),
    /// `*.suffix`: matches `label.suffix` for a single non-empty label. Holds `suffix`.
    Wildcard(String),
}

impl HostPattern {
    /// Parses `example.com` or `*.example.com`; refuses empty names and misplaced `*`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let name = normalize_host(s);
        if name.is_empty() {
            return Err("a host name may not be empty".into());
        }
        if let Some(suffix) = name.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(format!(
                    "`{s}` is not a valid wildcard; write it as \"*.example.com\""
                ));
            }
            return Ok(HostPattern::Wildcard(suffix.to_owned()));
        }
        if name.contains('*') {
            return Err(format!(
                "`{s}`: `*` is only allowed as the whole first label, as in \"*.example.com\""
            ));
        }
        if name
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']')))
        {
            return Err(format!("`{s}` is not a valid host name"));
        }
        Ok(HostPattern::Exact(name))
    }

    /// Whether `host` (already normalized with [`normalize_host`]) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => name == host,
            HostPattern::Wildcard(suffix) => host
                .strip_suffix(suffix.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
        }
    }
}

/// Lower-cases a host, drops a trailing dot and any `:port` (IPv6 literals keep their
/// brackets), so that `Example.COM.:443` and `example.com` compare equal.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let without_port = if host.starts_with('[') {
        match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        }
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if !h.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => host,
        }
    };
    without_port.trim_end_matches('.').to_ascii_lowercase()
}
