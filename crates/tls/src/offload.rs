//! The bridge from BoringSSL's private-key method to the offload layer.
//!
//! Every certificate's credential gets [`METHOD`] instead of a private key. When a handshake
//! needs a signature, BoringSSL calls `sign` (or `decrypt`, for TLS 1.2 RSA key exchange when
//! a listener enables it); we prepare a [`KeyJob`] for the credential's
//! key (kept in the credential's ex_data), start it on the crypto dispatcher in a task of its
//! own and answer "retry", so the handshake pauses and the worker serves other connections.
//! When the job finishes, the task stores the signature and wakes the handshake's task;
//! BoringSSL then calls `complete`, which hands the signature over.
//!
//! The waker comes from the connection's stream: [`OffloadIo`] records the waker of the task
//! that last polled it, which is the handshake's (BoringSSL reads the ClientHello in the same
//! poll that asks for the signature). A connection that closes mid-handshake drops its
//! [`ConnOffload`], which aborts the task: the dispatcher counts the job abandoned and a late
//! result is discarded.
//!
//! `boring` 5.4 offers the private-key method only on credentials it builds itself (raw public
//! keys), so this goes through `boring-sys`, the way BoringSSL documents it:
//! `SSL_CREDENTIAL_set_private_key_method`, `SSL_get0_selected_credential` and
//! `SSL_CREDENTIAL_get_ex_data`.

use crate::TlsError;
use boring::error::ErrorStack;
use boring::ex_data::Index;
use boring::ssl::{Ssl, SslCredential, SslCredentialRef, SslRef};
use boring_sys as ffi;
use foreign_types::{ForeignType, ForeignTypeRef};
use futures_util::FutureExt as _;
use sluice_crypto::{EngineKind, KeyJob, PrivateKey, SignatureScheme, VerifyPolicy, run};
use sluice_offload::{CountersSnapshot, Dispatcher, EngineError, JobTrace};
use std::cell::RefCell;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where private-key operations go: shared by every listener of a gateway.
///
/// Built by `KeyOffload::from_config` (engines.rs) from the chain and the configuration.
pub struct KeyOffload {
    pub(crate) dispatcher: Arc<Dispatcher<KeyJob>>,
    /// The remote engine, when configured (for its per-server state in `/metrics`).
    pub(crate) keyless: Option<Arc<sluice_keyless::Keyless>>,
    pub(crate) verify: VerifyPolicy,
    /// No engine but the software one: sign on the spot, without a task.
    pub(crate) inline_only: bool,
    /// The chain in force and why (for `/status`).
    pub(crate) chain: crate::chain::Chain,
}

impl std::fmt::Debug for KeyOffload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyOffload")
            .field("dispatcher", &self.dispatcher)
            .field("verify", &self.verify)
            .field("chain", &self.chain)
            .finish()
    }
}

impl KeyOffload {
    /// Each key server's state, when the `keyless` engine is configured.
    pub fn key_servers(&self) -> Vec<sluice_keyless::ServerStats> {
        self.keyless.as_ref().map(|k| k.stats()).unwrap_or_default()
    }

    /// The engine chain in force and why it was chosen.
    pub fn chain(&self) -> &crate::chain::Chain {
        &self.chain
    }

    /// Counters of every crypto engine.
    pub fn counters(&self) -> Vec<CountersSnapshot> {
        self.dispatcher.counters()
    }

    /// The event-loop CPU time offloaded private-key operations would have cost inline.
    pub fn cpu_saved(&self) -> std::time::Duration {
        self.dispatcher.cpu_saved()
    }

    /// Whether each crypto engine's breaker is open, in [`KeyOffload::counters`]' order.
    pub fn breakers_open(&self) -> Vec<bool> {
        self.dispatcher.breakers_open()
    }
}

/// What a credential's ex_data holds: its key and the engines its jobs may use.
pub(crate) struct KeyHandle {
    key: Arc<PrivateKey>,
    engines: Arc<[EngineKind]>,
}

static KEY_INDEX: LazyLock<Index<SslCredential, KeyHandle>> =
    LazyLock::new(|| SslCredential::new_ex_index().expect("allocating a credential ex_data index"));
static CONN_INDEX: LazyLock<Index<Ssl, ConnOffload>> =
    LazyLock::new(|| Ssl::new_ex_index().expect("allocating an SSL ex_data index"));

/// Gives `credential` the offloading private-key method for `key`, restricted to the
/// signature schemes the crypto crate signs for that key.
#[expect(
    unsafe_code,
    reason = "boring 5 exposes no private-key method for X.509 credentials"
)]
pub(crate) fn attach(
    credential: &SslCredential,
    key: Arc<PrivateKey>,
    engines: Vec<EngineKind>,
) -> Result<(), TlsError> {
    let prefs: Vec<u16> = key.schemes().iter().map(|s| *s as u16).collect();
    let data = Box::into_raw(Box::new(KeyHandle {
        key,
        engines: engines.into(),
    }));
    // SAFETY: the credential is live; the index was allocated by boring for `KeyHandle` with
    // a free callback that drops a `Box<KeyHandle>`, which is what we store, and
    // the credential takes ownership of it (freed with the credential).
    let ok = unsafe {
        ffi::SSL_CREDENTIAL_set_ex_data(credential.as_ptr(), KEY_INDEX.as_raw(), data.cast())
    };
    if ok != 1 {
        // SAFETY: not stored, so still ours to free.
        drop(unsafe { Box::from_raw(data) });
        return Err(TlsError::Boring {
            context: "storing a key handle",
            source: ErrorStack::get(),
        });
    }
    // SAFETY: METHOD is a static that outlives every credential; prefs is a live slice.
    let ok = unsafe {
        ffi::SSL_CREDENTIAL_set_private_key_method(credential.as_ptr(), &METHOD)
            & ffi::SSL_CREDENTIAL_set1_signing_algorithm_prefs(
                credential.as_ptr(),
                prefs.as_ptr(),
                prefs.len(),
            )
    };
    if ok != 1 {
        return Err(TlsError::Boring {
            context: "setting the private-key method",
            source: ErrorStack::get(),
        });
    }
    Ok(())
}

thread_local! {
    /// The QUIC connection whose call into quiche is running on this thread.
    pub(crate) static CURRENT_QUIC: RefCell<Option<(Arc<KeyOffload>, Arc<WakerSlot>)>> = const { RefCell::new(None) };
}

/// Called from the select-certificate callback of a QUIC context: the connection that
/// entered on this thread gets its offload state. Without one (a call into quiche not
/// entered), the private-key method fails the handshake rather than sign on the event loop
/// unseen.
pub(crate) fn attach_current(ssl: &mut SslRef) {
    if let Some((offload, slot)) = CURRENT_QUIC.with(|c| c.borrow().clone()) {
        ssl.set_ex_data(ConnOffload::index(), ConnOffload::new(offload, slot, false));
    } else {
        tracing::error!("a QUIC handshake began outside QuicHandshake::enter");
    }
}

/// Records the waker of the task that polls the connection, until the handshake is done.
#[derive(Debug, Default)]
pub(crate) struct WakerSlot {
    waker: Mutex<Option<Waker>>,
    handshake_done: AtomicBool,
}

impl WakerSlot {
    pub(crate) fn record(&self, cx: &Context<'_>) {
        if self.handshake_done.load(Ordering::Relaxed) {
            return;
        }
        let mut w = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
    }

    fn wake(&self) {
        if let Some(w) = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }

    pub(crate) fn handshake_done(&self) {
        self.handshake_done.store(true, Ordering::Relaxed);
        self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// A client stream whose polls tell the handshake's private-key operations whom to wake, and
/// which reads ahead of BoringSSL.
///
/// BoringSSL reads a TLS record in two asks, its 5-byte header and then its body, and each
/// ask was a `recv(2)`: with a request per record, one system call per request more than
/// needed. Small asks are served from one read of up to [`READ_AHEAD`] bytes into a stack
/// buffer; what the ask did not take is kept until the next one and freed as soon as it is
/// consumed, so an idle connection holds nothing. Asks of [`READ_AHEAD`] or more read
/// straight into BoringSSL's buffer.
#[derive(Debug)]
pub struct OffloadIo<S> {
    inner: S,
    slot: Arc<WakerSlot>,
    /// Bytes read from the socket and not yet asked for.
    ahead: Vec<u8>,
    /// How far `ahead` has been consumed.
    ahead_pos: usize,
}

/// The most a read ahead of BoringSSL takes from the socket (larger asks go straight through).
pub(crate) const READ_AHEAD: usize = 4096;

impl<S> OffloadIo<S> {
    pub(crate) fn new(inner: S, slot: Arc<WakerSlot>) -> Self {
        OffloadIo {
            inner,
            slot,
            ahead: Vec::new(),
            ahead_pos: 0,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, to change how it is driven (not to read or write it: bytes read
    /// ahead are here).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Whether bytes read from the socket wait here for BoringSSL's next ask.
    pub fn has_read_ahead(&self) -> bool {
        self.ahead_pos < self.ahead.len()
    }

    /// Gives what was read ahead to `buf`; frees it once consumed.
    fn take_ahead(&mut self, buf: &mut ReadBuf<'_>) {
        let n = (self.ahead.len() - self.ahead_pos).min(buf.remaining());
        buf.put_slice(&self.ahead[self.ahead_pos..self.ahead_pos + n]);
        self.ahead_pos += n;
        if self.ahead_pos == self.ahead.len() {
            self.ahead = Vec::new();
            self.ahead_pos = 0;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for OffloadIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.slot.record(cx);
        let this = &mut *self;
        if this.ahead_pos < this.ahead.len() {
            this.take_ahead(buf);
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() >= READ_AHEAD {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); READ_AHEAD];
        let mut read = ReadBuf::uninit(&mut stack);
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
        let got = read.filled();
        let n = got.len().min(buf.remaining());
        buf.put_slice(&got[..n]);
        if n < got.len() {
            this.ahead = got[n..].to_vec();
            this.ahead_pos = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for OffloadIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.slot.record(cx);
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Outcome = Arc<Mutex<Option<Result<Vec<u8>, EngineError>>>>;

/// A handshake's private-key operation, for its trace span: the engine that ran it, how long
/// the operation waited before reaching it (scheduling, and engines that fell back), how long
/// it was at that engine (its queue and its work), and what it fell back from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOperation {
    /// `inline`, `pool`, `mb`, `keyless`.
    pub engine: String,
    /// From the handshake's request to the engine that ran it.
    pub queued: std::time::Duration,
    /// At that engine.
    pub at_engine: std::time::Duration,
    /// `engine:reason` of each engine passed over for a fault (`mb:busy`, `keyless:deadline`).
    pub fallbacks: Vec<String>,
    /// The engines that never take this key's operations, passed by design (`mb` for an
    /// ECDSA key): routing, not a fault.
    pub routed_past: Vec<String>,
}

impl KeyOperation {
    fn from_trace(t: JobTrace, total: std::time::Duration) -> Self {
        KeyOperation {
            queued: total.saturating_sub(t.at_engine),
            at_engine: t.at_engine,
            fallbacks: t
                .fallbacks
                .iter()
                .map(|(engine, why)| format!("{engine}:{}", why.as_str()))
                .collect(),
            routed_past: t.routed_past,
            engine: t.engine,
        }
    }
}

/// One connection's private-key operation in progress.
pub(crate) struct ConnOffload {
    offload: Arc<KeyOffload>,
    slot: Arc<WakerSlot>,
    /// The handshake runs alone on the event loop (the gateway placed it there while no
    /// other was in progress): with the chain chosen at start, its key signs right here,
    /// as with `engines = []`, rather than crossing to an engine's thread and back for one
    /// job. A configured engine list is obeyed as written.
    alone: bool,
    op: Mutex<Option<(Option<tokio::task::JoinHandle<()>>, Outcome)>>,
    /// The last operation's trace, taken by `TlsInfo::from_ssl` (`info.rs`).
    traced: Arc<Mutex<Option<KeyOperation>>>,
}

impl ConnOffload {
    pub(crate) fn new(offload: Arc<KeyOffload>, slot: Arc<WakerSlot>, alone: bool) -> Self {
        ConnOffload {
            offload,
            slot,
            alone,
            op: Mutex::new(None),
            traced: Arc::default(),
        }
    }

    /// The handshake's private-key operation, once (none for a resumed session).
    pub(crate) fn take_trace(&self) -> Option<KeyOperation> {
        self.traced.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(crate) fn index() -> Index<Ssl, ConnOffload> {
        *CONN_INDEX
    }
}

impl Drop for ConnOffload {
    fn drop(&mut self) {
        if let Some((Some(task), _)) = self.op.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

static METHOD: ffi::SSL_PRIVATE_KEY_METHOD = ffi::SSL_PRIVATE_KEY_METHOD {
    sign: Some(sign_cb),
    decrypt: Some(decrypt_cb),
    complete: Some(complete_cb),
};

const SUCCESS: ffi::ssl_private_key_result_t =
    ffi::ssl_private_key_result_t::ssl_private_key_success;
const RETRY: ffi::ssl_private_key_result_t = ffi::ssl_private_key_result_t::ssl_private_key_retry;
const FAILURE: ffi::ssl_private_key_result_t =
    ffi::ssl_private_key_result_t::ssl_private_key_failure;

/// A private-key callback's work with no panic crossing into BoringSSL: a panic cannot
/// unwind out of an `extern "C"` function and would abort the process, so one (a bug) fails
/// that handshake, logged, and every other connection goes on.
fn guarded(
    callback: &str,
    work: impl FnOnce() -> ffi::ssl_private_key_result_t,
) -> ffi::ssl_private_key_result_t {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
        tracing::error!(
            callback,
            "the private-key callback panicked (a bug): this handshake fails"
        );
        FAILURE
    })
}

/// Copies a finished result (a signature or a decrypted premaster block) out to BoringSSL.
#[expect(unsafe_code, reason = "writing BoringSSL's output buffer")]
fn deliver(
    signature: &[u8],
    out: *mut u8,
    out_len: *mut usize,
    max_out: usize,
) -> ffi::ssl_private_key_result_t {
    if signature.len() > max_out {
        tracing::warn!(
            len = signature.len(),
            max_out,
            "signature larger than BoringSSL's buffer"
        );
        return FAILURE;
    }
    // SAFETY: BoringSSL guarantees `out` has room for `max_out` bytes and `out_len` is valid;
    // we write `signature.len() <= max_out` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(signature.as_ptr(), out, signature.len());
        *out_len = signature.len();
    }
    SUCCESS
}

#[expect(unsafe_code, reason = "BoringSSL private-key method callback")]
unsafe extern "C" fn sign_cb(
    ssl: *mut ffi::SSL,
    out: *mut u8,
    out_len: *mut usize,
    max_out: usize,
    algorithm: u16,
    input: *const u8,
    input_len: usize,
) -> ffi::ssl_private_key_result_t {
    guarded("sign", || {
        // SAFETY: `input` points to `input_len` readable bytes for the duration of the call.
        let message = unsafe { std::slice::from_raw_parts(input, input_len) };
        // SAFETY: BoringSSL calls this with a live SSL during its handshake, and `out`,
        // `out_len`, `max_out` as `start` requires.
        unsafe {
            start(ssl, out, out_len, max_out, |key, verify| {
                let job = SignatureScheme::from_u16(algorithm)
                    .and_then(|s| KeyJob::sign(key, s, message, verify));
                if job.is_none() {
                    tracing::error!(
                        algorithm,
                        "BoringSSL asked for a signature scheme the key cannot make"
                    );
                }
                job
            })
        }
    })
}

/// TLS 1.2 RSA key exchange (`rsa_key_exchange = true`): the raw private-key operation on
/// the client's encrypted premaster secret; BoringSSL checks the padding in constant time.
#[expect(unsafe_code, reason = "BoringSSL private-key method callback")]
unsafe extern "C" fn decrypt_cb(
    ssl: *mut ffi::SSL,
    out: *mut u8,
    out_len: *mut usize,
    max_out: usize,
    input: *const u8,
    input_len: usize,
) -> ffi::ssl_private_key_result_t {
    guarded("decrypt", || {
        // SAFETY: `input` points to `input_len` readable bytes for the duration of the call.
        let ciphertext = unsafe { std::slice::from_raw_parts(input, input_len) };
        // SAFETY: as in `sign_cb`.
        unsafe {
            start(ssl, out, out_len, max_out, |key, _| {
                let job = KeyJob::decrypt(key, ciphertext);
                if job.is_none() {
                    // A client's ciphertext of the wrong length: its handshake fails, as
                    // BoringSSL's own decryption would make it.
                    tracing::debug!(len = input_len, "RSA key exchange ciphertext refused");
                }
                job
            })
        }
    })
}

/// Starts a private-key operation for the handshake on `ssl`: runs it on the spot when only
/// the software engine may, otherwise spawns it on the dispatcher and answers "retry".
///
/// # Safety
///
/// `ssl` is a live SSL in its handshake, which nothing else touches meanwhile; `out` has
/// room for `max_out` bytes and `out_len` is writable (BoringSSL's callback contract).
#[expect(unsafe_code, reason = "BoringSSL private-key method callback")]
unsafe fn start(
    ssl: *mut ffi::SSL,
    out: *mut u8,
    out_len: *mut usize,
    max_out: usize,
    prepare: impl FnOnce(Arc<PrivateKey>, VerifyPolicy) -> Option<KeyJob>,
) -> ffi::ssl_private_key_result_t {
    // SAFETY: the caller's contract.
    let ssl_ref = unsafe { SslRef::from_ptr_mut(ssl) };
    let Some(conn) = ssl_ref.ex_data(*CONN_INDEX) else {
        tracing::error!("private-key operation on a connection without offload state");
        return FAILURE;
    };
    // SAFETY: the selected credential is live for the handshake; we only read its ex_data.
    let key = unsafe {
        let cred = ffi::SSL_get0_selected_credential(ssl);
        if cred.is_null() {
            return FAILURE;
        }
        SslCredentialRef::from_ptr(cred.cast_mut())
            .ex_data(*KEY_INDEX)
            .map(|h| (h.key.clone(), h.engines.clone()))
    };
    let Some((key, engines)) = key else {
        return FAILURE;
    };
    let probed = conn.offload.chain().origin == crate::chain::Origin::Probed;
    let in_place = conn.alone && probed;
    let only_inline = engines.is_empty() || conn.offload.inline_only || in_place;
    // In place: no engine of the chain may take it (each routes it past at once, uncounted
    // as a fallback), so the software engine signs it now.
    let allowed = if in_place { Arc::from([]) } else { engines };
    let Some(job) = prepare(key, conn.offload.verify).map(|j| j.only(Some(allowed))) else {
        return FAILURE;
    };
    let outcome: Outcome = Arc::new(Mutex::new(None));
    let runtime = tokio::runtime::Handle::try_current();
    let asked = std::time::Instant::now();
    if only_inline || runtime.is_err() {
        // The baseline: compute right here on the event loop. The dispatcher still counts
        // it; with only the software engine allowed it completes without waiting.
        let mut trace = JobTrace::default();
        let done = conn
            .offload
            .dispatcher
            .run_traced(job.clone(), &mut trace)
            .now_or_never()
            .unwrap_or_else(|| run(&job));
        *conn.traced.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(KeyOperation::from_trace(trace, asked.elapsed()));
        return match done {
            Ok(result) => deliver(&result, out, out_len, max_out),
            Err(_) => FAILURE,
        };
    }
    let (dispatcher, slot, result, traced) = (
        conn.offload.dispatcher.clone(),
        conn.slot.clone(),
        outcome.clone(),
        conn.traced.clone(),
    );
    let task = runtime.ok().map(|rt| {
        rt.spawn(async move {
            let mut trace = JobTrace::default();
            let r = dispatcher.run_traced(job, &mut trace).await;
            *traced.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(KeyOperation::from_trace(trace, asked.elapsed()));
            *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            slot.wake();
        })
    });
    *conn.op.lock().unwrap_or_else(|e| e.into_inner()) = Some((task, outcome));
    RETRY
}

#[expect(unsafe_code, reason = "BoringSSL private-key method callback")]
unsafe extern "C" fn complete_cb(
    ssl: *mut ffi::SSL,
    out: *mut u8,
    out_len: *mut usize,
    max_out: usize,
) -> ffi::ssl_private_key_result_t {
    guarded("complete", || {
        // SAFETY: as in `sign_cb`.
        let ssl_ref = unsafe { SslRef::from_ptr_mut(ssl) };
        let Some(conn) = ssl_ref.ex_data(*CONN_INDEX) else {
            return FAILURE;
        };
        let mut op = conn.op.lock().unwrap_or_else(|e| e.into_inner());
        let Some((_, outcome)) = op.as_ref() else {
            return FAILURE;
        };
        let ready = outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
        match ready {
            None => RETRY,
            Some(result) => {
                *op = None;
                match result {
                    Ok(signature) => deliver(&signature, out, out_len, max_out),
                    Err(e) => {
                        tracing::warn!(error = %e, "private-key operation failed on every engine");
                        FAILURE
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod guarded_tests {
    use super::*;

    #[test]
    fn a_panicking_callback_fails_its_handshake_and_the_thread_goes_on() {
        assert!(guarded("test", || panic!("planted")) == FAILURE);
        assert!(guarded("test", || RETRY) == RETRY);
    }
}

#[cfg(test)]
mod read_ahead_tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Hands out its chunks one per read, counting the reads.
    struct Chunks {
        chunks: std::collections::VecDeque<Vec<u8>>,
        reads: usize,
    }

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.reads += 1;
            if let Some(mut c) = self.chunks.pop_front() {
                let n = c.len().min(buf.remaining());
                buf.put_slice(&c[..n]);
                if n < c.len() {
                    self.chunks.push_front(c.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    fn io(chunks: &[&[u8]]) -> OffloadIo<Chunks> {
        OffloadIo::new(
            Chunks {
                chunks: chunks.iter().map(|c| c.to_vec()).collect(),
                reads: 0,
            },
            Arc::new(WakerSlot::default()),
        )
    }

    #[tokio::test]
    async fn a_header_and_body_ask_take_one_read_and_nothing_stays_allocated() {
        let record: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
        let mut s = io(&[&record]);
        let mut header = [0u8; 5];
        s.read_exact(&mut header).await.unwrap();
        assert_eq!(header, record[..5]);
        assert_eq!(s.get_ref().reads, 1);
        assert_eq!(s.ahead.len() - s.ahead_pos, 295, "the rest is kept");
        let mut body = vec![0u8; 295];
        s.read_exact(&mut body).await.unwrap();
        assert_eq!(body, record[5..]);
        assert_eq!(s.get_ref().reads, 1, "the body came from the read ahead");
        assert_eq!(s.ahead.capacity(), 0, "consumed: freed");
        let mut eof = [0u8; 5];
        assert_eq!(
            s.read(&mut eof).await.unwrap(),
            0,
            "end of stream passes through"
        );
    }

    #[tokio::test]
    async fn big_asks_bypass_and_every_byte_arrives_in_order() {
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut s = io(&[&big[..3], &big[3..10_000], &big[10_000..]]);
        let mut got = Vec::new();
        let mut small = [0u8; 7];
        let n = s.read(&mut small).await.unwrap();
        got.extend_from_slice(&small[..n]);
        let mut large = vec![0u8; READ_AHEAD * 2];
        while got.len() < big.len() {
            let n = s.read(&mut large).await.unwrap();
            assert!(n > 0, "ended early at {}", got.len());
            got.extend_from_slice(&large[..n]);
        }
        assert_eq!(got, big);
    }
}
