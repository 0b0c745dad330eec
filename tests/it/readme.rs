//! The README's configuration table is generated from the one registry of variables
//! (`settings::SETTINGS`), so it cannot drift from `--help` and the man page.
//! Regenerate with `UPDATE_README=1 cargo test --test it readme::`.

const START: &str = "<!-- config:start -->\n";
const END: &str = "<!-- config:end -->";

#[test]
fn readme_configuration_table_matches_the_registry() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let table = kcap_watch::settings::markdown_table(kcap_watch::settings::SETTINGS);
    let (Some(a), Some(b)) = (readme.find(START), readme.find(END)) else {
        panic!("README.md lacks the config table markers");
    };
    let current = &readme[a + START.len()..b];
    if current != table {
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{START}{table}{}", &readme[..a], &readme[b..]);
            std::fs::write(&path, updated).unwrap();
        } else {
            panic!(
                "README.md's configuration table is stale: run `UPDATE_README=1 cargo test --test it readme::`"
            );
        }
    }
}

const SKIPS_START: &str = "<!-- wine-skips:start -->\n";
const SKIPS_END: &str = "<!-- wine-skips:end -->";

/// The tests `.ci/windows-test` skips under Wine (`.ci/wine/skips`), as the README lists them:
/// one row a test, with the Wine gap that is the reason.
fn wine_skips_table() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let skips = std::fs::read_to_string(root.join(".ci/wine/skips")).unwrap();
    let mut table = String::from("| test | why it is skipped under Wine |\n|---|---|\n");
    for line in skips.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line.split_once(' ').unwrap_or((line, ""));
        assert!(!reason.trim().is_empty(), "{name}: a skip needs its reason");
        table.push_str(&format!("| `{name}` | {} |\n", reason.trim()));
    }
    table
}

/// Every test skipped under Wine is named in the README's Platforms section with its reason,
/// and nothing else is: a skip cannot be added or dropped without the README saying so.
#[test]
fn readme_lists_exactly_the_tests_skipped_under_wine() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let table = wine_skips_table();
    let (Some(a), Some(b)) = (readme.find(SKIPS_START), readme.find(SKIPS_END)) else {
        panic!("README.md lacks the Wine skips markers");
    };
    let current = &readme[a + SKIPS_START.len()..b];
    if current != table {
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{SKIPS_START}{table}{}", &readme[..a], &readme[b..]);
            std::fs::write(&path, updated).unwrap();
        } else {
            panic!(
                "README.md's list of Wine skips is stale: run `UPDATE_README=1 cargo test --test it readme::`"
            );
        }
    }
}

/// The README's two setup commands, from its "Build and test from source" block: the demo
/// (`cargo run ...`) and the test command.
fn setup_commands() -> (String, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let at = readme
        .find("## Build and test from source")
        .expect("README.md lacks its setup section");
    // A stranger reads the two commands first: the section is the README's first.
    assert_eq!(
        readme.find("\n## "),
        Some(at - 1),
        "the setup section is not the README's first"
    );
    let section = &readme[at..];
    let block = section.split("```").nth(1).expect("a code block");
    let commands: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && *l != "sh")
        .collect();
    assert_eq!(commands.len(), 2, "two commands: {commands:?}");
    (commands[0].to_string(), commands[1].to_string())
}

/// The two setup commands share one build: the demo runs on the dev profile the tests build
/// (no `--release`, whose fat LTO would be a second cold build), and CI runs exactly the test
/// command the README gives.
#[test]
fn the_setup_commands_share_one_build_and_ci_runs_the_readme_test_command() {
    let (demo, test) = setup_commands();
    assert!(demo.contains("cargo run --locked -- "), "{demo}");
    assert!(
        !demo.contains("--release") && !demo.contains("--profile"),
        "{demo}"
    );
    assert_eq!(test, "cargo test --locked");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == test),
        ".ci/run does not run `{test}`"
    );
}

/// The demo does what the README says: offline, on the shipped fixture, it folds the rollout,
/// spools its lines and the stop, and prints where.
#[test]
fn the_readme_demo_spools_the_fixtures_lines_and_its_stop() {
    let (demo, _) = setup_commands();
    let args = demo
        .split_once("cargo run --locked -- ")
        .map(|(_, rest)| rest)
        .unwrap();
    let config = tempfile::tempdir().unwrap();
    let mut c = crate::support::bin::kcap_watch(config.path());
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args.split_whitespace());
    let out = crate::support::bin::run(c, std::time::Duration::from_secs(30));
    let stdout = crate::support::bin::stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::bin::stderr(&out)
    );
    assert!(stdout.contains("spooled"), "{stdout}");
    assert!(stdout.contains("subagent-stop"), "{stdout}");
}
