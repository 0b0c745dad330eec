//! Redaction of shipped lines. PLACEHOLDER.

/// Lines longer than this (bytes of UTF-8) ship as the oversize placeholder.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
