//! The global allocator: mimalloc, asked the way `std`'s system allocator asks malloc.
//!
//! The `mimalloc` crate passes every allocation to `mi_malloc_aligned`, and mimalloc 3 serves
//! an aligned request over 1 KiB whose size class is not a power of two by over-allocating
//! (size + alignment) and offsetting the block. A proxied request makes several such (its
//! future, read and write buffers, a response copy): under callgrind, that path took about
//! 1,500 of a 1 KiB request's 72,500 instructions, and plain calls saved 1,100 of them.
//! Every mimalloc block is aligned to 16 bytes or to its size class (which is at least its
//! size), so a layout whose alignment is at most both goes to plain `mi_malloc` here, as
//! `std::alloc::System` does with malloc; only larger alignments (tokio's cache-padded task
//! headers) take the aligned entry points.
//!
//! mimalloc is also the C libraries' `malloc` (libmimalloc-sys's `override` feature: the
//! binary defines `malloc`, `free` and the rest, and the dynamic linker binds every shared
//! library's calls to them). libmodsecurity makes hundreds of small C++ allocations per
//! inspected request: with glibc's malloc they took a fifth of a CRS inspection's CPU, and
//! the override cut a WAF route's CPU per request by about a sixth (`bench/waf`; docs/waf.md).
//! BoringSSL's allocations go to mimalloc too.

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment every `mi_malloc` block of at least that size has (`MI_MAX_ALIGN_SIZE`).
const MIN_ALIGN: usize = 16;

/// mimalloc for the whole process.
pub(crate) struct Mimalloc;

/// Whether plain `mi_malloc` already gives `layout`'s alignment: blocks are aligned to 16, and
/// a block smaller than 16 bytes to a power of two no smaller than its size.
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

#[expect(unsafe_code, reason = "the global allocator is FFI to mimalloc")]
// SAFETY: every pointer returned comes from mimalloc with at least the layout's size and
// alignment (see `plain`), and is freed or resized only by mimalloc, which accepts blocks
// from its aligned and plain entry points alike in `mi_free`/`mi_realloc*`.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: FFI calls with a size and a power-of-two alignment from a valid `Layout`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the `GlobalAlloc` contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the new block keeps the
        // alignment by the same rule as `alloc`.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment a program asks for comes back aligned, writable over its
    /// whole size, and keeps its bytes through a reallocation to a larger and a smaller size.
    #[test]
    #[expect(
        unsafe_code,
        reason = "calls the allocator directly, as the runtime does"
    )]
    fn blocks_have_their_layouts_alignment_and_keep_their_bytes() {
        let a = Mimalloc;
        let sizes = [
            1usize, 2, 3, 7, 8, 9, 15, 16, 17, 24, 100, 1000, 1025, 1500, 4096, 5320, 70_000,
        ];
        for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for &size in &sizes {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is written within its size, read back,
                // resized with the same layout and freed once.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    for i in 0..size {
                        p.add(i).write(i as u8);
                    }
                    let bigger = size * 3 + 1;
                    let q = a.realloc(p, layout, bigger);
                    assert_eq!(
                        q as usize % align,
                        0,
                        "realloc {size}->{bigger} align {align}"
                    );
                    for i in 0..size {
                        assert_eq!(q.add(i).read(), i as u8);
                    }
                    let smaller = size.div_ceil(2);
                    let grown = Layout::from_size_align(bigger, align).unwrap();
                    let r = a.realloc(q, grown, smaller);
                    assert_eq!(
                        r as usize % align,
                        0,
                        "realloc {bigger}->{smaller} align {align}"
                    );
                    for i in 0..smaller {
                        assert_eq!(r.add(i).read(), i as u8);
                    }
                    a.dealloc(r, Layout::from_size_align(smaller, align).unwrap());

                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| z.add(i).read() == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
