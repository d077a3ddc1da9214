//! What the engines see of a request and of its response: a leaf both engines and the
//! inspection import (the native engine reads it as libmodsecurity's connector feeds it).

use bytes::Bytes;
use std::net::SocketAddr;

/// What the rules see of a request: copied from it, so that a client that goes away while
/// its job runs leaves nothing the job reads.
#[derive(Debug, Clone)]
pub struct RequestFacts {
    /// The client (behind trusted proxies, the real one).
    pub client: SocketAddr,
    /// The address it connected to.
    pub server: SocketAddr,
    /// The method.
    pub method: http::Method,
    /// The request target as the client sent it (path and query).
    pub target: String,
    /// `"1.0"`, `"1.1"`, `"2.0"` or `"3.0"`.
    pub version: &'static str,
    /// The request's header fields (with `Host` for HTTP/2 and HTTP/3, from `:authority`).
    pub headers: http::HeaderMap,
    /// The body read, up to the route's limit.
    pub body: Bytes,
    /// The request's ID (`X-Request-Id`), which becomes ModSecurity's `UNIQUE_ID`; empty:
    /// a number of the process's own.
    pub id: String,
}

/// What the rules see of a response (`inspect_response`): its head as it goes to the client
/// and its body up to the route's `response_body_limit`.
#[derive(Debug, Clone)]
pub struct ResponseFacts {
    /// The status.
    pub status: u16,
    /// `"HTTP 1.1"` or `"HTTP 2.0"`, as ModSecurity-nginx passes it.
    pub protocol: &'static str,
    /// The response's header fields.
    pub headers: http::HeaderMap,
    /// The body read (empty where its type is not inspected), up to the limit, as the
    /// upstream sent it (compressed where its `Content-Encoding` says so).
    pub body: Bytes,
    /// `response_body_limit`: the most bytes of the body the rules see once decoded.
    pub body_limit: usize,
}
