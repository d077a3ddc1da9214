//! Lanes: independent operations side by side, one per 64-bit lane.
//!
//! The arithmetic in [`super::arith`] is written once against [`Lanes`] and instantiated
//! twice: with [`Scalar`] (one lane, plain `u64` and `u128`: the portable reference that
//! runs and is tested everywhere) and with `Ifma` (eight lanes of a 512-bit register, the
//! AVX-512 IFMA kernel). Same limbs, same windows, same order of operations: the two must
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

#[cfg(target_arch = "x86_64")]
pub(crate) use ifma::{Ifma, Ifma4, ifma_available, ifma256_available};

#[cfg(target_arch = "x86_64")]
mod ifma {
    use super::{LIMB_BITS, Lanes};
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
    /// Values of this type exist only inside `arith::ifma_entry` functions, which are
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
        unrolled_entries!(crate::mb::arith::ifma_mont, [
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
        unrolled_entries!(crate::mb::arith::ifma4_mont, [
            20 => mont_mul20, mont_sqr20;
            40 => mont_mul40, mont_sqr40
        ]);
    }
}
