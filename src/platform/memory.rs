//! Handing freed heap memory back to the operating system. glibc's allocator keeps freed
//! arenas for reuse, so a watcher that once read a huge line would keep its peak resident
//! size for the rest of its life; elsewhere (musl, macOS, Windows) the allocator returns
//! memory by itself or offers no such call, and this does nothing.

/// Returns freed heap memory to the system where the allocator would keep it.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no memory of ours is
    // touched, and it is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
