//! Resolved settings. PLACEHOLDER.
