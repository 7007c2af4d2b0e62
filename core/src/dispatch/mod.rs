//! The tf.data service dispatcher as a sans-IO state machine.
//!
//! # The drive rule
//!
//! ```text
//! loop {
//!     let reply = dispatcher.handle_*(now, request);   // decide (pure)
//!     while let Some(record) = dispatcher.poll_journal() {
//!         journal.append(record);                       // make durable ...
//!     }
//!     journal.sync()?;                                  // ... before any reply leaves
//!     send(reply);
//!     sleep_until(dispatcher.poll_timeout());           // then: dispatcher.handle_timeout(now)
//! }
//! ```
//!
//! Every state change is an [`Update`]; [`apply`] is the one function that performs it, on
//! the live path and in [`recover`], so replaying the journal rebuilds exactly the state the
//! replies were computed from. If making a record durable fails, the replies must not be
//! sent and the process must stop accepting requests: its memory is ahead of its journal.

pub mod dispatcher;
pub mod error;
pub mod framing;
pub mod journal;
pub mod state;
pub mod types;

pub use dispatcher::{Dispatcher, DispatcherConfig, Event};
pub use error::DispatchError;
pub use state::{State, Update, apply, recover};
pub use types::{ClientId, IterationId, JobId, Millis, ShardingPolicy, TargetWorkers, TaskId};
