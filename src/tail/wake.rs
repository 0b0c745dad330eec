//! Wake-ups when the rollout may have changed.
//!
//! `notify` watches the rollout's **parent directory** (the file may not exist yet, and may
//! be renamed or replaced), and its events are only wake-ups: they set one coalesced permit
//! (`tokio::sync::Notify`), so a burst of writes never queues without bound. Notification is
//! not fully reliable (inotify limits, network file systems), so the runtime also checks the
//! file every poll interval; when the notifier cannot be created, or fails, polling is all
//! there is, with a warning that says why.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use notify::{RecursiveMode, Watcher};
use tokio::sync::Notify;

/// How changes are noticed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// File-change notification plus the safety-net poll.
    Notify,
    /// Polling only, and why.
    Poll(String),
}

/// The wake-up source for one rollout.
pub(crate) struct Wakeups {
    wake: Arc<Notify>,
    failed: Arc<AtomicBool>,
    mode: Mode,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Wakeups {
    /// Starts watching `rollout`'s parent directory, or polling only when `force_poll` is set
    /// or the notifier cannot be set up.
    pub(crate) fn start(rollout: &Path, force_poll: bool) -> Wakeups {
        let wake = Arc::new(Notify::new());
        let failed = Arc::new(AtomicBool::new(false));
        if force_poll {
            return Wakeups::polling(
                wake,
                failed,
                "polling forced by KCAP_WATCH_FORCE_POLL".into(),
            );
        }
        match watch_parent(rollout, wake.clone(), failed.clone()) {
            Ok(w) => Wakeups {
                wake,
                failed,
                mode: Mode::Notify,
                _watcher: Some(w),
            },
            Err(why) => Wakeups::polling(wake, failed, why),
        }
    }

    fn polling(wake: Arc<Notify>, failed: Arc<AtomicBool>, why: String) -> Wakeups {
        Wakeups {
            wake,
            failed,
            mode: Mode::Poll(why),
            _watcher: None,
        }
    }

    pub(crate) fn mode(&self) -> &Mode {
        &self.mode
    }

    /// Waits for the next wake-up (a coalesced permit: many events, one wake-up).
    pub(crate) async fn notified(&self) {
        self.wake.notified().await;
    }

    /// True once (then false) after the notifier reported an error; the caller warns and
    /// relies on polling from then on.
    pub(crate) fn take_failure(&self) -> bool {
        self.failed.swap(false, Ordering::Relaxed)
    }
}

fn watch_parent(
    rollout: &Path,
    wake: Arc<Notify>,
    failed: Arc<AtomicBool>,
) -> Result<notify::RecommendedWatcher, String> {
    let parent: PathBuf = match rollout.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = rollout.file_name().map(|n| n.to_os_string());
    let handler = move |res: notify::Result<notify::Event>| match res {
        Ok(event) => {
            let ours = event
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == name);
            if ours || event.paths.is_empty() {
                wake.notify_one();
            }
        }
        Err(_) => {
            failed.store(true, Ordering::Relaxed);
            wake.notify_one();
        }
    };
    let mut watcher = notify::recommended_watcher(handler)
        .map_err(|e| format!("file notification unavailable ({e}); polling instead"))?;
    watcher
        .watch(&parent, RecursiveMode::NonRecursive)
        .map_err(|e| {
            format!(
                "cannot watch directory {} ({e}); polling instead",
                parent.display()
            )
        })?;
    Ok(watcher)
}
