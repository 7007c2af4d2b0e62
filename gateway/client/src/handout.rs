//! The part of a stream that hands a read's payload out item by item: JSON elements one by
//! one ([`crate::ElementStream`]), Arrow record batches one by one
//! ([`crate::RecordBatchStream`]). It buffers the current read's items, counts the rows not
//! handed out yet, and folds what was handed out into the read's [`Positions`].

use std::collections::VecDeque;
use std::task::{Context, Poll};

use serde_json::Value;
use shardwise_core::client::{Batch, Positions};
use shardwise_core::position::ReadPosition;
use tokio::sync::mpsc;

use crate::fetch::RecordBatches;
use crate::{ClientError, no_position};

/// A read's payload as the items a stream hands out, each of some rows.
pub(crate) trait Items {
    /// What the stream yields.
    type Item;
    /// The payload's items, in order, and their rows.
    fn into_items(self) -> (VecDeque<Self::Item>, usize);
    /// The rows of one item.
    fn item_rows(item: &Self::Item) -> usize;
}

impl Items for Vec<Value> {
    type Item = Value;

    fn into_items(self) -> (VecDeque<Value>, usize) {
        let rows = self.len();
        (self.into(), rows)
    }

    fn item_rows(_: &Value) -> usize {
        1
    }
}

impl Items for RecordBatches {
    type Item = arrow_array::RecordBatch;

    fn into_items(self) -> (VecDeque<arrow_array::RecordBatch>, usize) {
        (self.batches.into(), self.rows)
    }

    fn item_rows(batch: &arrow_array::RecordBatch) -> usize {
        batch.num_rows()
    }
}

/// The reads of a stream's driver, handed out item by item.
#[derive(Debug)]
pub(crate) struct Handout<P: Items> {
    rx: mpsc::Receiver<Result<Batch<P>, ClientError>>,
    /// The current read's items not handed out yet.
    pending: VecDeque<P::Item>,
    /// Their rows.
    pending_rows: usize,
    done: bool,
    positions: Positions,
}

impl<P: Items> Handout<P> {
    pub(crate) fn new(
        rx: mpsc::Receiver<Result<Batch<P>, ClientError>>,
        positions: Positions,
    ) -> Handout<P> {
        Handout { rx, pending: VecDeque::new(), pending_rows: 0, done: false, positions }
    }

    /// The position of the rows handed out (see [`crate::ElementStream::position`]).
    pub(crate) fn position(&self) -> Result<ReadPosition, ClientError> {
        self.positions.position(self.pending_rows).map_err(no_position)
    }

    /// The next item; the end after the driver's last read or its error.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<P::Item, ClientError>>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                self.pending_rows = self.pending_rows.saturating_sub(P::item_rows(&item));
                return Poll::Ready(Some(Ok(item)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(read))) => {
                    let (items, rows) = read.elements.into_items();
                    self.positions.arrived(rows, read.origin.as_deref());
                    self.pending = items;
                    self.pending_rows = rows;
                }
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    return Poll::Ready(None);
                }
            }
        }
    }
}
