//! `LineReader` over a byte slice that grows in chunks (sizes taken from the first input
//! bytes): it never panics and emits exactly the `\n`-terminated lines, in order, each once,
//! with the right numbers and offsets.
#![no_main]

use kcap_watch::tail::LineReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (steps, file) = data.split_at(4);
    let mut reader = LineReader::new(0, 0, true);
    let mut got = Vec::new();
    let mut visible = 0;
    for &s in steps.iter().cycle().take(64) {
        visible = (visible + usize::from(s) * 37 + 1).min(file.len());
        loop {
            let st = reader
                .read(&file[..visible], usize::from(s % 7) + 1, &mut |l| got.push(l))
                .expect("reading a slice cannot fail");
            if st.at_eof {
                break;
            }
        }
        if visible == file.len() {
            break;
        }
    }
    let mut start = 0u64;
    let ends: Vec<usize> = file
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    let complete = ends.iter().filter(|&&e| e <= visible).count();
    assert_eq!(got.len(), complete);
    for (n, (line, end)) in got.iter().zip(&ends).enumerate() {
        assert_eq!(line.number, n as u64);
        assert_eq!(line.start, start);
        assert_eq!(line.end, *end as u64);
        start = line.end;
    }
});
