//! Finding every descendant rollout of one session (docs/behaviour.md R8).
//!
//! Two layers, as everywhere in this crate:
//!
//! - [`Tree`] is the pure core: it takes facts read from rollout headers, in any order, and
//!   answers which threads have just joined the supervised tree. A thread joins when its
//!   header names a thread of the tree (the root or any member) as its parent, under either
//!   header form (top-level `parent_thread_id`, or `source.subagent.thread_spawn.
//!   parent_thread_id` in child files written before mid-2026), or names the root as its
//!   `session_id` (children without a parent id, R4.6). Codex multi-agent v2 writes
//!   grandchildren, and a grandchild's file can be seen before its parent's: a candidate
//!   whose parent is not (yet) a member waits, and joins in the same call that adds its
//!   parent.
//! - [`Discovery`] is the thin scanner over `<CODEX_HOME>`: the date directories from the
//!   session's own date on (`sessions/YYYY/MM/DD`, local dates, so the session's directory
//!   and every later one, including days that begin while it runs) and
//!   `archived_sessions/`. Each rollout file is classified once, by its first line, and
//!   remembered by device and inode, so a file Codex archives (a rename into
//!   `archived_sessions/`) keeps its identity and is reported as moved, never as new; a
//!   directory is listed again only when its modification time says an entry changed.
//!
//! Where those directories and files are, and what a header says, is Codex's knowledge
//! (`crate::codex::layout`). Change notification for the directories
//! [`Discovery::watch_dirs`] names is the host's notifier (`crate::host::notifier`); the
//! safety-net poll is [`Discovery::scan`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::codex::SessionMetaInfo;
use crate::codex::header::{Identity, Role, normalize_id};
use crate::codex::layout::{
    CodexLayout, Day, Header, is_retained_copy, is_rollout_name, read_header, subdirs,
};

/// What a rollout's first line says about its thread: the facts [`Tree`] decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadFacts {
    /// The thread's own id, without dashes.
    pub id: String,
    /// Every parent the header names (top level and under `thread_spawn`), without dashes.
    pub parents: Vec<String>,
    /// `session_id` when present and not the thread's own id, without dashes.
    pub session_id: Option<String>,
    /// Whether the header says it is a sub-agent (docs/behaviour.md X).
    pub is_child: bool,
    /// `agent_type` for lifecycle requests.
    pub agent_type: Option<String>,
}

impl ThreadFacts {
    /// `None` when the header has no usable id.
    pub fn from_meta(meta: &SessionMetaInfo) -> Option<ThreadFacts> {
        let identity = Identity::from_meta(meta);
        let clean = |s: &Option<String>| s.as_deref().map(normalize_id).filter(|id| !id.is_empty());
        let id = clean(&meta.id)?;
        let mut parents = Vec::new();
        for parent in [
            clean(&meta.parent_thread_id),
            clean(&meta.spawn_parent_thread_id),
        ]
        .into_iter()
        .flatten()
        {
            if parent != id && !parents.contains(&parent) {
                parents.push(parent);
            }
        }
        let session_id = clean(&meta.session_id).filter(|s| *s != id);
        Some(ThreadFacts {
            id,
            parents,
            session_id,
            is_child: identity.role == Role::Child,
            agent_type: identity.agent_type,
        })
    }
}

/// The supervised tree: the root session and every descendant found so far.
///
/// Pure: no file, no clock. Memory is bounded by the candidates offered (one small entry
/// each), since every rollout is offered once.
#[derive(Debug)]
pub(crate) struct Tree {
    root: String,
    /// Member id → its parent in the tree (the root for a child linked by `session_id`).
    members: HashMap<String, String>,
    /// Candidates whose named parents are not members yet, by each parent they name.
    waiting: HashMap<String, Vec<ThreadFacts>>,
    /// Candidates linked to the tree only through a parent that is not a member yet.
    waiting_ids: HashSet<String>,
}

impl Tree {
    /// A tree with only its root (the supervised session's id, with or without dashes).
    pub fn new(root: &str) -> Tree {
        Tree {
            root: normalize_id(root),
            members: HashMap::new(),
            waiting: HashMap::new(),
            waiting_ids: HashSet::new(),
        }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// Whether `id` is a descendant already in the tree (the root is not a descendant).
    pub fn contains(&self, id: &str) -> bool {
        self.members.contains_key(id)
    }

    /// The member's parent in the tree.
    pub fn parent_of(&self, id: &str) -> Option<&str> {
        self.members.get(id).map(String::as_str)
    }

    /// Whether `id` is a candidate waiting for one of its parents to join.
    #[cfg(test)]
    pub fn is_waiting(&self, id: &str) -> bool {
        self.waiting_ids.contains(id)
    }

    fn in_tree(&self, id: &str) -> bool {
        id == self.root || self.members.contains_key(id)
    }

    /// Offers one thread's facts; returns every thread that joined because of it, parents
    /// before their children (the offered thread first, then any waiting descendants).
    /// Offering a member again, the root, or a thread that is no sub-agent joins nothing.
    pub fn offer(&mut self, facts: ThreadFacts) -> Vec<ThreadFacts> {
        if !facts.is_child || self.in_tree(&facts.id) || self.waiting_ids.contains(&facts.id) {
            return Vec::new();
        }
        let linked_parent = facts
            .parents
            .iter()
            .find(|p| self.in_tree(p))
            .cloned()
            .or_else(|| {
                // A child without a parent id (review, memory consolidation) still names the
                // root as its session.
                (facts.parents.is_empty() && facts.session_id.as_deref() == Some(&self.root))
                    .then(|| self.root.clone())
            });
        let Some(parent) = linked_parent else {
            if !facts.parents.is_empty() {
                self.waiting_ids.insert(facts.id.clone());
                for p in &facts.parents {
                    self.waiting
                        .entry(p.clone())
                        .or_default()
                        .push(facts.clone());
                }
            }
            return Vec::new();
        };
        let mut joined = Vec::new();
        let mut queue = vec![(facts, parent)];
        while let Some((member, parent)) = queue.pop() {
            if self.in_tree(&member.id) {
                continue;
            }
            self.waiting_ids.remove(&member.id);
            self.members.insert(member.id.clone(), parent);
            if let Some(children) = self.waiting.remove(&member.id) {
                // Reversed so that popping keeps discovery order among siblings.
                for child in children.into_iter().rev() {
                    queue.push((child, member.id.clone()));
                }
            }
            joined.push(member);
        }
        joined
    }
}

/// A rollout's identity across renames (device and inode, or volume and file index).
pub(crate) use crate::platform::file_id::FileId;

/// What discovery found in one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// A descendant joined the tree: start (or try to take over) its child pipeline.
    Joined {
        /// The descendant's own id (its `agent_id`), without dashes.
        thread_id: String,
        /// Its parent in the tree (a child of the root or another descendant).
        parent_id: String,
        agent_type: Option<String>,
        path: PathBuf,
    },
    /// A member's rollout now lives at another path (Codex archived it): same file, keep
    /// following it and report the new path.
    Moved {
        thread_id: String,
        from: PathBuf,
        to: PathBuf,
    },
    /// A second rollout of a member's thread (a continuation segment, a retained copy
    /// `rollout-...-<thread id>_<suffix>.jsonl`): never a child of its own, and not followed
    /// either (the server's line numbers have no rule for a second file of one thread).
    Continuation { thread_id: String, path: PathBuf },
}

#[derive(Debug)]
enum Class {
    /// Header not complete yet; retried when its size changes.
    NotYet { len: u64 },
    /// A descendant.
    Member(String),
    /// Waiting for a parent, or not part of this tree (kept so it is never read again).
    Other,
}

#[derive(Debug)]
struct FileEntry {
    path: PathBuf,
    class: Class,
}

/// What is known about a listed directory.
#[derive(Debug, Default)]
struct Listing {
    mtime: Option<SystemTime>,
    listed_at: Option<SystemTime>,
    names: HashSet<PathBuf>,
}

impl Listing {
    /// Listed, and the directory's modification time is still the one it had then, long
    /// enough before the listing to trust (an entry added since would have changed it).
    fn still_current(&self, mtime: Option<SystemTime>) -> bool {
        self.listed_at.is_some()
            && self.mtime == mtime
            && mtime.is_some_and(|m| {
                self.listed_at
                    .is_some_and(|at| at.duration_since(m).is_ok_and(|d| d > RACY_MTIME))
            })
    }
}

fn mtime_of(dir: &Path) -> Option<SystemTime> {
    fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// A directory listed again within this much of its last change: coarse file-system
/// timestamps can give an entry created just after a listing the same mtime as before it.
const RACY_MTIME: Duration = Duration::from_secs(2);

/// The scanner: the directories to look at, every rollout classified so far, and the tree.
#[derive(Debug)]
pub(crate) struct Discovery {
    layout: CodexLayout,
    tree: Tree,
    files: HashMap<FileId, FileEntry>,
    by_path: HashMap<PathBuf, FileId>,
    /// Date directories (`sessions/YYYY/MM/DD`) and `archived_sessions`, with what was seen.
    rollout_dirs: BTreeMap<PathBuf, Listing>,
    /// `sessions`, its year and month directories (where new date directories appear).
    structure_dirs: BTreeMap<PathBuf, Listing>,
    thread_files: HashMap<String, FileId>,
    /// How many times the structure directories were listed (tests check it is not every
    /// poll).
    #[cfg(test)]
    pub(super) structure_listings: u64,
}

impl Discovery {
    /// A scanner for the tree rooted at `root_id` (the supervised session's own id).
    pub fn new(layout: CodexLayout, root_id: &str) -> Discovery {
        Discovery {
            layout,
            tree: Tree::new(root_id),
            files: HashMap::new(),
            by_path: HashMap::new(),
            rollout_dirs: BTreeMap::new(),
            structure_dirs: BTreeMap::new(),
            thread_files: HashMap::new(),
            #[cfg(test)]
            structure_listings: 0,
        }
    }

    #[cfg(test)]
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The current path of a member's rollout.
    pub fn path_of(&self, thread_id: &str) -> Option<&Path> {
        if !self.tree.contains(thread_id) {
            return None;
        }
        let id = self.thread_files.get(thread_id)?;
        self.files.get(id).map(|f| f.path.as_path())
    }

    /// Every directory a new or moved rollout can appear in, or a new date directory can
    /// be created in: what the change notifier should watch (each non-recursively).
    pub fn watch_dirs(&self) -> Vec<PathBuf> {
        self.structure_dirs
            .keys()
            .chain(self.rollout_dirs.keys())
            .cloned()
            .collect()
    }

    /// The safety-net pass: finds new date directories, lists every directory whose
    /// modification time changed (or changed too recently to trust), and retries rollouts
    /// whose header was incomplete. `now` is the wall clock, for the racy-mtime rule.
    pub fn scan(&mut self, now: SystemTime) -> Vec<Found> {
        // Only when one of them changed: listing a directory opens it, and every other
        // supervisor watching it (all of a day's sessions) is woken by that open.
        let settled = !self.structure_dirs.is_empty()
            && self
                .structure_dirs
                .iter()
                .all(|(dir, listing)| listing.still_current(mtime_of(dir)));
        if !settled {
            self.refresh_structure(now);
        }
        let mut found = Vec::new();
        let dirs: Vec<PathBuf> = self.rollout_dirs.keys().cloned().collect();
        for dir in dirs {
            self.list_rollout_dir(&dir, now, false, &mut found);
        }
        self.retry_not_yet(&mut found);
        found
    }

    /// Handles paths named by change notifications: each unknown rollout path is
    /// classified, a path under a structure directory triggers a structure refresh. Known
    /// rollouts cost one hash lookup, so appends to live children are nearly free here.
    pub fn on_paths(&mut self, paths: &[PathBuf], now: SystemTime) -> Vec<Found> {
        let mut found = Vec::new();
        let mut structure_changed = false;
        for path in paths {
            if let Some(id) = self.by_path.get(path) {
                if let Some(FileEntry {
                    class: Class::NotYet { .. },
                    ..
                }) = self.files.get(id)
                {
                    let id = *id;
                    self.classify(id, &mut found);
                }
                continue;
            }
            let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
            if self.structure_dirs.contains_key(path) || self.structure_dirs.contains_key(&parent) {
                structure_changed = true;
            } else if self.rollout_dirs.contains_key(&parent) && is_rollout_name(path) {
                self.consider(path, &mut found);
            }
        }
        if structure_changed {
            let before: HashSet<PathBuf> = self.rollout_dirs.keys().cloned().collect();
            self.refresh_structure(now);
            let fresh: Vec<PathBuf> = self
                .rollout_dirs
                .keys()
                .filter(|d| !before.contains(*d))
                .cloned()
                .collect();
            for dir in fresh {
                self.list_rollout_dir(&dir, now, true, &mut found);
            }
        }
        found
    }

    /// Re-reads the year, month and date directories from the session's date on.
    fn refresh_structure(&mut self, now: SystemTime) {
        #[cfg(test)]
        {
            self.structure_listings += 1;
        }
        let start = self.layout.start;
        let root = self.layout.sessions.clone();
        // Each directory's modification time is taken before it is listed, so an entry
        // added during the listing shows as a change at the next look.
        let mut structure = vec![(root.clone(), mtime_of(&root))];
        let mut rollout_dirs = Vec::new();
        for (year, year_path) in subdirs(&root, 4) {
            // Equal-length digit strings order as their numbers.
            if start.is_some_and(|s| year < format!("{:04}", s.year)) {
                continue;
            }
            structure.push((year_path.clone(), mtime_of(&year_path)));
            for (month, month_path) in subdirs(&year_path, 2) {
                if start.is_some_and(|s| {
                    (year.as_str(), month.as_str())
                        < (
                            format!("{:04}", s.year).as_str(),
                            format!("{:02}", s.month).as_str(),
                        )
                }) {
                    continue;
                }
                structure.push((month_path.clone(), mtime_of(&month_path)));
                for (day, day_path) in subdirs(&month_path, 2) {
                    if let Some(d) = Day::from_dirs(&year, &month, &day)
                        && self.layout.counts(d)
                    {
                        rollout_dirs.push(day_path);
                    }
                }
            }
        }
        if self.layout.archived.is_dir() {
            rollout_dirs.push(self.layout.archived.clone());
        }
        for (dir, mtime) in structure {
            let listing = self.structure_dirs.entry(dir).or_default();
            listing.mtime = mtime;
            listing.listed_at = Some(now);
        }
        for dir in rollout_dirs {
            self.rollout_dirs.entry(dir).or_default();
        }
    }

    fn list_rollout_dir(
        &mut self,
        dir: &Path,
        now: SystemTime,
        force: bool,
        found: &mut Vec<Found>,
    ) {
        let mtime = mtime_of(dir);
        let Some(listing) = self.rollout_dirs.get(dir) else {
            return;
        };
        if listing.still_current(mtime) && !force {
            return;
        }
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let mut names = HashSet::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if is_rollout_name(&path) {
                names.insert(path);
            }
        }
        let previous = self
            .rollout_dirs
            .get_mut(dir)
            .map(|l| std::mem::take(&mut l.names))
            .unwrap_or_default();
        for gone in previous.difference(&names) {
            // The identity stays: a member renamed elsewhere is found again by its inode.
            self.by_path.remove(gone);
        }
        for path in names.difference(&previous) {
            self.consider(path, found);
        }
        if let Some(listing) = self.rollout_dirs.get_mut(dir) {
            listing.names = names;
            listing.mtime = mtime;
            listing.listed_at = Some(now);
        }
    }

    /// A rollout path not seen before at this path.
    fn consider(&mut self, path: &Path, found: &mut Vec<Found>) {
        if self.by_path.contains_key(path) {
            return;
        }
        // A descendant is created on or after its session's day, so an older archived
        // rollout is not even looked at (an archive holds months of them). Its name stays
        // in the directory's listing, so it is not considered again either.
        let named_day = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Day::from_file_name);
        if let (Some(day), Some(start)) = (named_day, self.layout.start)
            && day < start
        {
            return;
        }
        let Ok(meta) = fs::symlink_metadata(path) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let Ok(id) = FileId::of_path(path) else {
            return;
        };
        self.by_path.insert(path.to_path_buf(), id);
        if let Some(entry) = self.files.get_mut(&id) {
            let from = std::mem::replace(&mut entry.path, path.to_path_buf());
            if let Class::Member(thread) = &entry.class
                && from != path
            {
                found.push(Found::Moved {
                    thread_id: thread.clone(),
                    from,
                    to: path.to_path_buf(),
                });
            }
            return;
        }
        self.files.insert(
            id,
            FileEntry {
                path: path.to_path_buf(),
                class: Class::NotYet { len: u64::MAX },
            },
        );
        self.classify(id, found);
    }

    /// Reads the header of a file whose class is still `NotYet`, when its size changed.
    fn classify(&mut self, id: FileId, found: &mut Vec<Found>) {
        let Some(entry) = self.files.get(&id) else {
            return;
        };
        let Class::NotYet { len } = entry.class else {
            return;
        };
        let path = entry.path.clone();
        let Ok(now_len) = fs::metadata(&path).map(|m| m.len()) else {
            return;
        };
        if now_len == len {
            return;
        }
        let class = match read_header(&path) {
            Ok(Header::Meta(meta)) => match ThreadFacts::from_meta(&meta) {
                Some(facts)
                    if self.thread_files.contains_key(&facts.id)
                        || is_retained_copy(&path, &facts.id) =>
                {
                    // Same thread under another inode (a continuation segment or a copy, not
                    // a rename): never a new child, and the first file stays the one followed.
                    if self.tree.contains(&facts.id) {
                        tracing::warn!(event = "rollout_continuation", thread = %facts.id, path = %path.display(), "a second rollout of sub-agent {} is not followed: {} (the server's line numbers have no rule for a second file of one thread)", facts.id, path.display());
                        found.push(Found::Continuation {
                            thread_id: facts.id.clone(),
                            path: path.clone(),
                        });
                    }
                    Class::Other
                }
                Some(facts) => {
                    let own = facts.id.clone();
                    self.thread_files.insert(own.clone(), id);
                    let joined = self.tree.offer(facts);
                    for member in joined {
                        self.report_joined(member, found);
                    }
                    if self.tree.contains(&own) {
                        Class::Member(own)
                    } else {
                        Class::Other
                    }
                }
                None => Class::Other,
            },
            Ok(Header::NotRollout) => Class::Other,
            Ok(Header::NotYet) => Class::NotYet { len: now_len },
            Err(e) => {
                tracing::debug!(event = "discovery_read_failed", path = %path.display(), error = %e, "cannot read rollout header: {e}");
                Class::NotYet { len: now_len }
            }
        };
        if let Some(entry) = self.files.get_mut(&id) {
            entry.class = class;
        }
    }

    fn report_joined(&mut self, member: ThreadFacts, found: &mut Vec<Found>) {
        let Some(path) = self
            .thread_files
            .get(&member.id)
            .and_then(|fid| self.files.get(fid))
            .map(|e| e.path.clone())
        else {
            return;
        };
        // A waiting candidate's entry says `Other` until now.
        if let Some(fid) = self.thread_files.get(&member.id).copied()
            && let Some(e) = self.files.get_mut(&fid)
        {
            e.class = Class::Member(member.id.clone());
        }
        let parent_id = self
            .tree
            .parent_of(&member.id)
            .unwrap_or(self.tree.root())
            .to_owned();
        found.push(Found::Joined {
            thread_id: member.id,
            parent_id,
            agent_type: member.agent_type,
            path,
        });
    }

    fn retry_not_yet(&mut self, found: &mut Vec<Found>) {
        let pending: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, e)| matches!(e.class, Class::NotYet { .. }))
            .map(|(id, _)| *id)
            .collect();
        for id in pending {
            self.classify(id, found);
        }
    }
}
