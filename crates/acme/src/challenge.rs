//! Answers to the CA's challenges, published while an order needs them: an HTTP-01 token
//! that the gateway's HTTP listeners serve, or a TLS-ALPN-01 certificate that its TLS
//! listeners serve to `acme-tls/1`. Withdrawn when the order ends, however it ends.

use boring::error::ErrorStack;
use boring::hash::MessageDigest;
use boring::x509::X509Extension;
use sluice_config::selfsigned::{KeyKind, builder, new_key};
use sluice_tls::live;

/// The OID of the `acmeIdentifier` extension (RFC 8737 §3).
const ACME_IDENTIFIER_OID: &str = "1.3.6.1.5.5.7.1.31";

/// A challenge answer: what this gateway (and, in a fleet, every gateway) gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// HTTP-01: serve `key_authorization` at `/.well-known/acme-challenge/<token>`.
    Http {
        /// The challenge's token.
        token: String,
        /// What to answer.
        key_authorization: String,
    },
    /// TLS-ALPN-01: serve `host` a challenge certificate carrying `digest`.
    TlsAlpn {
        /// The name validated.
        host: String,
        /// SHA-256 of the key authorization.
        digest: Vec<u8>,
    },
}

/// One published answer; withdrawn when dropped.
pub(crate) struct Published(Answer);

impl Drop for Published {
    fn drop(&mut self) {
        withdraw(&self.0);
    }
}

/// Publishes `answer` on this gateway until the guard is dropped.
pub(crate) fn publish(answer: &Answer) -> Result<Published, String> {
    self::answer(answer)?;
    Ok(Published(answer.clone()))
}

/// Gives `answer` on this gateway: an HTTP-01 key authorization, or a TLS-ALPN-01 challenge
/// certificate for the host carrying the digest. Also how a fleet's gateways give the
/// answers of an order another gateway placed.
pub fn answer(answer: &Answer) -> Result<(), String> {
    match answer {
        Answer::Http {
            token,
            key_authorization,
        } => live().publish_http(token, key_authorization),
        Answer::TlsAlpn { host, digest } => {
            let (cert, key) = challenge_certificate(host, digest)
                .map_err(|e| format!("making a tls-alpn-01 certificate: {e}"))?;
            let credential =
                sluice_tls::inline_credential(&[cert], &key).map_err(|e| e.to_string())?;
            live().publish_alpn(host, credential);
        }
    }
    Ok(())
}

/// Stops giving `answer`.
pub fn withdraw(answer: &Answer) {
    match answer {
        Answer::Http { token, .. } => live().withdraw_http(token),
        Answer::TlsAlpn { host, .. } => live().withdraw_alpn(host),
    }
}

/// The certificate a TLS-ALPN-01 validation of `host` must see (RFC 8737 §3).
pub(crate) fn challenge_certificate(
    host: &str,
    digest: &[u8],
) -> Result<
    (
        boring::x509::X509,
        boring::pkey::PKey<boring::pkey::Private>,
    ),
    ErrorStack,
> {
    let key = new_key(KeyKind::EcdsaP256)?;
    let mut b = builder(&key, &[host], 7, "Sluice ACME challenge")?;
    // acmeIdentifier ::= OCTET STRING (SIZE (32)): DER tag 04, length 20 (hex), the digest.
    let hex: String = digest.iter().map(|b| format!("{b:02X}")).collect();
    let ext = X509Extension::new(
        None,
        None,
        ACME_IDENTIFIER_OID,
        &format!("critical,DER:04:20:{}", colon_separated(&hex)),
    )?;
    b.append_extension(&ext)?;
    b.sign(&key, MessageDigest::sha256())?;
    Ok((b.build(), key))
}

fn colon_separated(hex: &str) -> String {
    hex.as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap_or("00"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_certificate_carries_the_digest_in_a_critical_acme_identifier() {
        let digest: Vec<u8> = (0u8..32).collect();
        let (cert, key) = challenge_certificate("a.example", &digest).unwrap();
        assert!(cert.public_key().unwrap().public_eq(&key));
        let der = cert.to_der().unwrap();
        // The extension as RFC 8737 spells it in DER: OID 1.3.6.1.5.5.7.1.31, critical
        // (BOOLEAN TRUE), then an OCTET STRING holding the OCTET STRING of the digest.
        let mut want = vec![
            0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f, 0x01, 0x01, 0xff, 0x04,
            0x22, 0x04, 0x20,
        ];
        want.extend_from_slice(&digest);
        assert!(
            der.windows(want.len()).any(|w| w == want.as_slice()),
            "acmeIdentifier extension not found"
        );
        let names: Vec<String> = cert
            .subject_alt_names()
            .unwrap()
            .iter()
            .filter_map(|n| n.dnsname().map(str::to_owned))
            .collect();
        assert_eq!(names, ["a.example"]);
    }

    #[test]
    fn a_published_answer_is_withdrawn_when_dropped() {
        let p = publish(&Answer::Http {
            token: "tok-123".into(),
            key_authorization: "tok-123.thumb".into(),
        })
        .unwrap();
        assert_eq!(
            live()
                .http_answer("/.well-known/acme-challenge/tok-123")
                .as_deref(),
            Some("tok-123.thumb")
        );
        assert_eq!(
            live().http_answer("/.well-known/acme-challenge/other"),
            None
        );
        drop(p);
        assert_eq!(
            live().http_answer("/.well-known/acme-challenge/tok-123"),
            None
        );

        let p = publish(&Answer::TlsAlpn {
            host: "b.example".into(),
            digest: vec![7u8; 32],
        })
        .unwrap();
        assert!(live().alpn_challenge("B.example").is_some());
        drop(p);
        assert!(live().alpn_challenge("b.example").is_none());
    }
}
