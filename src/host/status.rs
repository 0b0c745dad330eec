//! The status file a running `watch` or `supervise` keeps (docs/behaviour.md S3), in the shape
//! [`crate::status_file`] fixes: written atomically at most every 2 s while something changed
//! and at least every 60 s, removed on a clean exit.
//!
//! The host calls [`StatusWriter::update`] after whatever it handled with the keys as they are
//! now; the writer decides whether that is a write. Time is the host's injected clock, so the
//! pacing is tested without sleeping.

use std::path::PathBuf;
use std::time::Duration;

use tracing::warn;

use crate::status_file::{self, KeyStatus, LastError, NextDue, StatusFile, Writer};
use crate::time::Ts;

/// No two writes closer than this while figures change.
pub(crate) const MIN_GAP: Duration = Duration::from_secs(2);
/// A write at least this often, changed or not (`updated_at` says the writer is alive).
pub(crate) const MAX_GAP: Duration = Duration::from_secs(60);

pub(crate) struct StatusWriter {
    config_dir: PathBuf,
    writer: Writer,
    server: Option<String>,
    pid: u32,
    start_token: String,
    /// The file's key and session, once known (`watch` learns its key from the header).
    key: Option<(String, String)>,
    /// What was last written, and when.
    written: Option<(Vec<KeyStatus>, Ts)>,
    /// Keys as last seen, not yet written (within [`MIN_GAP`] of the last write).
    pending: Option<Vec<KeyStatus>>,
    /// Something may have changed since the last write, not looked at yet (see
    /// [`StatusWriter::may_write`]).
    unseen: bool,
    failing: bool,
    /// The safety-net poll's period now, and as last written (milliseconds).
    poll_ms: Option<u64>,
    written_poll_ms: Option<u64>,
}

impl StatusWriter {
    pub(crate) fn new(config_dir: PathBuf, writer: Writer, server: Option<String>) -> Self {
        StatusWriter {
            config_dir,
            writer,
            // Shown, never the credential it may carry (the URL itself stays in the client).
            server: server.map(|s| crate::url_display::redacted(&s)),
            pid: std::process::id(),
            start_token: crate::platform::start_token::for_current().unwrap_or_default(),
            key: None,
            written: None,
            pending: None,
            unseen: false,
            failing: false,
            poll_ms: None,
            written_poll_ms: None,
        }
    }

    /// The safety-net poll's period now: a change is written as the lines' changes are.
    pub(crate) fn set_poll(&mut self, period: Duration) {
        let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        if self.poll_ms != Some(ms) {
            self.poll_ms = Some(ms);
            self.unseen = true;
        }
    }

    /// Names the file: `<key>.<writer>.json`, for `session_id`.
    pub(crate) fn set_key(&mut self, key: &str, session_id: &str) {
        if self.key.as_ref().is_some_and(|(k, _)| k == key) {
            return;
        }
        self.key = Some((key.to_owned(), session_id.to_owned()));
        self.written = None;
    }

    /// Writes `keys` when it is time: changed and [`MIN_GAP`] since the last write, or
    /// [`MAX_GAP`] since it whatever changed. The first write is at once.
    pub(crate) fn update(&mut self, keys: Vec<KeyStatus>, now: Ts) {
        if self.key.is_none() {
            return;
        }
        self.unseen = false;
        let due = match &self.written {
            None => true,
            Some((last, at)) => {
                let changed = *last != keys || self.poll_ms != self.written_poll_ms;
                (changed && now >= at.plus(MIN_GAP)) || now >= at.plus(MAX_GAP)
            }
        };
        if due {
            self.pending = None;
            self.write(keys, now);
        } else if self.poll_ms != self.written_poll_ms
            || self.written.as_ref().is_some_and(|(last, _)| *last != keys)
        {
            self.pending = Some(keys);
        } else {
            self.pending = None;
        }
    }

    /// Whether [`StatusWriter::update`] could write at `now` (never within [`MIN_GAP`] of the
    /// last write): only then are the lines worth building.
    pub(crate) fn may_write(&self, now: Ts) -> bool {
        match &self.written {
            None => true,
            Some((_, at)) => now >= at.plus(MIN_GAP),
        }
    }

    /// Whether the lines must be built even when nothing they say changed: none written yet,
    /// a change held back, or the [`MAX_GAP`] rewrite due at `now`.
    pub(crate) fn due_anyway(&self, now: Ts) -> bool {
        match &self.written {
            None => true,
            Some((_, at)) => {
                self.pending.is_some()
                    || self.poll_ms != self.written_poll_ms
                    || now >= at.plus(MAX_GAP)
            }
        }
    }

    /// The lines were looked at (found unchanged without being built): nothing to wake for
    /// before the [`MAX_GAP`] rewrite.
    pub(crate) fn seen(&mut self) {
        self.unseen = false;
    }

    /// The lines were not built this turn (see [`StatusWriter::may_write`]): they are looked
    /// at once [`MIN_GAP`] has passed.
    pub(crate) fn maybe_changed(&mut self) {
        self.unseen = true;
    }

    /// When the host must call [`StatusWriter::update`] again (a change held back by
    /// [`MIN_GAP`], or the [`MAX_GAP`] rewrite).
    pub(crate) fn next_due(&self) -> Option<Ts> {
        let (_, at) = self.written.as_ref()?;
        Some(if self.pending.is_some() || self.unseen {
            at.plus(MIN_GAP)
        } else {
            at.plus(MAX_GAP)
        })
    }

    fn write(&mut self, keys: Vec<KeyStatus>, now: Ts) {
        let Some((key, session_id)) = &self.key else {
            return;
        };
        let file = StatusFile {
            version: status_file::VERSION,
            writer: self.writer,
            pid: self.pid,
            start_token: self.start_token.clone(),
            updated_at: now.rfc3339(),
            kcap_watch_version: env!("CARGO_PKG_VERSION").to_owned(),
            server: self.server.clone(),
            session_id: session_id.clone(),
            keys,
            sessions_taken: Vec::new(),
            sessions_skipped: Vec::new(),
            poll_ms: self.poll_ms,
        };
        match status_file::write(&self.config_dir, key, &file) {
            Ok(()) => self.failing = false,
            Err(e) => {
                // Once per failure streak: the status file is a view, never a reason to stop.
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(event = "status_write_failed", error = %e, "failed to write the status file: {e}");
                }
            }
        }
        self.written = Some((file.keys, now));
        self.written_poll_ms = self.poll_ms;
    }

    /// A clean exit: the file goes.
    pub(crate) fn remove(&mut self) {
        if let Some((key, _)) = self.key.take()
            && let Err(e) = status_file::remove(&self.config_dir, &key, self.writer)
        {
            warn!(event = "status_write_failed", error = %e, "failed to remove the status file: {e}");
        }
    }
}

/// One key's line of the status file from a pipeline's figures.
pub(crate) struct KeyFigures<'a> {
    pub key: &'a str,
    pub session_id: &'a str,
    pub agent_id: Option<&'a str>,
    pub rollout: &'a std::path::Path,
    pub state: &'static str,
    pub turn: &'static str,
    pub lines_on_disk: u64,
    pub counters: &'a crate::telemetry::Counters,
    pub lines_spooled: u64,
    pub stop_posted: bool,
    pub next_due: Option<(&'static str, Ts)>,
}

impl KeyFigures<'_> {
    pub(crate) fn status(&self) -> KeyStatus {
        KeyStatus {
            key: self.key.to_owned(),
            session_id: self.session_id.to_owned(),
            agent_id: self.agent_id.map(str::to_owned),
            rollout: self.rollout.display().to_string(),
            state: self.state.to_owned(),
            turn: self.turn.to_owned(),
            lines_on_disk: self.lines_on_disk,
            lines_confirmed: self.counters.server_confirmed,
            lines_spooled: self.lines_spooled,
            lines_refused: self.counters.lines_refused,
            lines_lost: self.counters.losses,
            stop_posted: self.stop_posted,
            next_due: self.next_due.map(|(decision, at)| NextDue {
                decision: decision.to_owned(),
                at: at.rfc3339(),
            }),
            last_error: self.counters.last_error.as_ref().map(|e| LastError {
                event: e.event.to_owned(),
                message: e.message.clone(),
                at: e.at.rfc3339(),
            }),
            claim_failures: 0,
            continuations: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_status(lines: u64) -> KeyStatus {
        KeyFigures {
            key: "s-a",
            session_id: "s",
            agent_id: Some("a"),
            rollout: std::path::Path::new("/r.jsonl"),
            state: "following",
            turn: "open",
            lines_on_disk: lines,
            counters: &crate::telemetry::Counters::default(),
            lines_spooled: 0,
            stop_posted: false,
            next_due: None,
        }
        .status()
    }

    fn read(dir: &std::path::Path) -> Option<StatusFile> {
        status_file::read(&status_file::status_path(dir, "s-a", Writer::Watch))
            .ok()
            .flatten()
    }

    /// The host skips building lines whose children say nothing new: it must still build
    /// them for the first write, a change held back and the minute's rewrite, and a skipped
    /// turn must not leave it waking every 2 s (or at once) for nothing.
    #[test]
    fn lines_found_unchanged_are_due_only_for_the_first_write_a_held_change_or_the_minute() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StatusWriter::new(dir.path().to_path_buf(), Writer::Watch, None);
        let t0 = Ts::now();
        let at = |ms: u64| t0.plus(Duration::from_millis(ms));
        assert!(w.due_anyway(t0), "nothing written yet");
        w.set_key("s-a", "s");
        w.update(vec![key_status(1)], t0);
        assert!(!w.due_anyway(at(30_000)));
        assert!(w.due_anyway(at(60_000)), "the minute's rewrite");
        w.update(vec![key_status(2)], at(1000));
        assert!(w.due_anyway(at(1000)), "a change held back");
        w.update(vec![key_status(2)], at(2000));
        assert!(!w.due_anyway(at(3000)));
        w.maybe_changed();
        assert_eq!(w.next_due(), Some(at(4000)));
        w.seen();
        assert_eq!(
            w.next_due(),
            Some(at(62_000)),
            "no wake for lines found unchanged"
        );
    }

    #[test]
    fn writes_at_most_every_two_seconds_while_changing_and_at_least_every_minute() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StatusWriter::new(dir.path().to_path_buf(), Writer::Watch, None);
        let t0 = Ts::now();
        let at = |ms: u64| t0.plus(Duration::from_millis(ms));
        // Nothing before the key is known.
        w.update(vec![key_status(1)], t0);
        assert!(read(dir.path()).is_none());
        w.set_key("s-a", "s");
        w.update(vec![key_status(1)], t0);
        assert_eq!(read(dir.path()).unwrap().keys[0].lines_on_disk, 1);
        // A change 1 s later waits for the 2 s gap; the host is told when.
        w.update(vec![key_status(2)], at(1000));
        assert_eq!(read(dir.path()).unwrap().keys[0].lines_on_disk, 1);
        assert_eq!(w.next_due(), Some(at(2000)));
        w.update(vec![key_status(3)], at(2000));
        let f = read(dir.path()).unwrap();
        assert_eq!(f.keys[0].lines_on_disk, 3);
        assert_eq!(f.updated_at, at(2000).rfc3339());
        assert_eq!(f.pid, std::process::id());
        assert!(f.writer_alive());
        // Unchanged: not rewritten before a minute, then rewritten with a new time.
        w.update(vec![key_status(3)], at(30_000));
        assert_eq!(read(dir.path()).unwrap().updated_at, at(2000).rfc3339());
        assert_eq!(w.next_due(), Some(at(62_000)));
        w.update(vec![key_status(3)], at(62_000));
        assert_eq!(read(dir.path()).unwrap().updated_at, at(62_000).rfc3339());
        w.remove();
        assert!(read(dir.path()).is_none());
        assert!(
            !status_file::status_path(dir.path(), "s-a", Writer::Watch).exists(),
            "removed on a clean exit"
        );
    }
}
