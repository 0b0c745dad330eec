//! Where Codex keeps its rollouts, and what a rollout's first line says.
//!
//! `<CODEX_HOME>/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl` (local dates), and
//! `<CODEX_HOME>/archived_sessions/` once Codex archives a session. Supervision's discovery
//! (`crate::supervise::discover`), the daemon and `inspect --tree` find rollouts here; none of
//! them names a Codex directory or file name itself.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Classifier, Kind, SessionMetaInfo};
use crate::time::Ts;

/// A local calendar day, as Codex names its date directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Day {
    pub year: u16,
    pub month: u8,
    pub day: u8,
}

impl Day {
    /// From the three directory names `YYYY`, `MM`, `DD`.
    pub(crate) fn from_dirs(year: &str, month: &str, day: &str) -> Option<Day> {
        let num = |s: &str, len: usize| {
            (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u16>().ok())
                .flatten()
        };
        let d = Day {
            year: num(year, 4)?,
            month: u8::try_from(num(month, 2)?).ok()?,
            day: u8::try_from(num(day, 2)?).ok()?,
        };
        ((1..=12).contains(&d.month) && (1..=31).contains(&d.day)).then_some(d)
    }

    /// From a rollout's file name, `rollout-YYYY-MM-DDThh-mm-ss-<uuid>.jsonl`.
    pub(crate) fn from_file_name(name: &str) -> Option<Day> {
        let date = name.strip_prefix("rollout-")?.get(..10)?;
        let (year, rest) = date.split_once('-')?;
        let (month, day) = rest.split_once('-')?;
        Day::from_dirs(year, month, day)
    }
}

/// Where one Codex home keeps its rollouts, and the first day a descendant can appear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodexLayout {
    /// `<CODEX_HOME>/sessions`.
    pub sessions: PathBuf,
    /// `<CODEX_HOME>/archived_sessions`.
    pub archived: PathBuf,
    /// The session rollout's own date directory (or the date in its file name when it is
    /// archived). `None` only when neither names a date: then every date directory counts.
    pub start: Option<Day>,
}

impl CodexLayout {
    /// The layout for a session rollout. `codex_home` (from `--codex-home` or `CODEX_HOME`)
    /// wins over the home derived from the rollout's path; without it the rollout must sit
    /// where Codex writes it (`sessions/YYYY/MM/DD/` or `archived_sessions/`).
    pub fn for_session(rollout: &Path, codex_home: Option<&Path>) -> Result<CodexLayout, String> {
        let parents: Vec<&Path> = rollout.ancestors().skip(1).take(4).collect();
        let name_of = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
        let mut derived_home = None;
        let mut start = None;
        if let [day, month, year, sessions] = parents[..]
            && name_of(sessions).as_deref() == Some("sessions")
            && let (Some(y), Some(m), Some(d)) = (name_of(year), name_of(month), name_of(day))
            && let Some(date) = Day::from_dirs(&y, &m, &d)
        {
            start = Some(date);
            derived_home = sessions.parent().map(Path::to_path_buf);
        } else if let Some(dir) = parents.first()
            && name_of(dir).as_deref() == Some("archived_sessions")
        {
            derived_home = dir.parent().map(Path::to_path_buf);
        }
        if start.is_none() {
            start = rollout
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(Day::from_file_name);
        }
        let home = match (codex_home, derived_home) {
            (Some(home), _) => home.to_path_buf(),
            (None, Some(home)) => home,
            (None, None) => {
                return Err(format!(
                    "cannot tell CODEX_HOME from {}: it is not under sessions/YYYY/MM/DD/ or \
                     archived_sessions/; give --codex-home or set CODEX_HOME",
                    rollout.display()
                ));
            }
        };
        let home = if home.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            home
        };
        Ok(CodexLayout {
            sessions: home.join("sessions"),
            archived: home.join("archived_sessions"),
            start,
        })
    }

    pub(crate) fn counts(&self, day: Day) -> bool {
        self.start.is_none_or(|start| day >= start)
    }
}

/// A rollout's first line, read without holding more than one chunk of it.
#[derive(Debug)]
pub(crate) enum Header {
    /// The first line is complete and is a `session_meta`.
    Meta(Box<SessionMetaInfo>),
    /// The first line is complete and is not a readable `session_meta`: not a rollout
    /// this tool can place in a tree.
    NotRollout,
    /// No complete first line yet (Codex creates the file and writes its header lazily).
    NotYet,
}

/// Longest first line read before giving up on it (a `session_meta` is 10-25 KB).
const MAX_HEADER_BYTES: u64 = 64 * 1024 * 1024;

/// Reads the first line of `path`, streaming it through the classifier.
pub(crate) fn read_header(path: &Path) -> io::Result<Header> {
    read_first_line(path, Classifier::without_timestamps()).map(|(header, _)| header)
}

/// [`read_header`], with the first line's own `timestamp` (when the thread started).
pub(crate) fn read_header_timed(path: &Path) -> io::Result<(Header, Option<Ts>)> {
    read_first_line(path, Classifier::new())
}

fn read_first_line(path: &Path, mut classifier: Classifier) -> io::Result<(Header, Option<Ts>)> {
    // Never a named pipe: opening one would block whoever reads headers (a supervisor's
    // discovery, the daemon's loop) until some writer opened it.
    let mut file = crate::files::open_regular(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    // A `\r` just before the newline is not part of the line; one at the end of a chunk is
    // held back until the next chunk says whether the newline follows.
    let mut held_cr = false;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((Header::NotYet, None));
        }
        total += n as u64;
        let chunk = &buf[..n];
        let (body, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..i], true),
            None => (chunk, false),
        };
        if held_cr && !(done && body.is_empty()) {
            classifier.feed(b"\r");
        }
        held_cr = false;
        let body = match body.split_last() {
            Some((b'\r', rest)) => {
                held_cr = !done;
                rest
            }
            _ => body,
        };
        classifier.feed(body);
        if done {
            let info = classifier.finish();
            let header = match info.meta {
                Some(meta) if info.kind == Kind::SessionMeta && !info.malformed => {
                    Header::Meta(meta)
                }
                _ => Header::NotRollout,
            };
            return Ok((header, info.timestamp));
        }
        if total > MAX_HEADER_BYTES {
            return Ok((Header::NotRollout, None));
        }
    }
}

/// The dashed form Codex puts in rollout file names (`8-4-4-4-12`), lowercase.
pub(crate) fn dashed(key: &str) -> String {
    let k = key.to_ascii_lowercase();
    format!(
        "{}-{}-{}-{}-{}",
        &k[..8],
        &k[8..12],
        &k[12..16],
        &k[16..20],
        &k[20..32]
    )
}

/// The rollout of session `key` under `codex_home`: a `rollout-*-<dashed id>.jsonl` in
/// `sessions/YYYY/MM/DD/` before one in `archived_sessions/`, the newest (latest modified)
/// when several match.
pub(crate) fn find_rollout(codex_home: &Path, key: &str) -> Option<PathBuf> {
    let suffix = format!("-{}.jsonl", dashed(key));
    let matches = |dir: &Path, out: &mut Vec<(SystemTime, PathBuf)>| {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with("rollout-") && name.to_ascii_lowercase().ends_with(&suffix) {
                // Only a regular file (or a link to one) can be a rollout: a named pipe
                // would hang whoever opened it.
                let Ok(meta) = fs::metadata(e.path()) else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                out.push((mtime, e.path()));
            }
        }
    };
    let mut found = Vec::new();
    for year in digit_dirs(&codex_home.join("sessions"), 4) {
        for month in digit_dirs(&year, 2) {
            for day in digit_dirs(&month, 2) {
                matches(&day, &mut found);
            }
        }
    }
    if found.is_empty() {
        matches(&codex_home.join("archived_sessions"), &mut found);
    }
    found.into_iter().max().map(|(_, p)| p)
}

fn digit_dirs(dir: &Path, len: usize) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.len() == len
                && name.bytes().all(|b| b.is_ascii_digit())
                && e.file_type().is_ok_and(|t| t.is_dir())
        })
        .map(|e| e.path())
        .collect()
}

/// A retained copy of a thread's rollout: Codex names it `rollout-...-<thread id>_<suffix>.jsonl`
/// (`thread` without dashes, as the tree keeps ids). Never taken for the thread itself, even
/// when it is listed before the original.
pub(crate) fn is_retained_copy(path: &Path, thread: &str) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.replace('-', "").contains(&format!("{thread}_")))
}

/// `rollout-*.jsonl` (a compressed `.jsonl.zst` copy is not followed).
pub(crate) fn is_rollout_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(".jsonl"))
}

/// Subdirectories of `dir` whose names are `len` ASCII digits, in name order.
pub(crate) fn subdirs(dir: &Path, len: usize) -> Vec<(String, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let digits = name.len() == len && name.bytes().all(|b| b.is_ascii_digit());
            (digits && e.file_type().ok()?.is_dir()).then(|| (name, e.path()))
        })
        .collect();
    out.sort();
    out
}
