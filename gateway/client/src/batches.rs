//! [`distribute_batches`]: the read of [`crate::distribute`], with the rows of a columnar
//! dataset as Arrow record batches instead of JSON elements.
//!
//! Every element read asks the worker for one Arrow IPC stream (`Accept:`
//! [`ARROW_STREAM`](crate::arrow_stream::ARROW_STREAM), compressed as
//! [`DistributeOptions::arrow_compression`] says) and decodes it with
//! [`decode_stream`](crate::arrow_stream::decode_stream); the stream hands out its record
//! batches one by one, in order. Everything else (the dispatcher calls, task lists,
//! retries, coordinated reads, the end of the read, the lease) is the JSON stream's, driven by
//! the same loop.
//!
//! **Positions count rows.** A record batch handed out is all its rows consumed; the batches
//! of a read not handed out yet are not. The read's origin runs (the stream's schema
//! metadata) cover its rows in order, so a position taken between two batches is exact.

use std::pin::Pin;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use futures::Stream;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::position::ReadPosition;

use crate::fetch::{Arrow, RecordBatches};
use crate::handout::Handout;
use crate::{ClientError, Dispatchers, DistributeOptions, start};

/// The record batches of a [`distribute_batches`] call. Dropping it stops the reads and
/// releases the client lease.
#[derive(Debug)]
pub struct RecordBatchStream(Handout<RecordBatches>);

impl RecordBatchStream {
    /// Where the caller is in the read: every row of the record batches this stream handed
    /// out (and, when it resumed, everything its [`DistributeOptions::resume_from`] covered),
    /// not those still buffered in the client. Save it with a model checkpoint; resume with
    /// [`DistributeOptions::resume_from`], with this stream or [`crate::distribute`].
    ///
    /// `FAILED_PRECONDITION` ([`ClientError::FailedPrecondition`]) when the read has no exact
    /// positions, as [`crate::ElementStream::position`] says.
    pub fn position(&self) -> Result<ReadPosition, ClientError> {
        self.0.position(0)
    }

    /// [`RecordBatchStream::position`], the last `held_back` rows handed out of the current
    /// read not counted (the caller has not passed them on yet: say the rows of a batch it
    /// cuts in two).
    pub fn position_holding_back(&self, held_back: usize) -> Result<ReadPosition, ClientError> {
        self.0.position(held_back)
    }

    /// Waits until the read is set up, as [`crate::ElementStream::ready`] does.
    pub async fn ready(&mut self) -> Result<crate::ReadInfo, ClientError> {
        self.0.ready().await
    }

    /// Asks for at most `count` rows per read from now on (clamped to 1..=10,000).
    pub fn set_elements_per_request(&self, count: u32) {
        self.0.set_elements_per_request(count);
    }

    /// The tasks the stream reads (or read), as of its last answer.
    pub fn tasks(&self) -> Vec<crate::TaskReadInfo> {
        self.0.tasks()
    }

    /// The read is over, as [`crate::ElementStream::is_over`] says.
    pub fn is_over(&self) -> bool {
        self.0.is_over()
    }

    /// Stops the read and waits for the lease's release, as [`crate::ElementStream::close`]
    /// does.
    pub async fn close(&mut self) {
        self.0.close().await;
    }
}

impl Stream for RecordBatchStream {
    type Item = Result<RecordBatch, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_next(cx)
    }
}

/// Reads `dataset` through the dispatcher at `dispatchers` as [`crate::distribute`] does, as
/// Arrow record batches: each worker read is one Arrow IPC stream, whose record batches the
/// stream hands out in order (a batch has at least one row). For columnar datasets (`files`
/// sources of the `parquet`, `arrow` and `tfrecord` formats); workers refuse others. Errors,
/// including bad options and bad URLs, arrive as the stream's last item; an answer that is not
/// an Arrow stream is [`ClientError::Protocol`].
pub fn distribute_batches(
    dispatchers: impl Dispatchers,
    dataset: DatasetDef,
    options: DistributeOptions,
) -> RecordBatchStream {
    let fetch = Arrow { max_bytes: options.max_read_bytes, compression: options.arrow_compression };
    RecordBatchStream(start(dispatchers, dataset, options, fetch))
}

#[cfg(test)]
mod tests;
