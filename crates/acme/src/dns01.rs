//! DNS-01 answers (RFC 8555 §8.4): a TXT record at `_acme-challenge.<name>` holding the
//! digest of the key authorization, added to the zone by an RFC 2136 dynamic update and
//! removed the same way when the order ends. Updates are signed with TSIG (RFC 8945) and
//! sent over TCP to the zone's primary server, as certbot's and lego's `rfc2136` plugins do
//! against BIND and Knot; the server's answer is checked for its rcode and its own TSIG.
//!
//! Two names of one order can share a record name (`example.com` and `*.example.com` both
//! answer at `_acme-challenge.example.com`), so records are added to the set and deleted by
//! value, never replaced.

use hickory_proto::op::{Message, Query, ResponseCode, update_message};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm as Alg;
use hickory_proto::rr::{Name, RData, RecordSet, RecordType, TSigner};
use sluice_config::{DnsUpdate, TsigAlgorithm};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long one exchange with the server may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The TTL of the challenge record: short, since it lives for one order.
const TTL: u32 = 60;
/// The TSIG fudge (RFC 8945 §10 recommends 300 s).
const FUDGE: u16 = 300;

/// A TXT record this gateway added; [`Record::remove`] takes it away again.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    name: Name,
    zone: Name,
    value: String,
}

/// The name validated for `identifier` (a wildcard's is its base name's).
pub(crate) fn record_name(identifier: &str) -> String {
    format!(
        "_acme-challenge.{}",
        identifier.trim_start_matches("*.").trim_end_matches('.')
    )
}

/// Adds `value` to the TXT set at `_acme-challenge.<identifier>` through `dns`, and waits
/// until the server answers it (then `propagation_delay`).
pub(crate) async fn add(dns: &DnsUpdate, identifier: &str, value: &str) -> Result<Record, String> {
    let name = Name::from_ascii(format!("{}.", record_name(identifier)))
        .map_err(|e| format!("`{identifier}` is not a DNS name: {e}"))?;
    let zone = match &dns.zone {
        Some(z) => Name::from_ascii(format!("{z}.")).map_err(|e| format!("zone `{z}`: {e}"))?,
        None => zone_of(dns, &name).await?,
    };
    if !zone.zone_of(&name) {
        return Err(format!(
            "{name} is not in the zone {zone}; set dns.zone to the zone that holds it"
        ));
    }
    let record = Record {
        name,
        zone,
        value: value.to_owned(),
    };
    let message = update_message::append(record.rrset(), record.zone.clone(), false, false);
    update(dns, message)
        .await
        .map_err(|e| format!("adding the TXT record {}: {e}", record.name))?;
    wait_visible(dns, &record).await?;
    if !dns.propagation_delay.is_zero() {
        tokio::time::sleep(dns.propagation_delay).await;
    }
    tracing::debug!(record = %record.name, zone = %record.zone, "dns-01 TXT record added");
    Ok(record)
}

impl Record {
    fn rrset(&self) -> RecordSet {
        let mut set = RecordSet::with_ttl(self.name.clone(), RecordType::TXT, TTL);
        set.add_rdata(RData::TXT(TXT::new(vec![self.value.clone()])));
        set
    }

    /// Deletes this record (and only this value) from its set.
    pub(crate) async fn remove(&self, dns: &DnsUpdate) -> Result<(), String> {
        let message = update_message::delete_by_rdata(self.rrset(), self.zone.clone(), false);
        update(dns, message)
            .await
            .map_err(|e| format!("removing the TXT record {}: {e}", self.name))
    }
}

fn signer(dns: &DnsUpdate) -> Result<TSigner, String> {
    let alg = match dns.algorithm {
        TsigAlgorithm::HmacSha256 => Alg::HmacSha256,
        TsigAlgorithm::HmacSha384 => Alg::HmacSha384,
        TsigAlgorithm::HmacSha512 => Alg::HmacSha512,
    };
    let key_name = Name::from_ascii(format!("{}.", dns.key_name))
        .map_err(|e| format!("TSIG key name `{}`: {e}", dns.key_name))?;
    TSigner::new(dns.secret.0.clone(), alg, key_name, FUDGE).map_err(|e| e.to_string())
}

/// Sends a signed update and checks the signed answer.
async fn update(dns: &DnsUpdate, mut message: Message) -> Result<(), String> {
    message.metadata.id = rand_id();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut verifier = message
        .finalize(&signer(dns)?, now)
        .map_err(|e| format!("signing the update: {e}"))?
        .ok_or("the update was not signed")?;
    let request = message.to_vec().map_err(|e| e.to_string())?;
    let bytes = exchange(&dns.server, &request).await?;
    let answer = Message::from_vec(&bytes).map_err(|e| format!("unreadable answer: {e}"))?;
    if answer.metadata.id != message.metadata.id {
        return Err("the answer is for another request".into());
    }
    let code = answer.metadata.response_code;
    if code != ResponseCode::NoError {
        let hint = match code {
            ResponseCode::NotAuth => {
                " (the server does not accept this TSIG key: check key_name, algorithm and secret, and the clock)"
            }
            ResponseCode::Refused => {
                " (the server refuses updates with this key for this name: check its ACL / update-policy)"
            }
            ResponseCode::NotZone => " (the name is not in the zone: set dns.zone)",
            _ => "",
        };
        return Err(format!("{} answered {code}{hint}", dns.server));
    }
    verifier
        .verify(&bytes)
        .map_err(|e| format!("the answer's TSIG does not verify: {e}"))?;
    Ok(())
}

/// The zone holding `name`: the owner of the SOA the server returns for it (in the answer
/// section, or in the authority section of its NXDOMAIN / NODATA answer).
async fn zone_of(dns: &DnsUpdate, name: &Name) -> Result<Name, String> {
    let answer = query(dns, name, RecordType::SOA).await?;
    answer
        .answers
        .iter()
        .chain(&answer.authorities)
        .find(|r| r.record_type() == RecordType::SOA)
        .map(|r| r.name.clone())
        .ok_or_else(|| {
            format!(
                "{} does not say which of its zones holds {name}; set dns.zone",
                dns.server
            )
        })
}

/// Waits until the server answers the record's value (a primary answers at once; a moment
/// for one that applies updates asynchronously).
async fn wait_visible(dns: &DnsUpdate, record: &Record) -> Result<(), String> {
    for _ in 0..50 {
        let answer = query(dns, &record.name, RecordType::TXT).await?;
        let seen = answer.answers.iter().any(|r| match &r.data {
            RData::TXT(t) => t.to_string() == record.value,
            _ => false,
        });
        if seen {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "{} accepted the update but does not answer the TXT record {} within 10 s",
        dns.server, record.name
    ))
}

async fn query(dns: &DnsUpdate, name: &Name, kind: RecordType) -> Result<Message, String> {
    let mut message = Message::query();
    message.metadata.id = rand_id();
    message.metadata.recursion_desired = false;
    message.add_query(Query::query(name.clone(), kind));
    let request = message.to_vec().map_err(|e| e.to_string())?;
    let bytes = exchange(&dns.server, &request).await?;
    let answer = Message::from_vec(&bytes).map_err(|e| format!("unreadable answer: {e}"))?;
    match answer.metadata.response_code {
        ResponseCode::NoError | ResponseCode::NXDomain => Ok(answer),
        code => Err(format!(
            "{} answered {code} to a {kind} query for {name}",
            dns.server
        )),
    }
}

/// One DNS exchange over TCP (RFC 1035 §4.2.2: each message behind its 2-byte length).
async fn exchange(server: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    let addr = if server
        .rsplit_once(':')
        .is_some_and(|(h, p)| p.parse::<u16>().is_ok() && (!h.contains(':') || h.ends_with(']')))
    {
        server.to_owned()
    } else {
        format!("{server}:53")
    };
    let work = async {
        let mut tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let len = u16::try_from(request.len()).map_err(|_| "the message is too large")?;
        let mut out = len.to_be_bytes().to_vec();
        out.extend_from_slice(request);
        tcp.write_all(&out).await.map_err(|e| e.to_string())?;
        let n = tcp.read_u16().await.map_err(|e| e.to_string())? as usize;
        let mut answer = vec![0; n];
        tcp.read_exact(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(answer)
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, work)
        .await
        .map_err(|_| {
            format!(
                "{addr} did not answer within {}s",
                EXCHANGE_TIMEOUT.as_secs()
            )
        })?
}

fn rand_id() -> u16 {
    let mut b = [0u8; 2];
    boring::rand::rand_bytes(&mut b).expect("BoringSSL's RNG");
    u16::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_is_validated_at_its_base_name() {
        assert_eq!(record_name("*.a.example"), "_acme-challenge.a.example");
        assert_eq!(record_name("a.example."), "_acme-challenge.a.example");
    }

    #[test]
    fn an_update_is_signed_with_the_configured_key() {
        let dns = DnsUpdate {
            server: "127.0.0.1:53".into(),
            zone: Some("a.example".into()),
            key_name: "acme-update".into(),
            algorithm: TsigAlgorithm::HmacSha256,
            secret: sluice_config::Secret(b"0123456789abcdef".to_vec()),
            propagation_delay: Duration::ZERO,
        };
        let record = Record {
            name: Name::from_ascii("_acme-challenge.a.example.").unwrap(),
            zone: Name::from_ascii("a.example.").unwrap(),
            value: "digest".into(),
        };
        let mut m = update_message::append(record.rrset(), record.zone.clone(), false, false);
        m.finalize(&signer(&dns).unwrap(), 1_700_000_000).unwrap();
        let bytes = m.to_vec().unwrap();
        // The server's check: the MAC verifies with the same key, and not with another.
        let same = signer(&dns).unwrap();
        assert!(same.verify_message_byte(&bytes, None, true).is_ok());
        let other = DnsUpdate {
            secret: sluice_config::Secret(b"another key here".to_vec()),
            ..dns
        };
        assert!(
            signer(&other)
                .unwrap()
                .verify_message_byte(&bytes, None, true)
                .is_err()
        );
    }
}
