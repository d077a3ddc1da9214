//! The fuzz target's driver (`fuzzing.rs`) on inputs from a fixed seed, so that CI runs
//! thousands of API calls with odd arguments without libFuzzer.

use crate::fuzzing::Driver;

#[test]
fn random_api_calls_leave_the_state_serving() {
    let driver = Driver::new();
    let mut x: u64 = 0x5eed_1a20_2024;
    let mut next = move || {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    // About 600 programs, ten calls each on average: several thousand calls.
    for _ in 0..600 {
        let len = 16 + (next() % 600) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        driver.run(&input);
    }
    // The seeds the fuzz target starts from, each a program too.
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/api");
    for entry in std::fs::read_dir(seeds).expect("fuzz/seeds/api") {
        driver.run(&std::fs::read(entry.unwrap().path()).unwrap());
    }
}
