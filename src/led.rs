//! Status LED over a Linux LED class device (embedded-hal `OutputPin`).
