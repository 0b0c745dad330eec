//! `supervise`: one process for every descendant sub-agent of one session (docs/behaviour.md
//! R8).
//!
//! `supervise` is the host (`crate::host`) with a discovered membership:
//!
//! - [`discover`]: which rollouts belong to the session's tree (children, grandchildren,
//!   ...), found as they appear under `<CODEX_HOME>`, followed across Codex's archive rename.
//! - [`run`]: the membership ([`run::run_until`]): each descendant found is wanted through the
//!   hub's key ownership (`crate::host::ownership`: beside the kcap CLI, leaving alone keys
//!   another live watcher holds and taking them over when it is gone), and an owned one gets a
//!   child of the host.
//!
//! `inspect --tree` (`crate::inspect::tree`) runs one [`discover::Discovery::scan`] and
//! `KeyFiles::judge` per descendant, without owning or watching anything.
//!
//! # How the `supervise` membership uses the host
//!
//! ```text
//! layout    = CodexLayout::for_session(rollout, codex_home)        // exit 2 on Err
//! root      = the session id (--session-id, else the rollout header's own id)
//! discovery = Discovery::new(layout, root)
//! host      = Host::new(settings, ..)   // hub (keys + heartbeat thread), notifier, status
//! host loop (one select!), calling the membership:
//!   changed paths the host's children do not follow → on_other_paths:
//!                          a held key's rollout → check_held; the rest → discovery.on_paths;
//!                          rescan → discovery.scan(now); then notifier.sync(watch_dirs)
//!   poll tick (KCAP_WATCH_POLL_MS) → on_poll: discovery.scan(now); keys.recheck(now)
//!                          (every child gets its safety-net check from the host)
//!   Found::Joined{thread_id, ..} → key = watcher_key(root, Some(thread_id));
//!                          keys.want(key, now): Owned → a child of the host
//!                          (session_id = root, agent_id = thread_id, R8); Held/Busy →
//!                          nothing, recheck() later returns the key once it is ours
//!   Found::Moved{..}     → the member's path (the child's guard follows the open file: R3)
//!   a pipeline ends      → settle: keys.release(key), or hold it when reaped (S2.7)
//!   a child fails        → that child alone ends, its key released
//!   shutdown             → the host tells every child; the end is when none is left
//! ```

pub(crate) mod discover;
pub(crate) mod run;

#[cfg(test)]
mod tests;
