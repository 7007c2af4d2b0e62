//! The worker's data plane on the wire, what the worker serves and the client reads:
//! `GET /v1/tasks/{task_id}/elements` and its bounds.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::position::OriginRun;

/// Elements per read when `max` is not given.
pub const DEFAULT_MAX_ELEMENTS: u32 = 100;
/// The largest `max`.
pub const MAX_ELEMENTS: u32 = 10_000;
/// Reply of `GET /v1/tasks/{task_id}/elements`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Elements {
    /// The next elements of the task, in order. Empty when none arrived within about half a
    /// second: ask again.
    pub elements: Vec<Value>,
    /// The task is over: it produced every element and the dispatcher acknowledged its
    /// completion. Nothing more will come.
    pub end_of_sequence: bool,
    /// Where `elements` come from, for read positions: runs covering them in order, each
    /// `count` consecutive elements of one split (its source positions as get-split hands it
    /// out), starting at output offset `offset` of that split; `end` marks a run whose last
    /// element is the split's last. Present for the tasks of a `distributed_epoch` (DYNAMIC)
    /// read of a dataset whose positions are exact (no transform but `shard_hint`) when
    /// elements are returned; absent otherwise (and for coordinated reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Vec<OriginRun>>,
}
