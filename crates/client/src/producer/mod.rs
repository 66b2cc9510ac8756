//! The producer (in progress).
