//! Following the rollout: opening and seeding it, settling the watcher's identity (and with
//! it the lock and process files), folding new lines as they appear, and noticing a rewrite.

use super::*;

impl Watcher {
    pub(super) fn open_and_seed(&mut self) -> Result<()> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.opts.once {
                    info!(event = "waiting_for_file", path = %self.path.display(), "rollout does not exist yet; waiting for it");
                }
                return Ok(());
            }
            Err(e) => {
                return Err(UsageError(format!(
                    "cannot read rollout {}: {e}",
                    self.path.display()
                ))
                .into());
            }
        };
        let meta = file
            .metadata()
            .with_context(|| format!("failed to stat {}", self.path.display()))?;
        let now = self.clock.now();
        let mtime = meta.modified().map(Ts::from_system).unwrap_or(now).min(now);
        let t0 = std::time::Instant::now();
        let seeded = seed(&file, LineTimes::All(mtime), 0)
            .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
        self.state = seeded.state;
        self.reader = seeded.reader;
        self.index = seeded.index;
        info!(
            event = "seeded",
            lines = self.state.counters.lines,
            bytes = self.state.counters.bytes,
            ms = t0.elapsed().as_millis() as u64,
            "seeded {} lines ({} bytes) from disk",
            self.state.counters.lines,
            self.state.counters.bytes
        );
        use std::os::unix::fs::MetadataExt;
        self.rollout = Some(Rollout {
            ino: meta.ino(),
            first_line: None,
            seen: None,
            file,
        });
        self.remember_first_line();
        Ok(())
    }

    pub(super) fn remember_first_line(&mut self) {
        let Some(r) = &mut self.rollout else { return };
        if r.first_line.is_some() || self.state.counters.lines == 0 {
            return;
        }
        let mut buf = vec![0; FIRST_LINE_PREFIX];
        if let Ok(n) = ReadAt::read_at(&r.file, &mut buf, 0) {
            let end = memchr::memchr(b'\n', &buf[..n]).unwrap_or(n);
            buf.truncate(end);
            r.first_line = Some(buf);
        }
    }

    /// Determines the identity (header overridden by the command line) and, once the key is
    /// known, takes the lock, writes the process files and starts shipping.
    pub(super) fn settle_identity(&mut self) -> Result<()> {
        if self.files.is_some() || (self.opts.once && self.identity.is_some()) {
            return Ok(());
        }
        let mut id = self
            .state
            .identity
            .clone()
            .unwrap_or_else(Identity::unknown);
        let header_known = self.state.identity.is_some();
        if let Some(s) = &self.opts.session_id {
            id.session_id = Some(normalize_id(s));
        }
        if let Some(a) = &self.opts.agent_id {
            id.agent_id = Some(normalize_id(a));
        }
        if let Some(r) = self.opts.role {
            id.role = r;
        }
        if !header_known && self.opts.agent_id.is_some() && self.opts.role.is_none() {
            id.role = Role::Child;
        }
        if id.role == Role::Child && id.agent_type.is_none() {
            id.agent_type = Some("subagent".into());
        }
        if let Some(cwd) = &self.opts.cwd {
            id.cwd = Some(cwd.clone());
        }
        let complete = match id.role {
            Role::Child => id.session_id.is_some() && id.agent_id.is_some(),
            Role::Session => id.session_id.is_some(),
        };
        if !complete {
            return Ok(());
        }
        if id.role == Role::Session {
            id.agent_id = None;
        }
        self.identity = Some(id);
        self.acquire_files()?;
        self.begin_shipping();
        Ok(())
    }

    pub(super) fn acquire_files(&mut self) -> Result<()> {
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return Ok(());
        };
        // Ids from the rollout's header name files too (R5): the kcap CLI's key rule, or exit 2.
        files::check_id("session id", &session)?;
        if let Some(agent) = &agent {
            files::check_id("agent id", agent)?;
        }
        let key = files::watcher_key(&session, agent.as_deref());
        match WatcherFiles::acquire(&self.settings.watcher_dir, &key, self.clock.now()) {
            Ok(f) => {
                self.heartbeat = Some(Heartbeat::spawn(
                    f.heartbeat_path().to_path_buf(),
                    HEARTBEAT_EVERY,
                ));
                self.files = Some(f);
                crate::logging::attach_file(&files::log_file_path(
                    &self.settings.config_dir,
                    &session,
                    agent.as_deref(),
                ));
                Ok(())
            }
            Err(AcquireError::Held { key, holder_pid }) => Err(LockHeld { key, holder_pid }.into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "failed to take the watcher lock in {}",
                self.settings.watcher_dir.display()
            ))),
        }
    }

    pub(super) fn on_file_change(&mut self) -> Result<()> {
        if self.rollout.is_none() {
            match std::fs::metadata(&self.path) {
                Ok(meta) => crate::tail::require_regular_file(&self.path, &meta)?,
                Err(_) => return Ok(()),
            }
            // The file appeared after the watcher started: its lines are new, observed now.
            let file = match File::open(&self.path) {
                Ok(f) => f,
                Err(_) => return Ok(()),
            };
            use std::os::unix::fs::MetadataExt;
            let ino = file.metadata().map(|m| m.ino()).unwrap_or(0);
            info!(event = "file_appeared", path = %self.path.display(), "rollout appeared");
            self.rollout = Some(Rollout {
                file,
                first_line: None,
                ino,
                seen: None,
            });
        }
        if self.check_rewritten()? {
            self.read_new_lines()?;
            self.remember_first_line();
        }
        self.settle_identity()?;
        Ok(())
    }

    /// Folds every new complete line, observed now.
    pub(super) fn read_new_lines(&mut self) -> Result<()> {
        let Some(r) = &self.rollout else {
            return Ok(());
        };
        let now = self.clock.now();
        let state = &mut self.state;
        let index = &mut self.index;
        loop {
            let st = self
                .reader
                .read(&r.file, 4096, &mut |line| {
                    index.record(line.number, line.start);
                    if let Some(observed) = line.observed() {
                        state.apply(observed, now);
                    }
                })
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            if st.at_eof {
                break;
            }
        }
        Ok(())
    }

    /// A file that shrinks below the read position, or whose first line changed, was
    /// rewritten. A file renamed away or deleted is read to its end through the open handle.
    ///
    /// Returns whether the file changed since the last check (new bytes may be there).
    pub(super) fn check_rewritten(&mut self) -> Result<bool> {
        let Some(r) = &self.rollout else {
            return Ok(false);
        };
        let meta = r.file.metadata().ok();
        let len = meta.as_ref().map_or(u64::MAX, |m| m.len());
        if len < self.reader.offset() {
            return Err(self.rewritten("the file shrank below the read position"));
        }
        let seen = (len, meta.and_then(|m| m.modified().ok()));
        let changed = r.seen != Some(seen);
        if changed && let Some(first) = &r.first_line {
            let mut buf = vec![0; first.len() + 1];
            let n = ReadAt::read_at(&r.file, &mut buf, 0).unwrap_or(0);
            let same = n >= first.len() && buf[..first.len()] == first[..];
            if !same {
                return Err(self.rewritten("its first line changed"));
            }
        }
        // Replaced at its path by another file: a rewrite unless it starts the same way.
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(&self.path)
            && m.ino() != r.ino
            && let Ok(new) = File::open(&self.path)
        {
            let first = r.first_line.clone().unwrap_or_default();
            let mut buf = vec![0; first.len()];
            let n = ReadAt::read_at(&new, &mut buf, 0).unwrap_or(0);
            if n < first.len() || buf != first || m.len() < self.reader.offset() {
                return Err(self.rewritten("it was replaced by a different file"));
            }
            info!(event = "file_replaced", path = %self.path.display(), "rollout replaced by a copy with the same start; following the new file");
            if let Some(r) = &mut self.rollout {
                r.file = new;
                r.ino = m.ino();
                r.seen = None;
            }
            return Ok(true);
        }
        if let Some(r) = &mut self.rollout {
            r.seen = Some(seen);
        }
        Ok(changed)
    }

    pub(super) fn rewritten(&self, why: &'static str) -> anyhow::Error {
        let watermark = match self.watermark {
            Some(Watermark::Line(n)) => Some(n),
            _ => None,
        };
        error!(
            event = "rollout_rewritten",
            path = %self.path.display(),
            watermark = watermark.map(|w| w as i64).unwrap_or(-1),
            lines = self.state.counters.lines,
            "rollout {} was rewritten ({why}); shipping nothing more",
            self.path.display()
        );
        RolloutRewritten {
            path: self.path.clone(),
            watermark,
            lines: self.state.counters.lines,
            why,
        }
        .into()
    }

    pub(super) fn check_rewrite_against_watermark(&mut self) -> Result<()> {
        if let Some(Watermark::Line(n)) = self.watermark
            && self.rollout.is_some()
            && n.saturating_add(1) > self.reader.next_number()
        {
            return Err(self.rewritten("the server holds more lines than the file"));
        }
        Ok(())
    }
}
