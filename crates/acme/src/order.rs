//! One ACME order, start to finish: the account, the challenges answered by this gateway's
//! own listeners, a key and CSR made here, and the issued chain checked and stored.

use crate::challenge::Answer;
use crate::challenge::{Published, publish};
use crate::dns01;
use crate::fleet::Turn;
use crate::storage::{Issued, account_path, write_private};
use boring::hash::MessageDigest;
use boring::pkey::{PKey, Private};
use boring::stack::Stack;
use boring::x509::extension::SubjectAlternativeName;
use boring::x509::{X509, X509NameBuilder, X509ReqBuilder};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use sluice_config::selfsigned::{KeyKind, new_key};
use sluice_config::{AcmeChallenge, AcmeKeyType, AcmeOrder, DnsUpdate};
use std::time::Duration;

/// Why an order failed, in words an operator can act on.
pub(crate) type OrderError = String;

/// How long the CA may take to validate, and then to issue.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(120));

/// Runs one order for `order`'s names and stores the result; the certificate is not yet in
/// force (the caller installs it). In a fleet, `turn` has every gateway answer the
/// challenges and, at the end, take the certificate. `replaces`: the certificate this one
/// renews, for a CA with renewal information (RFC 9773 §5).
pub(crate) async fn run(
    order: &AcmeOrder,
    turn: Option<&dyn Turn>,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Issued, OrderError> {
    let account = account(order).await?;
    let mut acme_order = place(&account, order, replaces).await?;

    // Each answer stays published until the order is over, then is withdrawn (dropped).
    let mut answers = Answers {
        published: Vec::new(),
        records: DnsRecords::new(order.dns.clone()),
    };
    answer_all(&mut acme_order, order, turn, &mut answers).await?;
    let status = acme_order
        .poll_ready(&POLL)
        .await
        .map_err(|e| format!("waiting for validation: {e}"))?;
    drop(answers.published);
    answers.records.remove().await;
    if status != OrderStatus::Ready {
        return Err(validation_failure(&mut acme_order).await);
    }
    finish(&mut acme_order, order, turn).await
}

/// The new order at the CA: as a replacement of `replaces` where given and the CA takes it,
/// else plainly.
async fn place(
    account: &Account,
    order: &AcmeOrder,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<instant_acme::Order, OrderError> {
    let identifiers: Vec<Identifier> = order.names.iter().cloned().map(Identifier::Dns).collect();
    if let Some(id) = replaces {
        match account
            .new_order(&NewOrder::new(&identifiers).replaces(id))
            .await
        {
            Ok(o) => return Ok(o),
            // A CA may refuse `replaces` (already replaced, another account's): order plainly.
            Err(e) => {
                tracing::info!(names = ?order.names, error = %e, "the CA refused the order as a replacement; ordering anew")
            }
        }
    }
    account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(|e| format!("creating the order: {e}"))
}

/// What an order has published: listener answers (withdrawn when dropped) and DNS records.
struct Answers {
    published: Vec<Published>,
    records: DnsRecords,
}

/// Answers every pending authorization of the order with `order`'s challenge.
async fn answer_all(
    acme_order: &mut instant_acme::Order,
    order: &AcmeOrder,
    turn: Option<&dyn Turn>,
    answers: &mut Answers,
) -> Result<(), OrderError> {
    let kind = match order.challenge {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        AcmeChallenge::Dns01 => ChallengeType::Dns01,
    };
    let mut authorizations = acme_order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(|e| format!("reading an authorization: {e}"))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            // Validated recently for this account: nothing to answer.
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("an authorization is {other:?}")),
        }
        let mut challenge = authz.challenge(kind.clone()).ok_or_else(|| {
            format!(
                "the CA offers no {} challenge for a name; try the other challenge",
                order.challenge.as_str()
            )
        })?;
        let host = match challenge.identifier().identifier {
            Identifier::Dns(d) => d.clone(),
            other => return Err(format!("unexpected identifier {other:?}")),
        };
        let key_authorization = challenge.key_authorization();
        let answer = match (order.challenge, &answers.records.dns) {
            (AcmeChallenge::Http01, _) => Answer::Http {
                token: challenge.token.clone(),
                key_authorization: key_authorization.as_str().to_owned(),
            },
            (AcmeChallenge::TlsAlpn01, _) => Answer::TlsAlpn {
                host: host.clone(),
                digest: key_authorization.digest().as_ref().to_vec(),
            },
            // In DNS: no listener, nothing for the fleet to give.
            (AcmeChallenge::Dns01, Some(dns)) => {
                let record = dns01::add(dns, &host, &key_authorization.dns_value()).await?;
                answers.records.added.push(record);
                challenge
                    .set_ready()
                    .await
                    .map_err(|e| format!("answering the challenge for {host}: {e}"))?;
                continue;
            }
            // The loader gives every dns-01 order its server.
            (AcmeChallenge::Dns01, None) => {
                return Err("the dns-01 challenge has no dns server".into());
            }
        };
        answers.published.push(publish(&answer)?);
        if let Some(turn) = turn {
            turn.publish(&answer)
                .await
                .map_err(|e| format!("giving the fleet the challenge answer for {host}: {e}"))?;
        }
        challenge
            .set_ready()
            .await
            .map_err(|e| format!("answering the challenge for {host}: {e}"))?;
    }
    Ok(())
}

/// A validated order's end: key and CSR made here, the certificate downloaded, checked
/// against the key and stored (the key first), and given to the fleet.
async fn finish(
    acme_order: &mut instant_acme::Order,
    order: &AcmeOrder,
    turn: Option<&dyn Turn>,
) -> Result<Issued, OrderError> {
    let key = new_key(match order.key_type {
        AcmeKeyType::EcdsaP256 => KeyKind::EcdsaP256,
        AcmeKeyType::Rsa2048 => KeyKind::Rsa2048,
    })
    .map_err(|e| format!("generating the certificate's key: {e}"))?;
    let csr = csr(&order.names, &key).map_err(|e| format!("making the CSR: {e}"))?;
    acme_order
        .finalize_csr(&csr)
        .await
        .map_err(|e| format!("finalizing the order: {e}"))?;
    let pem = acme_order
        .poll_certificate(&POLL)
        .await
        .map_err(|e| format!("downloading the certificate: {e}"))?;
    let chain = X509::stack_from_pem(pem.as_bytes())
        .ok()
        .filter(|c| !c.is_empty())
        .ok_or("the CA sent no PEM certificate")?;
    if !chain[0].public_key().is_ok_and(|pk| pk.public_eq(&key)) {
        return Err("the CA's certificate is not for the key this order sent".into());
    }
    let key_pem = key
        .private_key_to_pem_pkcs8()
        .map_err(|e| format!("encoding the key: {e}"))?;
    // The key first: a certificate on disk always has its key beside it.
    write_private(&order.key_path(), &key_pem)
        .and_then(|()| write_private(&order.cert_path(), pem.as_bytes()))
        .map_err(|e| format!("storing the certificate in {}: {e}", order.dir.display()))?;
    if let Some(turn) = turn
        && let Err(e) = turn.share(&pem, &key_pem).await
    {
        // In force here; the other gateways order it themselves when they find it due.
        tracing::warn!(names = ?order.names, error = %e, "could not give the fleet the new certificate");
    }
    Ok(Issued { chain, key })
}

/// What the CA said about the failed validations of an order that went invalid.
async fn validation_failure(order: &mut instant_acme::Order) -> OrderError {
    let mut reasons = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let Ok(authz) = authz else { continue };
        for c in &authz.challenges {
            if let Some(e) = &c.error {
                reasons.push(e.to_string());
            }
        }
    }
    if reasons.is_empty() {
        "the CA did not validate the names (no reason given)".into()
    } else {
        format!("the CA could not validate: {}", reasons.join("; "))
    }
}

/// The TXT records an order added, removed when it ends: by [`DnsRecords::remove`] on the
/// way out, or in the background when an error leaves early.
struct DnsRecords {
    dns: Option<DnsUpdate>,
    added: Vec<dns01::Record>,
}

impl DnsRecords {
    fn new(dns: Option<DnsUpdate>) -> Self {
        DnsRecords {
            dns,
            added: Vec::new(),
        }
    }

    async fn remove(&mut self) {
        let (Some(dns), added) = (&self.dns, std::mem::take(&mut self.added)) else {
            return;
        };
        for r in added {
            if let Err(e) = r.remove(dns).await {
                // Harmless to validation (a stale value is ignored); left for the operator.
                tracing::warn!(error = %e, "could not remove a dns-01 TXT record; remove it by hand");
            }
        }
    }
}

impl Drop for DnsRecords {
    fn drop(&mut self) {
        if self.added.is_empty() {
            return;
        }
        let mut rest = DnsRecords {
            dns: self.dns.take(),
            added: std::mem::take(&mut self.added),
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { rest.remove().await });
        }
    }
}

/// The account for `order`'s CA: from storage, or created there (mode 0600), bound to the
/// CA's own account by `eab` where the order has one.
pub(crate) async fn account(order: &AcmeOrder) -> Result<Account, OrderError> {
    if let Some(account) = stored_account(order).await? {
        return Ok(account);
    }
    let path = account_path(&order.settings.storage, &order.directory);
    let contact = order.email.as_ref().map(|e| format!("mailto:{e}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let eab = order
        .eab
        .as_ref()
        .map(|e| ExternalAccountKey::new(e.kid.clone(), &e.hmac_key.0));
    let (account, credentials) = account_builder(order)?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            order.directory.clone(),
            eab.as_ref(),
        )
        .await
        .map_err(|e| format!("creating an account at {}: {e}", order.directory))?;
    let json = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
    write_private(&path, &json)
        .map_err(|e| format!("storing the account in {}: {e}", path.display()))?;
    tracing::info!(directory = %order.directory, id = %account.id(), "created an ACME account");
    Ok(account)
}

/// The account storage holds for `order`'s CA, if it holds a readable one (never creates
/// one: what asking the CA's renewal information uses, so that a gateway that never orders
/// spends no account, nor an EAB key, on it).
pub(crate) async fn stored_account(order: &AcmeOrder) -> Result<Option<Account>, OrderError> {
    let path = account_path(&order.settings.storage, &order.directory);
    let Ok(json) = std::fs::read(&path) else {
        return Ok(None);
    };
    match serde_json::from_slice::<AccountCredentials>(&json) {
        Ok(credentials) => account_builder(order)?
            .from_credentials(credentials)
            .await
            .map(Some)
            .map_err(|e| format!("restoring the account from {}: {e}", path.display())),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable ACME account; creating another");
            Ok(None)
        }
    }
}

/// An account builder trusting `order`'s CA file, or the system's roots.
fn account_builder(order: &AcmeOrder) -> Result<instant_acme::AccountBuilder, OrderError> {
    match &order.ca_file {
        Some(ca) => Account::builder_with_root(ca)
            .map_err(|e| format!("reading the CA file {}: {e}", ca.display())),
        None => Account::builder().map_err(|e| format!("setting up HTTPS to the CA: {e}")),
    }
}

/// A CSR (DER) for `names` with `key`: the first name as subject, all of them as
/// subjectAltNames (what CAs read).
fn csr(names: &[String], key: &PKey<Private>) -> Result<Vec<u8>, boring::error::ErrorStack> {
    let mut b = X509ReqBuilder::new()?;
    let mut subject = X509NameBuilder::new()?;
    subject.append_entry_by_nid(boring::nid::Nid::COMMONNAME, &names[0])?;
    b.set_subject_name(&subject.build())?;
    b.set_pubkey(key)?;
    let mut san = SubjectAlternativeName::new();
    for n in names {
        san.dns(n);
    }
    let san = san.build(&b.x509v3_context(None))?;
    let mut extensions = Stack::new()?;
    extensions.push(san)?;
    b.add_extensions(&extensions)?;
    b.sign(key, MessageDigest::sha256())?;
    b.build().to_der()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csr_names_every_name_and_is_signed_by_the_key() {
        let key = new_key(KeyKind::EcdsaP256).unwrap();
        let names = vec!["a.example".to_owned(), "www.a.example".to_owned()];
        let der = csr(&names, &key).unwrap();
        let req = boring::x509::X509Req::from_der(&der).unwrap();
        assert!(req.verify(&key).unwrap());
        let text = format!("{:?}", req.extensions().unwrap().len());
        assert_eq!(text, "1");
        // The SAN extension's DER holds both names.
        for n in &names {
            assert!(
                der.windows(n.len()).any(|w| w == n.as_bytes()),
                "{n} missing"
            );
        }
    }
}
