//! The AVX-512 IFMA lanes: [`Ifma`] (eight lanes of a 512-bit register) and [`Ifma4`] (four
//! of a 256-bit one), their [`Lanes`] operations, the unrolled multiplications compiled once
//! each with the lane width's target features, and the kernels (`private_ifma`,
//! `public_check_ifma` and their four-lane forms) that run `super::arith`'s arithmetic on
//! them. Everything that names an IFMA type is here, so that `arith` is written against
//! [`Lanes`] alone and imports nothing back from the lanes.

use super::arith::{self, CheckIn, LaneIn, LaneOut};
use super::lanes::{LIMB_BITS, Lanes};
use std::arch::x86_64::*;

/// `Lanes::mont_mul_unrolled` and `mont_sqr_unrolled` through the `#[inline(never)]`
/// target-feature entry points of `$module` (one per size it has).
macro_rules! unrolled_entries {
    ($module:path, [$($n:literal => $mul:ident, $sqr:ident);*]) => {
        #[inline(always)]
        fn mont_mul_unrolled<const N: usize>(
            a: &[Self; N],
            b: &[Self; N],
            m: &[Self; N],
            k0: Self,
            out: &mut [Self; N],
        ) -> bool {
            use $module as entries;
            match N {
                $($n => {
                    // SAFETY: the CPU has the entry point's features (see the lane
                    // type); the sizes match (N is the literal).
                    unsafe {
                        entries::$mul(
                            a[..].try_into().expect("N"),
                            b[..].try_into().expect("N"),
                            m[..].try_into().expect("N"),
                            k0,
                            (&mut out[..]).try_into().expect("N"),
                        )
                    };
                    true
                })*
                _ => false,
            }
        }
        #[inline(always)]
        fn mont_sqr_unrolled<const N: usize>(
            a: &[Self; N],
            m: &[Self; N],
            k0: Self,
            out: &mut [Self; N],
        ) -> bool {
            use $module as entries;
            match N {
                $($n => {
                    // SAFETY: as above.
                    unsafe {
                        entries::$sqr(
                            a[..].try_into().expect("N"),
                            m[..].try_into().expect("N"),
                            k0,
                            (&mut out[..]).try_into().expect("N"),
                        )
                    };
                    true
                })*
                _ => false,
            }
        }
    };
}

/// Whether this CPU has AVX-512 IFMA (and the AVX-512 F the kernel also uses).
pub(crate) fn ifma_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512ifma")
}

/// Whether this CPU also runs IFMA on 256-bit registers (AVX-512 VL), for [`Ifma4`].
pub(crate) fn ifma256_available() -> bool {
    ifma_available() && std::arch::is_x86_feature_detected!("avx512vl")
}

/// Eight lanes of a 512-bit register.
///
/// Values of this type exist only inside this module's target-feature entry points, which are
/// compiled with `avx512f,avx512ifma` and called only after [`ifma_available`] said yes;
/// every method is inlined into them. That is what makes the intrinsic calls below
/// sound: the type is private to the `mb` module and nothing else can make one.
#[derive(Clone, Copy)]
pub(crate) struct Ifma(__m512i);

#[expect(
    unsafe_code,
    reason = "AVX-512 intrinsics; sound only where the CPU has them (see `Ifma`)"
)]
impl Lanes for Ifma {
    const LANES: usize = 8;

    #[inline(always)]
    fn splat(x: u64) -> Self {
        // SAFETY: reached only with AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_set1_epi64(x as i64) })
    }
    #[inline(always)]
    fn load(src: &[u64]) -> Self {
        assert!(src.len() >= 8);
        // SAFETY: eight readable u64 (asserted); unaligned load; AVX-512 F present.
        Ifma(unsafe { _mm512_loadu_epi64(src.as_ptr().cast()) })
    }
    #[inline(always)]
    fn store(self, dst: &mut [u64]) {
        assert!(dst.len() >= 8);
        // SAFETY: eight writable u64 (asserted); unaligned store; AVX-512 F present.
        unsafe { _mm512_storeu_epi64(dst.as_mut_ptr().cast(), self.0) }
    }
    #[inline(always)]
    fn madd52lo(self, a: Self, b: Self) -> Self {
        // SAFETY: AVX-512 IFMA present (see `Ifma`).
        Ifma(unsafe { _mm512_madd52lo_epu64(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn madd52hi(self, a: Self, b: Self) -> Self {
        // SAFETY: AVX-512 IFMA present (see `Ifma`).
        Ifma(unsafe { _mm512_madd52hi_epu64(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_add_epi64(self.0, o.0) })
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_sub_epi64(self.0, o.0) })
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_and_si512(self.0, o.0) })
    }
    #[inline(always)]
    fn shr52(self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_srli_epi64::<LIMB_BITS>(self.0) })
    }
    #[inline(always)]
    fn sar52(self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_srai_epi64::<LIMB_BITS>(self.0) })
    }
    #[inline(always)]
    fn shl1(self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`).
        Ifma(unsafe { _mm512_slli_epi64::<1>(self.0) })
    }
    #[inline(always)]
    fn select_eq(self, idx: Self, k: u64, val: Self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`). A mask register blend: no branch.
        Ifma(unsafe {
            let m = _mm512_cmpeq_epi64_mask(idx.0, _mm512_set1_epi64(k as i64));
            _mm512_mask_mov_epi64(self.0, m, val.0)
        })
    }
    #[inline(always)]
    fn select_neg(self, cond: Self, val: Self) -> Self {
        // SAFETY: AVX-512 F present (see `Ifma`). A mask register blend: no branch.
        Ifma(unsafe {
            let m = _mm512_cmplt_epi64_mask(cond.0, _mm512_setzero_si512());
            _mm512_mask_mov_epi64(self.0, m, val.0)
        })
    }
    unrolled_entries!(ifma_mont, [
        20 => mont_mul20, mont_sqr20;
        30 => mont_mul30, mont_sqr30;
        40 => mont_mul40, mont_sqr40
    ]);
}

/// Four lanes of a 256-bit register: the same instructions on half the width. Where a
/// 512-bit instruction issues once a cycle and a 256-bit one twice (AMD Zen 4 runs
/// AVX-512 on 256-bit units), four lanes give the same throughput as eight in half the
/// time per batch. Sound for the same reasons as [`Ifma`], with AVX-512 VL checked too
/// ([`ifma256_available`]).
#[derive(Clone, Copy)]
pub(crate) struct Ifma4(__m256i);

#[expect(
    unsafe_code,
    reason = "AVX-512 VL intrinsics; sound only where the CPU has them (see `Ifma4`)"
)]
impl Lanes for Ifma4 {
    const LANES: usize = 4;

    #[inline(always)]
    fn splat(x: u64) -> Self {
        // SAFETY: reached only with AVX2 present (implied by AVX-512; see `Ifma4`).
        Ifma4(unsafe { _mm256_set1_epi64x(x as i64) })
    }
    #[inline(always)]
    fn load(src: &[u64]) -> Self {
        assert!(src.len() >= 4);
        // SAFETY: four readable u64 (asserted); unaligned load; AVX present.
        Ifma4(unsafe { _mm256_loadu_si256(src.as_ptr().cast()) })
    }
    #[inline(always)]
    fn store(self, dst: &mut [u64]) {
        assert!(dst.len() >= 4);
        // SAFETY: four writable u64 (asserted); unaligned store; AVX present.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), self.0) }
    }
    #[inline(always)]
    fn madd52lo(self, a: Self, b: Self) -> Self {
        // SAFETY: AVX-512 IFMA and VL present (see `Ifma4`).
        Ifma4(unsafe { _mm256_madd52lo_epu64(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn madd52hi(self, a: Self, b: Self) -> Self {
        // SAFETY: AVX-512 IFMA and VL present (see `Ifma4`).
        Ifma4(unsafe { _mm256_madd52hi_epu64(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: AVX2 present (see `Ifma4`).
        Ifma4(unsafe { _mm256_add_epi64(self.0, o.0) })
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: AVX2 present (see `Ifma4`).
        Ifma4(unsafe { _mm256_sub_epi64(self.0, o.0) })
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        // SAFETY: AVX2 present (see `Ifma4`).
        Ifma4(unsafe { _mm256_and_si256(self.0, o.0) })
    }
    #[inline(always)]
    fn shr52(self) -> Self {
        // SAFETY: AVX2 present (see `Ifma4`).
        Ifma4(unsafe { _mm256_srli_epi64::<{ LIMB_BITS as i32 }>(self.0) })
    }
    #[inline(always)]
    fn sar52(self) -> Self {
        // SAFETY: AVX-512 VL present (see `Ifma4`): the 64-bit arithmetic shift.
        Ifma4(unsafe { _mm256_srai_epi64::<LIMB_BITS>(self.0) })
    }
    #[inline(always)]
    fn shl1(self) -> Self {
        // SAFETY: AVX2 present (see `Ifma4`).
        Ifma4(unsafe { _mm256_slli_epi64::<1>(self.0) })
    }
    #[inline(always)]
    fn select_eq(self, idx: Self, k: u64, val: Self) -> Self {
        // SAFETY: AVX-512 VL present (see `Ifma4`). A mask register blend: no branch.
        Ifma4(unsafe {
            let m = _mm256_cmpeq_epi64_mask(idx.0, _mm256_set1_epi64x(k as i64));
            _mm256_mask_mov_epi64(self.0, m, val.0)
        })
    }
    #[inline(always)]
    fn select_neg(self, cond: Self, val: Self) -> Self {
        // SAFETY: AVX-512 VL present (see `Ifma4`). A mask register blend: no branch.
        Ifma4(unsafe {
            let m = _mm256_cmplt_epi64_mask(cond.0, _mm256_setzero_si256());
            _mm256_mask_mov_epi64(self.0, m, val.0)
        })
    }
    unrolled_entries!(ifma4_mont, [
        20 => mont_mul20, mont_sqr20;
        40 => mont_mul40, mont_sqr40
    ]);
}

/// The unrolled multiplications for IFMA lanes, each compiled once as a function of its own
/// (inlined at every call site, they made the crate take over ten minutes to compile): one
/// module per lane width, compiled with that width's target features.
macro_rules! ifma_entries {
    (
        $module:ident, $lanes:ident, $features:literal,
        mul: [$(($mul:ident, $mul_inner:ident, $mn:literal)),*],
        sqr: [$(($sqr:ident, $sn:literal)),*]
    ) => {
        pub(crate) mod $module {
            use super::$lanes;
            $(
                #[target_feature(enable = $features)]
                #[inline(never)]
                pub(crate) fn $mul(
                    a: &[$lanes; $mn],
                    b: &[$lanes; $mn],
                    m: &[$lanes; $mn],
                    k0: $lanes,
                    out: &mut [$lanes; $mn],
                ) {
                    *out = super::arith::$mul_inner::<$lanes>(a, b, m, k0);
                }
            )*
            $(
                #[target_feature(enable = $features)]
                #[inline(never)]
                pub(crate) fn $sqr(
                    a: &[$lanes; $sn],
                    m: &[$lanes; $sn],
                    k0: $lanes,
                    out: &mut [$lanes; $sn],
                ) {
                    *out = super::arith::$sqr::<$lanes>(a, m, k0);
                }
            )*
        }
    };
}

ifma_entries!(
    ifma_mont, Ifma, "avx512f,avx512ifma",
    mul: [(mont_mul20, mont_mul_sos20, 20), (mont_mul30, mont_mul30, 30), (mont_mul40, mont_mul40, 40)],
    sqr: [(mont_sqr20, 20), (mont_sqr30, 30), (mont_sqr40, 40)]
);
// Four lanes serve RSA-2048 only (primes of 20 limbs, the modulus of 40).
ifma_entries!(
    ifma4_mont, Ifma4, "avx512f,avx512vl,avx512ifma",
    mul: [(mont_mul20, mont_mul_sos20, 20), (mont_mul40, mont_mul40, 40)],
    sqr: [(mont_sqr20, 20), (mont_sqr40, 40)]
);

/// The AVX-512 IFMA kernel: up to eight lanes at once.
///
/// # Safety
/// The CPU must have AVX-512 F and IFMA ([`ifma_available`]).
#[target_feature(enable = "avx512f,avx512ifma")]
#[expect(unsafe_code, reason = "a target_feature kernel; callers check the CPU")]
pub(crate) unsafe fn private_ifma<const NP: usize, const NN: usize>(
    lanes: &[LaneIn<'_>],
) -> Vec<LaneOut> {
    assert!(!lanes.is_empty() && lanes.len() <= 8);
    arith::private::<Ifma, NP, NN>(lanes)
}

/// The same kernel on AVX-512 IFMA with 256-bit registers: up to four lanes at once.
///
/// # Safety
/// The CPU must have AVX-512 F, VL and IFMA ([`ifma256_available`]).
#[target_feature(enable = "avx512f,avx512vl,avx512ifma")]
#[expect(unsafe_code, reason = "a target_feature kernel; callers check the CPU")]
pub(crate) unsafe fn private_ifma4<const NP: usize, const NN: usize>(
    lanes: &[LaneIn<'_>],
) -> Vec<LaneOut> {
    assert!(!lanes.is_empty() && lanes.len() <= 4);
    arith::private::<Ifma4, NP, NN>(lanes)
}

/// [`public_check`] on AVX-512 IFMA, up to eight lanes.
///
/// # Safety
/// The CPU must have AVX-512 F and IFMA ([`ifma_available`]).
#[target_feature(enable = "avx512f,avx512ifma")]
#[expect(unsafe_code, reason = "a target_feature kernel; callers check the CPU")]
pub(crate) unsafe fn public_check_ifma<const NN: usize>(
    lanes: &[CheckIn<'_>],
    e: u64,
) -> Vec<bool> {
    assert!(!lanes.is_empty() && lanes.len() <= 8);
    arith::public_check::<Ifma, NN>(lanes, e)
}

/// [`public_check`] on AVX-512 IFMA with 256-bit registers, up to four lanes.
///
/// # Safety
/// The CPU must have AVX-512 F, VL and IFMA ([`ifma256_available`]).
#[target_feature(enable = "avx512f,avx512vl,avx512ifma")]
#[expect(unsafe_code, reason = "a target_feature kernel; callers check the CPU")]
pub(crate) unsafe fn public_check_ifma4<const NN: usize>(
    lanes: &[CheckIn<'_>],
    e: u64,
) -> Vec<bool> {
    assert!(!lanes.is_empty() && lanes.len() <= 4);
    arith::public_check::<Ifma4, NN>(lanes, e)
}
