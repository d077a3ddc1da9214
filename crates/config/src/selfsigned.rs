//! Self-signed certificates: the embedded default's, an ACME certificate's placeholder until
//! the CA issues it, a TLS-ALPN-01 challenge's (RFC 8737), and tests'.

use boring::asn1::Asn1Time;
use boring::bn::{BigNum, MsbOption};
use boring::ec::{EcGroup, EcKey};
use boring::error::ErrorStack;
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use boring::rsa::Rsa;
use boring::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use boring::x509::{X509, X509Builder, X509NameBuilder};

/// Key kinds a self-signed certificate can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA-2048.
    Rsa2048,
    /// ECDSA P-256.
    EcdsaP256,
}

/// A new private key of `kind`.
pub fn new_key(kind: KeyKind) -> Result<PKey<Private>, ErrorStack> {
    match kind {
        KeyKind::Rsa2048 => PKey::from_rsa(Rsa::generate(2048)?),
        KeyKind::EcdsaP256 => {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
            PKey::from_ec_key(EcKey::generate(&group)?)
        }
    }
}

/// Generates a key and a self-signed certificate for `hosts` (DNS names or IP addresses),
/// valid from yesterday for `days` days; `organization` names what made it.
pub fn generate(
    kind: KeyKind,
    hosts: &[&str],
    days: u32,
    organization: &str,
) -> Result<(X509, PKey<Private>), ErrorStack> {
    let key = new_key(kind)?;
    let mut b = builder(&key, hosts, days, organization)?;
    let mut usage = KeyUsage::new();
    usage.critical().digital_signature();
    if kind == KeyKind::Rsa2048 {
        usage.key_encipherment();
    }
    let usage = usage.build()?;
    b.append_extension(&usage)?;
    let eku = ExtendedKeyUsage::new().server_auth().build()?;
    b.append_extension(&eku)?;
    b.sign(&key, MessageDigest::sha256())?;
    Ok((b.build(), key))
}

/// A certificate builder for `key`, subject and issuer `hosts[0]`, with basic constraints
/// and the subjectAltNames of `hosts` set and the rest left to the caller.
pub fn builder(
    key: &PKey<Private>,
    hosts: &[&str],
    days: u32,
    organization: &str,
) -> Result<X509Builder, ErrorStack> {
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(
        Nid::COMMONNAME,
        hosts.first().copied().unwrap_or("localhost"),
    )?;
    name.append_entry_by_nid(Nid::ORGANIZATIONNAME, organization)?;
    let name = name.build();

    let mut b = X509::builder()?;
    b.set_version(2)?;
    let mut serial = BigNum::new()?;
    serial.rand(127, MsbOption::MAYBE_ZERO, false)?;
    let serial = serial.to_asn1_integer()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(&name)?;
    b.set_pubkey(key)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let not_before = Asn1Time::from_unix(now - 86_400)?;
    b.set_not_before(&not_before)?;
    let not_after = Asn1Time::days_from_now(days)?;
    b.set_not_after(&not_after)?;
    let basic = BasicConstraints::new().critical().build()?;
    b.append_extension(&basic)?;
    if !hosts.is_empty() {
        let san = subject_alt_names(hosts).build(&b.x509v3_context(None, None))?;
        b.append_extension(&san)?;
    }
    Ok(b)
}

/// `hosts` (DNS names or IP addresses) as a subjectAltName extension to build.
pub fn subject_alt_names(hosts: &[&str]) -> SubjectAlternativeName {
    let mut san = SubjectAlternativeName::new();
    for h in hosts {
        if h.parse::<std::net::IpAddr>().is_ok() {
            san.ip(h);
        } else {
            san.dns(h);
        }
    }
    san
}
