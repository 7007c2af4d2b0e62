//! [`Watch`]: the changes of a key range, on one `Watch` stream.

use tokio::sync::mpsc;
use tonic::Streaming;

use super::client::{AttemptError, Client, classify, watch, with_leader};
use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
};
use super::{Error, Event, in_range};

/// At most this many bytes of events in one batch (the fragments of one answer put together);
/// etcd sends at most a thousand revisions per answer.
const MAX_BATCH_BYTES: usize = 256 << 20;

/// Changes of a key range, in revision order, from [`Client::watch`].
///
/// [`Watch::next`] gives them batch by batch. The watch ends with an error: the member went
/// away or lost its leader (the stream breaks: [`Error::Unavailable`]), or the start revision
/// was compacted ([`Error::Compacted`], reported by the first `next` after the watch was
/// opened). After an error, watch again from the last batch's revision + 1.
#[derive(Debug)]
pub struct Watch {
    url: String,
    key: Vec<u8>,
    range_end: Vec<u8>,
    watch_id: i64,
    /// The request side of the stream: open as long as the watch lives.
    requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
    /// The revision of the last batch delivered (the start revision - 1 before the first).
    revision: i64,
    ended: bool,
}

/// Changes up to a revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchBatch {
    /// Every change of the range up to and including this revision has been delivered (in
    /// this batch or an earlier one): a watch opened again continues from `revision + 1`.
    pub revision: i64,
    /// The changes, in revision order; none in a progress notification.
    pub events: Vec<Event>,
}

/// Opens a watch on the first member that accepts it (see [`Client::watch`]).
pub(super) async fn open(
    client: &Client,
    key: Vec<u8>,
    range_end: Vec<u8>,
    start_revision: i64,
) -> Result<Watch, Error> {
    client
        .call("watch", |channel, url| {
            let key = key.clone();
            let range_end = range_end.clone();
            async move {
                let (requests, receiver) = mpsc::channel(4);
                let create = WatchCreateRequest {
                    key: key.clone(),
                    range_end: range_end.clone(),
                    start_revision,
                    progress_notify: true,
                    fragment: true,
                    ..WatchCreateRequest::default()
                };
                requests
                    .send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) })
                    .await
                    .map_err(|_| AttemptError::Malformed("the request stream closed".into()))?;
                let stream = futures::stream::unfold(receiver, |mut receiver| async move {
                    receiver.recv().await.map(|request| (request, receiver))
                });
                let mut responses = watch(channel).watch(with_leader(stream)).await?.into_inner();
                let Some(created) = responses.message().await? else {
                    return Err(AttemptError::Malformed("the stream ended".into()));
                };
                if !created.created {
                    return Err(AttemptError::Malformed(
                        "the first answer is not `created`".into(),
                    ));
                }
                if created.header.is_none() {
                    return Err(AttemptError::Malformed("no header".into()));
                }
                if created.compact_revision > 0 {
                    let compact_revision = created.compact_revision;
                    return Err(AttemptError::Final(Error::Compacted { compact_revision }));
                }
                if created.canceled {
                    return Err(AttemptError::Final(Error::Rejected {
                        code: tonic::Code::FailedPrecondition,
                        message: created.cancel_reason,
                    }));
                }
                Ok(Watch {
                    url,
                    key,
                    range_end,
                    watch_id: created.watch_id,
                    requests,
                    responses,
                    revision: start_revision.saturating_sub(1).max(0),
                    ended: false,
                })
            }
        })
        .await
}

impl Watch {
    /// The next batch of changes (or a progress notification, without events).
    pub async fn next(&mut self) -> Result<WatchBatch, Error> {
        if self.ended {
            return Err(Error::Unavailable { detail: format!("the watch on {} ended", self.url) });
        }
        let batch = self.receive().await;
        match &batch {
            Ok(batch) => self.revision = batch.revision,
            Err(_) => self.ended = true,
        }
        batch
    }

    /// Asks etcd for a progress notification: a batch without events carrying the current
    /// revision, once the watch has delivered every change up to it.
    pub async fn request_progress(&self) -> Result<(), Error> {
        let request = WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        };
        self.requests.send(request).await.map_err(|_| Error::Unavailable {
            detail: format!("the watch stream to {} is closed", self.url),
        })
    }

    async fn receive(&mut self) -> Result<WatchBatch, Error> {
        let url = self.url.clone();
        let malformed = |detail: String| Error::malformed(&url, "a watch", detail);
        let mut events: Vec<Event> = Vec::new();
        let mut bytes = 0usize;
        loop {
            let response = match self.responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => {
                    return Err(Error::Unavailable {
                        detail: format!("the watch stream from {url} ended"),
                    });
                }
                Err(status) => {
                    return Err(match classify(&status) {
                        Ok(why) => Error::Unavailable { detail: format!("watch on {url}: {why}") },
                        Err(e) => e,
                    });
                }
            };
            // A progress notification asked for with `request_progress` is for the whole
            // stream: etcd sends it with watch id -1.
            let progress = response.watch_id == -1 && response.events.is_empty();
            if response.watch_id != self.watch_id && !progress {
                return Err(malformed(format!(
                    "an answer for watch {} on watch {}",
                    response.watch_id, self.watch_id
                )));
            }
            let Some(header) = response.header else {
                return Err(malformed("no header".to_owned()));
            };
            if response.compact_revision > 0 {
                return Err(Error::Compacted { compact_revision: response.compact_revision });
            }
            if response.canceled {
                return Err(Error::Unavailable {
                    detail: format!("{url} cancelled the watch: {}", response.cancel_reason),
                });
            }
            if response.created {
                return Err(malformed("a second `created` answer".to_owned()));
            }
            for event in response.events {
                let Some(kv) = &event.kv else {
                    return Err(malformed("an event without a key".to_owned()));
                };
                let previous = events
                    .last()
                    .and_then(|e| e.kv.as_ref())
                    .map_or(self.revision, |kv| kv.mod_revision);
                if kv.mod_revision < previous.max(1) || kv.mod_revision > header.revision {
                    return Err(malformed(format!(
                        "an event at revision {} after revision {previous} (store at {})",
                        kv.mod_revision, header.revision
                    )));
                }
                if !in_range(&kv.key, &self.key, &self.range_end) {
                    return Err(malformed(format!(
                        "an event of key {:?}, outside the range watched",
                        String::from_utf8_lossy(&kv.key)
                    )));
                }
                bytes += kv.key.len() + kv.value.len();
                if bytes > MAX_BATCH_BYTES {
                    return Err(Error::Unavailable {
                        detail: format!("a watch batch from {url} over {MAX_BATCH_BYTES} bytes"),
                    });
                }
                events.push(event);
            }
            if response.fragment {
                continue;
            }
            let revision = match events.last().and_then(|e| e.kv.as_ref()) {
                Some(kv) => kv.mod_revision,
                None => header.revision,
            };
            if revision < self.revision {
                return Err(malformed(format!(
                    "revision {revision} after revision {}",
                    self.revision
                )));
            }
            return Ok(WatchBatch { revision, events });
        }
    }
}
