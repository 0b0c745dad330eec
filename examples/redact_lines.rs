//! Redacts every line of a file, a number of times: a fixed workload for profilers
//! (`valgrind --tool=callgrind`, `perf record`), whose instruction counts do not depend on the
//! machine's load as timings do (docs/performance.md).
//!
//! `cargo run --release --example redact_lines -- FILE [ROUNDS]`: prints the bytes redacted
//! and how many lines changed. `cargo run --example redact_lines -- FILE --print` (FILE `-` is
//! standard input) prints each line as it would be shipped instead: a quick way to try a form.

use std::io::{BufRead, Write};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: redact_lines FILE|- [ROUNDS|--print]");
        std::process::exit(2);
    };
    let next = args.next();
    let print = next.as_deref() == Some("--print");
    let rounds: usize = next.and_then(|r| r.parse().ok()).unwrap_or(1);
    let input: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(std::fs::File::open(path)?))
    };
    let lines: Vec<Vec<u8>> = input.split(b'\n').collect::<Result<_, _>>()?;
    let redactor = kcap_watch::ship::redact::global();
    if print {
        let mut out = std::io::stdout().lock();
        for line in &lines {
            writeln!(out, "{}", redactor.redact_line(line))?;
        }
        return Ok(());
    }
    let (mut bytes, mut changed) = (0usize, 0usize);
    for _ in 0..rounds {
        for line in &lines {
            let out = redactor.redact_line(line);
            bytes += line.len();
            changed += usize::from(out.as_bytes() != line.as_slice());
        }
    }
    println!("{bytes} bytes, {changed} lines changed");
    Ok(())
}
