//! Request collapsing: concurrent misses of one key make one upstream fetch.
//!
//! The first miss of a key becomes its leader and fetches; the others wait for the leader's
//! outcome and then look the store up again (the leader stored the response if it could).
//! A leader that goes away without finishing (its client left, it panicked) wakes the
//! waiters all the same, and the next of them becomes the leader: nobody waits on a fetch
//! that no longer runs. Waiters give up after `wait` and fetch on their own (NGINX's
//! `proxy_cache_lock_timeout` does the same), so a slow origin cannot hold them forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The fetches in flight, by key.
#[derive(Debug, Default)]
pub struct Collapser {
    in_flight: Mutex<HashMap<String, watch::Receiver<bool>>>,
}

/// What a miss should do.
#[derive(Debug)]
pub enum Turn {
    /// Fetch, store if possible, then drop the guard (which wakes the waiters).
    Lead(Leader),
    /// Another request fetched this key meanwhile (or gave up leading): look the store up
    /// again.
    Retry,
    /// Waited `wait` without an outcome: fetch on its own, and leave storing to the leader.
    Alone,
}

/// The leader of one key's fetch: dropping it ends the fetch for the waiters.
#[derive(Debug)]
pub struct Leader {
    key: String,
    done: watch::Sender<bool>,
    collapser: Arc<Collapser>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.collapser
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
        let _ = self.done.send(true);
    }
}

impl Collapser {
    /// A collapser shared by every route that caches.
    pub fn new() -> Arc<Collapser> {
        Arc::new(Collapser::default())
    }

    /// Keys being fetched now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// The lead of `key`'s fetch if nobody has it, without waiting (a background
    /// revalidation: one is enough, the others are not started).
    pub fn try_lead(self: &Arc<Self>, key: &str) -> Option<Leader> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(key) {
            return None;
        }
        let (tx, rx) = watch::channel(false);
        map.insert(key.to_owned(), rx);
        Some(Leader {
            key: key.to_owned(),
            done: tx,
            collapser: self.clone(),
        })
    }

    /// The turn of a miss of `key`: lead its fetch, or wait (at most `wait`) for the one
    /// in flight.
    pub async fn turn(self: &Arc<Self>, key: &str, wait: Duration) -> Turn {
        let mut rx = {
            let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(key) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(false);
                    map.insert(key.to_owned(), rx);
                    return Turn::Lead(Leader {
                        key: key.to_owned(),
                        done: tx,
                        collapser: self.clone(),
                    });
                }
            }
        };
        // The sender is dropped with the leader, after it sent `true`: either ends the wait.
        match tokio::time::timeout(wait, rx.wait_for(|done| *done)).await {
            Ok(_) => Turn::Retry,
            Err(_) => Turn::Alone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_hundred_concurrent_misses_make_one_fetch() {
        let c = Collapser::new();
        let fetches = Arc::new(AtomicUsize::new(0));
        let stored = Arc::new(Mutex::new(None::<String>));
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let (c, fetches, stored) = (c.clone(), fetches.clone(), stored.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    if let Some(v) = stored.lock().unwrap().clone() {
                        return v;
                    }
                    match c.turn("a.test/page", Duration::from_secs(10)).await {
                        Turn::Lead(guard) => {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            *stored.lock().unwrap() = Some("body".to_owned());
                            drop(guard);
                        }
                        Turn::Retry => {}
                        Turn::Alone => panic!("nobody should wait 10 s"),
                    }
                }
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), "body");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_leader_that_goes_away_hands_the_fetch_on() {
        let c = Collapser::new();
        let Turn::Lead(first) = c.turn("k", Duration::from_secs(5)).await else {
            panic!("the first miss leads");
        };
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.turn("k", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first); // its client left: nothing was stored
        assert!(matches!(waiter.await.unwrap(), Turn::Retry));
        assert!(
            matches!(c.turn("k", Duration::from_secs(5)).await, Turn::Lead(_)),
            "the next miss leads a new fetch"
        );
    }

    #[tokio::test]
    async fn waiters_give_up_on_a_slow_fetch() {
        let c = Collapser::new();
        let Turn::Lead(_slow) = c.turn("k", Duration::from_secs(5)).await else {
            panic!("the first miss leads");
        };
        assert!(matches!(
            c.turn("k", Duration::from_millis(30)).await,
            Turn::Alone
        ));
        assert!(matches!(
            c.turn("other", Duration::from_millis(30)).await,
            Turn::Lead(_)
        ));
    }

    #[tokio::test]
    async fn only_one_may_lead_without_waiting() {
        let c = Collapser::new();
        let first = c.try_lead("k").expect("nobody leads yet");
        assert!(c.try_lead("k").is_none());
        drop(first);
        assert!(c.try_lead("k").is_some());
    }
}
