//! Shipping: the watermark, batches to the server (one in flight), retries, the spools.
//!
//! The server's acknowledgement is the only commit point; requests are spawned tasks whose
//! answers come back through the loop's channel.

use super::*;

impl Watcher {
    /// Offline the resume line comes from the spool; online the watermark is asked for.
    pub(super) fn begin_shipping(&mut self) {
        if self.online() {
            self.watermark_retry_at = Some(self.clock.now());
            return;
        }
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return;
        };
        let resume = match spool::highest_spooled_line(
            &self.settings.config_dir,
            &session,
            agent.as_deref(),
        ) {
            Ok(Some(n)) => n + 1,
            Ok(None) => 0,
            Err(e) => {
                warn!(
                    event = "spool_unreadable",
                    "failed to read the transcript spool: {e}; resuming at line 0"
                );
                0
            }
        };
        let watermark = match resume.checked_sub(1) {
            Some(n) => Watermark::Line(n),
            None => Watermark::Empty,
        };
        self.set_resume(watermark, resume);
    }

    pub(super) fn set_resume(&mut self, watermark: Watermark, resume: u64) {
        self.watermark = Some(watermark);
        self.ship_generation += 1;
        self.transcript_in_flight = false;
        self.ship_retry_at = None;
        self.outbox.rewind(resume);
        let (line, offset) = self.index.locate(resume);
        self.ship_reader = Some(LineReader::new(offset, line, false));
    }

    /// Everything that moves without waiting: reading, shipping, the watermark.
    ///
    /// A batch goes out before the outbox is refilled (and again after), and refilling yields
    /// between reads, so redacting the next lines overlaps the request in flight.
    pub(super) async fn pump(&mut self) -> Result<()> {
        self.check_rewrite_against_watermark()?;
        let now = self.clock.now();
        self.maybe_ask_watermark(now);
        self.maybe_send_batch(now);
        self.fill_outbox().await?;
        self.maybe_send_batch(self.clock.now());
        if self.outbox.is_idle() && std::mem::take(&mut self.trim_when_idle) {
            release_freed_memory();
        }
        Ok(())
    }

    /// Reads lines from the shipping cursor into the outbox (offline: into the spool).
    pub(super) async fn fill_outbox(&mut self) -> Result<()> {
        let (Some(r), Some(ship)) = (&self.rollout, &mut self.ship_reader) else {
            return Ok(());
        };
        let resume = self.outbox.confirmed_to();
        let limit = self.reader.line_start();
        let mut queued_any = false;
        while ship.line_start() < limit && self.outbox.has_room() {
            let redactor = self.redactor;
            let outbox = &mut self.outbox;
            let st = ship
                .read(&r.file, 256, &mut |line| {
                    if line.number < resume || line.blank {
                        return;
                    }
                    queued_any = true;
                    outbox.push(ship_line(redactor, &line));
                })
                .with_context(|| format!("failed to read rollout {}", self.path.display()))?;
            if st.at_eof || st.lines == 0 {
                break;
            }
            // Let the request in flight make progress while a backlog is redacted.
            tokio::task::yield_now().await;
        }
        let next = ship.next_number();
        self.outbox.skip_to(next);
        if !self.online() && queued_any {
            // Offline: each line goes to the spool as soon as it is read.
            let lines = self.outbox.take_unconfirmed();
            self.spool_lines(lines);
            self.outbox.skip_to(next);
        }
        Ok(())
    }

    pub(super) fn maybe_ask_watermark(&mut self, now: Ts) {
        if self.client.is_none() || self.watermark_in_flight {
            return;
        }
        let Some(at) = self.watermark_retry_at else {
            return;
        };
        if now < at {
            return;
        }
        let (Some(session), agent) = (
            self.session_id().map(str::to_string),
            self.agent_id().map(str::to_string),
        ) else {
            return;
        };
        let Some(client) = self.client_for_attempt(now) else {
            return;
        };
        self.watermark_retry_at = None;
        self.watermark_in_flight = true;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let res = client.watermark(&session, agent.as_deref()).await;
            let _ = tx.send(Done::Watermark(res)).await;
        });
    }

    pub(super) fn maybe_send_batch(&mut self, now: Ts) {
        if self.client.is_none() || self.watermark.is_none() || self.transcript_in_flight {
            return;
        }
        if self.role() == Role::Child
            && self.watermark == Some(Watermark::NotFound)
            && !self.start_posted
        {
            return;
        }
        if self.ship_retry_at.is_some_and(|at| now < at) {
            return;
        }
        if self.recheck_watermark {
            // Read before resending: once the healing batch is stored, the watermark is past
            // any lines the server lost meanwhile and the loss could no longer be seen.
            if !self.watermark_in_flight && self.watermark_retry_at.is_none() {
                self.watermark_retry_at = Some(now);
            }
            return;
        }
        self.ship_retry_at = None;
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        let agent = self.agent_id().map(str::to_string);
        let vendor = self.opts.vendor.as_str();
        let body = match self.outbox.in_flight() {
            Some(b) => b.body(&session, agent.as_deref(), vendor),
            None => match self.outbox.next_batch() {
                Some(b) => b.body(&session, agent.as_deref(), vendor),
                None => return,
            },
        };
        let Some(client) = self.client_for_attempt(now) else {
            return;
        };
        let tx = self.tx.clone();
        let generation = self.ship_generation;
        self.transcript_in_flight = true;
        tokio::spawn(async move {
            let out = client.post_transcript(body).await;
            let _ = tx.send(Done::Transcript(generation, out)).await;
        });
    }

    pub(super) fn on_watermark(
        &mut self,
        res: Result<Watermark, crate::ship::client::Failure>,
        now: Ts,
    ) {
        self.watermark_in_flight = false;
        match res {
            Ok(w) => {
                self.watermark_backoff.reset();
                let resume = w.resume_line();
                info!(
                    event = "watermark",
                    resume_line = resume,
                    "server watermark: resume at line {resume}"
                );
                let first = self.watermark.is_none();
                self.recheck_watermark = false;
                if first {
                    self.set_resume(w, resume);
                    if w == Watermark::NotFound && self.role() == Role::Child && !self.start_posted
                    {
                        self.post_start();
                    }
                } else if resume < self.outbox.confirmed_to() {
                    // The server lost lines it had acknowledged: resend from its resume line.
                    // This check runs once per healed failure, never in a loop (a server that
                    // skips trailing lines would otherwise make it loop forever).
                    warn!(
                        event = "watermark",
                        resume_line = resume,
                        acknowledged_to = self.outbox.confirmed_to(),
                        "server is behind what it acknowledged; resending from line {resume}"
                    );
                    self.set_resume(w, resume);
                }
            }
            Err(f) => {
                if let crate::ship::client::Failure::Unauthorized { status } = f {
                    self.log_unauthorized(status);
                    self.token_refused = true;
                    self.watermark_retry_at = Some(now.plus(UNAUTHORIZED_RETRY));
                } else {
                    let delay = self.watermark_backoff.next_delay(f.retry_after());
                    warn!(event = "ship_failed", what = "watermark", error = %f, retry_in_ms = delay.as_millis() as u64, "failed to read the watermark: {f}; retrying in {delay:?}");
                    self.watermark_retry_at = Some(now.plus(delay));
                }
                if self.watermark.is_some() {
                    // The check before resending failed: no batch goes out until it answers.
                    self.recheck_watermark = true;
                }
            }
        }
    }

    /// The client for the next request. After a `401`/`403` the token is re-read first, right
    /// before the retry: re-read at the refusal, a token the kcap CLI refreshed during the
    /// minute's wait would only be picked up a minute later still.
    pub(super) fn client_for_attempt(&mut self, now: Ts) -> Option<KcapClient> {
        let client = self.client.clone()?;
        if std::mem::take(&mut self.token_refused) {
            client.reload_token(now);
        }
        Some(client)
    }

    pub(super) fn log_unauthorized(&mut self, status: u16) {
        if !self.unauthorized_logged {
            error!(
                event = "ship_failed",
                status,
                "the kcap server refused the token (HTTP {status}); keeping every line, re-reading the token every 60 s"
            );
            self.unauthorized_logged = true;
        }
    }

    pub(super) fn on_transcript(&mut self, out: Outcome, now: Ts) {
        self.transcript_in_flight = false;
        match out {
            Outcome::Delivered => {
                self.failing_since = None;
                self.unauthorized_logged = false;
                self.ship_backoff.reset();
                if let Some(b) = self.outbox.delivered() {
                    // A large backlog leaves the allocator holding its peak; hand it back once
                    // the outbox drains (an idle watcher should stay small).
                    self.trim_when_idle |= b.bytes() > 1 << 20;
                    self.lines_shipped += b.lines.len() as u64;
                    info!(
                        event = "batch_shipped",
                        first = b.first(),
                        last = b.last(),
                        count = b.lines.len(),
                        bytes = b.bytes(),
                        "shipped lines {}..={}",
                        b.first(),
                        b.last()
                    );
                }
                if let Some(ship) = &self.ship_reader {
                    self.outbox.skip_to(ship.next_number());
                }
            }
            Outcome::Transient {
                status,
                retry_after,
                error,
            } => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                let delay = self.ship_backoff.next_delay(retry_after);
                warn!(event = "ship_failed", status = status.map(i64::from).unwrap_or(-1), error = %error, retry_in_ms = delay.as_millis() as u64, "failed to ship lines: {error}; retrying in {delay:?}");
                self.ship_retry_at = Some(now.plus(delay));
            }
            Outcome::Unauthorized { status } => {
                // Once per failure streak (never in a loop): the watermark is read again
                // before the next attempt.
                if self.failing_since.is_none() {
                    self.recheck_watermark = true;
                }
                self.failing_since.get_or_insert(now);
                self.log_unauthorized(status);
                self.token_refused = true;
                self.ship_retry_at = Some(now.plus(UNAUTHORIZED_RETRY));
            }
            Outcome::Rejected {
                status,
                body_snippet,
            } => match self.outbox.refused() {
                Some(Refusal::Split) => {
                    warn!(
                        event = "ship_failed",
                        status,
                        "the server refused a batch (HTTP {status}); halving it to find the line it refuses"
                    );
                }
                Some(Refusal::Isolated(line)) => {
                    error!(
                        event = "ship_failed",
                        status,
                        line = line.number,
                        "the server refuses line {} (HTTP {status}: {body_snippet}); spooling it and going on",
                        line.number
                    );
                    self.spool_lines(vec![line]);
                }
                None => {}
            },
        }
    }

    pub(super) fn spool_hook(&mut self, route: &str, body: String) {
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        match spool::append_hook(&self.settings.config_dir, &session, route, &body) {
            Ok(SpoolOutcome::Written { path, .. }) => {
                info!(event = "spooled", route, path = %path.display(), "spooled {route} request to {}", path.display());
            }
            Ok(SpoolOutcome::OverCap { path, .. }) => {
                error!(event = "spooled", route, path = %path.display(), "hook spool {} is full; {route} request for session {session} not kept", path.display());
            }
            Err(e) => error!(
                event = "spooled",
                route, "failed to spool {route} request: {e}"
            ),
        }
    }

    /// Appends lines to the transcript spool in bounded records; they count as confirmed.
    pub(super) fn spool_lines(&mut self, lines: Vec<ShipLine>) {
        let Some(session) = self.session_id().map(str::to_string) else {
            return;
        };
        let agent = self.agent_id().map(str::to_string);
        for chunk in lines.chunks(crate::ship::outbox::MAX_BATCH_LINES) {
            let Some(last) = chunk.last().map(|l| l.number) else {
                continue;
            };
            let batch = TranscriptBatch {
                session_id: session.clone(),
                agent_id: agent.clone(),
                vendor: self.opts.vendor.clone(),
                lines: chunk.iter().map(ShipLine::text).collect(),
                line_numbers: chunk.iter().map(|l| l.number).collect(),
            };
            match spool::append_transcript(&self.settings.config_dir, &batch, self.clock.now()) {
                Ok(SpoolOutcome::Written { path, .. }) => {
                    self.lines_spooled += chunk.len() as u64;
                    self.outbox.confirm_spooled(last);
                    info!(event = "spooled", first = chunk[0].number, last, count = chunk.len(), path = %path.display(), "spooled lines {}..={last}", chunk[0].number);
                }
                Ok(SpoolOutcome::OverCap { path, first_line }) => {
                    if !self.spool_full_logged {
                        error!(event = "spooled", session = %session, first_line = first_line.unwrap_or(chunk[0].number), path = %path.display(), "transcript spool for session {session} is full (8 MiB); line {} and later were not kept (needs-import written)", first_line.unwrap_or(chunk[0].number));
                        self.spool_full_logged = true;
                    }
                    return;
                }
                Err(e) => {
                    error!(
                        event = "spooled",
                        "failed to spool lines {}..={last}: {e}", chunk[0].number
                    );
                    return;
                }
            }
        }
    }

    /// Ships what it can until `deadline` (online), reading everything complete on disk.
    pub(super) async fn deliver_until(&mut self, deadline: Ts) -> Result<()> {
        loop {
            self.read_new_lines()?;
            self.pump().await?;
            let all_read = self
                .ship_reader
                .as_ref()
                .is_none_or(|s| s.line_start() >= self.reader.line_start());
            if !self.online() || (self.outbox.is_idle() && all_read) {
                return Ok(());
            }
            let now = self.clock.now();
            if now >= deadline {
                return Ok(());
            }
            let next = self.next_due().min(deadline);
            tokio::select! {
                Some(done) = self.rx.recv() => self.on_done(done),
                _ = tokio::time::sleep(until(now, next)) => {}
            }
        }
    }

    /// Spools everything not confirmed: the outbox, then the rest of the file.
    pub(super) fn spool_unconfirmed(&mut self) {
        if self.identity.is_none() {
            return;
        }
        if self.watermark.is_none() {
            // The server never said where to resume: spool everything (resending is harmless;
            // losing a line is not).
            self.set_resume(Watermark::Empty, 0);
        }
        let lines = self.outbox.take_unconfirmed();
        self.spool_lines(lines);
        let Some(file) = self.rollout.as_ref().and_then(|r| r.file.try_clone().ok()) else {
            return;
        };
        let Some(mut ship) = self.ship_reader.take() else {
            return;
        };
        let limit = self.reader.line_start();
        let redactor = self.redactor;
        while ship.line_start() < limit && !self.spool_full_logged {
            let resume = self.outbox.confirmed_to();
            let mut chunk = Vec::new();
            let read = ship.read(&file, crate::ship::outbox::MAX_BATCH_LINES, &mut |line| {
                if line.number < resume || line.blank {
                    return;
                }
                chunk.push(ship_line(redactor, &line));
            });
            let Ok(st) = read else { break };
            self.spool_lines(chunk);
            if st.at_eof || st.lines == 0 {
                break;
            }
        }
        self.ship_reader = Some(ship);
    }
}

/// The shipped form of a raw line: redacted, or the oversize placeholder.
pub(super) fn ship_line(redactor: &Redactor, line: &crate::tail::Line) -> ShipLine {
    let text = match &line.text {
        Some(t) if !line.oversize => redactor.redact_line(t),
        _ => crate::ship::redact::oversize_placeholder(line.len),
    };
    ShipLine::new(line.number, &text)
}

/// Returns freed heap memory to the system (glibc keeps it otherwise).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no memory of ours is
    // touched, and it is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
