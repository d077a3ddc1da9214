//! libmodsecurity's objects behind safe types, and what the engine allows between threads.
//!
//! Thread safety, as libmodsecurity 3.0.9 is written and as ModSecurity-nginx uses it:
//! - One `ModSecurity` per process ([`engine`]), made once; after its log callback is set it
//!   is only read (transactions reach its collections, which take their own locks).
//! - A [`Rules`] (a `RulesSet`) is built on one thread, and **rules are parsed under a
//!   process-wide lock**: the rule language's scanner keeps global state. Once built it is
//!   read-only and shared by every thread that inspects with it; it is freed when the last
//!   transaction using it is done (each holds an `Arc`).
//! - A [`Transaction`] is used by one thread at a time and never shared. It is made, fed and
//!   ended inside one offload job; with `inspect_response` it is kept after the request's job
//!   and moved (whole, `Send`) into the response's job, on whichever WAF thread takes it.
//!   libmodsecurity keeps no per-thread state for a transaction, so a move between threads
//!   is safe where concurrent use would not be.
#![expect(
    unsafe_code,
    reason = "FFI to libmodsecurity: its C API has no safe wrapper that fits Debian 12's 3.0.9"
)]

use crate::ffi;
use crate::rules::Piece;
use crate::verdict::Intervention;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::{Arc, Mutex, OnceLock};

/// The process's `ModSecurity` object.
struct Engine(*mut ffi::ModSecurity);

// SAFETY: the pointer is made once and never freed (it lives as long as the process); after
// `engine()` sets the connector's name and log callback, nothing writes to the object, and
// libmodsecurity's transactions read it from any thread (its collections lock themselves).
unsafe impl Send for Engine {}
// SAFETY: as for `Send`: shared read-only after initialisation.
unsafe impl Sync for Engine {}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        // SAFETY: msc_init has no preconditions; it returns a new object or aborts (C++ new).
        let msc = unsafe { ffi::msc_init() };
        assert!(!msc.is_null(), "libmodsecurity could not start (msc_init)");
        let connector = c"sluice-waf";
        // SAFETY: `msc` is valid; the connector name is copied into a std::string; the
        // callback is a plain function that lives as long as the program.
        unsafe {
            ffi::msc_set_connector_info(msc, connector.as_ptr());
            ffi::msc_set_log_cb(msc, log_callback);
        }
        Engine(msc)
    })
}

/// libmodsecurity's version line (`ModSecurity v3.0.9 (Linux)`).
pub fn version() -> String {
    // SAFETY: the engine is valid; msc_who_am_i returns a pointer into a std::string the
    // ModSecurity object owns for its life (the process's).
    let who = unsafe { ffi::msc_who_am_i(engine().0) };
    if who.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated, as checked above and as std::string::c_str is.
    unsafe { CStr::from_ptr(who) }
        .to_string_lossy()
        .into_owned()
}

/// The most messages one transaction keeps (a request matching every rule of a large set
/// would otherwise hold them all); later ones are not kept.
pub(crate) const MAX_MESSAGES: usize = 64;

/// Where a transaction's log lines go: the rules' messages, one per matched rule that logs.
#[derive(Debug, Default)]
pub(crate) struct Messages {
    pub(crate) lines: Vec<String>,
}

/// Called by libmodsecurity, on the thread running the transaction, for each message.
extern "C" fn log_callback(data: *mut c_void, message: *const c_void) {
    if data.is_null() || message.is_null() {
        return;
    }
    // SAFETY: `data` is the `Messages` box the transaction was made with (`Transaction::new`),
    // alive until the transaction is cleaned up, and used by one thread at a time (the one
    // calling into the transaction, `&mut`); with the C API's text log property `message` is
    // a NUL-terminated string valid for this call.
    let (messages, text) = unsafe {
        (
            &mut *data.cast::<Messages>(),
            CStr::from_ptr(message.cast::<c_char>()),
        )
    };
    // No panic may unwind into libmodsecurity (it would abort the process): one here loses
    // this message line, nothing more.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if messages.lines.len() < MAX_MESSAGES {
            messages.lines.push(text.to_string_lossy().into_owned());
        }
    }));
}

/// A compiled rule set (`RulesSet`), read-only once built.
#[derive(Debug)]
pub struct Rules(*mut ffi::RulesSet);

// SAFETY: built on one thread (`Rules::build`, under the parser's lock), then only read by
// transactions on any thread; freed once, by the last owner's drop.
unsafe impl Send for Rules {}
// SAFETY: as for `Send`: evaluation reads the rules and writes only to its transaction.
unsafe impl Sync for Rules {}

impl Rules {
    /// Compiles `pieces` in order; the error names the piece and libmodsecurity's message
    /// (which gives a file's path and line).
    pub fn build(pieces: &[Piece]) -> Result<Rules, String> {
        static PARSER: Mutex<()> = Mutex::new(());
        let _parsing = PARSER.lock().unwrap_or_else(|e| e.into_inner());
        engine();
        // SAFETY: no preconditions; returns a new, empty set (C++ new).
        let rules = Rules(unsafe { ffi::msc_create_rules_set() });
        for piece in pieces {
            let mut error: *const c_char = std::ptr::null();
            let (rc, origin) = match piece {
                Piece::File(path) => {
                    let bytes = path.as_os_str().as_encoded_bytes();
                    let c = CString::new(bytes)
                        .map_err(|_| format!("{}: the path has a NUL byte", path.display()))?;
                    let origin = path.display().to_string();
                    if bytes.iter().any(|b| matches!(b, b'*' | b'?' | b'[')) {
                        // A glob: ModSecurity's `Include` expands it (msc_rules_add_file
                        // takes one file; the directive takes no quotes, so no spaces).
                        let include = CString::new(format!("Include {origin}")).unwrap_or_default();
                        // SAFETY: as below.
                        (
                            unsafe { ffi::msc_rules_add(rules.0, include.as_ptr(), &mut error) },
                            origin,
                        )
                    } else {
                        // SAFETY: `rules` is valid and only this thread holds it; `c` and
                        // `error` outlive the call; on failure libmodsecurity sets `error` to
                        // a strdup()ed message, freed below.
                        (
                            unsafe { ffi::msc_rules_add_file(rules.0, c.as_ptr(), &mut error) },
                            origin,
                        )
                    }
                }
                Piece::Text { origin, text } => {
                    let c = CString::new(text.as_bytes())
                        .map_err(|_| format!("{origin}: the rules have a NUL byte"))?;
                    // SAFETY: as for the file.
                    (
                        unsafe { ffi::msc_rules_add(rules.0, c.as_ptr(), &mut error) },
                        origin.clone(),
                    )
                }
            };
            if rc < 0 {
                let message = if error.is_null() {
                    "libmodsecurity refused the rules without saying why".to_string()
                } else {
                    // SAFETY: a NUL-terminated string from strdup(); read once, then freed
                    // with the allocator that made it.
                    let m = unsafe { CStr::from_ptr(error) }
                        .to_string_lossy()
                        .trim()
                        .to_string();
                    // SAFETY: as above; not used after.
                    unsafe { libc::free(error.cast_mut().cast()) };
                    m
                };
                return Err(format!("{origin}: {message}"));
            }
        }
        Ok(rules)
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        // SAFETY: the set was made by msc_create_rules_set and is freed once; every
        // transaction that used it held an `Arc<Rules>`, so none is left.
        unsafe { ffi::msc_rules_cleanup(self.0) };
    }
}

/// One request's evaluation, used by one thread at a time from start to end.
pub(crate) struct Transaction {
    ptr: *mut ffi::Transaction,
    messages: Box<Messages>,
    /// The rules it evaluates: dropped after the transaction is cleaned up (field order).
    _rules: Arc<Rules>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").finish_non_exhaustive()
    }
}

// SAFETY: a transaction is only ever used through `&mut self` (one thread at a time); moving
// it to another thread between calls is safe because libmodsecurity keeps no thread-local
// state for it (its rules are shared read-only, `Rules: Sync`), and the log callback's box
// moves with it. `a_kept_transaction_inspects_the_response_on_another_thread` runs one so.
unsafe impl Send for Transaction {}
// SAFETY: nothing reads or writes the transaction through `&self` (every method that reaches
// libmodsecurity takes `&mut self`; `Debug` prints no field), so sharing a reference across
// threads gives no access to it. Needed because a request's record (which keeps the
// transaction until its response) lives in a response body that must be `Sync`.
unsafe impl Sync for Transaction {}

impl Transaction {
    /// A transaction named `id` (the request's ID: ModSecurity's `UNIQUE_ID`, which it
    /// would otherwise make from a fresh `std::random_device` per transaction).
    pub(crate) fn new(rules: &Arc<Rules>, id: &str) -> Self {
        let mut messages = Box::<Messages>::default();
        let data: *mut Messages = &mut *messages;
        let id = cstring(id);
        // SAFETY: the engine and `rules` are valid and outlive the transaction (it holds an
        // `Arc` of the rules, dropped after the cleanup); `id` is NUL-terminated and copied into a std::string (the API's `char *` is
        // not written to); `data` points into a box this struct owns, which does not move and
        // outlives the transaction (cleaned up in `drop` before the box is freed).
        let ptr = unsafe {
            ffi::msc_new_transaction_with_id(
                engine().0,
                rules.0,
                id.as_ptr().cast_mut(),
                data.cast(),
            )
        };
        assert!(
            !ptr.is_null(),
            "libmodsecurity could not make a transaction"
        );
        Transaction {
            ptr,
            messages,
            _rules: rules.clone(),
        }
    }

    pub(crate) fn connection(
        &mut self,
        client: &str,
        client_port: u16,
        server: &str,
        server_port: u16,
    ) {
        let (c, s) = (cstring(client), cstring(server));
        // SAFETY: valid transaction, NUL-terminated strings that outlive the call (copied).
        unsafe {
            ffi::msc_process_connection(
                self.ptr,
                c.as_ptr(),
                client_port.into(),
                s.as_ptr(),
                server_port.into(),
            );
        }
    }

    pub(crate) fn uri(&mut self, uri: &str, method: &str, version: &str) {
        let (u, m, v) = (cstring(uri), cstring(method), cstring(version));
        // SAFETY: as for `connection`.
        unsafe { ffi::msc_process_uri(self.ptr, u.as_ptr(), m.as_ptr(), v.as_ptr()) };
    }

    pub(crate) fn header(&mut self, name: &[u8], value: &[u8]) {
        // SAFETY: valid transaction; pointer and length pairs of live slices (copied).
        unsafe {
            ffi::msc_add_n_request_header(
                self.ptr,
                name.as_ptr(),
                name.len(),
                value.as_ptr(),
                value.len(),
            );
        }
    }

    /// Phase 1 (request headers).
    pub(crate) fn headers_done(&mut self) {
        // SAFETY: valid transaction.
        unsafe { ffi::msc_process_request_headers(self.ptr) };
    }

    pub(crate) fn body(&mut self, chunk: &[u8]) {
        // SAFETY: valid transaction; a live slice (copied).
        unsafe { ffi::msc_append_request_body(self.ptr, chunk.as_ptr(), chunk.len()) };
    }

    /// Phase 2 (request body).
    pub(crate) fn body_done(&mut self) {
        // SAFETY: valid transaction.
        unsafe { ffi::msc_process_request_body(self.ptr) };
    }

    pub(crate) fn response_header(&mut self, name: &[u8], value: &[u8]) {
        // SAFETY: as for `header`.
        unsafe {
            ffi::msc_add_n_response_header(
                self.ptr,
                name.as_ptr(),
                name.len(),
                value.as_ptr(),
                value.len(),
            );
        }
    }

    /// Phase 3 (response headers): `protocol` as ModSecurity-nginx passes it (`"HTTP 1.1"`).
    pub(crate) fn response_headers_done(&mut self, status: u16, protocol: &str) {
        let p = cstring(protocol);
        // SAFETY: valid transaction; a NUL-terminated string that outlives the call (copied).
        unsafe { ffi::msc_process_response_headers(self.ptr, status.into(), p.as_ptr()) };
    }

    pub(crate) fn response_body(&mut self, chunk: &[u8]) {
        // SAFETY: as for `body`.
        unsafe { ffi::msc_append_response_body(self.ptr, chunk.as_ptr(), chunk.len()) };
    }

    /// Phase 4 (response body).
    pub(crate) fn response_body_done(&mut self) {
        // SAFETY: valid transaction.
        unsafe { ffi::msc_process_response_body(self.ptr) };
    }

    /// The disruptive action decided so far, if any.
    pub(crate) fn intervention(&mut self) -> Option<Intervention> {
        let mut it = ffi::Intervention {
            status: 200,
            pause: 0,
            url: std::ptr::null_mut(),
            log: std::ptr::null_mut(),
            disruptive: 0,
        };
        // SAFETY: valid transaction; `it` is initialised as the connector initialises it.
        let decided = unsafe { ffi::msc_intervention(self.ptr, &mut it) };
        let url = take(it.url);
        let log = take(it.log);
        (decided != 0 && it.disruptive != 0).then(|| Intervention {
            status: u16::try_from(it.status).unwrap_or(403),
            url,
            log,
        })
    }

    /// The rules' messages so far.
    pub(crate) fn messages(&mut self) -> &mut Messages {
        &mut self.messages
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // SAFETY: made by msc_new_transaction, cleaned up once; the log callback's box is
        // freed after this (field drop order), so no callback can reach freed memory.
        unsafe { ffi::msc_transaction_cleanup(self.ptr) };
    }
}

/// A `malloc`ed string from the engine, copied and freed.
fn take(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated (strdup), owned by us from msc_intervention.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    // SAFETY: freed once with the allocator that made it; not used after.
    unsafe { libc::free(p.cast()) };
    Some(s)
}

/// `s` as a C string; a NUL byte (which the HTTP parsers refuse before here) is dropped.
fn cstring(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new(s.replace('\0', "")).unwrap_or_default())
}
