//! What shipping one line of up to 4 MiB holds at once (docs/capture.md): the redactor and the
//! JSON check may keep a small, fixed number of copies and views of a line, never an amount
//! that grows with how many keywords or secrets it holds.
//!
//! Its own test binary, because it counts every allocation of the process: a counting global
//! allocator records the peak of live heap bytes around each call, and nothing else runs
//! beside it (its tests take turns).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kcap_watch::ship::capture::{self, MAX_RECORD_BYTES};
use kcap_watch::ship::redact;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grown = new_size - layout.size();
                let live = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A `function_call_output` line whose output repeats `unit` up to about `bytes`.
fn output_line(unit: &str, bytes: usize) -> String {
    let head = r#"{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":""#;
    let tail = r#""}}"#;
    let n = (bytes - head.len() - tail.len()) / unit.len();
    format!("{head}{}{tail}", unit.repeat(n))
}

/// Peak heap held beyond what was live before, while shipping `line`.
fn peak_of(line: &str) -> (usize, Result<String, capture::Loss>) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let shipped = capture::capture(line.as_bytes(), &redact::global());
    let peak = PEAK.load(Ordering::Relaxed) - before;
    (peak, shipped)
}

/// The tests of this binary count the same allocations: one runs at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn shipping_a_4_mib_line_holds_a_small_fixed_multiple_of_it_whatever_it_holds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Build the redactor's tables and compile its rules first: paid once per process.
    let warm = output_line(
        "token=abc password=hunter2hunter2 ghp_aBcDeFgHiJkLmNoPqRsT0123 Authorization: Bearer x\\n",
        64 << 10,
    );
    let _ = capture::capture(warm.as_bytes(), &redact::global());

    let size = MAX_RECORD_BYTES as usize - 1024;
    let cases = [
        ("quiet shell output", "   Compiling serde v1.0.219\\n"),
        // A keyword every few bytes, none a secret, on one long line (minified code).
        ("keywords on one line", "tokens: 5, secret_name; "),
        ("keywords on many lines", "let tokens = count + 1;\\n"),
        // Keywords as dense as they come: `sk` and `sk-` (provider prefixes) start at every
        // third byte, two hits for three bytes (the densest pair of keywords, searched for
        // over every pair); `sk` at every other byte; and prefixes inside a word.
        ("two keywords every three bytes", "sk-"),
        ("a keyword every two bytes", "sk"),
        ("keyword prefixes in a word", "skTask"),
        // A secret every 24 bytes: every one redacted.
        ("secrets on one line", "password=hunter2hunter2 "),
        ("secrets on many lines", "ghp_aBcDeFgHiJkLmNoPqRsT0123\\n"),
        // JSON inside the string, walked again.
        (
            "nested JSON",
            r#"{\"api_key\":\"k3y-v4lue-123456\",\"n\":1},"#,
        ),
    ];
    let mut report = Vec::new();
    for (name, unit) in cases {
        let line = output_line(unit, size);
        let (peak, shipped) = peak_of(&line);
        let shipped = shipped.unwrap_or_else(|l| panic!("{name}: lost as {:?}", l.reason));
        let ratio = peak as f64 / line.len() as f64;
        report.push(format!("{name}: peak {peak} bytes, {ratio:.1}x the line"));
        // The densest keywords (`sk-` over and over: two hits in three bytes, eight bytes a hit)
        // hold 11.4x: the line's hits, and the same hits again for its one string.
        assert!(
            ratio <= 12.0,
            "{name}: shipping a {} byte line held {peak} bytes ({ratio:.1}x)",
            line.len()
        );
        drop(shipped);
    }
    eprintln!("{}", report.join("\n"));
}

/// Each rule compiled, at the first line holding its keyword, adds a bounded heap: one
/// pattern written as a counted repetition of a Unicode class (`[^\s]{6,4096}`) added 13.6
/// MiB (and 19 MiB of resident memory) to every process whose rollout named a command that
/// prints a secret (`pass show`, `op read`, `aws secretsmanager get-secret-value`). A
/// line naming `token` compiles every rule of that word: 1.4 MB while five of them counted
/// a Unicode class up to 32-256 times (`[^"'\n]{1,256}`), 0.7 MB since (docs/performance.md,
/// "twenty-eighth pass").
#[test]
fn each_rule_compiled_adds_a_bounded_heap() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let redactor = redact::Redactor::new();
    // The shared tables every redaction uses, built first.
    let _ = redactor.redact_text("password=x");
    let mut added = Vec::new();
    for rule in redact::rule_examples() {
        for text in rule.positive.iter().chain(rule.negative) {
            let before = LIVE.load(Ordering::Relaxed);
            let _ = redactor.redact_text(text);
            added.push((LIVE.load(Ordering::Relaxed).saturating_sub(before), *text));
        }
    }
    let (most, text) = added.iter().max().copied().unwrap_or_default();
    let total: usize = added.iter().map(|a| a.0).sum();
    eprintln!("every rule compiled: {total} bytes; the most one text compiled: {most} ({text:?})");
    assert!(
        most < 1 << 20,
        "redacting {text:?} compiled rules that hold {most} bytes"
    );
    drop(redactor);
}
