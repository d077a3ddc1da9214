//! What a script's call waits for ([`Pending`]: an outbound request or a sleep), what it
//! resumes with, and what sends its requests ([`Fetcher`], the gateway's side). The API that
//! makes them is `api/outbound.rs`; the runner that yields and resumes is `state.rs`.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use std::future::Future;
use std::time::Duration;

/// An HTTP request a script made, for the gateway to send.
#[derive(Debug)]
pub struct Outbound {
    /// The method (`params.method`, GET by default).
    pub method: Method,
    /// The absolute URI: its authority names an `[[upstream]]` or one of its servers.
    pub uri: Uri,
    /// The headers (`params.headers`; `Host` from the URI's authority unless given).
    pub headers: HeaderMap,
    /// The body (`params.body`).
    pub body: Bytes,
    /// The whole exchange's deadline (`httpc:set_timeout`, 60 s by default as
    /// lua-nginx-module's socket timeouts).
    pub timeout: Duration,
    /// The most response body bytes read (the state's memory bound: more could not be held).
    pub max_body: usize,
}

/// The answer to an [`Outbound`].
#[derive(Debug)]
pub struct Fetched {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, read whole.
    pub body: Bytes,
}

/// What sends a script's outbound requests: the gateway's upstream pools.
pub trait Fetcher: Sync {
    /// Sends `call` and reads its answer whole, or says why not (the script's `err`).
    fn fetch(&self, call: Outbound) -> impl Future<Output = Result<Fetched, String>> + Send;
}

/// What a script's coroutine yielded to wait for.
#[derive(Debug)]
pub(crate) enum Pending {
    Http(Box<Outbound>),
    Sleep(Duration),
}

/// What the coroutine resumes with.
pub(crate) enum Resumed {
    Http(Result<Fetched, String>),
    Slept,
}
