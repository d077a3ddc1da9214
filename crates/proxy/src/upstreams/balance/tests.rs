//! The balancers that sample or hash: what they choose, not how fast.

use super::*;
use crate::hash::hash64;
use std::collections::HashMap;

fn servers(n: usize) -> Vec<Server> {
    (0..n)
        .map(|i| {
            Server::new(
                format!("10.0.{}.{}:80", i / 250, i % 250 + 1)
                    .parse()
                    .unwrap(),
                1,
            )
        })
        .collect()
}

fn cx(key: u64, now_ns: u64, in_flight: usize) -> PickCx<'static> {
    PickCx {
        now_ms: now_ns / 1_000_000,
        now_ns,
        key,
        tried: &[],
        in_flight,
    }
}

fn key(k: u64) -> u64 {
    hash64(0, &k.to_le_bytes())
}

fn set_active(s: &Server, n: usize) {
    s.active.store(n, Ordering::Relaxed);
}

#[test]
fn consistent_hash_keeps_keys_and_moves_only_a_dead_servers_keys() {
    let s = servers(10);
    let b = Balancer::new(Balance::ConsistentHash, &s, None);
    let before: Vec<usize> = (0..10_000)
        .map(|k| b.pick(&s, &cx(key(k), 0, 0)).unwrap())
        .collect();
    for k in 0..100 {
        assert_eq!(
            b.pick(&s, &cx(key(k), 0, 0)),
            Some(before[k as usize]),
            "stable"
        );
    }
    let mut per_server = HashMap::new();
    for &i in &before {
        *per_server.entry(i).or_insert(0) += 1;
    }
    assert_eq!(per_server.len(), 10, "keys spread over every server");
    assert!(
        per_server.values().all(|&c| (700..1300).contains(&c)),
        "{per_server:?}"
    );

    // Server 3 fails: only its keys move, and they spread over the others.
    assert!(s[3].failed(0, 1, 60_000));
    let mut moved_to = HashMap::new();
    for k in 0..10_000u64 {
        let now = b.pick(&s, &cx(key(k), 1_000_000, 0)).unwrap();
        if before[k as usize] == 3 {
            assert_ne!(now, 3);
            *moved_to.entry(now).or_insert(0) += 1;
        } else {
            assert_eq!(now, before[k as usize], "key {k} had a live server");
        }
    }
    assert!(
        moved_to.len() >= 7,
        "a dead server's keys spread: {moved_to:?}"
    );
}

#[test]
fn bounded_load_caps_a_hot_key_at_its_share() {
    let s = servers(10);
    let hot = key(42);
    // Unbounded: one hot key puts everything on one server.
    let b = Balancer::new(Balance::ConsistentHash, &s, None);
    let home = b.pick(&s, &cx(hot, 0, 0)).unwrap();
    for in_flight in 0..100 {
        let i = b.pick(&s, &cx(hot, 0, in_flight)).unwrap();
        assert_eq!(i, home);
        s[i].active.fetch_add(1, Ordering::Relaxed);
    }
    assert_eq!(s[home].active.load(Ordering::Relaxed), 100);

    // Bounded at 1.25: the same 100 requests in flight, no server above ceil(1.25 × mean).
    let s = servers(10);
    let b = Balancer::new(Balance::ConsistentHash, &s, Some(1.25));
    for in_flight in 0..100 {
        let i = b.pick(&s, &cx(hot, 0, in_flight)).unwrap();
        s[i].active.fetch_add(1, Ordering::Relaxed);
    }
    let loads: Vec<usize> = s.iter().map(|x| x.active.load(Ordering::Relaxed)).collect();
    assert!(
        loads.iter().all(|&l| l <= 13),
        "ceil(1.25 × 10) = 13: {loads:?}"
    );
    assert_eq!(
        loads[home], 13,
        "the key's own server fills to its bound first: {loads:?}"
    );
    // Once the load drains, the key goes home again.
    for x in &s {
        set_active(x, 0);
    }
    assert_eq!(b.pick(&s, &cx(hot, 0, 0)), Some(home));
}

#[test]
fn least_conn_in_a_large_group_prefers_idle_servers() {
    // Server i has i requests in flight. Two random choices pick a load of about n/3 on
    // average; a random pick would average n/2.
    let s = servers(100);
    for (i, x) in s.iter().enumerate() {
        set_active(x, i);
    }
    let b = Balancer::new(Balance::LeastConn, &s, None);
    let picks = 10_000;
    let total: usize = (0..picks).map(|_| b.pick(&s, &cx(0, 0, 0)).unwrap()).sum();
    let mean = total as f64 / picks as f64;
    assert!(mean < 40.0, "mean load picked {mean}");
    assert!(mean > 25.0, "still a sample, not a scan: {mean}");
}

#[test]
fn least_conn_skips_down_and_tried_servers_in_a_large_group() {
    let s = servers(40);
    let b = Balancer::new(Balance::LeastConn, &s, None);
    for x in &s[..39] {
        assert!(x.failed(0, 1, 60_000));
    }
    for _ in 0..50 {
        assert_eq!(
            b.pick(&s, &cx(0, 1_000_000, 0)),
            Some(39),
            "the one server up"
        );
    }
    let tried = [39];
    let c = PickCx {
        tried: &tried,
        ..cx(0, 1_000_000, 0)
    };
    let i = b.pick(&s, &c).unwrap();
    assert_ne!(
        i, 39,
        "fails open onto a server marked down, never the tried one"
    );
}

#[test]
fn peak_ewma_avoids_a_slow_server_until_its_estimate_decays() {
    let s = servers(3);
    let b = Balancer::new(Balance::PeakEwma, &s, None);
    let t0 = 1_000_000_000;
    s[0].observe_latency(t0, 50_000_000); // 50 ms
    s[1].observe_latency(t0, 1_000_000); // 1 ms
    s[2].observe_latency(t0, 2_000_000); // 2 ms
    let picks: Vec<usize> = (0..30)
        .map(|_| b.pick(&s, &cx(0, t0, 0)).unwrap())
        .collect();
    assert!(
        picks.iter().all(|&i| i == 1),
        "the fastest idle server: {picks:?}"
    );
    // Busy: 1 ms × 3 in flight costs more than 2 ms × 1.
    set_active(&s[1], 2);
    assert_eq!(b.pick(&s, &cx(0, t0, 0)), Some(2));
    // A peak replaces the estimate at once; a fast sample averages in.
    s[2].observe_latency(t0, 80_000_000);
    assert!(s[2].ewma_at(t0) >= 80e6);
    s[2].observe_latency(t0 + 1_000_000_000, 1_000_000);
    assert!(
        s[2].ewma_at(t0 + 1_000_000_000) > 60e6,
        "one fast sample does not erase a peak"
    );
    // A minute later the others have fresh samples while the slow server, unheard from,
    // has decayed toward 0: it gets tried again, so a recovered server is found.
    let t1 = t0 + 60_000_000_000;
    set_active(&s[1], 0);
    s[1].observe_latency(t1, 1_000_000);
    s[2].observe_latency(t1, 2_000_000);
    assert!(s[0].ewma_at(t1) < 1e6);
    assert_eq!(b.pick(&s, &cx(0, t1, 0)), Some(0));
}

#[test]
fn peak_ewma_samples_in_a_large_group() {
    let s = servers(200);
    let b = Balancer::new(Balance::PeakEwma, &s, None);
    let t0 = 1_000_000_000;
    // Half of the servers are slow.
    for (i, x) in s.iter().enumerate() {
        x.observe_latency(t0, if i < 100 { 40_000_000 } else { 1_000_000 });
    }
    let slow = (0..10_000)
        .filter(|_| b.pick(&s, &cx(0, t0, 0)).unwrap() < 100)
        .count();
    // Both samples slow: one time in four.
    assert!(
        (1_800..3_200).contains(&slow),
        "{slow} of 10,000 picks went to slow servers"
    );
}

#[test]
fn round_robin_steps_over_down_servers_without_a_scan_of_the_rest() {
    let s = servers(2_000);
    let b = Balancer::new(Balance::RoundRobin, &s, None);
    assert!(s[1].failed(0, 1, 60_000));
    let picks: Vec<usize> = (0..4)
        .map(|_| b.pick(&s, &cx(0, 1_000_000, 0)).unwrap())
        .collect();
    assert_eq!(picks, [0, 2, 2, 3]);
}
