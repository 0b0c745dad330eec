//! Long runs of token characters, found without reading most bytes one by one.
//!
//! Encoded secrets ([`super::encoded`]) and vendor-named keys ([`super::vendors`]) are runs of
//! 20 or more letters, digits and `+/_-`. A line of prose or code has few such runs. On x86_64
//! the search classifies 64 bytes at a time into a mask of bits (SSE2) and reads as runs only
//! a block's edges, and its inside when the mask holds `min` set bits in a row. Elsewhere, and
//! for the bytes after the last whole block, it looks at the last byte of a window of `min`
//! bytes and reads backwards from it while it reads token characters: the first other byte it
//! meets rules out every run starting at or before it, and the next window starts right after
//! it. Only a window of token characters throughout is a run, measured then to its end.

use std::ops::Range;

/// Letters, digits and `+/_-`: base64 of either alphabet, hex, and the bodies of keys.
pub(crate) const fn is_token(b: u8) -> bool {
    TOKEN[b as usize]
}

/// [`is_token`] as a table: one load per byte in the loops below.
const TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'_' | b'-');
        b += 1;
    }
    t
};

/// Every maximal run of token characters at least `min` long (`min` > 0), in order. A run
/// that starts right after a backslash starts with an escape's letter (`\nQUJD`, `\u0041`):
/// the letter (and a `\u`'s four digits) are not part of it.
pub(crate) fn long_runs(b: &[u8], min: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    // The length every caller but the tests asks for, with its bit steps unrolled.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if min == super::encoded::MIN_RUN {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU running this has AVX2, just checked.
            unsafe { min_runs_avx2(b, &mut out) };
        } else {
            by_blocks(
                b,
                min,
                token_mask,
                |m| holds_run(m, super::encoded::MIN_RUN),
                &mut out,
            );
        }
    } else {
        by_blocks(
            b,
            min.max(1),
            token_mask,
            |m| holds_run(m, min.max(1)),
            &mut out,
        );
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    backwards_from(b, 0, min.max(1), &mut out);
    out
}

/// [`long_runs`] by windows read backwards, from `i` on, where `i` is 0 or `b[i - 1]` is not a
/// token character.
fn backwards_from(b: &[u8], mut i: usize, min: usize, out: &mut Vec<Range<usize>>) {
    let n = b.len();
    // `b[i - 1]`, when there is one, is never a token character: it ended a run or stopped a
    // backward read. So a window of token characters from `i` is the start of a run.
    while i + min <= n {
        // Backwards from the window's last byte while the bytes are token characters.
        let mut j = i + min - 1;
        while j > i && is_token(b[j]) {
            j -= 1;
        }
        if !is_token(b[j]) {
            i = j + 1;
            continue;
        }
        let mut end = i + min;
        while end < n && is_token(b[end]) {
            end += 1;
        }
        push_run(b, i..end, min, out);
        i = end + 1;
    }
}

/// A maximal run of token characters, pushed when it is at least `min` long once an escape's
/// letter is taken off its start ([`after_escape`]).
fn push_run(b: &[u8], run: Range<usize>, min: usize, out: &mut Vec<Range<usize>>) {
    let start = after_escape(b, run.start, run.end);
    if run.end - start >= min {
        out.push(start..run.end);
    }
}

/// [`long_runs`] 64 bytes at a time: each block's token characters as a mask of bits (SSE2,
/// sixteen bytes an instruction), then only its edges and, when the mask holds `min` set bits
/// in a row, its inside are read as runs. Prose and code, whose words are short, cost the mask
/// and a few bit operations a block. The bytes after the last whole block are read by
/// [`backwards_from`].
/// `holds`: [`holds_run`] for `min`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn by_blocks(
    b: &[u8],
    min: usize,
    mask: impl Fn(&[u8; 64]) -> u64,
    holds: impl Fn(u64) -> bool,
    out: &mut Vec<Range<usize>>,
) {
    // The start of the run that reaches the end of the blocks read so far.
    let mut open: Option<usize> = None;
    let mut base = 0;
    while let Some(block) = b.get(base..).and_then(|rest| rest.first_chunk::<64>()) {
        let m = mask(block);
        if m == u64::MAX {
            open.get_or_insert(base);
            base += 64;
            continue;
        }
        let mut inside = m;
        if let Some(start) = open.take() {
            // The open run ends at the block's first other byte.
            let lead = m.trailing_ones();
            let end = base + lead as usize;
            if end - start >= min {
                push_run(b, start..end, min, out);
            }
            inside &= !low_bits(lead);
        }
        let trail = m.leading_ones();
        if trail > 0 {
            open = Some(base + 64 - trail as usize);
            inside &= low_bits(64 - trail);
        }
        if inside != 0 && holds(inside) {
            while inside != 0 {
                let s = inside.trailing_zeros();
                let len = (inside >> s).trailing_ones();
                push_run(b, base + s as usize..base + (s + len) as usize, min, out);
                inside &= !(low_bits(len) << s);
            }
        }
        base += 64;
    }
    let mut from = base;
    if let Some(start) = open {
        let mut end = base;
        while end < b.len() && is_token(b[end]) {
            end += 1;
        }
        push_run(b, start..end, min, out);
        from = end + 1;
    }
    // `b[from - 1]` ended a run or the last block, which the mask showed is no token.
    if from < b.len() {
        backwards_from(b, from, min, out);
    }
}

/// The lowest `n` bits (`n` at most 64).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn low_bits(n: u32) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Whether `mask` holds at least `min` set bits in a row.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn holds_run(mut mask: u64, min: usize) -> bool {
    if min > 64 {
        return false;
    }
    // After each step a bit is set when the `k` bits from it are.
    let mut k = 1;
    while 2 * k <= min {
        mask &= mask >> k;
        k *= 2;
    }
    if k < min {
        mask &= mask >> (min - k);
    }
    mask != 0
}

/// [`long_runs`] of [`super::encoded::MIN_RUN`] with the masks of 32 bytes an instruction
/// (AVX2): half the work a block of the SSE2 masks, which were a twentieth of the redaction of
/// tool output inside JSON (docs/redaction.md, "Speed").
///
/// # Safety
///
/// The CPU running it must have AVX2.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "avx2")]
unsafe fn min_runs_avx2(b: &[u8], out: &mut Vec<Range<usize>>) {
    let mask = |block: &[u8; 64]| {
        let (lanes, _) = block.as_chunks::<32>();
        // A closure inside takes the function's AVX2 on with it.
        let (lo, hi) = (token_mask_avx2(&lanes[0]), token_mask_avx2(&lanes[1]));
        u64::from(lo) | (u64::from(hi) << 32)
    };
    let min = super::encoded::MIN_RUN;
    by_blocks(b, min, mask, |m| holds_run(m, min), out);
}

/// One bit per byte of `lane` that is a letter, a digit or one of `+/_-`: [`token_mask_sse2`]
/// over 32 bytes.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "avx2")]
fn token_mask_avx2(lane: &[u8; 32]) -> u32 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi8, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
    };
    // As in the SSE2 lane: a byte is in `lo..=hi` when adding `0x80 - lo` moves it to the
    // lowest `hi - lo + 1` values of a signed byte (AVX2 compares "greater", so the limit
    // is compared with the byte).
    let in_range = |v: __m256i, lo: u8, hi: u8| {
        let shifted = _mm256_add_epi8(v, _mm256_set1_epi8(0x80u8.wrapping_sub(lo) as i8));
        _mm256_cmpgt_epi8(_mm256_set1_epi8((0x80 + (hi - lo) + 1) as i8), shifted)
    };
    // SAFETY: `lane` is 32 readable bytes, and `loadu` allows any alignment.
    let v = unsafe { _mm256_loadu_si256(lane.as_ptr().cast::<__m256i>()) };
    let letter = in_range(_mm256_or_si256(v, _mm256_set1_epi8(0x20)), b'a', b'z');
    let digit_or_slash = in_range(v, b'/', b'9');
    let plus = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'+' as i8));
    let minus = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'-' as i8));
    let underscore = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'_' as i8));
    let token = _mm256_or_si256(
        _mm256_or_si256(letter, digit_or_slash),
        _mm256_or_si256(_mm256_or_si256(plus, minus), underscore),
    );
    _mm256_movemask_epi8(token) as u32
}

/// One bit per byte of `head` (at most 48 bytes) that is `_` or `-`: where a run's name and
/// value may be joined ([`super::vendors`]), three vector compares where a byte loop took a
/// few hundred instructions a run.
pub(crate) fn separator_mask(head: &[u8]) -> u64 {
    let len = head.len().min(48);
    let mut block = [0u8; 48];
    block[..len].copy_from_slice(&head[..len]);
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut m = 0u64;
        let (lanes, _) = block.as_chunks::<16>();
        for (k, lane) in lanes.iter().enumerate() {
            // SAFETY: compiled only when SSE2 is enabled for the whole build (the x86_64
            // baseline); `lane` is 16 readable bytes and `loadu` allows any alignment.
            let bits = unsafe {
                let v = _mm_loadu_si128(lane.as_ptr().cast::<__m128i>());
                let sep = _mm_or_si128(
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'_' as i8)),
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'-' as i8)),
                );
                _mm_movemask_epi8(sep) as u32 & 0xffff
            };
            m |= u64::from(bits) << (16 * k);
        }
        m
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        block
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, b'_' | b'-'))
            .fold(0u64, |m, (i, _)| m | 1 << i)
    }
}

/// One bit per byte of `block` that is a token character ([`is_token`]).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn token_mask(block: &[u8; 64]) -> u64 {
    let mut m = 0u64;
    let (lanes, _) = block.as_chunks::<16>();
    for (k, lane) in lanes.iter().enumerate() {
        // SAFETY: compiled only when SSE2 is enabled for the whole build (the x86_64
        // baseline), so the CPU running it has SSE2.
        m |= u64::from(unsafe { token_mask_sse2(lane) }) << (16 * k);
    }
    m
}

/// One bit per byte of `lane` that is a letter, a digit or one of `+/_-`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn token_mask_sse2(lane: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };
    // A byte is in `lo..=hi` when adding `0x80 - lo` moves it to the lowest `hi - lo + 1`
    // values of a signed byte.
    let in_range = |v: __m128i, lo: u8, hi: u8| {
        let shifted = _mm_add_epi8(v, _mm_set1_epi8(0x80u8.wrapping_sub(lo) as i8));
        _mm_cmplt_epi8(shifted, _mm_set1_epi8((0x80 + (hi - lo) + 1) as i8))
    };
    // SAFETY: `lane` is 16 readable bytes, and `loadu` allows any alignment.
    let v = unsafe { _mm_loadu_si128(lane.as_ptr().cast::<__m128i>()) };
    // Setting bit 5 folds upper-case letters onto lower-case ones and nothing else onto them.
    let letter = in_range(_mm_or_si128(v, _mm_set1_epi8(0x20)), b'a', b'z');
    // `/` comes right before the digits.
    let digit_or_slash = in_range(v, b'/', b'9');
    let plus = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'+' as i8));
    let minus = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'-' as i8));
    let underscore = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'_' as i8));
    let token = _mm_or_si128(
        _mm_or_si128(letter, digit_or_slash),
        _mm_or_si128(_mm_or_si128(plus, minus), underscore),
    );
    _mm_movemask_epi8(token) as u32
}

/// Calls `found` with the place of each of the `needles` in `b`, in order, until it answers
/// true; then answers true itself. Built for bytes that come every few dozen bytes (a colon,
/// a blank in code and logs): a search call per occurrence (`memchr_iter`) cost about 170
/// instructions each, where a mask of 64 bytes at a time (SSE2) costs a few a byte and a few
/// an occurrence.
pub(crate) fn any_at<const N: usize>(
    b: &[u8],
    needles: [u8; N],
    mut found: impl FnMut(usize) -> bool,
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        let mut base = 0;
        while let Some(block) = b.get(base..).and_then(|rest| rest.first_chunk::<64>()) {
            let mut m = bytes_mask(block, needles);
            while m != 0 {
                if found(base + m.trailing_zeros() as usize) {
                    return true;
                }
                m &= m - 1;
            }
            base += 64;
        }
        b[base..]
            .iter()
            .enumerate()
            .any(|(i, c)| needles.contains(c) && found(base + i))
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        b.iter()
            .enumerate()
            .any(|(i, c)| needles.contains(c) && found(i))
    }
}

/// One bit per byte of `block` that is one of `needles`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn bytes_mask<const N: usize>(block: &[u8; 64], needles: [u8; N]) -> u64 {
    let mut m = 0u64;
    let (lanes, _) = block.as_chunks::<16>();
    for (k, lane) in lanes.iter().enumerate() {
        // SAFETY: compiled only when SSE2 is enabled for the whole build (the x86_64
        // baseline), so the CPU running it has SSE2.
        m |= u64::from(unsafe { bytes_mask_sse2(lane, needles) }) << (16 * k);
    }
    m
}

/// One bit per byte of `lane` that is one of `needles`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
#[target_feature(enable = "sse2")]
fn bytes_mask_sse2<const N: usize>(lane: &[u8; 16], needles: [u8; N]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_setzero_si128,
    };
    // SAFETY: `lane` is 16 readable bytes, and `loadu` allows any alignment.
    let v = unsafe { _mm_loadu_si128(lane.as_ptr().cast::<__m128i>()) };
    let mut hit = _mm_setzero_si128();
    for n in needles {
        hit = _mm_or_si128(hit, _mm_cmpeq_epi8(v, _mm_set1_epi8(n as i8)));
    }
    _mm_movemask_epi8(hit) as u32
}

/// `start` moved past an escape's letter when a backslash precedes it.
fn after_escape(b: &[u8], start: usize, end: usize) -> usize {
    if start == 0 || b[start - 1] != b'\\' {
        return start;
    }
    // Any number of backslashes: `\\n` is JSON inside JSON's `\n`.
    let skip = if b[start] == b'u' { 5 } else { 1 };
    (start + skip).min(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same runs, found by classifying every byte.
    fn every_byte(b: &[u8], min: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if !is_token(b[i]) {
                i += 1;
                continue;
            }
            let s = i;
            while i < b.len() && is_token(b[i]) {
                i += 1;
            }
            let s = after_escape(b, s, i);
            if i - s >= min {
                out.push(s..i);
            }
        }
        out
    }

    #[test]
    fn finds_what_a_byte_by_byte_scan_finds() {
        let texts: [&[u8]; 6] = [
            b"short words only, nothing long here at all",
            b"commit 3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345\nAuthor: x",
            b"abcdefghijklmnopqrst",
            b"xabcdefghijklmnopqrst",
            b"a\\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY and \\u0041bcdefghijklmnopqrstuvwxyz",
            b"aaaa bbbbbbbbbbbbbbbbbbb cccccccccccccccccccc dddddddddddddddddddddddd",
        ];
        for t in texts {
            for min in [1, 5, 19, 20, 21] {
                assert_eq!(
                    long_runs(t, min),
                    every_byte(t, min),
                    "{min} {:?}",
                    String::from_utf8_lossy(t)
                );
            }
        }
    }

    /// What [`long_runs`] found before reading blocks: windows read backwards.
    fn by_windows(b: &[u8], min: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        backwards_from(b, 0, min.max(1), &mut out);
        out
    }

    /// Text of long and short token runs between other bytes (escapes, blanks, non-ASCII), so
    /// runs start, end and cross the 64-byte blocks anywhere.
    fn runs_strategy() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let token = proptest::sample::select(b"abcXYZ019+/_-".to_vec());
        let other = proptest::sample::select(b" .=\\\\u\"\xc3\xa9\x1b\x00\xff".to_vec());
        let piece = (
            proptest::collection::vec(token, 0..140),
            proptest::collection::vec(other, 0..4),
        )
            .prop_map(|(mut t, o)| {
                t.extend(o);
                t
            });
        proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat())
    }

    #[test]
    fn blocks_find_runs_at_every_edge() {
        for len in [0, 19, 20, 63, 64, 65, 127, 128, 129, 200] {
            for at in [0, 1, 44, 63, 64, 65, 100] {
                let mut t = vec![b' '; 260];
                for b in t.iter_mut().skip(at).take(len) {
                    *b = b'a';
                }
                assert_eq!(long_runs(&t, 20), every_byte(&t, 20), "{len} at {at}");
            }
        }
        let all = vec![b'Q'; 256];
        assert_eq!(long_runs(&all, 20), vec![0..256]);
    }

    /// The AVX2 masks say what the SSE2 masks say, for every byte value at every place of a
    /// block (where the CPU has AVX2; the SSE2 masks are the ones checked against a byte by
    /// byte scan below).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx2_masks_agree_with_sse2_masks() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        for b in 0..=255u8 {
            for at in 0..32 {
                let mut lane = [b'.'; 32];
                lane[at] = b;
                let mut block = [0u8; 64];
                block[..32].copy_from_slice(&lane);
                block[32..].copy_from_slice(&lane);
                // SAFETY: the CPU has AVX2, checked above.
                let avx2 = unsafe { token_mask_avx2(&lane) };
                let sse2 = token_mask(&block);
                assert_eq!(u64::from(avx2), sse2 & 0xFFFF_FFFF, "byte {b:#x} at {at}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn separator_mask_marks_every_underscore_and_hyphen_of_the_head(
            t in proptest::collection::vec(proptest::sample::select(b"a_-9Z\xff".to_vec()), 0..70)
        ) {
            let by_byte = t
                .iter()
                .take(48)
                .enumerate()
                .filter(|(_, c)| matches!(c, b'_' | b'-'))
                .fold(0u64, |m, (i, _)| m | 1 << i);
            proptest::prop_assert_eq!(separator_mask(&t), by_byte);
        }

        /// The length every caller asks for, through the AVX2 path where the CPU has it.
        #[test]
        fn runs_of_the_callers_length_agree_with_every_byte(t in runs_strategy()) {
            let min = super::super::encoded::MIN_RUN;
            proptest::prop_assert_eq!(long_runs(&t, min), every_byte(&t, min));
        }

        #[test]
        fn blocks_agree_with_windows_and_every_byte(t in runs_strategy(), min in 1usize..70) {
            let found = long_runs(&t, min);
            proptest::prop_assert_eq!(&found, &by_windows(&t, min));
            proptest::prop_assert_eq!(&found, &every_byte(&t, min));
        }

        /// Every place of the byte, in order, and none after the first that answers true.
        #[test]
        fn any_at_visits_what_memchr_finds(
            t in proptest::collection::vec(proptest::sample::select(b"::ab \n\xc3".to_vec()), 0..300),
            stop in 0usize..40,
        ) {
            let mut seen = Vec::new();
            let stopped = any_at(&t, [b':'], |at| {
                seen.push(at);
                seen.len() == stop
            });
            let all: Vec<usize> = memchr::memchr_iter(b':', &t).collect();
            let expect = &all[..if stop > 0 { all.len().min(stop) } else { all.len() }];
            proptest::prop_assert_eq!(&seen[..], expect);
            proptest::prop_assert_eq!(stopped, stop > 0 && all.len() >= stop);
            let mut two = Vec::new();
            any_at(&t, [b' ', b'\n'], |at| {
                two.push(at);
                false
            });
            let all_two: Vec<usize> = memchr::memchr2_iter(b' ', b'\n', &t).collect();
            proptest::prop_assert_eq!(two, all_two);
        }

        #[test]
        fn agrees_with_a_byte_by_byte_scan(t in proptest::collection::vec(proptest::sample::select(b"ab9+/_- \\nu=.".to_vec()), 0..200), min in 1usize..30) {
            proptest::prop_assert_eq!(long_runs(&t, min), every_byte(&t, min));
        }
    }
}
