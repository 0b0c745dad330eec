//! The command line: every subcommand and flag, in one clap definition.
//!
//! `--help`, the man pages in `man/` and the shell completions are all generated from this
//! definition, so they cannot drift apart. Each settings flag names its `KCAP_*` variable and
//! default in its help; those facts come from the registry in [`crate::config::ENV_VARS`].
//!
//! clap's `env` feature is deliberately not used: a parent CLI configures spawned watchers
//! through the environment alone, and a bad variable must fall back to its default with a
//! warning rather than abort the watcher the way a bad flag does (exit 2). So the flags here
//! are all `Option`s, and [`crate::config::resolve`] applies flag > variable > default.
//!
//! Duration flags take human durations (`90s`, `5m`, `2h`, `1h30m`, `1.5h`, `2d`), parsed with
//! jiff's friendly format. A bare number is rejected with a hint to add a unit (is `5` minutes,
//! as in the variables, or seconds?), except `0`, which needs no unit, and `--poll-interval`,
//! where a bare number means milliseconds like its variable `KCAP_WATCH_POLL_MS`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{Arg, Args, CommandFactory, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

use crate::config::{ENV_VARS, LogFormat};
use crate::rollout::header::Role;
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
    Watch(WatchArgs),
    /// Fold a rollout and print its state and due times, without shipping anything.
    Inspect(InspectArgs),
    /// Deliver the lines and lifecycle requests spooled while offline or unreachable.
    Replay(ReplayArgs),
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
    #[arg(long)]
    pub once: bool,

    #[command(flatten)]
    pub settings: SettingsArgs,
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
    /// The Codex rollout file (JSONL) to inspect.
    #[arg(value_name = "ROLLOUT")]
    pub rollout: PathBuf,

    /// Print the state as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Evaluate due times at this RFC 3339 time instead of the current time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<Ts>,

    /// Also print each line's number and timestamp.
    #[arg(long)]
    pub line_times: bool,

    #[command(flatten)]
    pub settings: SettingsArgs,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Deliver only this session's spools [default: every session's].
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    pub session_id: Option<String>,

    #[command(flatten)]
    pub settings: SettingsArgs,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// Every setting that also has a `KCAP_*` variable. `None` (or `false`) means "not given on
/// the command line": the variable or the default decides (see [`crate::config::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Args)]
#[command(next_help_heading = "Settings")]
// Appends "[env: KCAP_…] [default: …]" to each flag's help, from the registry.
#[command(mut_args(annotate_from_registry))]
pub struct SettingsArgs {
    /// kcap server base URL (http or https); without one, lines go to the local spool.
    #[arg(long, value_name = "URL", value_parser = NonEmptyStringValueParser::new())]
    pub server: Option<String>,

    /// File holding the bearer token (the token itself is only read from KCAP_TOKEN).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// kcap token-store profile to read when no token is given (default: the kcap CLI's
    /// active profile from config.json).
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pub profile: Option<String>,

    /// Root of local state, shared with the kcap CLI.
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,

    /// Directory of the pid, lock, started and heartbeat files.
    #[arg(long, value_name = "DIR")]
    pub watcher_dir: Option<PathBuf>,

    /// Grace between a child's completed turn and its subagent-stop; 0 = immediately.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stop_grace: Option<Duration>,

    /// A child watcher exits after this long idle (never with a tool call in flight); 0 = default.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub reap_after: Option<Duration>,

    /// A session watcher posts session-end (idle_timeout) after this long idle; 0 = default.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_end: Option<Duration>,

    /// Silence inside an open turn before a stall_detected warning; 0 disables.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stall_after: Option<Duration>,

    /// Lifetime ceiling, before usage-limit pause credit; 0 disables.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lifetime: Option<Duration>,

    /// Cap on usage-limit pause credit added to the lifetime ceiling; 0 = no credit.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_pause_credit: Option<Duration>,

    /// Safety-net check of the file when no change event came, 10ms to 60s (bare number: ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_poll_interval)]
    pub poll_interval: Option<Duration>,

    /// Poll only, without change notification (network file systems, exhausted inotify).
    #[arg(long)]
    pub force_poll: bool,

    /// Log filter (tracing env-filter syntax, e.g. kcap_watch=debug).
    #[arg(long, value_name = "FILTER", value_parser = NonEmptyStringValueParser::new())]
    pub log: Option<String>,

    /// Log record format.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

/// Adds the variable and default of a settings flag to its help. `mut_args` also sees the
/// arguments of the command the settings are flattened into; those are left alone.
fn annotate_from_registry(arg: Arg) -> Arg {
    let Some(long) = arg.get_long() else {
        return arg;
    };
    let Some(var) = ENV_VARS
        .iter()
        .find(|v| v.flag.and_then(|f| f.strip_prefix("--")) == Some(long))
    else {
        return arg;
    };
    let note = format!("[env: {}] [default: {}]", var.name, var.default);
    let help = match arg.get_help() {
        Some(h) => format!("{h} {note}"),
        None => note.clone(),
    };
    let long_help = arg.get_long_help().map(|h| format!("{h}\n\n{note}"));
    let arg = arg.help(help);
    match long_help {
        Some(h) => arg.long_help(h),
        None => arg,
    }
}

const DURATION_HINT: &str = "expected a duration such as 90s, 5m, 2h, 1h30m or 2d";

/// Parses a duration flag. A negative value is an error (no window runs backwards), and so is
/// a bare number other than `0`: the variables count minutes or hours, the flags do not.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
        if t.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(format!("a duration needs a unit, e.g. {t}m or {t}s"));
    }
    parse_human(t)
}

/// Parses `--poll-interval`: a duration, or a bare number of milliseconds as in
/// `KCAP_WATCH_POLL_MS`, within the same 10 ms to 60 s range.
fn parse_poll_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
        // Digits too many for u64 are far out of range anyway.
        Duration::from_millis(t.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        parse_human(t)?
    };
    if !(crate::config::POLL_MIN..=crate::config::POLL_MAX).contains(&d) {
        return Err("the poll interval must be between 10ms and 60s".to_string());
    }
    Ok(d)
}

fn parse_human(t: &str) -> Result<Duration, String> {
    // `SignedDuration` takes units up to hours (and huge hour counts, which then clamp); a
    // `Span` adds days and weeks, counted as 24 hours for a watcher's window. Months and years
    // have no fixed length and stay errors.
    let d = match t.parse::<jiff::SignedDuration>() {
        Ok(d) => d,
        Err(_) => t
            .parse::<jiff::Span>()
            .and_then(|s| s.to_duration(jiff::SpanRelativeTo::days_are_24_hours()))
            // jiff's own message would suggest its types; the hint says what to type.
            .map_err(|_| DURATION_HINT.to_string())?,
    };
    if d.is_negative() {
        return Err("a duration cannot be negative".to_string());
    }
    Ok(d.unsigned_abs())
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
        &|w| environment_section().to_writer(w),
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

/// Exit codes as documented to users (`spec/lifecycle.md` section 7; mapped in `main.rs`).
const EXIT_CODES: &[(&str, &str)] = &[
    (
        "0",
        "Ended as designed: idle end, reap, lifetime ceiling, parent exit, signal, --once done.",
    ),
    ("1", "Unexpected internal error."),
    (
        "2",
        "Bad command line or configuration (the message names the flag or variable).",
    ),
    (
        "3",
        "The rollout was rewritten or truncated under the watcher.",
    ),
    ("75", "Another live watcher holds this key's lock."),
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

fn environment_section() -> roff::Roff {
    use roff::{bold, italic, roman};
    let mut r = roff::Roff::new();
    r.control("SH", ["ENVIRONMENT"]);
    r.text([roman(
        "Every setting can be given as a variable, so a parent process can configure the \
         watchers it spawns. A flag wins over its variable, the variable over the default. A \
         bad variable falls back to its default with a warning; it never stops a watcher.",
    )]);
    for var in ENV_VARS {
        r.control("TP", []);
        r.text([bold(var.name)]);
        r.text([roman(var.doc)]);
        let mut facts = vec![];
        if let Some(flag) = var.flag {
            facts.push(roman("Flag: "));
            facts.push(bold(flag));
            facts.push(roman(". "));
        }
        facts.push(roman("Default: "));
        facts.push(italic(var.default));
        facts.push(roman("."));
        r.control("RS", []);
        r.text(facts);
        r.control("RE", []);
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

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2h 30m"), Ok(Duration::from_secs(9000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("5").unwrap_err().contains("5m"));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(48 * 3600)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 24 * 3600)));
        assert!(parse_duration("1 month").is_err());
        assert!(parse_duration("-5m").is_err());
        assert!(parse_duration("-1d").is_err());
        assert!(parse_duration("5m ago").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn poll_interval_bare_number_is_milliseconds() {
        assert_eq!(parse_poll_interval("250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_poll_interval("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_poll_interval("5").is_err());
        assert!(parse_poll_interval("61s").is_err());
        assert!(parse_poll_interval("99999999999999999999999").is_err());
    }
}
