//! Raw RSA (no padding) on aws-lc's `RSA` object, for TLS 1.2 RSA key exchange.
//!
//! BoringSSL's private-key method asks for the raw private-key operation on the client's
//! encrypted premaster secret and checks the PKCS#1 v1.5 padding itself, in constant time
//! (the Bleichenbacher defence lives there, not here). aws-lc-rs offers only padded
//! decryption (OAEP, PKCS#1), so this goes to aws-lc-sys, the same library aws-lc-rs wraps:
//! its RSA is the fast one on this CPU (AVX-512 IFMA), with blinding.

use aws_lc_sys as ffi;

/// An RSA private key as aws-lc holds it.
pub(crate) struct RawRsa {
    rsa: std::ptr::NonNull<ffi::RSA>,
    len: usize,
}

// SAFETY: aws-lc's RSA private operations are safe to call concurrently on one key (its
// Montgomery contexts and blinding are guarded by the key's own lock), and the pointer is
// owned by this value alone and freed once, in `Drop`.
#[expect(unsafe_code, reason = "a raw aws-lc pointer")]
unsafe impl Send for RawRsa {}
// SAFETY: as above; `&RawRsa` only offers operations aws-lc documents as thread-safe.
#[expect(unsafe_code, reason = "a raw aws-lc pointer")]
unsafe impl Sync for RawRsa {}

impl Drop for RawRsa {
    #[expect(unsafe_code, reason = "aws-lc FFI")]
    fn drop(&mut self) {
        // SAFETY: we own one reference to the key (from `EVP_PKEY_get1_RSA`).
        unsafe { ffi::RSA_free(self.rsa.as_ptr()) }
    }
}

impl RawRsa {
    /// Parses an RSA key from PKCS#8 DER; `None` when it is not one.
    #[expect(unsafe_code, reason = "aws-lc FFI")]
    pub(crate) fn from_pkcs8(der: &[u8]) -> Option<Self> {
        // SAFETY: CBS only borrows `der`, which outlives it; every returned pointer is
        // checked for null, and the EVP_PKEY is freed after we took our own reference to
        // its RSA key.
        unsafe {
            let mut cbs = std::mem::zeroed::<ffi::CBS>();
            ffi::CBS_init(&mut cbs, der.as_ptr(), der.len());
            let pkey = ffi::EVP_parse_private_key(&mut cbs);
            if pkey.is_null() {
                ffi::ERR_clear_error();
                return None;
            }
            let rsa = ffi::EVP_PKEY_get1_RSA(pkey);
            ffi::EVP_PKEY_free(pkey);
            let rsa = std::ptr::NonNull::new(rsa)?;
            let len = ffi::RSA_size(rsa.as_ptr()) as usize;
            Some(RawRsa { rsa, len })
        }
    }

    /// The public half alone, from a DER RSAPublicKey (PKCS#1), for a key whose private half
    /// lives on a key server: enough to check a decryption the server returns.
    #[expect(unsafe_code, reason = "aws-lc FFI")]
    pub(crate) fn from_public_pkcs1(der: &[u8]) -> Option<Self> {
        // SAFETY: aws-lc reads `len` bytes from a live slice and returns a new key (one
        // reference, ours, released in `Drop`) or null.
        unsafe {
            let rsa = ffi::RSA_public_key_from_bytes(der.as_ptr(), der.len());
            let Some(rsa) = std::ptr::NonNull::new(rsa) else {
                ffi::ERR_clear_error();
                return None;
            };
            let len = ffi::RSA_size(rsa.as_ptr()) as usize;
            Some(RawRsa { rsa, len })
        }
    }

    /// The modulus length in bytes: the length of every input and output.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `input^d mod n`: the private-key operation without padding. `input` must be exactly
    /// [`RawRsa::len`] bytes and below the modulus.
    pub(crate) fn private(&self, input: &[u8]) -> Option<Vec<u8>> {
        self.transform(input, true)
    }

    /// `input^e mod n`: the public operation, used to check a private result.
    pub(crate) fn public(&self, input: &[u8]) -> Option<Vec<u8>> {
        self.transform(input, false)
    }

    #[expect(unsafe_code, reason = "aws-lc FFI")]
    fn transform(&self, input: &[u8], private: bool) -> Option<Vec<u8>> {
        if input.len() != self.len {
            return None;
        }
        let mut out = vec![0u8; self.len];
        let mut out_len = 0usize;
        // SAFETY: the key is live; `out` has room for `len` bytes, which is RSA_size, the
        // most either call writes; `input` is `len` readable bytes.
        let ok = unsafe {
            let f = if private {
                ffi::RSA_decrypt
            } else {
                ffi::RSA_encrypt
            };
            f(
                self.rsa.as_ptr(),
                &mut out_len,
                out.as_mut_ptr(),
                out.len(),
                input.as_ptr(),
                input.len(),
                ffi::RSA_NO_PADDING as std::os::raw::c_int,
            )
        };
        if ok != 1 {
            // SAFETY: clearing this thread's error queue has no preconditions.
            unsafe { ffi::ERR_clear_error() };
            return None;
        }
        // With no padding the output is always the modulus length.
        (out_len == self.len).then_some(out)
    }
}

/// An RSA key's numbers, big-endian: what the mb engine precomputes its own form from.
pub(crate) struct Components {
    pub(crate) n: Vec<u8>,
    pub(crate) e: Vec<u8>,
    pub(crate) p: Vec<u8>,
    pub(crate) q: Vec<u8>,
    pub(crate) dp: Vec<u8>,
    pub(crate) dq: Vec<u8>,
    pub(crate) qinv: Vec<u8>,
}

impl RawRsa {
    /// The key's numbers; `None` for a key without its CRT parameters.
    #[expect(unsafe_code, reason = "aws-lc FFI")]
    pub(crate) fn components(&self) -> Option<Components> {
        /// A BIGNUM's big-endian bytes; `None` for a null pointer.
        ///
        /// # Safety
        /// `bn` is null or a live BIGNUM.
        unsafe fn bytes(bn: *const ffi::BIGNUM) -> Option<Vec<u8>> {
            if bn.is_null() {
                return None;
            }
            // SAFETY: `bn` is live (caller); the buffer has BN_num_bytes bytes, which is
            // what BN_bn2bin writes.
            unsafe {
                let mut v = vec![0u8; ffi::BN_num_bytes(bn) as usize];
                ffi::BN_bn2bin(bn, v.as_mut_ptr());
                Some(v)
            }
        }
        let rsa = self.rsa.as_ptr();
        let mut n = std::ptr::null();
        let mut e = std::ptr::null();
        let mut d = std::ptr::null();
        let mut p = std::ptr::null();
        let mut q = std::ptr::null();
        let mut dp = std::ptr::null();
        let mut dq = std::ptr::null();
        let mut qinv = std::ptr::null();
        // SAFETY: the key is live for as long as `self`; the getters only store pointers
        // into it (or null) in our locals, which are read before `self` can go away.
        unsafe {
            ffi::RSA_get0_key(rsa, &mut n, &mut e, &mut d);
            ffi::RSA_get0_factors(rsa, &mut p, &mut q);
            ffi::RSA_get0_crt_params(rsa, &mut dp, &mut dq, &mut qinv);
            Some(Components {
                n: bytes(n)?,
                e: bytes(e)?,
                p: bytes(p)?,
                q: bytes(q)?,
                dp: bytes(dp)?,
                dq: bytes(dq)?,
                qinv: bytes(qinv)?,
            })
        }
    }
}
