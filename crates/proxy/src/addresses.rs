//! Who a connection is from and to: shared by the accept loop, both kinds of listener and the
//! upstream side (a PROXY protocol header sent upstream names these), so it lives with none
//! of them.

use std::net::SocketAddr;

/// Who a connection is from and to, after any PROXY protocol header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addresses {
    /// The client (the header's source when there was one).
    pub(crate) client: SocketAddr,
    /// The address it connected to (the header's destination when there was one).
    pub(crate) local: SocketAddr,
}
