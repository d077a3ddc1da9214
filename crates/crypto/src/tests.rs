use crate::*;
use boring::hash::MessageDigest;
use boring::pkey::{PKey, Private};
use boring::rsa::Padding;
use std::sync::Arc;

pub(crate) fn boring_key(kind: KeyKind) -> PKey<Private> {
    use boring::ec::{EcGroup, EcKey};
    use boring::nid::Nid;
    match kind {
        KeyKind::Rsa(bits) => PKey::from_rsa(boring::rsa::Rsa::generate(bits).unwrap()).unwrap(),
        KeyKind::EcdsaP256 => PKey::from_ec_key(
            EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
        )
        .unwrap(),
        KeyKind::EcdsaP384 => PKey::from_ec_key(
            EcKey::generate(&EcGroup::from_curve_name(Nid::SECP384R1).unwrap()).unwrap(),
        )
        .unwrap(),
        KeyKind::Ed25519 => PKey::generate(boring::pkey::Id::ED25519).unwrap(),
    }
}

/// BoringSSL, independently, checks a signature made by aws-lc-rs (a differential test).
pub(crate) fn boring_verifies(
    key: &PKey<Private>,
    scheme: SignatureScheme,
    msg: &[u8],
    sig: &[u8],
) -> bool {
    use SignatureScheme::*;
    let md = match scheme {
        RsaPkcs1Sha256 | RsaPssSha256 | EcdsaP256Sha256 => Some(MessageDigest::sha256()),
        RsaPkcs1Sha384 | RsaPssSha384 | EcdsaP384Sha384 => Some(MessageDigest::sha384()),
        RsaPkcs1Sha512 | RsaPssSha512 => Some(MessageDigest::sha512()),
        Ed25519 => None,
    };
    let mut v = match md {
        Some(md) => boring::sign::Verifier::new(md, key).unwrap(),
        None => boring::sign::Verifier::new_without_digest(key).unwrap(),
    };
    if matches!(scheme, RsaPssSha256 | RsaPssSha384 | RsaPssSha512) {
        v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        v.set_rsa_pss_saltlen(boring::sign::RsaPssSaltlen::DIGEST_LENGTH)
            .unwrap();
    }
    match md {
        Some(_) => {
            v.update(msg).unwrap();
            v.verify(sig).unwrap_or(false)
        }
        None => v.verify_oneshot(sig, msg).unwrap_or(false),
    }
}

const KINDS: [KeyKind; 6] = [
    KeyKind::Rsa(2048),
    KeyKind::Rsa(3072),
    KeyKind::Rsa(4096),
    KeyKind::EcdsaP256,
    KeyKind::EcdsaP384,
    KeyKind::Ed25519,
];

#[test]
fn every_scheme_of_every_key_kind_verifies_with_boringssl() {
    for kind in KINDS {
        let bkey = boring_key(kind);
        let key =
            Arc::new(PrivateKey::from_pkcs8(&bkey.private_key_to_der_pkcs8().unwrap()).unwrap());
        assert_eq!(key.kind(), kind);
        for &scheme in key.schemes() {
            let msg = format!("TLS transcript for {kind:?} {scheme:?}").into_bytes();
            let job = KeyJob::sign(key.clone(), scheme, &msg, VerifyPolicy::All).unwrap();
            let signature = run(&job).unwrap();
            assert!(
                boring_verifies(&bkey, scheme, &msg, &signature),
                "{kind:?} {scheme:?}"
            );
        }
    }
}

#[test]
fn a_wrong_signature_is_caught_before_release() {
    for kind in [KeyKind::Rsa(2048), KeyKind::EcdsaP256, KeyKind::Ed25519] {
        let key = Arc::new(
            PrivateKey::from_pkcs8(&boring_key(kind).private_key_to_der_pkcs8().unwrap()).unwrap(),
        );
        let scheme = key.schemes()[0];
        let job = KeyJob::sign(key, scheme, b"message", VerifyPolicy::All).unwrap();
        let mut signature = job.primitive().unwrap();
        let last = signature.len() - 1;
        signature[last] ^= 1; // a fault
        assert!(
            matches!(
                job.check(&signature),
                Err(sluice_offload::EngineError::WrongResult(_))
            ),
            "{kind:?}"
        );
    }
}

#[test]
fn a_key_cannot_sign_a_scheme_of_another_kind() {
    let key = Arc::new(
        PrivateKey::from_pkcs8(
            &boring_key(KeyKind::EcdsaP256)
                .private_key_to_der_pkcs8()
                .unwrap(),
        )
        .unwrap(),
    );
    assert!(
        KeyJob::sign(
            key.clone(),
            SignatureScheme::RsaPssSha256,
            b"m",
            VerifyPolicy::All
        )
        .is_none()
    );
    assert!(
        KeyJob::sign(
            key,
            SignatureScheme::EcdsaP384Sha384,
            b"m",
            VerifyPolicy::All
        )
        .is_none()
    );
    assert!(PrivateKey::from_pkcs8(b"not a key").is_err());
}

#[tokio::test]
async fn the_dispatcher_signs_through_the_pool_and_falls_back_when_it_is_full() {
    let bkey = boring_key(KeyKind::Rsa(2048));
    let key = Arc::new(PrivateKey::from_pkcs8(&bkey.private_key_to_der_pkcs8().unwrap()).unwrap());
    let config = CryptoConfig {
        pool_threads: 1,
        pool_capacity: 1,
        ..CryptoConfig::default()
    };
    let d = Arc::new(build_dispatcher(&config, None).unwrap());
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (d, key) = (d.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let msg = format!("handshake {i}").into_bytes();
            let job =
                KeyJob::sign(key, SignatureScheme::RsaPssSha256, &msg, VerifyPolicy::All).unwrap();
            (msg, d.run(job).await.unwrap())
        }));
    }
    for t in tasks {
        let (msg, signature) = t.await.unwrap();
        assert!(boring_verifies(
            &bkey,
            SignatureScheme::RsaPssSha256,
            &msg,
            &signature
        ));
    }
    let c = d.counters();
    assert_eq!(c[0].engine, "pool");
    assert_eq!(c[0].completed + c[1].completed, 32);
    assert!(c[0].completed >= 1, "{c:?}");
}

/// A TLS 1.2 premaster secret encrypted by BoringSSL with the public key decrypts, through
/// the pool, to the PKCS#1 v1.5 block that carries it (raw decryption: the padding is the
/// caller's to check).
#[tokio::test]
async fn rsa_decryption_inverts_boringssl_encryption() {
    let config = CryptoConfig::default();
    let d = build_dispatcher(&config, None).unwrap();
    for bits in [2048, 3072, 4096] {
        let brsa = boring::rsa::Rsa::generate(bits).unwrap();
        let bkey = PKey::from_rsa(brsa.clone()).unwrap();
        let key =
            Arc::new(PrivateKey::from_pkcs8(&bkey.private_key_to_der_pkcs8().unwrap()).unwrap());
        let premaster: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
        let mut ciphertext = vec![0; brsa.size() as usize];
        let n = brsa
            .public_encrypt(&premaster, &mut ciphertext, Padding::PKCS1)
            .unwrap();
        assert_eq!(n, ciphertext.len());
        let job = KeyJob::decrypt(key.clone(), &ciphertext).unwrap();
        assert_eq!(job.operation(), OperationKind::Decrypt);
        let block = d.run(job).await.unwrap();
        assert_eq!(block.len(), ciphertext.len());
        assert_eq!(&block[..2], &[0, 2], "{bits}: PKCS#1 v1.5 type 2 block");
        assert_eq!(&block[block.len() - 49..], &[&[0][..], &premaster].concat());
        // And against BoringSSL's own raw decryption.
        let mut expected = vec![0; brsa.size() as usize];
        brsa.private_decrypt(&ciphertext, &mut expected, Padding::NONE)
            .unwrap();
        assert_eq!(block, expected, "{bits}");
    }
    let c = d.counters();
    assert_eq!(c.iter().map(|c| c.completed).sum::<u64>(), 3);
    assert_eq!(c.iter().map(|c| c.failed).sum::<u64>(), 0);
}

#[test]
fn a_wrong_decryption_is_caught_and_bad_inputs_are_refused() {
    let bkey = boring_key(KeyKind::Rsa(2048));
    let key = Arc::new(PrivateKey::from_pkcs8(&bkey.private_key_to_der_pkcs8().unwrap()).unwrap());
    let ciphertext: Vec<u8> = (0..256).map(|i| (i as u8) ^ 0x5a).collect::<Vec<u8>>();
    let mut ciphertext = ciphertext;
    ciphertext[0] = 0; // below the modulus
    let job = KeyJob::decrypt(key.clone(), &ciphertext).unwrap();
    let mut plain = run(&job).unwrap();
    plain[100] ^= 0x10; // a fault
    assert!(matches!(
        job.check(&plain),
        Err(sluice_offload::EngineError::WrongResult(_))
    ));
    // Wrong length, and not an RSA key: no job.
    assert!(KeyJob::decrypt(key.clone(), &ciphertext[1..]).is_none());
    let ec = Arc::new(
        PrivateKey::from_pkcs8(
            &boring_key(KeyKind::EcdsaP256)
                .private_key_to_der_pkcs8()
                .unwrap(),
        )
        .unwrap(),
    );
    assert!(KeyJob::decrypt(ec, &ciphertext).is_none());
    // Not below the modulus: the primitive fails (an engine error, never a panic).
    let too_big = vec![0xff; 256];
    let job = KeyJob::decrypt(key, &too_big).unwrap();
    assert!(matches!(
        job.primitive(),
        Err(sluice_offload::EngineError::Failed(_))
    ));
}

/// A key keeps one engine's precomputed form: made once, the same on every ask, and another
/// type asked of the same key gets nothing rather than a wrong cast.
#[test]
fn a_key_keeps_one_engine_form() {
    let pkcs8 = boring_key(KeyKind::Rsa(2048))
        .private_key_to_der_pkcs8()
        .unwrap();
    let key = PrivateKey::from_pkcs8(&pkcs8).unwrap();
    let first = key.mb().expect("an RSA-2048 key has an mb form") as *const _;
    assert_eq!(key.mb().map(|m| m as *const _), Some(first), "made once");
    assert_eq!(key.engine_form(|_| Some(7u32)), None);
    let ec = boring_key(KeyKind::EcdsaP256)
        .private_key_to_der_pkcs8()
        .unwrap();
    assert!(PrivateKey::from_pkcs8(&ec).unwrap().mb().is_none());
}
