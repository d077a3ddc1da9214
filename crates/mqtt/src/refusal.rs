//! Why a connection's first packet is refused, and the CONNACK that says so.
//!
//! MQTT 3.1 and 3.1.1 have a return code for a few refusals and none for a malformed packet
//! (the server closes the connection, MQTT-4.8.0-1); MQTT 5 has a reason code for each
//! (§3.2.2.2). Sluice answers with the CONNACK where the client's version has a code for the
//! refusal and the version is known (the packet got as far as its protocol level), then
//! closes; otherwise it closes without one.

use crate::version::Version;

/// What is wrong with a first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first byte is not a CONNECT's (another packet type, or not MQTT at all).
    NotConnect,
    /// A field does not parse: it names the field.
    Malformed(&'static str),
    /// A field parses but breaks a rule of the protocol (a property twice, a receive maximum
    /// of 0): it names the rule.
    ProtocolError(&'static str),
    /// The protocol name or level is not MQTT 3.1 (`MQIsdp` 3), 3.1.1 (`MQTT` 4) or 5
    /// (`MQTT` 5).
    UnsupportedVersion,
    /// The client identifier is not acceptable (empty where the version needs one).
    ClientIdNotValid,
    /// The packet is larger than the listener accepts.
    TooLarge,
    /// The user name and password (or token) were not accepted, or none was sent.
    BadCredentials,
    /// The credentials were accepted but do not allow this connection.
    NotAuthorized,
    /// What checks the credentials could not answer (a token issuer's keys unreachable).
    Unavailable,
    /// Over the listener's connection rate for the client's address or identifier.
    RateExceeded,
    /// The listener requires a client certificate and the device sent none.
    NoCertificate,
    /// The device's client certificate did not verify against the listener's CAs.
    BadCertificate,
    /// The CONNECT field the listener binds to the certificate is not its common name.
    CertificateMismatch,
}

/// A refusal of a connection's first packet: what is wrong and, where the packet got that
/// far, the client's protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// What is wrong.
    pub fault: Fault,
    /// The version the client asked for, once its protocol level was read.
    pub version: Option<Version>,
}

impl Refusal {
    /// A short name for logs and counters (`malformed`, `protocol_error`, ...).
    pub fn name(&self) -> &'static str {
        match self.fault {
            Fault::NotConnect => "not_connect",
            Fault::Malformed(_) => "malformed",
            Fault::ProtocolError(_) => "protocol_error",
            Fault::UnsupportedVersion => "unsupported_version",
            Fault::ClientIdNotValid => "client_id_not_valid",
            Fault::TooLarge => "too_large",
            Fault::BadCredentials => "bad_credentials",
            Fault::NotAuthorized => "not_authorized",
            Fault::Unavailable => "auth_unavailable",
            Fault::RateExceeded => "rate_limited",
            Fault::NoCertificate => "no_certificate",
            Fault::BadCertificate => "bad_certificate",
            Fault::CertificateMismatch => "certificate_mismatch",
        }
    }

    /// The CONNACK that answers the refusal, where there is one (see the module's docs).
    pub fn connack(&self) -> Option<Vec<u8>> {
        let version = self.version?;
        let code = match (self.fault, version) {
            (Fault::NotConnect, _) => return None,
            (Fault::Malformed(_), Version::V5) => 0x81,
            (Fault::ProtocolError(_), Version::V5) => 0x82,
            (Fault::UnsupportedVersion, Version::V5) => 0x84,
            (Fault::ClientIdNotValid, Version::V5) => 0x85,
            (Fault::TooLarge, Version::V5) => 0x95,
            (Fault::BadCredentials, Version::V5) => 0x86,
            (
                Fault::NotAuthorized
                | Fault::NoCertificate
                | Fault::BadCertificate
                | Fault::CertificateMismatch,
                Version::V5,
            ) => 0x87,
            (Fault::Unavailable, Version::V5) => 0x88,
            (Fault::RateExceeded, Version::V5) => 0x9F,
            (Fault::UnsupportedVersion, _) => 0x01,
            (Fault::ClientIdNotValid, _) => 0x02,
            // 3.x has no code for a rate: "server unavailable", as brokers answer one.
            (Fault::Unavailable | Fault::RateExceeded, _) => 0x03,
            (Fault::BadCredentials, _) => 0x04,
            (
                Fault::NotAuthorized
                | Fault::NoCertificate
                | Fault::BadCertificate
                | Fault::CertificateMismatch,
                _,
            ) => 0x05,
            (Fault::Malformed(_) | Fault::ProtocolError(_) | Fault::TooLarge, _) => return None,
        };
        Some(connack(version, code))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fault {
            Fault::NotConnect => write!(f, "the first packet is not an MQTT CONNECT"),
            Fault::Malformed(what) => write!(f, "malformed CONNECT: {what}"),
            Fault::ProtocolError(what) => write!(f, "CONNECT breaks the protocol: {what}"),
            Fault::UnsupportedVersion => {
                write!(f, "not MQTT 3.1, 3.1.1 or 5 (protocol name or level)")
            }
            Fault::ClientIdNotValid => write!(f, "the client identifier is not acceptable"),
            Fault::TooLarge => write!(f, "the CONNECT is larger than the listener accepts"),
            Fault::BadCredentials => write!(f, "bad user name or password"),
            Fault::NotAuthorized => write!(f, "not authorized"),
            Fault::Unavailable => write!(f, "the credentials could not be checked now"),
            Fault::RateExceeded => write!(f, "over the listener's connection rate"),
            Fault::NoCertificate => {
                write!(f, "no client certificate, and the listener requires one")
            }
            Fault::BadCertificate => write!(f, "the client certificate did not verify"),
            Fault::CertificateMismatch => {
                write!(f, "the CONNECT does not name its certificate's common name")
            }
        }
    }
}

/// A CONNACK refusing a connection with `code` (a 3.x return code or a 5 reason code): no
/// session present, and for MQTT 5 no properties.
pub fn connack(version: Version, code: u8) -> Vec<u8> {
    match version {
        Version::V5 => vec![0x20, 0x03, 0x00, code, 0x00],
        Version::V31 | Version::V311 => vec![0x20, 0x02, 0x00, code],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_gets_its_own_code_or_none() {
        let r = |fault, version| Refusal { fault, version };
        assert_eq!(
            r(Fault::Malformed("x"), Some(Version::V5)).connack(),
            Some(vec![0x20, 3, 0, 0x81, 0])
        );
        assert_eq!(
            r(Fault::Malformed("x"), Some(Version::V311)).connack(),
            None
        );
        assert_eq!(
            r(Fault::UnsupportedVersion, Some(Version::V311)).connack(),
            Some(vec![0x20, 2, 0, 0x01])
        );
        assert_eq!(
            r(Fault::ClientIdNotValid, Some(Version::V31)).connack(),
            Some(vec![0x20, 2, 0, 0x02])
        );
        assert_eq!(r(Fault::Malformed("x"), None).connack(), None);
        assert_eq!(r(Fault::NotConnect, Some(Version::V5)).connack(), None);
        assert_eq!(
            r(Fault::BadCredentials, Some(Version::V5)).connack(),
            Some(vec![0x20, 3, 0, 0x86, 0])
        );
        for cert in [
            Fault::NoCertificate,
            Fault::BadCertificate,
            Fault::CertificateMismatch,
        ] {
            assert_eq!(
                r(cert, Some(Version::V5)).connack(),
                Some(vec![0x20, 3, 0, 0x87, 0])
            );
            assert_eq!(
                r(cert, Some(Version::V311)).connack(),
                Some(vec![0x20, 2, 0, 0x05])
            );
        }
        assert_eq!(
            r(Fault::BadCredentials, Some(Version::V311)).connack(),
            Some(vec![0x20, 2, 0, 0x04])
        );
        assert_eq!(
            r(Fault::NotAuthorized, Some(Version::V31)).connack(),
            Some(vec![0x20, 2, 0, 0x05])
        );
    }
}
