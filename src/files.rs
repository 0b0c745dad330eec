//! Local state files. PLACEHOLDER.
