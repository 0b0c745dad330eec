//! A light stand-in for the kcap CLI's Codex session watcher, for the daemon scenario of
//! `benches/compare.sh`, and the clock that times how fast a new sub-agent's key is claimed.
//!
//! ```text
//! kcap_session watch <session-id> <rollout>
//! kcap_session children --watchers DIR --into DIR [--every-ms 200] STAGED...
//! ```
//!
//! `watch` is what the daemon finds of a session the kcap CLI watches, and nothing more: a
//! process whose command line is `watch <session> <rollout>` and whose environment (set by
//! the caller) carries `KCAP_URL`, `KCAP_CONFIG_DIR` and `CODEX_HOME`, holding
//! `<watchers>/<session>.pid` (`<pid>\n<start token>`), `.started` and a `.heartbeat`
//! rewritten every 10 s, the files the kcap CLI's liveness rule reads. `<watchers>` is
//! `KCAP_WATCHER_DIR`, else `$KCAP_CONFIG_DIR/watchers`. It runs until killed. It does not
//! scan for sub-agents or post `subagent-start` as the kcap CLI's session watcher does (the
//! integration tests' stand-in, `tests/it/support/kcap_standin.rs`, does): its own cost is
//! not what the scenario measures, and the supervisors claim every key before a scan would
//! look.
//!
//! `children` makes sub-agents appear as Codex does, one at a time every `--every-ms`: each
//! STAGED rollout (its header names a session's thread as parent) is created in `--into` with
//! its header line in one write, then the rest appended. It then waits until
//! `<watchers>/<session>-<child>.pid` exists (polled every millisecond, 10 s at most) and
//! prints `<key> <ms>`: the time from the header's write to the key's claim (`timeout` when
//! it never came).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use kcap_watch::files::{process_start_token, watcher_key, write_atomic};

/// How often the session watcher's heartbeat is rewritten (the kcap CLI's watchers, and
/// kcap-watch's own, beat every 10 s).
const BEAT_EVERY: Duration = Duration::from_secs(10);
/// How long `children` waits for one key's claim.
const CLAIM_WAIT: Duration = Duration::from_secs(10);

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Hold a session's watcher files, as the kcap CLI's session watcher does.
    Watch { session: String, rollout: PathBuf },
    /// Write staged sub-agent rollouts one at a time; print how long each key took to claim.
    Children {
        #[arg(long)]
        watchers: PathBuf,
        #[arg(long)]
        into: PathBuf,
        #[arg(long, default_value_t = 200)]
        every_ms: u64,
        staged: Vec<PathBuf>,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Watch { session, .. } => watch(&bare(&session)),
        Cmd::Children {
            watchers,
            into,
            every_ms,
            staged,
        } => children(&watchers, &into, Duration::from_millis(every_ms), &staged),
    }
}

fn bare(id: &str) -> String {
    id.replace('-', "").to_ascii_lowercase()
}

fn now_text() -> String {
    jiff::Timestamp::now().to_string()
}

fn watchers_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("KCAP_WATCHER_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let config = std::env::var_os("KCAP_CONFIG_DIR")
        .filter(|d| !d.is_empty())
        .context("set KCAP_CONFIG_DIR (or KCAP_WATCHER_DIR)")?;
    Ok(PathBuf::from(config).join("watchers"))
}

fn watch(session: &str) -> Result<()> {
    let dir = watchers_dir()?;
    fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let pid = std::process::id();
    let token = process_start_token(pid).context("no start token for this process")?;
    let file = |suffix: &str| dir.join(format!("{session}.{suffix}"));
    write_atomic(&file("pid"), format!("{pid}\n{token}").as_bytes())?;
    write_atomic(&file("started"), now_text().as_bytes())?;
    loop {
        write_atomic(&file("heartbeat"), now_text().as_bytes())?;
        std::thread::sleep(BEAT_EVERY);
    }
}

fn children(watchers: &Path, into: &Path, every: Duration, staged: &[PathBuf]) -> Result<()> {
    fs::create_dir_all(into)?;
    let mut out = std::io::stdout().lock();
    for path in staged {
        let started = Instant::now();
        let text = fs::read(path).with_context(|| format!("failed to read {}", path.display()))?;
        let Some(end) = text.iter().position(|&b| b == b'\n') else {
            bail!("{} has no complete header line", path.display());
        };
        let header: serde_json::Value = serde_json::from_slice(&text[..end])
            .with_context(|| format!("{}: the header is not JSON", path.display()))?;
        let payload = &header["payload"];
        let (Some(child), Some(parent)) =
            (payload["id"].as_str(), payload["parent_thread_id"].as_str())
        else {
            bail!("{}: the header names no id and parent", path.display());
        };
        let key = watcher_key(&bare(parent), Some(&bare(child)));
        let claimed = watchers.join(format!("{key}.pid"));
        let name = path.file_name().context("a staged file has no name")?;
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(into.join(name))
            .with_context(|| format!("failed to create {}", into.join(name).display()))?;
        file.write_all(&text[..=end])?;
        let written = Instant::now();
        file.write_all(&text[end + 1..])?;
        drop(file);
        loop {
            if claimed.exists() {
                let ms = written.elapsed().as_secs_f64() * 1e3;
                writeln!(out, "{key} {ms:.2}")?;
                break;
            }
            if written.elapsed() > CLAIM_WAIT {
                writeln!(out, "{key} timeout")?;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        out.flush()?;
        std::thread::sleep(every.saturating_sub(started.elapsed()));
    }
    Ok(())
}
