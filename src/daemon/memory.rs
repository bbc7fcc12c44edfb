//! Giving freed memory back to the system after the big, short-lived allocations of a
//! full sync (the worker's copy of every service, the batch buffer, the kernel's
//! listing).
//!
//! glibc's malloc keeps what a program frees in its arenas (one per thread that
//! allocated), so the resident size after a full sync stays at its peak although most of
//! it is free; `malloc_trim(0)` returns the free pages of every arena. musl's allocator
//! (the router build) unmaps freed large allocations and groups itself and has no
//! `malloc_trim`: there this does nothing.

/// Returns free heap pages to the kernel, where the allocator keeps them otherwise.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a plain size and touches only the allocator's own state,
    // which it locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
