//! The documents made from the registry: the note on each flag's help, the man page's
//! ENVIRONMENT section, and the README's configuration table. Hidden settings appear in none.

use super::{Entry, Exposure};

/// Appended to a settings flag's help: `[env: KCAP_CODEX_IDLE_MINUTES] [default: 1h]`.
pub fn flag_note(s: &dyn Entry) -> String {
    format!("[env: {}] [default: {}]", s.var(), s.shown_default())
}

fn documented<'a>(settings: &'a [&'a dyn Entry]) -> impl Iterator<Item = &'a dyn Entry> {
    settings
        .iter()
        .copied()
        .filter(|s| s.exposure() != Exposure::Hidden)
}

/// The man page's ENVIRONMENT section for `settings` (the registry's [`super::SETTINGS`]).
pub fn environment_section(settings: &[&dyn Entry]) -> roff::Roff {
    use roff::{bold, italic, roman};
    let mut r = roff::Roff::new();
    r.control("SH", ["ENVIRONMENT"]);
    r.text([roman(
        "Every setting can be given as a variable, so a parent process can configure the \
         watchers it spawns. A flag wins over its variable, the variable over the default. A \
         bad variable falls back to its default with a warning; it never stops a watcher.",
    )]);
    for s in documented(settings) {
        r.control("TP", []);
        r.text([bold(s.var())]);
        r.text([roman(s.doc())]);
        let mut facts = vec![];
        if let Some(flag) = s.flag() {
            facts.push(roman("Flag: "));
            facts.push(bold(flag));
            facts.push(roman(". "));
        }
        facts.push(roman(format!("Value: {}. Default: ", s.var_syntax())));
        facts.push(italic(s.shown_default()));
        facts.push(roman("."));
        r.control("RS", []);
        r.text(facts);
        r.control("RE", []);
    }
    r
}

/// The README's configuration table for `settings` (the registry's [`super::SETTINGS`]), with
/// the commands that take each.
pub fn markdown_table(settings: &[&dyn Entry]) -> String {
    let mut s = String::from(
        "| variable | flag | value | default | commands | meaning |\n|---|---|---|---|---|---|\n",
    );
    for e in documented(settings) {
        let flag = e.flag().map_or("—".to_string(), |f| format!("`{f}`"));
        let commands: Vec<&str> = e.commands().iter().map(|c| c.name()).collect();
        s.push_str(&format!(
            "| `{}` | {flag} | {} | `{}` | {} | {} |\n",
            e.var(),
            e.var_syntax(),
            e.shown_default(),
            commands.join(", "),
            e.doc()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::kinds::OptionalText;
    use super::super::{SETTINGS, Setting};
    use super::*;

    static SECRET_ID: Setting<OptionalText> = Setting::env_only(
        "KCAP_TEST_ID",
        OptionalText {
            absent: "none",
            what: "an id",
            example: "id",
        },
        "An id.",
    );
    static OVERRIDE: Setting<OptionalText> = Setting::hidden(
        "KCAP_TEST_OVERRIDE_URL",
        OptionalText {
            absent: "none",
            what: "a URL",
            example: "http://127.0.0.1:9",
        },
        "For tests.",
    );

    #[test]
    fn env_only_settings_are_documented_and_hidden_ones_are_not() {
        let settings: Vec<&dyn Entry> = SETTINGS
            .iter()
            .copied()
            .chain([&SECRET_ID as &dyn Entry, &OVERRIDE])
            .collect();
        let table = markdown_table(&settings);
        assert!(table.contains("| `KCAP_TEST_ID` | — | an id | `none` |  | An id. |"));
        assert!(table.contains("| `KCAP_WATCH_EXCLUDE` | — |"));
        assert!(table.contains("| daemon | kcap-watch daemon leaves a session"));
        assert!(!table.contains("KCAP_TEST_OVERRIDE_URL"));
        let man = environment_section(&settings).render();
        assert!(man.contains("KCAP_TEST_ID"));
        assert!(!man.contains("KCAP_TEST_OVERRIDE_URL"));
        assert!(SECRET_ID.arg().is_none() && OVERRIDE.arg().is_none());
    }
}
