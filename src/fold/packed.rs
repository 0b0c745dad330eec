//! Classified lines packed into bytes: what the seeding helper holds for the fold.
//!
//! A [`LineInfo`] is about 260 bytes of struct with every field empty, and a line's few
//! captured strings are separate allocations; held for the second half of a large rollout
//! that came to 25 MB. Packed, a line takes its captured text and a dozen bytes more
//! (docs/performance.md, "Seeding on two cores").
//!
//! The layout is private to this module and lives only in memory, between two threads of one
//! process: a line is its length, a flag byte, and for a classified line its fields in
//! declaration order (numbers as LEB128 varints, an absent field as one zero byte). Every field
//! of [`LineInfo`] and [`SessionMetaInfo`] is named where it is written, so a field added
//! there does not compile here until it is packed.

use crate::codex::{KNOWN_WINDOWS, Kind, LineInfo, PayloadType, RateWindow, SessionMetaInfo};
use crate::time::Ts;

/// Bytes reserved per chunk: lines are appended to the last chunk while it has room for the
/// largest packed line, so the buffer grows without copying what it holds.
///
/// Large on purpose. glibc serves a request larger than an arena's free top (and over its
/// mmap threshold) with a mapping of its own, whose pages become resident only as they are
/// written and go back whole when the chunk is freed. A smaller chunk was carved from the
/// helper thread's arena, whose top the process's idle trim (`malloc_trim`) never shrinks:
/// 3.2 MiB stayed resident after the helper was gone (docs/performance.md, "Seeding on two
/// cores"). 8 MiB is above the 4 MiB the process asks every arena's top to keep.
const CHUNK: usize = 8 << 20;

/// More than a packed line takes: three message fields of [`crate::codex::MAX_MESSAGE_FIELD`]
/// bytes, nineteen short ones of [`crate::codex::MAX_SHORT_FIELD`] (a header's included), eight
/// windows and the numbers. (A longer one would only make its chunk grow by a copy.)
const LARGEST_LINE: usize = 64 * 1024;

const KINDS: [Kind; 7] = [
    Kind::SessionMeta,
    Kind::ResponseItem,
    Kind::EventMsg,
    Kind::TurnContext,
    Kind::Compacted,
    Kind::InterAgentMetadata,
    Kind::Other,
];

const PAYLOAD_TYPES: [PayloadType; 13] = [
    PayloadType::TaskStarted,
    PayloadType::TaskComplete,
    PayloadType::TurnAborted,
    PayloadType::TokenCount,
    PayloadType::FunctionCall,
    PayloadType::CustomToolCall,
    PayloadType::LocalShellCall,
    PayloadType::ToolSearchCall,
    PayloadType::FunctionCallOutput,
    PayloadType::CustomToolCallOutput,
    PayloadType::ToolSearchOutput,
    PayloadType::AgentMessage,
    PayloadType::Other,
];

/// A line's eight text fields in packing order, each behind `$r` (`&` or `&mut`): the one list
/// both directions use. ([`Packed::push`] names every field of [`LineInfo`], so a field added
/// there fails to compile until it is packed.)
macro_rules! text_fields {
    ($info:expr, $($r:tt)+) => {
        [
            $($r)+ $info.payload_type_raw,
            $($r)+ $info.call_id,
            $($r)+ $info.name,
            $($r)+ $info.turn_id,
            $($r)+ $info.last_agent_message,
            $($r)+ $info.error_message,
            $($r)+ $info.message,
            $($r)+ $info.codex_error_info,
        ]
    };
}

const BLANK: u8 = 1;
const OVERSIZE: u8 = 2;
const CLASSIFIED: u8 = 4;
const MALFORMED: u8 = 8;
const TRIGGER_FALSE: u8 = 16;
const TRIGGER_TRUE: u8 = 32;
const META: u8 = 64;

/// One unpacked line (for tests: the fold takes them one at a time from [`Packed::for_each`]).
#[cfg(test)]
#[derive(Debug, PartialEq)]
struct Unpacked {
    /// Bytes the line occupies, terminator included.
    pub raw_len: u64,
    pub blank: bool,
    pub oversize: bool,
    pub info: Option<LineInfo>,
}

/// Lines packed in order.
#[derive(Debug, Default)]
pub(crate) struct Packed {
    chunks: Vec<Vec<u8>>,
}

impl Packed {
    pub(crate) fn new() -> Packed {
        Packed::default()
    }

    /// How many lines it holds (counted by reading them back).
    #[cfg(test)]
    pub(crate) fn lines(&self) -> u64 {
        let mut n = 0;
        self.for_each(|_, _, _, _| n += 1);
        n
    }

    /// Bytes it holds: what its lines packed into (a chunk's pages beyond that are reserved,
    /// not yet written, so not resident).
    pub(crate) fn held_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<u8>>()
    }

    /// Appends a line.
    pub(crate) fn push(
        &mut self,
        raw_len: u64,
        blank: bool,
        oversize: bool,
        info: Option<&LineInfo>,
    ) {
        if self
            .chunks
            .last()
            .is_none_or(|c| c.capacity() - c.len() < LARGEST_LINE)
        {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let Some(out) = self.chunks.last_mut() else {
            return; // a chunk was pushed just above
        };
        let mut flags = 0;
        if blank {
            flags |= BLANK;
        }
        if oversize {
            flags |= OVERSIZE;
        }
        varint(out, raw_len);
        let Some(info) = info else {
            out.push(flags);
            return;
        };
        // Every field named: one added to `LineInfo` fails to compile here until it is packed
        // (and read back in `Reader::info_into`).
        let LineInfo {
            malformed,
            kind,
            payload_type,
            payload_type_raw: _,
            timestamp,
            call_id: _,
            name: _,
            turn_id: _,
            last_agent_message: _,
            error_message: _,
            message: _,
            trigger_turn,
            ordinal,
            codex_error_info: _,
            rate_limits,
            meta,
        } = info;
        flags |= CLASSIFIED;
        if *malformed {
            flags |= MALFORMED;
        }
        flags |= match trigger_turn {
            None => 0,
            Some(false) => TRIGGER_FALSE,
            Some(true) => TRIGGER_TRUE,
        };
        if meta.is_some() {
            flags |= META;
        }
        out.push(flags);
        out.push(index_of(&KINDS, kind));
        out.push(index_of(&PAYLOAD_TYPES, payload_type));
        optional(out, timestamp.map(|t| zigzag(t.0)));
        optional(out, *ordinal);
        for text in text_fields!(info, &) {
            string(out, text.as_deref());
        }
        varint(out, rate_limits.len() as u64);
        for w in rate_limits {
            let RateWindow {
                name,
                used_percent,
                window_minutes,
                resets_at,
            } = w;
            let known = name.and_then(|n| KNOWN_WINDOWS.iter().position(|k| *k == n));
            out.push(known.map_or(0, |i| i as u8 + 1));
            for number in [used_percent, window_minutes, resets_at] {
                match number {
                    None => out.push(0),
                    Some(x) => {
                        out.push(1);
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
        }
        if let Some(m) = meta.as_deref() {
            // Every field named, as above; the text ones in the order `info_into` reads them.
            let SessionMetaInfo {
                id: _,
                session_id: _,
                parent_thread_id: _,
                spawn_parent_thread_id: _,
                thread_source: _,
                has_subagent_source,
                subagent_kind: _,
                spawn_agent_path: _,
                spawn_agent_nickname: _,
                agent_path: _,
                agent_nickname: _,
                agent_role: _,
                cwd: _,
                cli_version: _,
                originator: _,
                history_start_ordinal,
            } = m;
            for text in [
                &m.id,
                &m.session_id,
                &m.parent_thread_id,
                &m.spawn_parent_thread_id,
                &m.thread_source,
                &m.subagent_kind,
                &m.spawn_agent_path,
                &m.spawn_agent_nickname,
                &m.agent_path,
                &m.agent_nickname,
                &m.agent_role,
                &m.cwd,
                &m.cli_version,
                &m.originator,
            ] {
                string(out, text.as_deref());
            }
            out.push(u8::from(*has_subagent_source));
            optional(out, *history_start_ordinal);
        }
    }

    /// Hands each line to `each` in order, unpacked into one [`LineInfo`] reused from line to
    /// line (its strings keep their buffers): `None` for a line that was not classified.
    pub(crate) fn for_each(&self, mut each: impl FnMut(u64, bool, bool, Option<&LineInfo>)) {
        let mut info = LineInfo::default();
        for chunk in &self.chunks {
            let mut r = Reader {
                bytes: chunk,
                at: 0,
            };
            while r.at < r.bytes.len() {
                let (raw_len, flags) = (r.varint(), r.byte());
                let classified = flags & CLASSIFIED != 0;
                if classified {
                    r.info_into(flags, &mut info);
                }
                each(
                    raw_len,
                    flags & BLANK != 0,
                    flags & OVERSIZE != 0,
                    classified.then_some(&info),
                );
            }
        }
    }

    /// The lines in order, unpacked.
    #[cfg(test)]
    fn unpacked(&self) -> Vec<Unpacked> {
        let mut all = Vec::new();
        self.for_each(|raw_len, blank, oversize, info| {
            all.push(Unpacked {
                raw_len,
                blank,
                oversize,
                info: info.cloned(),
            });
        });
        all
    }
}

fn index_of<T: PartialEq>(all: &[T], value: &T) -> u8 {
    // Every variant is in its table (test `every_variant_is_in_its_table`); the last entry
    // is `Other`, which a variant missing from the table would at worst read back as.
    all.iter().position(|v| v == value).unwrap_or(all.len() - 1) as u8
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    (n >> 1) as i64 ^ -((n & 1) as i64)
}

/// An optional number: 0 when absent, else 1 and the number.
fn optional(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        None => out.push(0),
        Some(n) => {
            out.push(1);
            varint(out, n);
        }
    }
}

fn string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            varint(out, s.len() as u64 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// Reads back what [`Packed::push`] wrote, in the same order. The bytes are this process's
/// own, so every read is in bounds; a short buffer would read as zeros rather than panic.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn varint(&mut self) -> u64 {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte();
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        n
    }

    fn optional(&mut self) -> Option<u64> {
        match self.byte() {
            0 => None,
            _ => Some(self.varint()),
        }
    }

    fn string(&mut self) -> Option<String> {
        let mut s = None;
        self.string_into(&mut s);
        s
    }

    /// Reads an optional string into `slot`, reusing its buffer.
    fn string_into(&mut self, slot: &mut Option<String>) {
        let Some(len) = self.varint().checked_sub(1) else {
            *slot = None;
            return;
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let end = self.at.saturating_add(len).min(self.bytes.len());
        let text = String::from_utf8_lossy(&self.bytes[self.at.min(end)..end]);
        self.at = end;
        let s = slot.get_or_insert_with(String::new);
        s.clear();
        s.push_str(&text);
    }

    fn number(&mut self) -> Option<f64> {
        if self.byte() == 0 {
            return None;
        }
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        Some(f64::from_le_bytes(b))
    }

    /// Reads a classified line's fields into `info`, every field overwritten.
    fn info_into(&mut self, flags: u8, info: &mut LineInfo) {
        info.malformed = flags & MALFORMED != 0;
        info.trigger_turn = match flags & (TRIGGER_FALSE | TRIGGER_TRUE) {
            TRIGGER_FALSE => Some(false),
            TRIGGER_TRUE => Some(true),
            _ => None,
        };
        info.kind = KINDS[usize::from(self.byte()).min(KINDS.len() - 1)];
        info.payload_type = PAYLOAD_TYPES[usize::from(self.byte()).min(PAYLOAD_TYPES.len() - 1)];
        info.timestamp = self.optional().map(|t| Ts(unzigzag(t)));
        info.ordinal = self.optional();
        for text in text_fields!(info, &mut) {
            self.string_into(text);
        }
        let windows = self.varint();
        info.rate_limits.clear();
        for _ in 0..windows {
            info.rate_limits.push(RateWindow {
                name: usize::from(self.byte())
                    .checked_sub(1)
                    .and_then(|i| KNOWN_WINDOWS.get(i).copied()),
                used_percent: self.number(),
                window_minutes: self.number(),
                resets_at: self.number(),
            });
        }
        info.meta = (flags & META != 0).then(|| {
            Box::new(SessionMetaInfo {
                id: self.string(),
                session_id: self.string(),
                parent_thread_id: self.string(),
                spawn_parent_thread_id: self.string(),
                thread_source: self.string(),
                subagent_kind: self.string(),
                spawn_agent_path: self.string(),
                spawn_agent_nickname: self.string(),
                agent_path: self.string(),
                agent_nickname: self.string(),
                agent_role: self.string(),
                cwd: self.string(),
                cli_version: self.string(),
                originator: self.string(),
                has_subagent_source: self.byte() != 0,
                history_start_ordinal: self.optional(),
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codex::classify;

    #[test]
    fn every_variant_is_in_its_table() {
        // No wildcard arm: a new variant fails to compile here, the reminder to add it to its
        // table (a variant missing from one would be packed as `Other`).
        for k in KINDS {
            match k {
                Kind::SessionMeta
                | Kind::ResponseItem
                | Kind::EventMsg
                | Kind::TurnContext
                | Kind::Compacted
                | Kind::InterAgentMetadata
                | Kind::Other => {}
            }
        }
        for p in PAYLOAD_TYPES {
            match p {
                PayloadType::TaskStarted
                | PayloadType::TaskComplete
                | PayloadType::TurnAborted
                | PayloadType::TokenCount
                | PayloadType::FunctionCall
                | PayloadType::CustomToolCall
                | PayloadType::LocalShellCall
                | PayloadType::ToolSearchCall
                | PayloadType::FunctionCallOutput
                | PayloadType::CustomToolCallOutput
                | PayloadType::ToolSearchOutput
                | PayloadType::AgentMessage
                | PayloadType::Other => {}
            }
        }
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(usize::from(index_of(&KINDS, k)), i, "{k:?} listed twice");
        }
        for (i, p) in PAYLOAD_TYPES.iter().enumerate() {
            assert_eq!(
                usize::from(index_of(&PAYLOAD_TYPES, p)),
                i,
                "{p:?} listed twice"
            );
        }
    }

    /// A line's classification with every field set, at its longest.
    fn everything() -> LineInfo {
        let long = |c: char, n: usize| Some(c.to_string().repeat(n));
        LineInfo {
            malformed: false,
            kind: Kind::InterAgentMetadata,
            payload_type: PayloadType::ToolSearchOutput,
            payload_type_raw: long('t', 512),
            timestamp: Some(Ts(-1_785_254_400_123)),
            call_id: Some("call_\u{e9}".into()),
            name: Some(String::new()),
            turn_id: long('u', 40),
            last_agent_message: long('\u{1f600}', 4096),
            error_message: long('e', 16 * 1024),
            message: long('m', 16 * 1024),
            trigger_turn: Some(false),
            ordinal: Some(u64::MAX),
            codex_error_info: Some("usage_limit_exceeded".into()),
            rate_limits: (0..8)
                .map(|i| RateWindow {
                    name: [Some("primary"), Some("secondary"), None][i % 3],
                    used_percent: (i % 2 == 0).then_some(100.0),
                    window_minutes: Some(f64::from(i as u32) * 0.5),
                    resets_at: (i != 3).then_some(-1.5e300),
                })
                .collect(),
            meta: Some(Box::new(SessionMetaInfo {
                id: Some("id".into()),
                session_id: None,
                parent_thread_id: Some("p".into()),
                spawn_parent_thread_id: Some("sp".into()),
                thread_source: Some("ts".into()),
                has_subagent_source: true,
                subagent_kind: Some("review".into()),
                spawn_agent_path: Some("a/b".into()),
                spawn_agent_nickname: Some("n".into()),
                agent_path: None,
                agent_nickname: Some("nick".into()),
                agent_role: Some("role".into()),
                cwd: long('c', 512),
                cli_version: Some("0.1".into()),
                originator: Some("o".into()),
                history_start_ordinal: Some(0),
            })),
        }
    }

    /// Every line of the Codex fixtures, lines with every field set or none, and lines that
    /// are no JSON, read back as they were packed, across chunks.
    #[test]
    fn lines_read_back_as_they_were_packed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/codex");
        let mut infos = vec![
            Some(everything()),
            Some(LineInfo::default()),
            Some(LineInfo::malformed()),
            None,
            Some(LineInfo {
                trigger_turn: Some(true),
                timestamp: Some(Ts(i64::MAX)),
                ordinal: Some(0),
                ..LineInfo::default()
            }),
        ];
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read(entry.unwrap().path()).unwrap();
            infos.extend(text.split(|&b| b == b'\n').map(|l| Some(classify(l))));
        }
        let mut packed = Packed::new();
        let mut expected = Vec::new();
        // Enough lines of every kind to fill several chunks.
        for round in 0..150u64 {
            for (i, info) in infos.iter().enumerate() {
                let raw_len = round * 1_000_003 + i as u64;
                let (blank, oversize) = (i % 3 == 0, i % 5 == 0);
                packed.push(raw_len, blank, oversize, info.as_ref());
                expected.push(Unpacked {
                    raw_len,
                    blank,
                    oversize,
                    info: info.clone(),
                });
            }
        }
        assert!(packed.chunks.len() > 1, "{} chunks", packed.chunks.len());
        assert_eq!(packed.lines(), expected.len() as u64);
        let unpacked = packed.unpacked();
        assert_eq!(unpacked.len(), expected.len());
        for (i, (got, want)) in unpacked.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "line {i}");
        }
    }
}
