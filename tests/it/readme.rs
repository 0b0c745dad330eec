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
