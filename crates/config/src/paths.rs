//! How a listener normalizes request paths before any decision is made on them
//! (docs/security.md, "One path for every decision"). The normalizer itself is the data
//! plane's (`sluice_proxy`'s `request::path`); these are its settings.

/// A listener's path normalization: what RFC 3986 §6.2.2 leaves to the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPolicy {
    /// Runs of `/` collapse into one (NGINX's and Envoy's `merge_slashes`; default on).
    pub merge_slashes: bool,
    /// What an encoded `/`, `\` or NUL (`%2F`, `%5C`, `%00`) in a path does.
    pub escaped_slashes: EscapedSlashes,
}

impl Default for PathPolicy {
    fn default() -> Self {
        PathPolicy {
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Reject,
        }
    }
}

/// `escaped_slashes` (Envoy's `path_with_escaped_slashes_action`): an origin that decodes
/// `%2F` after the gateway routed the path as one segment reads another path than the one
/// the gateway judged, so the default refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400 Bad Request (the default).
    Reject,
    /// Left encoded (hex upper-cased): part of one segment for routing, sent on as it came.
    Keep,
    /// `%2F` and `%5C` decoded before routing, so they separate segments (NGINX's own
    /// behaviour); `%00` is still refused, a NUL having no place in a request target.
    Decode,
}

/// `forward_path` of a route: which spelling of the path goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardPath {
    /// The normalized path every decision was made on (NGINX's `proxy_pass` with a URI).
    #[default]
    Normalized,
    /// The path as the client sent it, for an origin that needs its bytes (the decisions
    /// were still made on the normalized path).
    Original,
}
