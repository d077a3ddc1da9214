use http::StatusCode;

/// Why the gateway could not start or a request could not be proxied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A listener could not bind its address.
    #[error(
        "listener `{listener}` cannot bind {address}: {source}; is another process using the port?"
    )]
    Bind {
        /// Listener name.
        listener: String,
        /// Its address.
        address: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TLS could not be set up for a listener.
    #[error("listener `{listener}`: {source}")]
    Tls {
        /// Listener name.
        listener: String,
        /// The TLS error.
        #[source]
        source: sluice_tls::TlsError,
    },
    /// The offload engines could not start (threads).
    #[error("cannot start the offload engines: {0}")]
    Offload(#[source] std::io::Error),
    /// `[tracing]`'s exporter could not be built.
    #[error("cannot start tracing: {0}")]
    Tracing(String),
    /// The DNS resolver of `[resolver]` could not be set up.
    #[error("{0}")]
    Resolver(String),
    /// A route's authentication could not be set up (a key or htpasswd file).
    #[error("{0}")]
    Auth(String),
    /// A Lua script did not compile, or `[lua] init` failed (file, line, message).
    #[error("{0}")]
    Lua(String),
    /// A route's WAF rule set did not compile (file, line, message), or its threads did not
    /// start.
    #[error("{0}")]
    Waf(sluice_waf::WafError),
    /// The gateway is shutting down and takes no new configuration.
    #[error("the gateway is shutting down")]
    Stopped,
    /// The access log file could not be opened.
    #[error("cannot open access log {path}: {source}")]
    AccessLog {
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// How one request failed, mapped to the status the client gets. The one place where failures
/// become HTTP responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No route matched (client's fault).
    NoRoute,
    /// Request head too large (client).
    HeadersTooLarge,
    /// Request body too large (client).
    BodyTooLarge,
    /// The request could not be understood (client).
    BadRequest,
    /// More than one `Authorization` or `Proxy-Authorization` field (client; NGINX answers
    /// 400 too): the gateway would verify one and the origin might read another.
    DuplicateAuthorization,
    /// The request's path was refused by normalization (`request::path`: a broken
    /// percent-encoding, an encoded separator, a `..` above the root; client).
    BadPath,
    /// The `Host` names a site whose client-certificate settings differ from those of the
    /// certificate the connection's SNI chose (RFC 9110 §15.5.20; NGINX answers 421 too).
    Misdirected,
    /// No server could be connected to (upstream).
    UpstreamConnect,
    /// A server accepted the request but failed before responding (upstream).
    UpstreamError,
    /// A server did not send response headers in time (upstream).
    UpstreamTimeout,
    /// The client's address is not allowed (listener or route `allow`/`deny`).
    Forbidden,
    /// Over the route's rate limit.
    TooManyRequests,
    /// No credentials, or ones `[route.auth]` refused.
    Unauthorized,
    /// The listener requires a client certificate and none was sent (NGINX's answer: 400).
    NoClientCert,
    /// The client's certificate did not verify (expired, revoked, another CA; 400 as NGINX).
    BadClientCert,
    /// `[route.auth]`'s authorization service said 403.
    AuthForbidden,
    /// `[route.auth]`'s authorization service failed (`on_error = "deny"`).
    AuthUnavailable,
    /// `[route.auth]` could not check a password: the `[auth]` hashing pool is full.
    AuthBusy,
    /// Every upstream server at `max_conns` and the queue full or waited out.
    ServiceUnavailable,
    /// The route's Lua script raised an error or ran past its budget (logged, counted).
    ScriptFailed,
    /// `[route.waf]` could not inspect the request in time (its queue full) and its
    /// `on_overload` is `"closed"`.
    WafUnavailable,
}

impl Failure {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Failure::NoRoute => StatusCode::NOT_FOUND,
            Failure::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Failure::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Failure::BadRequest
            | Failure::DuplicateAuthorization
            | Failure::BadPath
            | Failure::NoClientCert
            | Failure::BadClientCert => StatusCode::BAD_REQUEST,
            Failure::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            Failure::UpstreamConnect | Failure::UpstreamError => StatusCode::BAD_GATEWAY,
            Failure::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::Forbidden | Failure::AuthForbidden => StatusCode::FORBIDDEN,
            Failure::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Failure::Unauthorized => StatusCode::UNAUTHORIZED,
            Failure::AuthUnavailable | Failure::ScriptFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Failure::ServiceUnavailable | Failure::WafUnavailable | Failure::AuthBusy => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    pub(crate) fn message(self) -> &'static str {
        match self {
            Failure::NoRoute => "no route matches this request\n",
            Failure::HeadersTooLarge => "request header fields too large\n",
            Failure::BodyTooLarge => "request body too large\n",
            Failure::BadRequest => "bad request\n",
            Failure::DuplicateAuthorization => {
                "bad request: more than one Authorization or Proxy-Authorization header\n"
            }
            Failure::BadPath => "bad request: the path is not valid\n",
            Failure::Misdirected => {
                "misdirected request: this connection's certificate does not serve this host\n"
            }
            Failure::UpstreamConnect => "no upstream server could be reached\n",
            Failure::UpstreamError => "the upstream server failed to respond\n",
            Failure::UpstreamTimeout => "the upstream server did not respond in time\n",
            Failure::Forbidden => "access from this address is not allowed\n",
            Failure::TooManyRequests => "too many requests; see Retry-After\n",
            Failure::Unauthorized => "authentication required\n",
            Failure::NoClientCert => "no required SSL certificate was sent\n",
            Failure::BadClientCert => "the SSL certificate error\n",
            Failure::AuthForbidden => "access denied\n",
            Failure::AuthUnavailable => "authentication is unavailable; try again shortly\n",
            Failure::AuthBusy => "too many logins are being checked; try again shortly\n",
            Failure::ServiceUnavailable => "every upstream server is busy; try again shortly\n",
            Failure::ScriptFailed => "internal server error\n",
            Failure::WafUnavailable => {
                "the request could not be inspected in time; try again shortly\n"
            }
        }
    }
}

/// Whether `err` or anything in its cause chain is a `T` (linkerd's `is_caused_by`).
pub(crate) fn is_caused_by<T: std::error::Error + 'static>(
    err: &(dyn std::error::Error + 'static),
) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<T>() {
            return true;
        }
        cur = e.source();
    }
    false
}
