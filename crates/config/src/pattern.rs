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
    normalized_host(host).into_owned()
}

/// [`normalize_host`] without an allocation when the host is lowercase already (the usual
/// case: the port and a trailing dot only shorten it), for the per-request route lookup.
///
/// The usual host (lowercase letters, digits, dots and hyphens, perhaps a `:port`) is
/// checked in one pass over its bytes; anything else takes the general path.
pub fn normalized_host(host: &str) -> std::borrow::Cow<'_, str> {
    let mut colon = None;
    for (i, c) in host.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' => {}
            b':' if colon.is_none() => colon = Some(i),
            _ => return normalized_host_general(host),
        }
    }
    let name = match colon {
        None => host,
        Some(i) if host.as_bytes()[i + 1..].iter().all(u8::is_ascii_digit) => &host[..i],
        Some(_) => return normalized_host_general(host),
    };
    name.trim_end_matches('.').into()
}

/// [`normalized_host`] for any text.
pub(crate) fn normalized_host_general(host: &str) -> std::borrow::Cow<'_, str> {
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
    let name = without_port.trim_end_matches('.');
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        name.to_ascii_lowercase().into()
    } else {
        name.into()
    }
}
