//! OCSP (RFC 6960) as far as stapling needs it: where a certificate's responder is, the
//! request for its status, and what a response says about it. The DER types are RustCrypto's
//! `x509-ocsp` and `x509-cert` (BoringSSL has no OCSP API).

use const_oid::db::rfc5280::{ID_AD_OCSP, ID_PE_AUTHORITY_INFO_ACCESS};
use der::asn1::{Null, OctetString};
use der::{Decode, Encode};
use x509_cert::Certificate;
use x509_cert::ext::pkix::AuthorityInfoAccessSyntax;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::spki::AlgorithmIdentifierOwned;
use x509_ocsp::{
    BasicOcspResponse, CertId, CertStatus, OcspRequest, OcspResponse, OcspResponseStatus, Request,
    TbsRequest, Version,
};

/// SHA-1, the CertID hash every responder understands (RFC 5019 §2.1.1).
const SHA1: const_oid::ObjectIdentifier = const_oid::db::rfc5912::ID_SHA_1;

/// The OCSP responder a certificate names (its AIA extension's first `OCSP` http URL).
pub(crate) fn responder(leaf_der: &[u8]) -> Option<String> {
    let leaf = Certificate::from_der(leaf_der).ok()?;
    let ext = leaf
        .tbs_certificate
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.extn_id == ID_PE_AUTHORITY_INFO_ACCESS)?;
    let aia = AuthorityInfoAccessSyntax::from_der(ext.extn_value.as_bytes()).ok()?;
    aia.0.iter().find_map(|d| match &d.access_location {
        GeneralName::UniformResourceIdentifier(uri) if d.access_method == ID_AD_OCSP => {
            let uri = uri.as_str();
            uri.starts_with("http://").then(|| uri.to_owned())
        }
        _ => None,
    })
}

/// The CertID naming `leaf` (issued by `issuer`).
pub(crate) fn cert_id(leaf_der: &[u8], issuer_der: &[u8]) -> Result<CertId, String> {
    let leaf =
        Certificate::from_der(leaf_der).map_err(|e| format!("reading the certificate: {e}"))?;
    let issuer =
        Certificate::from_der(issuer_der).map_err(|e| format!("reading its issuer: {e}"))?;
    let name = issuer
        .tbs_certificate
        .subject
        .to_der()
        .map_err(|e| e.to_string())?;
    let key = issuer
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    let octets = |b: [u8; 20]| OctetString::new(b.to_vec()).map_err(|e| e.to_string());
    Ok(CertId {
        hash_algorithm: AlgorithmIdentifierOwned {
            oid: SHA1,
            parameters: Some(Null.into()),
        },
        issuer_name_hash: octets(boring::sha::sha1(&name))?,
        issuer_key_hash: octets(boring::sha::sha1(key))?,
        serial_number: leaf.tbs_certificate.serial_number,
    })
}

/// The DER of a request for `id`'s status (unsigned, without a nonce: RFC 5019's
/// lightweight profile, which responders cache).
pub(crate) fn request(id: &CertId) -> Result<Vec<u8>, String> {
    OcspRequest {
        tbs_request: TbsRequest {
            version: Version::V1,
            requestor_name: None,
            request_list: vec![Request {
                req_cert: id.clone(),
                single_request_extensions: None,
            }],
            request_extensions: None,
        },
        optional_signature: None,
    }
    .to_der()
    .map_err(|e| e.to_string())
}

/// What a response says about the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: Status,
    /// Unix seconds.
    pub(crate) this_update: i64,
    /// Unix seconds; `None` when the responder gives none (fetch again in an hour).
    pub(crate) next_update: Option<i64>,
}

/// A certificate's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Good,
    Revoked,
    Unknown,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Good => "good",
            Status::Revoked => "revoked",
            Status::Unknown => "unknown",
        }
    }
}

/// Reads a response (`der`) to a request for `id`. Its signature is the client's to check,
/// as with NGINX's default (`ssl_stapling_verify off`); that it answers for this certificate,
/// and is current, is checked here.
pub(crate) fn answer(der: &[u8], id: &CertId, now: i64) -> Result<Answer, String> {
    let response = OcspResponse::from_der(der).map_err(|e| format!("not an OCSP response: {e}"))?;
    if response.response_status != OcspResponseStatus::Successful {
        return Err(format!("the responder said {:?}", response.response_status));
    }
    let bytes = response
        .response_bytes
        .ok_or("the responder sent no response bytes")?;
    let basic = BasicOcspResponse::from_der(bytes.response.as_bytes())
        .map_err(|e| format!("not a basic OCSP response: {e}"))?;
    let single = basic
        .tbs_response_data
        .responses
        .iter()
        .find(|r| {
            r.cert_id.serial_number == id.serial_number
                && r.cert_id.issuer_key_hash == id.issuer_key_hash
        })
        .ok_or("the response is not about this certificate")?;
    let unix = |t: &x509_ocsp::OcspGeneralizedTime| t.0.to_unix_duration().as_secs() as i64;
    let this_update = unix(&single.this_update);
    let next_update = single.next_update.as_ref().map(unix);
    if next_update.is_some_and(|n| n <= now) {
        return Err("the response has expired (its nextUpdate is past)".into());
    }
    // A little clock skew is normal; a response from the future is not.
    if this_update > now + 300 {
        return Err("the response's thisUpdate is in the future".into());
    }
    let status = match single.cert_status {
        CertStatus::Good(_) => Status::Good,
        CertStatus::Revoked(_) => Status::Revoked,
        CertStatus::Unknown(_) => Status::Unknown,
    };
    Ok(Answer {
        status,
        this_update,
        next_update,
    })
}

#[cfg(test)]
mod tests {
    //! Against OpenSSL's own OCSP client and responder (`openssl ocsp`).
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A CA, a leaf with serial 0x1234 naming `http://127.0.0.1:1/ocsp` as its responder,
    /// and openssl's index saying `status` (V or R) for it.
    fn pki(status: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "3",
                "-subj",
                "/CN=CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ],
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=a.test",
            ],
        );
        std::fs::write(d.join("ext"), "authorityInfoAccess=OCSP;URI:http://127.0.0.1:1/ocsp,caIssuers;URI:http://127.0.0.1:1/ca\n").unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "0x1234",
                "-days",
                "3",
                "-extfile",
                "ext",
                "-out",
                "leaf.crt",
            ],
        );
        let revoked = if status == "R" { "251101000000Z" } else { "" };
        std::fs::write(
            d.join("index.txt"),
            format!("{status}\t301231000000Z\t{revoked}\t1234\tunknown\t/CN=a.test\n"),
        )
        .unwrap();
        dir
    }

    fn der(d: &Path, name: &str) -> Vec<u8> {
        boring::x509::X509::from_pem(&std::fs::read(d.join(name)).unwrap())
            .unwrap()
            .to_der()
            .unwrap()
    }

    /// `openssl ocsp` as the responder, answering `request`.
    fn respond(d: &Path, request: &[u8]) -> Vec<u8> {
        std::fs::write(d.join("req.der"), request).unwrap();
        openssl(
            d,
            &[
                "ocsp",
                "-index",
                "index.txt",
                "-rsigner",
                "ca.crt",
                "-rkey",
                "ca.key",
                "-CA",
                "ca.crt",
                "-nmin",
                "5",
                "-reqin",
                "req.der",
                "-respout",
                "resp.der",
            ],
        );
        std::fs::read(d.join("resp.der")).unwrap()
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn the_responder_url_is_read_from_the_aia_ocsp_entry_only() {
        let pki = pki("V");
        let d = pki.path();
        assert_eq!(
            responder(&der(d, "leaf.crt")).as_deref(),
            Some("http://127.0.0.1:1/ocsp")
        );
        assert_eq!(
            responder(&der(d, "ca.crt")),
            None,
            "no AIA: nothing to staple"
        );
    }

    #[test]
    fn our_cert_id_is_the_one_openssl_asks_about() {
        let pki = pki("V");
        let d = pki.path();
        openssl(
            d,
            &[
                "ocsp",
                "-issuer",
                "ca.crt",
                "-cert",
                "leaf.crt",
                "-no_nonce",
                "-reqout",
                "theirs.der",
            ],
        );
        let theirs = OcspRequest::from_der(&std::fs::read(d.join("theirs.der")).unwrap()).unwrap();
        let ours = cert_id(&der(d, "leaf.crt"), &der(d, "ca.crt")).unwrap();
        assert_eq!(theirs.tbs_request.request_list[0].req_cert, ours);
    }

    #[test]
    fn openssl_answers_our_request_and_we_read_good_revoked_and_foreign_answers() {
        for (index, want) in [("V", Status::Good), ("R", Status::Revoked)] {
            let pki = pki(index);
            let d = pki.path();
            let id = cert_id(&der(d, "leaf.crt"), &der(d, "ca.crt")).unwrap();
            let response = respond(d, &request(&id).unwrap());
            let a = answer(&response, &id, now()).unwrap();
            assert_eq!(a.status, want);
            let next = a.next_update.expect("-nmin 5 sets nextUpdate");
            assert!((250..=350).contains(&(next - a.this_update)), "{a:?}");
            // Past its nextUpdate it is refused, never stapled.
            assert!(
                answer(&response, &id, next + 1)
                    .unwrap_err()
                    .contains("expired")
            );
            // An answer about another certificate is refused.
            let mut other = id.clone();
            other.serial_number = x509_cert::serial_number::SerialNumber::new(&[0x42]).unwrap();
            assert!(
                answer(&response, &other, now())
                    .unwrap_err()
                    .contains("not about this certificate")
            );
        }
        let pki = pki("V");
        let id = cert_id(&der(pki.path(), "leaf.crt"), &der(pki.path(), "ca.crt")).unwrap();
        assert!(
            answer(b"not der", &id, now())
                .unwrap_err()
                .contains("not an OCSP response")
        );
    }
}
