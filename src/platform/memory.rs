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
//! after them) is handed back too: 4 MiB of a supervisor of 50 children's 27 MiB. Children
//! streaming small lines trim too, about once a second for 50 children at 250 lines a second
//! (600-700 `madvise` calls each, 2.4 system calls a line): holding the trim back until the
//! stream paused was tried and not kept (docs/performance.md, "twenty-seventh pass").

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
    quiet().busy(Instant::now());
}

/// At an idle moment: returns freed heap memory to the system when enough was shipped since
/// the last time, where the allocator would keep it.
pub fn release_freed() {
    if SHIPPED_SINCE_TRIM.take(Instant::now()) {
        trim();
    }
}

/// Returns freed heap memory to the system now: something large (the redactor) was just let go.
pub fn trim_now() {
    trim();
}

/// How long nothing must have been shipped before [`release_idle`] lets go of the code pages
/// (and the redactor: [`crate::ship::redact::IDLE_RELEASE`], the same spell).
pub const QUIET_SPELL: Duration = Duration::from_secs(30);

/// When the process last shipped (or started), and whether the code pages were let go since.
struct Quiet {
    last_busy: Option<Instant>,
    released: bool,
}

static QUIET: Mutex<Quiet> = Mutex::new(Quiet {
    last_busy: None,
    released: false,
});

impl Quiet {
    /// Whether the code pages are due to go at `now`: once per quiet spell of [`QUIET_SPELL`],
    /// counted from the last shipped batch (or the first call, at start).
    fn due(&mut self, now: Instant) -> bool {
        let since = *self.last_busy.get_or_insert(now);
        if self.released || now.saturating_duration_since(since) < QUIET_SPELL {
            return false;
        }
        self.released = true;
        true
    }

    fn busy(&mut self, now: Instant) {
        self.last_busy = Some(now);
        self.released = false;
    }
}

fn quiet() -> std::sync::MutexGuard<'static, Quiet> {
    // A panic while holding the lock left two plain fields: either value is sound.
    QUIET.lock().unwrap_or_else(|p| p.into_inner())
}

/// At the host's poll: once nothing was shipped for [`QUIET_SPELL`], the pages of the
/// program's own code and read-only data are let go ([`release_code`]), once per spell.
pub fn release_idle(now: Instant) {
    if quiet().due(now) {
        release_code();
    }
}

/// Unmaps the pages of the read-only segments (code and constant data) of the executable and
/// the shared libraries it loaded from this process. They stay in the system's page cache,
/// shared with every other process of the same files, and come back by a minor fault the next
/// time they run: an idle watcher's resident memory is then what its quiet loop touches, not
/// every page its start, seeding and last burst touched (docs/performance.md, "Memory").
///
/// Only segments the program never writes are given up: the relocated constants
/// (`PT_GNU_RELRO`) and data live in writable segments, whose private copies would be lost.
/// Linux with glibc on 64-bit targets; elsewhere nothing.
pub fn release_code() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    code_pages::release();
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod code_pages {
    use std::ffi::{c_int, c_void};

    /// `DT_TEXTREL`, `DT_FLAGS` and its `DF_TEXTREL` bit: an object whose code the loader
    /// relocated in place (its code pages are private copies, which must not be dropped).
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 0x4;

    /// An entry of an object's dynamic section (`Elf64_Dyn`).
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }

    /// What the callback is given: the page size, and how many objects it has seen.
    struct Walk {
        page: usize,
        objects: usize,
    }

    /// `dl_iterate_phdr`'s callback, once per loaded object (the executable first, with no
    /// name, then the shared libraries by path), with the loader's lock held, so no object is
    /// unloaded (and its addresses reused) while its pages are dropped. The vDSO (named, not a
    /// path) is the kernel's own mapping, and an object with text relocations holds private
    /// copies of its code: both are left alone.
    ///
    /// SAFETY (for the caller, the C library): `info` points to a valid `dl_phdr_info` whose
    /// `dlpi_phdr` has `dlpi_phnum` entries, and `data` is the `Walk` passed below.
    unsafe extern "C" fn each_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: as the C library promises above; `data` is a `&mut Walk` we passed.
        let (info, walk) = unsafe { (&*info, &mut *(data as *mut Walk)) };
        let first = walk.objects == 0;
        walk.objects += 1;
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
        let is_file = !info.dlpi_name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .first()
                == Some(&b'/');
        if !(first || is_file) || info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        for h in headers.iter().filter(|h| h.p_type == libc::PT_DYNAMIC) {
            let mut at = (base + h.p_vaddr as usize) as *const Dyn;
            let end = base + (h.p_vaddr + h.p_memsz) as usize;
            while (at as usize) + std::mem::size_of::<Dyn>() <= end {
                // SAFETY: within the object's mapped dynamic segment, as its header says.
                let d = unsafe { at.read_unaligned() };
                if d.tag == 0 {
                    break;
                }
                if d.tag == DT_TEXTREL || (d.tag == DT_FLAGS && d.val & DF_TEXTREL != 0) {
                    return 0;
                }
                at = at.wrapping_add(1);
            }
        }
        for h in headers {
            if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
                continue;
            }
            let start = base + h.p_vaddr as usize;
            let end = start + h.p_memsz as usize;
            // Whole pages inside the segment only: a page shared with a writable neighbour
            // stays.
            let first_page = start.div_ceil(walk.page) * walk.page;
            let last_page = end / walk.page * walk.page;
            if last_page > first_page {
                // SAFETY: pages of a mapping of the object that the program never writes (no
                // private copy exists to lose); MADV_DONTNEED only drops this process's page
                // table entries, and the next access faults the same file contents back in.
                unsafe {
                    libc::madvise(
                        first_page as *mut c_void,
                        last_page - first_page,
                        libc::MADV_DONTNEED,
                    );
                }
            }
        }
        0 // and on to the next object
    }

    pub(super) fn release() {
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => return,
        };
        let mut walk = Walk { page, objects: 0 };
        // SAFETY: the callback only reads what the C library hands it, writes into `walk`
        // (which outlives the call) and drops pages of read-only segments.
        unsafe {
            libc::dl_iterate_phdr(Some(each_object), (&mut walk as *mut Walk).cast::<c_void>());
        }
    }
}

/// At start: every block of [`OWN_MAPPING_BYTES`] or more gets a mapping of its own, given
/// back to the system the moment it is freed. glibc starts so too, but raises that threshold
/// to the size of the first such block freed, and from then on serves blocks of a 4 MiB line
/// (its text, redacted form, request body) from the heap, where each freed one stays resident:
/// shipping eight lines of 4 MiB peaked at 5.3 lines' worth above an idle watcher instead of
/// the 4.4 it holds at once (docs/capture.md).
///
/// And the heap keeps its free top while a burst lasts: glibc gives it back to the system at
/// every `free` that leaves more than 128 KiB free there, and grows it again by just what the
/// next block needs. A catch-up allocates and frees a batch's lines, their escaped forms and
/// the redactor's working copies every few milliseconds, so the kernel mapped and zeroed the
/// same pages again for every batch: 27,600 page faults shipping the 50 MB generated rollout,
/// an eighth of its CPU. Up to [`KEPT_FREE_BYTES`] free at the top now stays, and the heap
/// grows [`GROWTH_PAD_BYTES`] beyond each need: 7,200 page faults, a tenth less CPU
/// (docs/performance.md, "Page faults"). What a burst leaves is handed back by
/// [`release_freed`] once the process is idle, as before (its trim keeps nothing at the top).
pub fn keep_large_blocks_apart() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any thread starts
    // and takes no pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_BYTES as libc::c_int);
        libc::mallopt(libc::M_TOP_PAD, GROWTH_PAD_BYTES as libc::c_int);
    }
}

/// See [`keep_large_blocks_apart`]: a couple of batches' worth of small blocks. 2 MiB still
/// had shipping fault the pages in again; 8, 32 and 128 MiB measured alike.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const KEPT_FREE_BYTES: usize = 8 << 20;

/// See [`keep_large_blocks_apart`]: also what a `free` leaves at the top when it does give
/// some back. Address space only until a block is put there.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const GROWTH_PAD_BYTES: usize = 4 << 20;

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
    fn code_pages_go_once_per_quiet_spell() {
        let mut q = Quiet {
            last_busy: None,
            released: false,
        };
        let t0 = Instant::now();
        assert!(!q.due(t0), "the spell counts from the first poll, at start");
        assert!(!q.due(t0 + QUIET_SPELL / 2));
        assert!(
            q.due(t0 + QUIET_SPELL),
            "a watcher that never ships lets go too"
        );
        assert!(!q.due(t0 + QUIET_SPELL * 3), "once per spell");
        q.busy(t0 + QUIET_SPELL * 3);
        assert!(
            !q.due(t0 + QUIET_SPELL * 3 + QUIET_SPELL / 2),
            "a line shipped: busy again"
        );
        assert!(q.due(t0 + QUIET_SPELL * 4));
    }

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
