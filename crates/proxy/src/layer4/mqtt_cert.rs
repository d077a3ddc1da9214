//! A device's client certificate on an MQTT listener (`[listener.tls] client_ca` and
//! `client_auth`, `[listener.mqtt] certificate_identity`). The handshake always completes,
//! as on HTTP listeners; what it left is judged once the CONNECT has arrived, so that a
//! refusal is a CONNACK in the device's own version: no certificate where one is required,
//! one that did not verify, or (with `certificate_identity`) a client identifier or user
//! name that is not the certificate's common name. All three are "not authorized".

use crate::request::context::ListenerCtx;
use sluice_config::{ClientAuthMode, MqttRouteBy};
use sluice_mqtt::Fault;
use sluice_tls::{ClientCert, TlsInfo};
use std::sync::Arc;

/// What the handshake left, as the listener's `client_auth` (for the name the device asked
/// for) judges it: the verified certificate, none (not asked for, or optional and not sent),
/// or why the device is refused.
pub(crate) fn presented(
    listener: &ListenerCtx,
    info: &TlsInfo,
) -> Result<Option<Arc<ClientCert>>, Fault> {
    let Some(auth) = listener
        .config
        .tls
        .as_ref()
        .and_then(|t| t.client_auth.as_ref())
    else {
        return Ok(None);
    };
    let mode = match (info.sni.as_deref(), &listener.tls) {
        (Some(sni), Some(acceptor)) => acceptor.store().client_auth_for(sni),
        _ => None,
    }
    .unwrap_or(auth.mode);
    judge(mode, info.client_cert.as_ref())
}

fn judge(
    mode: ClientAuthMode,
    cert: Option<&Arc<ClientCert>>,
) -> Result<Option<Arc<ClientCert>>, Fault> {
    match (mode, cert) {
        (ClientAuthMode::Off, _) => Ok(None),
        (_, Some(c)) if !c.verified => Err(Fault::BadCertificate),
        (ClientAuthMode::Required, None) => Err(Fault::NoCertificate),
        (_, c) => Ok(c.cloned()),
    }
}

/// With `certificate_identity`, the CONNECT's `client_id` or `username` must be the
/// certificate's common name (a certificate without one binds nothing, so it is refused).
pub(crate) fn bound(
    identity: Option<MqttRouteBy>,
    cert: Option<&ClientCert>,
    client_id: &str,
    username: Option<&str>,
) -> Result<(), Fault> {
    let Some(field) = identity else {
        return Ok(());
    };
    let named = match field {
        MqttRouteBy::ClientId => Some(client_id),
        MqttRouteBy::Username => username,
    };
    match (cert.and_then(|c| c.common_name.as_deref()), named) {
        (Some(cn), Some(named)) if cn == named => Ok(()),
        _ => Err(Fault::CertificateMismatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(verified: bool, cn: Option<&str>) -> Arc<ClientCert> {
        Arc::new(ClientCert {
            verified,
            error: (!verified).then(|| "certificate has expired".into()),
            subject: cn.map_or("O=Devices".into(), |c| format!("CN={c},O=Devices")),
            common_name: cn.map(str::to_owned),
            sans: Vec::new(),
            sha256: "00".into(),
        })
    }

    #[test]
    fn the_mode_decides_what_a_missing_or_unverified_certificate_costs() {
        use ClientAuthMode::{Off, Optional, Required};
        let good = cert(true, Some("dev-1"));
        let bad = cert(false, Some("dev-1"));
        assert_eq!(judge(Off, Some(&bad)), Ok(None), "not asked: not judged");
        assert_eq!(judge(Optional, None), Ok(None));
        assert_eq!(judge(Required, None), Err(Fault::NoCertificate));
        assert_eq!(judge(Optional, Some(&bad)), Err(Fault::BadCertificate));
        assert_eq!(judge(Required, Some(&bad)), Err(Fault::BadCertificate));
        assert_eq!(
            judge(Required, Some(&good)).unwrap().unwrap().subject,
            good.subject
        );
    }

    #[test]
    fn the_bound_field_must_be_the_common_name() {
        let c = cert(true, Some("dev-1"));
        let by_id = Some(MqttRouteBy::ClientId);
        let by_user = Some(MqttRouteBy::Username);
        assert_eq!(bound(None, None, "anyone", None), Ok(()), "no binding");
        assert_eq!(bound(by_id, Some(&c), "dev-1", None), Ok(()));
        assert_eq!(
            bound(by_id, Some(&c), "dev-2", Some("dev-1")),
            Err(Fault::CertificateMismatch)
        );
        assert_eq!(bound(by_user, Some(&c), "x", Some("dev-1")), Ok(()));
        assert_eq!(
            bound(by_user, Some(&c), "dev-1", None),
            Err(Fault::CertificateMismatch),
            "no user name to match"
        );
        let nameless = cert(true, None);
        assert_eq!(
            bound(by_id, Some(&nameless), "", None),
            Err(Fault::CertificateMismatch),
            "no common name binds nothing, not even an empty identifier"
        );
        assert_eq!(
            bound(by_id, None, "dev-1", None),
            Err(Fault::CertificateMismatch)
        );
    }
}
