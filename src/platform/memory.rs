//! Handing freed heap memory back to the operating system. glibc's allocator keeps freed
//! memory for reuse, so a watcher (or a supervisor of dozens of children) that once caught up
//! on a backlog would keep its peak resident size for the rest of its life: after 50
//! children caught up, 56 % of the supervisor's resident memory was freed heap (docs/performance.md).
//! Elsewhere (musl, macOS, Windows) the allocator returns memory by itself or offers no such
//! call, and this does nothing.
//!
//! The policy: whatever shipped a batch reports its size ([`note_shipped`]); when it is idle
//! again it asks for a trim ([`release_freed`]), which runs once enough was shipped since the
//! last one, or once anything was and [`LATE_TRIM`] has passed since it. Every burst is
//! followed by a trim, whatever its batch sizes, while a watcher shipping one small line at a
//! time does not pay a heap walk per line; and the host asks again at every safety-net poll,
//! so what the last children of a catch-up freed (each below the threshold, and nothing drains
//! after them) is handed back too: 4 MiB of a supervisor of 50 children's 27 MiB.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Bytes shipped since the last trim above which an idle moment trims. A batch's request body,
/// its redacted copy and the line texts behind it are a few times its size, so this leaves at
/// most about a MiB of freed heap unreturned.
const TRIM_AFTER_BYTES: usize = 256 * 1024;

/// Anything shipped since the last trim is trimmed for at an idle moment this long after it.
const LATE_TRIM: Duration = Duration::from_secs(10);

/// Shipped bytes since the last trim, over every pipeline of the process, and when that was.
struct Burst {
    bytes: AtomicUsize,
    last: Mutex<Option<Instant>>,
}

impl Burst {
    const fn new() -> Burst {
        Burst {
            bytes: AtomicUsize::new(0),
            last: Mutex::new(None),
        }
    }

    fn note(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether a trim is due at `now` (and then counts from zero again).
    fn take(&self, now: Instant) -> bool {
        let pending = self.bytes.load(Ordering::Relaxed);
        if pending == 0 {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let late = last.is_none_or(|t| now.saturating_duration_since(t) >= LATE_TRIM);
        if pending < TRIM_AFTER_BYTES && !late {
            return false;
        }
        *last = Some(now);
        self.bytes.swap(0, Ordering::Relaxed) > 0
    }
}

static SHIPPED_SINCE_TRIM: Burst = Burst::new();

/// Records that a batch of `bytes` was delivered (its memory is now freed or reusable).
pub fn note_shipped(bytes: usize) {
    SHIPPED_SINCE_TRIM.note(bytes);
}

/// At an idle moment: returns freed heap memory to the system when enough was shipped since
/// the last time, where the allocator would keep it.
pub fn release_freed() {
    if SHIPPED_SINCE_TRIM.take(Instant::now()) {
        trim();
    }
}

/// At start: every block of [`OWN_MAPPING_BYTES`] or more gets a mapping of its own, given
/// back to the system the moment it is freed. glibc starts so too, but raises that threshold
/// to the size of the first such block freed, and from then on serves blocks of a 4 MiB line
/// (its text, redacted form, request body) from the heap, where each freed one stays resident:
/// shipping eight lines of 4 MiB peaked at 5.3 lines' worth above an idle watcher instead of
/// the 4.4 it holds at once (docs/capture.md).
pub fn keep_large_blocks_apart() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any thread starts
    // and takes no pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES as libc::c_int);
    }
}

/// See [`keep_large_blocks_apart`]. Any setting made by the program stays fixed (glibc's own
/// starts at 128 KiB and rises); a MiB is far above any ordinary line or request.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const OWN_MAPPING_BYTES: usize = 1 << 20;

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no memory of ours is
    // touched, and it is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_is_due_once_per_burst_whatever_its_batch_sizes() {
        let burst = Burst::new();
        let t0 = Instant::now();
        assert!(!burst.take(t0), "nothing shipped, nothing to trim");
        burst.note(TRIM_AFTER_BYTES);
        assert!(burst.take(t0), "one big batch is a burst");
        burst.note(1000);
        assert!(!burst.take(t0), "one small batch right after is none");
        for _ in 0..TRIM_AFTER_BYTES / 1000 {
            burst.note(1000);
        }
        assert!(burst.take(t0), "many small batches are");
        assert!(!burst.take(t0), "and are trimmed once");
    }

    /// What the last small batches freed is trimmed for once the late delay has passed (the
    /// host asks at every poll), and a watcher trickling lines trims at most that often.
    #[test]
    fn small_batches_are_trimmed_for_late_and_at_most_that_often() {
        let burst = Burst::new();
        let t0 = Instant::now();
        burst.note(TRIM_AFTER_BYTES);
        assert!(burst.take(t0));
        burst.note(1000);
        assert!(!burst.take(t0 + LATE_TRIM / 2));
        assert!(burst.take(t0 + LATE_TRIM), "left untrimmed for good");
        burst.note(1000);
        assert!(!burst.take(t0 + LATE_TRIM + LATE_TRIM / 2));
        assert!(!burst.take(t0 + LATE_TRIM * 3 / 2), "nothing new shipped");
    }
}
