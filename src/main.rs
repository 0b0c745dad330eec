//! `kcap-watch`: parse the command line, set up logging, run the command, and map errors to
//! exit codes (the only place that does: `spec/lifecycle.md` section 7).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use kcap_watch::cli::{Cli, Command, InspectArgs, SettingsArgs};
use kcap_watch::config::{self, Resolved};
use kcap_watch::error::{LockHeld, RolloutRewritten, UsageError, code};
use kcap_watch::inspect::{self, InspectRequest};
use kcap_watch::time::Ts;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout and errors (naming the flag) to stderr.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("kcap-watch: {err:#}");
            ExitCode::from(u8::try_from(exit_code(&err)).unwrap_or(1))
        }
    }
}

/// The exit code for an error, from the first typed cause in its chain.
fn exit_code(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if cause.is::<UsageError>() || cause.is::<config::ConfigError>() {
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

/// Resolves settings and starts logging; warnings about variables are logged once.
fn settings(args: &SettingsArgs) -> Result<Resolved> {
    let resolved = config::resolve(args, &config::process_env)?;
    kcap_watch::logging::init(&resolved.settings.log, resolved.settings.log_format);
    for w in &resolved.warnings {
        tracing::warn!(event = "config_warning", "{w}");
    }
    Ok(resolved)
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Completions(args) => {
            let mut out = std::io::stdout().lock();
            kcap_watch::cli::write_completions(args.shell, &mut out);
            out.flush()?;
            Ok(code::OK)
        }
        Command::Inspect(args) => run_inspect(&args),
        Command::Watch(args) => kcap_watch::commands::watch(args, settings),
        Command::Replay(args) => kcap_watch::commands::replay(args, settings),
    }
}

fn run_inspect(args: &InspectArgs) -> Result<i32> {
    let resolved = settings(&args.settings)?;
    let req = InspectRequest {
        path: &args.rollout,
        now: args.now.unwrap_or_else(Ts::now),
        line_times: args.line_times,
    };
    let report = inspect::inspect(&req, &|role| resolved.settings.windows_for(role))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        inspect::write_text(&report, &mut out)?;
    }
    out.flush()?;
    Ok(code::OK)
}
