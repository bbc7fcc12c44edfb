//! Errors that reach a client, worded as the Kubernetes API server words them.

use std::fmt;

/// `data.reason` of a JSON-RPC error (CONTRACT.md, Errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Invalid,
    AlreadyAllocated,
    RangeFull,
    NotFound,
    Conflict,
    Unauthorized,
    TooLarge,
    Internal,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Invalid => "Invalid",
            Reason::AlreadyAllocated => "AlreadyAllocated",
            Reason::RangeFull => "RangeFull",
            Reason::NotFound => "NotFound",
            Reason::Conflict => "Conflict",
            Reason::Unauthorized => "Unauthorized",
            Reason::TooLarge => "TooLarge",
            Reason::Internal => "Internal",
        }
    }

    /// The application's JSON-RPC error code, in -32000..-32099.
    pub fn code(self) -> i64 {
        match self {
            Reason::Invalid => -32001,
            Reason::AlreadyAllocated => -32002,
            Reason::RangeFull => -32003,
            Reason::NotFound => -32004,
            Reason::Conflict => -32005,
            Reason::Unauthorized => -32006,
            Reason::TooLarge => -32007,
            Reason::Internal => -32000,
        }
    }
}

/// An error a request gets back. The message is complete and user-facing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub reason: Reason,
    pub message: String,
}

impl ApiError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        ApiError { reason, message: message.into() }
    }

    /// `Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`
    pub fn invalid(kind: &str, name: &str, field: &str, value: impl fmt::Display, detail: &str) -> Self {
        ApiError::new(
            Reason::Invalid,
            format!("{kind} \"{name}\" is invalid: {field}: Invalid value: {value}: {detail}"),
        )
    }

    /// `Service "web" is invalid: spec.type: Unsupported value: "Foo": supported values: ...`
    pub fn unsupported(kind: &str, name: &str, field: &str, value: impl fmt::Display, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        ApiError::new(
            Reason::Invalid,
            format!(
                "{kind} \"{name}\" is invalid: {field}: Unsupported value: {value}: supported values: {}",
                list.join(", ")
            ),
        )
    }

    /// `Service "web" is invalid: metadata.name: Required value`
    pub fn required(kind: &str, name: &str, field: &str) -> Self {
        ApiError::new(Reason::Invalid, format!("{kind} \"{name}\" is invalid: {field}: Required value"))
    }

    pub fn not_found(kind: &str, name: &str) -> Self {
        ApiError::new(Reason::NotFound, format!("{kind} \"{name}\" not found"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(Reason::Internal, message)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}
