//! A global allocator that maps very large requests lazily.
//!
//! Protocol decoders size vectors from counts on the wire before reading the
//! elements: a 20-byte frame claiming 2^31-1 array elements asks for tens of
//! gigabytes up front. With the system allocator that request fails and the
//! process aborts. Here any allocation of [`LAZY_THRESHOLD`] bytes or more is
//! an anonymous `MAP_NORESERVE` mapping: it costs address space only, pages
//! are committed when touched, and the decoder fails on the missing bytes long
//! before touching more than the frame's worth. Nothing legitimate in the
//! broker comes near the threshold (requests are capped by
//! `socket.request.max.bytes`), so the system allocator serves everything else.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations at least this large are mapped lazily.
pub const LAZY_THRESHOLD: usize = 1 << 30;
const PAGE: usize = 4096;

pub struct LazyLargeAlloc;

fn is_lazy(layout: &Layout) -> bool {
    layout.size() >= LAZY_THRESHOLD && layout.align() <= PAGE
}

// SAFETY: every method upholds GlobalAlloc's contract: lazy blocks come from
// mmap (page aligned, at least `size` bytes, zeroed) and go back through
// munmap with the same size; all other layouts go to the system allocator.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for LazyLargeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_lazy(&layout) {
            return unsafe { System.alloc(layout) };
        }
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            ptr.cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_lazy(&layout) {
            // Fresh anonymous mappings are already zero.
            return unsafe { self.alloc(layout) };
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_lazy(&layout) {
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_lazy(&layout) && !is_lazy(&new_layout) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_capacity_costs_only_address_space() {
        let layout = Layout::array::<u64>(1 << 34).unwrap(); // 128 GiB
        #[allow(unsafe_code)]
        unsafe {
            let ptr = LazyLargeAlloc.alloc(layout);
            assert!(!ptr.is_null());
            ptr.write(7);
            assert_eq!(ptr.read(), 7);
            LazyLargeAlloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn small_blocks_round_trip_through_realloc() {
        let layout = Layout::from_size_align(16, 8).unwrap();
        #[allow(unsafe_code)]
        unsafe {
            let ptr = LazyLargeAlloc.alloc(layout);
            ptr.write_bytes(3, 16);
            let grown = LazyLargeAlloc.realloc(ptr, layout, LAZY_THRESHOLD);
            assert_eq!(*grown.add(15), 3);
            LazyLargeAlloc.dealloc(grown, Layout::from_size_align(LAZY_THRESHOLD, 8).unwrap());
        }
    }
}
