//! Certificates that renew themselves: `[[certificate]] acme = { names = [...] }` ordered
//! from an ACME CA (RFC 8555) and renewed before they expire, in the background.
//!
//! One task per ACME certificate waits until its certificate is due (a placeholder at once,
//! an issued one `renew_before` its expiry), orders (challenges answered by the gateway's own
//! listeners: HTTP-01 by plain-HTTP ones, TLS-ALPN-01 by TLS ones), stores the result with
//! mode 0600 and swaps it into every listener that serves it ([`sluice_tls::live`]): no
//! reload, and the next handshake serves it. A failed order is logged, counted, shown on
//! `/status`, and retried with exponential back-off while the old certificate serves.
//!
//! The ACME protocol itself is `instant-acme`'s; keys and CSRs are BoringSSL's, as for every
//! other certificate.

mod ari;
mod challenge;
mod dns01;
mod fleet;
mod install;
mod order;
mod storage;

pub use challenge::{Answer, answer, withdraw};
pub use fleet::{BoxFuture, Coordinator, Orders, Shared, Turn, adopt};
use sluice_config::{AcmeOrder, Certificate, Snapshot};
use sluice_tls::{AcmeStatus, live};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The ACME certificates of the configuration in force, each with its task.
pub struct Manager {
    workers: HashMap<String, Worker>,
    /// Tasks that live as long as the manager (the fleet's follower).
    companions: Vec<JoinHandle<()>>,
    /// In a fleet: who orders. `None`: this gateway orders alone.
    coordinator: Option<Arc<dyn Coordinator>>,
    orders: Orders,
}

struct Worker {
    order: AcmeOrder,
    task: JoinHandle<()>,
}

impl Manager {
    /// Starts a task for each ACME certificate of `snapshot` (none: nothing runs); with a
    /// `coordinator`, a certificate is ordered only while this gateway holds the fleet's turn.
    pub fn start(snapshot: &Snapshot, coordinator: Option<Arc<dyn Coordinator>>) -> Self {
        let mut m = Manager {
            workers: HashMap::new(),
            companions: Vec::new(),
            coordinator,
            orders: Orders::default(),
        };
        m.update(snapshot);
        m
    }

    /// The orders in force, for [`adopt`]ing what another gateway of the fleet obtained.
    pub fn orders(&self) -> Orders {
        self.orders.clone()
    }

    /// Follows a new configuration: a certificate whose order changed starts over, one that
    /// is gone stops, one that is unchanged goes on undisturbed.
    pub fn update(&mut self, snapshot: &Snapshot) {
        let wanted: HashMap<&str, &Arc<Certificate>> = snapshot
            .certificates
            .iter()
            .filter(|c| c.acme.is_some())
            .map(|c| (c.name.as_str(), c))
            .collect();
        self.workers.retain(|name, w| {
            let keep = wanted
                .get(name.as_str())
                .and_then(|c| c.acme.as_deref())
                .is_some_and(|o| *o == w.order);
            if !keep {
                w.task.abort();
            }
            keep
        });
        // Before any task starts: a task's first move may be to adopt the fleet's certificate.
        self.orders.set(
            wanted
                .iter()
                .filter_map(|(n, c)| Some(((*n).to_owned(), c.acme.as_deref()?.clone())))
                .collect(),
        );
        for (name, cert) in wanted {
            if self.workers.contains_key(name) {
                continue;
            }
            let order = cert.acme.as_deref().cloned().expect("filtered above");
            let task = tokio::spawn(renew(
                cert.clone(),
                self.coordinator.clone(),
                self.orders.clone(),
            ));
            self.workers.insert(name.to_owned(), Worker { order, task });
        }
        let names: Vec<String> = self.workers.keys().cloned().collect();
        live().retain_status(&|n| names.iter().any(|k| k == n));
    }

    /// Runs `task` for as long as this manager (stopped with it).
    pub fn keep(&mut self, task: JoinHandle<()>) {
        self.companions.push(task);
    }

    /// Stops every task (the process is stopping, or a new one took over).
    pub fn stop(&mut self) {
        for t in self.companions.drain(..) {
            t.abort();
        }
        for (_, w) in self.workers.drain() {
            w.task.abort();
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One certificate's life: wait until due, order, install; on failure back off and retry.
async fn renew(cert: Arc<Certificate>, coordinator: Option<Arc<dyn Coordinator>>, orders: Orders) {
    let mut r = Renewal::new(&cert);
    loop {
        if r.wait_while_valid().await {
            continue;
        }
        let Some(turn) = r.fleet_turn(coordinator.as_deref(), &orders).await else {
            continue;
        };
        r.order(turn).await;
    }
}

/// What [`renew`] carries from one round to the next.
struct Renewal {
    name: String,
    order: AcmeOrder,
    /// The leaf the configuration loaded (none where a placeholder serves).
    loaded: Option<boring::x509::X509>,
    status: AcmeStatus,
    /// The renewal time last logged.
    announced: Option<i64>,
    ari: ari::Ari,
}

impl Renewal {
    fn new(cert: &Certificate) -> Renewal {
        let order = cert.acme.as_deref().cloned().expect("an ACME certificate");
        Renewal {
            name: cert.name.clone(),
            status: AcmeStatus {
                names: order.names.clone(),
                challenge: order.challenge.as_str(),
                ..AcmeStatus::default()
            },
            order,
            loaded: (!cert.placeholder).then(|| cert.chain[0].clone()),
            announced: None,
            ari: ari::Ari::default(),
        }
    }

    /// While the certificate that serves is not due: shows it as issued, asks the CA's
    /// renewal window and waits (a minute at most); `true` when it waited (look again),
    /// `false` when renewal is due.
    async fn wait_while_valid(&mut self) -> bool {
        let (name, order) = (&self.name, &self.order);
        // What serves now: what storage holds (this gateway's last order, or what another
        // gateway of the fleet obtained), else what the configuration loaded.
        let leaf = storage::stored_leaf(order).or_else(|| self.loaded.clone());
        let valid = leaf.as_ref().and_then(|l| storage::validity(l));
        let mut due = valid.map_or(0, |v| due(v, order.renew_before));
        // The CA's renewal window, where it offers one, may call for it sooner.
        if let Some(suggested) = leaf.as_ref().and_then(|l| self.ari.known(l)) {
            due = due.min(suggested);
        }
        self.status.not_after = valid.map(|v| v.1);
        let now = storage::now();
        if due <= now {
            return false;
        }
        self.status.state = "issued";
        self.status.next_attempt = Some(due);
        live().set_status(name, self.status.clone());
        if self.announced != Some(due) {
            self.announced = Some(due);
            tracing::info!(certificate = %name, renew_in_s = due - now, "ACME certificate is valid; renewal scheduled");
        }
        // Ask the CA's renewal window when that is due (after the status is shown: it is a
        // request to the CA); a window that calls for it sooner is taken at once.
        if let Some(leaf) = &leaf
            && (self.ari.refresh(order, leaf, now).await).is_some_and(|at| at < due)
        {
            return true;
        }
        // A minute at a time: in a fleet, another gateway may renew it meanwhile.
        tokio::time::sleep(Duration::from_secs((due - now).clamp(1, 60) as u64)).await;
        true
    }

    /// Due, in a fleet: a newer certificate the fleet already holds is taken instead (a
    /// gateway that joined, or whose configuration just gained this certificate), and only
    /// the gateway holding the turn orders. `Some(turn)` (`Some(None)` alone) where this
    /// gateway orders now; `None` where it took the fleet's certificate or waited for
    /// another gateway's order or after a failure (look again).
    async fn fleet_turn(
        &mut self,
        coordinator: Option<&dyn Coordinator>,
        orders: &Orders,
    ) -> Option<Option<Box<dyn Turn>>> {
        let Some(c) = coordinator else {
            return Some(None);
        };
        let name = &self.name;
        let taken = c.shared(name).await.and_then(|shared| match shared {
            Some((chain, key)) => adopt(orders, name, &chain, &key),
            None => Ok(false),
        });
        match taken {
            Ok(true) => return None,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(certificate = %name, error = %e, "cannot take the fleet's certificate; ordering")
            }
        }
        match c.acquire(name).await {
            Ok(Some(turn)) => Some(Some(turn)),
            Ok(None) => {
                self.status.state = "waiting";
                live().set_status(name, self.status.clone());
                tracing::debug!(certificate = %name, "another gateway of the fleet is ordering this certificate");
                tokio::time::sleep(self.order.settings.retry_min).await;
                None
            }
            Err(e) => {
                let error = format!("taking the fleet's turn: {e}");
                failed(name, &self.order, &mut self.status, error).await;
                None
            }
        }
    }

    /// Orders the certificate and installs it (holding the fleet's `turn`, where there is
    /// one); a failure is counted and backed off ([`failed`]).
    async fn order(&mut self, turn: Option<Box<dyn Turn>>) {
        let (name, order) = (&self.name, &self.order);
        self.status.state = "ordering";
        live().set_status(name, self.status.clone());
        tracing::info!(certificate = %name, names = ?order.names, challenge = order.challenge.as_str(), directory = %order.directory, "ordering an ACME certificate");
        let outcome = order::run(order, turn.as_deref(), self.ari.replaces())
            .await
            .and_then(|issued| install::install(name, issued));
        drop(turn);
        match outcome {
            Ok((_, not_after)) => {
                self.status.issued += 1;
                self.status.consecutive_failures = 0;
                self.status.last_error = None;
                self.status.last_issued = Some(storage::now());
                tracing::info!(certificate = %name, not_after, "ACME certificate issued and in force");
            }
            Err(e) => failed(name, order, &mut self.status, e).await,
        }
    }
}

/// A failed order (or turn): counted, shown, logged, then the back-off.
async fn failed(name: &str, order: &AcmeOrder, status: &mut AcmeStatus, error: String) {
    status.failures += 1;
    status.consecutive_failures += 1;
    status.last_error = Some(error.clone());
    let back_off = back_off(order, status.consecutive_failures);
    status.state = "retrying";
    status.next_attempt = Some(storage::now() + back_off.as_secs() as i64);
    live().set_status(name, status.clone());
    tracing::warn!(certificate = %name, error = %error, retry_in_s = back_off.as_secs_f64(), "ACME order failed; the certificate in force keeps serving");
    tokio::time::sleep(back_off).await;
}

/// When a certificate valid over `(from, until)` is renewed: `renew_before` its expiry, but
/// never in the first two thirds of its life, so that a short-lived certificate (Let's
/// Encrypt's six-day ones, a test CA's minutes) is not ordered again in a loop.
fn due((from, until): (i64, i64), renew_before: Duration) -> i64 {
    let margin = (renew_before.as_secs() as i64).min((until - from) / 3);
    until - margin
}

/// The wait after the `failures`-th failure in a row: `retry_min` doubled each time, at most
/// `retry_max`.
fn back_off(order: &AcmeOrder, failures: u32) -> Duration {
    let s = &order.settings;
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    s.retry_min.saturating_mul(factor).min(s.retry_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_renew_before_expiry_but_never_in_the_first_two_thirds_of_life() {
        let day = 86_400;
        // 90 days, renew 30 days before: day 60.
        assert_eq!(
            due((0, 90 * day), Duration::from_secs(30 * day as u64)),
            60 * day
        );
        // 90 days, renew 7 days before: day 83.
        assert_eq!(
            due((0, 90 * day), Duration::from_secs(7 * day as u64)),
            83 * day
        );
        // A six-day certificate with the 30-day default: day 4, not at once.
        assert_eq!(
            due((0, 6 * day), Duration::from_secs(30 * day as u64)),
            4 * day
        );
    }

    #[test]
    fn back_off_doubles_from_retry_min_up_to_retry_max() {
        let mut order = AcmeOrder {
            directory: "https://ca/dir".into(),
            email: None,
            names: vec!["a.example".into()],
            challenge: sluice_config::AcmeChallenge::Http01,
            ca_file: None,
            renew_before: Duration::from_secs(1),
            key_type: sluice_config::AcmeKeyType::EcdsaP256,
            dir: "/tmp/x".into(),
            settings: sluice_config::AcmeSettings::default(),
            dns: None,
            eab: None,
        };
        order.settings.retry_min = Duration::from_secs(60);
        order.settings.retry_max = Duration::from_secs(3600);
        let waits: Vec<u64> = (1..=8).map(|n| back_off(&order, n).as_secs()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(back_off(&order, u32::MAX).as_secs(), 3600);
    }
}
