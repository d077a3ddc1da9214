//! The HTTP request path, for both protocols: what a listener's and a connection's requests
//! share (`context`, and `done`: a request's end, logged and counted), the handler (`handler`: admission, routing, policy),
//! the proxying of a routed request as named phases with retries (`proxy`), the response
//! cache (`cache`: a phase before `proxy`), compression, forwarding headers, edge policy (ACLs, answers, rewrites, rate
//! limits, traffic splits), the web application firewall (`firewall` for requests,
//! `response_inspection` for responses), gRPC, the router, the access log and the failure statuses.

pub(crate) mod authority;
pub(crate) mod cache;
pub(crate) mod compression;
pub(crate) mod context;
pub(crate) mod done;
pub(crate) mod error;
pub(crate) mod filters;
pub(crate) mod firewall;
pub(crate) mod forward;
pub(crate) mod grpc;
pub(crate) mod handler;
pub(crate) mod mirror;
pub(crate) mod mqtt_gate;
pub(crate) mod mqtt_ws;
pub(crate) mod path;
pub(crate) mod phases;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod rate_limit;
pub(crate) mod response_inspection;
pub(crate) mod router;
pub(crate) mod scripting;
pub(crate) mod split;
pub(crate) mod trace;
pub(crate) mod vouched;
