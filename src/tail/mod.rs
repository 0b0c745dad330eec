//! Reading complete lines of a growing file. PLACEHOLDER.
