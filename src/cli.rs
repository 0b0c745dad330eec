//! The command line: every subcommand and its own flags, in one clap definition.
//!
//! `--help`, the man pages in `man/` and the shell completions are all generated from this
//! definition, so they cannot drift apart. The settings flags (those with a `KCAP_*`
//! variable) are not written here: each command flattens its own settings group
//! ([`WatchSettings`], ...: the settings it uses, read as [`SettingsArgs`]), whose arguments,
//! help and man page ENVIRONMENT section come from the registry in [`crate::settings`].

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

use crate::codex::header::Role;
pub use crate::settings::{
    DaemonSettings, InspectSettings, ReplaySettings, SettingsArgs, StatusSettings,
    SuperviseSettings, WatchSettings,
};
use crate::settings::{SETTINGS, environment_section};
use crate::time::Ts;

/// Tails a Codex rollout, ships its redacted lines to a kcap server and tells the server when a
/// sub-agent is done.
///
/// The kcap CLI spawns one watcher per Codex rollout file. The watcher folds every line into a
/// small state (turn open or complete, tool calls in flight, usage-limit pauses) and from it
/// decides when a sub-agent is done, when a session has gone idle, and when a turn has stalled.
/// Without a server it runs offline: lines and lifecycle requests go to local spools that
/// kcap-watch replay delivers later.
#[derive(Debug, Parser)]
#[command(name = "kcap-watch", version)]
#[command(after_long_help = exit_codes_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch one rollout: ship its lines and post the lifecycle requests when due.
    ///
    /// A sub-agent's subagent-stop is due once its turn has ended, no tool call is in flight and
    /// the stop grace has passed since the last line. A turn Codex ended on a usage limit ends
    /// like any other: its stop carries Codex's message ("try again at ..."). The usage-limit
    /// pause, whose end is the reset of the binding rate-limit window (the windows at 100 %,
    /// latest reset; else the highest reading), keeps idle end and reap from firing while it is
    /// open and is credited to the lifetime ceiling. Queued inter-agent mail
    /// (trigger_turn: false) is shipped but opens no turn and is not activity. Idle end and reap
    /// count from the last activity, the close of the last pause or the watcher's start,
    /// whichever is latest, so a resumed session gets a full window. A child watcher that ends
    /// on reap, at the lifetime ceiling or on its parent's exit posts the stop it still owes,
    /// even for a turn that never ended (its last agent message, if any), after its lines, and
    /// spools it (never ahead of its lines) if it cannot. A child header that names no parent
    /// (review, memory consolidation) needs SESSION_ID: without it watch exits 2 at once saying
    /// so; with SESSION_ID and --agent-id it runs as a child. After a signal or the parent's
    /// exit everything finishes within 4 s (at most 1 s for a partial last line, shipping until
    /// 3 s, then the rest is spooled).
    Watch(WatchArgs),
    /// Fold a rollout and print its state and due times, without shipping anything.
    ///
    /// It models a watcher started at --now (or at the time of the observation): idle end counts
    /// from that start at the earliest. It also shows the binding rate-limit window of a
    /// usage-limit pause and why it was chosen, queued mail lines, the stop a child watcher
    /// would owe if it ended now, and what watch needs when the header names no parent. With
    /// --tree it shows the same for every descendant sub-agent of a session, and which of them
    /// a live watcher holds.
    Inspect(InspectArgs),
    /// Watch every descendant sub-agent of a session in one process.
    ///
    /// Finds the session's children, grandchildren and further descendants as their rollouts
    /// appear under CODEX_HOME's sessions/ (from the session's date on, new days included, and
    /// archived_sessions/), and runs for each exactly what watch runs for one child: the same
    /// shipping, redaction, spools, stop, reap and ceiling. Every descendant ships under the
    /// session's id with its own id as agent id. Beside the kcap CLI it takes each child's
    /// <key>.spawnlock while deciding, then holds <key>.lock and writes <key>.pid, .started and
    /// .heartbeat as watch does (one thread beats them all), so the kcap CLI starts no second
    /// watcher; a child another live watcher holds is left alone and taken over from the
    /// server's watermark once that watcher is gone. The session's own lines are shipped only
    /// with --with-session. It ends when --parent-pid exits (every child ends as on its
    /// parent's exit, posting the stop it owes), on a signal, or when no child is live and the
    /// session's rollout has been idle for the idle-end window. A fault in one child (a
    /// rewritten file, refused lines, a failing spool) affects that child only.
    Supervise(SuperviseArgs),
    /// Deliver the lines and lifecycle requests spooled while offline or unreachable.
    Replay(ReplayArgs),
    /// Run one supervise per Codex session the kcap CLI watches, with no change to the kcap CLI.
    ///
    /// One long-lived process per user and config directory (a second exits 75). It finds the
    /// sessions the kcap CLI's session watchers keep alive (<watchers>/<session>.pid alive by
    /// the kcap CLI's rule), reads each watcher's rollout path and KCAP_URL, KCAP_CONFIG_DIR and
    /// CODEX_HOME from the process itself where the OS allows (else finds the rollout under
    /// CODEX_HOME by the session id), and starts `kcap-watch supervise <rollout>` for it as a
    /// detached process, so the kcap CLI's session-end teardown ends that session's supervisor
    /// only. The server is the session watcher's KCAP_URL, else the daemon's, else the active
    /// profile's token store server_url; with none the session is skipped (status says why), as
    /// is one whose cwd matches KCAP_WATCH_EXCLUDE. A supervisor that crashed (exit 1, or a
    /// signal the daemon did not send) is restarted with a backoff, at most 5 times an hour,
    /// if the session is still watched 10 s later; one that ended on purpose (exit 0, 2, 3, 75)
    /// is not, and the session gets a new one when a descendant appears or grows. A daemon that
    /// starts while supervisors run adopts them. SIGTERM or SIGINT ends every supervisor (each
    /// spools what it could not deliver) and then the daemon, within 5 s. Logs go to stderr and
    /// <config>/logs/kcap-watch-daemon.log (10 MiB, one rotated file).
    Daemon(DaemonArgs),
    /// Show every watched session and sub-agent on this machine, who holds each key, and
    /// kcap-watch's own figures.
    ///
    /// Reads the watcher directory and kcap-watch's status files (<config>/kcap-watch/status):
    /// per key, the session and agent ids, the rollout, the holder (kcap-watch supervise,
    /// kcap-watch watch or the kcap CLI, with pid) and the kcap CLI's liveness verdict (alive,
    /// dead, recycled, wedged, none); for keys kcap-watch holds, the turn, lines on disk,
    /// confirmed, spooled and refused, the next due decision and the last error; the daemon;
    /// spool backlogs, refused lines and needs-import markers per session; stale files (a
    /// status file, lock or heartbeat slot whose writer is gone). --clean removes kcap-watch's
    /// own stale files of keys whose lock it can take, never a lock it cannot take. Exit 0, or 2
    /// when a directory exists but cannot be read.
    Status(StatusArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

/// `watch [SESSION_ID] <ROLLOUT>`: the kcap CLI spawns
/// `kcap-watch watch {sessionId} "{path}" --agent-id {id} --parent-pid {pid} --vendor codex`.
#[derive(Debug, Args)]
// With one positional it is the rollout; with two, the first is the session id.
#[command(allow_missing_positional = true)]
pub struct WatchArgs {
    /// Session id; overrides the one read from the rollout's header.
    #[arg(value_name = "SESSION_ID", value_parser = NonEmptyStringValueParser::new())]
    session_id: Option<String>,

    /// The Codex rollout file (JSONL) to watch.
    #[arg(value_name = "ROLLOUT")]
    rollout: PathBuf,

    /// Agent id; overrides the one read from the rollout's header.
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    pub agent_id: Option<String>,

    /// Watcher role; overrides the role detected from the rollout's header.
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<RoleArg>,

    /// Process to watch: when it exits, a session watcher posts session-end and exits.
    #[arg(long, value_name = "PID")]
    pub parent_pid: Option<u32>,

    /// Transcript vendor (only Codex rollouts are supported).
    #[arg(long, value_enum, value_name = "VENDOR", default_value_t = Vendor::Codex)]
    pub vendor: Vendor,

    /// The cwd sent with session-end [default: the rollout's session_meta.cwd].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Accepted for compatibility with the kcap CLI's spawn arguments; has no effect.
    #[arg(long)]
    pub skip_title: bool,

    /// Ship the lines already on disk, evaluate every decision once, print a summary, exit.
    /// Lines the server stops taking (no progress for 5 s) are spooled, and it still exits 0.
    #[arg(long)]
    pub once: bool,

    #[command(flatten)]
    pub settings: WatchSettings,
}

impl WatchArgs {
    /// The session id given on the command line, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The rollout file to watch.
    pub fn rollout(&self) -> &Path {
        &self.rollout
    }
}

/// Watcher role given with `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// A sub-agent: posts subagent-stop, never session-end.
    Child,
    /// A top-level thread: posts session-end on idle or when its parent exits.
    Session,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Child => Role::Child,
            RoleArg::Session => Role::Session,
        }
    }
}

/// Transcript vendor given with `--vendor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Vendor {
    Codex,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The Codex rollout file (JSONL) to inspect; with --tree, the session's rollout.
    #[arg(value_name = "ROLLOUT")]
    pub rollout: PathBuf,

    /// Show every descendant sub-agent of the session ROLLOUT (children, grandchildren, ...,
    /// found under CODEX_HOME's sessions/ from the session's date on and archived_sessions/),
    /// each with its state, due times and whether a live watcher holds it (the kcap CLI's
    /// liveness rule on <watchers>/<session>-<agent>.*, judged at the real time). Text is an
    /// indented tree (siblings by start time, then id); --json is one object with the root's
    /// report and an array of descendants, each inspect's object plus its thread id, parent
    /// id, depth, watcher and lifetime ceiling.
    #[arg(long)]
    pub tree: bool,

    /// Print the state as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Evaluate due times at this RFC 3339 time instead of the current time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<Ts>,

    /// Observe each line at its own timestamp instead of the file's modification time, and
    /// print each line's number and timestamp.
    #[arg(long)]
    pub line_times: bool,

    #[command(flatten)]
    pub settings: InspectSettings,
}

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// The session's own Codex rollout file (JSONL).
    #[arg(value_name = "SESSION_ROLLOUT")]
    pub rollout: PathBuf,

    /// Session id every descendant ships under [default: the rollout header's].
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    pub session_id: Option<String>,

    /// Also ship the session's own lines and post its session-end (the kcap CLI's session
    /// watcher does that otherwise).
    #[arg(long)]
    pub with_session: bool,

    /// Process to watch: when it exits, every child ends as on its parent's exit.
    #[arg(long, value_name = "PID")]
    pub parent_pid: Option<u32>,

    #[command(flatten)]
    pub settings: SuperviseSettings,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Deliver only this session's spools [default: every session's].
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    pub session_id: Option<String>,

    #[command(flatten)]
    pub settings: ReplaySettings,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Print the service definition that runs this daemon at login, and exit: with this
    /// binary's absolute path and every non-secret setting given now (flags after daemon,
    /// KCAP_* variables in its environment); a secret is never written, the definition names
    /// where the token is read instead. Refused (exit 2) from a cargo build directory.
    #[arg(long, value_enum, value_name = "MANAGER")]
    pub print_service: Option<crate::daemon::service::ServiceKind>,

    #[command(flatten)]
    pub settings: DaemonSettings,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object (with a `version` field) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Remove kcap-watch's own stale files (status files, locks, heartbeat slots) of keys whose
    /// lock can be taken, then report.
    #[arg(long)]
    pub clean: bool,

    #[command(flatten)]
    pub settings: StatusSettings,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

fn parse_now(s: &str) -> Result<Ts, String> {
    Ts::parse_rfc3339(s)
        .ok_or_else(|| "expected an RFC 3339 time such as 2026-07-28T16:14:05Z".to_string())
}

/// Writes the completion script for `shell`.
pub fn write_completions(shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut Cli::command(), "kcap-watch", out);
}

/// The man pages, as (file name, roff source): `kcap-watch.1` with an ENVIRONMENT section
/// listing every variable, and one page per subcommand (`kcap-watch-watch.1`, ...).
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    // The `help` subcommand is clap's; it gets no page of its own.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Building sets the subcommands' display names (`kcap-watch-watch`) and usage lines.
    cmd.build();
    // Subcommands have no version of their own; their pages carry the program's.
    let source = format!("kcap-watch {}", env!("CARGO_PKG_VERSION"));
    let mut pages = vec![("kcap-watch.1".to_string(), render_top_page(cmd.clone()))];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = clap_mangen::Man::new(sub.clone()).source(source.clone());
        let mut out = Vec::new();
        render_into(&mut out, |w| man.render(w));
        pages.push((man.get_filename(), out));
    }
    pages
}

/// Renders one part of a page.
type Section<'a> = dyn Fn(&mut dyn Write) -> std::io::Result<()> + 'a;

fn render_top_page(cmd: clap::Command) -> Vec<u8> {
    let man = clap_mangen::Man::new(cmd);
    let sections: [&Section; 9] = [
        &|w| man.render_title(w),
        &|w| man.render_name_section(w),
        &|w| man.render_synopsis_section(w),
        &|w| man.render_description_section(w),
        &|w| man.render_options_section(w),
        &|w| man.render_subcommands_section(w),
        &|w| environment_section(SETTINGS).to_writer(w),
        &|w| exit_status_section().to_writer(w),
        &|w| man.render_version_section(w),
    ];
    // Each rendered piece starts with the same apostrophe-handling preamble (all an empty
    // page renders); the page needs it once.
    let preamble = roff::Roff::new().render();
    let mut out = Vec::new();
    for (i, section) in sections.iter().enumerate() {
        let mut piece = Vec::new();
        render_into(&mut piece, section);
        let piece = match piece.strip_prefix(preamble.as_bytes()) {
            Some(rest) if i > 0 => rest,
            _ => &piece[..],
        };
        out.extend_from_slice(piece);
    }
    out
}

fn render_into(out: &mut Vec<u8>, render: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) {
    // Writing into a Vec cannot fail: its Write impl only grows the buffer.
    render(out).expect("writing to a Vec never fails");
}

/// Exit codes as documented to users (docs/behaviour.md L7; mapped in `main.rs`).
const EXIT_CODES: &[(&str, &str)] = &[
    (
        "0",
        "Ended as designed: idle end, reap, lifetime ceiling, parent exit, signal, --once done.",
    ),
    ("1", "Unexpected internal error."),
    (
        "2",
        "Bad command line, configuration or rollout path (the message names the flag, \
         variable or path); an id that breaks the kcap CLI's key rule ([A-Za-z0-9_-]{1,64} \
         once a UUID's dashes are removed); an unusable config or watcher directory; a \
         symbolic link at one of the watcher's own files (replay: after its pass).",
    ),
    (
        "3",
        "The rollout was rewritten or truncated under the watcher.",
    ),
    (
        "75",
        "Another live watcher holds this key's lock (daemon: another daemon runs for this \
         config directory; supervise: another supervisor runs for this session).",
    ),
];

fn exit_codes_help() -> String {
    let mut s = String::from("Exit codes:");
    for (code, meaning) in EXIT_CODES {
        s.push_str(&format!("\n  {code:>2}  {meaning}"));
    }
    s
}

fn exit_status_section() -> roff::Roff {
    let mut r = roff::Roff::new();
    r.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in EXIT_CODES {
        r.control("TP", []);
        r.text([roff::bold(*code)]);
        r.text([roff::roman(*meaning)]);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
