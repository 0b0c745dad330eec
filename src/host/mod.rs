//! The host: one `select!` loop hosting one or many child pipelines, in the style of
//! cargo-nextest's runner, as Vector's `FileServer::run` serves one file or thousands.
//!
//! `watch` is the host with a fixed membership of one child (`crate::watch`), `supervise` the
//! host with a membership discovered from a session's tree (`crate::supervise::run`). What
//! differs between them is a [`Membership`]: which children there are, what ends the process,
//! what an error in one child does, and what the status file lists. Everything else is here,
//! once:
//!
//! - the [`Hub`] every child shares: settings, clock, one HTTP client, the bound on requests
//!   in flight, the channel request tasks answer on, and the keys the process holds
//!   ([`ownership::Ownership`]: one heartbeat thread for every key);
//! - one [`notifier::Notifier`] whose changed paths are routed to the child following each
//!   path, the rest to the membership;
//! - the safety-net poll, the parent's exit, the earliest due time of any child, and the
//!   shutdown, passed in ([`shutdown::Shutdown`]: signals in the binary, a channel in tests,
//!   as mini-redis's `server::run(listener, shutdown)` takes it);
//! - the status file ([`status::StatusWriter`]).
//!
//! `select!` turns what happened into an event, the child's pipeline answers synchronously with
//! actions, and the child's shell ([`child::Child`]) performs them (spawned requests, spool
//! writes) and feeds their outcomes back. There are no sub-loops: `--once` and shutdown are
//! phases of the pipeline, driven by this loop. Nothing slow runs on the loop: requests are
//! spawned tasks, heartbeats beat on their own thread.

pub(crate) mod child;
pub mod clock;
pub(crate) mod net;
pub(crate) mod notifier;
pub(crate) mod ownership;
pub mod shutdown;
pub(crate) mod status;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::{Semaphore, mpsc};
use tracing::{info, warn};

use crate::config::Settings;
use crate::key::Role;
use crate::pipeline::{Event, PipelineConfig};
use crate::platform::process::Incarnation;
use crate::platform::signals::SignalName;
use crate::platform::ticker::Ticker;
use crate::ship::client::{Deadlines, KcapClient};
use crate::ship::protocol::{Failure, Hook, Watermark};
use crate::status_file::{KeyStatus, Writer};
use crate::time::Ts;
use child::Child;
use clock::{Clock, until};
use net::SafetyNet;
use notifier::Notifier;
use ownership::Ownership;
use shutdown::Shutdown;
use status::StatusWriter;

/// Answers of spawned request tasks.
pub(crate) enum Done {
    Watermark(Result<Watermark, Failure>),
    Shipped(u64, Result<(), Failure>),
    Posted(Hook, Result<(), Failure>),
}

impl Done {
    pub(crate) fn into_event(self) -> Event {
        match self {
            Done::Watermark(result) => Event::Watermark(result),
            Done::Shipped(generation, result) => Event::Shipped { generation, result },
            Done::Posted(hook, result) => Event::Posted { hook, result },
        }
    }
}

/// Requests in flight at once, over every child of the process: a burst from many children
/// queues here instead of opening one connection each.
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 8;

/// What every child of one process shares: settings, the clock, one HTTP client (one
/// connection pool), the bound on requests in flight, the channel request tasks answer on
/// (each answer tagged with its child's slot), and the keys the process holds.
pub(crate) struct Hub {
    pub settings: Settings,
    /// What every child's pipeline is given of the settings (no secret in it).
    pub pipeline_config: PipelineConfig,
    pub clock: Arc<dyn Clock>,
    pub client: Option<KcapClient>,
    /// Every key the process owns, beaten by one heartbeat thread.
    pub keys: Ownership,
    tx: mpsc::Sender<(u64, Done)>,
    limit: Arc<Semaphore>,
    /// Every child's next wake with its slot, in order: the loop takes the earliest without
    /// asking each of hundreds of children at every turn ([`Host::earliest_wake`]).
    wakes: std::sync::Mutex<std::collections::BTreeSet<(Ts, u64)>>,
    /// Slots of children whose pipeline asked to end since the membership last looked.
    exited: std::sync::Mutex<Vec<u64>>,
}

impl Hub {
    pub(crate) fn new(
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<(Hub, mpsc::Receiver<(u64, Done)>)> {
        let client = match &settings.server {
            Some(url) => {
                let token = settings.credentials(url);
                Some(KcapClient::new(url, token, Deadlines::default())?)
            }
            None => None,
        };
        let keys = Ownership::start_beating_every(&settings.watcher_dir, settings.heartbeat_every)
            .with_context(|| {
                format!(
                    "failed to start owning keys in {}",
                    settings.watcher_dir.display()
                )
            })?;
        let (tx, rx) = mpsc::channel(64);
        Ok((
            Hub {
                pipeline_config: pipeline_config(&settings),
                settings,
                clock,
                client,
                keys,
                tx,
                limit: Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT)),
                wakes: Default::default(),
                exited: Default::default(),
            },
            rx,
        ))
    }

    /// The child in `slot` moved its next wake from `from` to `to`.
    pub(crate) fn wake_moved(&self, slot: u64, from: Option<Ts>, to: Option<Ts>) {
        // A panic while holding the lock left a set whose stale entries the loop drops.
        let mut wakes = self.wakes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(from) = from {
            wakes.remove(&(from, slot));
        }
        if let Some(to) = to {
            wakes.insert((to, slot));
        }
    }

    /// The child in `slot` asked to end.
    pub(crate) fn exited(&self, slot: u64) {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(slot);
    }

    /// The slots of the children that asked to end since the last call.
    pub(crate) fn take_exited(&self) -> Vec<u64> {
        std::mem::take(&mut *self.exited.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Runs `request` as a task once a request slot is free; its answer goes to `slot`.
    fn spawn<F>(&self, slot: u64, request: F)
    where
        F: std::future::Future<Output = Done> + Send + 'static,
    {
        let tx = self.tx.clone();
        let limit = self.limit.clone();
        tokio::spawn(async move {
            // Never closed: the semaphore lives as long as the hub.
            let _permit = limit.acquire_owned().await.ok();
            let done = request.await;
            let _ = tx.send((slot, done)).await;
        });
    }
}

/// What every child's pipeline is given of `settings`: windows and pacing, no server address,
/// token or path.
pub(crate) fn pipeline_config(settings: &Settings) -> PipelineConfig {
    PipelineConfig {
        online: settings.server.is_some(),
        child: settings.windows_for(Role::Child),
        session: settings.windows_for(Role::Session),
        lifetime: settings.lifetime,
        max_pause_credit: settings.max_pause_credit,
        stop_retry: settings.stop_retry,
    }
}

/// Why the host is ending, once it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    Signal(SignalName),
    ParentExited,
}

impl Ending {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ending::Signal(name) => name,
            Ending::ParentExited => "parent_exited",
        }
    }

    fn event(self) -> Event {
        match self {
            Ending::Signal(name) => Event::Signal(name),
            Ending::ParentExited => Event::ParentExited,
        }
    }
}

/// What a host's members are and what they mean for the process: `watch`'s fixed one child or
/// `supervise`'s discovered tree. The host calls these from its one loop.
pub(crate) trait Membership {
    /// What the host returns when it ends as designed.
    type End;

    /// Before the loop, once the shutdown is armed: the first children, the directories to
    /// watch.
    fn start(&mut self, host: &mut Host) -> Result<()>;

    /// At the top of every turn: reaps children whose pipeline ended, and says whether the
    /// host ends now.
    fn settle(&mut self, host: &mut Host, now: Ts) -> Result<Option<Self::End>>;

    /// The status file's lines now (`None`: nothing to write yet).
    fn status(&mut self, host: &mut Host) -> Option<Vec<KeyStatus>>;

    /// A number that changes whenever [`Membership::status`] would say something else, where
    /// one is cheap to find (`None`: the lines are built and compared).
    fn status_signature(&mut self, _host: &mut Host) -> Option<u64> {
        None
    }

    /// When the membership itself wants the loop to turn again (work left for a later turn).
    fn next_wake(&self, _now: Ts) -> Option<Ts> {
        None
    }

    /// Changed paths no child follows (`rescan`: too many, or unknown ones), while the host is
    /// not ending; not called for a batch that named children's files only.
    fn on_other_paths(&mut self, host: &mut Host, paths: Vec<PathBuf>, rescan: bool) -> Result<()>;

    /// Every poll interval while the host is not ending, before the children's own check.
    /// `true` when it found something notification had not reported (a file discovery
    /// scanned for).
    fn on_poll(&mut self, host: &mut Host) -> bool;

    /// Whether something must be looked at every configured poll interval, which no
    /// notification reports (a key another watcher holds, a claim that keeps failing): the
    /// safety net then keeps the configured period ([`net`]).
    fn needs_every_poll(&self, _host: &Host) -> bool {
        false
    }

    /// The host starts ending: every child is about to be told.
    fn on_ending(&mut self, host: &Host, why: Ending);

    /// `child` failed with `error` and left the host: `Err` ends the host with that error,
    /// `Ok` lets the other children go on.
    fn child_failed(
        &mut self,
        host: &mut Host,
        slot: u64,
        child: Child,
        error: anyhow::Error,
    ) -> Result<()>;
}

/// The loop's state: the hub, the notifier, the status file and the children by slot.
pub(crate) struct Host {
    pub hub: Hub,
    rx: mpsc::Receiver<(u64, Done)>,
    pub notifier: Notifier,
    pub status: StatusWriter,
    /// What [`Membership::status_signature`] said when the lines were last built.
    status_signature: Option<u64>,
    pub children: BTreeMap<u64, Child>,
    next_slot: u64,
    /// Why the host is ending, once it is.
    pub ending: Option<Ending>,
    /// Whether children follow their files (`watch --once` reads what is on disk only).
    follow: bool,
    /// The safety-net poll's period ([`net`]).
    net: SafetyNet,
}

impl Host {
    /// A host over `settings`, writing the status file as `writer`; `follow`: children follow
    /// their files for more lines.
    pub(crate) fn new(
        settings: Settings,
        clock: Arc<dyn Clock>,
        writer: Writer,
        follow: bool,
    ) -> Result<Host> {
        let notifier = Notifier::start(settings.force_poll);
        let net = SafetyNet::new(settings.poll_interval);
        let (hub, rx) = Hub::new(settings, clock)?;
        let status = StatusWriter::new(
            hub.settings.config_dir.clone(),
            writer,
            hub.settings.server.clone(),
        );
        Ok(Host {
            hub,
            rx,
            notifier,
            status,
            status_signature: None,
            children: BTreeMap::new(),
            next_slot: 0,
            ending: None,
            follow,
            net,
        })
    }

    /// The slot the next child is to be given.
    pub(crate) fn next_slot(&mut self) -> u64 {
        let slot = self.next_slot;
        self.next_slot += 1;
        slot
    }

    /// Runs the loop until the membership ends it (or a child's error does).
    pub(crate) async fn run<M: Membership>(
        &mut self,
        members: &mut M,
        shutdown: Shutdown,
        parent: Option<Incarnation>,
    ) -> Result<M::End> {
        // First: a child's start may already spool a large file offline, and a SIGTERM
        // meanwhile must end it through its pipeline, not kill it.
        let mut signals = shutdown
            .arm()
            .context("failed to install a signal handler")?;
        members.start(self)?;
        // The safety-net poll on its own ticker (the kernel's timer: one wake-up per period),
        // and one timer for every due time, set again only when the earliest one moves: a
        // timer registered anew at each turn of the loop woke the runtime for nothing.
        let mut ticker = Ticker::new(self.net.period(), !self.hub.clock.follows_runtime());
        self.status.set_poll(self.net.period());
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<tokio::time::Instant> = None;
        loop {
            let now = self.hub.clock.now();
            if let Some(end) = members.settle(self, now)? {
                return Ok(end);
            }
            if ticker.set_period(self.net.period()) {
                self.status.set_poll(self.net.period());
            }
            // Every child's line is built only when a write could follow: with thousands of
            // children, building them at every turn of the loop cost more than shipping.
            if self.status.may_write(now) {
                // And only when they could differ from the last ones: an idle supervisor's
                // children say the same every second.
                let signature = members.status_signature(self);
                if signature.is_none()
                    || signature != self.status_signature
                    || self.status.due_anyway(now)
                {
                    if let Some(lines) = members.status(self) {
                        self.status.update(lines, now);
                    }
                    self.status_signature = signature;
                } else {
                    self.status.seen();
                }
            } else {
                self.status.maybe_changed();
            }
            let next = self
                .earliest_wake()
                .into_iter()
                .chain(self.status.next_due())
                .chain(members.next_wake(now))
                .min();
            match next {
                Some(due) => {
                    let deadline = tokio::time::Instant::now() + until(now, due);
                    if armed.is_none_or(|at| moved(at, deadline)) {
                        timer.as_mut().reset(deadline);
                        armed = Some(deadline);
                    }
                }
                None => armed = None,
            }
            tokio::select! {
                _ = self.notifier.changed(), if self.follow => self.on_changes(members)?,
                Some((slot, done)) = self.rx.recv() => {
                    self.with_child(members, slot, |c, hub| c.dispatch(hub, done.into_event()))?;
                }
                _ = ticker.tick() => self.on_poll(members, parent.as_ref())?,
                _ = &mut timer, if armed.is_some() => {
                    // Fired: it is set again for whatever is due next.
                    armed = None;
                    let now = self.hub.clock.now();
                    let due: Vec<u64> = self
                        .children
                        .iter()
                        .filter(|(_, c)| c.next_wake().is_some_and(|t| t <= now))
                        .map(|(slot, _)| *slot)
                        .collect();
                    for slot in due {
                        // A partial last line may have completed (the shutdown waits for it).
                        self.check_by(members, slot, FoundBy::Timer)?;
                    }
                }
                name = signals.recv() => self.end_all(members, Ending::Signal(name))?,
            }
        }
    }

    /// Clean exit: the status file goes before the keys' locks do (a file outliving its
    /// writer's key would be stale at once), then every key is released.
    pub(crate) fn close(&mut self) {
        self.status.remove();
        self.hub.keys.release_all();
    }

    /// The earliest next wake of any child. Entries of children gone, or whose wake moved
    /// without the hub being told (a stop latched by the membership), are dropped as they
    /// come first.
    pub(crate) fn earliest_wake(&self) -> Option<Ts> {
        let mut wakes = self.hub.wakes.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&(at, slot)) = wakes.first() {
            if self.children.get(&slot).and_then(Child::next_wake) == Some(at) {
                return Some(at);
            }
            wakes.pop_first();
        }
        None
    }

    /// Runs `f` on one child; an error takes the child out and is the membership's to judge.
    pub(crate) fn with_child<M: Membership>(
        &mut self,
        members: &mut M,
        slot: u64,
        f: impl FnOnce(&mut Child, &Hub) -> Result<()>,
    ) -> Result<()> {
        let Some(child) = self.children.get_mut(&slot) else {
            // An answer for a child that already ended.
            return Ok(());
        };
        match f(child, &self.hub) {
            Ok(()) => Ok(()),
            Err(e) => match self.children.remove(&slot) {
                Some(child) => members.child_failed(self, slot, child, e),
                None => Err(e),
            },
        }
    }

    /// The child's check after an event named its file: what its file holds now, then
    /// whatever is due.
    pub(crate) fn check<M: Membership>(&mut self, members: &mut M, slot: u64) -> Result<()> {
        self.check_by(members, slot, FoundBy::Event).map(|_| ())
    }

    /// The child's check, for a reason: what its file holds now, then whatever is due.
    /// `true` when the file held something new.
    fn check_by<M: Membership>(&mut self, members: &mut M, slot: u64, by: FoundBy) -> Result<bool> {
        let follow = self.follow;
        let now = self.hub.clock.now();
        let mut progressed = false;
        self.with_child(members, slot, |c, hub| {
            if follow {
                let before = c.progress();
                c.on_file_change(hub)?;
                if c.progress() != before {
                    progressed = true;
                    c.found_new(by, now);
                }
            }
            c.dispatch(hub, Event::Tick)
        })?;
        Ok(progressed)
    }

    /// Routes changed paths: a followed rollout wakes its child, anything else is the
    /// membership's.
    fn on_changes<M: Membership>(&mut self, members: &mut M) -> Result<()> {
        let changes = self.notifier.take();
        self.net.notified(&changes);
        if changes.failed {
            warn!(
                event = "polling",
                "file notification failed; relying on polling every {:?}",
                self.hub.settings.poll_interval
            );
        }
        let mut others = Vec::new();
        for path in changes.paths {
            // A scan of the children, not a map of every child's path built for each batch: a
            // batch names a path or two, and the map cost a copy and a hash of every child's
            // path for each line appended to any child. Each child keeps its path's normal
            // form, so the scan compares bytes, where `Path`'s `==` parsed both paths into
            // components for every child; a path as the notifier spells it (the watched
            // directory, which is a child's own, joined to a name) is normal already, and
            // only one that is found nowhere is put in its normal form to be sure.
            let find = |children: &BTreeMap<u64, Child>, spelled: &std::path::Path| {
                children
                    .iter()
                    .find(|(_, c)| c.follows(spelled))
                    .map(|(slot, _)| *slot)
            };
            let slot = find(&self.children, &path)
                .or_else(|| find(&self.children, &child::normal_form(&path)));
            match slot {
                Some(slot) => self.check(members, slot)?,
                None => others.push(path),
            }
        }
        if changes.rescan {
            // Events that named no path (or too many): any child's file may have changed.
            for slot in self.slots() {
                self.check(members, slot)?;
            }
        }
        // A batch that named only children's files is nothing for the membership (a
        // supervisor synced its watched directories after every line appended to any child).
        if self.ending.is_none() && (!others.is_empty() || changes.rescan) {
            members.on_other_paths(self, others, changes.rescan)?;
        }
        Ok(())
    }

    /// The poll: the parent's exit, the membership's own checks, every child's safety net.
    fn on_poll<M: Membership>(
        &mut self,
        members: &mut M,
        parent: Option<&Incarnation>,
    ) -> Result<()> {
        let mut missed = false;
        if self.ending.is_none() {
            if let Some(parent) = parent
                && !parent.running()
            {
                let pid = parent.pid();
                info!(event = "parent_exited", pid, "parent process {pid} exited");
                return self.end_all(members, Ending::ParentExited);
            }
            missed |= members.on_poll(self);
        }
        for slot in self.slots() {
            // Something new the poll found first: no event had reported it (or one was
            // still on its way, which only makes the net wait longer to stretch).
            missed |= self.check_by(members, slot, FoundBy::Poll)?;
        }
        let now = self.hub.clock.now();
        let reliable = self.follow
            && self.ending.is_none()
            && parent.is_none()
            && self.notifier.reports_every_change()
            && !members.needs_every_poll(self)
            && self.children.values().all(|c| c.notified_reliably(now));
        self.net.polled(reliable, missed);
        // The redactor, once a quiet spell no longer needs it, and the memory the last batches
        // freed, each too small to trim for when it drained.
        let now = std::time::Instant::now();
        if crate::ship::redact::release_unused(now) {
            crate::platform::memory::trim_now();
        }
        crate::platform::memory::release_freed();
        crate::platform::memory::release_idle(now);
        Ok(())
    }

    /// Tells every child the process is ending; each finishes as `watch` would (R3, R4.4).
    fn end_all<M: Membership>(&mut self, members: &mut M, why: Ending) -> Result<()> {
        members.on_ending(self, why);
        self.ending = Some(why);
        let follow = self.follow;
        for slot in self.slots() {
            self.with_child(members, slot, |c, hub| {
                // What was appended just before is part of what ends with it.
                if follow {
                    c.on_file_change(hub)?;
                }
                c.dispatch(hub, why.event())
            })?;
        }
        Ok(())
    }

    fn slots(&self) -> Vec<u64> {
        self.children.keys().copied().collect()
    }
}

/// What found a child's file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FoundBy {
    /// An event of the notifier named it.
    Event,
    /// The safety-net poll: no event had (yet) named it.
    Poll,
    /// A due time of the child's own.
    Timer,
}

/// Whether the loop's timer must be set again for `deadline`: a move of under a millisecond
/// (the timer's resolution; the due times are recomputed from "now" at each turn) is not one.
fn moved(armed: tokio::time::Instant, deadline: tokio::time::Instant) -> bool {
    let tolerance = std::time::Duration::from_millis(1);
    deadline + tolerance <= armed || armed + tolerance <= deadline
}
