/// A TLS 1.2/1.3 signature scheme (the IANA code points BoringSSL passes to a private-key
/// method).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum SignatureScheme {
    /// rsa_pkcs1_sha256
    RsaPkcs1Sha256 = 0x0401,
    /// rsa_pkcs1_sha384
    RsaPkcs1Sha384 = 0x0501,
    /// rsa_pkcs1_sha512
    RsaPkcs1Sha512 = 0x0601,
    /// rsa_pss_rsae_sha256
    RsaPssSha256 = 0x0804,
    /// rsa_pss_rsae_sha384
    RsaPssSha384 = 0x0805,
    /// rsa_pss_rsae_sha512
    RsaPssSha512 = 0x0806,
    /// ecdsa_secp256r1_sha256
    EcdsaP256Sha256 = 0x0403,
    /// ecdsa_secp384r1_sha384
    EcdsaP384Sha384 = 0x0503,
    /// ed25519
    Ed25519 = 0x0807,
}

impl SignatureScheme {
    /// Every scheme this crate signs.
    pub const ALL: [SignatureScheme; 9] = [
        SignatureScheme::RsaPssSha256,
        SignatureScheme::RsaPssSha384,
        SignatureScheme::RsaPssSha512,
        SignatureScheme::RsaPkcs1Sha256,
        SignatureScheme::RsaPkcs1Sha384,
        SignatureScheme::RsaPkcs1Sha512,
        SignatureScheme::EcdsaP256Sha256,
        SignatureScheme::EcdsaP384Sha384,
        SignatureScheme::Ed25519,
    ];

    /// The scheme for a TLS code point, if this crate supports it.
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s as u16 == v)
    }

    /// Whether it is an RSA scheme.
    pub fn is_rsa(self) -> bool {
        matches!(
            self,
            SignatureScheme::RsaPkcs1Sha256
                | SignatureScheme::RsaPkcs1Sha384
                | SignatureScheme::RsaPkcs1Sha512
                | SignatureScheme::RsaPssSha256
                | SignatureScheme::RsaPssSha384
                | SignatureScheme::RsaPssSha512
        )
    }
}
