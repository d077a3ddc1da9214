use super::keys::KeySet;
use super::token::{Parsed, Rules, check_claims};
use crate::token_error::TokenError;
use base64::Engine as _;
use boring::ec::{EcGroup, EcKey};
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use boring::rsa::{Padding, Rsa};
use boring::sign::{RsaPssSaltlen, Signer};

// RFC 7520 §3.3's RSA public key (`bilbo.baggins@hobbiton.example`) and the signatures of
// §4.1 (RS256), §4.2 (PS384) and §4.4 (HS256) over §4's payload.
const RFC7520_N: &str = "n4EPtAOCc9AlkeQHPzHStgAbgs7bTZLwUBZdR8_KuKPEHLd4rHVTeT-O-XV2jRojdNhxJWTDvNd7nqQ0VEiZQHz_AJmSCpMaJMRBSFKrKb2wqVwGU_NsYOYL-QtiWN2lbzcEe6XC0dApr5ydQLrHqkHHig3RBordaZ6Aj-oBHqFEHYpPe7Tpe-OfVfHd1E6cS6M1FZcD1NNLYD5lFHpPI9bTwJlsde3uhGqC0ZCuEHg8lhzwOHrtIQbS0FVbb9k3-tVTU4fg_3L_vniUFAKwuCLqKnS2BYwdq_mzSnbLY7h_qixoR7jig3__kRhuaxwUkRz5iaiQkqgc5gHdrNP5zw";
const RFC7520_PAYLOAD: &str = "SXTigJlzIGEgZGFuZ2Vyb3VzIGJ1c2luZXNzLCBGcm9kbywgZ29pbmcgb3V0IHlvdXIgZG9vci4gWW91IHN0ZXAgb250byB0aGUgcm9hZCwgYW5kIGlmIHlvdSBkb24ndCBrZWVwIHlvdXIgZmVldCwgdGhlcmXigJlzIG5vIGtub3dpbmcgd2hlcmUgeW91IG1pZ2h0IGJlIHN3ZXB0IG9mZiB0by4";
const RFC7520_RS256: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImJpbGJvLmJhZ2dpbnNAaG9iYml0b24uZXhhbXBsZSJ9.{P}.MRjdkly7_-oTPTS3AXP41iQIGKa80A0ZmTuV5MEaHoxnW2e5CZ5NlKtainoFmKZopdHM1O2U4mwzJdQx996ivp83xuglII7PNDi84wnB-BDkoBwA78185hX-Es4JIwmDLJK3lfWRa-XtL0RnltuYv746iYTh_qHRD68BNt1uSNCrUCTJDt5aAE6x8wW1Kt9eRo4QPocSadnHXFxnt8Is9UzpERV0ePPQdLuW3IS_de3xyIrDaLGdjluPxUAhb6L2aXic1U12podGU0KLUQSE_oI-ZnmKJ3F4uOZDnd6QZWJushZ41Axf_fcIe8u9ipH84ogoree7vjbU5y18kDquDg";
const RFC7520_PS384: &str = "eyJhbGciOiJQUzM4NCIsImtpZCI6ImJpbGJvLmJhZ2dpbnNAaG9iYml0b24uZXhhbXBsZSJ9.{P}.cu22eBqkYDKgIlTpzDXGvaFfz6WGoz7fUDcfT0kkOy42miAh2qyBzk1xEsnk2IpN6-tPid6VrklHkqsGqDqHCdP6O8TTB5dDDItllVo6_1OLPpcbUrhiUSMxbbXUvdvWXzg-UD8biiReQFlfz28zGWVsdiNAUf8ZnyPEgVFn442ZdNqiVJRmBqrYRXe8P_ijQ7p8Vdz0TTrxUeT3lm8d9shnr2lfJT8ImUjvAA2Xez2Mlp8cBE5awDzT0qI0n6uiP1aCN_2_jLAeQTlqRHtfa64QQSUmFAAjVKPbByi7xho0uTOcbH510a6GYmJUAfmWjwZ6oD4ifKo8DYM-X72Eaw";
const RFC7520_HS256: &str = "eyJhbGciOiJIUzI1NiIsImtpZCI6IjAxOGMwYWU1LTRkOWItNDcxYi1iZmQ2LWVlZjMxNGJjNzAzNyJ9.{P}.s0h6KThzkfBBBkLspW1h84VsJZFTsPPqMDA7g1Md7p0";

fn rfc7520(token: &str) -> String {
    token.replace("{P}", RFC7520_PAYLOAD)
}

fn rfc7520_keys() -> KeySet {
    KeySet::from_jwks(&format!(
        r#"{{"keys":[{{"kty":"RSA","kid":"bilbo.baggins@hobbiton.example","use":"sig","n":"{RFC7520_N}","e":"AQAB"}}]}}"#
    ))
    .unwrap()
}

#[test]
fn rfc7520s_signatures_verify_and_tampering_does_not() {
    let keys = rfc7520_keys();
    for vector in [RFC7520_RS256, RFC7520_PS384] {
        let token = rfc7520(vector);
        let parsed = Parsed::new(token.as_bytes()).unwrap();
        assert_eq!(parsed.check_signature(&keys), Ok(()), "{}", parsed.alg);
        // The payload is text, not claims: refused after the signature, as malformed.
        assert_eq!(parsed.verify(&keys).unwrap_err(), TokenError::Malformed);
        let mut tampered = token.clone();
        tampered.replace_range(tampered.len() - 4.., "AAAA");
        let parsed = Parsed::new(tampered.as_bytes()).unwrap();
        assert_eq!(parsed.check_signature(&keys), Err(TokenError::Signature));
    }
    // An HMAC token is never verified with a public key (algorithm confusion).
    let hs = rfc7520(RFC7520_HS256);
    let parsed = Parsed::new(hs.as_bytes()).unwrap();
    assert_eq!(parsed.check_signature(&keys), Err(TokenError::UnknownKey));
}

/// A compact JWS of `claims` signed by `key` with `alg`, the way python-jwt writes one.
pub(crate) fn sign(alg: &str, kid: Option<&str>, key: &PKey<Private>, claims: &str) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = match kid {
        Some(k) => format!(r#"{{"alg":"{alg}","typ":"JWT","kid":"{k}"}}"#),
        None => format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#),
    };
    let input = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let digest = match alg {
        "RS384" | "PS384" | "ES384" => MessageDigest::sha384(),
        "RS512" => MessageDigest::sha512(),
        _ => MessageDigest::sha256(),
    };
    let sig = if alg == "EdDSA" {
        let mut s = Signer::new_without_digest(key).unwrap();
        s.sign_oneshot_to_vec(input.as_bytes()).unwrap()
    } else if alg.starts_with("ES") {
        let d = boring::hash::hash(digest, input.as_bytes()).unwrap();
        let sig = boring::ecdsa::EcdsaSig::sign(&d, &key.ec_key().unwrap()).unwrap();
        let half = if alg == "ES256" { 32 } else { 48 };
        let mut raw = sig.r().to_vec_padded(half).unwrap();
        raw.extend(sig.s().to_vec_padded(half).unwrap());
        raw
    } else {
        let mut s = Signer::new(digest, key).unwrap();
        if alg.starts_with("PS") {
            s.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
            s.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH).unwrap();
            s.set_rsa_mgf1_md(digest).unwrap();
        }
        s.update(input.as_bytes()).unwrap();
        s.sign_to_vec().unwrap()
    };
    format!("{input}.{}", b64(&sig))
}

fn ec(nid: Nid) -> PKey<Private> {
    let group = EcGroup::from_curve_name(nid).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

#[test]
fn every_supported_algorithm_verifies_with_its_key_type_only() {
    let rsa = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let p256 = ec(Nid::X9_62_PRIME256V1);
    let p384 = ec(Nid::SECP384R1);
    // PKCS#8 of a random Ed25519 seed (RFC 8410 §7).
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let mut seed = [0u8; 32];
    boring::rand::rand_bytes(&mut seed).unwrap();
    der.extend_from_slice(&seed);
    let ed = PKey::private_key_from_der(&der).unwrap();
    let pem = [&rsa, &p256, &p384, &ed]
        .iter()
        .map(|k| String::from_utf8(k.public_key_to_pem().unwrap()).unwrap())
        .collect::<String>();
    let keys = KeySet::parse(pem.as_bytes()).unwrap();
    assert_eq!(keys.keys.len(), 4);
    let claims = r#"{"sub":"alice","exp":4102444800}"#;
    for (alg, key) in [
        ("RS256", &rsa),
        ("RS384", &rsa),
        ("RS512", &rsa),
        ("PS256", &rsa),
        ("PS384", &rsa),
        ("ES256", &p256),
        ("ES384", &p384),
        ("EdDSA", &ed),
    ] {
        let token = sign(alg, None, key, claims);
        let parsed = Parsed::new(token.as_bytes()).unwrap();
        let got = parsed
            .verify(&keys)
            .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        assert_eq!(got["sub"], "alice", "{alg}");
    }
    // An ES256 token signed by the P-384 key: the P-256 key is the only candidate, and
    // its signature fails; an ES384 signature cut to ES256's length is refused too.
    let es384 = sign("ES384", None, &p384, claims);
    let b64 = |b: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let (_, rest) = es384.split_once('.').unwrap();
    let relabelled = format!("{}.{rest}", b64(r#"{"alg":"ES256"}"#));
    let p = Parsed::new(relabelled.as_bytes()).unwrap();
    assert_eq!(p.verify(&keys).unwrap_err(), TokenError::Signature);
}

#[test]
fn alg_none_and_crit_are_refused() {
    let b64 = |b: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let none = format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(r#"{"sub":"x"}"#));
    let keys = rfc7520_keys();
    let p = Parsed::new(none.as_bytes()).unwrap();
    assert_eq!(p.verify(&keys).unwrap_err(), TokenError::UnknownKey);
    let crit = format!(
        "{}.{}.AAAA",
        b64(r#"{"alg":"RS256","crit":["exp"],"exp":1}"#),
        b64("{}")
    );
    assert_eq!(
        Parsed::new(crit.as_bytes()).err(),
        Some(TokenError::Algorithm)
    );
    for junk in ["", "a.b", "a.b.c.d", "!!.e30.AAAA", "e30.e30.===="] {
        assert!(Parsed::new(junk.as_bytes()).is_err(), "{junk}");
    }
}

#[test]
fn claims_are_checked_with_leeway() {
    let rules = Rules {
        issuer: Some("https://idp.example"),
        audiences: &["api".to_owned()],
        leeway_s: 60,
        required: &[],
    };
    let check = |claims: &str, now| {
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(claims).unwrap();
        check_claims(&map, &rules, now)
    };
    let ok = r#"{"iss":"https://idp.example","aud":["web","api"],"exp":1000,"nbf":500}"#;
    assert_eq!(check(ok, 1000), Ok(Some(1060)), "within the leeway");
    assert_eq!(check(ok, 1060), Err(TokenError::Expired));
    assert_eq!(check(ok, 439), Err(TokenError::NotYetValid));
    assert_eq!(check(ok, 440), Ok(Some(1060)));
    let other_iss = r#"{"iss":"https://evil.example","aud":"api"}"#;
    assert_eq!(check(other_iss, 1), Err(TokenError::Issuer));
    let other_aud = r#"{"iss":"https://idp.example","aud":"web"}"#;
    assert_eq!(check(other_aud, 1), Err(TokenError::Audience));
    let no_aud = r#"{"iss":"https://idp.example"}"#;
    assert_eq!(check(no_aud, 1), Err(TokenError::Audience));
    let bad_exp = r#"{"iss":"https://idp.example","aud":"api","exp":"soon"}"#;
    assert_eq!(check(bad_exp, 1), Err(TokenError::Malformed));
}

/// `jwt.require = ["exp"]`: a token without `exp` (remembered for 5 minutes otherwise) is
/// refused; one with it passes.
#[test]
fn required_claims_must_be_present() {
    let required = ["exp".to_owned(), "sub".to_owned()];
    let rules = Rules {
        issuer: None,
        audiences: &[],
        leeway_s: 0,
        required: &required,
    };
    let check = |claims: &str| {
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(claims).unwrap();
        check_claims(&map, &rules, 10)
    };
    assert_eq!(check(r#"{"sub":"a"}"#), Err(TokenError::MissingClaim));
    assert_eq!(check(r#"{"exp":100}"#), Err(TokenError::MissingClaim));
    assert_eq!(check(r#"{"sub":"a","exp":100}"#), Ok(Some(100)));
}
