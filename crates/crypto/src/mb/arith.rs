//! Multi-precision arithmetic in 52-bit limbs, written once for any [`Lanes`].
//!
//! Numbers are `[L; N]`: limb `j` of every lane's number in `a[j]`, least significant
//! first, each limb below 2^52 between operations (the multiplier reads only 52 bits).
//! Accumulators are 64 bits wide, so a limb can take a few hundred 52-bit additions
//! before it must be normalized: the Montgomery loops normalize once, at the end.
//!
//! Everything here is `#[inline(always)]`: the IFMA instantiation must be inlined whole
//! into the `#[target_feature]` entry points at the bottom, or the intrinsics would be
//! compiled for a CPU without them.
//!
//! **Constant time.** No branch and no memory index depends on a secret: loops run over
//! public sizes (limbs, windows), table entries are picked by scanning the whole table with
//! masked moves ([`select`]), conditional subtractions are masked ([`reduce_once`]), and
//! the Montgomery multiplication is "almost Montgomery" (results below 2m, no data-dependent
//! final subtraction), which works because every modulus leaves at least four spare bits
//! in its limbs (16m < R).

use super::lanes::{Lanes, MASK52};

/// Exponent bits per window of the fixed-window exponentiation.
pub(crate) const WINDOW: usize = 4;
const TABLE: usize = 1 << WINDOW;

/// Carries each limb's excess into the next: limbs back to 52 bits (the value must fit).
#[inline(always)]
pub(crate) fn normalize<L: Lanes, const N: usize>(a: &mut [L; N]) {
    let mask = L::splat(MASK52);
    for j in 0..N - 1 {
        let c = a[j].shr52();
        a[j] = a[j].and(mask);
        a[j + 1] = a[j + 1].add(c);
    }
}

/// [`normalize`] for limbs that may be negative (differences); the value must be >= 0.
#[inline(always)]
fn normalize_signed<L: Lanes, const N: usize>(a: &mut [L; N]) {
    let mask = L::splat(MASK52);
    for j in 0..N - 1 {
        let c = a[j].sar52();
        a[j] = a[j].and(mask);
        a[j + 1] = a[j + 1].add(c);
    }
}

/// The Montgomery multiplication below, fully unrolled for one size: every index is a
/// literal, so the compiler keeps the accumulators in registers and the per-word shift is
/// a renaming (as a loop, the shift became a `memmove` and the accumulators lived in
/// memory: a third of the time).
macro_rules! unrolled_mont_mul {
    ($name:ident, $n:literal, $last:literal) => {
        #[inline(always)]
        #[cfg_attr(not(target_arch = "x86_64"), expect(dead_code, reason = "IFMA only"))]
        pub(super) fn $name<L: Lanes>(a: &[L; $n], b: &[L; $n], m: &[L; $n], k0: L) -> [L; $n] {
            let zero = L::splat(0);
            let mut acc = [zero; $n];
            seq_macro::seq!(I in 0..$n {
                let ai = a[I];
                seq_macro::seq!(J in 0..$n {
                    acc[J] = acc[J].madd52lo(ai, b[J]);
                });
                let q = zero.madd52lo(acc[0], k0);
                seq_macro::seq!(J in 0..$n {
                    acc[J] = acc[J].madd52lo(q, m[J]);
                });
                let top = zero.madd52hi(ai, b[$last]).madd52hi(q, m[$last]);
                seq_macro::seq!(J in 0..$last {
                    acc[J + 1] = acc[J + 1].madd52hi(ai, b[J]).madd52hi(q, m[J]);
                });
                let carry = acc[0].shr52();
                seq_macro::seq!(J in 0..$last {
                    acc[J] = acc[J + 1];
                });
                acc[$last] = top;
                acc[0] = acc[0].add(carry);
            });
            normalize(&mut acc);
            acc
        }
    };
}

/// Montgomery reduction of a full product `t` (2N accumulators), word by word, unrolled:
/// `t / R mod m`, below 2m. The second half of the squaring and multiplication below.
macro_rules! unrolled_redc {
    ($name:ident, $n:literal, $n2:literal) => {
        #[inline(always)]
        #[cfg_attr(not(target_arch = "x86_64"), expect(dead_code, reason = "IFMA only"))]
        pub(super) fn $name<L: Lanes>(t: &mut [L; $n2], m: &[L; $n], k0: L) -> [L; $n] {
            let zero = L::splat(0);
            seq_macro::seq!(I in 0..$n {
                let q = zero.madd52lo(t[I], k0);
                seq_macro::seq!(J in 0..$n {
                    t[I + J] = t[I + J].madd52lo(q, m[J]);
                    t[I + J + 1] = t[I + J + 1].madd52hi(q, m[J]);
                });
                t[I + 1] = t[I + 1].add(t[I].shr52());
            });
            let mut out = [zero; $n];
            seq_macro::seq!(J in 0..$n {
                out[J] = t[$n + J];
            });
            normalize(&mut out);
            out
        }
    };
}

unrolled_redc!(redc20, 20, 40);
unrolled_redc!(redc30, 30, 60);
unrolled_redc!(redc40, 40, 80);

/// Almost-Montgomery squaring, unrolled (separated operand scanning): the cross products
/// `a_i a_j` (i < j) once into 2N accumulators, doubled, the squares `a_i^2` added, then the
/// Montgomery reduction word by word. 1,220 IFMA instead of the multiplication's 1,620 for
/// 20 limbs. The result equals `mont_mul(a, a)` bit for bit: the Montgomery quotient's
/// digits depend only on the value at each position, whatever the order of the additions.
macro_rules! unrolled_mont_sqr {
    ($name:ident, $redc:ident, $n:literal, $n2:literal) => {
        #[inline(always)]
        #[cfg_attr(not(target_arch = "x86_64"), expect(dead_code, reason = "IFMA only"))]
        pub(super) fn $name<L: Lanes>(a: &[L; $n], m: &[L; $n], k0: L) -> [L; $n] {
            let zero = L::splat(0);
            let mut t = [zero; $n2];
            seq_macro::seq!(I in 0..$n {
                seq_macro::seq!(J in 0..$n {
                    if J > I {
                        t[I + J] = t[I + J].madd52lo(a[I], a[J]);
                        t[I + J + 1] = t[I + J + 1].madd52hi(a[I], a[J]);
                    }
                });
            });
            seq_macro::seq!(K in 0..$n2 {
                t[K] = t[K].shl1();
            });
            seq_macro::seq!(I in 0..$n {
                t[2 * I] = t[2 * I].madd52lo(a[I], a[I]);
                t[2 * I + 1] = t[2 * I + 1].madd52hi(a[I], a[I]);
            });
            $redc(&mut t, m, k0)
        }
    };
}

unrolled_mont_sqr!(mont_sqr20, redc20, 20, 40);
unrolled_mont_sqr!(mont_sqr30, redc30, 30, 60);
unrolled_mont_sqr!(mont_sqr40, redc40, 40, 80);

/// Almost-Montgomery multiplication as [`unrolled_mont_sqr`] does it: the whole product
/// first (its 800 IFMA are independent of each other), then the reduction. Measured on
/// 20 limbs against the operand-scanning version above, whose every word waits for its
/// Montgomery digit.
macro_rules! unrolled_mont_mul_sos {
    ($name:ident, $redc:ident, $n:literal, $n2:literal) => {
        #[inline(always)]
        #[cfg_attr(not(target_arch = "x86_64"), expect(dead_code, reason = "IFMA only"))]
        pub(super) fn $name<L: Lanes>(a: &[L; $n], b: &[L; $n], m: &[L; $n], k0: L) -> [L; $n] {
            let zero = L::splat(0);
            let mut t = [zero; $n2];
            seq_macro::seq!(I in 0..$n {
                seq_macro::seq!(J in 0..$n {
                    t[I + J] = t[I + J].madd52lo(a[I], b[J]);
                    t[I + J + 1] = t[I + J + 1].madd52hi(a[I], b[J]);
                });
            });
            $redc(&mut t, m, k0)
        }
    };
}

unrolled_mont_mul_sos!(mont_mul_sos20, redc20, 20, 40);

unrolled_mont_mul!(mont_mul30, 30, 29);
unrolled_mont_mul!(mont_mul40, 40, 39);

/// Almost-Montgomery multiplication: `a * b / R mod m`, below 2m, for `a * b < m * R`
/// (`R = 2^(52 N)`), word by word (coarsely integrated operand scanning). The primes'
/// sizes (20, 30, 40 limbs) run unrolled; the modulus sizes (a few per operation) as loops.
#[inline(always)]
pub(crate) fn mont_mul<L: Lanes, const N: usize>(
    a: &[L; N],
    b: &[L; N],
    m: &[L; N],
    k0: L,
) -> [L; N] {
    let mut out = [L::splat(0); N];
    mont_mul_to(a, b, m, k0, &mut out);
    out
}

/// [`mont_mul`] into `out` (the unrolled sizes write there directly: returning 1.3 KiB
/// arrays by value cost 7% of the time in copies).
#[inline(always)]
fn mont_mul_to<L: Lanes, const N: usize>(
    a: &[L; N],
    b: &[L; N],
    m: &[L; N],
    k0: L,
    out: &mut [L; N],
) {
    if !L::mont_mul_unrolled(a, b, m, k0, out) {
        *out = mont_mul_rolled(a, b, m, k0);
    }
}

/// [`mont_mul`] as loops (sizes without an unrolled version, and the reference).
#[inline(always)]
fn mont_mul_rolled<L: Lanes, const N: usize>(a: &[L; N], b: &[L; N], m: &[L; N], k0: L) -> [L; N] {
    let zero = L::splat(0);
    let mut acc = [zero; N];
    let mut top = zero;
    for ai in a.iter().copied() {
        for j in 0..N {
            acc[j] = acc[j].madd52lo(ai, b[j]);
        }
        // acc[0] + q * m[0] = 0 mod 2^52.
        let q = zero.madd52lo(acc[0], k0);
        for j in 0..N {
            acc[j] = acc[j].madd52lo(q, m[j]);
        }
        for j in 0..N - 1 {
            acc[j + 1] = acc[j + 1].madd52hi(ai, b[j]).madd52hi(q, m[j]);
        }
        top = top.madd52hi(ai, b[N - 1]).madd52hi(q, m[N - 1]);
        // acc[0] is a multiple of 2^52 now: divide by 2^52 by moving every limb down.
        let carry = acc[0].shr52();
        for j in 0..N - 1 {
            acc[j] = acc[j + 1];
        }
        acc[N - 1] = top;
        top = zero;
        acc[0] = acc[0].add(carry);
    }
    normalize(&mut acc);
    acc
}

/// `a * a / R mod m`, below 2m.
#[inline(always)]
pub(crate) fn mont_sqr<L: Lanes, const N: usize>(a: &[L; N], m: &[L; N], k0: L) -> [L; N] {
    let mut out = [L::splat(0); N];
    mont_sqr_to(a, m, k0, &mut out);
    out
}

/// [`mont_sqr`] into `out`.
#[inline(always)]
fn mont_sqr_to<L: Lanes, const N: usize>(a: &[L; N], m: &[L; N], k0: L, out: &mut [L; N]) {
    if !L::mont_sqr_unrolled(a, m, k0, out) {
        mont_mul_to(a, a, m, k0, out);
    }
}

/// `a * b` in full (`M = 2 N` limbs).
#[inline(always)]
fn mul_wide<L: Lanes, const N: usize, const M: usize>(a: &[L; N], b: &[L; N]) -> [L; M] {
    const { assert!(M == 2 * N) };
    let mut acc = [L::splat(0); M];
    for i in 0..N {
        for j in 0..N {
            acc[i + j] = acc[i + j].madd52lo(a[i], b[j]);
            acc[i + j + 1] = acc[i + j + 1].madd52hi(a[i], b[j]);
        }
    }
    normalize(&mut acc);
    acc
}

/// `a mod m` for `a < 2m`: `a - m` where that is not negative, masked.
#[inline(always)]
pub(crate) fn reduce_once<L: Lanes, const N: usize>(a: &[L; N], m: &[L; N]) -> [L; N] {
    let mask = L::splat(MASK52);
    let mut t = [L::splat(0); N];
    let mut borrow = L::splat(0);
    for j in 0..N {
        let v = a[j].sub(m[j]).add(borrow);
        borrow = v.sar52();
        t[j] = v.and(mask);
    }
    // borrow is -1 in the lanes where a < m: keep a there.
    let mut out = t;
    for j in 0..N {
        out[j] = t[j].select_neg(borrow, a[j]);
    }
    out
}

/// `table[idx]` per lane, reading every entry (the index is secret).
///
/// Limb by limb: every entry's limb blended into one register (a masked move each), then
/// stored once. Entry by entry (the natural order) kept all `N` limbs live across the
/// entries; as an iterator (`.iter().enumerate().skip(1)`) the loop called an out-of-line
/// `next` that spilled them around every call: a fifth of the kernel's time went to those
/// spills. (Masks computed once and or-ed in with `vpternlogq` measured slower.)
#[inline(always)]
fn select<L: Lanes, const N: usize>(table: &[[L; N]; TABLE], idx: L, out: &mut [L; N]) {
    for j in 0..N {
        let mut v = table[0][j];
        let mut k = 1;
        while k < TABLE {
            v = v.select_eq(idx, k as u64, table[k][j]);
            k += 1;
        }
        out[j] = v;
    }
}

/// `x^e * R mod m` (below 2m) from `x_r = x * R mod m` (below 4m) and `one_r = R mod m`;
/// `windows` holds `e`'s [`WINDOW`]-bit digits, most significant first, per lane.
#[inline(always)]
fn mod_exp<L: Lanes, const N: usize>(
    x_r: &[L; N],
    one_r: &[L; N],
    windows: &[L],
    m: &[L; N],
    k0: L,
) -> [L; N] {
    let mut table = [[L::splat(0); N]; TABLE];
    table[0] = *one_r;
    table[1] = *x_r;
    for k in 2..TABLE {
        table[k] = mont_mul(&table[k - 1], x_r, m, k0);
    }
    // Two buffers used in turn (swapping references, not 1.3 KiB arrays).
    let mut x = [L::splat(0); N];
    let mut y = [L::splat(0); N];
    let mut t = [L::splat(0); N];
    select(&table, windows[0], &mut x);
    let (mut acc, mut next) = (&mut x, &mut y);
    for &w in &windows[1..] {
        for _ in 0..WINDOW {
            mont_sqr_to(acc, m, k0, next);
            std::mem::swap(&mut acc, &mut next);
        }
        select(&table, w, &mut t);
        mont_mul_to(acc, &t, m, k0, next);
        std::mem::swap(&mut acc, &mut next);
    }
    *acc
}

/// One lane's key, precomputed in limbs (see `super::key`).
pub(crate) struct KeyLimbs {
    pub(crate) n: Vec<u64>,
    pub(crate) k0_n: u64,
    pub(crate) p: Half,
    pub(crate) q: Half,
    /// `q^-1 * R_p mod p`.
    pub(crate) qinv_r: Vec<u64>,
    /// `R_n^2 mod n`, and the public exponent: the check before release.
    pub(crate) r2_n: Vec<u64>,
    pub(crate) e: u64,
}

/// One CRT half: a prime, its private exponent as windows, and its Montgomery constants.
pub(crate) struct Half {
    pub(crate) m: Vec<u64>,
    pub(crate) k0: u64,
    /// `R mod m`, `R^2 mod m`, `R^3 mod m`.
    pub(crate) one: Vec<u64>,
    pub(crate) r2: Vec<u64>,
    pub(crate) r3: Vec<u64>,
    /// The exponent's windows, most significant first.
    pub(crate) windows: Vec<u64>,
}

/// A base-blinding pair in Montgomery form mod n: `r^e * R_n` and `r^-1 * R_n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blinding {
    pub(crate) a: Vec<u64>,
    pub(crate) ai: Vec<u64>,
}

/// One lane's work.
pub(crate) struct LaneIn<'a> {
    pub(crate) key: &'a KeyLimbs,
    /// The input (below n), `NN` limbs.
    pub(crate) c: &'a [u64],
    pub(crate) blinding: &'a Blinding,
}

/// One lane's result: `c^d mod n`, and the blinding pair to use next (both squared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneOut {
    pub(crate) s: Vec<u64>,
    pub(crate) next: Blinding,
}

/// Limb `j` of every lane (the last lane repeated into unused ones).
#[inline(always)]
fn gather<'a, T, L: Lanes, const N: usize>(
    lanes: &'a [T],
    f: impl Fn(&'a T) -> &'a [u64],
) -> [L; N] {
    let mut buf = [0u64; 8];
    let mut out = [L::splat(0); N];
    for (j, o) in out.iter_mut().enumerate() {
        for (l, b) in buf.iter_mut().enumerate().take(L::LANES) {
            *b = f(&lanes[l.min(lanes.len() - 1)])[j];
        }
        *o = L::load(&buf);
    }
    out
}

#[inline(always)]
fn gather1<T, L: Lanes>(lanes: &[T], f: impl Fn(&T) -> u64) -> L {
    let mut buf = [0u64; 8];
    for (l, b) in buf.iter_mut().enumerate().take(L::LANES) {
        *b = f(&lanes[l.min(lanes.len() - 1)]);
    }
    L::load(&buf)
}

#[inline(always)]
fn scatter<L: Lanes, const N: usize>(
    a: &[L; N],
    lanes: usize,
    mut put: impl FnMut(usize, usize, u64),
) {
    let mut buf = [0u64; 8];
    for (j, v) in a.iter().enumerate() {
        v.store(&mut buf);
        for (l, &x) in buf.iter().enumerate().take(lanes) {
            put(l, j, x);
        }
    }
}

/// `x^d_half * R mod m` reduced to `[0, m)` and out of Montgomery form, from the blinded
/// input split at `R_half` (`c = hi * R + lo`).
#[inline(always)]
fn crt_half<L: Lanes, const NP: usize>(
    lanes: &[LaneIn<'_>],
    half: fn(&KeyLimbs) -> &Half,
    lo: &[L; NP],
    hi: &[L; NP],
) -> [L; NP] {
    let m: [L; NP] = gather(lanes, |l| &half(l.key).m);
    let k0 = gather1::<_, L>(lanes, |l| half(l.key).k0);
    let r2: [L; NP] = gather(lanes, |l| &half(l.key).r2);
    let r3: [L; NP] = gather(lanes, |l| &half(l.key).r3);
    let one: [L; NP] = gather(lanes, |l| &half(l.key).one);
    // c * R = hi * R^2 + lo * R (mod m); each term below 2m, the sum below 4m.
    let a = mont_mul(hi, &r3, &m, k0);
    let b = mont_mul(lo, &r2, &m, k0);
    let mut x = [L::splat(0); NP];
    for j in 0..NP {
        x[j] = a[j].add(b[j]);
    }
    normalize(&mut x);
    let nwin = half(lanes[0].key).windows.len();
    let mut windows = Vec::with_capacity(nwin);
    for w in 0..nwin {
        windows.push(gather1::<_, L>(lanes, |l| half(l.key).windows[w]));
    }
    let y = mod_exp(&x, &one, &windows, &m, k0);
    let mut unit = [L::splat(0); NP];
    unit[0] = L::splat(1);
    let y = mont_mul(&y, &unit, &m, k0);
    reduce_once(&y, &m)
}

/// The RSA private-key operation on up to `L::LANES` lanes: base blinding, both CRT
/// halves, Garner's recombination, unblinding. `NP` limbs per prime, `NN = 2 NP` for n.
#[inline(always)]
pub(crate) fn private<L: Lanes, const NP: usize, const NN: usize>(
    lanes: &[LaneIn<'_>],
) -> Vec<LaneOut> {
    const { assert!(NN == 2 * NP) };
    let n: [L; NN] = gather(lanes, |l| &l.key.n);
    let k0n = gather1::<_, L>(lanes, |l| l.key.k0_n);
    let c: [L; NN] = gather(lanes, |l| l.c);
    let a: [L; NN] = gather(lanes, |l| &l.blinding.a);
    let ai: [L; NN] = gather(lanes, |l| &l.blinding.ai);
    // Blind: c * r^e (below 2n), and square the pair for next time.
    let cb = mont_mul(&c, &a, &n, k0n);
    let a2 = mont_sqr(&a, &n, k0n);
    let ai2 = mont_sqr(&ai, &n, k0n);
    let mut lo = [L::splat(0); NP];
    let mut hi = [L::splat(0); NP];
    lo.copy_from_slice(&cb[..NP]);
    hi.copy_from_slice(&cb[NP..]);
    let m1 = crt_half::<L, NP>(lanes, |k| &k.p, &lo, &hi);
    let m2 = crt_half::<L, NP>(lanes, |k| &k.q, &lo, &hi);
    // Garner: h = (m1 - m2) q^-1 mod p; m2 < q < 2p, so m1 + 2p - m2 is positive.
    let p: [L; NP] = gather(lanes, |l| &l.key.p.m);
    let k0p = gather1::<_, L>(lanes, |l| l.key.p.k0);
    let mut d = [L::splat(0); NP];
    for j in 0..NP {
        d[j] = m1[j].add(p[j].shl1()).sub(m2[j]);
    }
    normalize_signed(&mut d);
    let qinv_r: [L; NP] = gather(lanes, |l| &l.key.qinv_r);
    let h = mont_mul(&d, &qinv_r, &p, k0p);
    // s' = m2 + h q, below 3n.
    let q: [L; NP] = gather(lanes, |l| &l.key.q.m);
    let mut s: [L; NN] = mul_wide(&h, &q);
    for j in 0..NP {
        s[j] = s[j].add(m2[j]);
    }
    normalize(&mut s);
    // Unblind: s' * r^-1 (below 2n), then into [0, n).
    let s = mont_mul(&s, &ai, &n, k0n);
    let s = reduce_once(&s, &n);

    let k = lanes.len();
    let mut out = vec![
        LaneOut {
            s: vec![0; NN],
            next: Blinding {
                a: vec![0; NN],
                ai: vec![0; NN],
            },
        };
        k
    ];
    scatter(&s, k, |l, j, x| out[l].s[j] = x);
    scatter(&a2, k, |l, j, x| out[l].next.a[j] = x);
    scatter(&ai2, k, |l, j, x| out[l].next.ai[j] = x);
    out
}

/// The portable reference: one lane at a time in `u64`.
pub(crate) fn private_reference<const NP: usize, const NN: usize>(
    lanes: &[LaneIn<'_>],
) -> Vec<LaneOut> {
    lanes
        .chunks(1)
        .flat_map(private::<super::lanes::Scalar, NP, NN>)
        .collect()
}

/// One lane of the check before release: does `s^e mod n` give back the input `c`?
pub(crate) struct CheckIn<'a> {
    pub(crate) key: &'a KeyLimbs,
    pub(crate) s: &'a [u64],
    pub(crate) c: &'a [u64],
}

/// The Lenstra check for every lane, in the lanes: `s^e mod n == c` with the public
/// exponent `e` (the same for every lane of the call). RSA's public map is a permutation,
/// so a wrong `s` (a fault, a bug) cannot pass: it costs 17 multiplications mod n for
/// e = 65537, a tenth of what aws-lc's verification of eight signatures costs.
#[inline(always)]
pub(crate) fn public_check<L: Lanes, const NN: usize>(lanes: &[CheckIn<'_>], e: u64) -> Vec<bool> {
    let n: [L; NN] = gather(lanes, |l| &l.key.n);
    let k0 = gather1::<_, L>(lanes, |l| l.key.k0_n);
    let r2: [L; NN] = gather(lanes, |l| &l.key.r2_n);
    let s: [L; NN] = gather(lanes, |l| l.s);
    let s_r = mont_mul(&s, &r2, &n, k0);
    let mut acc = s_r;
    // Square and multiply over e's bits below the top one (e is public).
    let top = 63 - e.max(1).leading_zeros();
    for bit in (0..top).rev() {
        acc = mont_sqr(&acc, &n, k0);
        if (e >> bit) & 1 == 1 {
            acc = mont_mul(&acc, &s_r, &n, k0);
        }
    }
    let mut unit = [L::splat(0); NN];
    unit[0] = L::splat(1);
    let v = reduce_once(&mont_mul(&acc, &unit, &n, k0), &n);
    let mut ok = vec![true; lanes.len()];
    scatter(&v, lanes.len(), |l, j, x| {
        if lanes[l].c.get(j) != Some(&x) {
            ok[l] = false;
        }
    });
    ok
}

/// [`public_check`] with the portable reference, one lane at a time.
pub(crate) fn public_check_reference<const NN: usize>(lanes: &[CheckIn<'_>], e: u64) -> Vec<bool> {
    lanes
        .chunks(1)
        .flat_map(|l| public_check::<super::lanes::Scalar, NN>(l, e))
        .collect()
}
