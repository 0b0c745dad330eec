//! The keyword scan's automaton as a plain table, stepped by [`Keywords::each_occurrence`].
//!
//! The Aho-Corasick DFA the keywords are compiled to answers one byte at a time through a
//! general interface (an anchored mode, a special-state test, then a match test); the scan
//! runs over every byte of every line, so that interface was most of its cost. This is the same
//! automaton copied into one flat array: a byte's class, one transition, and a single compare
//! that says whether the state reports keywords (those states are numbered first). The copy is
//! taken state by state from the automaton's own interface, so it reports exactly what the DFA
//! reports (a property test in this module holds it to that).
//!
//! It is taken from the Aho-Corasick NFA (the trie and its failure links), not from the DFA
//! built on it: the DFA's builder works out each state's next state for all 256 bytes, where
//! the table needs one byte of each class (about 40), and building the redactor (again after
//! every quiet spell, see `shared.rs`) spent most of its 42 M instructions there.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::nfa::noncontiguous::NFA;
use aho_corasick::{Anchored, MatchKind};

use super::Hit;

/// The keyword automaton as a table.
pub(crate) struct Keywords {
    /// Each byte's class: bytes a keyword holds get one class per letter (both cases) or
    /// other byte; every other byte shares class 0, as it leads every state to the start.
    classes: [u8; 256],
    /// The transitions, `stride` per state: the entry at `state + class` is the next state,
    /// premultiplied by `stride`, with [`REPORTS`] set when it reports keywords.
    trans: Trans,
    /// The state the scan starts in (premultiplied; it reports nothing).
    start: u32,
    /// The reporting states are numbered first: state `s`'s keywords are
    /// `matches[spans[s / stride]]`.
    stride: u32,
    /// For each reporting state, where its keywords lie in `matches`.
    spans: Vec<(u32, u32)>,
    /// Keyword ids with their lengths, grouped by state.
    matches: Vec<(u32, u32)>,
    /// The longest keyword's length: a scan started that many bytes before a place is in the
    /// state a scan from the text's start has there.
    lead: usize,
}

impl Keywords {
    /// `words` (lowercase) found ASCII case-insensitively, every occurrence reported.
    pub(crate) fn new(words: &[&str]) -> Keywords {
        Keywords::from_automaton(&nfa(words), words)
    }

    fn from_automaton(aut: &impl Automaton, words: &[&str]) -> Keywords {
        // Classes: one per byte (case folded) that some keyword holds, 0 for the rest.
        let mut classes = [0u8; 256];
        let mut reps: Vec<u8> = vec![0];
        for w in words {
            for b in w.bytes() {
                let f = b.to_ascii_lowercase();
                if classes[f as usize] == 0 {
                    classes[f as usize] = reps.len() as u8;
                    reps.push(f);
                }
            }
        }
        for b in b'A'..=b'Z' {
            classes[b as usize] = classes[b.to_ascii_lowercase() as usize];
        }
        // A byte no keyword holds: the representative of class 0.
        reps[0] = (0..=255u8).find(|&b| classes[b as usize] == 0).unwrap_or(0);
        let stride = reps.len() as u32;

        // Every state reachable from the start, in the order found.
        let start_id = match aut.start_state(Anchored::No) {
            Ok(s) => s,
            // An unanchored search of an automaton built without a prefilter always has a
            // start state; without one nothing is ever found, as with the DFA.
            Err(_) => return Keywords::empty(),
        };
        let mut found: Vec<StateID> = vec![start_id];
        // Each state's place in `found`, by its id (`NONE`: not found yet).
        const NONE: u32 = u32::MAX;
        let mut index: Vec<u32> = Vec::new();
        let place = |index: &mut Vec<u32>, sid: StateID, found: &mut Vec<StateID>| {
            let i = sid.as_usize();
            if i >= index.len() {
                index.resize(i + 1, NONE);
            }
            if index[i] == NONE {
                index[i] = found.len() as u32;
                found.push(sid);
            }
            index[i] as usize
        };
        index.resize(start_id.as_usize() + 1, NONE);
        index[start_id.as_usize()] = 0;
        // Each found state's row of next states (places in `found`), `reps.len()` a row.
        let mut next: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < found.len() {
            let sid = found[i];
            for &b in &reps {
                let to = aut.next_state(Anchored::No, sid, b);
                next.push(place(&mut index, to, &mut found) as u32);
            }
            i += 1;
        }
        let is_match = |sid: StateID| aut.is_special(sid) && aut.is_match(sid);
        // Reporting states first.
        let mut order: Vec<usize> = (0..found.len()).filter(|&s| is_match(found[s])).collect();
        let match_count = order.len();
        order.extend((0..found.len()).filter(|&s| !is_match(found[s])));
        let mut new_index = vec![0u32; found.len()];
        for (n, &old) in order.iter().enumerate() {
            new_index[old] = n as u32;
        }
        let mut trans = vec![0u32; found.len() * reps.len()];
        for (old, row) in next.chunks_exact(reps.len()).enumerate() {
            let base = new_index[old] as usize * reps.len();
            for (c, &to) in row.iter().enumerate() {
                let to = to as usize;
                let reports = if (new_index[to] as usize) < match_count {
                    REPORTS
                } else {
                    0
                };
                trans[base + c] = (new_index[to] * stride) | reports;
            }
        }
        let mut spans = Vec::with_capacity(match_count);
        let mut matches = Vec::new();
        for &old in &order[..match_count] {
            let sid = found[old];
            let first = matches.len() as u32;
            for k in 0..aut.match_len(sid) {
                let p = aut.match_pattern(sid, k);
                matches.push((p.as_u32(), aut.pattern_len(p) as u32));
            }
            spans.push((first, matches.len() as u32));
        }
        Keywords {
            classes,
            trans: Trans::new(trans),
            start: new_index[0] * stride,
            stride,
            spans,
            matches,
            lead: words.iter().map(|w| w.len()).max().unwrap_or(0),
        }
    }

    /// A table that finds nothing.
    fn empty() -> Keywords {
        Keywords {
            classes: [0; 256],
            trans: Trans::new(vec![0]),
            start: 0,
            stride: 1,
            spans: Vec::new(),
            matches: Vec::new(),
            lead: 0,
        }
    }

    /// Pushes every occurrence of every keyword in `text` to `hits`, overlapping ones
    /// included, ordered by start (and, for one start, shortest first). Every reporting state
    /// reports all the keywords ending at that byte, so nothing is found twice and nothing held
    /// inside another keyword (`pass` in `passw`) is missed.
    pub(crate) fn each_occurrence(&self, text: &[u8], hits: &mut Vec<Hit>) {
        self.each_split(text, hits, STREAMS_FROM, REGION);
    }

    /// [`Keywords::each_occurrence`], in [`STREAMS`] parts at once for a text of `from` bytes
    /// or more, `region` bytes at a time (raised to [`STREAMS`] times the lead if less, so that
    /// every part is at least as long as its lead).
    #[inline(always)]
    fn each_split(&self, text: &[u8], hits: &mut Vec<Hit>, from: usize, region: usize) {
        match &self.trans {
            Trans::Small(t) => {
                self.each_with(text, hits, from, region, |i| t[i as usize & (SMALL - 1)])
            }
            Trans::Large(t) => {
                self.each_with(text, hits, from, region, |i| t[(i & !REPORTS) as usize])
            }
        }
    }

    /// [`Keywords::each_split`] with the transition at an index read by `next`.
    ///
    /// One step of the automaton waits for the one before it (a load whose address is the
    /// previous load's result), so one scan keeps a core mostly idle. A long text is cut into
    /// [`STREAMS`] parts stepped side by side, each started [`Keywords::lead`] bytes early so
    /// that it is in the right state where its part begins, and each reporting only the
    /// keywords that end in its part: the same occurrences as one scan, about twice as fast
    /// (docs/performance.md, "The keyword scan in four streams").
    #[inline(always)]
    fn each_with(
        &self,
        text: &[u8],
        hits: &mut Vec<Hit>,
        from: usize,
        region: usize,
        next: impl Fn(u32) -> u32,
    ) {
        let first = hits.len();
        let region = region.max(STREAMS * self.lead);
        if text.len() < from.max(1) || text.len() / STREAMS < self.lead.max(1) {
            self.step_all(text, 0, self.start, hits, &next);
        } else {
            // Region by region, each part's hits to its own list, joined in order after each
            // region: the lists hold one region's hits, and `hits` grows by what the text so
            // far says the rest holds, not by doubling (a text dense with keywords holds a hit
            // for every two of its bytes, and doubling could leave twice that reserved).
            // The thread's lists from the last text, empty (four lists grown from nothing
            // were four allocations or more for every text scanned in parts).
            let mut lists: Box<[Vec<Hit>; STREAMS]> =
                LISTS.with(std::cell::Cell::take).unwrap_or_default();
            let mut lo = 0;
            while lo < text.len() {
                let hi = if text.len() - lo < 2 * region {
                    text.len()
                } else {
                    lo + region
                };
                self.region(text, lo..hi, &mut lists, &next);
                let more: usize = lists.iter().map(Vec::len).sum();
                if hits.capacity() - hits.len() < more {
                    // What the rest of the text holds at the density seen so far, and at least
                    // an eighth more, so that a density rising towards the end still reserves
                    // a geometric amount each time.
                    let found = hits.len() - first + more;
                    let expected = (found as u128 * text.len() as u128 / hi as u128) as usize;
                    let room = expected.saturating_sub(found).max(found / 8);
                    hits.reserve_exact(more + room);
                }
                for list in lists.iter_mut() {
                    hits.extend_from_slice(list);
                    list.clear();
                }
                lo = hi;
            }
            // A text dense with keywords grows them to a region's hits: not kept for an idle
            // thread.
            for list in lists.iter_mut() {
                if list.capacity() > KEPT_HITS {
                    *list = Vec::new();
                }
            }
            LISTS.with(|cell| cell.set(Some(lists)));
        }
        // Hits come in the order of their ends. A long keyword ends after a short one that
        // starts after it (`private key` and `key`): ordered by start, the stable sort keeps
        // those of one start shortest first.
        if !hits[first..].is_sorted_by_key(|h| h.at()) {
            hits[first..].sort_by_key(|h| h.at());
        }
    }

    /// The hits that end in `region` of `text`, the region cut into [`STREAMS`] parts stepped
    /// side by side, each reported to its own list. Stream `k` starts [`Keywords::lead`] bytes
    /// before its part (or at the text's start), reads as many bytes as every other, and
    /// reports what ends in its part; the last goes on alone to the region's end.
    #[inline(always)]
    fn region(
        &self,
        text: &[u8],
        region: std::ops::Range<usize>,
        lists: &mut [Vec<Hit>; STREAMS],
        next: &impl Fn(u32) -> u32,
    ) {
        let lo = region.start;
        let part = region.len() / STREAMS;
        let len = part + self.lead;
        let begin: [usize; STREAMS] =
            std::array::from_fn(|k| (lo + k * part).saturating_sub(self.lead));
        let s: [&[u8]; STREAMS] = begin.map(|b| &text[b..b + len]);
        let classes = &self.classes;
        let mut sid = [self.start; STREAMS];
        for (i, (((&b0, &b1), &b2), &b3)) in s[0].iter().zip(s[1]).zip(s[2]).zip(s[3]).enumerate() {
            sid[0] = next(sid[0] + u32::from(classes[b0 as usize]));
            sid[1] = next(sid[1] + u32::from(classes[b1 as usize]));
            sid[2] = next(sid[2] + u32::from(classes[b2 as usize]));
            sid[3] = next(sid[3] + u32::from(classes[b3 as usize]));
            if (sid[0] | sid[1] | sid[2] | sid[3]) & REPORTS != 0 {
                self.report_parts(sid, i, &begin, lo..lo + part, lists);
            }
        }
        let end = lo + STREAMS * part;
        self.step_all(
            &text[end..region.end],
            end,
            sid[STREAMS - 1],
            &mut lists[STREAMS - 1],
            next,
        );
    }

    /// Steps the automaton from state `sid` over `text`, which starts at byte `offset` of the
    /// scanned text, reporting to `hits` every keyword that ends in it.
    #[inline(always)]
    fn step_all(
        &self,
        text: &[u8],
        offset: usize,
        mut sid: u32,
        hits: &mut Vec<Hit>,
        next: &impl Fn(u32) -> u32,
    ) {
        let classes = &self.classes;
        // Four bytes a round: a class and a transition a byte, and one test of the four states
        // for the bit that says one of them reports keywords. `next` ignores that bit.
        let mut chunks = text.chunks_exact(4);
        let mut at = offset;
        for chunk in &mut chunks {
            let s0 = next(sid + u32::from(classes[chunk[0] as usize]));
            let s1 = next(s0 + u32::from(classes[chunk[1] as usize]));
            let s2 = next(s1 + u32::from(classes[chunk[2] as usize]));
            let s3 = next(s2 + u32::from(classes[chunk[3] as usize]));
            if (s0 | s1 | s2 | s3) & REPORTS != 0 {
                for (k, s) in [s0, s1, s2, s3].into_iter().enumerate() {
                    if s & REPORTS != 0 {
                        self.report(s & !REPORTS, at + k, hits);
                    }
                }
            }
            sid = s3;
            at += 4;
        }
        for (k, &b) in chunks.remainder().iter().enumerate() {
            sid = next(sid + u32::from(classes[b as usize]));
            if sid & REPORTS != 0 {
                self.report(sid & !REPORTS, at + k, hits);
            }
        }
    }

    /// The keywords [`Keywords::region`]'s parts report at their byte `i`: each part's states
    /// `sid`, the part `k` started at `begin[k]` and owning the `k`-th stretch as long as
    /// `first` from `first.start`. Apart from the loop (and never inlined into it), so that
    /// the loop's registers hold its four parts and states: with this inside, the parts'
    /// places were reloaded from the stack at every byte.
    #[cold]
    #[inline(never)]
    fn report_parts(
        &self,
        sid: [u32; STREAMS],
        i: usize,
        begin: &[usize; STREAMS],
        first: std::ops::Range<usize>,
        lists: &mut [Vec<Hit>; STREAMS],
    ) {
        let part = first.len();
        for (k, list) in lists.iter_mut().enumerate() {
            let at = begin[k] + i;
            let own = first.start + k * part..first.start + (k + 1) * part;
            if sid[k] & REPORTS != 0 && own.contains(&at) {
                self.report(sid[k] & !REPORTS, at, list);
            }
        }
    }

    /// The keywords the state `sid` reports, ending at byte `i`.
    #[cold]
    fn report(&self, sid: u32, i: usize, hits: &mut Vec<Hit>) {
        let (a, b) = self.spans[(sid / self.stride) as usize];
        for &(keyword, len) in &self.matches[a as usize..b as usize] {
            hits.push(Hit::new(i + 1 - len as usize, keyword));
        }
    }
}

/// The most hits a thread's list keeps room for between texts (32 KiB for the four).
const KEPT_HITS: usize = 1024;

thread_local! {
    /// Each thread's lists of [`Keywords::region`], kept empty between texts.
    static LISTS: std::cell::Cell<Option<Box<[Vec<Hit>; STREAMS]>>> =
        const { std::cell::Cell::new(None) };
}

/// How many parts of a long text the scan steps side by side ([`Keywords::each_with`]).
const STREAMS: usize = 4;

/// The bytes of a long text scanned in parts at a time ([`Keywords::each_with`]).
const REGION: usize = 64 * 1024;

/// The shortest text scanned in parts: below it, the bytes the later parts read twice (a
/// keyword's length each) cost more than the parts save. 192 against 512 bytes: 8 % less CPU
/// on lines of 1 KiB (docs/performance.md, "The keyword scan in four streams").
const STREAMS_FROM: usize = 192;

/// The bit of a transition that says the state it leads to reports keywords: far above any
/// state's number, and a multiple of [`SMALL`], so the masked index of [`Trans::Small`] drops
/// it by itself.
const REPORTS: u32 = 1 << 31;

/// Entries of a table that fits [`Trans::Small`]: about twice what today's keywords take, as
/// the array is allocated zeroed and its pages past the entries are never touched (never
/// resident). At 2^17 the keywords of 2026-12-05 came within 63 states of the slice.
const SMALL: usize = 1 << 18;

/// The transitions. A table of at most [`SMALL`] entries is held in an array of that size and
/// read at an index masked to it, which needs no bounds check (a compare and a branch a byte);
/// a larger one (never, with today's keywords: about 131,000 entries) is read as a slice.
enum Trans {
    Small(Box<[u32; SMALL]>),
    Large(Box<[u32]>),
}

impl Trans {
    fn new(trans: Vec<u32>) -> Trans {
        if trans.len() > SMALL {
            return Trans::Large(trans.into_boxed_slice());
        }
        // Allocated zeroed: the pages past the entries are never touched, so never resident.
        let mut small = vec![0u32; SMALL];
        small[..trans.len()].copy_from_slice(&trans);
        match small.into_boxed_slice().try_into() {
            Ok(small) => Trans::Small(small),
            // Not reached: resized to `SMALL` just above.
            Err(trans) => Trans::Large(trans),
        }
    }
}

/// The keyword automaton: `words` (lowercase) found ASCII case-insensitively, every
/// occurrence reported.
fn nfa(words: &[&str]) -> NFA {
    NFA::builder()
        .match_kind(MatchKind::Standard)
        .ascii_case_insensitive(true)
        // Stepped through the table above, one lookup per byte: a prefilter would only make
        // it stop to ask where to jump, and the rare bytes of a few hundred words are common
        // ones.
        .prefilter(false)
        .build(words)
        // A few hundred short constant words: far below any automaton size limit.
        .expect("keyword automaton builds")
}

/// The DFA of the same words, which the tests hold the table to.
#[cfg(test)]
fn dfa(words: &[&str]) -> aho_corasick::dfa::DFA {
    aho_corasick::dfa::DFA::builder()
        .match_kind(MatchKind::Standard)
        .ascii_case_insensitive(true)
        .prefilter(false)
        .build(words)
        .expect("keyword automaton builds")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The occurrences the DFA reports stepped through its own interface, as the scan did
    /// before the table.
    fn by_dfa(dfa: &aho_corasick::dfa::DFA, text: &[u8]) -> Vec<(usize, u32)> {
        let mut hits: Vec<(usize, u32)> = Vec::new();
        let mut sid = dfa.start_state(Anchored::No).expect("start state");
        for (i, &b) in text.iter().enumerate() {
            sid = dfa.next_state(Anchored::No, sid, b);
            if dfa.is_special(sid) && dfa.is_match(sid) {
                for k in 0..dfa.match_len(sid) {
                    let p = dfa.match_pattern(sid, k);
                    hits.push((i + 1 - dfa.pattern_len(p), p.as_u32()));
                }
            }
        }
        hits.sort_by_key(|h| h.0);
        hits
    }

    /// The occurrences the table reports, read through both forms of its transitions, in one
    /// scan and in parts.
    fn by_table(table: &Keywords, text: &[u8]) -> Vec<(usize, u32)> {
        let mut hits = Vec::new();
        table.each_occurrence(text, &mut hits);
        let Trans::Small(small) = &table.trans else {
            panic!("today's keywords fit the small table");
        };
        let found: Vec<(usize, u32)> = hits.iter().map(|h| (h.at(), h.keyword())).collect();
        // One scan; parts of the whole text; parts of regions as small as they can be.
        let smallest = STREAMS * table.lead.max(1);
        for (from, region) in [
            (usize::MAX, REGION),
            (0, REGION),
            (0, smallest),
            (0, smallest + 5),
            // Below the smallest: raised to it.
            (0, 1),
        ] {
            let mut large = Vec::new();
            table.each_with(text, &mut large, from, region, |i| {
                small[..][(i & !REPORTS) as usize]
            });
            let found_large: Vec<(usize, u32)> =
                large.iter().map(|h| (h.at(), h.keyword())).collect();
            assert_eq!(
                found, found_large,
                "large table, parts from {from}, {region}"
            );
            let mut split = Vec::new();
            table.each_split(text, &mut split, from, region);
            let found_split: Vec<(usize, u32)> =
                split.iter().map(|h| (h.at(), h.keyword())).collect();
            assert_eq!(found, found_split, "parts from {from}, regions of {region}");
        }
        found
    }

    fn redactor_words() -> Vec<&'static str> {
        super::super::global().words.clone()
    }

    #[test]
    fn finds_what_the_dfa_finds_in_examples() {
        let words = redactor_words();
        let d = dfa(&words);
        let table = Keywords::new(&words);
        for text in [
            &b"export GITHUB_TOKEN=ghp_x; PassWord=1 private key -----END Author: x"[..],
            b"",
            b"sk",
            "TaskStarted \u{00e9}\u{ff34}oken \x1b[1mtoken".as_bytes(),
            "private key PASSWORD passw sk_live_ Author: "
                .repeat(40)
                .as_bytes(),
        ] {
            assert_eq!(by_table(&table, text), by_dfa(&d, text));
        }
        assert!(!by_table(&table, b"PASSWORD").is_empty());
    }

    /// The table taken from the NFA is, entry for entry, the one taken from the DFA: the same
    /// states in the same order, each with the same keywords.
    #[test]
    fn the_table_from_the_nfa_is_the_one_from_the_dfa() {
        let words = redactor_words();
        let (from_nfa, from_dfa) = (
            Keywords::new(&words),
            Keywords::from_automaton(&dfa(&words), &words),
        );
        let entries = |k: &Keywords| match &k.trans {
            Trans::Small(t) => t.to_vec(),
            Trans::Large(t) => t.to_vec(),
        };
        assert_eq!(entries(&from_nfa), entries(&from_dfa));
        assert_eq!(from_nfa.classes, from_dfa.classes);
        assert_eq!(
            (from_nfa.start, from_nfa.stride, from_nfa.lead),
            (from_dfa.start, from_dfa.stride, from_dfa.lead)
        );
        assert_eq!(from_nfa.spans, from_dfa.spans);
        assert_eq!(from_nfa.matches, from_dfa.matches);
    }

    /// A keyword that straddles the border of two parts, at every offset, is found once, as
    /// one scan finds it: the longest keywords need the whole lead.
    #[test]
    fn finds_keywords_across_the_borders_of_the_parts() {
        let words = redactor_words();
        let d = dfa(&words);
        let table = Keywords::new(&words);
        let mut longest = words.clone();
        longest.sort_by_key(|w| std::cmp::Reverse(w.len()));
        let len = STREAMS * (table.lead + 40) + 3;
        let part = len / STREAMS;
        for word in longest.iter().take(6).chain(words.iter().take(20)) {
            for border in 1..STREAMS {
                let at_border = border * part;
                for start in at_border.saturating_sub(word.len() + 1)..=at_border + 1 {
                    let mut text = vec![b'.'; len];
                    text[start..start + word.len()].copy_from_slice(word.as_bytes());
                    let found = by_table(&table, &text);
                    assert_eq!(found, by_dfa(&d, &text), "{word:?} at {start}");
                    assert!(
                        found.iter().any(|&(at, _)| at == start),
                        "{word:?} at {start} not found"
                    );
                }
            }
        }
    }

    /// Text made of pieces of keywords in random case, and other bytes.
    fn text_strategy() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let words = redactor_words();
        let piece = prop_oneof![
            (proptest::sample::select(words), any::<u64>(), 0usize..4).prop_map(
                |(w, case, cut)| {
                    let w = w.as_bytes();
                    let w = &w[..w.len().saturating_sub(cut).max(1).min(w.len())];
                    w.iter()
                        .enumerate()
                        .map(|(i, &b)| {
                            if case >> (i % 64) & 1 == 1 {
                                b.to_ascii_uppercase()
                            } else {
                                b
                            }
                        })
                        .collect::<Vec<u8>>()
                }
            ),
            proptest::collection::vec(any::<u8>(), 0..4),
            proptest::collection::vec(proptest::sample::select(b" _-=:\"\\".to_vec()), 0..3),
        ];
        // Up to a few hundred pieces: texts long enough to be scanned in parts, with keywords
        // across the parts' borders.
        proptest::collection::vec(piece, 0..300).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_dfa(text in text_strategy()) {
            let words = redactor_words();
            let d = dfa(&words);
            let table = Keywords::new(&words);
            proptest::prop_assert_eq!(by_table(&table, &text), by_dfa(&d, &text));
        }
    }
}
