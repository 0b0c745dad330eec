//! One registry entry is all a setting needs: every entry shows up, as its exposure says, in
//! the real binary's `--help` of each command that takes settings, in the man pages and the
//! README on disk; hidden entries show up nowhere. (The README table being exactly the
//! registry's rendering is `tests/it/readme.rs`; the man pages being fresh is
//! `tests/it/man_pages.rs`; every entry being resolved is a unit test of `config`.)

use std::path::Path;
use std::process::Command as Command_;

use kcap_watch::settings::{Command, Entry, Exposure, SETTINGS, flag_note};

use crate::support;

const COMMANDS: [&str; 6] = [
    "watch",
    "supervise",
    "inspect",
    "replay",
    "daemon",
    "status",
];

/// The flags `sub` takes (each command only the settings it uses).
fn flags_of(sub: &str) -> Vec<&'static str> {
    let command = Command::ALL
        .into_iter()
        .find(|c| c.name() == sub)
        .unwrap_or_else(|| panic!("{sub}"));
    command.flags()
}

fn help(sub: &str) -> String {
    let out = Command_::new(env!("CARGO_BIN_EXE_kcap-watch"))
        .args([sub, "--help"])
        .env("COLUMNS", "1000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{sub} --help failed");
    // Help wraps lines; compare with whitespace collapsed.
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The part of the README between the configuration table's markers.
fn readme_table() -> String {
    let readme = read("README.md");
    let a = readme.find("<!-- config:start -->").unwrap();
    let b = readme.find("<!-- config:end -->").unwrap();
    readme[a..b].to_string()
}

#[test]
fn every_setting_is_where_its_exposure_says() {
    let helps: Vec<(&str, String)> = COMMANDS.iter().map(|c| (*c, help(c))).collect();
    let pages: Vec<(&str, String)> = COMMANDS
        .iter()
        .map(|c| (*c, read(&format!("man/kcap-watch-{c}.1"))))
        .collect();
    let top = read("man/kcap-watch.1");
    let environment = &top[top.find(".SH ENVIRONMENT").unwrap()..];
    let table = readme_table();

    for s in SETTINGS {
        let var = s.var();
        let exposure = s.exposure();
        let in_table = table.contains(&format!("| `{var}` |"));
        let in_environment = environment.contains(&format!("\\fB{var}\\fR"));
        match exposure {
            Exposure::Flag { long, value_name } => {
                let note = flag_note(*s);
                let takers: Vec<&str> = COMMANDS
                    .iter()
                    .copied()
                    .filter(|c| flags_of(c).contains(&long))
                    .collect();
                assert!(!takers.is_empty(), "no command takes {long}");
                for (sub, help) in helps.iter().filter(|(c, _)| !takers.contains(c)) {
                    assert!(!help.contains(&note), "{sub} --help shows {note}");
                }
                for (sub, help) in helps.iter().filter(|(c, _)| takers.contains(c)) {
                    assert!(help.contains(long), "{sub} --help lacks {long}");
                    assert!(help.contains(&note), "{sub} --help lacks {note}");
                    if !value_name.is_empty() {
                        assert!(
                            help.contains(&format!("{long} <{value_name}>")),
                            "{sub} --help lacks {long} <{value_name}>"
                        );
                    }
                }
                for (sub, page) in pages.iter().filter(|(c, _)| takers.contains(c)) {
                    assert!(page.contains(&note), "man page of {sub} lacks {note}");
                }
                assert!(in_environment && in_table, "{var} undocumented");
            }
            Exposure::EnvOnly => {
                for (sub, help) in &helps {
                    assert!(!help.contains(&format!("[env: {var}]")), "{var} in {sub}");
                }
                assert!(in_environment && in_table, "{var} undocumented");
            }
            Exposure::Hidden => {
                for (sub, help) in &helps {
                    assert!(!help.contains(var), "hidden {var} in {sub} --help");
                }
                for (sub, page) in &pages {
                    assert!(!page.contains(var), "hidden {var} in the man page of {sub}");
                }
                assert!(!top.contains(var), "hidden {var} in kcap-watch.1");
                assert!(
                    !read("README.md").contains(var),
                    "hidden {var} in the README"
                );
            }
        }
    }
}

#[test]
fn the_readme_table_has_one_row_per_documented_setting() {
    let rows = readme_table()
        .lines()
        .filter(|l| l.starts_with("| `") && !l.starts_with("| variable"))
        .count();
    let documented = SETTINGS
        .iter()
        .filter(|s| s.exposure() != Exposure::Hidden)
        .count();
    assert_eq!(rows, documented);
}

#[test]
fn a_flag_and_its_variable_set_the_same_setting() {
    // One descriptor reads both: a flag given as the variable's value in flag syntax resolves
    // to what the variable gives (here for a window in minutes and a poll interval in ms).
    use clap::Parser;
    use kcap_watch::cli::{Cli, Command};
    let by_flag = |argv: &[&str]| {
        let Command::Watch(w) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("expected watch")
        };
        let env = |name: &str| (name == "HOME").then(|| "/home/u".to_string());
        kcap_watch::config::resolve(&w.settings, &env)
            .unwrap()
            .settings
    };
    let by_var = |var: &'static str, value: &'static str| {
        let env = move |name: &str| match name {
            "HOME" => Some("/home/u".to_string()),
            n if n == var => Some(value.to_string()),
            _ => None,
        };
        kcap_watch::config::resolve(&Default::default(), &env)
            .unwrap()
            .settings
    };
    assert_eq!(
        by_flag(&["kcap-watch", "watch", "r", "--idle-end", "17m"]),
        by_var("KCAP_CODEX_IDLE_MINUTES", "17")
    );
    assert_eq!(
        by_flag(&["kcap-watch", "watch", "r", "--poll-interval", "250"]),
        by_var("KCAP_WATCH_POLL_MS", "250")
    );
    assert_eq!(
        by_flag(&["kcap-watch", "watch", "r", "--force-poll"]),
        by_var("KCAP_WATCH_FORCE_POLL", "yes")
    );
}

#[test]
fn inspect_help_says_what_line_times_does() {
    assert!(help("inspect").contains("--line-times Observe each line at its own timestamp"));
}

// ------------------------------------------------------------------ the printed service

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A copy of the binary outside any build directory, where `--print-service` runs.
fn installed(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dest = bin.join(format!("kcap-watch{}", std::env::consts::EXE_SUFFIX));
    if std::fs::hard_link(support::harness::BIN, &dest).is_err() {
        std::fs::copy(support::harness::BIN, &dest).unwrap();
    }
    dest
}

/// `daemon --print-service <kind> <args>` with exactly `env` (and a home).
fn print_service(exe: &Path, kind: &str, args: &[String], env: &[(String, String)]) -> String {
    let mut c = Command_::new(exe);
    c.env_clear().env("HOME", "/home/u");
    c.envs(env.iter().map(|(k, v)| (k, v)));
    c.args(["daemon", "--print-service", kind]).args(args);
    let out = support::bin::run(c, WAIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?} {env:?}: {}",
        support::bin::stderr(&out)
    );
    support::bin::stdout(&out)
}

/// systemd's unquoting of one quoted word (the unit quotes every word it writes).
fn systemd_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut w = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => w.push('\n'),
                    Some(e) => w.push(e),
                    None => {}
                },
                '%' | '$' => {
                    // Doubled by the quoting.
                    chars.next();
                    w.push(c);
                }
                c => w.push(c),
            }
        }
        words.push(w);
    }
    words
}

/// The settings flags after `daemon` and the variables of a printed systemd unit.
fn unit_settings(unit: &str) -> (Vec<String>, Vec<(String, String)>) {
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let words = systemd_words(exec);
    assert_eq!(words[1], "daemon", "{unit}");
    let vars = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .map(|l| {
            let kv = systemd_words(l).remove(0);
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    (words[2..].to_vec(), vars)
}

/// The daemon's settings as resolved from `args` after `daemon` and the variables `env`.
fn daemon_settings(args: &[String], env: &[(String, String)]) -> kcap_watch::config::Settings {
    use clap::Parser;
    let argv = ["kcap-watch", "daemon"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    let kcap_watch::cli::Command::Daemon(d) =
        kcap_watch::cli::Cli::try_parse_from(argv).unwrap().command
    else {
        panic!("expected daemon")
    };
    let env = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| (name == "HOME").then(|| "/home/u".to_string()))
    };
    kcap_watch::config::resolve_for(Command::Daemon, &d.settings, &env)
        .unwrap()
        .settings
}

/// One setting given on its own: the setting, the flag words, the variables.
type Case = (&'static dyn Entry, Vec<String>, Vec<(String, String)>);

/// The daemon's non-secret settings, each given on its own, by flag and by variable.
fn each_daemon_setting() -> Vec<Case> {
    let mut cases = Vec::new();
    for s in SETTINGS
        .iter()
        .copied()
        .filter(|s| Command::Daemon.takes(*s) && !s.is_secret())
    {
        let (var, flag) = s.example();
        cases.push((s, vec![], vec![(s.var().to_string(), var)]));
        if let Some(long) = s.flag() {
            let args = match flag {
                Some(v) => vec![long.to_string(), v],
                None => vec![long.to_string()],
            };
            cases.push((s, args, vec![]));
        }
    }
    cases
}

/// T5.1, as a user meets it: a daemon configured with a flag and a variable prints a unit
/// that starts it configured the same.
#[test]
fn the_printed_unit_carries_a_flag_and_a_variable_the_daemon_was_given() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = installed(tmp.path());
    let unit = print_service(
        &exe,
        "systemd",
        &["--stop-grace".into(), "30s".into()],
        &[("KCAP_CODEX_SUBAGENT_REAP_MINUTES".into(), "7".into())],
    );
    assert!(
        unit.contains(" \"daemon\" \"--stop-grace\" \"30s\"\n"),
        "{unit}"
    );
    assert!(
        unit.contains("Environment=\"KCAP_CODEX_SUBAGENT_REAP_MINUTES=7\"\n"),
        "{unit}"
    );
}

/// Every non-secret setting the daemon takes, given by flag or by variable, round-trips
/// through the printed unit: the daemon the unit starts resolves the same settings. Generated
/// from the registry, so a new setting is covered without a word here.
#[test]
fn every_non_secret_setting_round_trips_through_the_printed_unit() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = installed(tmp.path());
    let defaults = daemon_settings(&[], &[]);
    for (s, args, env) in each_daemon_setting() {
        let given = daemon_settings(&args, &env);
        assert_ne!(given, defaults, "{}: the example is the default", s.var());
        let unit = print_service(&exe, "systemd", &args, &env);
        let (unit_args, unit_env) = unit_settings(&unit);
        assert_eq!(
            daemon_settings(&unit_args, &unit_env),
            given,
            "{} {args:?} {env:?} did not round-trip:\n{unit}",
            s.var()
        );
    }
}

/// A secret given to the daemon is in no printed service, which names where the token is
/// read instead.
#[test]
fn no_printed_service_carries_a_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = installed(tmp.path());
    let secrets: Vec<(String, String)> = SETTINGS
        .iter()
        .filter(|s| s.is_secret())
        .map(|s| (s.var().to_string(), format!("sekrit-{}", s.var())))
        .collect();
    assert!(secrets.iter().any(|(k, _)| k == "KCAP_TOKEN"));
    for kind in ["systemd", "launchd", "windows"] {
        let text = print_service(&exe, kind, &[], &secrets);
        assert!(!text.contains("sekrit"), "{kind} carries a secret: {text}");
        assert!(text.contains("token store"), "{kind}: {text}");
        for (var, _) in &secrets {
            assert!(
                text.contains(var.as_str()),
                "{kind} does not say {var} was left out"
            );
        }
    }
}

/// T5.2: a command refuses a settings flag it has no use for, naming it (exit 2).
#[test]
fn status_refuses_a_setting_it_does_not_use() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = support::bin::kcap_watch(tmp.path());
    c.args(["status", "--stop-grace", "5s"]);
    let out = support::bin::run(c, WAIT);
    assert_eq!(out.status.code(), Some(2));
    let err = support::bin::stderr(&out);
    assert!(err.contains("--stop-grace"), "{err}");
    assert!(out.stdout.is_empty());
}

/// T5.4: `--print-service` refuses a binary in a cargo target directory, whatever its name
/// and whether or not CARGO_TARGET_DIR is set: the binary this suite was built into (tagged
/// by cargo), and an untagged directory CARGO_TARGET_DIR names; the same binary elsewhere is
/// accepted.
#[test]
fn print_service_refuses_a_cargo_target_directory_with_or_without_cargo_target_dir() {
    let refused = |exe: &Path, target_dir: Option<&Path>| {
        let mut c = Command_::new(exe);
        c.env_clear().env("HOME", "/home/u");
        if let Some(d) = target_dir {
            c.env("CARGO_TARGET_DIR", d);
        }
        c.args(["daemon", "--print-service", "systemd"]);
        let out = support::bin::run(c, WAIT);
        let err = support::bin::stderr(&out);
        match out.status.code() {
            Some(2) => {
                assert!(err.contains("build directory"), "{err}");
                assert!(out.stdout.is_empty());
                true
            }
            Some(0) => false,
            other => panic!("{other:?}: {err}"),
        }
    };
    let built = Path::new(support::harness::BIN);
    assert!(refused(built, None));
    assert!(refused(
        built,
        std::env::var_os("CARGO_TARGET_DIR")
            .as_deref()
            .map(Path::new)
    ));

    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let exe = installed(&out_dir.join("release"));
    assert!(refused(&exe, Some(&out_dir)));
    assert!(!refused(&exe, None));
    assert!(!refused(&exe, Some(&tmp.path().join("elsewhere"))));
}
