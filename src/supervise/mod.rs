//! `supervise`: one process for every descendant sub-agent of one session (issue 14,
//! `revision-2.md` R8).
//!
//! This module holds the parts of the supervisor that do not depend on the per-child
//! pipeline:
//!
//! - [`discover`]: which rollouts belong to the session's tree (children, grandchildren,
//!   ...), found as they appear under `<CODEX_HOME>`, followed across Codex's archive rename.
//! - [`ownership`]: owning each child's key beside the kcap CLI (its spawn lock, the key's
//!   `.lock`, `.pid`, `.started`, `.heartbeat`), leaving alone keys another live watcher
//!   holds and taking them over when it is gone, with one heartbeat thread for all keys.
//! - [`wake`]: the one change notifier, over the directories discovery names.
//! - [`run`]: the dispatcher wiring them to one `watch` child shell per owned descendant.
//!
//! `inspect --tree` (`crate::inspect::tree`) runs one [`discover::Discovery::scan`] and
//! [`ownership::KeyFiles::judge`] per descendant, without owning or watching anything.
//!
//! # How the `supervise` command wires them
//!
//! ```text
//! layout    = CodexLayout::for_session(rollout, codex_home)        // exit 2 on Err
//! root      = the session id (--session-id, else the rollout header's own id)
//! discovery = Discovery::new(layout, root)
//! ownership = Ownership::start(watcher_dir)?                        // heartbeat thread
//! notifier  = DirWatcher::start(force_poll)
//! loop (one select!):
//!   notifier.changed()  => c = notifier.take();
//!                          paths of owned children → wake their pipelines;
//!                          the rest → discovery.on_paths(paths, now);
//!                          c.rescan → discovery.scan(now)
//!   poll tick (KCAP_WATCH_POLL_MS) => discovery.scan(now); ownership.recheck(now);
//!                          every pipeline gets its safety-net check
//!   after each of the two: notifier.sync(&discovery.watch_dirs())
//!   Found::Joined{thread_id, ..} → key = watcher_key(root, Some(thread_id));
//!                          ownership.want(key, now): Owned → start the child pipeline
//!                          (session_id = root, agent_id = thread_id, R8); Held/Busy →
//!                          nothing, recheck() later returns the key once it is ours
//!   Found::Moved{..}     → tell that child's pipeline its new path (R3: not a rewrite)
//!   a pipeline ends      → ownership.release(key)
//!   shutdown             → pipelines finish within the budget, then ownership.shutdown()
//! ```

pub(crate) mod discover;
pub(crate) mod ownership;
pub(crate) mod run;
pub(crate) mod wake;

#[cfg(test)]
mod tests;
