//! Client certificates on a TLS listener (`[listener.tls] client_auth`), as NGINX's
//! `ssl_verify_client` does it: the handshake asks for a certificate of the listener's CAs
//! and always completes; what the chain's verification found (against the CAs and their
//! CRLs) is kept with the connection, and the request path answers 400 where a certificate
//! is required and missing, or presented and not verified. The verified certificate's
//! subject, subjectAltNames and hash go to routes (`[route.auth] cert`) and upstream
//! (`X-Forwarded-Client-Cert`).
//!
//! CRLs: with `client_crl`, every certificate of the chain (the client's, each intermediate
//! CA's and the root's) is checked against its issuer's CRL, as NGINX's `ssl_crl` does
//! (`CRL_CHECK | CRL_CHECK_ALL`, `openssl verify -crl_check_all`): a revoked intermediate
//! revokes every client under it. A certificate whose issuer has no CRL in the file fails
//! (`unable to get certificate CRL`), as in NGINX, unless `client_crl_missing = "allow"`:
//! BoringSSL has no flag for that, so the verify callback forgives that one error and no
//! other (see [`forgive_missing_crl`]).
//!
//! One check BoringSSL leaves out and OpenSSL (so NGINX) makes is added in the same
//! callback: a `client_ca` root's own path length constraint (see
//! [`anchor_path_length_exceeded`]).
//!
//! Resumed sessions: a session (ticket) carries the certificate and the verification result
//! it was made with, so a resumed connection has the same identity. Each listener's session
//! ID context is a hash of its client-auth settings, and BoringSSL resumes a session only
//! under the context it was made in: a ticket from a gateway (or a configuration) that
//! verified against other CAs, or did not ask, makes a full handshake here, even when the
//! fleet shares ticket keys.

use crate::TlsError;
use boring::ex_data::Index;
use boring::hash::MessageDigest;
use boring::ssl::{SslContextBuilder, SslRef, SslVerifyMode};
use boring::x509::store::{X509StoreBuilder, X509StoreBuilderRef};
use boring::x509::verify::X509VerifyFlags;
use boring::x509::{X509, X509Ref, X509StoreContext, X509StoreContextRef, X509VerifyError};
use foreign_types::ForeignTypeRef as _;
use sluice_config::{ClientAuth, ClientAuthMode};
use std::sync::{Arc, OnceLock};

/// A client certificate as the handshake left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// Whether its chain verified against the listener's CAs (and CRLs).
    pub verified: bool,
    /// Why not, when it did not (`certificate revoked`, `certificate has expired`, …).
    pub error: Option<String>,
    /// The subject, RFC 4514 (`CN=alice,O=Example`).
    pub subject: String,
    /// The subject's common name (its last CN, the most specific), where it has one: the
    /// identity a device's certificate names (an MQTT listener's `certificate_identity`).
    pub common_name: Option<String>,
    /// `DNS:…`, `URI:…`, `email:…` subjectAltNames, in the certificate's order.
    pub sans: Vec<String>,
    /// SHA-256 of the DER certificate, lower-case hex.
    pub sha256: String,
}

impl ClientCert {
    /// What `ssl`'s handshake left: `None` when the client sent no certificate.
    pub(crate) fn of(ssl: &SslRef) -> Option<Arc<Self>> {
        let cert = ssl.peer_certificate()?;
        let result = ssl.verify_result();
        Some(Arc::new(ClientCert {
            verified: result.is_ok(),
            error: result.err().map(|e| e.error_string().to_owned()),
            subject: subject(&cert),
            common_name: common_name(&cert),
            sans: sans(&cert),
            sha256: cert
                .digest(MessageDigest::sha256())
                .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
                .unwrap_or_default(),
        }))
    }

    /// Envoy's `X-Forwarded-Client-Cert` element for this certificate (`Hash`, `Subject`,
    /// `URI`, `DNS`; values with `,`, `;` or `=` quoted, quotes escaped).
    pub fn xfcc(&self) -> String {
        let quoted = |v: &str| {
            if v.contains([',', ';', '=', '"']) {
                format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
            } else {
                v.to_owned()
            }
        };
        let mut out = format!("Hash={};Subject={}", self.sha256, quoted(&self.subject));
        for san in &self.sans {
            if let Some(uri) = san.strip_prefix("URI:") {
                out.push_str(";URI=");
                out.push_str(&quoted(uri));
            } else if let Some(dns) = san.strip_prefix("DNS:") {
                out.push_str(";DNS=");
                out.push_str(&quoted(dns));
            }
        }
        out
    }
}

/// The subject as RFC 4514 writes it: the last RDN first, `SN=value` separated by commas,
/// with `,+"\<>;` (and a leading `#` or space, a trailing space) escaped.
fn subject(cert: &X509) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in cert.subject_name().entries() {
        let name = e
            .object()
            .nid()
            .short_name()
            .map(str::to_owned)
            .unwrap_or_else(|_| e.object().to_string());
        let value = e
            .data()
            .as_utf8()
            .map(|v| v.to_string())
            .unwrap_or_default();
        parts.push(format!("{name}={}", escape_rdn(&value)));
    }
    parts.reverse();
    parts.join(",")
}

/// The subject's last CN, unescaped.
fn common_name(cert: &X509) -> Option<String> {
    cert.subject_name()
        .entries_by_nid(boring::nid::Nid::COMMONNAME)
        .last()
        .and_then(|e| e.data().as_utf8().ok().map(|v| v.to_string()))
}

fn escape_rdn(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn sans(cert: &X509) -> Vec<String> {
    let Some(names) = cert.subject_alt_names() else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|n| {
            if let Some(d) = n.dnsname() {
                Some(format!("DNS:{d}"))
            } else if let Some(u) = n.uri() {
                Some(format!("URI:{u}"))
            } else {
                n.email().map(|e| format!("email:{e}"))
            }
        })
        .collect()
}

/// The verify mode of `mode`: asked for, never failing the handshake itself (the request
/// path answers, as NGINX does).
fn verify_mode(mode: ClientAuthMode) -> SslVerifyMode {
    match mode {
        ClientAuthMode::Off => SslVerifyMode::NONE,
        ClientAuthMode::Optional | ClientAuthMode::Required => SslVerifyMode::PEER,
    }
}

/// Sets up `b` to ask for client certificates as `auth` says.
pub(crate) fn configure(b: &mut SslContextBuilder, auth: &ClientAuth) -> Result<(), TlsError> {
    let cas = X509::stack_from_pem(&auth.ca_pem).map_err(TlsError::boring("reading client_ca"))?;
    let mut store = X509StoreBuilder::new().map_err(TlsError::boring("creating a CA store"))?;
    for ca in &cas {
        store
            .add_cert(ca)
            .map_err(TlsError::boring("adding a client_ca certificate"))?;
        b.add_client_ca(ca)
            .map_err(TlsError::boring("naming a client CA"))?;
    }
    if let Some(crl) = &auth.crl_pem {
        let n = add_crls(&mut store, crl)?;
        let blocks = String::from_utf8_lossy(crl)
            .matches("-----BEGIN X509 CRL-----")
            .count();
        if n == 0 || n != blocks {
            return Err(TlsError::ClientAuth(format!(
                "client_crl: {} of its {blocks} CRL blocks parse; give PEM CRLs (openssl crl -outform PEM)",
                n
            )));
        }
        // Every certificate of the chain against its issuer's CRL, the root's included, as
        // NGINX's ssl_crl sets them: CRL_CHECK alone checks the client's certificate only,
        // and a client under a revoked intermediate would verify.
        store.set_flags(X509VerifyFlags::CRL_CHECK | X509VerifyFlags::CRL_CHECK_ALL);
    }
    b.set_verify_cert_store(store.build())
        .map_err(TlsError::boring("setting the client CA store"))?;
    let forgive = auth.allow_missing_crl && auth.crl_pem.is_some();
    b.set_verify_callback(verify_mode(auth.mode), move |ok, ctx| {
        let ok = ok && !anchor_path_length_exceeded(ctx);
        if !ok && forgive {
            forgive_missing_crl(ctx);
        }
        // Never fail the handshake: the result stays with the connection (and its session)
        // and the request path answers, as NGINX does.
        true
    });
    b.set_session_id_context(&session_context(auth))
        .map_err(TlsError::boring("setting the session ID context"))?;
    Ok(())
}

/// For one connection whose SNI name's certificate says `mode` instead of the listener's.
/// The listener's verify callback ([`configure`]'s) stays: `SSL_set_verify` without a
/// callback changes the mode only.
pub(crate) fn override_mode(ssl: &mut SslRef, mode: ClientAuthMode) {
    ssl.set_verify(verify_mode(mode));
}

/// `client_crl_missing = "allow"`, called with each failure BoringSSL's verification reports
/// (the callback returns true, so it goes on, and the error it last set is the result the
/// connection keeps). `UNABLE_TO_GET_CRL` is forgiven: the result goes back to the last
/// other failure of this verification, or to OK when there was none. Any other failure is
/// remembered (in the store context, which lives for one verification) so that a missing
/// CRL after it cannot clear it: a chain that is expired, over its path length, outside
/// its name constraints or revoked still fails.
fn forgive_missing_crl(ctx: &mut X509StoreContextRef) {
    static FAILURE: OnceLock<Option<Index<X509StoreContext, X509VerifyError>>> = OnceLock::new();
    // Without a slot to remember other failures in, forgive nothing (fail closed).
    let Some(slot) = *FAILURE.get_or_init(|| X509StoreContext::new_ex_index().ok()) else {
        return;
    };
    match ctx.verify_result() {
        Err(e) if e == X509VerifyError::UNABLE_TO_GET_CRL => {
            let earlier = ctx.ex_data(slot).copied();
            ctx.set_error(earlier.map_or(Ok(()), Err));
        }
        Err(e) => ctx.set_ex_data(slot, e),
        Ok(()) => {}
    }
}

/// Whether the chain's trust anchor (a `client_ca` certificate) has a path length
/// constraint that the chain under it exceeds (`pathlen:0` with an intermediate below), and
/// if so sets the verification's result to `path length constraint exceeded`.
///
/// BoringSSL checks the constraint of the certificates the client sent only, not of the
/// trust anchor (RFC 5280 leaves an anchor's constraints to the implementation); OpenSSL
/// checks the anchor's too, so NGINX refuses such a chain, and so does Sluice: a root
/// made `pathlen:0` to issue clients only must not vouch for intermediates. The count is
/// OpenSSL's: the intermediates that are not self-issued. Checked once, at the callback's
/// success report for the anchor (BoringSSL's last pass goes from the anchor down).
fn anchor_path_length_exceeded(ctx: &mut X509StoreContextRef) -> bool {
    let Some(chain) = ctx.chain() else {
        return false;
    };
    let n = chain.len();
    if n < 3 || ctx.error_depth() as usize != n - 1 {
        return false;
    }
    let limit = path_length(&chain[n - 1]);
    let intermediates = chain
        .iter()
        .take(n - 1)
        .skip(1)
        .filter(|c| !self_issued(c))
        .count();
    let exceeded = limit.is_some_and(|l| intermediates > l);
    if exceeded {
        ctx.set_error(Err(X509VerifyError::PATH_LENGTH_EXCEEDED));
    }
    exceeded
}

/// `cert`'s basicConstraints pathLenConstraint, where it has one.
#[expect(unsafe_code, reason = "boring has no X509_get_pathlen")]
fn path_length(cert: &X509Ref) -> Option<usize> {
    // SAFETY: `cert` is a live X509 for the call; X509_get_pathlen only reads it (caching
    // its parsed extensions, as every BoringSSL getter does) and keeps no pointer.
    let n = unsafe { boring_sys::X509_get_pathlen(cert.as_ptr()) };
    usize::try_from(n).ok()
}

/// Whether `cert`'s subject is its issuer's name (RFC 5280's self-issued, which a path
/// length does not count). Unreadable names count as not self-issued (counted: strict).
fn self_issued(cert: &X509Ref) -> bool {
    match (cert.subject_name().to_der(), cert.issuer_name().to_der()) {
        (Ok(subject), Ok(issuer)) => subject == issuer,
        _ => false,
    }
}

/// The session ID context: the client-auth settings' hash (32 bytes, BoringSSL's most).
fn session_context(auth: &ClientAuth) -> [u8; 32] {
    let mut h = boring::sha::Sha256::new();
    // v2: CRLs check the whole chain; a session verified by v1 (the client's certificate
    // only) must not resume with its verdict.
    h.update(b"sluice client auth v2\0");
    h.update(format!("{:?}", auth.mode).as_bytes());
    h.update(&auth.ca_pem);
    h.update(auth.crl_pem.as_deref().unwrap_or(b"\0no crl"));
    let missing: &[u8] = if auth.allow_missing_crl {
        b"\0missing crl allowed"
    } else {
        b"\0missing crl refused"
    };
    h.update(missing);
    h.finish()
}

/// Adds each PEM CRL in `pem` to `store`; how many.
#[expect(
    unsafe_code,
    reason = "boring has no X509_CRL type or X509_STORE_add_crl"
)]
fn add_crls(store: &mut X509StoreBuilderRef, pem: &[u8]) -> Result<usize, TlsError> {
    let mut added = 0;
    // SAFETY: BIO_new_mem_buf reads `pem` (borrowed for this whole block, not written) and
    // returns a BIO we own, freed below on every path. PEM_read_bio_X509_CRL returns an owned
    // CRL or NULL at the end of the input; X509_STORE_add_crl takes its own reference
    // (up-ref), so we free ours after adding. `store` is a live X509_STORE for the call.
    unsafe {
        let bio = boring_sys::BIO_new_mem_buf(pem.as_ptr().cast(), pem.len() as _);
        if bio.is_null() {
            return Err(TlsError::ClientAuth("cannot read client_crl".to_owned()));
        }
        loop {
            let crl = boring_sys::PEM_read_bio_X509_CRL(
                bio,
                std::ptr::null_mut(),
                None,
                std::ptr::null_mut(),
            );
            if crl.is_null() {
                break;
            }
            let ok = boring_sys::X509_STORE_add_crl(store.as_ptr(), crl);
            boring_sys::X509_CRL_free(crl);
            if ok != 1 {
                boring_sys::BIO_free(bio);
                return Err(TlsError::ClientAuth(
                    "client_crl: a CRL could not be added".to_owned(),
                ));
            }
            added += 1;
        }
        boring_sys::BIO_free(bio);
        // The loop ended on PEM_R_NO_START_LINE (the input's end) or a broken block:
        // either way leave no error behind for the next BoringSSL call to trip on.
        boring_sys::ERR_clear_error();
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_rfc_4514_strings() {
        assert_eq!(escape_rdn("Example, Inc."), "Example\\, Inc.");
        assert_eq!(escape_rdn(" #x "), "\\ #x\\ ");
        let mut name = boring::x509::X509NameBuilder::new().unwrap();
        name.append_entry_by_text("O", "Example, Inc.").unwrap();
        name.append_entry_by_text("CN", "alice").unwrap();
        let name = name.build();
        let key = boring::pkey::PKey::from_ec_key(
            boring::ec::EcKey::generate(
                &boring::ec::EcGroup::from_curve_name(boring::nid::Nid::X9_62_PRIME256V1).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        let mut b = boring::x509::X509::builder().unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&boring::asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&boring::asn1::Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        b.sign(&key, MessageDigest::sha256()).unwrap();
        let cert = b.build();
        assert_eq!(subject(&cert), "CN=alice,O=Example\\, Inc.");
        assert_eq!(common_name(&cert).as_deref(), Some("alice"));
    }

    #[test]
    fn xfcc_quotes_what_needs_quoting() {
        let c = ClientCert {
            verified: true,
            error: None,
            subject: "CN=alice,O=Example".into(),
            common_name: Some("alice".into()),
            sans: vec![
                "URI:spiffe://test/alice".into(),
                "DNS:a.test".into(),
                "email:a@test".into(),
            ],
            sha256: "ab12".into(),
        };
        assert_eq!(
            c.xfcc(),
            "Hash=ab12;Subject=\"CN=alice,O=Example\";URI=spiffe://test/alice;DNS=a.test"
        );
    }
}
