use crate::live::{ACME_TLS_ALPN, live};
use crate::offload::{ConnOffload, WakerSlot};
use crate::tickets::callback_for;
use crate::{CertStore, KeyOffload, OffloadIo, TicketKeys, TlsError};
use boring::ssl::{
    AlpnError, ClientHello, ExtensionType, NameType, SelectCertError, Ssl, SslAcceptor, SslMethod,
    SslOptions, SslSessionCacheMode, SslVersion,
};
use sluice_config::{Listener, Snapshot, TlsVersion, UnknownSni};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_boring::{HandshakeError, SslStream};

/// The TLS side of one HTTPS listener: a configured BoringSSL acceptor plus its ticket keys.
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: Arc<SslAcceptor>,
    pub(crate) store: Arc<CertStore>,
    pub(crate) tickets: Option<Arc<TicketKeys>>,
    offload: Arc<KeyOffload>,
    identity: TlsIdentity,
    /// The listener's TLS settings (for the QUIC context, built from the same).
    pub(crate) settings: Arc<sluice_config::TlsListener>,
}

/// Everything an acceptor is built from, so that a reload can tell whether a listener's
/// acceptor may be kept: its certificates (by fingerprint: their files' bytes and settings)
/// and its TLS settings. The private-key offload is compared separately (by identity of the
/// running engines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsIdentity {
    certificates: Vec<[u8; 32]>,
    default_certificate: [u8; 32],
    unknown_sni: UnknownSni,
    versions: (TlsVersion, TlsVersion),
    tickets: (bool, Option<std::path::PathBuf>, std::time::Duration),
    rsa_key_exchange: bool,
    groups: Option<Vec<&'static str>>,
    alpn: (bool, bool),
    client_auth: Option<Arc<sluice_config::ClientAuth>>,
}

impl TlsIdentity {
    /// The identity of `listener`'s TLS side in `snapshot`; `None` for a plain-HTTP listener.
    pub fn of(snapshot: &Snapshot, listener: &Listener) -> Option<Self> {
        let tls = listener.tls.as_ref()?;
        let fp = |i: usize| snapshot.certificates[i].fingerprint;
        Some(TlsIdentity {
            certificates: tls.certificates.iter().map(|&i| fp(i)).collect(),
            default_certificate: fp(tls.default_certificate),
            unknown_sni: tls.unknown_sni,
            versions: (tls.min_version, tls.max_version),
            tickets: (
                tls.session_tickets,
                tls.ticket_key_file.clone(),
                tls.ticket_key_rotation,
            ),
            rsa_key_exchange: tls.rsa_key_exchange,
            groups: tls.groups.clone(),
            alpn: (listener.h2, listener.http1),
            client_auth: tls.client_auth.clone(),
        })
    }
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("store", &self.store)
            .field("tickets", &self.tickets)
            .finish()
    }
}

fn version(v: TlsVersion) -> SslVersion {
    match v {
        TlsVersion::V1_2 => SslVersion::TLS1_2,
        TlsVersion::V1_3 => SslVersion::TLS1_3,
    }
}

impl TlsAcceptor {
    /// Builds the acceptor for `listener`, which must have TLS settings; private-key
    /// operations go to `offload`. Ticket key rotation is not started here; call
    /// [`TlsAcceptor::start_ticket_rotation`] inside a runtime.
    pub fn build(
        snapshot: &Snapshot,
        listener: &Listener,
        offload: Arc<KeyOffload>,
    ) -> Result<Self, TlsError> {
        Self::rebuild(snapshot, listener, offload, None)
    }

    /// Like [`TlsAcceptor::build`], for a reload: the session ticket keys of `previous` (the
    /// listener's acceptor until now) are kept when its ticket settings did not change, so
    /// tickets issued before the reload still resume after it.
    pub fn rebuild(
        snapshot: &Snapshot,
        listener: &Listener,
        offload: Arc<KeyOffload>,
        previous: Option<&TlsAcceptor>,
    ) -> Result<Self, TlsError> {
        let identity = TlsIdentity::of(snapshot, listener)
            .expect("TlsAcceptor::build called for a plain-HTTP listener");
        let tls = listener
            .tls
            .as_ref()
            .expect("TlsAcceptor::build called for a plain-HTTP listener");
        let store = Arc::new(CertStore::build(snapshot, tls)?);

        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())
            .map_err(TlsError::boring("creating the TLS context"))?;
        b.set_min_proto_version(Some(version(tls.min_version)))
            .map_err(TlsError::boring("setting the minimum TLS version"))?;
        b.set_max_proto_version(Some(version(tls.max_version)))
            .map_err(TlsError::boring("setting the maximum TLS version"))?;
        if tls.rsa_key_exchange {
            // Mozilla's intermediate list, then RSA key exchange for old clients: a client
            // that offers ECDHE still gets it (server preference). BoringSSL asks the
            // private-key method to decrypt the premaster secret.
            b.set_cipher_list(
                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
                 ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:\
                 ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
                 AES128-GCM-SHA256:AES256-GCM-SHA384",
            )
            .map_err(TlsError::boring("setting the cipher suites"))?;
            b.set_options(SslOptions::CIPHER_SERVER_PREFERENCE);
        }

        if let Some(groups) = &tls.groups {
            // Names checked at load against BoringSSL's own table (KNOWN_GROUPS).
            b.set_curves_list(&groups.join(":"))
                .map_err(TlsError::boring("setting the key-exchange groups"))?;
        }

        // ALPN by server preference: h2, then HTTP/1.1. A client that offers neither goes on
        // without ALPN, which means HTTP/1.1. An ACME CA validating TLS-ALPN-01 offers only
        // acme-tls/1, and gets it while a challenge for the name is published.
        let (offer_h2, offer_h1) = (listener.h2, listener.http1);
        b.set_alpn_select_callback(move |ssl, client| {
            let offered = |want: &[u8]| alpn_protocols(client).find(|p| *p == want);
            if let Some(p) = offered(ACME_TLS_ALPN)
                && ssl
                    .servername(NameType::HOST_NAME)
                    .is_some_and(|n| live().alpn_challenge(n).is_some())
            {
                return Ok(p);
            }
            if offer_h2 && let Some(p) = offered(b"h2") {
                return Ok(p);
            }
            if offer_h1 && let Some(p) = offered(b"http/1.1") {
                return Ok(p);
            }
            Err(AlpnError::NOACK)
        });

        b.set_select_certificate_callback(select_certificate(
            store.clone(),
            tls.unknown_sni == UnknownSni::Reject,
            false,
        ));
        if let Some(auth) = &tls.client_auth {
            crate::client_auth::configure(&mut b, auth)?;
        }

        // Resumption is by tickets only: a server-side session cache does not scale across
        // instances, tickets with a shared key file do.
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        let tickets = if tls.session_tickets {
            let kept = previous
                .filter(|p| p.identity.tickets == identity.tickets)
                .and_then(|p| p.tickets.clone());
            let ring = match (kept, &tls.ticket_key_file) {
                (Some(ring), _) => ring,
                (None, Some(path)) => TicketKeys::from_file(path)?,
                (None, None) => TicketKeys::generated()?,
            };
            set_ticket_callback(&mut b, ring.clone());
            Some(ring)
        } else {
            b.set_options(SslOptions::NO_TICKET);
            None
        };
        Ok(TlsAcceptor {
            inner: Arc::new(b.build()),
            store,
            tickets,
            offload,
            identity,
            settings: Arc::new(tls.clone()),
        })
    }

    /// What this acceptor was built from.
    pub fn identity(&self) -> &TlsIdentity {
        &self.identity
    }

    /// The private-key offload its handshakes use.
    pub fn key_offload(&self) -> &Arc<KeyOffload> {
        &self.offload
    }

    /// Starts rotating (or re-reading) the ticket keys every `interval`.
    pub fn start_ticket_rotation(&self, interval: std::time::Duration) {
        if let Some(ring) = &self.tickets {
            ring.spawn_rotation(interval);
        }
    }

    /// Runs the server handshake on `stream`; its private-key operation runs on the offload
    /// layer while this task yields.
    pub async fn accept<S>(&self, stream: S) -> Result<SslStream<OffloadIo<S>>, AcceptError<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.accept_placed(stream, false).await
    }

    /// [`Self::accept`] for a handshake the caller runs `alone` on its event loop (no other
    /// in progress): with the engine chain chosen at start, its key signs right there
    /// instead of on an engine (one job gains nothing from a thread hop).
    pub async fn accept_placed<S>(
        &self,
        stream: S,
        alone: bool,
    ) -> Result<SslStream<OffloadIo<S>>, AcceptError<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let slot = Arc::new(WakerSlot::default());
        let mut ssl = Ssl::new(self.inner.context()).map_err(AcceptError::Setup)?;
        ssl.set_ex_data(
            ConnOffload::index(),
            ConnOffload::new(self.offload.clone(), slot.clone(), alone),
        );
        let result = tokio_boring::SslStreamBuilder::new(ssl, OffloadIo::new(stream, slot.clone()))
            .accept()
            .await;
        slot.handshake_done();
        result.map_err(AcceptError::Handshake)
    }

    /// The certificate store (for tests and diagnostics).
    pub fn store(&self) -> &CertStore {
        &self.store
    }
}

#[expect(
    unsafe_code,
    reason = "boring marks the ticket key callback setter unsafe"
)]
pub(crate) fn set_ticket_callback(b: &mut boring::ssl::SslContextBuilder, ring: Arc<TicketKeys>) {
    // SAFETY: the callback (TicketKeys::callback) writes a 16-byte key name, fills the IV from
    // BoringSSL's CSPRNG, and initialises both the cipher context (AES-256-CBC, 32-byte key,
    // 16-byte IV) and the HMAC context (SHA-256) before returning Success, as the contract of
    // SSL_CTX_set_tlsext_ticket_key_cb requires; on any failure it returns Error or Noop.
    unsafe { b.set_ticket_key_callback(callback_for(ring)) };
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum AcceptError<S> {
    /// The connection's TLS state could not be created.
    Setup(boring::error::ErrorStack),
    /// The handshake failed (the peer, the network, or a private-key operation).
    Handshake(HandshakeError<OffloadIo<S>>),
}

impl<S: std::fmt::Debug> std::fmt::Display for AcceptError<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcceptError::Setup(e) => write!(f, "TLS setup failed: {e}"),
            AcceptError::Handshake(e) => write!(f, "{e}"),
        }
    }
}

/// The early callback of every handshake: adds the credential set for the client's SNI name
/// (BoringSSL picks the first one the client's signature algorithms and cipher suites
/// allow), the default set for an unknown name unless `reject_unknown`, or the TLS-ALPN-01
/// challenge certificate. `quic`: first puts the QUIC connection's offload state on the SSL
/// (see `quic`), which quiche created without us.
pub(crate) fn select_certificate(
    store: Arc<CertStore>,
    reject_unknown: bool,
    quic: bool,
) -> impl Fn(ClientHello<'_>) -> Result<(), SelectCertError> + Send + Sync + 'static {
    move |mut hello| {
        if quic {
            crate::offload::attach_current(hello.ssl_mut());
        } else if let Some(challenge) = acme_challenge(&hello) {
            return hello
                .ssl_mut()
                .add_credential(&challenge)
                .map_err(|_| SelectCertError::ERROR);
        }
        if let Some(mode) = hello
            .servername(NameType::HOST_NAME)
            .and_then(|n| store.client_auth_for(n))
        {
            crate::client_auth::override_mode(hello.ssl_mut(), mode);
        }
        let set = match hello
            .servername(NameType::HOST_NAME)
            .map(|n| store.lookup(n))
        {
            Some(Some(set)) => set,
            _ if reject_unknown => return Err(SelectCertError::ERROR),
            _ => store.default_set(),
        };
        for slot in set {
            hello
                .ssl_mut()
                .add_credential(&slot.load())
                .map_err(|_| SelectCertError::ERROR)?;
        }
        Ok(())
    }
}

/// The TLS-ALPN-01 challenge certificate to answer `hello` with: the client offers
/// `acme-tls/1` and a challenge for its SNI name is published.
fn acme_challenge(hello: &ClientHello<'_>) -> Option<Arc<boring::ssl::SslCredential>> {
    let ext = hello.get_extension(ExtensionType::APPLICATION_LAYER_PROTOCOL_NEGOTIATION)?;
    // The extension holds a 2-byte length, then the wire-format list.
    let list = ext.get(2..)?;
    alpn_protocols(list).find(|p| *p == ACME_TLS_ALPN)?;
    live().alpn_challenge(hello.servername(NameType::HOST_NAME)?)
}

/// Iterates the protocol names of an ALPN wire-format list (length-prefixed strings).
fn alpn_protocols(mut wire: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (&len, rest) = wire.split_first()?;
        if rest.len() < len as usize {
            return None;
        }
        let (p, rest) = rest.split_at(len as usize);
        wire = rest;
        Some(p)
    })
}
