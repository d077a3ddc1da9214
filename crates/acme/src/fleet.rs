//! ACME in a fleet: gateways that serve the same names must not each order them (the CA's
//! rate limits, and a CA validating one gateway's challenge at another), so one gateway at a
//! time orders, every gateway answers its challenges, and every gateway serves the result.
//!
//! This crate knows no etcd: the fleet crate implements [`Coordinator`] on its etcd (a lease
//! held while ordering, challenge answers under that lease, the certificate sealed with the
//! fleet's keyring) and calls [`crate::answer`], [`crate::withdraw`] and [`adopt`] with what
//! it watches.

use crate::challenge::Answer;
use crate::storage::{Issued, write_private};
use boring::x509::X509;
use sluice_config::AcmeOrder;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

/// A boxed future, for the object-safe traits below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A certificate as the fleet shares it: its chain (PEM) and its key (PEM, unsealed).
pub type Shared = (String, Vec<u8>);

/// Where the gateways of a fleet agree on who orders a certificate.
pub trait Coordinator: Send + Sync + 'static {
    /// Makes this gateway the one ordering certificate `name`, until the returned turn is
    /// dropped (or this gateway dies and its lease lapses). `Ok(None)`: another gateway is
    /// ordering it now.
    fn acquire<'a>(&'a self, name: &'a str)
    -> BoxFuture<'a, Result<Option<Box<dyn Turn>>, String>>;

    /// The certificate the fleet holds for `name` (chain PEM, key PEM), if any: a gateway
    /// that joins, or whose configuration just gained the certificate, takes it rather than
    /// ordering another (the CA's rate limits count every order).
    fn shared<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Shared>, String>>;
}

/// One gateway's turn at ordering a certificate.
pub trait Turn: Send + Sync {
    /// Has every gateway give `answer` (withdrawn when the turn ends).
    fn publish<'a>(&'a self, answer: &'a Answer) -> BoxFuture<'a, Result<(), String>>;
    /// Gives every gateway the issued certificate: its chain (PEM) and key (PEM; the
    /// coordinator seals it).
    fn share<'a>(
        &'a self,
        chain_pem: &'a str,
        key_pem: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// The ACME orders of the configuration in force, by certificate name: where an adopted
/// certificate is stored.
#[derive(Clone, Default)]
pub struct Orders(Arc<RwLock<HashMap<String, AcmeOrder>>>);

impl Orders {
    pub(crate) fn set(&self, orders: HashMap<String, AcmeOrder>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = orders;
    }

    fn get(&self, name: &str) -> Option<AcmeOrder> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// Takes a certificate another gateway of the fleet obtained for ACME certificate `name`:
/// checked (its key, its names, newer than what is stored), stored and put in force.
/// Returns whether it was taken.
pub fn adopt(orders: &Orders, name: &str, chain_pem: &str, key_pem: &[u8]) -> Result<bool, String> {
    let Some(order) = orders.get(name) else {
        return Ok(false);
    };
    let chain = X509::stack_from_pem(chain_pem.as_bytes())
        .ok()
        .filter(|c| !c.is_empty())
        .ok_or("no PEM certificate")?;
    let key = boring::pkey::PKey::private_key_from_pem(key_pem).map_err(|_| "no PEM key")?;
    if !chain[0].public_key().is_ok_and(|pk| pk.public_eq(&key)) {
        return Err("the key does not belong to the certificate".into());
    }
    if !crate::storage::covers(&chain[0], &order.names) {
        // Ordered under other names (a gateway with an older configuration): not ours.
        return Ok(false);
    }
    let stored = crate::storage::stored_leaf(&order).and_then(|l| crate::storage::validity(&l));
    let offered = crate::storage::validity(&chain[0]).ok_or("no readable validity")?;
    if stored.is_some_and(|(_, until)| until >= offered.1) {
        return Ok(false);
    }
    write_private(&order.key_path(), key_pem)
        .and_then(|()| write_private(&order.cert_path(), chain_pem.as_bytes()))
        .map_err(|e| format!("storing in {}: {e}", order.dir.display()))?;
    crate::install::install(name, Issued { chain, key })?;
    tracing::info!(certificate = %name, not_after = offered.1, "took the ACME certificate another gateway of the fleet obtained");
    Ok(true)
}
