//! Line classification: a push-based JSON scanner that validates a rollout line exactly as
//! `serde_json` would and captures only the few fields the watcher needs.
//!
//! Why not parse into a `serde_json::Value`: rollout lines of hundreds of MB exist
//! (`compacted` history, base64 images, huge tool outputs), and `function_call` writes its
//! multi-MB `arguments` *before* its `call_id`, so the interesting fields cannot be read from a
//! prefix either. The scanner therefore accepts a line in chunks of any size (split anywhere,
//! even inside a UTF-8 sequence or an escape), keeps a small stack of what each open
//! container means, copies at most [`MAX_SHORT_FIELD`] / [`MAX_MESSAGE_FIELD`] bytes of each
//! wanted string, and resolves everything in [`Classifier::finish`]: the heap it holds never
//! depends on the line's size.
//!
//! Validity mirrors `serde_json::from_slice::<Value>` (after removing a leading BOM), because
//! the rest of the watcher and its tests treat serde_json as the definition of "a JSON object"
//! (same number grammar and out-of-range rule, same escape and surrogate rules, duplicate keys
//! resolved last-wins). The one deliberate difference is nesting: serde_json refuses more than
//! 127 nested containers, this scanner refuses more than [`MAX_DEPTH`] (deeper lines are
//! malformed), so that a legitimately deep tool argument never hides a `call_id`.
//!
//! The hot path is the inside of long strings (tool output, arguments, base64): there the
//! scanner jumps to the next `"`, `\` or control byte a block at a time, and the same vector
//! compares tell whether the block holds any byte above ASCII. UTF-8 is validated only from
//! such a byte on (`std::str::from_utf8`), so the common all-ASCII block costs no second pass.
//! Checking the line's non-ASCII runs instead of each string is equivalent: outside strings
//! only ASCII is valid JSON, an ASCII byte can never sit inside a multi-byte sequence, so the
//! line is valid UTF-8 exactly when every maximal run of non-ASCII bytes is, and a run cut by
//! an ASCII byte (a sequence still open when unchecked bytes follow) is not.
//!
//! Where the CPU has AVX2 (looked up once per classifier), the same scan runs compiled for
//! it: a block is two 32-byte vectors, and the letters after backslashes are checked by a
//! nibble-table lookup in those vectors rather than one at a time. Both forms are tested
//! against each other and against serde_json.

use std::sync::LazyLock;

use super::{
    Kind, LineInfo, MAX_MESSAGE_FIELD, MAX_SHORT_FIELD, PayloadType, RateWindow, SessionMetaInfo,
};
use crate::time::Ts;

/// Deepest nesting of arrays and objects accepted; a deeper line is malformed. Bounds the
/// container stack (one small frame per level).
pub(crate) const MAX_DEPTH: usize = 512;

/// Most `rate_limits` windows kept per line (Codex writes two or three).
const MAX_WINDOWS: usize = 8;

/// Longest object key compared against the known names (the longest is 30 bytes); longer keys
/// never match, and only their hash is kept.
const KEY_CAP: usize = 32;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The captured string fields, each with one reusable buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Field {
    Type,
    Timestamp,
    PayloadType,
    CallId,
    Name,
    TurnId,
    LastAgentMessage,
    CodexErrorInfo,
    Id,
    SessionId,
    ParentThreadId,
    SpawnParentThreadId,
    ThreadSource,
    AgentPath,
    AgentNickname,
    AgentRole,
    Cwd,
    CliVersion,
    Originator,
    ErrorMessage,
    Message,
    /// The string form of `source.subagent` (`"review"`, `"memory_consolidation"`).
    SubagentKind,
    SpawnAgentPath,
    SpawnAgentNickname,
}

const FIELD_COUNT: usize = Field::SpawnAgentNickname as usize + 1;

/// Every field read from inside `payload` (all but the envelope's `type` and `timestamp`).
const FIRST_PAYLOAD_FIELD: usize = Field::PayloadType as usize;

impl Field {
    fn limit(self) -> usize {
        match self {
            Field::LastAgentMessage | Field::ErrorMessage | Field::Message => MAX_MESSAGE_FIELD,
            _ => MAX_SHORT_FIELD,
        }
    }
}

/// What a captured field held at its last occurrence (duplicate keys: the last one wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Seen {
    #[default]
    Absent,
    /// Present, but not (or not yet) a complete string.
    Other,
    Str,
}

#[derive(Debug, Default)]
struct Slot {
    seen: Seen,
    /// The unescaped string, cut after `limit + 4` bytes so that `finish` can both tell a
    /// value longer than the limit and cut it at a character boundary.
    buf: Vec<u8>,
}

impl Slot {
    fn reset(&mut self) {
        self.seen = Seen::Absent;
        self.buf.clear();
    }

    fn push(&mut self, bytes: &[u8], limit: usize) {
        let room = (limit + 4).saturating_sub(self.buf.len());
        let take = bytes.len().min(room);
        if take == 0 {
            return;
        }
        let needed = self.buf.len() + take;
        if needed > self.buf.capacity() {
            // Grow geometrically but never past the bound, so `retained_bytes` stays small.
            let target = needed.max((self.buf.capacity() * 2).min(limit + 4));
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(&bytes[..take]);
    }

    fn bytes(&self) -> Option<&[u8]> {
        (self.seen == Seen::Str).then_some(&self.buf[..])
    }

    /// The value as text, cut at `limit` on a character boundary.
    fn text(&self, limit: usize) -> Option<String> {
        let b = self.bytes()?;
        let mut end = b.len().min(limit);
        while end < b.len() && end > 0 && (b[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        // The line passed UTF-8 validation and escapes decode to whole characters, so this
        // only fails on a bug; dropping the field is then the safe answer.
        String::from_utf8(b[..end].to_vec()).ok()
    }

    /// The whole value as text, or `None` when it was longer than `limit` (a cut timestamp
    /// could parse as a different instant).
    fn whole_text(&self, limit: usize) -> Option<&str> {
        let b = self.bytes()?;
        if b.len() > limit {
            return None;
        }
        std::str::from_utf8(b).ok()
    }
}

/// What an open container is, as far as the watcher cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Root,
    Payload,
    Error,
    /// The object form of `error.codex_error_info`: its first key is the kind.
    ErrorInfo,
    RateLimits,
    /// A `rate_limits` member object, with its index in `windows`.
    Window(u8),
    Source,
    Subagent,
    ThreadSpawn,
    /// Anything else, including every array: skipped without looking at keys.
    Opaque,
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    ctx: Ctx,
    array: bool,
}

/// What the value after the current key feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    None,
    Field(Field),
    Payload,
    Error,
    ErrorInfo,
    RateLimits,
    /// A `rate_limits` member, identified by the hash of its key (for last-wins duplicates).
    Window(u64),
    Source,
    Subagent,
    ThreadSpawn,
    UsedPercent(u8),
    ResetsAt(u8),
    WindowMinutes(u8),
    TriggerTurn,
    /// The envelope's `ordinal`.
    Ordinal,
    /// `payload.subagent_history_start_ordinal` (S6).
    HistoryStart,
}

/// Which object form of `source.subagent` was seen (its string form is a captured field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum SubagentForm {
    #[default]
    None,
    /// `{"other": ...}` (a delegate thread with no spawn record).
    Other,
    /// `{"thread_spawn": {...}}`; wins over `other` whatever the key order.
    ThreadSpawn,
}

/// Where the bytes of the current string go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capture {
    None,
    Key,
    Field(Field),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the top-level value: whitespace or `{`.
    Start,
    /// After `:` or `,` in an array: a value.
    Value,
    /// After `[`: a value or `]`.
    ValueOrEnd,
    /// After `{`: a key or `}`.
    KeyOrEnd,
    /// After `,` in an object: a key.
    Key,
    Colon,
    /// After a value: `,` or the closing bracket.
    AfterValue,
    Str,
    Escape,
    Hex,
    /// After a high-surrogate `\u` escape, which must be followed by `\u` and a low one.
    LowBackslash,
    LowU,
    Number,
    Literal,
    /// The top-level object is closed: only whitespace may follow.
    Done,
}

struct KeyBuf {
    bytes: [u8; KEY_CAP],
    len: usize,
    /// Only a `rate_limits` member's key is hashed (its window is matched by the hash, the
    /// whole key however long); every other key is compared by its first [`KEY_CAP`] bytes.
    /// Hashing every key one byte at a time was 7 % of seeding's instructions.
    hashed: bool,
    hash: u64,
}

impl KeyBuf {
    fn clear(&mut self, hashed: bool) {
        self.len = 0;
        self.hashed = hashed;
        self.hash = FNV_OFFSET;
    }

    #[inline(always)]
    fn push(&mut self, bytes: &[u8]) {
        if self.hashed {
            for &b in bytes {
                self.hash = (self.hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
            }
        }
        let stored = self.len.min(KEY_CAP);
        let n = bytes.len().min(KEY_CAP - stored);
        self.bytes[stored..stored + n].copy_from_slice(&bytes[..n]);
        self.len = self.len.saturating_add(bytes.len());
    }

    fn known(&self) -> &[u8] {
        if self.len <= KEY_CAP {
            &self.bytes[..self.len]
        } else {
            &[]
        }
    }
}

/// Incremental UTF-8 check; an incomplete trailing sequence is carried to the next chunk.
#[derive(Default)]
struct Utf8Check {
    carry: [u8; 4],
    len: usize,
}

impl Utf8Check {
    fn feed(&mut self, mut s: &[u8]) -> bool {
        if self.len > 0 {
            let width = match self.carry[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (width - self.len).min(s.len());
            self.carry[self.len..self.len + take].copy_from_slice(&s[..take]);
            self.len += take;
            s = &s[take..];
            match std::str::from_utf8(&self.carry[..self.len]) {
                Ok(_) => self.len = 0,
                // Still a valid prefix: the chunk was too short to complete it.
                Err(e) if e.error_len().is_none() => return true,
                Err(_) => return false,
            }
        }
        match std::str::from_utf8(s) {
            Ok(_) => true,
            Err(e) => match e.error_len() {
                Some(_) => false,
                None => {
                    let tail = &s[e.valid_up_to()..];
                    self.carry[..tail.len()].copy_from_slice(tail);
                    self.len = tail.len();
                    true
                }
            },
        }
    }
}

/// serde_json's powers of ten (each the correctly rounded `1e<i>`), for [`from_parts`].
static POW10: LazyLock<[f64; 309]> = LazyLock::new(|| {
    let mut t = [0.0; 309];
    for (i, p) in t.iter_mut().enumerate() {
        *p = format!("1e{i}").parse().unwrap_or(f64::INFINITY);
    }
    t
});

/// Builds a float from a significand and a decimal exponent the way serde_json does without
/// its `float_roundtrip` feature (so values and the out-of-range rule match it exactly).
fn from_parts(positive: bool, significand: u64, mut exponent: i32) -> Option<f64> {
    let mut f = significand as f64;
    loop {
        match POW10.get(exponent.unsigned_abs() as usize) {
            Some(&pow) => {
                if exponent >= 0 {
                    f *= pow;
                    if f.is_infinite() {
                        return None;
                    }
                } else {
                    f /= pow;
                }
                break;
            }
            None => {
                if f == 0.0 {
                    break;
                }
                if exponent >= 0 {
                    return None;
                }
                f /= 1e308;
                exponent += 308;
            }
        }
    }
    Some(if positive { f } else { -f })
}

fn overflows_u64(acc: u64, digit: u64) -> bool {
    acc >= u64::MAX / 10 && (acc > u64::MAX / 10 || digit > u64::MAX % 10)
}

fn overflows_i32(acc: i32, digit: i32) -> bool {
    acc >= i32::MAX / 10 && (acc > i32::MAX / 10 || digit > i32::MAX % 10)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumPhase {
    /// After `-`.
    Minus,
    /// A leading `0` (no digit may follow).
    Zero,
    Int,
    /// Integer digits past `u64`: they only scale the exponent.
    LongInt,
    Frac,
    /// Fraction digits past `u64`: ignored.
    FracOverflow,
    /// After `e`.
    ExpStart,
    /// After `e+` / `e-`.
    ExpSign,
    ExpDigits,
    /// Exponent past `i32` with a zero result (a non-zero one is out of range).
    ExpOverflow,
}

/// A number being scanned, with serde_json's bounded state (significand, exponent).
#[derive(Clone, Copy, Debug)]
struct NumberScan {
    phase: NumPhase,
    positive: bool,
    significand: u64,
    /// Decimal exponent accumulated before the fraction or `e` (long integers, fractions).
    exponent: i32,
    /// Fraction digits taken into the significand (as a negative exponent).
    frac: i32,
    exp_positive: bool,
    exp: i32,
}

enum NumStep {
    More,
    /// The byte does not belong to the number (it is not consumed).
    End,
    Fail,
}

impl NumberScan {
    fn start(b: u8) -> NumberScan {
        let mut n = NumberScan {
            phase: NumPhase::Minus,
            positive: b != b'-',
            significand: 0,
            exponent: 0,
            frac: 0,
            exp_positive: true,
            exp: 0,
        };
        if b != b'-' {
            n.first_digit(b);
        }
        n
    }

    fn first_digit(&mut self, b: u8) {
        if b == b'0' {
            self.phase = NumPhase::Zero;
        } else {
            self.phase = NumPhase::Int;
            self.significand = u64::from(b - b'0');
        }
    }

    fn push(&mut self, b: u8) -> NumStep {
        let digit = b.is_ascii_digit();
        let d = b.wrapping_sub(b'0');
        match self.phase {
            NumPhase::Minus => {
                if !digit {
                    return NumStep::Fail;
                }
                self.first_digit(b);
            }
            NumPhase::Zero | NumPhase::Int | NumPhase::LongInt => {
                if digit {
                    match self.phase {
                        NumPhase::Zero => return NumStep::Fail,
                        NumPhase::Int if overflows_u64(self.significand, u64::from(d)) => {
                            self.phase = NumPhase::LongInt;
                            self.exponent = 1;
                        }
                        NumPhase::Int => self.significand = self.significand * 10 + u64::from(d),
                        _ => self.exponent = self.exponent.saturating_add(1),
                    }
                } else if b == b'.' {
                    self.phase = NumPhase::Frac;
                } else if b == b'e' || b == b'E' {
                    self.phase = NumPhase::ExpStart;
                } else {
                    return NumStep::End;
                }
            }
            NumPhase::Frac => {
                if digit {
                    if overflows_u64(self.significand, u64::from(d)) {
                        self.exponent = self.exponent.saturating_add(self.frac);
                        self.frac = 0;
                        self.phase = NumPhase::FracOverflow;
                    } else {
                        self.significand = self.significand * 10 + u64::from(d);
                        self.frac -= 1;
                    }
                } else if self.frac == 0 {
                    // `1.` and `1.e5`: a fraction needs a digit.
                    return NumStep::Fail;
                } else if b == b'e' || b == b'E' {
                    self.exponent = self.exponent.saturating_add(self.frac);
                    self.frac = 0;
                    self.phase = NumPhase::ExpStart;
                } else {
                    return NumStep::End;
                }
            }
            NumPhase::FracOverflow => {
                if b == b'e' || b == b'E' {
                    self.phase = NumPhase::ExpStart;
                } else if !digit {
                    return NumStep::End;
                }
            }
            NumPhase::ExpStart | NumPhase::ExpSign => {
                if digit {
                    self.exp = i32::from(d);
                    self.phase = NumPhase::ExpDigits;
                } else if self.phase == NumPhase::ExpStart && (b == b'+' || b == b'-') {
                    self.exp_positive = b == b'+';
                    self.phase = NumPhase::ExpSign;
                } else {
                    return NumStep::Fail;
                }
            }
            NumPhase::ExpDigits => {
                if !digit {
                    return NumStep::End;
                }
                if overflows_i32(self.exp, i32::from(d)) {
                    if self.significand != 0 && self.exp_positive {
                        return NumStep::Fail;
                    }
                    self.phase = NumPhase::ExpOverflow;
                } else {
                    self.exp = self.exp * 10 + i32::from(d);
                }
            }
            NumPhase::ExpOverflow => {
                if !digit {
                    return NumStep::End;
                }
            }
        }
        NumStep::More
    }

    /// The value serde_json's `as_f64` gives, or `None` when it rejects the number.
    fn value(&self) -> Option<f64> {
        let sign = |f: f64| if self.positive { f } else { -f };
        match self.phase {
            NumPhase::Minus | NumPhase::ExpStart | NumPhase::ExpSign => None,
            NumPhase::Zero | NumPhase::Int => Some(sign(self.significand as f64)),
            NumPhase::Frac if self.frac == 0 => None,
            NumPhase::LongInt | NumPhase::FracOverflow => {
                from_parts(self.positive, self.significand, self.exponent)
            }
            NumPhase::Frac => from_parts(
                self.positive,
                self.significand,
                self.exponent.saturating_add(self.frac),
            ),
            NumPhase::ExpDigits => {
                let e = if self.exp_positive {
                    self.exponent.saturating_add(self.exp)
                } else {
                    self.exponent.saturating_sub(self.exp)
                };
                from_parts(self.positive, self.significand, e)
            }
            NumPhase::ExpOverflow => Some(sign(0.0)),
        }
    }
}

/// The line is not a JSON object; the rest of it is skipped.
struct Malformed;

/// Push-based classifier: feed a line's bytes in any number of chunks, then [`finish`].
///
/// [`finish`]: Classifier::finish
pub struct Classifier {
    failed: bool,
    /// Past the optional BOM (at least one byte of the JSON text was seen).
    past_start: bool,
    bom_len: usize,
    utf8: Utf8Check,
    /// Bytes of the current chunk before this index are UTF-8 checked or ASCII; a sequence
    /// still open in `utf8` must continue exactly here.
    utf8_done: usize,
    state: State,
    stack: Vec<Frame>,
    in_key: bool,
    capture: Capture,
    key: KeyBuf,
    /// The target of the value after the current key.
    pending: Target,
    num: NumberScan,
    num_target: Target,
    literal: &'static [u8],
    literal_pos: usize,
    hex: u32,
    hex_left: u8,
    /// A high surrogate waiting for its low half (0 when none).
    high: u32,
    slots: [Slot; FIELD_COUNT],
    /// The last `payload` is an object (`meta` is only given then).
    payload_object: bool,
    has_subagent: bool,
    subagent_form: SubagentForm,
    /// `payload.trigger_turn`, when its last occurrence is a boolean.
    trigger_turn: Option<bool>,
    /// The envelope's `ordinal` and `payload.subagent_history_start_ordinal`, when their last
    /// occurrence is a number.
    ordinal: Option<f64>,
    history_start: Option<f64>,
    windows: [(u64, RateWindow); MAX_WINDOWS],
    window_count: usize,
    /// Leave `timestamp` unparsed (`None`): only `inspect --line-times` needs it, and parsing
    /// every line's timestamp is a measurable share of seeding.
    skip_timestamps: bool,
    /// Scan string bodies with AVX2 (when the CPU has it; looked up once per classifier).
    #[cfg(target_arch = "x86_64")]
    avx2: Option<Avx2>,
}

impl Default for Classifier {
    fn default() -> Classifier {
        Classifier::new()
    }
}

impl Classifier {
    pub fn new() -> Classifier {
        Classifier {
            failed: false,
            past_start: false,
            bom_len: 0,
            utf8: Utf8Check::default(),
            utf8_done: 0,
            state: State::Start,
            stack: Vec::new(),
            in_key: false,
            capture: Capture::None,
            key: KeyBuf {
                bytes: [0; KEY_CAP],
                len: 0,
                hashed: false,
                hash: FNV_OFFSET,
            },
            pending: Target::None,
            num: NumberScan::start(b'0'),
            num_target: Target::None,
            literal: b"",
            literal_pos: 0,
            hex: 0,
            hex_left: 0,
            high: 0,
            slots: Default::default(),
            payload_object: false,
            has_subagent: false,
            subagent_form: SubagentForm::None,
            trigger_turn: None,
            ordinal: None,
            history_start: None,
            windows: [(0, RateWindow::default()); MAX_WINDOWS],
            window_count: 0,
            skip_timestamps: false,
            #[cfg(target_arch = "x86_64")]
            avx2: Avx2::detect(),
        }
    }

    /// A classifier that scans with the target's baseline vector unit even where the CPU has
    /// AVX2, so the tests check both forms against each other and against serde_json.
    #[cfg(test)]
    fn baseline() -> Classifier {
        Classifier {
            #[cfg(target_arch = "x86_64")]
            avx2: None,
            ..Classifier::new()
        }
    }

    /// A classifier that never parses the envelope's `timestamp` (it is always `None`).
    pub(crate) fn without_timestamps() -> Classifier {
        Classifier {
            skip_timestamps: true,
            ..Classifier::new()
        }
    }

    /// Heap bytes currently held (for tests of the memory bound).
    #[doc(hidden)]
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.stack.capacity() * std::mem::size_of::<Frame>()
            + self.slots.iter().map(|s| s.buf.capacity()).sum::<usize>()
    }

    /// Feeds the next bytes of the current line (never including its `\n`).
    pub fn feed(&mut self, mut chunk: &[u8]) {
        if self.failed {
            return;
        }
        if !self.past_start {
            while let Some(&b) = chunk.first() {
                if self.bom_len == 0 && b != BOM[0] {
                    self.past_start = true;
                    break;
                }
                if b != BOM[self.bom_len] {
                    self.failed = true;
                    return;
                }
                self.bom_len += 1;
                chunk = &chunk[1..];
                if self.bom_len == BOM.len() {
                    self.past_start = true;
                    break;
                }
            }
        }
        if chunk.is_empty() {
            return;
        }
        self.utf8_done = 0;
        // A sequence open at the last checked byte is cut when unchecked (ASCII) bytes follow.
        if self.scan(chunk).is_err() || (self.utf8.len > 0 && self.utf8_done < chunk.len()) {
            self.failed = true;
        }
    }

    /// Classifies the line fed so far and resets for the next line.
    pub fn finish(&mut self) -> LineInfo {
        let valid = !self.failed && self.state == State::Done && self.utf8.len == 0;
        let info = if valid {
            self.resolve()
        } else {
            LineInfo::malformed()
        };
        self.reset();
        info
    }

    fn reset(&mut self) {
        self.failed = false;
        self.past_start = false;
        self.bom_len = 0;
        self.utf8 = Utf8Check::default();
        self.state = State::Start;
        self.stack.clear();
        self.capture = Capture::None;
        self.pending = Target::None;
        self.num_target = Target::None;
        self.high = 0;
        for s in &mut self.slots {
            s.reset();
        }
        self.payload_object = false;
        self.has_subagent = false;
        self.subagent_form = SubagentForm::None;
        self.trigger_turn = None;
        self.ordinal = None;
        self.history_start = None;
        self.window_count = 0;
    }

    fn slot(&self, f: Field) -> &Slot {
        &self.slots[f as usize]
    }

    fn resolve(&self) -> LineInfo {
        let text = |f: Field| self.slot(f).text(f.limit());
        let kind = match self.slot(Field::Type).bytes() {
            Some(b"session_meta") => Kind::SessionMeta,
            Some(b"response_item") => Kind::ResponseItem,
            Some(b"event_msg") => Kind::EventMsg,
            Some(b"turn_context") => Kind::TurnContext,
            Some(b"compacted") => Kind::Compacted,
            Some(b"inter_agent_communication_metadata") => Kind::InterAgentMetadata,
            _ => Kind::Other,
        };
        let payload_type = match self.slot(Field::PayloadType).bytes() {
            Some(b"task_started" | b"turn_started") => PayloadType::TaskStarted,
            Some(b"task_complete" | b"turn_complete") => PayloadType::TaskComplete,
            Some(b"turn_aborted") => PayloadType::TurnAborted,
            Some(b"token_count") => PayloadType::TokenCount,
            Some(b"function_call") => PayloadType::FunctionCall,
            Some(b"custom_tool_call") => PayloadType::CustomToolCall,
            Some(b"local_shell_call") => PayloadType::LocalShellCall,
            Some(b"tool_search_call") => PayloadType::ToolSearchCall,
            Some(b"function_call_output") => PayloadType::FunctionCallOutput,
            Some(b"custom_tool_call_output") => PayloadType::CustomToolCallOutput,
            Some(b"tool_search_output") => PayloadType::ToolSearchOutput,
            Some(b"agent_message") => PayloadType::AgentMessage,
            _ => PayloadType::Other,
        };
        let lam = self.slot(Field::LastAgentMessage);
        let meta = (kind == Kind::SessionMeta && self.payload_object).then(|| {
            Box::new(SessionMetaInfo {
                id: text(Field::Id),
                session_id: text(Field::SessionId),
                parent_thread_id: text(Field::ParentThreadId),
                spawn_parent_thread_id: text(Field::SpawnParentThreadId),
                thread_source: text(Field::ThreadSource),
                has_subagent_source: self.has_subagent,
                subagent_kind: text(Field::SubagentKind).or(match self.subagent_form {
                    SubagentForm::None => None,
                    SubagentForm::Other => Some("other".to_string()),
                    SubagentForm::ThreadSpawn => Some("thread_spawn".to_string()),
                }),
                spawn_agent_path: text(Field::SpawnAgentPath),
                spawn_agent_nickname: text(Field::SpawnAgentNickname),
                agent_path: text(Field::AgentPath),
                agent_nickname: text(Field::AgentNickname),
                agent_role: text(Field::AgentRole),
                cwd: text(Field::Cwd),
                cli_version: text(Field::CliVersion),
                originator: text(Field::Originator),
                history_start_ordinal: self.history_start.and_then(whole_number),
            })
        });
        LineInfo {
            malformed: false,
            kind,
            payload_type,
            payload_type_raw: text(Field::PayloadType),
            timestamp: if self.skip_timestamps {
                None
            } else {
                self.slot(Field::Timestamp)
                    .whole_text(MAX_SHORT_FIELD)
                    .and_then(Ts::parse_rfc3339)
            },
            call_id: text(Field::CallId),
            name: text(Field::Name),
            turn_id: text(Field::TurnId),
            last_agent_message: match lam.seen {
                Seen::Absent => None,
                Seen::Other => Some(String::new()),
                Seen::Str => lam.text(MAX_MESSAGE_FIELD),
            },
            codex_error_info: text(Field::CodexErrorInfo),
            error_message: text(Field::ErrorMessage),
            message: text(Field::Message),
            trigger_turn: self.trigger_turn,
            ordinal: self.ordinal.and_then(whole_number),
            rate_limits: self.windows[..self.window_count]
                .iter()
                .map(|(_, w)| *w)
                .collect(),
            meta,
        }
    }

    /// Checks `s[from..to]` as the next UTF-8 of the line. Bytes between the last checked one
    /// and `from` were skipped as ASCII, so they end any sequence still open.
    fn check_utf8(&mut self, s: &[u8], from: usize, to: usize) -> Result<(), Malformed> {
        let from = from.max(self.utf8_done);
        if from >= to {
            return Ok(());
        }
        if self.utf8.len > 0 && from != self.utf8_done {
            return Err(Malformed);
        }
        if !self.utf8.feed(&s[from..to]) {
            return Err(Malformed);
        }
        self.utf8_done = to;
        Ok(())
    }

    fn scan(&mut self, s: &[u8]) -> Result<(), Malformed> {
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = self.avx2 {
            // SAFETY: an `Avx2` exists only where `Avx2::detect` found AVX2 and BMI1.
            return unsafe { self.scan_avx2(avx2, s) };
        }
        self.scan_with(Baseline, s)
    }

    /// [`Classifier::scan`] compiled for AVX2 (and BMI1, which every AVX2 CPU has), so the
    /// block scan inlined into it uses 32-byte vectors.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1")]
    fn scan_avx2(&mut self, avx2: Avx2, s: &[u8]) -> Result<(), Malformed> {
        self.scan_with(avx2, s)
    }

    #[inline(always)]
    fn scan_with<B: Blocks>(&mut self, blocks: B, s: &[u8]) -> Result<(), Malformed> {
        let mut i = 0;
        while i < s.len() {
            if self.state == State::Str {
                i = self.scan_string(blocks, s, i)?;
            } else if self.step(s[i])? {
                i += 1;
            }
        }
        Ok(())
    }

    /// Scans string content from `s[i]` to the closing quote or the end of the chunk. Tool
    /// output has a `\n` or `\"` every few dozen bytes, so the common two-byte escapes are
    /// handled inside a whole block: one mask of the block's special bytes, then one step
    /// per special byte, with no rescan of the plain bytes between them. `\u` escapes and
    /// escapes cut by the chunk end go through `step`.
    #[inline(always)]
    fn scan_string<B: Blocks>(
        &mut self,
        blocks: B,
        s: &[u8],
        mut i: usize,
    ) -> Result<usize, Malformed> {
        while let Some(block) = s[i..].first_chunk::<BLOCK>() {
            let m = blocks.masks(block);
            if m.high != 0 {
                // Bytes after the string's end in this block are checked too: harmless, as
                // the whole line must be UTF-8, and `utf8_done` keeps them from a second check.
                let first = m.high.trailing_zeros() as usize;
                self.check_utf8(s, i + first, i + BLOCK)?;
            }
            if self.capture == Capture::None {
                // A block with no quote, backslash or control byte is all string body (base64
                // images and encrypted reasoning are nearly all such blocks).
                if m.quote | m.backslash | m.control == 0 {
                    i += BLOCK;
                    continue;
                }
                match skip_block::<B>(block, &m) {
                    Skip::End(p) => {
                        self.end_string();
                        return Ok(i + p + 1);
                    }
                    Skip::Past => {
                        i += BLOCK;
                        continue;
                    }
                    Skip::EscapeAtEnd => {
                        self.state = State::Escape;
                        return Ok(i + BLOCK);
                    }
                    Skip::Invalid => return Err(Malformed),
                    // A `\u` escape: decoded (and its surrogate rules checked) below.
                    Skip::Unicode => {}
                }
            }
            let mut mask = m.quote | m.backslash | m.control;
            // Block bytes before `start` are consumed; it passes `BLOCK` when the block's last
            // byte starts an escape.
            let mut start = 0;
            while mask != 0 {
                let p = mask.trailing_zeros() as usize;
                if self.capture != Capture::None {
                    self.emit(&block[start..p]);
                }
                match block[p] {
                    b'"' => {
                        self.end_string();
                        return Ok(i + p + 1);
                    }
                    b'\\' => match s.get(i + p + 1).copied().and_then(short_escape) {
                        Some(decoded) => {
                            if self.capture != Capture::None {
                                self.emit(&[decoded]);
                            }
                            start = p + 2;
                            // The escaped byte may itself be `"` or `\`.
                            mask &= u64::MAX.checked_shl(start as u32).unwrap_or(0);
                        }
                        None => {
                            self.state = State::Escape;
                            return Ok(i + p + 1);
                        }
                    },
                    // A raw control character inside a string.
                    _ => return Err(Malformed),
                }
            }
            if self.capture != Capture::None && start < BLOCK {
                self.emit(&block[start..]);
            }
            i += start.max(BLOCK);
        }
        // Fewer than a block left in this chunk: check all of it (at most 63 bytes).
        self.check_utf8(s, i, s.len())?;
        loop {
            let n = first_special(&s[i..]);
            if self.capture != Capture::None {
                self.emit(&s[i..i + n]);
            }
            i += n;
            let Some(&b) = s.get(i) else {
                return Ok(i);
            };
            match b {
                b'"' => {
                    self.end_string();
                    return Ok(i + 1);
                }
                b'\\' => match s.get(i + 1).copied().and_then(short_escape) {
                    Some(decoded) => {
                        if self.capture != Capture::None {
                            self.emit(&[decoded]);
                        }
                        i += 2;
                    }
                    None => {
                        self.state = State::Escape;
                        return Ok(i + 1);
                    }
                },
                // A raw control character inside a string.
                _ => return Err(Malformed),
            }
        }
    }

    /// One byte outside the plain part of a string; `Ok(false)` when the byte ended a number
    /// and must be looked at again. Inlined into both scans: as a call per byte outside
    /// strings it was a tenth of seeding.
    #[inline(always)]
    fn step(&mut self, b: u8) -> Result<bool, Malformed> {
        let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        match self.state {
            State::Start => {
                if b == b'{' {
                    self.push(Ctx::Root, false)?;
                    self.state = State::KeyOrEnd;
                } else if !ws {
                    // Valid JSON that is not an object is malformed too.
                    return Err(Malformed);
                }
            }
            State::Value => {
                if !ws {
                    self.begin_value(b)?;
                }
            }
            State::ValueOrEnd => {
                if b == b']' {
                    self.close(true)?;
                } else if !ws {
                    self.pending = Target::None;
                    self.begin_value(b)?;
                }
            }
            State::KeyOrEnd | State::Key => {
                if b == b'"' {
                    self.begin_key();
                } else if b == b'}' && self.state == State::KeyOrEnd {
                    self.close(false)?;
                } else if !ws {
                    return Err(Malformed);
                }
            }
            State::Colon => {
                if b == b':' {
                    self.state = State::Value;
                } else if !ws {
                    return Err(Malformed);
                }
            }
            State::AfterValue => {
                let array = self.stack.last().is_some_and(|f| f.array);
                match b {
                    b',' if array => {
                        self.pending = Target::None;
                        self.state = State::Value;
                    }
                    b',' => self.state = State::Key,
                    b']' => self.close(true)?,
                    b'}' => self.close(false)?,
                    _ if ws => {}
                    _ => return Err(Malformed),
                }
            }
            // `scan` takes every string byte through `scan_string` (which checks UTF-8); this
            // is its rule for ASCII, one byte at a time.
            State::Str => match b {
                b'"' => self.end_string(),
                b'\\' => self.state = State::Escape,
                0x00..=0x1F | 0x80.. => return Err(Malformed),
                _ => self.emit(&[b]),
            },
            State::Escape => {
                if b == b'u' {
                    self.hex = 0;
                    self.hex_left = 4;
                    self.state = State::Hex;
                } else {
                    let decoded = short_escape(b).ok_or(Malformed)?;
                    self.emit(&[decoded]);
                    self.state = State::Str;
                }
            }
            State::Hex => {
                let d = (b as char).to_digit(16).ok_or(Malformed)?;
                self.hex = self.hex * 16 + d;
                self.hex_left -= 1;
                if self.hex_left == 0 {
                    self.end_unicode_escape()?;
                }
            }
            State::LowBackslash => {
                if b != b'\\' {
                    return Err(Malformed);
                }
                self.state = State::LowU;
            }
            State::LowU => {
                if b != b'u' {
                    return Err(Malformed);
                }
                self.hex = 0;
                self.hex_left = 4;
                self.state = State::Hex;
            }
            State::Number => match self.num.push(b) {
                NumStep::More => {}
                NumStep::Fail => return Err(Malformed),
                NumStep::End => {
                    self.end_number()?;
                    return Ok(false);
                }
            },
            State::Literal => {
                if self.literal.get(self.literal_pos) != Some(&b) {
                    return Err(Malformed);
                }
                self.literal_pos += 1;
                if self.literal_pos == self.literal.len() {
                    self.state = State::AfterValue;
                }
            }
            State::Done => {
                if !ws {
                    return Err(Malformed);
                }
            }
        }
        Ok(true)
    }

    fn end_unicode_escape(&mut self) -> Result<(), Malformed> {
        let n = self.hex;
        let code = if self.high == 0 {
            match n {
                // A low surrogate with no high one before it.
                0xDC00..=0xDFFF => return Err(Malformed),
                0xD800..=0xDBFF => {
                    self.high = n;
                    self.state = State::LowBackslash;
                    return Ok(());
                }
                _ => n,
            }
        } else {
            if !(0xDC00..=0xDFFF).contains(&n) {
                return Err(Malformed);
            }
            let c = 0x10000 + ((self.high - 0xD800) << 10) + (n - 0xDC00);
            self.high = 0;
            c
        };
        let ch = char::from_u32(code).ok_or(Malformed)?;
        let mut utf8 = [0; 4];
        self.emit(ch.encode_utf8(&mut utf8).as_bytes());
        self.state = State::Str;
        Ok(())
    }

    fn emit(&mut self, bytes: &[u8]) {
        match self.capture {
            Capture::None => {}
            Capture::Key => self.key.push(bytes),
            Capture::Field(f) => self.slots[f as usize].push(bytes, f.limit()),
        }
    }

    fn push(&mut self, ctx: Ctx, array: bool) -> Result<(), Malformed> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(Malformed);
        }
        self.stack.push(Frame { ctx, array });
        Ok(())
    }

    fn close(&mut self, array: bool) -> Result<(), Malformed> {
        match self.stack.pop() {
            Some(f) if f.array == array => {}
            _ => return Err(Malformed),
        }
        self.state = if self.stack.is_empty() {
            State::Done
        } else {
            State::AfterValue
        };
        Ok(())
    }

    fn top(&self) -> Ctx {
        self.stack.last().map_or(Ctx::Opaque, |f| f.ctx)
    }

    fn begin_key(&mut self) {
        self.in_key = true;
        self.state = State::Str;
        self.capture = match self.top() {
            Ctx::Opaque => Capture::None,
            // Only the first key of the object form names the error kind.
            Ctx::ErrorInfo if self.slot(Field::CodexErrorInfo).seen == Seen::Other => {
                Capture::Field(Field::CodexErrorInfo)
            }
            Ctx::ErrorInfo => Capture::None,
            top => {
                self.key.clear(top == Ctx::RateLimits);
                Capture::Key
            }
        };
    }

    fn end_string(&mut self) {
        let capture = std::mem::replace(&mut self.capture, Capture::None);
        if self.in_key {
            self.in_key = false;
            self.state = State::Colon;
            self.pending = match capture {
                Capture::Key => self.key_target(),
                Capture::Field(f) => {
                    self.slots[f as usize].seen = Seen::Str;
                    Target::None
                }
                Capture::None => Target::None,
            };
        } else {
            if let Capture::Field(f) = capture {
                self.slots[f as usize].seen = Seen::Str;
            }
            self.state = State::AfterValue;
        }
    }

    /// Maps the key just read to what its value feeds, and forgets what an earlier
    /// occurrence of the same key captured (duplicate keys: the last one wins, as in serde_json).
    fn key_target(&mut self) -> Target {
        let key = self.key.known();
        let target = match self.top() {
            Ctx::Root => match key {
                b"type" => Target::Field(Field::Type),
                b"timestamp" => Target::Field(Field::Timestamp),
                b"payload" => Target::Payload,
                b"ordinal" => Target::Ordinal,
                _ => Target::None,
            },
            Ctx::Payload => match key {
                b"type" => Target::Field(Field::PayloadType),
                b"call_id" => Target::Field(Field::CallId),
                b"name" => Target::Field(Field::Name),
                b"turn_id" => Target::Field(Field::TurnId),
                b"last_agent_message" => Target::Field(Field::LastAgentMessage),
                b"error" => Target::Error,
                b"rate_limits" => Target::RateLimits,
                b"id" => Target::Field(Field::Id),
                b"session_id" => Target::Field(Field::SessionId),
                b"parent_thread_id" => Target::Field(Field::ParentThreadId),
                b"thread_source" => Target::Field(Field::ThreadSource),
                b"agent_path" => Target::Field(Field::AgentPath),
                b"agent_nickname" => Target::Field(Field::AgentNickname),
                b"agent_role" => Target::Field(Field::AgentRole),
                b"cwd" => Target::Field(Field::Cwd),
                b"cli_version" => Target::Field(Field::CliVersion),
                b"originator" => Target::Field(Field::Originator),
                b"source" => Target::Source,
                b"message" => Target::Field(Field::Message),
                b"trigger_turn" => Target::TriggerTurn,
                b"subagent_history_start_ordinal" => Target::HistoryStart,
                _ => Target::None,
            },
            Ctx::Error => match key {
                b"codex_error_info" => Target::ErrorInfo,
                b"message" => Target::Field(Field::ErrorMessage),
                _ => Target::None,
            },
            Ctx::RateLimits => Target::Window(self.key.hash),
            Ctx::Window(i) => match key {
                b"used_percent" => Target::UsedPercent(i),
                b"resets_at" => Target::ResetsAt(i),
                b"window_minutes" => Target::WindowMinutes(i),
                _ => Target::None,
            },
            Ctx::Source => match key {
                b"subagent" => Target::Subagent,
                _ => Target::None,
            },
            Ctx::Subagent => match key {
                b"thread_spawn" => {
                    self.subagent_form = SubagentForm::ThreadSpawn;
                    Target::ThreadSpawn
                }
                b"other" => {
                    if self.subagent_form == SubagentForm::None {
                        self.subagent_form = SubagentForm::Other;
                    }
                    Target::None
                }
                _ => Target::None,
            },
            Ctx::ThreadSpawn => match key {
                b"parent_thread_id" => Target::Field(Field::SpawnParentThreadId),
                b"agent_path" => Target::Field(Field::SpawnAgentPath),
                b"agent_nickname" => Target::Field(Field::SpawnAgentNickname),
                _ => Target::None,
            },
            Ctx::ErrorInfo | Ctx::Opaque => Target::None,
        };
        match target {
            Target::Field(f) => self.slots[f as usize].reset(),
            Target::Payload => {
                for s in &mut self.slots[FIRST_PAYLOAD_FIELD..] {
                    s.reset();
                }
                self.window_count = 0;
                self.payload_object = false;
                self.reset_subagent(false);
                self.trigger_turn = None;
                self.history_start = None;
            }
            Target::Error => {
                self.slots[Field::CodexErrorInfo as usize].reset();
                self.slots[Field::ErrorMessage as usize].reset();
            }
            Target::ErrorInfo => self.slots[Field::CodexErrorInfo as usize].reset(),
            Target::RateLimits => self.window_count = 0,
            Target::Source => self.reset_subagent(false),
            // `source.subagent` counts whatever its value, even `null`.
            Target::Subagent => self.reset_subagent(true),
            Target::ThreadSpawn => {
                for f in [
                    Field::SpawnParentThreadId,
                    Field::SpawnAgentPath,
                    Field::SpawnAgentNickname,
                ] {
                    self.slots[f as usize].reset();
                }
            }
            Target::UsedPercent(i) => self.windows[usize::from(i)].1.used_percent = None,
            Target::ResetsAt(i) => self.windows[usize::from(i)].1.resets_at = None,
            Target::WindowMinutes(i) => self.windows[usize::from(i)].1.window_minutes = None,
            Target::TriggerTurn => self.trigger_turn = None,
            Target::Ordinal => self.ordinal = None,
            Target::HistoryStart => self.history_start = None,
            Target::None | Target::Window(_) => {}
        }
        target
    }

    /// Forgets what an earlier `source` or `source.subagent` said (the last one wins).
    fn reset_subagent(&mut self, present: bool) {
        self.has_subagent = present;
        self.subagent_form = SubagentForm::None;
        for f in [
            Field::SubagentKind,
            Field::SpawnParentThreadId,
            Field::SpawnAgentPath,
            Field::SpawnAgentNickname,
        ] {
            self.slots[f as usize].reset();
        }
    }

    fn begin_value(&mut self, b: u8) -> Result<(), Malformed> {
        let target = std::mem::replace(&mut self.pending, Target::None);
        match target {
            Target::Field(f) => self.slots[f as usize].seen = Seen::Other,
            Target::ErrorInfo => self.slots[Field::CodexErrorInfo as usize].seen = Seen::Other,
            _ => {}
        }
        if b != b'{'
            && let Target::Window(hash) = target
        {
            self.remove_window(hash);
        }
        match b {
            b'"' => {
                self.in_key = false;
                self.state = State::Str;
                self.capture = match target {
                    Target::Field(f) => Capture::Field(f),
                    Target::ErrorInfo => Capture::Field(Field::CodexErrorInfo),
                    Target::Subagent => Capture::Field(Field::SubagentKind),
                    _ => Capture::None,
                };
            }
            b'{' => {
                let ctx = match target {
                    Target::Payload => {
                        self.payload_object = true;
                        Ctx::Payload
                    }
                    Target::Error => Ctx::Error,
                    Target::ErrorInfo => Ctx::ErrorInfo,
                    Target::RateLimits => Ctx::RateLimits,
                    Target::Window(hash) => self.open_window(hash),
                    Target::Source => Ctx::Source,
                    Target::Subagent => Ctx::Subagent,
                    Target::ThreadSpawn => Ctx::ThreadSpawn,
                    _ => Ctx::Opaque,
                };
                self.push(ctx, false)?;
                self.state = State::KeyOrEnd;
            }
            b'[' => {
                self.push(Ctx::Opaque, true)?;
                self.state = State::ValueOrEnd;
            }
            b'-' | b'0'..=b'9' => {
                self.num = NumberScan::start(b);
                self.num_target = target;
                self.state = State::Number;
            }
            b't' | b'f' | b'n' => {
                // A bad literal makes the whole line malformed, so the first byte decides.
                if target == Target::TriggerTurn && b != b'n' {
                    self.trigger_turn = Some(b == b't');
                }
                self.literal = match b {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                self.literal_pos = 1;
                self.state = State::Literal;
            }
            _ => return Err(Malformed),
        }
        Ok(())
    }

    fn end_number(&mut self) -> Result<(), Malformed> {
        let v = self.num.value().ok_or(Malformed)?;
        match std::mem::replace(&mut self.num_target, Target::None) {
            Target::UsedPercent(i) => self.windows[usize::from(i)].1.used_percent = Some(v),
            Target::ResetsAt(i) => self.windows[usize::from(i)].1.resets_at = Some(v),
            Target::WindowMinutes(i) => self.windows[usize::from(i)].1.window_minutes = Some(v),
            Target::Ordinal => self.ordinal = Some(v),
            Target::HistoryStart => self.history_start = Some(v),
            _ => {}
        }
        self.state = State::AfterValue;
        Ok(())
    }

    /// The window for a `rate_limits` member object: a repeated key replaces its earlier
    /// window in place (document order of first appearance, like an insertion-ordered map).
    fn open_window(&mut self, hash: u64) -> Ctx {
        let n = self.window_count;
        let i = match self.windows[..n].iter().position(|(h, _)| *h == hash) {
            Some(i) => i,
            None if n < MAX_WINDOWS => {
                self.window_count += 1;
                n
            }
            None => return Ctx::Opaque,
        };
        // The window's key is still in `key`: nothing is read between a key and its value.
        let name = crate::codex::KNOWN_WINDOWS
            .into_iter()
            .find(|n| n.as_bytes() == self.key.known());
        self.windows[i] = (
            hash,
            RateWindow {
                name,
                ..RateWindow::default()
            },
        );
        // MAX_WINDOWS fits in a u8.
        Ctx::Window(i as u8)
    }

    fn remove_window(&mut self, hash: u64) {
        let n = self.window_count;
        if let Some(i) = self.windows[..n].iter().position(|(h, _)| *h == hash) {
            self.windows.copy_within(i + 1..n, i);
            self.window_count -= 1;
        }
    }
}

/// The byte each two-character escape `\<b>` stands for, 0 for `u` and invalid escapes. A
/// table rather than a `match`: tool output has an escape every few dozen bytes, and the
/// jump table a `match` compiles to mispredicts on the mix of `\n` and `\"`.
static SHORT_ESCAPES: [u8; 256] = {
    let mut t = [0; 256];
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'/' as usize] = b'/';
    t[b'b' as usize] = 0x08;
    t[b'f' as usize] = 0x0C;
    t[b'n' as usize] = b'\n';
    t[b'r' as usize] = b'\r';
    t[b't' as usize] = b'\t';
    t
};

/// The byte a two-character escape `\<b>` stands for (`None` for `u` and invalid escapes).
#[inline(always)]
/// An ordinal as a line position: a whole number from 0 to 2^53 (where `f64` is still exact).
fn whole_number(v: f64) -> Option<u64> {
    (v.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&v)).then_some(v as u64)
}

fn short_escape(b: u8) -> Option<u8> {
    match SHORT_ESCAPES[usize::from(b)] {
        0 => None,
        decoded => Some(decoded),
    }
}

fn is_special(b: u8) -> bool {
    (b == b'"') | (b == b'\\') | (b < 0x20)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` (little-endian) that is `"`, `\` or a control byte. Bytes
/// after the first flagged one may be flagged wrongly (borrows), the first one never is.
#[inline(always)]
fn special_bits(w: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    (zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\'))) | control) & HIGHS
}

/// Index of the first special byte in `s`, a word at a time (the exact spot once a block
/// is known to hold one).
#[inline(always)]
fn first_special(s: &[u8]) -> usize {
    let (words, rest) = s.as_chunks::<8>();
    for (k, w) in words.iter().enumerate() {
        let bits = special_bits(u64::from_le_bytes(*w));
        if bits != 0 {
            return k * 8 + (bits.trailing_zeros() / 8) as usize;
        }
    }
    words.len() * 8
        + rest
            .iter()
            .position(|&b| is_special(b))
            .unwrap_or(rest.len())
}

/// Bytes per block of [`Classifier::scan_string`]: one bit of a `u64` mask each.
const BLOCK: usize = 64;

/// One bit per byte of a block, for each kind of byte a string body cares about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// Bytes below 0x20.
    control: u64,
    /// Its lowest set bit is at or before the first byte above ASCII; zero when there is none
    /// (exact on x86_64; elsewhere bit 0 stands for "somewhere").
    high: u64,
    /// The bytes that may follow a `\` (`"\/bfnrtu`), and the `u`s among them; filled only by
    /// a [`Blocks`] whose `ESCAPE_MASKS` is set.
    escape_chars: u64,
    letter_u: u64,
}

/// How a block's [`Masks`] are computed: [`Baseline`] with the vector unit every CPU of the
/// target has, or [`Avx2`] where the CPU running the watcher has more.
trait Blocks: Copy {
    /// [`Blocks::masks`] fills `escape_chars` and `letter_u`, so escapes are checked with two
    /// mask operations instead of a loop over the escaped bytes.
    const ESCAPE_MASKS: bool;

    fn masks(self, block: &[u8; BLOCK]) -> Masks;
}

#[derive(Clone, Copy)]
struct Baseline;

impl Blocks for Baseline {
    const ESCAPE_MASKS: bool = false;

    #[inline(always)]
    fn masks(self, block: &[u8; BLOCK]) -> Masks {
        block_masks(block)
    }
}

/// Proof that the running CPU has AVX2 and BMI1 (only [`Avx2::detect`] makes one). Codex runs
/// on x86_64 CPUs of the last decade, nearly all with AVX2: there a 64-byte block is two
/// vectors instead of four, and the bytes after a backslash are classified by a table
/// lookup in the same vectors instead of one at a time (tool output has an escape every
/// few dozen bytes, and a loop over them mispredicts on their varying count).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    fn detect() -> Option<Avx2> {
        (std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("bmi1"))
            .then_some(Avx2(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Blocks for Avx2 {
    const ESCAPE_MASKS: bool = true;

    #[inline(always)]
    fn masks(self, block: &[u8; BLOCK]) -> Masks {
        // SAFETY: an `Avx2` exists only where `detect` found AVX2 on this CPU.
        unsafe { block_masks_avx2(block) }
    }
}

/// Bits of the escape-letter classes in the nibble tables of [`block_masks_avx2`]: a byte is
/// in a class when both its low-nibble and its high-nibble entries hold the class's bit.
#[cfg(target_arch = "x86_64")]
const ESC_2X: u8 = 1; // `"` `/`
#[cfg(target_arch = "x86_64")]
const ESC_5X: u8 = 2; // `\`
#[cfg(target_arch = "x86_64")]
const ESC_6X: u8 = 4; // `b` `f` `n`
#[cfg(target_arch = "x86_64")]
const ESC_7X: u8 = 8; // `r` `t`
#[cfg(target_arch = "x86_64")]
const ESC_U: u8 = 16; // `u`

/// Entry `n`: the classes with a member whose low nibble is `n`.
#[cfg(target_arch = "x86_64")]
const ESC_LOW: [u8; 16] = {
    let mut t = [0; 16];
    t[0x2] = ESC_2X | ESC_6X | ESC_7X;
    t[0x4] = ESC_7X;
    t[0x5] = ESC_U;
    t[0x6] = ESC_6X;
    t[0xC] = ESC_5X;
    t[0xE] = ESC_6X;
    t[0xF] = ESC_2X;
    t
};

/// Entry `n`: the classes with a member whose high nibble is `n`.
#[cfg(target_arch = "x86_64")]
const ESC_HIGH: [u8; 16] = {
    let mut t = [0; 16];
    t[0x2] = ESC_2X;
    t[0x5] = ESC_5X;
    t[0x6] = ESC_6X;
    t[0x7] = ESC_7X | ESC_U;
    t
};

/// Bits at even and at odd positions.
const EVEN_BITS: u64 = 0x5555_5555_5555_5555;
const ODD_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// What [`skip_block`] found in a string body that no field captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Skip {
    /// The string ends at this index of the block (its closing quote).
    End(usize),
    /// The whole block is string body.
    Past,
    /// As `Past`, but the block's last byte starts an escape.
    EscapeAtEnd,
    /// A control byte or an invalid escape: the line is malformed.
    Invalid,
    /// A `\u` escape comes before the end: the byte-wise path must decode it.
    Unicode,
}

/// Skips a block of a string body that is not captured, without a branch per escape: which
/// bytes are escaped follows from the backslash mask alone (the byte after a run of
/// backslashes is escaped when the run's length is odd), so the closing quote is the first
/// quote not escaped. Escaped bytes are then only checked (one table lookup each), never
/// decoded. Tool output has an escape every few dozen bytes, and a branch on each (quote or
/// backslash?) mispredicts often enough to have been most of seeding.
///
/// The block must start inside a string body, not right after a backslash.
#[inline(always)]
fn skip_block<B: Blocks>(block: &[u8; BLOCK], m: &Masks) -> Skip {
    let b = m.backslash;
    let starts = b & !(b << 1);
    // Adding a run's start bit carries through the run to the bit just after it: that is the
    // escaped byte when the run's length is odd, i.e. when start and end+1 differ in parity.
    let after_even = b.wrapping_add(starts & EVEN_BITS) & !b;
    let (sum_odd, odd_run_at_end) = b.overflowing_add(starts & ODD_BITS);
    let after_odd = sum_odd & !b;
    let escaped = (after_even & ODD_BITS) | (after_odd & EVEN_BITS);
    let quotes = m.quote & !escaped;
    let end = quotes.trailing_zeros() as usize;
    let body = u64::MAX
        .checked_shl(end as u32)
        .map_or(u64::MAX, |high| !high);
    let mut e = escaped & body;
    let mut invalid = m.control & body != 0;
    let mut unicode = false;
    if B::ESCAPE_MASKS {
        invalid |= e & !m.escape_chars != 0;
        unicode = e & m.letter_u != 0;
    } else {
        while e != 0 {
            let c = block[e.trailing_zeros() as usize];
            invalid |= SHORT_ESCAPES[usize::from(c)] == 0;
            unicode |= c == b'u';
            e &= e - 1;
        }
    }
    if unicode {
        Skip::Unicode
    } else if invalid {
        Skip::Invalid
    } else if end < BLOCK {
        Skip::End(end)
    } else if odd_run_at_end {
        // A run of odd length reaching the last byte: the next block's first byte is escaped.
        Skip::EscapeAtEnd
    } else {
        Skip::Past
    }
}

/// Two masks of `block`: one bit per byte that is `"`, `\` or a control byte, and one whose
/// lowest set bit is at or before the first byte above ASCII (zero when there is none; exact
/// on x86_64, bit 0 for "somewhere" elsewhere). LLVM does not vectorise
/// the portable form (it builds the mask bit by bit, slower than the old word-at-a-time
/// scan), so each 64-bit architecture uses the vector unit every CPU of it has: SSE2 on
/// x86_64, NEON on aarch64 (Apple Silicon, Windows and Linux on Arm). Other targets take
/// [`special_mask_portable`], which the tests check the fast forms against on every target.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn block_masks(block: &[u8; BLOCK]) -> Masks {
    // SAFETY: compiled only when SSE2 is enabled for the whole build (the x86_64 baseline),
    // so the CPU running it has SSE2.
    unsafe { block_masks_sse2(block) }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[inline(always)]
fn block_masks(block: &[u8; BLOCK]) -> Masks {
    // SAFETY: compiled only when NEON is enabled for the whole build (the aarch64 baseline),
    // so the CPU running it has NEON.
    let special = unsafe { special_mask_neon(block) };
    // The three kinds apart, only where the vector mask found any (rare in a block).
    let mut m = Masks {
        high: non_ascii_hint(block),
        ..Masks::default()
    };
    let mut bits = special;
    while bits != 0 {
        let p = bits.trailing_zeros() as usize;
        sort_special(&mut m, block[p], p);
        bits &= bits - 1;
    }
    m
}

#[cfg(not(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
)))]
#[inline(always)]
fn block_masks(block: &[u8; BLOCK]) -> Masks {
    let mut m = Masks {
        high: non_ascii_hint(block),
        ..Masks::default()
    };
    for (p, &b) in block.iter().enumerate() {
        sort_special(&mut m, b, p);
    }
    m
}

/// Sets byte `b`'s bit at `p` in the mask of its kind, if it is special.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
#[inline(always)]
fn sort_special(m: &mut Masks, b: u8, p: usize) {
    let bit = 1u64 << p;
    match b {
        b'"' => m.quote |= bit,
        b'\\' => m.backslash |= bit,
        0x00..=0x1F => m.control |= bit,
        _ => {}
    }
}

/// The special bytes of a block (see [`block_masks`]), for the tests.
#[cfg(test)]
fn special_mask(block: &[u8; BLOCK]) -> u64 {
    let m = block_masks(block);
    m.quote | m.backslash | m.control
}

/// Where [`block_masks`] has no exact non-ASCII mask: bit 0 when the block holds any byte
/// above ASCII (checking from the block's start is then correct, only a little longer).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
#[inline(always)]
fn non_ascii_hint(block: &[u8; BLOCK]) -> u64 {
    let any = block
        .as_chunks::<8>()
        .0
        .iter()
        .fold(0, |acc, w| acc | u64::from_le_bytes(*w));
    u64::from(any & HIGHS != 0)
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn block_masks_sse2(block: &[u8; BLOCK]) -> Masks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_set1_epi8,
    };
    let quote = _mm_set1_epi8(b'"' as i8);
    let backslash = _mm_set1_epi8(b'\\' as i8);
    let space = _mm_set1_epi8(0x20);
    let mut m = Masks::default();
    for (k, lane) in block.as_chunks::<16>().0.iter().enumerate() {
        // SAFETY: `lane` is 16 readable bytes, and `loadu` allows any alignment.
        let v = unsafe { _mm_loadu_si128(lane.as_ptr().cast::<__m128i>()) };
        // `max(v, 0x20) == v` exactly when `v >= 0x20` (unsigned): not a control byte.
        let not_control = _mm_cmpeq_epi8(_mm_max_epu8(v, space), v);
        let shift = 16 * k;
        let bits = |x: __m128i| u64::from(_mm_movemask_epi8(x) as u16) << shift;
        m.quote |= bits(_mm_cmpeq_epi8(v, quote));
        m.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
        m.control |= u64::from(!(_mm_movemask_epi8(not_control) as u16)) << shift;
        // The sign bit of each byte: set exactly for the bytes above ASCII.
        m.high |= bits(v);
    }
    m
}

/// [`block_masks_sse2`] on 32-byte vectors, plus the escape-letter masks: two nibble lookups
/// (`vpshufb`) whose AND is the byte's class bits ([`ESC_LOW`], [`ESC_HIGH`]). A byte above
/// ASCII looks up high nibble 8-F, whose entries are all zero.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn block_masks_avx2(block: &[u8; BLOCK]) -> Masks {
    use std::arch::x86_64::{
        __m256i, _mm_loadu_si128, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_cmpeq_epi8,
        _mm256_loadu_si256, _mm256_max_epu8, _mm256_movemask_epi8, _mm256_set1_epi8,
        _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16,
    };
    // SAFETY: each table is 16 readable bytes, and `loadu` allows any alignment.
    let (low_table, high_table) = unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(ESC_LOW.as_ptr().cast())),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(ESC_HIGH.as_ptr().cast())),
        )
    };
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let space = _mm256_set1_epi8(0x20);
    let nibble = _mm256_set1_epi8(0x0F);
    let letter_u = _mm256_set1_epi8(ESC_U as i8);
    let zero = _mm256_setzero_si256();
    let mut m = Masks::default();
    for (k, half) in block.as_chunks::<32>().0.iter().enumerate() {
        // SAFETY: `half` is 32 readable bytes, and `loadu` allows any alignment.
        let v = unsafe { _mm256_loadu_si256(half.as_ptr().cast::<__m256i>()) };
        let shift = 32 * k;
        let bits = |x: __m256i| u64::from(_mm256_movemask_epi8(x) as u32) << shift;
        let not_bits = |x: __m256i| u64::from(!(_mm256_movemask_epi8(x) as u32)) << shift;
        m.quote |= bits(_mm256_cmpeq_epi8(v, quote));
        m.backslash |= bits(_mm256_cmpeq_epi8(v, backslash));
        // `max(v, 0x20) == v` exactly when `v >= 0x20` (unsigned): not a control byte.
        m.control |= not_bits(_mm256_cmpeq_epi8(_mm256_max_epu8(v, space), v));
        m.high |= bits(v);
        let low = _mm256_shuffle_epi8(low_table, _mm256_and_si256(v, nibble));
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
        let class = _mm256_and_si256(low, _mm256_shuffle_epi8(high_table, high));
        m.escape_chars |= not_bits(_mm256_cmpeq_epi8(class, zero));
        m.letter_u |= bits(_mm256_cmpeq_epi8(
            _mm256_and_si256(class, letter_u),
            letter_u,
        ));
    }
    m
}

/// NEON has no `movemask`: each lane's comparison result (0xFF or 0) keeps only the bit of
/// its position within 8 bytes, and three rounds of pairwise adds fold every 8 neighbouring
/// bytes into one, leaving the 64 bits in block order in the low half of the register.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[inline]
#[target_feature(enable = "neon")]
fn special_mask_neon(block: &[u8; BLOCK]) -> u64 {
    use std::arch::aarch64::{
        vandq_u8, vceqq_u8, vcltq_u8, vdupq_n_u8, vgetq_lane_u64, vld1q_u8, vorrq_u8, vpaddq_u8,
        vreinterpretq_u64_u8,
    };
    const POSITION_BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `POSITION_BITS` is 16 readable bytes.
    let position_bits = unsafe { vld1q_u8(POSITION_BITS.as_ptr()) };
    let quote = vdupq_n_u8(b'"');
    let backslash = vdupq_n_u8(b'\\');
    let space = vdupq_n_u8(0x20);
    let mut bits = [vdupq_n_u8(0); 4];
    for (k, lane) in block.as_chunks::<16>().0.iter().enumerate() {
        // SAFETY: `lane` is 16 readable bytes; `vld1q_u8` allows any alignment.
        let v = unsafe { vld1q_u8(lane.as_ptr()) };
        let special = vorrq_u8(
            vorrq_u8(vceqq_u8(v, quote), vceqq_u8(v, backslash)),
            vcltq_u8(v, space),
        );
        bits[k] = vandq_u8(special, position_bits);
    }
    let pairs01 = vpaddq_u8(bits[0], bits[1]);
    let pairs23 = vpaddq_u8(bits[2], bits[3]);
    let quads = vpaddq_u8(pairs01, pairs23);
    let bytes = vpaddq_u8(quads, quads);
    vgetq_lane_u64::<0>(vreinterpretq_u64_u8(bytes))
}

/// The plain form of the special-byte mask: what the vector forms must agree with.
#[cfg_attr(
    any(
        all(target_arch = "x86_64", target_feature = "sse2"),
        all(target_arch = "aarch64", target_feature = "neon")
    ),
    allow(dead_code)
)]
#[inline(always)]
fn special_mask_portable(block: &[u8; BLOCK]) -> u64 {
    let mut mask = 0;
    for (k, &b) in block.iter().enumerate() {
        mask |= u64::from(is_special(b)) << k;
    }
    mask
}

/// Classifies one whole line.
pub fn classify(line: &[u8]) -> LineInfo {
    let mut c = Classifier::new();
    c.feed(line);
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> LineInfo {
        let info = classify(line.as_bytes());
        assert!(!info.malformed, "unexpectedly malformed: {line}");
        info
    }

    fn bad(line: &[u8]) {
        let json = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let serde_ok =
            serde_json::from_slice::<serde_json::Value>(json).is_ok_and(|v| v.is_object());
        assert!(
            !serde_ok,
            "serde_json accepts {:?}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            classify(line),
            LineInfo::malformed(),
            "should be malformed: {:?}",
            String::from_utf8_lossy(line)
        );
    }

    #[test]
    fn special_mask_flags_exactly_quotes_backslashes_and_controls() {
        for b in 0..=u8::MAX {
            for pos in [0, 15, 16, 31, 47, 63] {
                let mut block = [b'a'; BLOCK];
                block[pos] = b;
                let want = if is_special(b) { 1u64 << pos } else { 0 };
                assert_eq!(special_mask(&block), want, "byte {b:#04x} at {pos}");
                assert_eq!(
                    special_mask_portable(&block),
                    want,
                    "byte {b:#04x} at {pos}"
                );
            }
        }
    }

    #[test]
    fn non_ascii_mask_points_at_or_before_the_first_high_byte() {
        assert_eq!(block_masks(&[b'a'; BLOCK]).high, 0);
        for b in 0x80..=u8::MAX {
            for pos in [0, 15, 16, 31, 47, 63] {
                let mut block = [b'a'; BLOCK];
                block[pos] = b;
                let high = block_masks(&block).high;
                assert!(
                    high != 0 && high.trailing_zeros() as usize <= pos,
                    "byte {b:#04x} at {pos}: {high:#x}"
                );
            }
        }
    }

    #[test]
    fn utf8_is_checked_at_every_block_and_chunk_edge() {
        // Whole, cut, overlong, surrogate and interrupted sequences in a string body, at every
        // offset from the blocks' edges, fed whole and in two pieces split at every byte.
        let seqs: [&[u8]; 8] = [
            "é".as_bytes(),
            "\u{1F680}".as_bytes(),
            b"\xC3",
            b"\xE2\x82",
            b"\xC3x\xA9",
            b"\xC0\xAF",
            b"\xED\xA0\x80",
            b"\xF4\x90\x80\x80",
        ];
        for pad in 0..(2 * BLOCK + 2) {
            for seq in seqs {
                let mut line = br#"{"payload":{"name":""#.to_vec();
                line.extend(std::iter::repeat_n(b'a', pad));
                line.extend_from_slice(seq);
                line.extend_from_slice(br#"z","call_id":"c"}}"#);
                let want_ok = serde_json::from_slice::<serde_json::Value>(&line).is_ok();
                assert_eq!(
                    !classify(&line).malformed,
                    want_ok,
                    "pad {pad} seq {seq:x?}"
                );
                for split in 0..line.len() {
                    let mut c = Classifier::new();
                    c.feed(&line[..split]);
                    c.feed(&line[split..]);
                    assert_eq!(
                        !c.finish().malformed,
                        want_ok,
                        "pad {pad} seq {seq:x?} split {split}"
                    );
                }
            }
        }
    }

    /// Bytes where the fast scans could go wrong: the three special kinds, both sides of
    /// the control boundary, bytes with the sign bit set (signed compares), and any byte.
    fn scan_byte() -> impl proptest::strategy::Strategy<Value = u8> {
        use proptest::prelude::*;
        prop_oneof![
            Just(b'"'),
            Just(b'\\'),
            Just(0x00),
            Just(0x1f),
            Just(0x20),
            Just(0x7f),
            Just(0x80),
            Just(0xa2),
            Just(0xdc),
            Just(0xff),
            Just(b'a'),
            any::<u8>(),
        ]
    }

    proptest::proptest! {
        /// The vector scan of this target (SSE2, NEON, or none) against the plain one.
        #[test]
        fn special_mask_agrees_with_the_portable_scan(
            bytes in proptest::collection::vec(scan_byte(), BLOCK)
        ) {
            let block: &[u8; BLOCK] = bytes.as_slice().try_into().unwrap();
            proptest::prop_assert_eq!(special_mask(block), special_mask_portable(block));
        }

        /// The branch-free skip of an uncaptured string block against a byte-at-a-time walk.
        #[test]
        fn skip_block_agrees_with_a_byte_walk(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => scan_byte(),
                    3 => proptest::strategy::Just(b'\\'),
                    1 => proptest::strategy::Just(b'u'),
                    1 => proptest::strategy::Just(b'n'),
                ],
                BLOCK,
            )
        ) {
            let block: &[u8; BLOCK] = bytes.as_slice().try_into().unwrap();
            proptest::prop_assert_eq!(skip_block::<Baseline>(block, &block_masks(block)), skip_by_walking(block));
        }

        /// The word-at-a-time scan against a byte-at-a-time search.
        #[test]
        fn first_special_agrees_with_a_byte_search(
            bytes in proptest::collection::vec(scan_byte(), 0..80)
        ) {
            let want = bytes.iter().position(|&b| is_special(b)).unwrap_or(bytes.len());
            proptest::prop_assert_eq!(first_special(&bytes), want);
        }
    }

    /// What [`skip_block`] must answer, one byte at a time.
    fn skip_by_walking(block: &[u8; BLOCK]) -> Skip {
        let (mut unicode, mut invalid) = (false, false);
        let mut p = 0;
        let found = loop {
            if p >= BLOCK {
                break Skip::Past;
            }
            match block[p] {
                b'"' => break Skip::End(p),
                b'\\' if p + 1 == BLOCK => break Skip::EscapeAtEnd,
                b'\\' => {
                    let c = block[p + 1];
                    unicode |= c == b'u';
                    invalid |= short_escape(c).is_none();
                    p += 2;
                }
                0x00..=0x1F => {
                    invalid = true;
                    p += 1;
                }
                _ => p += 1,
            }
        };
        if unicode {
            Skip::Unicode
        } else if invalid {
            Skip::Invalid
        } else {
            found
        }
    }

    #[test]
    fn skip_block_finds_the_unescaped_quote_after_backslash_runs() {
        for run in 0..8 {
            for at in 0..(BLOCK - run - 1) {
                let mut block = [b'a'; BLOCK];
                block[at..at + run].fill(b'\\');
                block[at + run] = b'"';
                let want = if run % 2 == 0 {
                    Skip::End(at + run)
                } else {
                    Skip::Past
                };
                assert_eq!(
                    skip_block::<Baseline>(&block, &block_masks(&block)),
                    want,
                    "run {run} at {at}"
                );
            }
        }
    }

    #[test]
    fn escapes_at_block_edges() {
        // Escapes whose backslash is the last byte of a block, escaped quotes and backslashes
        // (which must not end the string), in every alignment.
        for pad in 0..(2 * BLOCK) {
            let body = format!("{}\\\"\\\\\\n\\u00e9x", "a".repeat(pad));
            let line = format!(r#"{{"type":"{body}","payload":{{"call_id":"{body}"}}}}"#);
            let want: serde_json::Value = serde_json::from_str(&line).unwrap();
            let info = ok(&line);
            assert_eq!(info.call_id.as_deref(), want["payload"]["call_id"].as_str());
            let bad_line = format!(r#"{{"type":"{}\q"}}"#, "a".repeat(pad));
            bad(bad_line.as_bytes());
        }
    }

    #[test]
    fn envelope_kinds_and_timestamp() {
        for (t, k) in [
            ("session_meta", Kind::SessionMeta),
            ("response_item", Kind::ResponseItem),
            ("event_msg", Kind::EventMsg),
            ("turn_context", Kind::TurnContext),
            ("compacted", Kind::Compacted),
            ("world_state", Kind::Other),
        ] {
            let info = ok(&format!(
                r#"{{"timestamp":"2026-07-28T16:14:05.115Z","type":"{t}","payload":{{}}}}"#
            ));
            assert_eq!(info.kind, k);
            assert_eq!(
                info.timestamp,
                Ts::parse_rfc3339("2026-07-28T16:14:05.115Z"),
                "{t}"
            );
        }
        let info = ok(r#"{"timestamp":"yesterday","type":5}"#);
        assert_eq!((info.kind, info.timestamp), (Kind::Other, None));
        assert_eq!(ok("{}"), LineInfo::default());
    }

    #[test]
    fn payload_types_and_aliases() {
        for (t, p) in [
            ("task_started", PayloadType::TaskStarted),
            ("turn_started", PayloadType::TaskStarted),
            ("task_complete", PayloadType::TaskComplete),
            ("turn_complete", PayloadType::TaskComplete),
            ("turn_aborted", PayloadType::TurnAborted),
            ("token_count", PayloadType::TokenCount),
            ("function_call", PayloadType::FunctionCall),
            ("custom_tool_call", PayloadType::CustomToolCall),
            ("local_shell_call", PayloadType::LocalShellCall),
            ("tool_search_call", PayloadType::ToolSearchCall),
            ("function_call_output", PayloadType::FunctionCallOutput),
            ("custom_tool_call_output", PayloadType::CustomToolCallOutput),
            ("tool_search_output", PayloadType::ToolSearchOutput),
            ("agent_message", PayloadType::AgentMessage),
            ("agent_reasoning", PayloadType::Other),
        ] {
            let info = ok(&format!(
                r#"{{"type":"event_msg","payload":{{"type":"{t}"}}}}"#
            ));
            assert_eq!(info.payload_type, p, "{t}");
            assert_eq!(info.payload_type_raw.as_deref(), Some(t));
        }
        // Escaped spelling is the same key and the same value once decoded.
        let info = ok(r#"{"typ\u0065":"event_msg","payload":{"type":"task_\u0073tarted"}}"#);
        assert_eq!(info.kind, Kind::EventMsg);
        assert_eq!(info.payload_type, PayloadType::TaskStarted);
        let info = ok(r#"{"type":"event_msg","payload":{"type":null}}"#);
        assert_eq!(
            (info.payload_type, info.payload_type_raw),
            (PayloadType::Other, None)
        );
    }

    #[test]
    fn envelope_type_after_payload_still_counts() {
        let info = ok(
            r#"{"payload":{"turn_id":"t1","type":"task_complete","last_agent_message":"done"},"type":"event_msg","timestamp":"2026-07-28T16:14:05Z"}"#,
        );
        assert_eq!(info.kind, Kind::EventMsg);
        assert_eq!(info.payload_type, PayloadType::TaskComplete);
        assert_eq!(info.turn_id.as_deref(), Some("t1"));
        assert_eq!(info.last_agent_message.as_deref(), Some("done"));
        assert!(info.timestamp.is_some());
    }

    #[test]
    fn call_fields() {
        let info = ok(
            r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"cmd\":[\"ls\"]}","call_id":"call_1"}}"#,
        );
        assert_eq!(info.payload_type, PayloadType::FunctionCall);
        assert_eq!(info.name.as_deref(), Some("shell"));
        assert_eq!(info.call_id.as_deref(), Some("call_1"));
        let info = ok(r#"{"type":"response_item","payload":{"call_id":7,"name":["x"]}}"#);
        assert_eq!((info.call_id, info.name), (None, None));
    }

    #[test]
    fn call_id_after_huge_arguments_with_bounded_memory() {
        let mut line = br#"{"timestamp":"2026-07-28T16:14:05.115Z","type":"response_item","payload":{"type":"function_call","name":"apply_patch","arguments":""#.to_vec();
        let unit =
            "line of patch text with \\\"quotes\\\", a tab\\t, \u{e9}t\u{e9} and \u{1F600}\\n";
        while line.len() < 20 << 20 {
            line.extend_from_slice(unit.as_bytes());
        }
        line.extend_from_slice(br#"","call_id":"call_big"}}"#);
        let bound = 64 * 1024 + MAX_MESSAGE_FIELD;
        let mut c = Classifier::new();
        for chunk in line.chunks(64 * 1024) {
            c.feed(chunk);
            assert!(c.retained_bytes() < bound, "{}", c.retained_bytes());
        }
        let info = c.finish();
        assert!(!info.malformed);
        assert_eq!(info.call_id.as_deref(), Some("call_big"));
        assert_eq!(info.name.as_deref(), Some("apply_patch"));
        assert!(c.retained_bytes() < bound);
    }

    #[test]
    fn last_agent_message_forms() {
        let lam = |v: &str| {
            ok(&format!(
                r#"{{"type":"event_msg","payload":{{"type":"task_complete","last_agent_message":{v}}}}}"#
            ))
            .last_agent_message
        };
        assert_eq!(lam("null"), Some(String::new()));
        assert_eq!(lam("42"), Some(String::new()));
        assert_eq!(
            lam(r#""line\none \"quoted\" \u00e9\ud83d\ude00""#).as_deref(),
            Some("line\none \"quoted\" \u{e9}\u{1F600}")
        );
        assert_eq!(
            ok(r#"{"payload":{"type":"task_complete"}}"#).last_agent_message,
            None
        );
        // Long messages are cut at the limit, on a character boundary.
        let long = "\u{e9}".repeat(MAX_MESSAGE_FIELD);
        let got = lam(&format!("\"{long}\"")).unwrap_or_default();
        assert_eq!(got.len(), MAX_MESSAGE_FIELD);
        assert!(long.starts_with(&got));
        let odd = format!("a{long}");
        let got = lam(&format!("\"{odd}\"")).unwrap_or_default();
        assert_eq!(got.len(), MAX_MESSAGE_FIELD - 1);
    }

    #[test]
    fn short_fields_are_cut_at_a_char_boundary() {
        let id = format!("x{}", "\u{20AC}".repeat(MAX_SHORT_FIELD));
        let info = ok(&format!(r#"{{"payload":{{"call_id":"{id}"}}}}"#));
        let got = info.call_id.unwrap_or_default();
        assert!(got.len() <= MAX_SHORT_FIELD && got.len() > MAX_SHORT_FIELD - 3);
        assert!(id.starts_with(&got));
    }

    #[test]
    fn codex_error_info_string_or_first_key() {
        let cei = |v: &str| {
            ok(&format!(
                r#"{{"type":"event_msg","payload":{{"type":"task_complete","error":{{"message":"m","codex_error_info":{v}}}}}}}"#
            ))
            .codex_error_info
        };
        assert_eq!(
            cei(r#""usage_limit_exceeded""#).as_deref(),
            Some("usage_limit_exceeded")
        );
        assert_eq!(
            cei(r#"{"response_too_many_failed_attempts":{"http_status_code":429}}"#).as_deref(),
            Some("response_too_many_failed_attempts")
        );
        assert_eq!(cei(r#"{"b":1,"a":2}"#).as_deref(), Some("b"));
        assert_eq!(cei("{}"), None);
        assert_eq!(cei("null"), None);
        assert_eq!(cei("[\"x\"]"), None);
    }

    #[test]
    fn rate_limit_windows_in_document_order() {
        let info = ok(
            r#"{"type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":{"limit_id":"codex","secondary":{"used_percent":18.0,"window_minutes":10080,"resets_at":1785555600},"primary":{"used_percent":100,"resets_at":1.7852653315e9},"credits":null,"weird":{"used_percent":"lots"}}}}"#,
        );
        assert_eq!(
            info.rate_limits,
            vec![
                RateWindow {
                    name: Some("secondary"),
                    used_percent: Some(18.0),
                    window_minutes: Some(10080.0),
                    resets_at: Some(1785555600.0)
                },
                RateWindow {
                    name: Some("primary"),
                    used_percent: Some(100.0),
                    window_minutes: None,
                    resets_at: Some(1785265331.5)
                },
                RateWindow::default(),
            ]
        );
        let many: Vec<String> = (0..12)
            .map(|i| format!(r#""w{i}":{{"used_percent":{i}}}"#))
            .collect();
        let info = ok(&format!(
            r#"{{"payload":{{"rate_limits":{{{}}}}}}}"#,
            many.join(",")
        ));
        assert_eq!(info.rate_limits.len(), 8);
        assert_eq!(info.rate_limits[7].used_percent, Some(7.0));
        // A repeated member replaces its window in place; a non-object one removes it.
        let info = ok(
            r#"{"payload":{"rate_limits":{"a":{"used_percent":1},"b":{"used_percent":2},"c":{"used_percent":3},"a":{"used_percent":4},"b":null}}}"#,
        );
        let used: Vec<_> = info.rate_limits.iter().map(|w| w.used_percent).collect();
        assert_eq!(used, vec![Some(4.0), Some(3.0)]);
        assert!(
            ok(r#"{"payload":{"rate_limits":null}}"#)
                .rate_limits
                .is_empty()
        );
    }

    #[test]
    fn session_meta_fields() {
        let info = ok(
            r#"{"timestamp":"2026-07-28T16:14:05.115Z","type":"session_meta","payload":{"session_id":"root","id":"child","parent_thread_id":"parent","thread_source":"subagent","agent_path":"a/b","agent_nickname":"Hypatia","agent_role":"worker","source":{"subagent":{"thread_spawn":{"parent_thread_id":"spawn-parent","depth":1}}},"cwd":"/home/dev/src/acme-api","cli_version":"0.145.0","originator":"codex_cli_rs","instructions":"long text"}}"#,
        );
        let m = info.meta.expect("session_meta has meta");
        assert_eq!(
            *m,
            SessionMetaInfo {
                id: Some("child".into()),
                session_id: Some("root".into()),
                parent_thread_id: Some("parent".into()),
                spawn_parent_thread_id: Some("spawn-parent".into()),
                thread_source: Some("subagent".into()),
                has_subagent_source: true,
                subagent_kind: Some("thread_spawn".into()),
                spawn_agent_path: None,
                spawn_agent_nickname: None,
                agent_path: Some("a/b".into()),
                agent_nickname: Some("Hypatia".into()),
                agent_role: Some("worker".into()),
                cwd: Some("/home/dev/src/acme-api".into()),
                cli_version: Some("0.145.0".into()),
                originator: Some("codex_cli_rs".into()),
                history_start_ordinal: None,
            }
        );
        let m = ok(r#"{"payload":{"source":{"subagent":null},"id":"x"},"type":"session_meta"}"#)
            .meta
            .expect("meta");
        assert!(m.has_subagent_source);
        assert_eq!(m.id.as_deref(), Some("x"));
        let m = ok(r#"{"type":"session_meta","payload":{"source":"cli"}}"#)
            .meta
            .expect("meta");
        assert!(!m.has_subagent_source);
        assert_eq!(
            ok(r#"{"type":"event_msg","payload":{"id":"x"}}"#).meta,
            None
        );
    }

    #[test]
    fn subagent_forms_name_their_kind_and_spawn_fields() {
        let meta = |source: &str| {
            ok(&format!(
                r#"{{"type":"session_meta","payload":{{"id":"c","source":{source}}}}}"#
            ))
            .meta
            .expect("meta")
        };
        for (source, kind) in [
            (r#"{"subagent":"review"}"#, Some("review")),
            (
                r#"{"subagent":"memory_consolidation"}"#,
                Some("memory_consolidation"),
            ),
            (r#"{"subagent":{"other":"guardian"}}"#, Some("other")),
            (
                r#"{"subagent":{"other":"x","thread_spawn":{"parent_thread_id":"p"}}}"#,
                Some("thread_spawn"),
            ),
            (r#"{"subagent":null}"#, None),
            (r#""exec""#, None),
        ] {
            assert_eq!(meta(source).subagent_kind.as_deref(), kind, "{source}");
        }
        let m = meta(
            r#"{"subagent":{"thread_spawn":{"parent_thread_id":"c-1","depth":2,"agent_path":"/root/w/lint","agent_nickname":"Noether","agent_role":"worker"}}}"#,
        );
        assert_eq!(m.spawn_parent_thread_id.as_deref(), Some("c-1"));
        assert_eq!(m.spawn_agent_path.as_deref(), Some("/root/w/lint"));
        assert_eq!(m.spawn_agent_nickname.as_deref(), Some("Noether"));
        // A later `subagent` replaces the earlier one entirely.
        let m =
            meta(r#"{"subagent":{"thread_spawn":{"parent_thread_id":"p"}},"subagent":"review"}"#);
        assert_eq!(m.subagent_kind.as_deref(), Some("review"));
        assert_eq!(m.spawn_parent_thread_id, None);
    }

    #[test]
    fn current_shapes_error_message_agent_text_and_queued_mail() {
        let info = ok(
            r#"{"timestamp":"2026-07-28T22:00:00.000Z","ordinal":41,"type":"event_msg","payload":{"type":"task_complete","turn_id":"t","last_agent_message":null,"error":{"message":"You've hit your usage limit. Try again at 10:45 PM.","codex_error_info":"usage_limit_exceeded"}}}"#,
        );
        assert_eq!(
            info.error_message.as_deref(),
            Some("You've hit your usage limit. Try again at 10:45 PM.")
        );
        assert_eq!(info.message, None);
        let info =
            ok(r#"{"type":"event_msg","payload":{"type":"agent_message","message":"Done."}}"#);
        assert_eq!(info.payload_type, PayloadType::AgentMessage);
        assert_eq!(info.message.as_deref(), Some("Done."));
        for (payload, expect) in [
            (r#"{"trigger_turn":false}"#, Some(false)),
            (r#"{"trigger_turn":true}"#, Some(true)),
            (r#"{"trigger_turn":1}"#, None),
            (r#"{"trigger_turn":true,"trigger_turn":null}"#, None),
            (r#"{}"#, None),
        ] {
            let info = ok(&format!(
                r#"{{"timestamp":"2026-07-28T22:00:00.000Z","type":"inter_agent_communication_metadata","payload":{payload}}}"#
            ));
            assert_eq!(info.kind, Kind::InterAgentMetadata);
            assert_eq!(info.trigger_turn, expect, "{payload}");
        }
        let mail = ok(
            r#"{"type":"response_item","payload":{"type":"agent_message","author":"/root","recipient":"/root/worker","content":[{"type":"input_text","text":"later"}]}}"#,
        );
        assert_eq!(
            (mail.kind, mail.payload_type),
            (Kind::ResponseItem, PayloadType::AgentMessage)
        );
        // Other current kinds are shapes the fold ignores: nothing but the kind is read.
        for line in [
            r#"{"type":"world_state","ordinal":3,"payload":{"state":"{\"cwd\":\"/x\"}"}}"#,
            r#"{"type":"token_usage_record","payload":{"turn_id":"t","usage":{"input_tokens":1}}}"#,
        ] {
            let info = ok(line);
            assert_eq!(info.kind, Kind::Other, "{line}");
            assert_eq!(info.payload_type, PayloadType::Other, "{line}");
        }
    }

    /// S6: the envelope's `ordinal` and the header's `subagent_history_start_ordinal`, read
    /// only as whole numbers (last occurrence wins; `null`, text or fractions are absent).
    #[test]
    fn ordinals_and_the_history_start() {
        let info = ok(
            r#"{"ordinal":0,"type":"session_meta","payload":{"id":"c","history_mode":"paginated","subagent_history_start_ordinal":18}}"#,
        );
        assert_eq!(info.ordinal, Some(0));
        assert_eq!(info.meta.unwrap().history_start_ordinal, Some(18));
        for (line, want) in [
            (
                r#"{"type":"event_msg","ordinal":17,"payload":{"type":"token_count"}}"#,
                Some(17),
            ),
            (r#"{"type":"event_msg","payload":{"ordinal":3}}"#, None),
            (r#"{"ordinal":"3","type":"x"}"#, None),
            (r#"{"ordinal":2.5,"type":"x"}"#, None),
            (r#"{"ordinal":-1,"type":"x"}"#, None),
            (r#"{"ordinal":4,"ordinal":null,"type":"x"}"#, None),
            (r#"{"ordinal":4,"ordinal":5,"type":"x"}"#, Some(5)),
            (r#"{"ordinal":1e2,"type":"x"}"#, Some(100)),
        ] {
            assert_eq!(ok(line).ordinal, want, "{line}");
        }
        let meta = |payload: &str| {
            ok(&format!(r#"{{"type":"session_meta","payload":{payload}}}"#))
                .meta
                .unwrap()
                .history_start_ordinal
        };
        assert_eq!(meta(r#"{"subagent_history_start_ordinal":null}"#), None);
        assert_eq!(
            meta(r#"{"source":{"subagent_history_start_ordinal":4}}"#),
            None
        );
        assert_eq!(meta(r#"{"subagent_history_start_ordinal":7}"#), Some(7));
    }

    #[test]
    fn session_meta_without_a_payload_object_has_no_meta() {
        for payload in ["", r#","payload":null"#, r#","payload":["id"]"#] {
            let info = ok(&format!(r#"{{"type":"session_meta"{payload}}}"#));
            assert_eq!(
                (info.kind, info.meta),
                (Kind::SessionMeta, None),
                "{payload}"
            );
        }
        let info = ok(r#"{"type":"session_meta","payload":{"id":"a"},"payload":"x"}"#);
        assert_eq!(info.meta, None);
    }

    #[test]
    fn memory_stays_bounded_with_every_field_huge_and_deep_nesting() {
        // 180 KB a field (18 of them): each far past every cap, so what is kept is the caps.
        let huge = r"\u00e9x\\".repeat(20_000);
        let mut line = String::from(r#"{"type":"session_meta","timestamp":""#);
        line.push_str(&huge);
        line.push_str(r#"","payload":{"#);
        for key in [
            "type",
            "call_id",
            "name",
            "turn_id",
            "last_agent_message",
            "id",
            "session_id",
            "parent_thread_id",
            "thread_source",
            "agent_path",
            "agent_nickname",
            "agent_role",
            "cwd",
            "cli_version",
            "originator",
        ] {
            line.push_str(&format!(r#""{key}":"{huge}","#));
        }
        line.push_str(&format!(
            r#""error":{{"codex_error_info":{{"{huge}":1}}}},"source":{{"subagent":{{"thread_spawn":{{"parent_thread_id":"{huge}"}}}}}},"deep":"#
        ));
        line.push_str(&"[".repeat(MAX_DEPTH - 2));
        line.push_str(&"]".repeat(MAX_DEPTH - 2));
        line.push_str("}}");
        let mut c = Classifier::new();
        let mut peak = 0;
        for chunk in line.as_bytes().chunks(4096) {
            c.feed(chunk);
            peak = peak.max(c.retained_bytes());
        }
        let info = c.finish();
        assert!(!info.malformed);
        assert_eq!(
            info.last_agent_message.map(|m| m.len()),
            Some(MAX_MESSAGE_FIELD)
        );
        assert_eq!(
            info.meta.and_then(|m| m.cwd).map(|m| m.len()),
            Some(MAX_SHORT_FIELD)
        );
        assert!(peak < 64 * 1024 + MAX_MESSAGE_FIELD, "{peak}");
    }

    #[test]
    fn duplicate_keys_last_one_wins() {
        let info = ok(
            r#"{"type":"event_msg","payload":{"call_id":"a","call_id":"b"},"type":"response_item"}"#,
        );
        assert_eq!(info.kind, Kind::ResponseItem);
        assert_eq!(info.call_id.as_deref(), Some("b"));
        let info = ok(r#"{"payload":{"call_id":"a","name":"n"},"payload":{"turn_id":"t"}}"#);
        assert_eq!(
            (info.call_id, info.name, info.turn_id.as_deref()),
            (None, None, Some("t"))
        );
        let info = ok(r#"{"payload":{"call_id":"a"},"payload":null}"#);
        assert_eq!(info.call_id, None);
    }

    #[test]
    fn bom_crlf_and_whitespace() {
        let info = classify(b"\xEF\xBB\xBF{\"type\":\"event_msg\"}\r");
        assert_eq!((info.malformed, info.kind), (false, Kind::EventMsg));
        let mut c = Classifier::new();
        for b in b"\xEF\xBB\xBF {\"type\" : \"compacted\" } \t\r" {
            c.feed(&[*b]);
        }
        assert_eq!(c.finish().kind, Kind::Compacted);
        bad(b"\xEF\xBB\xBF");
        bad(b"\xEF\xBB{}");
        bad(b"\xEF\xBB\xBF\xEF\xBB\xBF{}");
        bad(b"{}\r\r x");
    }

    #[test]
    fn not_objects_are_malformed() {
        for line in [
            &b""[..],
            b"   ",
            b"42",
            b"[]",
            b"\"x\"",
            b"null",
            b"{",
            b"{\"a\":1",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
            b"{}{}",
            b"{} 1",
            b"{\"a\":[1,]}",
            b"{\"a\":tru}",
            b"{\"a\":nul}",
            b"{\"a\":01}",
            b"{\"a\":1.}",
            b"{\"a\":1.e5}",
            b"{\"a\":-}",
            b"{\"a\":+1}",
            b"{\"a\":.5}",
            b"{\"a\":1e}",
            b"{\"a\":1e+}",
            b"{\"a\":1e400}",
            b"{\"a\":-1e400}",
            b"{\"a\":1e9999999999}",
            b"{\"a\":\"\\x\"}",
            b"{\"a\":\"\\u12\"}",
            b"{\"a\":\"\\udc00\"}",
            b"{\"a\":\"\\ud800\"}",
            b"{\"a\":\"\\ud800\\u0041\"}",
            b"{\"a\":\"\\ud800\\n\"}",
            b"{\"a\":\"tab\there\"}",
            b"{\"a\":\"nul\x00\"}",
            b"{\"a\":1}\x00",
            b"\x00{}",
            b"{\"a\":\"\xff\"}",
            b"{\"a\":\"\xe2\x82\"}",
            b"{\"a\":\"\xed\xa0\x80\"}",
            b"{\"\xc3\":1}",
            b"{\"a\":1}\xc3\xa9",
        ] {
            bad(line);
        }
    }

    #[test]
    fn numbers_match_serde_json() {
        for n in [
            "0",
            "-0",
            "1",
            "-1",
            "1.5",
            "1e5",
            "1E+5",
            "1e-5",
            "0e99999999999",
            "1e-400",
            "0.0000000000000000000000000000001",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1.7976931348623157e308",
            "1e308",
            "12345678901234567890123e-10",
            "1e-99999999999",
        ] {
            let line = format!(r#"{{"payload":{{"rate_limits":{{"p":{{"used_percent":{n}}}}}}}}}"#);
            let expected: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{n}: {e}"));
            let info = ok(&line);
            assert_eq!(
                info.rate_limits[0].used_percent,
                expected["payload"]["rate_limits"]["p"]["used_percent"].as_f64(),
                "{n}"
            );
        }
    }

    #[test]
    fn unicode_escapes_decode() {
        let info = ok(r#"{"payload":{"name":"\u0041\u00e9\u20ac\ud83d\ude00\/\b\f\r\t\u0000"}}"#);
        assert_eq!(
            info.name.as_deref(),
            Some("A\u{e9}\u{20AC}\u{1F600}/\u{8}\u{c}\r\t\0")
        );
        let info = ok(r#"{"payload":{"name":"\uD83D\uDE00"}}"#);
        assert_eq!(info.name.as_deref(), Some("\u{1F600}"));
    }

    #[test]
    fn depth_limit() {
        let nest = |d: usize| {
            let mut s = String::from("{\"a\":");
            s.push_str(&"[".repeat(d - 1));
            s.push_str(&"]".repeat(d - 1));
            s.push('}');
            s
        };
        assert!(!classify(nest(MAX_DEPTH).as_bytes()).malformed);
        assert!(classify(nest(MAX_DEPTH + 1).as_bytes()).malformed);
        // Far deeper input stays bounded and is simply malformed.
        assert!(classify(nest(100_000).as_bytes()).malformed);
    }

    #[test]
    fn a_classifier_is_reusable_after_any_line() {
        let mut c = Classifier::new();
        c.feed(b"{\"type\":\"event_msg\",\"payload\":{\"call_id\":\"x\"");
        assert!(c.finish().malformed);
        c.feed(b"\xEF\xBB");
        assert!(c.finish().malformed);
        c.feed(br#"{"type":"response_item","payload":{"type":"function_call_output"}}"#);
        let info = c.finish();
        assert_eq!(info.kind, Kind::ResponseItem);
        assert_eq!(info.payload_type, PayloadType::FunctionCallOutput);
        assert_eq!(info.call_id, None);
    }

    #[test]
    fn utf8_split_across_chunks() {
        let line = "{\"payload\":{\"name\":\"\u{1F600}\u{e9}\"}}".as_bytes();
        for split in 0..line.len() {
            let mut c = Classifier::new();
            c.feed(&line[..split]);
            c.feed(&line[split..]);
            assert_eq!(
                c.finish().name.as_deref(),
                Some("\u{1F600}\u{e9}"),
                "split {split}"
            );
        }
    }

    /// The AVX2 masks of every byte at every lane edge against the byte rules (a CPU without
    /// AVX2 never uses them, and checks nothing here).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_masks_flag_exactly_their_bytes() {
        let Some(avx2) = Avx2::detect() else {
            return;
        };
        for b in 0..=u8::MAX {
            for pos in [0, 1, 15, 16, 31, 32, 33, 47, 48, 63] {
                let mut block = [b'a'; BLOCK];
                block[pos] = b;
                let m = avx2.masks(&block);
                let at = |yes: bool| if yes { 1u64 << pos } else { 0 };
                let what = format!("byte {b:#04x} at {pos}");
                assert_eq!(m.quote, at(b == b'"'), "{what}");
                assert_eq!(m.backslash, at(b == b'\\'), "{what}");
                assert_eq!(m.control, at(b < 0x20), "{what}");
                assert_eq!(m.high, at(b >= 0x80), "{what}");
                assert_eq!(
                    m.escape_chars,
                    at(short_escape(b).is_some() || b == b'u'),
                    "{what}"
                );
                assert_eq!(m.letter_u, at(b == b'u'), "{what}");
            }
        }
    }

    /// One piece of a generated string body: what the block scans treat differently.
    fn body_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            6 => proptest::collection::vec(b'a'..=b'z', 0..90),
            // Runs spanning whole blocks with no special byte (base64, encrypted reasoning).
            1 => proptest::collection::vec(b'A'..=b'Z', 60..300),
            2 => proptest::sample::select(vec![
                &b"\\n"[..], b"\\\"", b"\\\\", b"\\/", b"\\t", b"\\b", b"\\f", b"\\r",
                b"\\u00e9", b"\\ud83d\\ude80", b"\\\\\\\"",
            ])
            .prop_map(<[u8]>::to_vec),
            1 => proptest::sample::select(vec![
                "é", "日本語", "\u{1F680}", " — ", "naïve",
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
        ]
    }

    fn body() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        proptest::collection::vec(body_piece(), 0..40).prop_map(|p| p.concat())
    }

    /// What makes a line malformed inside a string body: bad escapes, controls, bad UTF-8, a
    /// raw quote that ends the string early, a backslash that escapes the closing quote.
    fn bad_piece() -> impl proptest::strategy::Strategy<Value = &'static [u8]> {
        proptest::sample::select(vec![
            &b"\\q"[..],
            b"\\u12",
            b"\\udc00",
            b"\\ud800x",
            b"\x01",
            b"\x1f",
            b"\xff",
            b"\xc3",
            b"\xe2\x82",
            b"\xc0\xaf",
            b"\xed\xa0\x80",
            b"\"",
            b"\\",
        ])
    }

    /// A rollout-like line whose string bodies (captured fields and skipped ones) hold
    /// generated text, sometimes after a BOM.
    fn generated_line() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            body(),
            body(),
            body(),
            body(),
            proptest::sample::select(vec!["function_call", "token_count", "session_meta"]),
            // A quarter of the lines get one bad piece somewhere in one body.
            proptest::option::weighted(
                0.25,
                (bad_piece(), 0..4usize, any::<proptest::sample::Index>()),
            ),
        )
            .prop_map(|(bom, name, output, call_id, key, kind, bad)| {
                let mut bodies = [name, output, call_id, key];
                if let Some((piece, which, at)) = bad {
                    let b = &mut bodies[which];
                    let at = at.index(b.len() + 1);
                    b.splice(at..at, piece.iter().copied());
                }
                let [name, output, call_id, key] = bodies;
                let mut line = Vec::new();
                if bom {
                    line.extend_from_slice(b"\xEF\xBB\xBF");
                }
                for part in [
                    &br#"{"type":"response_item","payload":{"type":""#[..],
                    kind.as_bytes(),
                    br#"","name":""#,
                    &name,
                    br#"","output":""#,
                    &output,
                    br#"",""#,
                    &key,
                    br#"":[1,{"x":""#,
                    &output,
                    br#""}],"call_id":""#,
                    &call_id,
                    br#"","message":""#,
                    &name,
                    br#""}}"#,
                ] {
                    line.extend_from_slice(part);
                }
                line
            })
    }

    proptest::proptest! {
        /// The AVX2 skip of an uncaptured block against a byte-at-a-time walk.
        #[cfg(target_arch = "x86_64")]
        #[test]
        fn avx2_skip_block_agrees_with_a_byte_walk(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => scan_byte(),
                    3 => proptest::strategy::Just(b'\\'),
                    1 => proptest::strategy::Just(b'u'),
                    1 => proptest::strategy::Just(b'n'),
                ],
                BLOCK,
            )
        ) {
            if let Some(avx2) = Avx2::detect() {
                let block: &[u8; BLOCK] = bytes.as_slice().try_into().unwrap();
                proptest::prop_assert_eq!(
                    skip_block::<Avx2>(block, &avx2.masks(block)),
                    skip_by_walking(block)
                );
            }
        }

        /// Both scans (AVX2 where the CPU has it, and the baseline) give the same answer on
        /// generated lines, fed whole or in two pieces split anywhere, and that answer is
        /// malformed exactly when serde_json rejects the line.
        #[test]
        fn both_scans_agree_with_each_other_and_serde_json(
            line in generated_line(),
            split in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let json = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
            let serde_ok = serde_json::from_slice::<serde_json::Value>(json).is_ok();
            let whole = classify(&line);
            proptest::prop_assert_eq!(whole.malformed, !serde_ok);
            let at = split.index(line.len() + 1);
            for mut c in [Classifier::new(), Classifier::baseline()] {
                c.feed(&line[..at]);
                c.feed(&line[at..]);
                proptest::prop_assert_eq!(&c.finish(), &whole);
            }
            let mut c = Classifier::baseline();
            c.feed(&line);
            proptest::prop_assert_eq!(&c.finish(), &whole);
        }
    }

    /// The key buffer as it was: every byte hashed and stored one at a time.
    fn key_by_bytes(pieces: &[Vec<u8>]) -> (Option<Vec<u8>>, u64) {
        let all = pieces.concat();
        let hash = all.iter().fold(FNV_OFFSET, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
        });
        ((all.len() <= KEY_CAP).then_some(all), hash)
    }

    proptest::proptest! {
        /// A key pushed in pieces of any size is the byte-at-a-time key: the same known bytes
        /// (none once longer than `KEY_CAP`), and the same hash when it is hashed.
        #[test]
        fn key_buffer_agrees_with_a_byte_walk(
            pieces in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
                0..6,
            ),
            hashed in proptest::prelude::any::<bool>(),
        ) {
            let mut key = KeyBuf {
                bytes: [0; KEY_CAP],
                len: 7,
                hashed: !hashed,
                hash: 1,
            };
            key.clear(hashed);
            for p in &pieces {
                key.push(p);
            }
            let (known, hash) = key_by_bytes(&pieces);
            proptest::prop_assert_eq!(key.known(), known.as_deref().unwrap_or(&[]));
            if hashed {
                proptest::prop_assert_eq!(key.hash, hash);
            }
        }
    }

    #[test]
    fn rate_limit_keys_longer_than_the_key_buffer_are_told_apart_whole() {
        let long = "w".repeat(KEY_CAP + 8);
        let info = ok(&format!(
            r#"{{"payload":{{"rate_limits":{{"{long}a":{{"used_percent":1}},"{long}b":{{"used_percent":2}},"{long}a":{{"used_percent":3}}}}}}}}"#
        ));
        let used: Vec<_> = info.rate_limits.iter().map(|w| w.used_percent).collect();
        assert_eq!(used, vec![Some(3.0), Some(2.0)]);
        assert!(info.rate_limits.iter().all(|w| w.name.is_none()));
    }

    #[test]
    fn both_scans_agree_on_a_huge_line_in_any_chunking() {
        let text = "fn main() {\\n\\tprintln!(\\\"héllo\\\");\\n}\\n".repeat(60_000);
        let line = format!(
            r#"{{"type":"response_item","payload":{{"type":"function_call","arguments":"{text}","name":"{}","call_id":"c9"}}}}"#,
            &text[..200]
        );
        let want = ok(&line);
        assert_eq!(want.call_id.as_deref(), Some("c9"));
        for chunk in [1 << 16, 4093, 63] {
            for mut c in [Classifier::new(), Classifier::baseline()] {
                for piece in line.as_bytes().chunks(chunk) {
                    c.feed(piece);
                }
                assert_eq!(c.finish(), want, "chunks of {chunk}");
            }
        }
    }
}
