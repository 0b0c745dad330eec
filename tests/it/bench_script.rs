//! The benchmark script's own bookkeeping (`benches/compare.sh`).

use std::collections::BTreeMap;

/// Every shell function of the script is defined once: a second `timed` (the one that times a
/// command) once replaced the one that gives a timing figure its verdict, so every "holds"
/// column of the report came out empty and `/usr/bin/time` complained of commands named
/// `2.84 <= 2`.
#[test]
fn the_benchmark_script_defines_each_function_once() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/compare.sh"))
            .expect("benches/compare.sh is in the repository");
    let mut seen: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (n, line) in script.lines().enumerate() {
        let line = line.trim_start();
        let Some((name, rest)) = line.split_once("()") else {
            continue;
        };
        let is_name =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if is_name && rest.trim_start().starts_with('{') {
            seen.entry(name).or_default().push(n + 1);
        }
    }
    assert!(seen.contains_key("verdict"), "no verdict function found");
    let twice: Vec<_> = seen.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "defined more than once (name, lines): {twice:?}"
    );
}

/// The many-files table's rows have as many cells as its header: a column added for one
/// figure (the second Fluent Bit, flushing every 10 ms) is added to every row, or the table
/// shifts every later cell under the wrong heading.
#[test]
fn the_many_files_table_rows_match_its_header() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/compare.sh"))
            .expect("benches/compare.sh is in the repository");
    let body = script
        .split("print_many_table() {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("print_many_table is defined");
    // Cells are separated by "|" (a shell's "||" never is).
    let cells = |line: &str| line.replace("||", "").matches('|').count();
    let rows: Vec<&str> = body
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("echo \"| "))
        .collect();
    let header = rows.first().expect("the table has a header");
    assert!(
        header.contains("10 ms") || header.contains("FB_FAST_FLUSH"),
        "the header names the fast-flushing Fluent Bit: {header}"
    );
    for row in &rows[1..] {
        assert_eq!(
            cells(row),
            cells(header),
            "row {row:?} against header {header:?}"
        );
    }
    assert!(
        script.contains("start_fluent_bit many10 "),
        "a second Fluent Bit runs in the many-files rounds"
    );
}
