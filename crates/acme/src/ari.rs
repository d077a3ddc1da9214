//! ACME Renewal Information (RFC 9773): the CA's own word on when a certificate should be
//! renewed. Where the CA's directory offers `renewalInfo`, the certificate in force is renewed
//! at a point chosen at random in the window the CA suggests (spreading a fleet's renewals,
//! as §4.2 asks) or at once when the window has started (a CA revoking certificates after an
//! incident moves it into the past), whichever of that and Sluice's own schedule comes
//! first; the window is asked again when the CA's `Retry-After` says so. A CA without ARI,
//! or one that does not answer, leaves Sluice's own schedule in force.

use crate::order::stored_account;
use boring::x509::X509Ref;
use instant_acme::CertificateIdentifier;
use sluice_config::AcmeOrder;
use std::borrow::Cow;
use std::time::Duration;

/// Asked again no sooner than this, whatever `Retry-After` says (RFC 9773 §4.3.2 lets a
/// client clamp it), and no later than the upper bound.
const RECHECK: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(6 * 3600));

/// One certificate's renewal information, kept between checks.
#[derive(Default)]
pub(crate) struct Ari {
    /// The certificate it is for (`aki.serial`, RFC 9773 §4.1).
    id: Option<String>,
    /// The CA has no `renewalInfo`: never asked again in this task.
    unsupported: bool,
    /// When to ask again (Unix seconds).
    next_check: i64,
    /// The suggested window and the point chosen in it.
    chosen: Option<((i64, i64), i64)>,
}

impl Ari {
    /// When the CA would have `leaf` renewed, as it last said; `None` when it has not said
    /// (no ARI, not asked yet, or asked about another certificate).
    pub(crate) fn known(&self, leaf: &X509Ref) -> Option<i64> {
        let id = identifier(leaf)?.to_string();
        (self.id.as_deref() == Some(id.as_str()))
            .then_some(self.chosen.map(|(_, at)| at))
            .flatten()
    }

    /// When the CA would have `leaf` renewed, asking it when a check is due; `None` when it
    /// does not say (no ARI, no answer yet, or no identifier in the certificate).
    pub(crate) async fn refresh(
        &mut self,
        order: &AcmeOrder,
        leaf: &X509Ref,
        now: i64,
    ) -> Option<i64> {
        let id = identifier(leaf)?;
        let text = id.to_string();
        if self.id.as_deref() != Some(text.as_str()) {
            *self = Ari {
                id: Some(text),
                ..Ari::default()
            };
        }
        if self.unsupported {
            return None;
        }
        if now >= self.next_check {
            self.check(order, &id, now).await;
        }
        self.chosen.map(|(_, at)| at)
    }

    /// The certificate a renewal replaces (the order's `replaces`, RFC 9773 §5), when the CA
    /// answered ARI for it.
    pub(crate) fn replaces(&self) -> Option<CertificateIdentifier<'static>> {
        let id = self.id.as_deref()?;
        self.chosen?;
        let (aki, serial) = id.split_once('.')?;
        Some(CertificateIdentifier {
            authority_key_identifier: Cow::Owned(aki.to_owned()),
            serial: Cow::Owned(serial.to_owned()),
        })
    }

    async fn check(&mut self, order: &AcmeOrder, id: &CertificateIdentifier<'_>, now: i64) {
        let asked = match stored_account(order).await {
            Ok(Some(a)) => a.renewal_info(id).await.map_err(|e| match e {
                instant_acme::Error::Unsupported(_) => None,
                e => Some(e.to_string()),
            }),
            // No account here (a fleet gateway that never ordered): asked again later.
            Ok(None) => {
                self.next_check = now + RECHECK.1.as_secs() as i64;
                return;
            }
            Err(e) => Err(Some(e)),
        };
        match asked {
            Ok((info, retry_after)) => {
                let w = &info.suggested_window;
                let window = (w.start.unix_timestamp(), w.end.unix_timestamp());
                // The same window keeps its point; a new one gets a new point.
                if self.chosen.is_none_or(|(was, _)| was != window) {
                    let span = (window.1 - window.0).max(0) as u64;
                    let at = window.0 + (random() % (span + 1)) as i64;
                    tracing::info!(certificate_id = %id, window_start = window.0, window_end = window.1, renew_at = at, "the CA suggests a renewal window (ARI)");
                    self.chosen = Some((window, at));
                }
                self.next_check = now + retry_after.clamp(RECHECK.0, RECHECK.1).as_secs() as i64;
            }
            Err(None) => self.unsupported = true,
            Err(Some(e)) => {
                tracing::warn!(certificate_id = %id, error = %e, "could not read the CA's renewal information; keeping the schedule");
                self.next_check = now + order.settings.retry_min.as_secs() as i64;
            }
        }
    }
}

/// The certificate's ARI identifier: its authority key identifier and serial as DER.
fn identifier(leaf: &X509Ref) -> Option<CertificateIdentifier<'static>> {
    let aki = leaf.authority_key_id()?.as_slice().to_vec();
    let serial = leaf.serial_number().to_bn().ok()?.to_vec();
    Some(
        CertificateIdentifier::new(
            aki.as_slice().into(),
            der_integer(&serial).as_slice().into(),
        )
        .into_owned(),
    )
}

/// The content octets of a DER INTEGER for the non-negative magnitude `m` (big-endian): a
/// leading zero when the top bit is set, and at least one octet.
fn der_integer(m: &[u8]) -> Vec<u8> {
    let m: Vec<u8> = m.iter().copied().skip_while(|b| *b == 0).collect();
    match m.first() {
        None => vec![0],
        Some(b) if b & 0x80 != 0 => [&[0u8][..], &m].concat(),
        Some(_) => m,
    }
}

fn random() -> u64 {
    let mut b = [0u8; 8];
    boring::rand::rand_bytes(&mut b).expect("BoringSSL's RNG");
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serial_with_its_top_bit_set_gets_a_leading_zero() {
        assert_eq!(der_integer(&[0x80, 0x01]), [0x00, 0x80, 0x01]);
        assert_eq!(der_integer(&[0x7f, 0x01]), [0x7f, 0x01]);
        assert_eq!(der_integer(&[0x00, 0x00, 0x05]), [0x05]);
        assert_eq!(der_integer(&[]), [0x00]);
    }

    #[test]
    fn the_identifier_is_the_rfc_9773_example_for_its_aki_and_serial() {
        // RFC 9773 §4.1: keyIdentifier 69:88:5B:6B:87:46:40:41:E1:B3:7B:84:7B:A0:AE:2C:DE:01:C8:D4
        // and serial 00:87:65:43:21 give "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE".
        let aki = [
            0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0,
            0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4,
        ];
        let serial = der_integer(&[0x87, 0x65, 0x43, 0x21]);
        let id = CertificateIdentifier::new(aki.as_slice().into(), serial.as_slice().into());
        assert_eq!(id.to_string(), "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE");
    }
}
