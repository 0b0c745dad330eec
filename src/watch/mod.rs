//! `watch`: the host (`crate::host`) with a fixed membership of one child.
//!
//! What is `watch`'s own is policy: the child takes its key itself once the header names it
//! (exit 75 when another watcher holds it), its notifier watches the rollout's parent
//! directory, any error of the child ends the process (exit 2 or 3), the pipeline's own end
//! (idle, reap, lifetime ceiling, `--once` done) ends the process with its [`ExitReason`], and
//! the status file lists the one key once it is known (never for `--once`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use tracing::{info, warn};

use crate::config::Settings;
use crate::host::child::{Child, Files};
use crate::host::{Ending, Host, Membership};
use crate::pipeline::Event;
use crate::platform::process::Incarnation;
use crate::status_file::KeyStatus;
use crate::time::Ts;
use clock::Clock;
use shutdown::Shutdown;

pub use crate::host::child::{Summary, WatchOptions};
pub use crate::host::{clock, shutdown};
pub use crate::pipeline::ExitReason;

/// Runs a watcher until it ends as designed (or fails); `SIGTERM`/`SIGINT` end it.
pub async fn run(
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Result<(ExitReason, Summary)> {
    run_until(opts, settings, clock, Shutdown::Signals).await
}

/// [`run`] with the shutdown passed in: a test ends the watcher through a channel.
pub async fn run_until(
    opts: WatchOptions,
    settings: Settings,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> Result<(ExitReason, Summary)> {
    // The parent as it is now, before anything slow: a pid the system later gives to another
    // process counts as the parent having exited.
    let parent = opts.parent_pid.map(Incarnation::observe);
    if parent.is_some() {
        // A spawned watcher outlives the terminal it may have been started from: closing
        // that terminal must not end it (the parent decides when it ends).
        match crate::platform::signals::detach_from_terminal() {
            Ok(detached) => tracing::debug!(detached, "left the terminal's session"),
            Err(e) => warn!(
                event = "detach_failed",
                "failed to leave the terminal's session: {e}"
            ),
        }
    }
    let once = opts.once;
    let mut host = Host::new(settings, clock, crate::status_file::Writer::Watch, !once)?;
    let slot = host.next_slot();
    let child = Child::new(slot, opts, &host.hub, Files::Own)?;
    host.children.insert(slot, child);
    let mut fixed = Fixed { slot, once };
    let result = host.run(&mut fixed, shutdown, parent).await;
    host.close();
    let summary = host
        .children
        .get(&slot)
        .map(|c| c.summary(&host.hub))
        .unwrap_or_default();
    result.map(|reason| (reason, summary))
}

/// One child for the life of the process.
struct Fixed {
    slot: u64,
    once: bool,
}

impl Membership for Fixed {
    type End = ExitReason;

    fn start(&mut self, host: &mut Host) -> Result<()> {
        let Some(child) = host.children.get(&self.slot) else {
            return Ok(());
        };
        let path = child.path().to_path_buf();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let failed = host.notifier.sync(std::slice::from_ref(&dir));
        let settings = &host.hub.settings;
        if let Some(why) = host.notifier.polling_because() {
            if settings.force_poll {
                info!(event = "polling", path = %path.display(), "{why}");
            } else {
                warn!(event = "polling", path = %path.display(), "{why}");
            }
        } else if let Some((dir, e)) = failed.first() {
            warn!(event = "polling", path = %path.display(), "cannot watch directory {} ({e}); polling instead", dir.display());
        }
        let slot = self.slot;
        host.with_child(self, slot, |c, hub| {
            c.start(hub)?;
            c.dispatch(hub, Event::Tick)
        })
    }

    fn settle(&mut self, host: &mut Host, _now: Ts) -> Result<Option<ExitReason>> {
        Ok(host
            .children
            .get_mut(&self.slot)
            .and_then(|c| c.exit.take()))
    }

    fn status_signature(&mut self, host: &mut Host) -> Option<u64> {
        let child = host.children.get(&self.slot)?;
        child.status_version()
    }

    fn status(&mut self, host: &mut Host) -> Option<Vec<KeyStatus>> {
        if self.once {
            return None;
        }
        let child = host.children.get(&self.slot)?;
        let (key, line) = (child.key()?, child.key_status()?);
        host.status.set_key(&key, &line.session_id);
        Some(vec![line])
    }

    /// A path that names the rollout by another spelling (a notifier that reports resolved
    /// paths, as macOS's does for `/var` under `/private/var`) still wakes the child: the
    /// directory watched is the rollout's own, so its file name is enough.
    fn on_other_paths(&mut self, host: &mut Host, paths: Vec<PathBuf>, _: bool) -> Result<()> {
        let Some(name) = host
            .children
            .get(&self.slot)
            .and_then(|c| c.path().file_name().map(|n| n.to_os_string()))
        else {
            return Ok(());
        };
        if paths
            .iter()
            .any(|p| p.file_name() == Some(name.as_os_str()))
        {
            let slot = self.slot;
            host.check(self, slot)?;
        }
        Ok(())
    }

    fn on_poll(&mut self, _: &mut Host) -> bool {
        false
    }

    fn on_ending(&mut self, _: &Host, _: Ending) {}

    fn child_failed(&mut self, _: &mut Host, _: u64, _: Child, error: anyhow::Error) -> Result<()> {
        // The process is the child: its error is the process's (exit 2, 3 or 75).
        Err(error)
    }
}
