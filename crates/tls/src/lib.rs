//! The BoringSSL server side of Sluice: certificate credentials, SNI selection, ALPN, session
//! tickets, and the facts about a finished handshake that the access log records.
//!
//! Dependencies point one way: this crate reads a validated [`sluice_config::Snapshot`] and
//! knows nothing of HTTP. Each certificate becomes a BoringSSL *credential*; the early
//! (select-certificate) callback adds every credential registered for the client's SNI name to
//! the connection, and BoringSSL picks the first one the client can use, so a client that
//! supports ECDSA gets the ECDSA certificate and one that offers only RSA signature
//! algorithms gets the RSA certificate. Later, the private-key operation of each credential
//! is where the offload layer plugs in.

mod acceptor;
pub mod chain;
mod client_auth;
mod credential;
mod engines;
mod error;
mod info;
pub mod live;
pub mod ocsp;
mod offload;
mod quic;
mod quiet_reads;
pub mod selfsigned;
mod store;
mod tickets;

pub use acceptor::{AcceptError, TlsAcceptor, TlsIdentity};
pub use client_auth::ClientCert;
pub use credential::{inline_credential, x509_credential};
pub use error::TlsError;
pub use info::TlsInfo;
pub use live::{AcmeStatus, OcspStatus, Slot, live};
pub use offload::{KeyOffload, KeyOperation, OffloadIo};
pub use quic::QuicHandshake;
pub use quiet_reads::{QuietReads, ReadReady};
pub use store::CertStore;
pub use tickets::{TICKET_KEY_LEN, TicketKeys, reread_ticket_key_files};

#[cfg(test)]
mod tests;
