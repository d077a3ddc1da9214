//! What every protocol's server shares with the request path, and nothing else: the
//! handler a connection's requests go to (`Service`), the response on its way
//! (`Responding`), and the client's request body whichever protocol carried it
//! (`ClientBody`, with the demand-driven channel HTTP/1.1 and HTTP/3 read bodies into).
//! A leaf: it imports only `body`, so `http1`, `http3`, `listen` and `request` all depend on
//! it and it on none of them.

pub(crate) mod client_body;

use crate::body::ProxyBody;
use http::{Request, Response};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

pub(crate) use client_body::ClientBody;

/// A request's response, on its way: the handler's future, boxed.
pub(crate) type Responding =
    Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

/// What a connection's requests go to: the proxy's handler, handed in by `listen::connection`,
/// so that the protocol servers know nothing of routing or upstreams.
pub(crate) trait Service: Send + Sync + 'static {
    /// Starts serving `req`. Boxed (the handler's future is several KiB): an idle
    /// connection's own future stays small.
    fn call(self: Arc<Self>, req: Request<ClientBody>) -> Responding;
    /// The largest request head taken (`max_header_bytes`).
    fn max_head(&self) -> usize;
    /// The most header fields a request head may have (`max_header_fields`; more is 431).
    fn max_fields(&self) -> usize;
    /// A request refused before it became one (a malformed or oversized head, bad chunked
    /// framing), answered `status` by the protocol server: logged and counted like any
    /// request, as NGINX logs its 400s. `line` is the request line as received, possibly
    /// cut short or empty.
    fn refused(&self, status: http::StatusCode, line: &[u8]);
}
