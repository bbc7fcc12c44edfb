//! alloc
