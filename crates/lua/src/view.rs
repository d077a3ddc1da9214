//! What a script sees of its request: a [`View`] the proxy fills before a call and reads
//! back after it. The request's own parts (method, URI, headers) are moved in and out, never
//! borrowed: a script holds no reference into memory the proxy may free, and a value a
//! script keeps (a header's string) is its own copy in the Lua state.

use bytes::Bytes;
use http::{HeaderMap, Method, Uri, Version};
use mlua::RegistryKey;
use sluice_config::LuaPhase;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// The connection and request facts that do not change while the request runs.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The route's name (in log lines and errors).
    pub route: Arc<str>,
    /// The client (behind trusted proxies), as `ngx.var.remote_addr`/`remote_port`.
    pub client: SocketAddr,
    /// The address the request arrived on (`server_addr`, `server_port`).
    pub local: SocketAddr,
    /// `"https"` or `"http"`.
    pub scheme: &'static str,
    /// `X-Request-Id` where the listener gives one (shared: the view and the request's
    /// Lua each hold the facts).
    pub request_id: Option<Arc<str>>,
    /// The request target as the client sent it (`ngx.var.request_uri`), where the
    /// gateway's path normalization changed it; `None`: the request's target is the client's.
    pub request_uri: Option<Arc<str>>,
    /// When the request arrived (`ngx.req.start_time`, `request_time`): a monotonic instant,
    /// turned into wall-clock time only when a script asks, which spares a clock read per
    /// request.
    pub arrived: Instant,
}

/// One request as a script sees it during one call.
#[derive(Debug)]
pub struct View {
    /// The phase the call runs in.
    pub phase: LuaPhase,
    /// What does not change while the request runs.
    pub facts: Facts,
    /// The request's method.
    pub method: Method,
    /// The request's target.
    pub uri: Uri,
    /// The request's protocol version.
    pub version: Version,
    /// The request's headers (read-only after the access phase).
    pub headers: HeaderMap,
    /// The request body, where the route buffered it (`ngx.req.get_body_data`).
    pub body: Option<Bytes>,
    /// The authenticated subject (`ngx.var.remote_user`).
    pub subject: Option<Arc<str>>,
    /// The response status: set by a script (`ngx.status`), or the upstream's.
    pub status: u16,
    /// In `rewrite`/`access`: headers for the response the request ends with (`ngx.header`);
    /// in `header_filter`: the response's own.
    pub response_headers: HeaderMap,
    /// What `ngx.say`/`ngx.print` wrote.
    pub output: Vec<u8>,
    /// Whether the script's answer has "sent" its head (output, `ngx.flush`, `ngx.eof`):
    /// `ngx.status` and `ngx.header` no longer change it, as in NGINX.
    pub header_sent: bool,
    /// Whether `ngx.eof` was called: later output is refused (`nil, "seen eof"`).
    pub eof_seen: bool,
    /// `ngx.exit`'s status, once called.
    pub exit: Option<i64>,
    /// `body_filter`: the piece of body in hand (`ngx.arg[1]`) and whether it is the last
    /// (`ngx.arg[2]`).
    pub chunk: Option<Bytes>,
    /// Whether `chunk` is the body's last.
    pub eof: bool,
    /// `ngx.ctx`: the request's table in its state's registry, made at first use.
    pub ctx: Option<RegistryKey>,
    /// Bytes sent to the client (`ngx.var.bytes_sent` in `log`).
    pub bytes_sent: u64,
    /// What the call waits for, left here before it yields to its runner.
    pub(crate) pending: Option<crate::wait::Pending>,
    /// The call's error with its traceback, left here by its runner.
    pub(crate) failure: Option<String>,
}

impl View {
    /// A view of a request in phase `phase`, with nothing in it yet but its facts.
    pub fn new(phase: LuaPhase, facts: Facts) -> Self {
        View {
            phase,
            facts,
            method: Method::GET,
            uri: Uri::default(),
            version: Version::HTTP_11,
            headers: HeaderMap::new(),
            body: None,
            subject: None,
            status: 0,
            response_headers: HeaderMap::new(),
            output: Vec::new(),
            header_sent: false,
            eof_seen: false,
            exit: None,
            chunk: None,
            eof: false,
            ctx: None,
            bytes_sent: 0,
            pending: None,
            failure: None,
        }
    }

    /// Readies the view for a call in `phase`: what a call leaves for its caller (output,
    /// exit, the body piece, a wait, an error) goes; what the request carries from phase to
    /// phase (`ngx.ctx`, its head, `ngx.status`, `ngx.header`) stays, as in NGINX, where
    /// they live in the request.
    pub(crate) fn begin(&mut self, phase: LuaPhase) {
        self.phase = phase;
        self.output.clear();
        self.header_sent = false;
        self.eof_seen = false;
        self.exit = None;
        self.chunk = None;
        self.eof = false;
        self.pending = None;
        self.failure = None;
    }

    /// Whether the request's head may still change (`rewrite`, `access`, `content`).
    pub fn request_writable(&self) -> bool {
        self.answers()
    }

    /// Whether the call may end the request with its own answer (output, `ngx.exit`,
    /// `ngx.redirect`) and wait (`rewrite`, `access`, `content`).
    pub fn answers(&self) -> bool {
        matches!(
            self.phase,
            LuaPhase::Rewrite | LuaPhase::Access | LuaPhase::Content
        )
    }

    /// Whether the response's head may still change (every phase before the body, until
    /// the script's own output sends it).
    pub fn response_writable(&self) -> bool {
        !self.header_sent && !matches!(self.phase, LuaPhase::BodyFilter | LuaPhase::Log)
    }
}

/// The phase a call without a request runs in (the state's app data): `init` while the
/// state is built, then `timer`.
pub(crate) struct Outside(pub(crate) std::cell::Cell<&'static str>);

/// The error a script gets when it calls what its phase does not allow (OpenResty's words).
pub(crate) fn disabled(phase: LuaPhase) -> mlua::Error {
    mlua::Error::runtime(format!(
        "API disabled in the context of {}_by_lua*",
        phase.name()
    ))
}
