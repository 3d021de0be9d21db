//! Big in-memory tables (the key filter's layers, the key sets' slots) on huge pages.
//!
//! Both are probed at random across tens to hundreds of MiB, one cache line a key. With 4 KiB
//! pages nearly every probe also misses the TLB, and under a hypervisor a page walk costs more
//! than the cache miss itself: measured, the two probes of a new key took about 300 ns of
//! stalls. Asking Linux for transparent huge pages (`MADV_HUGEPAGE`, honoured when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`) covers a table with
//! a few dozen 2 MiB TLB entries instead.

/// A key's 128-bit hash as its low and high words: both tables index and compare by them.
#[inline]
pub(crate) fn hash_words(hash: [u8; 16]) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&hash[..8]);
    hi.copy_from_slice(&hash[8..]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// Starts loading the cache line that holds `value`, so a probe a few rows later finds it there.
#[inline]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// A table of `len` copies of `value`, its memory advised for huge pages before first touch.
pub(crate) fn table<T: Copy>(len: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    advise_huge_pages(v.as_ptr(), len * size_of::<T>());
    v.resize(len, value);
    v
}

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(ptr: *const T, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < HUGE {
        return;
    }
    let page = 4096;
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize + bytes) & !(page - 1);
    if end > start {
        // SAFETY: the range lies inside this Vec's own allocation (rounded inwards to whole
        // pages); MADV_HUGEPAGE only changes how the kernel backs it, never its contents. A
        // kernel without THP returns an error, which changes nothing and is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_: *const T, _: usize) {}
