//! The TLS side of a QUIC listener: the same certificates, SNI choice, session tickets and
//! private-key offload as the listener's TCP acceptor, on a TLS 1.3-only context that quiche
//! drives.
//!
//! quiche creates each connection's SSL itself and runs the handshake inside its
//! `Connection::recv` and `send`: there is no stream to learn the task's waker from, and no
//! hook to put our per-connection offload state on the SSL before the handshake starts. So
//! the connection's task enters its [`QuicHandshake`] around every call into quiche while the
//! handshake runs, and the select-certificate callback (which BoringSSL runs first in every
//! handshake, inside that call) finds it in a thread-local and puts the connection's
//! `ConnOffload` on the SSL. From there the private-key method works as for TCP: it answers
//! "retry" (quiche maps SSL_ERROR_WANT_PRIVATE_KEY_OPERATION to "not finished, not failed"),
//! the job runs on the dispatcher and wakes the task recorded here, and the task's next
//! `Connection::send` resumes the handshake. A connection dropped mid-operation frees its SSL,
//! whose `ConnOffload` aborts the job.

use crate::acceptor::select_certificate;
use crate::offload::{CURRENT_QUIC, WakerSlot};
use crate::{KeyOffload, TlsAcceptor, TlsError};
use boring::ssl::{SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode, SslVersion};
use sluice_config::UnknownSni;
use std::sync::Arc;
use std::task::Context;

/// One QUIC connection's side of its handshake's private-key operation.
#[derive(Debug)]
pub struct QuicHandshake {
    offload: Arc<KeyOffload>,
    slot: Arc<WakerSlot>,
}

impl QuicHandshake {
    /// For a connection accepted on `acceptor`'s listener.
    pub fn new(acceptor: &TlsAcceptor) -> Self {
        QuicHandshake {
            offload: acceptor.key_offload().clone(),
            slot: Arc::new(WakerSlot::default()),
        }
    }

    /// The task to wake when a private-key operation finishes: the one polling now.
    pub fn record(&self, cx: &Context<'_>) {
        self.slot.record(cx);
    }

    /// Runs `f` (a call into quiche) with this connection as the one whose handshake a
    /// private-key operation belongs to.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Leave;
        impl Drop for Leave {
            fn drop(&mut self) {
                CURRENT_QUIC.with(|c| c.borrow_mut().take());
            }
        }
        CURRENT_QUIC.with(|c| *c.borrow_mut() = Some((self.offload.clone(), self.slot.clone())));
        let _leave = Leave;
        f()
    }

    /// The handshake is over: no waker is kept any more.
    pub fn done(&self) {
        self.slot.handshake_done();
    }
}

impl TlsAcceptor {
    /// A TLS context for QUIC on this listener (for quiche's
    /// `Config::with_boring_ssl_ctx_builder`): TLS 1.3 only (RFC 9001 §4.2), the same
    /// credentials, SNI policy, groups and session-ticket keys; ALPN is quiche's (`h3`).
    /// Early data stays off unless the caller enables it on quiche's config (replay).
    pub fn quic_context(&self) -> Result<SslContextBuilder, TlsError> {
        let tls = &self.settings;
        let mut b = SslContextBuilder::new(SslMethod::tls())
            .map_err(TlsError::boring("creating the QUIC TLS context"))?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))
            .map_err(TlsError::boring("setting the minimum TLS version"))?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))
            .map_err(TlsError::boring("setting the maximum TLS version"))?;
        if let Some(groups) = &tls.groups {
            b.set_curves_list(&groups.join(":"))
                .map_err(TlsError::boring("setting the key-exchange groups"))?;
        }
        b.set_select_certificate_callback(select_certificate(
            self.store.clone(),
            tls.unknown_sni == UnknownSni::Reject,
            true,
        ));
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        match &self.tickets {
            Some(ring) => crate::acceptor::set_ticket_callback(&mut b, ring.clone()),
            None => {
                b.set_options(SslOptions::NO_TICKET);
            }
        }
        Ok(b)
    }
}
