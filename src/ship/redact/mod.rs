//! Redaction of shipped lines: raw rollout text never leaves the process
//! (docs/behaviour.md S1, docs/behaviour.md R2, docs/behaviour.md A2).
//!
//! - **Decoded text.** In a JSON line every string value and key is decoded (all escapes
//!   resolved) and the rules run on the decoded text; a decoded string that is itself JSON is
//!   walked again, to any depth. A span found in decoded text maps back to the raw bytes it
//!   came from, widened to whole escapes ([`decode`]), and only those bytes change: every other
//!   byte ships as written and valid JSON stays valid JSON. A line that is not JSON is scanned
//!   as text and through views with its escapes resolved.
//! - **Structure** ([`json`]): every string under a secret-named key, header lists as pairs,
//!   private keys split over the strings of an array, argv arrays.
//! - **One table** ([`rules`], [`providers`]): every rule has an id, a family, keywords and
//!   examples. One Aho-Corasick pass over the line, ASCII case-insensitive, finds which
//!   keywords occur; only their rules run, each on the lines around its keywords (a rule that
//!   may span lines on the whole string). A rule's regex is compiled the first time one of its
//!   keywords is seen, so an idle watcher holds none.
//!
//! Most lines hold no keyword: they cost one pass of a keyword DFA (case-insensitive, no
//! copy of the line) and are returned untouched.

mod code;
mod decode;
mod encoded;
mod finders;
mod json;
pub(crate) use json::{first_special, needs_escape};
mod keywords;
use crate::secret_names as names;
pub(crate) mod providers;
pub(crate) mod rules;
mod runs;
mod shared;
mod vendors;

pub use shared::{IDLE_RELEASE, global, release_unused};

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::{memchr, memmem, memrchr};
use regex::Regex;

use json::Tok;
use rules::Rule;

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[REDACTED]";

/// Whether `text` is one JSON value, as the capture rules decide what ships
/// ([`super::capture`]): the grammar of RFC 8259, nesting as deep as the redactor walks.
pub fn is_json(text: &str) -> bool {
    json::is_json(text)
}

/// The longest prefix of `s` that fits in `max_bytes` and ends on a character boundary.
///
/// Truncate *after* redacting: a secret cut in half before redaction may no longer look like
/// one.
pub fn truncate_utf8(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    // Terminates: offset 0 is always a character boundary.
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// How deep strings inside strings (and views of views) are followed. Each level is shorter
/// than the one holding it, so this only bounds pathological input.
const MAX_DEPTH: usize = 12;

/// How many encodings deep a secret is looked for (base64 of base64 of a secret).
const ENCODED_DEPTH: usize = 3;

/// Command words whose argv arrays are joined into one command line.
const COMMANDS: &[&str] = &[
    "curl",
    "mysql",
    "mariadb",
    "sshpass",
    "docker",
    "podman",
    "az",
    "redis-cli",
    "openssl",
    "ssh-keygen",
    "htpasswd",
    "sqlplus",
    "wget",
    "mysqldump",
    "mysqladmin",
    "psql",
];

/// A rule of either table: core rules first, then providers.
#[derive(Clone, Copy)]
enum RuleRef<'t> {
    Core(&'t Rule),
    Provider(&'t providers::ProviderRule),
}

/// A keyword occurrence: where it starts and which keyword, in one word. A text dense with
/// keywords holds a hit for every two of its bytes (`sk` over and over), so a hit's size is a
/// multiple of the line the redactor holds at once (docs/capture.md): eight bytes, not the
/// sixteen a `usize` beside a `u32` take. A start fits the upper 48 bits (no text is 256 TiB)
/// and a keyword the lower 16 (the tables hold a few hundred: test
/// `every_keyword_fits_a_hit`).
#[derive(Clone, Copy, Debug)]
struct Hit(u64);

impl Hit {
    fn new(at: usize, keyword: u32) -> Hit {
        debug_assert!(
            keyword <= u32::from(u16::MAX),
            "keyword id {keyword} fits no hit"
        );
        Hit(((at as u64) << 16) | u64::from(keyword as u16))
    }

    /// Where the keyword starts.
    fn at(self) -> usize {
        (self.0 >> 16) as usize
    }

    /// Which keyword.
    fn keyword(self) -> u32 {
        (self.0 & 0xFFFF) as u32
    }
}

/// What [`Redactor::text_spans`] keeps while it reads a text, kept for the next text of the
/// thread: a slot per rule and a bit per keyword, given back with only the few set cleared.
/// Made anew for every text, they were an allocation of a slot for each of several hundred
/// rules, each written, for every string holding a keyword.
#[derive(Default)]
struct Scratch {
    /// Each rule's open run ([`Redactor::text_spans`]).
    open: Vec<Option<(usize, usize)>>,
    /// The rules with a run in `open`.
    opened: Vec<u16>,
    /// The keywords (with whether inside a word) whose rules the current line has had.
    seen_bits: Vec<u64>,
    /// The bits set in `seen_bits`.
    seen_on_line: Vec<u32>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
}

impl Scratch {
    /// The thread's scratch, or a new one where it is in use (a text read inside another).
    fn take() -> Box<Scratch> {
        SCRATCH.with(std::cell::Cell::take).unwrap_or_default()
    }

    /// Back for the next text, cleared by its user: no run open, no bit set.
    fn give_back(scratch: Box<Scratch>) {
        debug_assert!(scratch.opened.is_empty() && scratch.seen_on_line.is_empty());
        SCRATCH.with(|cell| cell.set(Some(scratch)));
    }
}

/// A rule a keyword opens, with what [`Redactor::text_spans`] asks of it at each occurrence.
/// Read for every rule of every keyword occurrence, so what it asks first is one gate of bits
/// ([`rules::gate_open`]).
#[derive(Clone, Copy)]
struct Opens {
    rule: u16,
    multiline: bool,
    reach: usize,
    /// What the occurrence must have for the rule to run: for a rule on the keyword's line
    /// alone, the bytes its check needs on that line ([`rules::Pre`]); for a token rule, no
    /// letter or digit right before the keyword (its match would start there, after a letter
    /// or digit, which [`providers::ProviderRule::find`] rejects).
    gate: (u32, u32),
    site: Option<rules::Site>,
}

impl Opens {
    /// The flags of a gate ([`rules::GATE_FLAGS`]) that hold for an occurrence inside a word
    /// or not.
    fn flags(in_word: bool) -> u32 {
        if in_word {
            rules::GATE_ALWAYS
        } else {
            rules::GATE_ALWAYS | rules::GATE_NOT_IN_WORD
        }
    }

    /// A token rule: skipped for an occurrence inside a word.
    fn token(&self) -> bool {
        self.gate.0 & rules::GATE_NOT_IN_WORD != 0
    }

    /// Whether its gate needs bytes of the keyword's line ([`rules::bytes_held`]), not only
    /// the occurrence's flags.
    fn needs_bytes(&self) -> bool {
        self.gate.0 & !rules::GATE_FLAGS != 0 || self.gate.1 != rules::GATE_ALWAYS
    }
}

/// Compiled redaction rules; build once ([`Redactor::new`] or [`global`]) and share.
pub struct Redactor {
    /// Every keyword of both tables, lowercase, as one DFA stepped ASCII case-insensitively
    /// over the text, copied into a table ([`keywords::Keywords`]).
    keywords: keywords::Keywords,
    /// The keywords, lowercase, in the automaton's order (an occurrence's keyword is an index).
    words: Vec<&'static str>,
    /// For each keyword, the rules (indexes into the combined table) it starts, each with
    /// whether it may be skipped for an occurrence inside a word (a token rule whose match
    /// would start there and so follow a letter or digit, which
    /// [`providers::ProviderRule::find`] rejects).
    keyword_rules: Vec<Vec<Opens>>,
    /// For each keyword, whether one of its rules needs bytes on the keyword's line
    /// ([`Opens::needs_bytes`]).
    keyword_needs: Vec<bool>,
    /// One slot per rule, filled the first time the rule runs.
    compiled: Vec<OnceLock<Regex>>,
    /// The keywords holding a byte JSON escapes (`kind: "secret"`), same ids as `keywords`:
    /// the only ones a decoded string can hold that its raw text does not show
    /// ([`Redactor::decoded_hits`]).
    escaped: Option<(AhoCorasick, Vec<u32>)>,
    /// The first byte that JSON escapes of each of those keywords, flagged by its value: in a
    /// decoded JSON string it occurs only where an escape of it is
    /// ([`decode::Decoded::escapes_to`]). A walk over every escape of a string asks it of each,
    /// where a search of a list cost a fifth of [`Redactor::string_hits`].
    escaped_bytes: [bool; 256],
    /// The escaped keywords (lowercase), their ids, and where in each its first byte that JSON
    /// escapes is, for [`Redactor::string_hits`]. In a checked string every such byte comes
    /// from an escape, so an occurrence always has its first one where an escape is.
    escaped_words: Vec<(Box<[u8]>, u32, usize)>,
    /// What the rules found in the object keys seen last ([`Walk::key_finds`]).
    key_memo: Mutex<KeyMemo>,
}

/// What the rules find in an object key, and whether it names a secret, by the key's raw
/// text: a rollout's keys come again line after line (a token count's `input_tokens`,
/// `cached_input_tokens`, … hold `token`, so each opened the name rules on every line), and
/// what a key holds depends on its text alone. Keys of up to [`KEY_MEMO_KEY_BYTES`] whose ASCII
/// no escape hides; [`KEY_MEMO_KEYS`] of them, forgotten all at once when full, and with the
/// redactor when an idle process lets it go.
#[derive(Default)]
struct KeyMemo {
    found: HashMap<Box<str>, KeyFinds>,
}

/// [`KeyMemo`]'s entry.
#[derive(Clone)]
struct KeyFinds {
    /// The key decoded, when it names a secret.
    secret: Option<Box<str>>,
    /// What the rules found in the key, as ranges of its raw text.
    spans: Vec<Range<usize>>,
}

const KEY_MEMO_KEYS: usize = 512;
const KEY_MEMO_KEY_BYTES: usize = 128;

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    pub fn new() -> Self {
        let mut words: Vec<&'static str> = Vec::new();
        let mut keyword_rules: Vec<Vec<u16>> = Vec::new();
        let mut add = |word: &'static str, rule: Option<u16>| {
            let i = match words.iter().position(|w| *w == word) {
                Some(i) => i,
                None => {
                    words.push(word);
                    keyword_rules.push(Vec::new());
                    words.len() - 1
                }
            };
            if let Some(rule) = rule
                && !keyword_rules[i].contains(&rule)
            {
                keyword_rules[i].push(rule);
            }
        };
        for (i, rule) in all_rules().enumerate() {
            let keywords = match rule {
                RuleRef::Core(r) => r.keywords,
                RuleRef::Provider(p) => p.keywords,
            };
            for k in keywords {
                add(k, Some(i as u16));
            }
        }
        // Words that only the structure needs (a secret-named key, a header name).
        for w in STRUCTURE_KEYWORDS {
            add(w, None);
        }
        // Per keyword, its rules, each with whether it may be skipped for an occurrence inside
        // a word ([`providers::ProviderRule::token_at_keyword`]: its match would start there,
        // after a letter or digit, which [`providers::ProviderRule::find`] rejects).
        let all: Vec<RuleRef<'static>> = all_rules().collect();
        let keyword_rules: Vec<Vec<Opens>> = keyword_rules
            .iter()
            .map(|rules| {
                rules
                    .iter()
                    .map(|&r| match all[r as usize] {
                        RuleRef::Provider(p) => Opens {
                            rule: r,
                            multiline: false,
                            reach: 0,
                            gate: rules::Needs::NONE.gate(if p.token_at_keyword() {
                                rules::GATE_NOT_IN_WORD
                            } else {
                                0
                            }),
                            site: None,
                        },
                        RuleRef::Core(rule) => Opens {
                            rule: r,
                            multiline: rule.multiline,
                            reach: rule.reach,
                            gate: rule
                                .pre
                                .filter(|_| !rule.multiline && rule.reach == 0)
                                .map_or(rules::Needs::NONE, |pre| pre.needs)
                                .gate(0),
                            site: rules::SITES
                                .iter()
                                .find(|(id, _)| *id == rule.id)
                                .map(|&(_, site)| site),
                        },
                    })
                    .collect()
            })
            .collect();
        let keywords = keywords::Keywords::new(&words);
        let compiled = all_rules().map(|_| OnceLock::new()).collect();
        // Each keyword holding a byte JSON escapes, with where its first such byte is.
        let escaped_found: Vec<(&str, u32, usize)> = words
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((*w, i as u32, w.bytes().position(needs_escape)?)))
            .collect();
        let escaped_words: Vec<&str> = escaped_found.iter().map(|e| e.0).collect();
        let escaped_ids: Vec<u32> = escaped_found.iter().map(|e| e.1).collect();
        let escaped_lowercase: Vec<(Box<[u8]>, u32, usize)> = escaped_found
            .iter()
            .map(|&(w, id, anchor)| {
                let lower = w.to_ascii_lowercase().into_bytes().into_boxed_slice();
                (lower, id, anchor)
            })
            .collect();
        let escaped = (!escaped_words.is_empty()).then(|| {
            let ac = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .ascii_case_insensitive(true)
                .build(&escaped_words)
                // A handful of short constant words.
                .expect("escaped keyword automaton builds");
            (ac, escaped_ids)
        });
        let mut escaped_bytes = [false; 256];
        for (word, _, anchor) in &escaped_lowercase {
            escaped_bytes[word[*anchor] as usize] = true;
        }
        let escaped_words = escaped_lowercase;
        let keyword_needs = keyword_rules
            .iter()
            .map(|rules| rules.iter().any(Opens::needs_bytes))
            .collect();
        Redactor {
            keywords,
            words,
            keyword_rules,
            keyword_needs,
            compiled,
            escaped,
            escaped_bytes,
            escaped_words,
            key_memo: Mutex::default(),
        }
    }

    /// The same rules opened by every occurrence of their keywords, whatever surrounds it: what
    /// the sites ([`rules::Site`]) must never change the redaction of.
    #[cfg(test)]
    pub(crate) fn without_sites(mut self) -> Self {
        for opens in self.keyword_rules.iter_mut().flatten() {
            opens.site = None;
        }
        self
    }

    /// One line's bytes (no terminator, no BOM) redacted as text or JSON, whatever its size;
    /// invalid UTF-8 becomes U+FFFD. What a line ships as is [`super::capture::capture`]'s
    /// decision (size limits, malformed lines); this is the redaction it applies.
    /// Borrowed when nothing changed: a copy of every clean line was about 3 % of the cost of
    /// a line of ordinary tool output (the `noisy` benchmark).
    pub fn redact_line<'a>(&self, raw: &'a [u8]) -> Cow<'a, str> {
        // Checking first is much faster than the lossy conversion, and almost always succeeds.
        match std::str::from_utf8(raw) {
            Ok(text) => self.redact_text(text),
            Err(_) => {
                let text = String::from_utf8_lossy(raw).into_owned();
                Cow::Owned(self.redact_text(&text).into_owned())
            }
        }
    }

    /// The same rules for text that is not a raw line, such as the child's decoded last
    /// message. JSON text gets the JSON treatment; anything else the text rules.
    pub fn redact_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redact(text)
    }

    /// The shipping path: `None` when `text` is not one JSON value ([`is_json`]), else its
    /// redaction. The one tokenizing of the line both checks it and is walked: checking first
    /// and redacting after tokenized every line with a secret twice, a twentieth of the
    /// instructions of shipping a generated rollout (docs/performance.md).
    pub fn redact_json<'a>(&self, text: &'a str) -> Option<Cow<'a, str>> {
        let parsed = json::parse_escapes(text)?;
        Some(self.redact_at(text, Some(parsed), 0))
    }

    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redact_at(text, None, 0)
    }

    /// [`Redactor::redact`] of text decoded from an encoded run `encoded` levels deep.
    /// `parsed`: the tokens of `text` and the places of its escapes ([`json::parse_escapes`]),
    /// when the caller has checked it is JSON.
    fn redact_pass<'a>(
        &self,
        text: &'a str,
        parsed: Option<(Vec<Tok>, Option<Vec<u32>>)>,
        encoded: usize,
    ) -> Cow<'a, str> {
        let hits = self.scan(text);
        let hides_ascii = decode::hides_ascii(text.as_bytes());
        let invisible = decode::has_invisible(text);
        let hidden = hides_ascii || invisible;
        let live = hidden || self.any_live(text.as_bytes(), &hits);
        let runs = |known: &[Range<usize>]| {
            if encoded < ENCODED_DEPTH {
                self.run_spans(text, encoded, known)
            } else {
                Vec::new()
            }
        };
        let mut spans = if live {
            // The rules' spans first: a run they found already (`ghp_…` after
            // `GITHUB_TOKEN=`) is not read again as a run ([`Redactor::run_spans`]).
            let mut found = Vec::new();
            self.rule_spans(text, parsed, &hits, hidden, invisible, &mut found);
            let mut spans = runs(&found);
            spans.append(&mut found);
            spans
        } else {
            let mut spans = runs(&[]);
            if spans.is_empty() {
                return Cow::Borrowed(text);
            }
            // A text holding a secret as a run gets the rules' views too (joined literals).
            self.rule_spans(text, parsed, &hits, hidden, invisible, &mut spans);
            spans
        };
        // A decoded run's redaction (`encoded` > 0) only says whether it held a secret, which
        // copies cannot change: they are looked for in the shipped text alone.
        if encoded == 0 {
            every_copy(text, &mut spans, hides_ascii);
        }
        apply(text, spans)
    }

    /// [`Redactor::redact_pass`], then again while a marker it placed may let a label's
    /// phrase reach further.
    fn redact_at<'a>(
        &self,
        text: &'a str,
        parsed: Option<(Vec<Tok>, Option<Vec<u32>>)>,
        encoded: usize,
    ) -> Cow<'a, str> {
        let out = self.redact_pass(text, parsed, encoded);
        // A label's phrase is read up to a byte count (`token "…": <value>`), and a value
        // redacted inside it is shorter as the marker: what the phrase could not reach on
        // this pass it may reach on the next. That text is redacted again, until it settles,
        // so redacting twice is redacting once (docs/redaction.md, "Redacting twice").
        if encoded == 0
            && let Cow::Owned(once) = &out
            && marker_in_a_labels_phrase(once.as_bytes())
        {
            return Cow::Owned(self.settle(once));
        }
        out
    }

    /// `text` (already redacted once) redacted again until nothing changes, at most a few
    /// times: each pass only adds markers, so this ends; the bound keeps a line's time linear.
    fn settle(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for _ in 0..SETTLE_PASSES {
            match self.redact_pass(&text, None, 0) {
                Cow::Owned(again) => text = again,
                Cow::Borrowed(_) => break,
            }
        }
        text
    }

    /// The rules' spans of `text` ([`Redactor::redact_at`]'s arguments): through its JSON
    /// structure when it is JSON, else as text.
    fn rule_spans(
        &self,
        text: &str,
        parsed: Option<(Vec<Tok>, Option<Vec<u32>>)>,
        hits: &[Hit],
        hidden: bool,
        invisible: bool,
        out: &mut Vec<Range<usize>>,
    ) {
        // A line that is one JSON string is JSON too: its quotes must survive.
        let maybe_json = json::looks_like_container(text) || text.trim_ascii().starts_with('"');
        // Tokenizing checks the text too: a text not known to be JSON is tokenized once.
        let parsed = match parsed {
            _ if !maybe_json => None,
            Some(parsed) => Some(parsed),
            None => json::parse_escapes(text),
        };
        if let Some((toks, escapes)) = parsed {
            let walk = Walk {
                redactor: self,
                text,
                toks: &toks,
                hits,
                hidden,
                depth: 0,
                specials: escapes.as_deref(),
            };
            self.json_spans(walk, out);
        } else {
            self.text_spans(text, hits, out, 0, Some(invisible));
        }
    }

    /// The runs of `text` that are secrets as runs: every encoded run (base64, hex, `\x`
    /// escapes) that decodes to text holding a secret, whole ([`encoded`], docs/behaviour.md
    /// T2.2), and every random run a vendor's name marks ([`vendors`], T2.6).
    ///
    /// `known`: spans the rules found in `text`. A run one of them is exactly (a provider's
    /// token after its variable's name) is not read again: its span would add nothing, to the
    /// redaction or to the copies looked for ([`every_copy`]). One strictly inside a known
    /// span still is: as a secret of its own its copies elsewhere go too.
    fn run_spans(&self, text: &str, depth: usize, known: &[Range<usize>]) -> Vec<Range<usize>> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let secret =
            |decoded: &str| matches!(self.redact_at(decoded, None, depth + 1), Cow::Owned(_));
        let mut known: Vec<(usize, usize)> = known.iter().map(|r| (r.start, r.end)).collect();
        known.sort_unstable();
        let is_known = |r: &Range<usize>| known.binary_search(&(r.start, r.end)).is_ok();
        // One search for the long runs of token characters both kinds are made of.
        let found = runs::long_runs(bytes, encoded::MIN_RUN);
        for run in encoded::runs(bytes, &found) {
            // A run of one segment pushes its whole span or nothing.
            if run.segments().len() == 1 && is_known(&run.span) {
                continue;
            }
            if let Some((span, decoded)) = encoded::decoded_text(bytes, &run)
                && secret(&decoded)
            {
                out.push(span);
            }
        }
        for (span, decoded) in encoded::escape_runs(bytes) {
            if secret(&decoded) {
                out.push(span);
            }
        }
        // A long random run with a vendor's name shortly before it (T2.6).
        vendors::spans(text, &found, &is_known, &mut out);
        vendors::discord_spans(text, &found, &mut out);
        out
    }

    /// Every occurrence of every keyword, overlapping ones included (`passw` and `pass` where
    /// `password` starts), in order of their starts.
    fn scan(&self, text: &str) -> Vec<Hit> {
        let mut hits = Vec::new();
        self.keywords.each_occurrence(text.as_bytes(), &mut hits);
        hits
    }

    /// Whether any keyword occurrence may start something: not one inside a plain word
    /// (`Author`), nor one inside a word whose rules all match tokens starting at the keyword
    /// (`sk` in `TaskStarted`), which [`Redactor::text_spans`] would skip. A line with none is
    /// returned as it is, without walking its JSON.
    fn any_live(&self, bytes: &[u8], hits: &[Hit]) -> bool {
        if hits.is_empty() {
            return false;
        }
        hits.iter().any(|&h| {
            let (at, keyword) = (h.at(), h.keyword());
            if is_plain_word(bytes, at) {
                return false;
            }
            let rules = &self.keyword_rules[keyword as usize];
            let in_word = at > 0 && bytes[at - 1].is_ascii_alphanumeric();
            !(in_word && !rules.is_empty() && rules.iter().all(|opens| opens.token()))
        })
    }

    /// The keyword hits of `decoded`, the decoding of `text[content]`, from `hits`, those of
    /// `text`, where `text` hides no ASCII behind an escape ([`decode::hides_ascii`]): a
    /// keyword then occurs in the decoded text exactly where it occurs in the raw text's
    /// literal bytes, except the few holding a byte JSON escapes, searched for apart. Saves
    /// scanning every level of JSON inside JSON again.
    fn decoded_hits(
        &self,
        hits: &[Hit],
        content: Range<usize>,
        decoded: &decode::Decoded<'_>,
    ) -> Vec<Hit> {
        let first = hits.partition_point(|h| h.at() < content.start);
        let mut out: Vec<Hit> = hits[first..]
            .iter()
            .take_while(|h| h.at() < content.end)
            .filter_map(|h| {
                let at = decoded.decoded_at(h.at() - content.start)?;
                let escaped = self
                    .escaped
                    .as_ref()
                    .is_some_and(|(_, ids)| ids.contains(&h.keyword()));
                (!escaped).then_some(Hit::new(at, h.keyword()))
            })
            .collect();
        if let Some((ac, ids)) = &self.escaped
            && !decoded.is_identity()
        {
            // A prefilter search (the words hold a quote, a backslash or a control character,
            // rare in text) rather than a step of the DFA at every byte of every string.
            let before = out.len();
            out.extend(
                ac.find_overlapping_iter(decoded.text.as_bytes())
                    .map(|m| Hit::new(m.start(), ids[m.pattern().as_usize()])),
            );
            if out.len() > before {
                out.sort_by_key(|h| h.at());
            }
        }
        out
    }

    /// [`Redactor::decoded_hits`] for `decoded`, the decoding of the content of a JSON string
    /// the walk's tokenizer checked, `text[content]`, and `hits` those of `text`: the same
    /// hits, found walking the string's units once, and the keywords holding a byte JSON
    /// escapes looked for only around the escapes of such bytes (the content holds none of
    /// them as itself).
    fn string_hits(
        &self,
        hits: &[Hit],
        content: Range<usize>,
        decoded: &decode::Decoded<'_>,
    ) -> Vec<Hit> {
        let first = hits.partition_point(|h| h.at() < content.start);
        let end = hits.partition_point(|h| h.at() < content.end).max(first);
        let mut cursor = 0;
        let mut out: Vec<Hit> = Vec::with_capacity(end - first);
        let escaped_ids = self.escaped.as_ref().map_or(&[][..], |(_, ids)| &ids[..]);
        // A plain loop: as an iterator's closure it was a call for each hit, and a tenth of
        // the instructions of a string of tool output inside JSON inside JSON.
        for h in &hits[first..end] {
            if let Some(at) = decoded.decoded_at_in_order(h.at() - content.start, &mut cursor)
                && !escaped_ids.contains(&h.keyword())
            {
                out.push(Hit::new(at, h.keyword()));
            }
        }
        if self.escaped.is_some() && !decoded.is_identity() {
            // Every such keyword found in the decoded content holds a byte that only an escape
            // can give a checked JSON string (a quote, a backslash, a control character): it
            // starts where one of its own such bytes lines up with an escape's. A search of
            // the text around every escaped quote cost a fifth of shipping a generated rollout,
            // whose tool output is JSON inside JSON.
            let text = decoded.text.as_bytes();
            let mut found: Vec<Hit> = Vec::new();
            // Each escape of such a byte against the words whose first such byte it is (a
            // handful), not against every byte of every word: JSON inside JSON escapes a quote
            // every few bytes, and this loop was a tenth of shipping a generated rollout.
            for at in decoded.escapes_to(|b| self.escaped_bytes[b as usize]) {
                let at_anchor = |(word, _, j): &&(Box<[u8]>, u32, usize)| word[*j] == text[at];
                for (word, id, j) in self.escaped_words.iter().filter(at_anchor) {
                    let Some(start) = at.checked_sub(*j) else {
                        continue;
                    };
                    if text
                        .get(start..start + word.len())
                        .is_some_and(|t| t.eq_ignore_ascii_case(word))
                    {
                        found.push(Hit::new(start, *id));
                    }
                }
            }
            if !found.is_empty() {
                // One anchor per word: each occurrence is found once, but not in order.
                found.sort_by_key(|h| (h.at(), h.keyword()));
                out.extend(found);
                out.sort_by_key(|h| h.at());
            }
        }
        out
    }

    fn rule(&self, i: u16) -> RuleRef<'static> {
        let i = i as usize;
        match rules::RULES.get(i) {
            Some(r) => RuleRef::Core(r),
            None => RuleRef::Provider(&providers::RULES[i - rules::RULES.len()]),
        }
    }

    fn regex(&self, i: u16) -> &Regex {
        self.compiled[i as usize].get_or_init(|| match self.rule(i) {
            // The table's patterns are constants, each compiled so by the unit test
            // `every_rule_compiles_within_the_size_limit`.
            RuleRef::Core(r) => {
                rules::compile(r.pattern).expect("core rule pattern is a valid regex")
            }
            RuleRef::Provider(p) => p.compile(),
        })
    }

    /// The text rules whose keywords are in `hits`, each on the lines around its keywords (or
    /// the whole text). Spans are in `text`. Also through a view of `text` with its
    /// escapes resolved, when it has any. `invisible`: whether `text` holds characters that
    /// hide a name or a value ([`decode::has_invisible`]), when the caller knows.
    fn text_spans(
        &self,
        text: &str,
        hits: &[Hit],
        out: &mut Vec<Range<usize>>,
        depth: usize,
        invisible: Option<bool>,
    ) {
        let first = out.len();
        // Each rule's open run: the next occurrence on the same line (or any, for a rule on the
        // whole text) widens it; one elsewhere runs it and opens the next. Runs are never all
        // held: a 4 MiB text of code holds a keyword every few bytes, and a run for each, kept
        // until the end, was many times the text's size.
        let mut scratch = Scratch::take();
        let Scratch {
            open,
            opened,
            seen_bits,
            seen_on_line,
        } = &mut *scratch;
        // The line around the latest occurrence: occurrences come in order, so each line is
        // found once (finding it again for each occurrence was quadratic on a long line).
        let mut line = 0..0;
        // The bytes the line holds that rules' checks need ([`rules::Pre`]), read once a line.
        let mut held: Option<u32> = None;
        // The last name read around an occurrence ([`rules::Around::within`]).
        let mut name_run = 0..0;
        // The keywords whose rules this line has had, each with whether it was inside a word:
        // another occurrence on the line opens the same windows (`input_tokens +
        // output_tokens`), so its rules are not gone through again. A bit each (a list
        // searched at every occurrence cost a 4 MiB line of hundreds of distinct keywords
        // hundreds of compares an occurrence), and the bits set, to clear them at the next line.
        let bytes = text.as_bytes();
        for &h in hits {
            let (at, keyword) = (h.at(), h.keyword());
            // A token never continues a word (`TaskStarted` holds `sk`, a Twilio key's prefix),
            // and a token rule's match starts at its keyword: its rules need not run for an
            // occurrence inside a word. Other rules still do.
            let in_word = at > 0 && bytes[at - 1].is_ascii_alphanumeric();
            if !(line.start <= at && at < line.end) {
                let start = memrchr(b'\n', &bytes[..at]).map_or(0, |o| o + 1);
                let end = memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |o| at + o);
                line = start..end;
                held = None;
                for seen in seen_on_line.drain(..) {
                    seen_bits[seen as usize / 64] = 0;
                }
            }
            if is_plain_word(bytes, at) {
                continue;
            }
            let seen = keyword << 1 | u32::from(in_word);
            let words = (2 * self.words.len()).div_ceil(64);
            if seen_bits.len() < words {
                seen_bits.resize(words, 0);
            }
            let (word, bit) = (seen as usize / 64, 1u64 << (seen % 64));
            if seen_bits[word] & bit != 0 {
                continue;
            }
            // An occurrence a rule's site turned away leaves the keyword unseen: another on
            // the line may be at that rule's site.
            let mut turned_away = false;
            let mut around = None;
            let flags = Opens::flags(in_word);
            // The line's bytes are read only for a keyword one of whose rules needs them (a
            // long line of JSON is one line).
            let held = if self.keyword_needs[keyword as usize] {
                *held.get_or_insert_with(|| rules::bytes_held(&bytes[line.clone()])) | flags
            } else {
                flags
            };
            for opens in &self.keyword_rules[keyword as usize] {
                // A rule skipped here, or one on the line alone whose check needs bytes the
                // line does not hold.
                if !rules::gate_open(opens.gate, held) {
                    continue;
                }
                if let Some(site) = opens.site
                    && !site(around.get_or_insert_with(|| {
                        let end = at + self.words[keyword as usize].len();
                        rules::Around::within(bytes, at, end, &mut name_run)
                    }))
                {
                    turned_away = true;
                    continue;
                }
                let r = opens.rule;
                let (start, end) = if opens.multiline {
                    (0, text.len())
                } else if opens.reach > 0 {
                    // Past the line, back to a character's first byte.
                    let mut end = (line.end + opens.reach).min(text.len());
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    (line.start, end)
                } else {
                    (line.start, line.end)
                };
                if open.len() < self.compiled.len() {
                    open.resize(self.compiled.len(), None);
                }
                match &mut open[r as usize] {
                    Some(run) if start <= run.1 => run.1 = run.1.max(end),
                    slot => {
                        if let Some((s, e)) = slot.replace((start, end)) {
                            self.run_rule(r, text, s..e, out);
                        } else {
                            opened.push(r);
                        }
                    }
                }
            }
            if !turned_away {
                seen_bits[word] |= bit;
                seen_on_line.push(seen);
            }
        }
        for r in opened.drain(..) {
            if let Some((s, e)) = open[r as usize].take() {
                self.run_rule(r, text, s..e, out);
            }
        }
        for seen in seen_on_line.drain(..) {
            seen_bits[seen as usize / 64] = 0;
        }
        Scratch::give_back(scratch);
        fix_markers(text, out, first);
        // Colour codes, zero-width and full-width characters between or inside a name and its
        // value: the rules see the text without them (spans map back over them).
        if depth < MAX_DEPTH && invisible.unwrap_or_else(|| decode::has_invisible(text)) {
            let view = decode::visible(text);
            let view_hits = self.scan(&view.text);
            if !view_hits.is_empty() {
                let mut inner = Vec::new();
                self.text_spans(&view.text, &view_hits, &mut inner, depth + 1, None);
                view.to_raw_all(&mut inner);
                out.extend(inner);
            }
        }
        // String literals joined in code: `'sk_live_' + 'Xk9…'`.
        if depth < MAX_DEPTH
            && let Some(view) = decode::joined(text)
        {
            let view_hits = self.scan(&view.text);
            if !view_hits.is_empty() {
                let mut inner = Vec::new();
                self.text_spans(&view.text, &view_hits, &mut inner, depth + 1, None);
                view.to_raw_all(&mut inner);
                out.extend(inner);
            }
        }
        if depth < MAX_DEPTH && memchr(b'\\', text.as_bytes()).is_some() {
            let view = decode::decode(text);
            if !view.is_identity() {
                let view_hits = if decode::hides_ascii(text.as_bytes()) {
                    self.scan(&view.text)
                } else {
                    self.decoded_hits(hits, 0..text.len(), &view)
                };
                if !view_hits.is_empty() || decode::hides_ascii(view.text.as_bytes()) {
                    let mut inner = Vec::new();
                    self.text_spans(&view.text, &view_hits, &mut inner, depth + 1, None);
                    view.to_raw_all(&mut inner);
                    out.extend(inner);
                }
            }
        }
    }

    fn run_rule(&self, r: u16, text: &str, window: Range<usize>, out: &mut Vec<Range<usize>>) {
        let slice = &text[window.clone()];
        // The window of a rule on its keyword's line alone is that line, whose bytes
        // [`Redactor::text_spans`] found to meet the check's needs: a check that is those
        // needs alone need not look again ([`rules::Pre`]).
        if let RuleRef::Core(rule) = self.rule(r)
            && let Some(pre) = rule.pre
            && !(pre.exact && rule.reach == 0 && !rule.multiline)
            && !(pre.check)(slice)
        {
            return;
        }
        let re = self.regex(r);
        let mut found = Vec::new();
        match self.rule(r) {
            // A rule read from its matches searches once: the first match is the first it
            // reads.
            RuleRef::Core(rule) if rules::reads_matches(rule, re) => {
                let Some(first) = rules::next_match(rule, re, slice, 0) else {
                    return;
                };
                rules::find_from(rule, re, slice, first, &mut found);
                if rule.multiline {
                    split_at_markers(slice, &mut found);
                }
            }
            // Tried line by line, never on the whole window at once.
            RuleRef::Core(rule) if rules::by_lines(rule) => {
                rules::find(rule, re, slice, &mut found);
                if rule.multiline {
                    split_at_markers(slice, &mut found);
                }
            }
            // Most keyword hits start nothing (`tokens`, `Author`): the lazy DFA says so
            // without the capture machinery, which allocates its slots on every call.
            _ if !re.is_match(slice) => return,
            RuleRef::Core(rule) => {
                rules::find(rule, re, slice, &mut found);
                if rule.multiline {
                    split_at_markers(slice, &mut found);
                }
            }
            RuleRef::Provider(p) => p.find(re, slice, &mut found),
        }
        // A value the window cut (a rule reading past its keyword's line stops at a byte
        // count) goes on to its end in the text: never redacted in part, its rest shipped.
        let rest = &text[window.start..];
        rules::widen_cut(rest, slice.len(), &mut found);
        out.extend(
            found
                .into_iter()
                .filter(|s| !s.is_empty() && s.end <= rest.len())
                .map(|s| window.start + s.start..window.start + s.end),
        );
    }

    /// A string's raw content at `content` in `text`: decoded, walked again if it is JSON,
    /// else given the text rules. Spans are in `text`.
    /// `known`: the hits of `text` when `text` hides no ASCII behind an escape. The content
    /// is a string the walk's tokenizer checked ([`json::parse`]). `specials`: the place of
    /// every byte of `text` that JSON escapes, when `text` was decoded from a string
    /// ([`decode::Decoded::specials`]).
    #[allow(clippy::too_many_arguments)]
    fn string_spans(
        &self,
        text: &str,
        content: Range<usize>,
        out: &mut Vec<Range<usize>>,
        depth: usize,
        known: Option<&[Hit]>,
        specials: Option<&[u32]>,
    ) {
        let raw = &text[content.clone()];
        let decoded = match specials {
            Some(specials) => decode::decode_checked_known(raw, specials, content.start),
            None => decode::decode_checked(raw),
        };
        let hits = match known {
            Some(hits) => self.string_hits(hits, content.clone(), &decoded),
            None => self.scan(&decoded.text),
        };
        // With `known`, the content (part of a text that hides nothing) holds neither as its
        // literal bytes, so only what decoding made can ([`decode::Decoded::may_hide`]).
        let look = known.is_none() || decoded.may_hide();
        let invisible = look && decode::has_invisible(&decoded.text);
        let hidden = invisible || (look && decode::hides_ascii(decoded.text.as_bytes()));
        // A run the raw text hides behind escapes of ASCII (`\u0051UJD…`); one written plain
        // (line breaks escaped or not) was found in the whole line already. With `known`,
        // `text` hides none, so neither does the content.
        let mut inner = if known.is_some()
            || decoded.is_identity()
            || !decode::hides_ascii(&text.as_bytes()[content.clone()])
        {
            Vec::new()
        } else {
            self.run_spans(&decoded.text, 0, &[])
        };
        if hits.is_empty() && !hidden && inner.is_empty() {
            return;
        }
        // JSON inside the string: its special bytes are the ones escapes gave.
        let parsed = (depth < MAX_DEPTH && json::looks_like_container(&decoded.text))
            .then(|| {
                let specials = decoded.specials();
                json::parse_known(&decoded.text, &specials).map(|toks| (toks, specials))
            })
            .flatten();
        if let Some((toks, specials)) = parsed {
            let walk = Walk {
                redactor: self,
                text: &decoded.text,
                toks: &toks,
                hits: &hits,
                hidden,
                depth: depth + 1,
                specials: Some(&specials),
            };
            self.json_spans(walk, &mut inner);
        } else {
            self.text_spans(&decoded.text, &hits, &mut inner, depth, Some(invisible));
        }
        decoded.to_raw_all(&mut inner);
        out.extend(
            inner
                .into_iter()
                .map(|r| content.start + r.start..content.start + r.end),
        );
    }

    /// Valid JSON `walk.text`, whose tokens are `walk.toks` (from [`json::parse`]): the
    /// structure and every string that may hold a secret.
    fn json_spans(&self, walk: Walk<'_>, out: &mut Vec<Range<usize>>) {
        let Walk {
            text,
            toks,
            hits,
            hidden,
            depth,
            specials,
            ..
        } = walk;
        match toks.first() {
            Some(Tok::Open { .. }) => walk.container(0, None, out),
            Some(Tok::Str(r)) if walk.may_hold(r) => {
                let known = (!hidden).then_some(hits);
                self.string_spans(text, r.clone(), out, depth, known, specials);
            }
            _ => {}
        }
    }
}

/// One rule's id, family, keywords and examples, for the tests that check every rule in every
/// placement a rollout has. Not part of the watcher's interface.
#[doc(hidden)]
pub struct RuleExamples {
    pub id: &'static str,
    pub family: &'static str,
    pub keywords: &'static [&'static str],
    pub positive: &'static [&'static str],
    pub negative: &'static [&'static str],
}

/// The ids of the core table's rules (the provider table's are the rest).
#[doc(hidden)]
pub fn core_rule_ids() -> Vec<&'static str> {
    rules::RULES.iter().map(|r| r.id).collect()
}

/// Every rule of both tables with its examples.
#[doc(hidden)]
pub fn rule_examples() -> Vec<RuleExamples> {
    all_rules()
        .map(|r| match r {
            RuleRef::Core(r) => RuleExamples {
                id: r.id,
                family: r.family,
                keywords: r.keywords,
                positive: r.positive,
                negative: r.negative,
            },
            RuleRef::Provider(p) => RuleExamples {
                id: p.id,
                family: p.family,
                keywords: p.keywords,
                positive: p.positive,
                negative: p.negative,
            },
        })
        .collect()
}

/// Words only the structural rules need: header and key names not already rule keywords.
const STRUCTURE_KEYWORDS: &[&str] = &["cookie", "authorization", "private key", "-----end"];

fn all_rules() -> impl Iterator<Item = RuleRef<'static>> {
    rules::RULES
        .iter()
        .map(RuleRef::Core)
        .chain(providers::RULES.iter().map(RuleRef::Provider))
}

/// One JSON text being walked.
struct Walk<'a> {
    redactor: &'a Redactor,
    text: &'a str,
    toks: &'a [Tok],
    hits: &'a [Hit],
    /// Decoding may reveal keywords the raw text hides: look at every escaped string.
    hidden: bool,
    depth: usize,
    /// The place of every byte of `text` that JSON escapes, when `text` was decoded from a
    /// string, or of every escape's backslash in its strings, when the tokenizer listed them
    /// ([`json::parse_escapes`]): its strings are decoded without searching them
    /// ([`decode::decode_checked_known`]).
    specials: Option<&'a [u32]>,
}

impl Walk<'_> {
    /// Whether a raw string may hold a keyword.
    fn may_hold(&self, r: &Range<usize>) -> bool {
        let i = self.hits.partition_point(|h| h.at() < r.start);
        self.hits.get(i).is_some_and(|h| h.at() < r.end)
            || (self.hidden
                && (memchr(b'\\', &self.text.as_bytes()[r.clone()]).is_some()
                    || decode::has_invisible(&self.text[r.clone()])))
    }

    fn decoded(&self, r: &Range<usize>) -> Cow<'_, str> {
        decode::decode(&self.text[r.clone()]).text
    }

    fn whole(&self, r: &Range<usize>, out: &mut Vec<Range<usize>>) {
        let raw = &self.text[r.clone()];
        if !raw.is_empty() && raw != REDACTED {
            out.push(r.clone());
        }
    }

    /// Whether the object at `open` is a JSON schema (S1.5): a `type` naming a schema type,
    /// beside `properties`, `items`, `enum` or `description` (or alone).
    fn is_schema(&self, open: usize) -> bool {
        let Tok::Open { obj: true, .. } = self.toks[open] else {
            return false;
        };
        let kids = json::children(self.toks, open);
        let key = |k: Option<usize>| match k.map(|k| &self.toks[k]) {
            Some(Tok::Key(r)) => &self.text[r.clone()],
            _ => "",
        };
        let typed = kids.iter().any(|&(k, v)| {
            key(k) == "type"
                && matches!(&self.toks[v], Tok::Str(r) if matches!(
                    &self.text[r.clone()],
                    "string" | "number" | "integer" | "boolean" | "object" | "array" | "null"
                ))
        });
        typed
            && (kids.len() == 1
                || kids.iter().any(|&(k, _)| {
                    matches!(key(k), "properties" | "items" | "enum" | "description")
                }))
    }

    /// The container at `open`, under a secret-named key (`secret`: its name) or not.
    fn container(&self, open: usize, secret: Option<&str>, out: &mut Vec<Range<usize>>) {
        let Tok::Open { obj, .. } = self.toks[open] else {
            return;
        };
        let kids = json::children(self.toks, open);
        let mut forced = vec![false; kids.len()];
        let str_at = |v: usize| match &self.toks[v] {
            Tok::Str(r) => Some(r.clone()),
            _ => None,
        };
        // The member whose secret's name is a sibling's value (`{"name": "DB_PASSWORD",
        // "value": "..."}`), with that name.
        let mut paired: Option<(usize, Cow<'_, str>)> = None;
        // An argument list's flag naming a secret, its value the next string (an MCP server's
        // `"args": ["--api-key", "…"]`): that flag's name is the value's.
        let mut flagged: Vec<(usize, String)> = Vec::new();
        if obj {
            self.header_pair(&kids, &mut forced);
            self.kubernetes_secret(&kids, &mut forced);
            paired = self.name_value_pair(&kids);
        } else {
            // Node's rawHeaders and `[N, V]` pairs: a credential header's next string.
            for i in 0..kids.len().saturating_sub(1) {
                if let Some(r) = str_at(kids[i].1)
                    && r.len() <= 64
                    && self.may_hold(&r)
                    && names::is_header(&self.decoded(&r))
                    && str_at(kids[i + 1].1).is_some()
                {
                    forced[i + 1] = true;
                }
            }
            // A secret's name and its value as a pair of two strings (`["password", "…"]`,
            // a request's parameters as a list of pairs): the value, if it does not read as
            // a name itself (`["password", "username"]`, a schema's `required`).
            if let [(_, first), (_, second)] = kids[..]
                && let (Some(n), Some(v)) = (str_at(first), str_at(second))
                && n.len() <= 64
                && self.may_hold(&n)
                && rules::pair_value_is_secret(&self.decoded(&n), &self.decoded(&v))
            {
                forced[1] = true;
            }
            self.argv(&kids, out);
            flagged = self.secret_flag_values(&kids);
        }
        self.pem_split(&kids, &mut forced);

        let mut next_flag = 0;
        for (i, &(key, value)) in kids.iter().enumerate() {
            let mut name: Option<Cow<'_, str>> = secret.map(Cow::Borrowed);
            if let Some((at, pair_name)) = &paired
                && *at == i
                && name.is_none()
            {
                name = Some(Cow::Borrowed(pair_name.as_ref()));
            }
            // In order of their elements: each found by the one cursor.
            while flagged.get(next_flag).is_some_and(|(at, _)| *at < i) {
                next_flag += 1;
            }
            if let Some((at, flag)) = flagged.get(next_flag)
                && *at == i
                && name.is_none()
            {
                name = Some(Cow::Borrowed(flag.as_str()));
            }
            if let Some(k) = key
                && let Tok::Key(kr) = &self.toks[k]
                && self.may_hold(kr)
            {
                let finds = self.key_finds(kr);
                if name.is_none()
                    && let Some(secret) = finds.secret
                {
                    name = Some(Cow::Owned(secret.into()));
                }
                out.extend(
                    finds
                        .spans
                        .iter()
                        .map(|r| kr.start + r.start..kr.start + r.end),
                );
            }
            match &self.toks[value] {
                Tok::Str(r) => {
                    let whole = forced[i]
                        || name.as_ref().is_some_and(|n| {
                            let v = self.decoded(r);
                            !rules::value_exempt_in(n, &v, &v, false)
                        });
                    if whole {
                        self.whole(r, out);
                        continue;
                    }
                    // Any string's text, and one kept as code under a secret's name (S1.2:
                    // `alpha::alpha`) too: a token of a provider's shape in it
                    // (`alpha::alpha ghp_…`) goes, where the exemption used to keep it.
                    if self.may_hold(r) {
                        self.redactor.string_spans(
                            self.text,
                            r.clone(),
                            out,
                            self.depth,
                            (!self.hidden).then_some(self.hits),
                            self.specials,
                        );
                    }
                    if name.is_none()
                        && let Some(k) = key
                        && let Tok::Key(kr) = &self.toks[k]
                        && self.may_hold(kr)
                    {
                        self.member_spans(kr, r, out);
                    }
                }
                Tok::Open { .. } => {
                    let inherited = if forced[i] {
                        Some(Cow::Borrowed("value"))
                    } else {
                        name
                    };
                    match inherited {
                        Some(n) if !self.is_schema(value) => self.container(value, Some(&n), out),
                        _ => self.container(value, None, out),
                    }
                }
                _ => {}
            }
        }
    }

    /// A member whose key names a vendor but not a secret word (`"adafruit_key": "..."`,
    /// `"plaid_client_id": "..."`): the vendor-near-value rules need the name and the value
    /// together, which a scan of each string alone never sees. The member is scanned as
    /// `"key": "value"` (decoded), and only spans inside the value are kept.
    fn member_spans(&self, kr: &Range<usize>, vr: &Range<usize>, out: &mut Vec<Range<usize>>) {
        if kr.len() > 128 || vr.len() > 4096 {
            return;
        }
        let key = self.decoded(kr);
        let value = decode::decode(&self.text[vr.clone()]);
        let joined = format!("\"{key}\": \"{}\"", value.text);
        let start = key.len() + 5;
        let end = start + value.text.len();
        let hits = self.redactor.scan(&joined);
        if hits.is_empty() {
            return;
        }
        let mut spans = Vec::new();
        self.redactor
            .text_spans(&joined, &hits, &mut spans, MAX_DEPTH, None);
        for span in spans {
            let (a, b) = (span.start.max(start), span.end.min(end));
            if a < b && joined.is_char_boundary(a) && joined.is_char_boundary(b) {
                let raw = value.to_raw(a - start..b - start);
                out.push(vr.start + raw.start..vr.start + raw.end);
            }
        }
    }

    /// Whether the key at `kr` names a secret, and what the rules find in its text (a
    /// credential, `{"ghp_...": true}`, or a pair, `{"DB_PASSWORD=…": 1}`: a tool's JSON keyed
    /// by command lines, as the kcap CLI's line rules read it), remembered by its raw text
    /// ([`KeyMemo`]). Kept out of the walk's loop, which most keys pass without it.
    #[inline(never)]
    fn key_finds(&self, kr: &Range<usize>) -> KeyFinds {
        let raw = &self.text[kr.clone()];
        let memo = !self.hidden && raw.len() <= KEY_MEMO_KEY_BYTES;
        let lock = || {
            self.redactor
                .key_memo
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if memo && let Some(found) = lock().found.get(raw) {
            return found.clone();
        }
        let decoded = self.decoded(kr);
        let secret = names::name_is_secret(&decoded).then(|| Box::from(decoded.as_ref()));
        let found = KeyFinds {
            secret,
            spans: self.key_spans(kr.clone()),
        };
        if memo {
            let mut memo = lock();
            if memo.found.len() >= KEY_MEMO_KEYS {
                memo.found.clear();
            }
            memo.found.insert(raw.into(), found.clone());
        }
        found
    }

    /// What the rules find in the key at `kr`, as ranges of its raw text.
    fn key_spans(&self, kr: Range<usize>) -> Vec<Range<usize>> {
        let decoded = decode::decode(&self.text[kr.clone()]);
        let hits = if self.hidden {
            self.redactor.scan(&decoded.text)
        } else {
            self.redactor.string_hits(self.hits, kr, &decoded)
        };
        let mut inner = Vec::new();
        self.redactor
            .text_spans(&decoded.text, &hits, &mut inner, MAX_DEPTH, None);
        decoded.to_raw_all(&mut inner);
        inner
    }

    /// `{"name": "Authorization", "value": "..."}` (HAR, fetch logs): the value goes.
    fn header_pair(&self, kids: &[(Option<usize>, usize)], forced: &mut [bool]) {
        // Raw key text, compared without case (no allocation: this runs for every object).
        let key_is = |k: Option<usize>, names: &[&str]| match k.map(|k| &self.toks[k]) {
            Some(Tok::Key(r)) => {
                let key = &self.text[r.clone()];
                names.iter().any(|n| key.eq_ignore_ascii_case(n))
            }
            _ => false,
        };
        let named = kids.iter().any(|&(k, v)| {
            key_is(k, &["name", "key", "header", "field"])
                && matches!(&self.toks[v], Tok::Str(r) if r.len() <= 64 && names::is_header(&self.decoded(r)))
        });
        if named {
            for (i, &(k, _)) in kids.iter().enumerate() {
                if key_is(k, &["value", "values"]) {
                    forced[i] = true;
                }
            }
        }
    }

    /// `{"name": "DB_PASSWORD", "value": "..."}` (a container's `env` list, an ECS task
    /// definition, a CloudFormation parameter, a form field in a HAR): the member holding the
    /// value and the secret's name its sibling gives, read as if the name were its key
    /// (docs/redaction.md, "Names beside their values").
    fn name_value_pair(&self, kids: &[(Option<usize>, usize)]) -> Option<(usize, Cow<'_, str>)> {
        let key = |k: Option<usize>| match k.map(|k| &self.toks[k]) {
            Some(Tok::Key(r)) if r.len() <= 16 => Some(&self.text[r.clone()]),
            _ => None,
        };
        let is = |k: Option<usize>, names: &[&str]| {
            key(k).is_some_and(|key| names.iter().any(|n| key.eq_ignore_ascii_case(n)))
        };
        let value = kids
            .iter()
            .position(|&(k, _)| is(k, &["value", "parametervalue", "secretvalue"]))?;
        kids.iter().find_map(|&(k, v)| {
            // `az storage account keys list` and its kin: `{"keyName": "key1", "permissions":
            // "FULL", "value": "…"}`. The name is of a key whatever it says.
            if is(k, &["keyname"]) && matches!(self.toks[v], Tok::Str(_)) {
                return Some((value, Cow::Borrowed("access_key")));
            }
            if !is(
                k,
                &["name", "key", "parameterkey", "parametername", "optionname"],
            ) {
                return None;
            }
            let Tok::Str(r) = &self.toks[v] else {
                return None;
            };
            if r.len() > 128 || !self.may_hold(r) {
                return None;
            }
            let name = self.decoded(r);
            names::name_is_secret(&name).then_some((value, name))
        })
    }

    /// A Kubernetes `Secret` object (`"kind": "Secret"`): everything under its `data` and
    /// `stringData` is a secret, whatever the names (docs/behaviour.md T2.2).
    fn kubernetes_secret(&self, kids: &[(Option<usize>, usize)], forced: &mut [bool]) {
        let key = |k: Option<usize>| match k.map(|k| &self.toks[k]) {
            Some(Tok::Key(r)) => &self.text[r.clone()],
            _ => "",
        };
        let secret = kids.iter().any(|&(k, v)| {
            key(k) == "kind"
                && matches!(&self.toks[v], Tok::Str(r) if &self.text[r.clone()] == "Secret")
        });
        if secret {
            for (i, &(k, _)) in kids.iter().enumerate() {
                if matches!(key(k), "data" | "stringData") {
                    forced[i] = true;
                }
            }
        }
    }

    /// A private key whose lines are separate strings (S1.3): every string from the BEGIN
    /// marker to the END marker.
    fn pem_split(&self, kids: &[(Option<usize>, usize)], forced: &mut [bool]) {
        let mut inside = false;
        for (i, &(_, v)) in kids.iter().enumerate() {
            let Tok::Str(r) = &self.toks[v] else {
                continue;
            };
            let raw = &self.text.as_bytes()[r.clone()];
            let has = |needle: &[u8]| memmem::find(raw, needle).is_some();
            if inside {
                forced[i] = true;
                if has(b"-----END") {
                    inside = false;
                }
            } else if ends_with_begin_marker(raw) {
                forced[i] = true;
                inside = true;
            }
        }
    }

    /// The elements of an array that follow a flag naming a secret (`"--api-key"`,
    /// `"--password"`, not `"--password-file"`), in order, each with the flag's name: the
    /// element is given to it.
    fn secret_flag_values(&self, kids: &[(Option<usize>, usize)]) -> Vec<(usize, String)> {
        kids.windows(2)
            .enumerate()
            .filter_map(|(i, pair)| {
                let (Tok::Str(flag), Tok::Str(value)) =
                    (&self.toks[pair[0].1], &self.toks[pair[1].1])
                else {
                    return None;
                };
                // A value starting with `-` is the next flag (`"--password", "--verbose"`).
                if flag.len() > 64
                    || !self.may_hold(flag)
                    || self.text[value.clone()].starts_with('-')
                {
                    return None;
                }
                let flag = self.decoded(flag);
                let name = flag.strip_prefix("--").or_else(|| flag.strip_prefix('-'))?;
                let plain = name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                // As a variable's name (`--token-limit` is `token_limit`, a count's).
                (plain && !name.is_empty() && names::name_is_secret(name))
                    .then(|| (i + 1, name.replace('-', "_")))
            })
            .collect()
    }

    /// An argv array (`["curl", "-u", "u:PW", url]`): the strings joined by blanks go through
    /// the command rules, and each span comes back to the string it lies in.
    fn argv(&self, kids: &[(Option<usize>, usize)], out: &mut Vec<Range<usize>>) {
        if kids.len() < 2 || kids.len() > 256 {
            return;
        }
        let mut parts: Vec<(Range<usize>, decode::Decoded<'_>)> = Vec::new();
        for &(_, v) in kids {
            let Tok::Str(r) = &self.toks[v] else {
                return;
            };
            if r.len() > 4096 {
                return;
            }
            parts.push((r.clone(), decode::decode(&self.text[r.clone()])));
        }
        let is_command = parts.iter().take(3).any(|(_, d)| {
            let word = d.text.rsplit('/').next().unwrap_or("");
            COMMANDS.contains(&word)
        });
        if !is_command {
            return;
        }
        let mut joined = String::new();
        let mut starts = Vec::new();
        for (_, d) in &parts {
            if !joined.is_empty() {
                joined.push(' ');
            }
            starts.push(joined.len());
            let quoted = d.text.contains(char::is_whitespace) || d.text.is_empty();
            // An argument with blanks is one argument: quote it so the rules see that.
            if quoted {
                joined.push('\'');
            }
            joined.push_str(&d.text);
            if quoted {
                joined.push('\'');
            }
        }
        let hits = self.redactor.scan(&joined);
        let mut spans = Vec::new();
        self.redactor
            .text_spans(&joined, &hits, &mut spans, MAX_DEPTH, None);
        for span in spans {
            for (i, (r, d)) in parts.iter().enumerate() {
                let quoted = usize::from(d.text.contains(char::is_whitespace) || d.text.is_empty());
                let s = starts[i] + quoted;
                let e = s + d.text.len();
                let (a, b) = (span.start.max(s), span.end.min(e));
                if a < b {
                    let raw = d.to_raw(a - s..b - s);
                    out.push(r.start + raw.start..r.start + raw.end);
                }
            }
        }
    }
}

/// Words that hold a keyword and never name a secret, whole (`Author:` in every `git log`
/// holds `auth`): an occurrence that is one of them runs no rule. A name built on one
/// (`author_token`) holds another keyword, which runs its rules.
const PLAIN_WORDS: &[&str] = &[
    "author",
    "authors",
    "authored",
    "authoring",
    "authority",
    "authorities",
];

/// The start every one of [`PLAIN_WORDS`] shares (a test checks).
const PLAIN_HEAD: &[u8] = b"author";

/// Whether the keyword at `at` is the start of one of [`PLAIN_WORDS`], standing alone.
fn is_plain_word(bytes: &[u8], at: usize) -> bool {
    // Asked for every keyword found, and almost none is there: one comparison rules it out.
    if !bytes
        .get(at..at + PLAIN_HEAD.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(PLAIN_HEAD))
    {
        return false;
    }
    PLAIN_WORDS.iter().any(|w| {
        let end = at + w.len();
        bytes
            .get(at..end)
            .is_some_and(|t| t.eq_ignore_ascii_case(w.as_bytes()))
            && bytes
                .get(end)
                .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
    })
}

/// Whether a string's raw content ends with a private key's BEGIN marker (its body follows in
/// the next strings).
fn ends_with_begin_marker(raw: &[u8]) -> bool {
    // The marker's closing dashes with only blanks after them end the string: read from its
    // end first, so a long string without a marker costs its last bytes, not a search.
    let blanks = raw
        .iter()
        .rev()
        .take_while(|&&b| is_marker_blank(b))
        .count();
    if !raw[..raw.len() - blanks].ends_with(b"-----") {
        return false;
    }
    let Some(begin) = memmem::rfind(raw, b"-----BEGIN") else {
        return false;
    };
    let rest = &raw[begin + b"-----BEGIN".len()..];
    let Some(key) = memmem::find(rest, b"PRIVATE KEY") else {
        return false;
    };
    let rest = &rest[key + b"PRIVATE KEY".len()..];
    let rest = rest.strip_prefix(b" BLOCK").unwrap_or(rest);
    let Some(rest) = rest.strip_prefix(b"-----") else {
        return false;
    };
    // Nothing after it but blanks, written plain or escaped.
    rest.iter().all(|&b| is_marker_blank(b))
}

/// The bytes of the blanks a BEGIN marker may be followed by, written plain or escaped.
fn is_marker_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\\' | b'n' | b'r' | b't')
}

/// Spans from `first` on that overlap an earlier `[REDACTED]`: what lies next to a marker was
/// judged when the marker was made, and reading it again differs (the marker is longer than
/// what it replaced, and a separator may have gone with the value), so such a span is dropped
/// and no marker is ever cut: redacting twice gives what redacting once gives. Unless the span
/// also holds a value glued to the marker (`password=[REDACTED]Xk9v…`,
/// docs/behaviour.md T2.1): text that already held the marker before any redaction, whose
/// value is still a value. Then the whole span goes, marker included, and the output holds one
/// marker where the value was, which a second pass leaves as it is. A private key block is the
/// exception, split around markers before it gets here ([`split_at_markers`]).
fn fix_markers(text: &str, spans: &mut Vec<Range<usize>>, first: usize) {
    if spans.len() == first || finders::MARKER.find(text.as_bytes()).is_none() {
        return;
    }
    let markers = markers_in(text);
    let mut i = first;
    while i < spans.len() {
        let s = spans[i].clone();
        let k = markers.partition_point(|m| m.end <= s.start);
        let inside: &[Range<usize>] = &markers[k..];
        let n = inside.iter().take_while(|m| m.start < s.end).count();
        if n == 0 {
            i += 1;
            continue;
        }
        if glued_value(text, &s, &inside[..n]) {
            // The span and every marker it touches become one.
            let start = s.start.min(inside[0].start);
            let end = s.end.max(inside[n - 1].end);
            spans[i] = start..end;
            i += 1;
        } else {
            spans.swap_remove(i);
        }
    }
}

/// Whether `span`, which overlaps `markers`, is a value glued to a marker: one marker, with
/// only a token's characters (letters, digits, `+/_-.~`, and `=` padding after the marker)
/// around it in the span, at least [`GLUED_MIN`] letters and digits on one side, with a digit
/// or mixed case or more than 16 of them: not a name, a word, an escape or the punctuation a
/// rule may have taken with the marker. Anything more (two markers, a blank, a bracket) is
/// where an earlier pass's own markers sit beside what it judged, which stays judged.
fn glued_value(text: &str, span: &Range<usize>, markers: &[Range<usize>]) -> bool {
    let bytes = text.as_bytes();
    let end = span.end.min(bytes.len());
    let [m] = markers else { return false };
    if m.start < span.start || m.end > end {
        return false;
    }
    let token =
        |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-' | b'.' | b'~');
    let secret_like = |run: &[u8]| {
        let alnum = run.iter().filter(|b| b.is_ascii_alphanumeric()).count();
        let digit = run.iter().any(u8::is_ascii_digit);
        let upper = run.iter().any(u8::is_ascii_uppercase);
        let lower = run.iter().any(u8::is_ascii_lowercase);
        alnum >= GLUED_MIN && (digit || (upper && lower) || alnum > 16)
    };
    let mut before = &bytes[span.start..m.start];
    // A header's value with its scheme: `Bearer [REDACTED]eyJ…`.
    for scheme in [&b"bearer "[..], b"basic ", b"token ", b"bot "] {
        if before.len() >= scheme.len() && before[..scheme.len()].eq_ignore_ascii_case(scheme) {
            before = &before[scheme.len()..];
        }
    }
    let after = &bytes[m.end..end];
    let after_body = after
        .strip_suffix(b"==")
        .or_else(|| after.strip_suffix(b"="))
        .unwrap_or(after);
    before.iter().all(token)
        && after_body.iter().all(token)
        && (secret_like(before) || secret_like(after_body))
}

/// Whether `value`, which holds a marker, also holds a value glued to one ([`glued_value`]).
pub(crate) fn glued_to_marker(value: &str) -> bool {
    let markers = markers_in(value);
    !markers.is_empty() && glued_value(value, &(0..value.len()), &markers)
}

/// The fewest letters and digits a value glued to a marker has ([`glued_value`]).
const GLUED_MIN: usize = 4;

fn markers_in(text: &str) -> Vec<Range<usize>> {
    finders::MARKER
        .find_iter(text.as_bytes())
        .map(|at| at..at + REDACTED.len())
        .collect()
}

/// A span recognised by its shape alone across lines (a private key block) keeps everything
/// but the markers inside it: its extent does not depend on what a marker replaced, and
/// dropping it whole (as [`fix_markers`] drops judged values) shipped the key after
/// `-----BEGIN PRIVATE KEY-----[REDACTED]`.
fn split_at_markers(text: &str, spans: &mut Vec<Range<usize>>) {
    if finders::MARKER.find(text.as_bytes()).is_none() {
        return;
    }
    let markers = markers_in(text);
    let mut kept = Vec::with_capacity(spans.len());
    for s in spans.drain(..) {
        let mut at = s.start;
        let k = markers.partition_point(|m| m.end <= s.start);
        for m in markers[k..].iter().take_while(|m| m.start < s.end) {
            if at < m.start {
                kept.push(at..m.start);
            }
            at = at.max(m.end);
        }
        if at < s.end {
            kept.push(at..s.end);
        }
    }
    *spans = kept;
}

/// The shortest secret whose every copy in the text goes with it.
const COPY_MIN: usize = 8;

/// [`every_copy`]'s mark of a find whose copies stay ([`word_shaped`]).
const WORD_SHAPED: usize = usize::MAX;

/// Whether a value found under a secret's name has the shape of code's words rather than of
/// a key, at most 32 bytes: an identifier joined by `_` (`access_tokens`,
/// `google_auth_httplib2`, `_WrappedRefresh`), lowercase words joined by `-`
/// (`meta-information`), camelCase of words of three letters or more (`credHelpers`), or a
/// capitalised word ended by a sentence's or an argument's `,`, `.` or `:` (`Section,`). Such
/// a find is judged where it was named; its copies elsewhere are the word in other sentences
/// and code (a docstring's `auth: Section,` took every `Section,` of the file), not the
/// secret repeated, as a key or a password (`postgres`, letters alone, standing alone) is.
fn word_shaped(value: &[u8]) -> bool {
    if value.len() > 32 {
        return false;
    }
    // A secret's own name given as its value (`<password>password</password>`, a user name
    // `username`): every other `password` of the text is the word.
    let bare = value
        .iter()
        .rposition(|c| !matches!(c, b',' | b';' | b':' | b'.' | b')'))
        .map_or(&value[..0], |e| &value[..=e]);
    if [
        &b"password"[..],
        b"passwords",
        b"username",
        b"credential",
        b"credentials",
        b"localhost",
    ]
    .iter()
    .any(|w| bare.eq_ignore_ascii_case(w))
    {
        return true;
    }
    // A template's slot taken whole under a secret's key (`"password": "{password}"`): its
    // copies are the slot's syntax in other values (`"${password}"`), not a secret.
    if std::str::from_utf8(bare)
        .is_ok_and(|v| rules::is_password_slot(v) || rules::is_shell_reference(v))
    {
        return true;
    }
    let end = value
        .iter()
        .rposition(|c| !matches!(c, b',' | b';' | b':' | b'.' | b')'))
        .map_or(0, |e| e + 1);
    let (v, ended) = (&value[..end], end < value.len());
    if v.is_empty() {
        return false;
    }
    // One pass over the value: what it holds, and whether its camel-case words are three
    // letters or more.
    let (mut digit, mut upper, mut underscore, mut hyphen) = (false, false, false, false);
    let (mut word, mut words_ok) = (0, true);
    for (i, &c) in v.iter().enumerate() {
        match c {
            b'a'..=b'z' => word += 1,
            b'A'..=b'Z' => {
                if i > 0 {
                    words_ok &= word >= 3;
                    word = 0;
                }
                upper = true;
                word += 1;
            }
            b'0'..=b'9' => digit = true,
            b'_' => underscore = true,
            b'-' => hyphen = true,
            _ => return false,
        }
    }
    // Lowercase with digits (`google_auth_httplib2`), or letters of any case without one
    // (`_WrappedRefresh`); each part a word, three letters or more before any digit (a key
    // in parts, `ab12_cd34_ef56`, is none, and its copies go).
    let snake = underscore
        && !hyphen
        && (!upper || !digit)
        && v.split(|&c| c == b'_').all(|part| {
            let letters = part.iter().take_while(|c| c.is_ascii_alphabetic()).count();
            part.is_empty() || (letters >= 3 && part[letters..].iter().all(u8::is_ascii_digit))
        });
    let hyphenated = hyphen && !underscore && !upper && !digit;
    let words_of_code = !digit && !underscore && !hyphen && words_ok && word >= 3;
    let camel = words_of_code && v[0].is_ascii_lowercase() && upper;
    let capitalised_ended = words_of_code && v[0].is_ascii_uppercase() && ended;
    snake || hyphenated || camel || capitalised_ended
}
/// The most distinct secrets of one text whose copies are looked for, searched for
/// [`COPY_SEARCH`] at a time: a 4 MiB text of thousands of secrets costs at most 16 searches of
/// it (a few milliseconds).
const COPY_SECRETS: usize = 1024;
/// The marker without its closing bracket: a value holding it (`[REDACTED` glued to what
/// follows) is a marker a rule took with what it was glued to, not a secret whose copies go:
/// taken as one, another `[REDACTED` became a whole marker, and a second pass read what
/// followed it anew (`[REDACTED]Cookie: …`), so redacting twice differed from once.
const MARKER_OPEN: &[u8] = b"[REDACTED";
/// How many times a text's length [`copies_of`] compares of long secrets' copies.
const COPY_VERIFY: usize = 8;
/// The most bytes of a secret its copies are looked for by ([`every_copy`]).
const COPY_HEAD: usize = 256;
/// Secrets looked for in one search: Teddy's most.
const COPY_SEARCH: usize = 64;

/// Adds every other copy of each secret in `spans` to them: a secret once found is the same
/// secret wherever else the text holds it, where nothing around it may say so (`token = 'X'
/// | 'X'`, a key set in one command and echoed by the next, a password in a command and in
/// its output). Secrets of fewer than [`COPY_MIN`] characters, or holding the marker, are
/// left to their rules. `hides_ascii`: the text escapes printable ASCII
/// ([`decode::hides_ascii`]), so a copy may be written with other escapes than the secret
/// found (`\u0058k9…` for `Xk9…`).
fn every_copy(text: &str, spans: &mut Vec<Range<usize>>, hides_ascii: bool) {
    if spans.is_empty() {
        return;
    }
    let b = text.as_bytes();
    let valid = |r: &Range<usize>| r.start < r.end && r.end <= b.len();
    // Each distinct secret once (a text may hold a hundred thousand spans: a set, not a scan
    // of the list for each).
    // A secret longer than [`COPY_HEAD`] bytes is looked for by its head, and the rest compared
    // where the head is found ([`copies_of`]): searching for every byte of every long secret
    // cost a line of values inside values (`token=token=…`, each a secret as long as the rest
    // of the line) the square of its length. Of the secrets sharing a head, the longest.
    let mut secrets: Vec<&[u8]> = Vec::new();
    let mut wholes: Vec<&[u8]> = Vec::new();
    let mut seen: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for r in spans.iter().filter(|r| valid(r)) {
        let whole = &b[r.clone()];
        let mut head = whole.len().min(COPY_HEAD);
        while head < whole.len() && !text.is_char_boundary(r.start + head) {
            head -= 1;
        }
        let v = &whole[..head];
        if unescaped_len(v) < COPY_MIN
            || memchr::memchr_iter(b'[', v).any(|at| v[at..].starts_with(MARKER_OPEN))
        {
            continue;
        }
        if let Some(&i) = seen.get(v) {
            if i != WORD_SHAPED && whole.len() > wholes[i].len() {
                wholes[i] = whole;
            }
            continue;
        }
        // Judged once for each distinct find (a text dense with secrets repeats them).
        if word_shaped(whole) {
            seen.insert(v, WORD_SHAPED);
            continue;
        }
        if secrets.len() == COPY_SECRETS {
            break;
        }
        seen.insert(v, secrets.len());
        secrets.push(v);
        wholes.push(whole);
    }
    if secrets.is_empty() {
        return;
    }
    // Where escapes may differ between copies (the text hides ASCII behind escapes, or a
    // secret holds an escape, as a quote is written `\"` in one string and `\\\"` in the
    // JSON inside another), copies are looked for in the text with its escapes read, and
    // mapped back; elsewhere every copy is the same bytes. (A copy where a secret was found
    // is added again: spans merge.)
    let escaped = hides_ascii || secrets.iter().any(|v| memchr::memchr(b'\\', v).is_some());
    let decoded = escaped
        .then(|| decode::decode(text))
        .filter(|d| !d.is_identity());
    // Only the copies no span covers yet are added (in a text dense with secrets most are
    // the secrets found), so the spans are sorted once more only when one is.
    spans.sort_unstable_by_key(|s| (s.start, s.end));
    let mut extra = Vec::new();
    let mut add = |c: Range<usize>| {
        let before = spans.partition_point(|s| s.start <= c.start);
        if before == 0 || spans[before - 1].end < c.end {
            extra.push(c);
        }
    };
    match &decoded {
        None => {
            let wholes: Vec<Option<&[u8]>> = wholes.iter().map(|&w| Some(w)).collect();
            copies_of(b, &secrets, &wholes, |_, whole| add(whole));
        }
        Some(d) => {
            // Each is a slice of the text, cut at a character's boundary. A long secret is
            // decoded whole too, for as long as the decoding costs at most [`COPY_VERIFY`]
            // times the text in all; past that its copies go as far as their heads.
            let text_of = |v: &[u8]| {
                let v = std::str::from_utf8(v).unwrap_or_default();
                decode::decode(v).text.into_owned()
            };
            let mut budget = COPY_VERIFY.saturating_mul(b.len());
            let decoded: Vec<(String, Option<String>)> = secrets
                .iter()
                .zip(&wholes)
                .map(|(v, w)| {
                    let head = text_of(v);
                    let whole = (w.len() > v.len() && w.len() <= budget).then(|| {
                        budget -= w.len();
                        text_of(w)
                    });
                    (head, whole)
                })
                .filter(|(v, _)| !v.is_empty())
                .collect();
            let values: Vec<&[u8]> = decoded.iter().map(|(v, _)| v.as_bytes()).collect();
            let wholes: Vec<Option<&[u8]>> = decoded
                .iter()
                .map(|(_, w)| w.as_deref().map(str::as_bytes))
                .collect();
            // A copy read across a string's own quote (`…rs"` of `"…rs"` for a secret
            // `rs\"`) is none: redacting it would break the JSON. (A long secret's copy taken
            // whole that would cross one is taken as far as its head.)
            // The text's bare quotes (after an even run of backslashes), found once: each
            // copy's range looked at for one, byte by byte, was the square of a long line.
            let mut bare = Vec::new();
            let mut backslashes = 0usize;
            for (i, &c) in b.iter().enumerate() {
                if c == b'"' && backslashes.is_multiple_of(2) {
                    bare.push(i);
                }
                backslashes = if c == b'\\' { backslashes + 1 } else { 0 };
            }
            let bare_quote = |raw: &Range<usize>| {
                let k = bare.partition_point(|&q| q < raw.start);
                bare.get(k).is_some_and(|&q| q < raw.end)
            };
            copies_of(d.text.as_bytes(), &values, &wholes, |head, whole| {
                let raw = [d.to_raw(whole), d.to_raw(head)]
                    .into_iter()
                    .find(|raw| !bare_quote(raw));
                if let Some(raw) = raw {
                    add(raw);
                }
            });
        }
    }
    spans.append(&mut extra);
}

/// Calls `found` with every occurrence in `hay` of any of `needles`: one vectorised search
/// (Teddy) for each [`COPY_SEARCH`] of them where the processor has it, else one search for
/// each.
/// `wholes`: each needle's whole secret, where it is longer than the needle (a long secret's
/// head) and the caller has it: `found` gets the needle's occurrence and the secret's, which
/// is as long as the secret where the bytes after the head are the secret's own, else the
/// head alone. Those bytes are compared for at most [`COPY_VERIFY`] times the text's length
/// in all: the heads of a text of values inside values (`token=token=…`) occur every few
/// bytes, each a copy as long as the rest of the line. A copy is never taken past what was
/// compared (taken unread, a shifted copy of a repeating secret ran on over the string's
/// closing quote).
fn copies_of(
    hay: &[u8],
    needles: &[&[u8]],
    wholes: &[Option<&[u8]>],
    mut found: impl FnMut(Range<usize>, Range<usize>),
) {
    let mut budget = COPY_VERIFY.saturating_mul(hay.len()).max(1 << 16);
    let mut copy = |i: usize, head: Range<usize>| {
        let mut end = head.end;
        if let Some(whole) = wholes[i]
            && whole.len() > head.len()
            && budget > 0
        {
            let n = whole.len().min(hay.len() - head.start);
            budget = budget.saturating_sub(n);
            if n == whole.len() && hay[head.start..head.start + n] == *whole {
                end = head.start + n;
            }
        }
        // A secret of letters alone stands alone where its whole copy does.
        if is_copy(hay, head.start..end, needles[i]) {
            found(head.clone(), head.start..end);
        }
    };
    // The longest first: a search reports one needle at each start, the first listed of
    // those there, and a shorter secret's copy (`Xk9v/Q2m+Lp7=`) must not hide a longer
    // one's at the same place (`Xk9v/Q2m+Lp7=RzAb`, whose tail then shipped).
    let mut order: Vec<usize> = (0..needles.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(needles[i].len()));
    for ids in order.chunks(COPY_SEARCH) {
        let chunk: Vec<&[u8]> = ids.iter().map(|&i| needles[i]).collect();
        let packed = aho_corasick::packed::Config::new()
            .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
            .builder()
            .extend(&chunk)
            .build();
        match packed {
            Some(searcher) => {
                // Each start once, not each match's end: a match the caller refuses (read
                // across a quote) must not hide another secret's copy inside it.
                let mut at = 0;
                while let Some(m) = searcher.find_in(hay, aho_corasick::Span::from(at..hay.len())) {
                    copy(ids[m.pattern().as_usize()], m.start()..m.end());
                    at = m.start() + 1;
                }
            }
            None => {
                for (&i, v) in ids.iter().zip(&chunk) {
                    for at in memchr::memmem::find_iter(hay, v) {
                        copy(i, at..at + v.len());
                    }
                }
            }
        }
    }
}

/// Whether `hay[r]`, an occurrence of the secret `needle`, is a copy of it. A secret of letters
/// alone (`postgres`, `petclinic`) is a word, and other words hold it (`postgresql`,
/// `org.postgresql.Driver`): its occurrence is a copy only where it stands alone. Any other
/// secret (`Hunt3rPw9`, a key) is a copy wherever it occurs, glued or not: an echo of
/// `$USER$PASS` shows it glued to the user name, and no word holds it by chance.
fn is_copy(hay: &[u8], r: Range<usize>, needle: &[u8]) -> bool {
    !needle.iter().all(u8::is_ascii_alphabetic) || stands_alone(hay, r)
}

/// Whether `hay[r]` is not a piece of a longer word: a letter or digit at its edge does not go
/// on from one just outside it. An escape's letter or last digit (`\npostgres`,
/// `\u0020postgres`) or a percent escape's (`token%3Dpostgres`) just before it is no word of its
/// own.
fn stands_alone(hay: &[u8], r: Range<usize>) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric();
    let glued_before = r.start > 0
        && word(hay[r.start - 1])
        && word(hay[r.start])
        && !(r.start >= 2 && hay[r.start - 2] == b'\\')
        && !(r.start >= 6 && hay[r.start - 6] == b'\\' && hay[r.start - 5] == b'u')
        && !(r.start >= 3 && hay[r.start - 3] == b'%' && hay[r.start - 2].is_ascii_hexdigit());
    let glued_after = r.end < hay.len() && word(hay[r.end]) && word(hay[r.end - 1]);
    !glued_before && !glued_after
}

/// How many characters `raw` holds once its JSON escapes are read (`\u0074` and `\n` one
/// each): a short secret written with escapes is still short.
fn unescaped_len(raw: &[u8]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < raw.len() {
        i += match (raw[i], raw.get(i + 1)) {
            (b'\\', Some(b'u')) => 6,
            (b'\\', Some(_)) => 2,
            (c, _) if c < 0x80 => 1,
            (c, _) => usize::from(c.leading_ones() as u8).max(1),
        };
        n += 1;
    }
    n
}

/// The passes [`Redactor::settle`] may add to a line's first: a phrase holding the marker
/// is reached by the second; the rest are margin for a phrase that holds two.
const SETTLE_PASSES: usize = 3;

/// Whether a marker of `text` is inside a quoted literal that follows a label's word on its
/// line (`token "x [REDACTED] y": …`), where `label-phrase-value`'s byte count reaches further
/// once the value inside is the marker. A line break, raw or escaped (`\n`), ends the look.
fn marker_in_a_labels_phrase(text: &[u8]) -> bool {
    /// The label words of `label-phrase-value`, lowercase, as far as they tell it apart.
    const WORDS: &[&[u8]] = &[b"pass", b"token", b"secret", b"api", b"access"];
    /// The phrase's reach before its value: 40 bytes, a literal of 40 and its quotes.
    const LOOK: usize = 84;
    // A line break, raw or escaped, at `i` of `b`.
    let breaks = |b: &[u8], i: usize| b[i] == b'\n' || (b[i] == b'n' && i > 0 && b[i - 1] == b'\\');
    memmem::find_iter(text, REDACTED.as_bytes()).any(|at| {
        // Most markers have no quote within reach (found 32 bytes at a time); then the line
        // must not break between the quote and the marker, and a label's word must come
        // before the quote on the same line.
        let before = &text[at.saturating_sub(LOOK)..at];
        let Some(quote) = memchr::memrchr2(b'"', b'\'', before) else {
            return false;
        };
        if (quote + 1..before.len()).any(|i| breaks(before, i)) {
            return false;
        }
        let from = (0..quote)
            .rev()
            .find(|&i| breaks(before, i))
            .map_or(0, |i| i + 1);
        let head = &before[from..quote];
        (0..head.len()).any(|i| {
            WORDS.iter().any(|w| {
                head[i..]
                    .get(..w.len())
                    .is_some_and(|h| h.eq_ignore_ascii_case(w))
            })
        })
    })
}

/// `text` with every span replaced by the marker (overlapping and touching spans merged).
fn apply(text: &str, mut spans: Vec<Range<usize>>) -> Cow<'_, str> {
    spans.retain(|s| s.start < s.end && s.end <= text.len());
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    spans.sort_unstable_by_key(|s| (s.start, s.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for s in spans {
        match merged.last_mut() {
            Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
            _ => merged.push(s),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for s in merged {
        // Spans come from decoded character boundaries mapped to whole raw units; guard
        // against a cut inside a character all the same.
        let (mut a, mut b) = (s.start, s.end);
        while !text.is_char_boundary(a) {
            a -= 1;
        }
        while !text.is_char_boundary(b) {
            b += 1;
        }
        if a < copied {
            a = copied;
        }
        out.push_str(&text[copied..a]);
        out.push_str(REDACTED);
        copied = b.max(a);
    }
    out.push_str(&text[copied..]);
    if out == text {
        return Cow::Borrowed(text);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests;
