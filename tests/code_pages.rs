//! An idle process lets go of its code pages (docs/performance.md, "Memory"): after
//! `release_code`, the executable's read-only mappings hold a fraction of the pages they held,
//! and the program runs on (the pages come back from the page cache when used).
//!
//! Its own test binary: it reads this process's own memory map, which other tests running
//! beside it on other threads would change.

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
#[test]
fn an_idle_process_gives_back_its_code_pages_and_runs_on() {
    use kcap_watch::platform::memory::release_code;
    use kcap_watch::ship::redact;

    /// Resident KiB of this executable's mappings that are not writable (code, constants).
    fn resident_code_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").expect("own executable");
        let exe = exe.to_string_lossy().into_owned();
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("own memory map");
        let mut total = 0;
        let mut counting = false;
        for line in smaps.lines() {
            let mut fields = line.split_whitespace();
            let first = fields.next().unwrap_or("");
            if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
                let perms = fields.next().unwrap_or("");
                let path = line.split_whitespace().nth(5).unwrap_or("");
                counting = path == exe && !perms.contains('w');
            } else if counting && first == "Rss:" {
                total += fields
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        total
    }

    // Run a good deal of the program's code first: the redactor, every rule of a dense line.
    let line = r#"{"type":"response_item","payload":{"type":"function_call_output","output":"export GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789\npassword: hunter2hunter2\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlc2lnbmF0dXJl"}}"#;
    let before_redacted = redact::global().redact_line(line.as_bytes());
    assert!(!before_redacted.contains("ghp_aBcD"));
    let before = resident_code_kib();
    assert!(
        before > 1024,
        "the test touched {before} KiB of code: too few to judge"
    );

    release_code();
    let after = resident_code_kib();
    assert!(
        after * 2 < before,
        "released code pages: {before} KiB resident before, {after} KiB after"
    );

    // The program runs on, the same: its pages fault back in.
    assert_eq!(
        redact::global().redact_line(line.as_bytes()),
        before_redacted
    );
    assert!(resident_code_kib() > after, "used code comes back");
}
