//! The part of a stream that hands a read's payload out item by item: JSON elements one by
//! one ([`crate::ElementStream`]), Arrow record batches one by one
//! ([`crate::RecordBatchStream`]). It buffers the current read's items, counts the rows not
//! handed out yet, and folds what was handed out into the read's [`Positions`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use serde_json::Value;
use shardwise_core::client::{Batch, Positions, TaskReadInfo};
use shardwise_core::position::ReadPosition;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::fetch::RecordBatches;
use crate::{ClientError, ReadInfo, no_position};

/// What a stream and its driver share besides the channel of reads.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// The caller waits for an item and none is ready (reads wanted now, with `read_ahead`
    /// 0).
    pub(crate) waiting: AtomicBool,
    /// Wakes the driver: the caller took a read (room ahead) or started waiting.
    pub(crate) wake: Notify,
    /// A new `elements_per_request` (0: none asked for).
    pub(crate) elements_per_request: AtomicU32,
    /// The tasks, as of the reader's last answer.
    pub(crate) tasks: Mutex<Vec<TaskReadInfo>>,
}

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
    /// The read's ids once it is set up (taken from `info_rx`).
    info: Option<ReadInfo>,
    info_rx: Option<oneshot::Receiver<ReadInfo>>,
    /// The error that ended the read before it was set up, already given by `ready`.
    failed: Option<ClientError>,
    control: Arc<Control>,
    /// The driver's task (`None` without a runtime).
    driver: Option<tokio::task::JoinHandle<()>>,
}

impl<P: Items> Handout<P> {
    pub(crate) fn new(
        rx: mpsc::Receiver<Result<Batch<P>, ClientError>>,
        positions: Positions,
        info_rx: oneshot::Receiver<ReadInfo>,
        control: Arc<Control>,
        driver: Option<tokio::task::JoinHandle<()>>,
    ) -> Handout<P> {
        Handout {
            rx,
            pending: VecDeque::new(),
            pending_rows: 0,
            done: false,
            positions,
            info: None,
            info_rx: Some(info_rx),
            failed: None,
            control,
            driver,
        }
    }

    /// The read is over: its end or error was handed out, it was closed, or its driver ended
    /// (whatever is still to hand out).
    pub(crate) fn is_over(&self) -> bool {
        self.done || self.driver.as_ref().is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Stops the read: what was not handed out is dropped (positions count what was), the
    /// driver releases the lease and ends, which this waits for.
    pub(crate) async fn close(&mut self) {
        self.rx.close();
        while self.rx.recv().await.is_some() {}
        self.done = true;
        self.pending.clear();
        if let Some(driver) = self.driver.take() {
            let _ = driver.await;
        }
    }

    /// The position of the rows handed out, the last `held_back` of the current read aside
    /// (see [`crate::ElementStream::position`]).
    pub(crate) fn position(&self, held_back: usize) -> Result<ReadPosition, ClientError> {
        let handed = self.positions.batch_len().saturating_sub(self.pending_rows);
        if held_back > handed {
            return Err(ClientError::InvalidArgument(format!(
                "held_back must be between 0 and the {handed} rows handed out of the current \
                 read, not {held_back}"
            )));
        }
        self.positions.position(self.pending_rows + held_back).map_err(no_position)
    }

    /// The read's ids once it is set up; the error that ended it before.
    pub(crate) async fn ready(&mut self) -> Result<ReadInfo, ClientError> {
        if let Some(info) = &self.info {
            return Ok(info.clone());
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let rx = self.info_rx.take();
        match rx {
            Some(rx) => match rx.await {
                Ok(info) => {
                    self.info = Some(info.clone());
                    Ok(info)
                }
                // Set up failed: its error is the read's only item.
                Err(_) => {
                    let e = match self.rx.recv().await {
                        Some(Err(e)) => e,
                        _ => ClientError::Protocol {
                            context: "setting the read up".into(),
                            detail: "the reader stopped without a word".into(),
                        },
                    };
                    self.done = true;
                    self.failed = Some(e.clone());
                    Err(e)
                }
            },
            None => Err(ClientError::FailedPrecondition("the read is over".into())),
        }
    }

    /// See [`crate::ElementStream::set_elements_per_request`].
    pub(crate) fn set_elements_per_request(&self, count: u32) {
        let count = count.clamp(1, shardwise_core::client::wire::MAX_ELEMENTS);
        self.control.elements_per_request.store(count, Ordering::Relaxed);
        self.control.wake.notify_one();
    }

    /// See [`crate::ElementStream::tasks`].
    pub(crate) fn tasks(&self) -> Vec<TaskReadInfo> {
        self.control.tasks.lock().map(|t| t.clone()).unwrap_or_default()
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
                Poll::Pending => {
                    if !self.control.waiting.swap(true, Ordering::AcqRel) {
                        self.control.wake.notify_one();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(read))) => {
                    // Taken: room for the next read ahead.
                    self.control.waiting.store(false, Ordering::Release);
                    self.control.wake.notify_one();
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
