//! The socket API: JSON-RPC 2.0, one request per line, over a Unix stream socket.

pub mod peer;
pub mod rpc;
pub mod server;

pub use rpc::{RpcError, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
