//! The command line and the resolution of flag > `KCAP_*` variable > default
//! (docs/behaviour.md C), as a user or a spawning kcap CLI sees them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use kcap_watch::cli::{Cli, Command, RoleArg, SettingsArgs, Vendor, WatchArgs};
use kcap_watch::codex::header::Role;
use kcap_watch::config::{self, ConfigError, LogFormat, Resolved, Settings};
use kcap_watch::time::{MAX_WINDOW, Ts};

const MIN: u64 = 60;
const HOUR: u64 = 3600;

fn mins(n: u64) -> Duration {
    Duration::from_secs(n * MIN)
}

fn hours(n: u64) -> Duration {
    Duration::from_secs(n * HOUR)
}

/// Resolves the settings of `kcap-watch watch <flags> r.jsonl` under the given variables
/// (plus `HOME=/home/u`, so nothing depends on the machine).
fn try_resolve(flags: &[&str], vars: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
    let mut argv = vec!["kcap-watch", "watch"];
    argv.extend_from_slice(flags);
    argv.push("r.jsonl");
    let args = watch_args(&argv);
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env = move |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| (name == "HOME").then(|| "/home/u".to_string()))
    };
    config::resolve(&args.settings, &env)
}

fn resolve(flags: &[&str], vars: &[(&str, &str)]) -> Resolved {
    try_resolve(flags, vars).unwrap()
}

fn settings(flags: &[&str], vars: &[(&str, &str)]) -> Settings {
    let r = resolve(flags, vars);
    assert_eq!(r.warnings, Vec::<String>::new(), "unexpected warnings");
    r.settings
}

fn watch_args(argv: &[&str]) -> WatchArgs {
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Watch(w) => w,
        other => panic!("expected watch, got {other:?}"),
    }
}

fn parse_err(argv: &[&str]) -> clap::Error {
    Cli::try_parse_from(argv).unwrap_err()
}

/// Asserts exactly one warning, naming `var` and the quoted `value`, and returns it.
fn one_warning(r: &Resolved, var: &str, value: &str) -> String {
    assert_eq!(r.warnings.len(), 1, "warnings: {:?}", r.warnings);
    let w = r.warnings[0].clone();
    assert!(w.contains(var), "{w:?} does not name {var}");
    assert!(
        w.contains(&format!("{value:?}")),
        "{w:?} does not show {value:?}"
    );
    w
}

// ---------------------------------------------------------------- the command line

#[test]
fn definition_passes_clap_debug_asserts() {
    Cli::command().debug_assert();
}

#[test]
fn the_kcap_cli_spawn_form_parses() {
    let w = watch_args(&[
        "kcap-watch",
        "watch",
        "019a-sess",
        "/home/u/.codex/sessions/2026/07/28/rollout-x.jsonl",
        "--agent-id",
        "019a-child",
        "--parent-pid",
        "4242",
        "--vendor",
        "codex",
    ]);
    assert_eq!(w.session_id(), Some("019a-sess"));
    assert_eq!(
        w.rollout(),
        Path::new("/home/u/.codex/sessions/2026/07/28/rollout-x.jsonl")
    );
    assert_eq!(w.agent_id.as_deref(), Some("019a-child"));
    assert_eq!(w.parent_pid, Some(4242));
    assert_eq!(w.vendor, Vendor::Codex);
    assert_eq!(*w.settings, SettingsArgs::default());
}

#[test]
fn the_bare_form_takes_the_only_positional_as_the_rollout() {
    let w = watch_args(&["kcap-watch", "watch", "r.jsonl"]);
    assert_eq!(w.session_id(), None);
    assert_eq!(w.rollout(), Path::new("r.jsonl"));
    assert!(!w.once && !w.skip_title);
    assert_eq!(w.role, None);
}

#[test]
fn watch_flags_parse() {
    let w = watch_args(&[
        "kcap-watch",
        "watch",
        "r.jsonl",
        "--role",
        "child",
        "--cwd",
        "/src/app",
        "--skip-title",
        "--once",
    ]);
    assert_eq!(w.role, Some(RoleArg::Child));
    assert_eq!(Role::from(w.role.unwrap()), Role::Child);
    assert_eq!(w.cwd.as_deref(), Some(Path::new("/src/app")));
    assert!(w.skip_title && w.once);
}

#[test]
fn watch_needs_a_rollout_and_takes_at_most_two_positionals() {
    let e = parse_err(&["kcap-watch", "watch"]);
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("<ROLLOUT>"));
    assert_eq!(
        parse_err(&["kcap-watch", "watch", "a", "b", "c"]).exit_code(),
        2
    );
}

#[test]
fn only_the_codex_vendor_is_accepted() {
    let e = parse_err(&["kcap-watch", "watch", "r", "--vendor", "claude"]);
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    assert!(e.to_string().contains("--vendor"));
}

#[test]
fn bad_duration_flags_exit_2_naming_the_flag() {
    for (flag, value) in [
        ("--stop-grace", "soon"),
        ("--reap-after", "-5m"),
        ("--idle-end", "5"),
        ("--stall-after", "1 month"),
        ("--lifetime", "24"),
        ("--max-pause-credit", "2 hrs ago"),
        ("--poll-interval", "5"),
        ("--poll-interval", "2m"),
    ] {
        let arg = format!("{flag}={value}");
        let e = parse_err(&["kcap-watch", "watch", "r", &arg]);
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{arg}");
        assert_eq!(e.exit_code(), 2, "{arg}");
        assert!(e.to_string().contains(flag), "{arg}: {e}");
    }
}

#[test]
fn a_bare_number_gets_a_hint_to_add_a_unit() {
    let e = parse_err(&["kcap-watch", "watch", "r", "--idle-end", "90"]);
    assert!(e.to_string().contains("90m"), "{e}");
}

#[test]
fn a_bad_now_names_the_flag() {
    let e = parse_err(&["kcap-watch", "inspect", "r", "--now", "yesterday"]);
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("--now"), "{e}");
    let ok = Cli::try_parse_from([
        "kcap-watch",
        "inspect",
        "r",
        "--now",
        "2026-07-28T16:14:05Z",
    ])
    .unwrap();
    let Command::Inspect(i) = ok.command else {
        panic!("expected inspect")
    };
    assert_eq!(i.now, Ts::parse_rfc3339("2026-07-28T16:14:05Z"));
}

#[test]
fn there_is_no_token_flag() {
    let e = parse_err(&["kcap-watch", "watch", "r", "--token", "secret"]);
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
}

#[test]
fn help_names_every_variable_and_default() {
    let mut cmd = Cli::command();
    let commands = [
        ("watch", kcap_watch::cli::WatchSettings::flags()),
        ("supervise", kcap_watch::cli::SuperviseSettings::flags()),
        ("inspect", kcap_watch::cli::InspectSettings::flags()),
        ("replay", kcap_watch::cli::ReplaySettings::flags()),
        ("daemon", kcap_watch::cli::DaemonSettings::flags()),
        ("status", kcap_watch::cli::StatusSettings::flags()),
    ];
    for (sub, flags) in commands {
        let help = cmd
            .find_subcommand_mut(sub)
            .unwrap()
            .render_long_help()
            .to_string();
        // Help wraps lines; compare with whitespace collapsed.
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for var in kcap_watch::settings::SETTINGS
            .iter()
            .filter(|v| v.flag().is_some())
        {
            // Each command shows the settings it uses, and only those.
            let note = format!("[env: {}] [default: {}]", var.var(), var.shown_default());
            let mine = flags.contains(&var.flag().unwrap());
            assert_eq!(help.contains(&note), mine, "{sub} --help and {note}");
        }
        assert!(!help.contains("KCAP_TOKEN]"), "KCAP_TOKEN has no flag");
    }
}

#[test]
fn completions_cover_the_flags() {
    let mut out = Vec::new();
    kcap_watch::cli::write_completions(clap_complete::Shell::Bash, &mut out);
    let script = String::from_utf8(out).unwrap();
    assert!(script.contains("kcap-watch"));
    assert!(script.contains("--stop-grace"));
    assert!(script.contains("--agent-id"));
}

// ---------------------------------------------------------------- defaults

#[test]
fn defaults_are_the_documented_ones() {
    let s = settings(&[], &[]);
    assert_eq!(s.server, None);
    assert_eq!(s.token, None);
    assert_eq!(s.token_file, None);
    assert_eq!(s.profile, None, "unset: the active profile of config.json");
    assert_eq!(s.config_dir, PathBuf::from("/home/u/.config/kcap"));
    assert_eq!(
        s.watcher_dir,
        PathBuf::from("/home/u/.config/kcap/watchers")
    );
    assert_eq!(s.stop_grace, mins(5));
    assert_eq!(s.reap_after, mins(360));
    assert_eq!(s.idle_end, mins(60));
    assert_eq!(s.stall_after, Some(mins(65)));
    assert_eq!(s.lifetime, Some(hours(24)));
    assert_eq!(s.max_pause_credit, mins(120));
    assert_eq!(s.poll_interval, Duration::from_millis(1000));
    assert!(!s.force_poll);
    assert_eq!(s.log, "info");
    assert_eq!(s.log_format, LogFormat::Text);
}

#[test]
fn windows_follow_the_role() {
    let s = settings(&["--reap-after", "3h", "--idle-end", "45m"], &[]);
    let child = s.windows_for(Role::Child);
    assert_eq!(child.idle, hours(3));
    assert_eq!(child.stop_grace, mins(5));
    assert_eq!(child.stall, Some(mins(65)));
    assert_eq!(s.windows_for(Role::Session).idle, mins(45));
}

// ---------------------------------------------------------------- variables

#[test]
fn variables_set_every_setting() {
    let s = settings(
        &[],
        &[
            ("KCAP_URL", "https://kcap.example/"),
            ("KCAP_TOKEN", "tok-123"),
            ("KCAP_TOKEN_FILE", "/run/kcap/token"),
            ("KCAP_PROFILE", "work"),
            ("KCAP_CONFIG_DIR", "/srv/kcap"),
            ("KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "2"),
            ("KCAP_CODEX_SUBAGENT_REAP_MINUTES", "30"),
            ("KCAP_CODEX_IDLE_MINUTES", "15"),
            ("KCAP_CODEX_STALL_MINUTES", "20"),
            ("KCAP_WATCHER_LIFETIME_HOURS", "48"),
            ("KCAP_MAX_PAUSE_CREDIT_MINUTES", "90"),
            ("KCAP_WATCH_POLL_MS", "250"),
            ("KCAP_WATCH_FORCE_POLL", "yes"),
            ("KCAP_LOG", "kcap_watch=debug"),
            ("KCAP_LOG_FORMAT", "json"),
        ],
    );
    assert_eq!(s.server.as_deref(), Some("https://kcap.example"));
    assert_eq!(s.token.as_ref().map(|t| t.expose()), Some("tok-123"));
    assert_eq!(s.token_file, Some(PathBuf::from("/run/kcap/token")));
    assert_eq!(s.profile.as_deref(), Some("work"));
    assert_eq!(s.config_dir, PathBuf::from("/srv/kcap"));
    assert_eq!(s.watcher_dir, PathBuf::from("/srv/kcap/watchers"));
    assert_eq!(s.stop_grace, mins(2));
    assert_eq!(s.reap_after, mins(30));
    assert_eq!(s.idle_end, mins(15));
    assert_eq!(s.stall_after, Some(mins(20)));
    assert_eq!(s.lifetime, Some(hours(48)));
    assert_eq!(s.max_pause_credit, mins(90));
    assert_eq!(s.poll_interval, Duration::from_millis(250));
    assert!(s.force_poll);
    assert_eq!(s.log, "kcap_watch=debug");
    assert_eq!(s.log_format, LogFormat::Json);
}

#[test]
fn the_watcher_dir_variable_is_independent_of_the_config_dir() {
    let s = settings(&[], &[("KCAP_WATCHER_DIR", "/run/kcap-watchers")]);
    assert_eq!(s.watcher_dir, PathBuf::from("/run/kcap-watchers"));
    assert_eq!(s.config_dir, PathBuf::from("/home/u/.config/kcap"));
}

/// The window a minutes or hours variable sets.
fn window_of(s: &Settings, var: &str) -> Option<Duration> {
    match var {
        "KCAP_CODEX_SUBAGENT_IDLE_MINUTES" => Some(s.stop_grace),
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES" => Some(s.reap_after),
        "KCAP_CODEX_IDLE_MINUTES" => Some(s.idle_end),
        "KCAP_CODEX_STALL_MINUTES" => s.stall_after,
        "KCAP_WATCHER_LIFETIME_HOURS" => s.lifetime,
        "KCAP_MAX_PAUSE_CREDIT_MINUTES" => Some(s.max_pause_credit),
        other => panic!("{other} is not a window variable"),
    }
}

#[test]
fn bad_minute_and_hour_variables_warn_and_use_the_default() {
    for (var, value, default) in [
        ("KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "abc", mins(5)),
        ("KCAP_CODEX_SUBAGENT_REAP_MINUTES", "-5", mins(360)),
        ("KCAP_CODEX_IDLE_MINUTES", "", mins(60)),
        ("KCAP_CODEX_STALL_MINUTES", "1.5", mins(65)),
        ("KCAP_WATCHER_LIFETIME_HOURS", "24h", hours(24)),
        ("KCAP_MAX_PAUSE_CREDIT_MINUTES", "-1", mins(120)),
    ] {
        let r = resolve(&[], &[(var, value)]);
        one_warning(&r, var, value);
        assert_eq!(
            window_of(&r.settings, var),
            Some(default),
            "{var}={value:?}"
        );
    }
}

#[test]
fn zero_means_what_the_kcap_cli_made_it_mean() {
    let zero = |var: &str| settings(&[], &[(var, "0")]);
    // The stop grace: immediately.
    assert_eq!(
        zero("KCAP_CODEX_SUBAGENT_IDLE_MINUTES").stop_grace,
        Duration::ZERO
    );
    // The idle windows cannot be disabled: zero is the default.
    assert_eq!(
        zero("KCAP_CODEX_SUBAGENT_REAP_MINUTES").reap_after,
        mins(360)
    );
    assert_eq!(zero("KCAP_CODEX_IDLE_MINUTES").idle_end, mins(60));
    // Stall warnings and the lifetime ceiling: off.
    assert_eq!(zero("KCAP_CODEX_STALL_MINUTES").stall_after, None);
    assert_eq!(zero("KCAP_WATCHER_LIFETIME_HOURS").lifetime, None);
    // No pause credit.
    assert_eq!(
        zero("KCAP_MAX_PAUSE_CREDIT_MINUTES").max_pause_credit,
        Duration::ZERO
    );
}

#[test]
fn zero_flags_mean_the_same_as_zero_variables() {
    let s = settings(
        &[
            "--stop-grace",
            "0",
            "--reap-after",
            "0s",
            "--idle-end",
            "0m",
            "--stall-after",
            "0",
            "--lifetime",
            "0h",
            "--max-pause-credit",
            "0",
        ],
        &[],
    );
    assert_eq!(s.stop_grace, Duration::ZERO);
    assert_eq!(s.reap_after, mins(360));
    assert_eq!(s.idle_end, mins(60));
    assert_eq!(s.stall_after, None);
    assert_eq!(s.lifetime, None);
    assert_eq!(s.max_pause_credit, Duration::ZERO);
}

#[test]
fn huge_values_clamp_instead_of_wrapping() {
    for var in [
        "KCAP_CODEX_SUBAGENT_IDLE_MINUTES",
        "KCAP_CODEX_SUBAGENT_REAP_MINUTES",
        "KCAP_CODEX_IDLE_MINUTES",
        "KCAP_CODEX_STALL_MINUTES",
        "KCAP_WATCHER_LIFETIME_HOURS",
        "KCAP_MAX_PAUSE_CREDIT_MINUTES",
    ] {
        for value in [
            "99999999999",
            "18446744073709551615",
            "999999999999999999999999",
        ] {
            let r = resolve(&[], &[(var, value)]);
            let got = window_of(&r.settings, var);
            assert_eq!(got, Some(MAX_WINDOW), "{var}={value}");
            one_warning(&r, var, value);
        }
    }
    let r = resolve(&["--idle-end", "99999999999h"], &[]);
    assert_eq!(r.settings.idle_end, MAX_WINDOW);
    assert!(r.warnings[0].contains("--idle-end"));
}

#[test]
fn poll_ms_outside_its_range_warns_and_uses_the_default() {
    for value in ["9", "60001", "0", "-100", "fast", ""] {
        let r = resolve(&[], &[("KCAP_WATCH_POLL_MS", value)]);
        one_warning(&r, "KCAP_WATCH_POLL_MS", value);
        assert_eq!(r.settings.poll_interval, Duration::from_millis(1000));
    }
    for (value, ms) in [("10", 10), ("60000", 60_000)] {
        let s = settings(&[], &[("KCAP_WATCH_POLL_MS", value)]);
        assert_eq!(s.poll_interval, Duration::from_millis(ms));
    }
}

#[test]
fn force_poll_takes_1_true_or_yes() {
    for on in ["1", "true", "TRUE", "Yes", "yes"] {
        assert!(
            settings(&[], &[("KCAP_WATCH_FORCE_POLL", on)]).force_poll,
            "{on}"
        );
    }
    for off in ["0", "false", "on", "", "2"] {
        assert!(
            !settings(&[], &[("KCAP_WATCH_FORCE_POLL", off)]).force_poll,
            "{off}"
        );
    }
    assert!(settings(&["--force-poll"], &[]).force_poll);
}

#[test]
fn bad_log_variables_warn_and_use_the_default() {
    let r = resolve(&[], &[("KCAP_LOG_FORMAT", "xml")]);
    one_warning(&r, "KCAP_LOG_FORMAT", "xml");
    assert_eq!(r.settings.log_format, LogFormat::Text);

    let r = resolve(&[], &[("KCAP_LOG", "kcap_watch=loud")]);
    one_warning(&r, "KCAP_LOG", "kcap_watch=loud");
    assert_eq!(r.settings.log, "info");

    let e = try_resolve(&["--log", "kcap_watch=loud"], &[]).unwrap_err();
    assert_eq!(e.name, "--log");
    assert!(e.to_string().contains("--log"));
}

// ---------------------------------------------------------------- flags win

#[test]
fn flags_beat_variables() {
    let s = settings(
        &[
            "--server",
            "https://flag.example",
            "--token-file",
            "/flag/token",
            "--profile",
            "flagged",
            "--config-dir",
            "/flag/config",
            "--watcher-dir",
            "/flag/watchers",
            "--stop-grace",
            "90s",
            "--reap-after",
            "1h30m",
            "--idle-end",
            "2h",
            "--stall-after",
            "10m",
            "--lifetime",
            "2d",
            "--max-pause-credit",
            "30m",
            "--poll-interval",
            "200",
            "--log",
            "warn",
            "--log-format",
            "json",
        ],
        &[
            ("KCAP_URL", "https://var.example"),
            ("KCAP_TOKEN_FILE", "/var/token"),
            ("KCAP_PROFILE", "var"),
            ("KCAP_CONFIG_DIR", "/var/config"),
            ("KCAP_WATCHER_DIR", "/var/watchers"),
            ("KCAP_CODEX_SUBAGENT_IDLE_MINUTES", "1"),
            ("KCAP_CODEX_SUBAGENT_REAP_MINUTES", "1"),
            ("KCAP_CODEX_IDLE_MINUTES", "1"),
            ("KCAP_CODEX_STALL_MINUTES", "1"),
            ("KCAP_WATCHER_LIFETIME_HOURS", "1"),
            ("KCAP_MAX_PAUSE_CREDIT_MINUTES", "1"),
            ("KCAP_WATCH_POLL_MS", "50"),
            ("KCAP_LOG", "debug"),
            ("KCAP_LOG_FORMAT", "text"),
        ],
    );
    assert_eq!(s.server.as_deref(), Some("https://flag.example"));
    assert_eq!(s.token_file, Some(PathBuf::from("/flag/token")));
    assert_eq!(s.profile.as_deref(), Some("flagged"));
    assert_eq!(s.config_dir, PathBuf::from("/flag/config"));
    assert_eq!(s.watcher_dir, PathBuf::from("/flag/watchers"));
    assert_eq!(s.stop_grace, Duration::from_secs(90));
    assert_eq!(s.reap_after, mins(90));
    assert_eq!(s.idle_end, hours(2));
    assert_eq!(s.stall_after, Some(mins(10)));
    assert_eq!(s.lifetime, Some(hours(48)));
    assert_eq!(s.max_pause_credit, mins(30));
    assert_eq!(s.poll_interval, Duration::from_millis(200));
    assert_eq!(s.log, "warn");
    assert_eq!(s.log_format, LogFormat::Json);
}

#[test]
fn a_good_flag_silences_a_bad_variable() {
    let s = settings(
        &["--idle-end", "20m"],
        &[("KCAP_CODEX_IDLE_MINUTES", "abc")],
    );
    assert_eq!(s.idle_end, mins(20));
}

// ---------------------------------------------------------------- server and token

#[test]
fn a_non_http_url_is_an_error_naming_its_source() {
    for bad in [
        "ftp://kcap.example",
        "kcap.example",
        "file:///tmp/x",
        "http://",
    ] {
        let e = try_resolve(&[], &[("KCAP_URL", bad)]).unwrap_err();
        assert_eq!(e.name, "KCAP_URL", "{bad}");
        assert!(e.to_string().contains("KCAP_URL"), "{e}");
    }
    let e = try_resolve(
        &["--server", "ftp://kcap.example"],
        &[("KCAP_URL", "https://ok")],
    )
    .unwrap_err();
    assert_eq!(e.name, "--server");
    assert!(e.to_string().contains("--server"), "{e}");
}

#[test]
fn an_empty_url_means_offline() {
    assert_eq!(settings(&[], &[("KCAP_URL", "")]).server, None);
    assert_eq!(settings(&[], &[("KCAP_URL", "  ")]).server, None);
}

#[test]
fn plain_http_warns_unless_loopback() {
    let r = resolve(&[], &[("KCAP_URL", "http://kcap.example:8080/")]);
    let w = one_warning(&r, "KCAP_URL", "http://kcap.example:8080/");
    assert!(w.contains("clear text"), "{w}");
    assert_eq!(
        r.settings.server.as_deref(),
        Some("http://kcap.example:8080")
    );

    let r = resolve(&["--server", "http://10.0.0.5"], &[]);
    assert!(r.warnings[0].contains("--server"), "{:?}", r.warnings);

    for ok in [
        "http://127.0.0.1:3000",
        "http://127.1.2.3",
        "http://[::1]:3000/",
        "http://localhost:3000/api/",
        "https://kcap.example",
    ] {
        let r = resolve(&[], &[("KCAP_URL", ok)]);
        assert!(r.warnings.is_empty(), "{ok}: {:?}", r.warnings);
    }
}

#[test]
fn the_token_comes_only_from_its_variable_and_never_prints() {
    let s = settings(&[], &[("KCAP_TOKEN", "tok-very-secret")]);
    let token = s.token.clone().unwrap();
    assert_eq!(token.expose(), "tok-very-secret");
    assert_eq!(format!("{token}"), "[REDACTED]");
    assert!(!format!("{s:?}").contains("tok-very-secret"));
    assert_eq!(settings(&[], &[("KCAP_TOKEN", "")]).token, None);
}

/// Issue 18: each command accepts only the settings it uses; any other is a command-line
/// error naming it (exit 2), not a setting silently ignored.
#[test]
fn a_setting_another_command_uses_is_refused_by_name() {
    for args in [
        &["kcap-watch", "replay", "--stop-grace", "5m"][..],
        &[
            "kcap-watch",
            "inspect",
            "r.jsonl",
            "--server",
            "http://127.0.0.1:9",
        ],
        &["kcap-watch", "watch", "r.jsonl", "--codex-home", "/tmp"],
        &["kcap-watch", "replay", "--poll-interval", "1s"],
        &["kcap-watch", "status", "--stop-grace", "5s"],
        &["kcap-watch", "status", "--server", "http://127.0.0.1:9"],
    ] {
        let e = parse_err(args);
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::UnknownArgument,
            "{args:?}"
        );
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(args[args.len() - 2]), "{e}");
    }
    // And what each uses is still accepted.
    for args in [
        &["kcap-watch", "replay", "--server", "http://127.0.0.1:9"][..],
        &["kcap-watch", "inspect", "r.jsonl", "--stop-grace", "5m"],
        &["kcap-watch", "supervise", "r.jsonl", "--codex-home", "/tmp"],
        &["kcap-watch", "watch", "r.jsonl", "--poll-interval", "1s"],
        &["kcap-watch", "status", "--watcher-dir", "/tmp"],
        &[
            "kcap-watch",
            "daemon",
            "--stop-grace",
            "30s",
            "--reap-after",
            "7m",
        ],
    ] {
        assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
    }
}
