//! Lanes: independent operations side by side, one per 64-bit lane.
//!
//! The arithmetic in [`super::arith`] is written once against [`Lanes`] and instantiated
//! twice: with [`Scalar`] (one lane, plain `u64` and `u128`: the portable reference that
//! runs and is tested everywhere) and with `Ifma` (eight lanes of a 512-bit register, the
//! AVX-512 IFMA kernel, in `super::ifma`). Same limbs, same windows, same order of operations: the two must
//! give identical results, which the tests check.

/// Limbs are 52 bits: what `vpmadd52luq`/`vpmadd52huq` multiply.
pub(crate) const LIMB_BITS: u32 = 52;
pub(crate) const MASK52: u64 = (1 << LIMB_BITS) - 1;

/// One 64-bit value per lane. Every method is branch-free and indexes memory only by public
/// values; the ones that combine lanes under a condition ([`Lanes::select_eq`],
/// [`Lanes::select_neg`]) use masks, never branches.
pub(crate) trait Lanes: Copy {
    /// Operations computed together.
    const LANES: usize;
    /// The same value in every lane.
    fn splat(x: u64) -> Self;
    /// `src[0..LANES]`, one per lane.
    fn load(src: &[u64]) -> Self;
    /// Into `dst[0..LANES]`.
    fn store(self, dst: &mut [u64]);
    /// `self + low52((a mod 2^52) * (b mod 2^52))`, per lane (`vpmadd52luq`).
    fn madd52lo(self, a: Self, b: Self) -> Self;
    /// `self + high52((a mod 2^52) * (b mod 2^52))`, per lane (`vpmadd52huq`).
    fn madd52hi(self, a: Self, b: Self) -> Self;
    /// Wrapping addition.
    fn add(self, o: Self) -> Self;
    /// Wrapping subtraction.
    fn sub(self, o: Self) -> Self;
    /// Bitwise and.
    fn and(self, o: Self) -> Self;
    /// Logical shift right by 52: the carry out of a limb.
    fn shr52(self) -> Self;
    /// Arithmetic shift right by 52: the signed carry (borrow) out of a limb.
    fn sar52(self) -> Self;
    /// Shift left by one.
    fn shl1(self) -> Self;
    /// Per lane: `val` where `idx == k`, `self` elsewhere.
    fn select_eq(self, idx: Self, k: u64, val: Self) -> Self;
    /// Per lane: `val` where `cond` is negative as a signed value, `self` elsewhere.
    fn select_neg(self, cond: Self, val: Self) -> Self;
    /// `arith::mont_mul` unrolled for this size, where the lane type has it compiled.
    #[inline(always)]
    /// Returns whether it wrote `out`.
    fn mont_mul_unrolled<const N: usize>(
        _a: &[Self; N],
        _b: &[Self; N],
        _m: &[Self; N],
        _k0: Self,
        _out: &mut [Self; N],
    ) -> bool {
        false
    }
    /// `arith::mont_sqr` unrolled for this size, where the lane type has it compiled.
    #[inline(always)]
    /// Returns whether it wrote `out`.
    fn mont_sqr_unrolled<const N: usize>(
        _a: &[Self; N],
        _m: &[Self; N],
        _k0: Self,
        _out: &mut [Self; N],
    ) -> bool {
        false
    }
}

/// One lane in a `u64`: the portable reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scalar(pub(crate) u64);

impl Lanes for Scalar {
    const LANES: usize = 1;

    #[inline(always)]
    fn splat(x: u64) -> Self {
        Scalar(x)
    }
    #[inline(always)]
    fn load(src: &[u64]) -> Self {
        Scalar(src[0])
    }
    #[inline(always)]
    fn store(self, dst: &mut [u64]) {
        dst[0] = self.0;
    }
    #[inline(always)]
    fn madd52lo(self, a: Self, b: Self) -> Self {
        let p = u128::from(a.0 & MASK52) * u128::from(b.0 & MASK52);
        Scalar(self.0.wrapping_add(p as u64 & MASK52))
    }
    #[inline(always)]
    fn madd52hi(self, a: Self, b: Self) -> Self {
        let p = u128::from(a.0 & MASK52) * u128::from(b.0 & MASK52);
        Scalar(self.0.wrapping_add((p >> LIMB_BITS) as u64))
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Scalar(self.0.wrapping_add(o.0))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Scalar(self.0.wrapping_sub(o.0))
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        Scalar(self.0 & o.0)
    }
    #[inline(always)]
    fn shr52(self) -> Self {
        Scalar(self.0 >> LIMB_BITS)
    }
    #[inline(always)]
    fn sar52(self) -> Self {
        Scalar(((self.0 as i64) >> LIMB_BITS) as u64)
    }
    #[inline(always)]
    fn shl1(self) -> Self {
        Scalar(self.0 << 1)
    }
    #[inline(always)]
    fn select_eq(self, idx: Self, k: u64, val: Self) -> Self {
        let d = idx.0 ^ k;
        // All ones when d == 0: (d | -d) has its top bit set for any d != 0. The mask goes
        // through `black_box`: LLVM sees through the arithmetic and compiled the blend to
        // "if idx == k, copy the entry", a branch on the secret window that the memcheck test
        // (`reference_kernel_is_constant_time_under_memcheck`) caught.
        let mask = std::hint::black_box(((d | d.wrapping_neg()) >> 63).wrapping_sub(1));
        Scalar((self.0 & !mask) | (val.0 & mask))
    }
    #[inline(always)]
    fn select_neg(self, cond: Self, val: Self) -> Self {
        let mask = std::hint::black_box(((cond.0 as i64) >> 63) as u64);
        Scalar((self.0 & !mask) | (val.0 & mask))
    }
}
