//! The worker's data plane on the wire, what the worker serves and the client reads:
//! `GET /v1/tasks/{task_id}/elements` and its bounds. The types live in core, beside the
//! client's reader that consumes them.

pub use shardwise_core::client::wire::{DEFAULT_MAX_ELEMENTS, Elements, MAX_ELEMENTS};
