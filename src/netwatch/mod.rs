//! netwatch
