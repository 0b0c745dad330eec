//! Command-line definition. PLACEHOLDER.
