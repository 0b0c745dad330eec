//! Substring searchers built once for the process.
//!
//! `memchr::memmem::find` builds a searcher at every call: its vector tables cost about a
//! thousand instructions, more than the search of a short string itself. The checks that run
//! on every shipped string (does it hide ASCII behind `\u` or `\/`, does it hold the marker
//! already) paid that several times a line: a tenth of the redaction of an appended 1 KiB
//! message (docs/performance.md, "fifteenth pass"). The searchers here are built the first time
//! each is needed and kept; each is a few hundred bytes.

use std::sync::LazyLock;

use memchr::memmem::Finder;

macro_rules! finders {
    ($($(#[$doc:meta])* $name:ident = $needle:expr;)*) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Finder<'static>> =
                LazyLock::new(|| Finder::new($needle));
        )*
    };
}

finders! {
    /// A JSON escape of `/`.
    ESCAPED_SLASH = b"\\/";
    /// A JSON `\u` escape.
    ESCAPED_U = b"\\u";
    /// A `\x` escape.
    ESCAPED_X = b"\\x";
    /// YAML's document marker, a table's rule.
    THREE_DASHES = b"---";
    /// The keys of a YAML list of names and values.
    VALUE_KEY = b"value:";
    NAME_KEY = b"name:";
    KEY_KEY = b"key:";
    /// A function's `return`.
    RETURN = b"return";
    /// The marker a secret becomes.
    MARKER = super::REDACTED.as_bytes();
}
