//! The man pages in `man/` are generated from the clap definition; this test fails when they
//! are stale. `UPDATE_MAN=1 cargo test --test it man_pages::` rewrites them.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use kcap_watch::settings::Exposure;

const UPDATE: &str = "UPDATE_MAN=1 cargo test --test it man_pages::";

#[test]
fn man_pages_are_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let fresh: BTreeMap<String, Vec<u8>> = kcap_watch::cli::man_pages().into_iter().collect();

    if std::env::var_os("UPDATE_MAN").is_some() {
        fs::create_dir_all(&dir).unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".1") && !fresh.contains_key(&name) {
                fs::remove_file(&path).unwrap();
            }
        }
        for (name, page) in &fresh {
            fs::write(dir.join(name), page).unwrap();
        }
        return;
    }

    let mut problems = Vec::new();
    for (name, page) in &fresh {
        match fs::read(dir.join(name)) {
            Ok(on_disk) if &on_disk == page => {}
            Ok(_) => problems.push(format!("man/{name} is stale")),
            Err(_) => problems.push(format!("man/{name} is missing")),
        }
    }
    if let Ok(entries) = fs::read_dir(&dir) {
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".1") && !fresh.contains_key(&name) {
                problems.push(format!("man/{name} belongs to no command"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\nregenerate the man pages with: {UPDATE}",
        problems.join("\n")
    );
}

#[test]
fn there_is_a_page_per_subcommand() {
    let names: Vec<String> = kcap_watch::cli::man_pages()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "kcap-watch.1",
            "kcap-watch-watch.1",
            "kcap-watch-inspect.1",
            "kcap-watch-supervise.1",
            "kcap-watch-replay.1",
            "kcap-watch-daemon.1",
            "kcap-watch-status.1",
            "kcap-watch-completions.1",
        ]
    );
}

#[test]
fn top_page_lists_every_variable_and_the_exit_codes() {
    let pages = kcap_watch::cli::man_pages();
    let top = String::from_utf8(pages[0].1.clone()).unwrap();
    let env = &top[top.find(".SH ENVIRONMENT").expect("an ENVIRONMENT section")..];
    for var in kcap_watch::settings::SETTINGS {
        // Upper case and underscores: nothing in the names needs a roff escape.
        let listed = env.contains(&format!("\\fB{}\\fR", var.var()));
        let hidden = var.exposure() == Exposure::Hidden;
        assert_eq!(
            listed,
            !hidden,
            "{} (hidden: {hidden}) in ENVIRONMENT",
            var.var()
        );
    }
    assert!(top.contains(".SH \"EXIT STATUS\""));
    assert!(top.contains("\\fB75\\fR"));
}

#[test]
fn subcommand_pages_name_each_flags_variable() {
    let pages = kcap_watch::cli::man_pages();
    let watch = String::from_utf8(pages[1].1.clone()).unwrap();
    assert!(watch.contains("[env: KCAP_CODEX_IDLE_MINUTES] [default: 1h]"));
    assert!(watch.contains("[env: KCAP_URL] [default: offline]"));
}
