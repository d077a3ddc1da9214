//! libmodsecurity 3.0.9's C API (`modsecurity/modsecurity.h`, `rules_set.h`,
//! `transaction.h`, `intervention.h`), declared by hand: the few functions the connector
//! calls, as ModSecurity-nginx calls them. The `modsecurity` crate's bindings need 3.0.13,
//! newer than Debian 12's.
#![expect(unsafe_code, reason = "the declarations of a C library's functions")]

use std::ffi::{c_char, c_int, c_uchar, c_void};

/// `ModSecurity` (opaque).
#[repr(C)]
pub(crate) struct ModSecurity {
    _private: [u8; 0],
}

/// `RulesSet` (opaque).
#[repr(C)]
pub(crate) struct RulesSet {
    _private: [u8; 0],
}

/// `Transaction` (opaque).
#[repr(C)]
pub(crate) struct Transaction {
    _private: [u8; 0],
}

/// `ModSecurityIntervention`: `url` and `log` are `malloc`ed copies the caller frees.
#[repr(C)]
pub(crate) struct Intervention {
    pub(crate) status: c_int,
    pub(crate) pause: c_int,
    pub(crate) url: *mut c_char,
    pub(crate) log: *mut c_char,
    pub(crate) disruptive: c_int,
}

/// `ModSecLogCb`: the transaction's `logCbData` and, with the C API's text property, a
/// `const char *` that lives for the call only.
pub(crate) type LogCallback = extern "C" fn(data: *mut c_void, message: *const c_void);

#[link(name = "modsecurity")]
unsafe extern "C" {
    pub(crate) fn msc_init() -> *mut ModSecurity;
    pub(crate) fn msc_who_am_i(msc: *mut ModSecurity) -> *const c_char;
    pub(crate) fn msc_set_connector_info(msc: *mut ModSecurity, connector: *const c_char);
    pub(crate) fn msc_set_log_cb(msc: *mut ModSecurity, cb: LogCallback);

    pub(crate) fn msc_create_rules_set() -> *mut RulesSet;
    pub(crate) fn msc_rules_add_file(
        rules: *mut RulesSet,
        file: *const c_char,
        error: *mut *const c_char,
    ) -> c_int;
    pub(crate) fn msc_rules_add(
        rules: *mut RulesSet,
        plain_rules: *const c_char,
        error: *mut *const c_char,
    ) -> c_int;
    pub(crate) fn msc_rules_cleanup(rules: *mut RulesSet) -> c_int;

    pub(crate) fn msc_new_transaction_with_id(
        msc: *mut ModSecurity,
        rules: *mut RulesSet,
        id: *mut c_char,
        log_cb_data: *mut c_void,
    ) -> *mut Transaction;
    pub(crate) fn msc_process_connection(
        t: *mut Transaction,
        client: *const c_char,
        client_port: c_int,
        server: *const c_char,
        server_port: c_int,
    ) -> c_int;
    pub(crate) fn msc_process_uri(
        t: *mut Transaction,
        uri: *const c_char,
        method: *const c_char,
        http_version: *const c_char,
    ) -> c_int;
    pub(crate) fn msc_add_n_request_header(
        t: *mut Transaction,
        key: *const c_uchar,
        key_len: usize,
        value: *const c_uchar,
        value_len: usize,
    ) -> c_int;
    pub(crate) fn msc_process_request_headers(t: *mut Transaction) -> c_int;
    pub(crate) fn msc_append_request_body(
        t: *mut Transaction,
        body: *const c_uchar,
        size: usize,
    ) -> c_int;
    pub(crate) fn msc_process_request_body(t: *mut Transaction) -> c_int;
    pub(crate) fn msc_add_n_response_header(
        t: *mut Transaction,
        key: *const c_uchar,
        key_len: usize,
        value: *const c_uchar,
        value_len: usize,
    ) -> c_int;
    pub(crate) fn msc_process_response_headers(
        t: *mut Transaction,
        code: c_int,
        protocol: *const c_char,
    ) -> c_int;
    pub(crate) fn msc_append_response_body(
        t: *mut Transaction,
        body: *const c_uchar,
        size: usize,
    ) -> c_int;
    pub(crate) fn msc_process_response_body(t: *mut Transaction) -> c_int;
    pub(crate) fn msc_intervention(t: *mut Transaction, it: *mut Intervention) -> c_int;
    pub(crate) fn msc_transaction_cleanup(t: *mut Transaction);
}
