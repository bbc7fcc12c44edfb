//! dataplane
