//! Errors of the nf_tables layer, with kernel errno values turned into
//! messages that name the object and say what to do.

use std::fmt;
use std::io;

use super::lower::LowerError;

/// One message the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// Positive errno.
    pub errno: i32,
    /// What the message was about ("rule #2 of chain svc-x").
    pub object: String,
    /// Our explanation (names the missing chain, set or kernel module).
    pub reason: String,
    /// The kernel's extended ack text, when it gave one.
    pub kernel_msg: Option<String>,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.object, self.reason, io::Error::from_raw_os_error(self.errno))?;
        if let Some(m) = &self.kernel_msg {
            write!(f, " [kernel: {m}]")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub enum NftError {
    /// The ruleset description cannot be expressed (nothing was sent).
    Lower(LowerError),
    /// A socket operation failed.
    Io { op: &'static str, source: io::Error },
    /// The kernel rejected the transaction; nothing of it was applied.
    Rejected(Vec<KernelError>),
    /// The kernel said something we could not parse.
    Decode(String),
    /// No complete answer within the deadline.
    Timeout { waiting_for: usize },
}

impl fmt::Display for NftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NftError::Lower(e) => write!(f, "invalid ruleset: {e}"),
            NftError::Io { op, source } => {
                if source.raw_os_error() == Some(libc::EPERM) {
                    write!(f, "nf_tables {op}: needs CAP_NET_ADMIN ({source})")
                } else {
                    write!(f, "nf_tables {op}: {source}")
                }
            }
            NftError::Rejected(errs) => {
                write!(f, "nf_tables transaction rejected, nothing applied: ")?;
                for (i, e) in errs.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
            NftError::Decode(m) => write!(f, "nf_tables: cannot parse kernel message: {m}"),
            NftError::Timeout { waiting_for } => {
                write!(f, "nf_tables: no answer from the kernel for {waiting_for} message(s)")
            }
        }
    }
}

impl std::error::Error for NftError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NftError::Lower(e) => Some(e),
            NftError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<LowerError> for NftError {
    fn from(e: LowerError) -> Self {
        NftError::Lower(e)
    }
}

impl NftError {
    /// The errno values of a rejected transaction (empty otherwise).
    pub fn errnos(&self) -> Vec<i32> {
        match self {
            NftError::Rejected(e) => e.iter().map(|k| k.errno).collect(),
            _ => vec![],
        }
    }
}

/// The kernel module that provides an expression, for "kernel lacks ..." errors.
pub fn expr_module(name: &str) -> String {
    match name {
        "nat" => "nft_nat".into(),
        "masq" => "nft_masq".into(),
        "fib" => "nft_fib_inet".into(),
        "reject" => "nft_reject_inet".into(),
        other => format!("nft_{other}"),
    }
}

/// A generic explanation of an errno for an object.
pub fn explain(errno: i32) -> String {
    match errno {
        libc::EPERM | libc::EACCES => "needs CAP_NET_ADMIN in this network namespace".into(),
        libc::ENOENT => "does not exist".into(),
        libc::EEXIST => "already exists".into(),
        libc::EBUSY => "still in use (referenced by a rule, a map element or a jump)".into(),
        libc::EOPNOTSUPP => "not supported by this kernel (missing module or feature)".into(),
        libc::EINVAL => "invalid attributes for this kernel".into(),
        libc::ELOOP => "jumps form a loop".into(),
        libc::ERESTART => "the ruleset changed concurrently (generation moved); retry".into(),
        libc::ENOSPC => "set is full".into(),
        libc::EMSGSIZE => "message too large".into(),
        libc::ENOBUFS | libc::ENOMEM => "kernel out of memory or socket buffer".into(),
        _ => "rejected".into(),
    }
}
