//! The worker's data plane on the wire, what the worker serves and the client reads:
//! `GET /v1/tasks/{task_id}/elements` and its bounds.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Elements per read when `max` is not given.
pub const DEFAULT_MAX_ELEMENTS: u32 = 100;
/// The largest `max`.
pub const MAX_ELEMENTS: u32 = 10_000;
/// Reply of `GET /v1/tasks/{task_id}/elements`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Elements {
    /// The next elements of the task, in order. Empty when none arrived within about half a
    /// second: ask again.
    pub elements: Vec<Value>,
    /// The task is over: it produced every element and the dispatcher acknowledged its
    /// completion. Nothing more will come.
    pub end_of_sequence: bool,
}
