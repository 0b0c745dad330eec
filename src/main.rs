//! `kcap-watch`: parse the command line, set up logging, run the command, and map errors to
//! exit codes (the only place that does: docs/behaviour.md L7).
//!
//! Nothing here may abort: the kcap CLI spawns watchers with stdin, stdout and stderr pipes
//! whose other ends it closes at once, so every print is a fallible write whose failure is
//! ignored (`println!`/`eprintln!` panic on a broken pipe, and the release build aborts on a
//! panic: exit 134 with no trace). A fatal error is printed to stderr once and recorded in the
//! watcher's log file, and a broken stdout (`inspect --json | head`) is success.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use kcap_watch::cli::{Cli, Command, InspectArgs, InspectSettings, SettingsArgs};
use kcap_watch::config::{self, Resolved};
use kcap_watch::error::{LockHeld, RolloutRewritten, UsageError, code};
use kcap_watch::files::AcquireError;
use kcap_watch::inspect::tree::TreeRequest;
use kcap_watch::inspect::{self, InspectRequest};
use kcap_watch::settings::Command as SettingsCommand;
use kcap_watch::time::Ts;

fn main() -> ExitCode {
    kcap_watch::platform::memory::keep_large_blocks_apart();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout and errors (naming the flag) to stderr.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // The main thread's stack must hold the redactor's deepest walk (up to 2 MiB in a release
    // build, 4 MiB in a debug one): 8 MiB on Linux and macOS, and the Windows build asks for
    // 16 MiB (`build.rs`).
    let outcome = run(cli);
    match outcome {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let message = format!("{err:#}");
            // Under the spawner stderr goes nowhere: the log file is where this can be read.
            kcap_watch::logging::fatal_to_file(&message);
            let _ = writeln!(std::io::stderr(), "kcap-watch: {message}");
            ExitCode::from(u8::try_from(exit_code(&err)).unwrap_or(1))
        }
    }
}

/// The exit code for an error, from the first typed cause in its chain.
fn exit_code(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if cause.is::<UsageError>()
            || cause.is::<config::ConfigError>()
            || matches!(cause.downcast_ref(), Some(AcquireError::Refused(_)))
        {
            return code::USAGE;
        }
        if cause.is::<RolloutRewritten>() {
            return code::REWRITTEN;
        }
        if cause.is::<LockHeld>() {
            return code::LOCKED;
        }
    }
    code::INTERNAL
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Resolves the settings `command` takes and starts logging; warnings about variables are
/// logged once.
fn settings(command: SettingsCommand, args: &SettingsArgs) -> Result<Resolved> {
    let resolved = config::resolve_for(command, args, &config::process_env)?;
    kcap_watch::logging::init(&resolved.settings.log, resolved.settings.log_format);
    for w in &resolved.warnings {
        tracing::warn!(event = "config_warning", "{w}");
    }
    Ok(resolved)
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Completions(args) => {
            // Rendered first: clap_complete panics when its writer fails (a closed stdout).
            let mut rendered = Vec::new();
            kcap_watch::cli::write_completions(args.shell, &mut rendered);
            let mut out = std::io::stdout().lock();
            out.write_all(&rendered)?;
            out.flush()?;
            Ok(code::OK)
        }
        Command::Inspect(args) => run_inspect(&args),
        Command::Watch(args) => kcap_watch::commands::watch(args, settings),
        Command::Supervise(args) => kcap_watch::commands::supervise(args, settings),
        Command::Replay(args) => kcap_watch::commands::replay(args, settings),
        Command::Daemon(args) => kcap_watch::commands::daemon(args, settings),
        Command::Status(args) => kcap_watch::commands::status(args, settings),
    }
}

fn run_inspect(args: &InspectArgs) -> Result<i32> {
    let resolved = settings(InspectSettings::COMMAND, &args.settings)?;
    let s = &resolved.settings;
    let now = args.now.unwrap_or_else(Ts::now);
    let windows_for = |role| s.windows_for(role);
    // Rendered first, so the only write to stdout is one `write_all` whose error is a plain
    // `io::Error` (a broken pipe inside serde_json's writer would hide its kind).
    let mut rendered = Vec::new();
    if args.tree {
        let req = TreeRequest {
            session: &args.rollout,
            codex_home: s.codex_home.as_deref(),
            watcher_dir: &s.watcher_dir,
            now,
            line_times: args.line_times,
            lifetime: s.lifetime,
            max_pause_credit: s.max_pause_credit,
        };
        let report = inspect::tree::inspect_tree(&req, &windows_for)?;
        if args.json {
            serde_json::to_writer(&mut rendered, &report)?;
            rendered.push(b'\n');
        } else {
            inspect::tree::write_tree_text(&report, &mut rendered)?;
        }
    } else {
        let req = InspectRequest {
            path: &args.rollout,
            now,
            line_times: args.line_times,
        };
        let report = inspect::inspect(&req, &windows_for)?;
        if args.json {
            serde_json::to_writer(&mut rendered, &report)?;
            rendered.push(b'\n');
        } else {
            inspect::write_text(&report, &mut rendered)?;
        }
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&rendered)?;
    out.flush()?;
    Ok(code::OK)
}
