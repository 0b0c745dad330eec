//! One registry entry is all a setting needs: every entry shows up, as its exposure says, in
//! the real binary's `--help` of each command that takes settings, in the man pages and the
//! README on disk; hidden entries show up nowhere. (The README table being exactly the
//! registry's rendering is `tests/it/readme.rs`; the man pages being fresh is
//! `tests/it/man_pages.rs`; every entry being resolved is a unit test of `config`.)

use std::path::Path;
use std::process::Command;

use kcap_watch::settings::{Exposure, SETTINGS, flag_note};

const COMMANDS: [&str; 4] = ["watch", "supervise", "inspect", "replay"];

/// The flags `sub` takes (issue 18: each command only the settings it uses).
fn flags_of(sub: &str) -> Vec<&'static str> {
    match sub {
        "watch" => kcap_watch::cli::WatchSettings::flags(),
        "supervise" => kcap_watch::cli::SuperviseSettings::flags(),
        "inspect" => kcap_watch::cli::InspectSettings::flags(),
        "replay" => kcap_watch::cli::ReplaySettings::flags(),
        other => panic!("{other}"),
    }
}

fn help(sub: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kcap-watch"))
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
