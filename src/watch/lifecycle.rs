//! Lifecycle decisions wired into the loop: the one-shot subagent stop, session end, the
//! stall warning, idle end and the lifetime ceiling (the due times come from `crate::decide`).

use super::*;

impl Watcher {
    pub(super) fn on_stop(&mut self, out: Outcome, now: Ts) {
        self.stop_in_flight = false;
        match out {
            Outcome::Delivered => {
                self.stop.posted = true;
                info!(event = "subagent_stop_posted", "posted subagent-stop");
            }
            other => {
                if let Outcome::Unauthorized { .. } = other {
                    self.token_refused = true;
                }
                let status = match &other {
                    Outcome::Transient { status, .. } => status.map(i64::from).unwrap_or(-1),
                    Outcome::Unauthorized { status } | Outcome::Rejected { status, .. } => {
                        i64::from(*status)
                    }
                    Outcome::Delivered => 200,
                };
                warn!(event = "subagent_stop_failed", status, error = %other, "failed to post subagent-stop: {other}; retrying in {:?}", self.settings.stop_retry);
                self.stop.next_attempt = Some(now.plus(self.settings.stop_retry));
            }
        }
    }

    pub(super) fn due(&self, _now: Ts) -> decide::Due {
        decide::due_times(
            &self.state,
            self.role(),
            &self.windows(),
            self.stop,
            self.started,
            self.ceiling.as_ref(),
        )
    }

    /// The earliest time anything is due: a decision, a retry, the watermark.
    ///
    /// Only times the loop can act on count: a stop waiting for its transcript to be
    /// acknowledged, or a request already in flight, is woken by the answer instead, so a due
    /// time in the past can never turn the loop into a busy loop.
    pub(super) fn next_due(&self) -> Ts {
        let now = self.clock.now();
        let due = self.due(now);
        let mut next = now.plus(crate::time::MAX_WINDOW);
        let stop_actionable = !self.stop_in_flight
            && self.identity.is_some()
            && self.transcript_confirmed_through_turn_end();
        let candidates = [
            due.subagent_stop.filter(|_| stop_actionable),
            due.idle_end,
            due.stall_warning,
            due.lifetime_ceiling,
            self.ship_retry_at.filter(|_| !self.transcript_in_flight),
            self.watermark_retry_at
                .filter(|_| !self.watermark_in_flight && self.identity.is_some()),
        ];
        for t in candidates.into_iter().flatten() {
            next = next.min(t);
        }
        next
    }

    pub(super) fn transcript_confirmed_through_turn_end(&self) -> bool {
        match self.state.turn_end_line {
            Some(end) => self.watermark.is_some() && self.outbox.confirmed_to() > end,
            None => true,
        }
    }

    /// Acts on every decision due now. Returns the exit reason when the watcher must end.
    pub(super) async fn act_on_due(&mut self) -> Result<Option<ExitReason>> {
        let now = self.clock.now();
        let due = self.due(now);
        if due.stall_warning.is_some_and(|t| t <= now) {
            self.warn_stall(now);
        }
        if due.subagent_stop.is_some_and(|t| t <= now)
            && !self.stop_in_flight
            && self.identity.is_some()
            && self.transcript_confirmed_through_turn_end()
        {
            self.start_stop_attempt(now);
        }
        if let Some(c) = &mut self.ceiling {
            loop {
                match c.step(&self.state.pauses, now) {
                    CeilingStep::NotYet(_) => break,
                    CeilingStep::Granted(g) => {
                        let pause = self
                            .state
                            .pauses
                            .last()
                            .map(|p| {
                                format!(
                                    "usage_limit_exceeded opened {} until {}",
                                    p.opened_at,
                                    p.resets_at
                                        .map_or_else(|| "unknown".into(), |r| r.rfc3339())
                                )
                            })
                            .unwrap_or_default();
                        info!(
                            event = "pause_extension_granted",
                            grant_ms = g.grant.as_millis() as u64,
                            total_granted_ms = g.total_granted.as_millis() as u64,
                            remaining_cap_ms = g.remaining_cap.as_millis() as u64,
                            grant_count = g.grant_count,
                            pause = %pause,
                            "lifetime ceiling extended by {}ms of usage-limit pause credit",
                            g.grant.as_millis()
                        );
                    }
                    CeilingStep::Fire => {
                        let msg = c.exit_message(&self.state.pauses, now);
                        info!(event = "lifetime_ceiling", "{msg}");
                        return self
                            .finish(ExitReason::LifetimeCeiling(msg), false)
                            .await
                            .map(Some);
                    }
                }
            }
        }
        if due.idle_end.is_some_and(|t| t <= now) {
            let reason = match self.role() {
                Role::Child => ExitReason::IdleReap,
                Role::Session => ExitReason::IdleTimeout,
            };
            let quiet = now.duration_since(self.state.idle_since(self.started));
            info!(
                event = "idle_end",
                reason = reason.as_str(),
                idle_ms = quiet.as_millis() as u64,
                "no activity for {quiet:?}; ending"
            );
            return self.finish(reason, false).await.map(Some);
        }
        Ok(None)
    }

    pub(super) fn warn_stall(&mut self, now: Ts) {
        let silence = now.duration_since(self.state.last_activity.unwrap_or(self.started));
        let last_kind = self
            .state
            .last_kind
            .map(|(k, p, m)| format!("{k:?}/{p:?}{}", if m { " (malformed)" } else { "" }))
            .unwrap_or_else(|| "none".into());
        warn!(
            event = "stall_detected",
            turn_id = self.state.turn_id.as_deref().unwrap_or(""),
            silence_ms = silence.as_millis() as u64,
            last_line_kind = %last_kind,
            "turn {} has been silent for {:?} with no tool in flight (last line: {last_kind})",
            self.state.turn_id.as_deref().unwrap_or("?"),
            silence
        );
        self.state.stalled = true;
    }

    pub(super) fn stop_body(&self) -> String {
        let id = self.identity.as_ref();
        let message = self.state.stop_message();
        let redacted = self.redactor.redact_text(&message);
        subagent_stop_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
            truncate_utf8(&redacted, MAX_STOP_MESSAGE),
        )
    }

    pub(super) fn start_body(&self) -> String {
        let id = self.identity.as_ref();
        subagent_start_body(
            id.and_then(|i| i.session_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_id.as_deref()).unwrap_or(""),
            id.and_then(|i| i.agent_type.as_deref())
                .unwrap_or("subagent"),
            &self.path,
        )
    }

    pub(super) fn post_start(&mut self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        let body = self.start_body();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let out = client.post_hook("subagent-start", body).await;
            let _ = tx.send(Done::Start(out)).await;
        });
    }

    /// One stop attempt, off the loop (online), or into the hook spool (offline).
    pub(super) fn start_stop_attempt(&mut self, now: Ts) {
        let body = self.stop_body();
        match self.client_for_attempt(now) {
            Some(client) => {
                self.stop_in_flight = true;
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let out = client.post_hook("subagent-stop", body).await;
                    let _ = tx.send(Done::Stop(out)).await;
                });
            }
            None => {
                self.spool_hook("subagent-stop", body);
                self.stop.posted = true;
            }
        }
    }

    /// `--once`: one stop attempt, awaited (each attempt is bounded to 5 s by the client).
    pub(super) async fn post_stop_now(&mut self) {
        self.start_stop_attempt(self.clock.now());
        while self.stop_in_flight {
            match self.rx.recv().await {
                Some(done) => self.on_done(done),
                None => break,
            }
        }
        if !self.stop.posted {
            self.spool_hook("subagent-stop", self.stop_body());
        }
    }

    pub(super) async fn post_session_end(&mut self, reason: SessionEndReason) {
        // A watcher that never learned its session (no file, no ids) has nothing to end.
        let Some(id) = self.identity.clone() else {
            return;
        };
        let body = session_end_body(
            id.session_id.as_deref().unwrap_or(""),
            &self.path,
            id.cwd.as_deref().unwrap_or(""),
            reason,
            self.clock.now(),
        );
        match &self.client {
            Some(client) => match client.post_hook("session-end/codex", body.clone()).await {
                Outcome::Delivered => info!(event = "session_end_posted", "posted session-end"),
                other => {
                    warn!(event = "session_end_failed", error = %other, "failed to post session-end: {other}; spooling it");
                    self.spool_hook("session-end/codex", body);
                }
            },
            None => self.spool_hook("session-end/codex", body),
        }
    }
}
