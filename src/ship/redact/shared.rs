//! The process's one redactor, built when a line first needs it and let go again when nothing
//! has needed it for [`IDLE_RELEASE`].
//!
//! Its keyword automaton and the regexes of the rules a session's lines woke are about 3.5 MB
//! of heap: a third of an idle watcher's resident memory, and the same again in every
//! supervisor the daemon runs, held for hours by children that have long gone quiet
//! (docs/performance.md, "Memory"). Building it again costs about 10 ms of CPU (the automaton,
//! then each rule the first time its keyword comes back), paid at most once per quiet spell of
//! [`IDLE_RELEASE`], never per child or per line: within a burst every line is redacted by
//! the same instance (docs/behaviour.md S5's one-time cost stays one per busy spell).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Redactor;

/// How long the redactor is kept after its last use.
pub const IDLE_RELEASE: Duration = crate::platform::memory::QUIET_SPELL;

/// The shared instance, if built, and when it was last handed out.
pub(super) struct Shared {
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    redactor: Option<Arc<Redactor>>,
    last_use: Option<Instant>,
}

impl Shared {
    pub(super) const fn new() -> Shared {
        Shared {
            slot: Mutex::new(Slot {
                redactor: None,
                last_use: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while holding the lock left the slot as it was: either instance is sound.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The instance, built if there is none, marked as used at `now`.
    pub(super) fn get(&self, now: Instant) -> Arc<Redactor> {
        let mut slot = self.lock();
        slot.last_use = Some(now);
        slot.redactor
            .get_or_insert_with(|| Arc::new(Redactor::new()))
            .clone()
    }

    /// Lets the instance go when it was last used [`IDLE_RELEASE`] or more before `now`; it is
    /// freed once the last line being redacted with it is done. Whether it let one go (its
    /// memory is then free for the allocator to hand back).
    pub(super) fn release_unused(&self, now: Instant) -> bool {
        let mut slot = self.lock();
        let idle = slot
            .last_use
            .is_none_or(|t| now.saturating_duration_since(t) >= IDLE_RELEASE);
        idle && slot.redactor.take().is_some()
    }
}

static SHARED: Shared = Shared::new();

/// The shared redactor: built on first use (its regexes later still, per rule), and again
/// after [`release_unused`] let it go.
pub fn global() -> Arc<Redactor> {
    SHARED.get(Instant::now())
}

/// At an idle moment: lets the shared redactor go if no line needed it for [`IDLE_RELEASE`].
/// Whether it did.
pub fn release_unused(now: Instant) -> bool {
    SHARED.release_unused(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_redactor_is_let_go_and_built_again_on_the_next_line() {
        let shared = Shared::new();
        let t0 = Instant::now();
        let first = shared.get(t0);
        assert!(
            Arc::ptr_eq(&first, &shared.get(t0)),
            "one instance while used"
        );
        assert!(
            !shared.release_unused(t0 + IDLE_RELEASE - Duration::from_secs(1)),
            "kept while lines keep coming"
        );
        assert!(shared.release_unused(t0 + IDLE_RELEASE));
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "the process no longer holds it; the last user frees it"
        );
        assert!(
            !shared.release_unused(t0 + IDLE_RELEASE * 2),
            "nothing left to let go"
        );
        let again = shared.get(t0 + IDLE_RELEASE * 2);
        assert!(
            !Arc::ptr_eq(&first, &again),
            "built again for the next line"
        );
        assert_eq!(
            again.redact_line(b"export GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
            "export GITHUB_TOKEN=[REDACTED]",
            "the rebuilt redactor redacts as the first did"
        );
    }

    #[test]
    fn a_redactor_in_use_is_kept() {
        let shared = Shared::new();
        let t0 = Instant::now();
        let _r = shared.get(t0);
        let later = t0 + IDLE_RELEASE * 3;
        let _r = shared.get(later);
        assert!(!shared.release_unused(later + Duration::from_secs(1)));
    }
}
