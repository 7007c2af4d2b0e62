//! Hostile input for the journal decoder (`dispatch::journal::decode_updates` over
//! `dispatch::framing`): segments as the gateway's journal writes them (header, then one framed
//! JSON record per update), taken from a real dispatcher session, then damaged.
//!
//! Checked for every input: no panic; no allocation out of proportion to the input (a length
//! field must never size a buffer: the test counts this thread's allocations); every error names
//! an offset inside the segment (header errors only for a segment whose first 16 bytes are not
//! the header); what decodes re-encodes to exactly the bytes it came from. Updates whose JSON was
//! mutated into another valid update survive encode -> decode unchanged.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use serde_json::{Value, json};
use shardwise_core::dispatch::framing::{
    FramingError, HEADER_LEN, MAX_RECORD_LEN, Tail, encode_record, segment_header,
};
use shardwise_core::dispatch::journal::{JournalError, decode_updates, encode_update};
use shardwise_core::dispatch::wire::{
    CreateIteration, CreateJob, GetSplits, RegisterDataset, WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::dispatch::{
    DisableCompression, Dispatcher, DispatcherConfig, Driver, Millis, RegisterTfDataset,
    ReleaseClient, SplitProviderDef, TfDataset, TfGetSplit, TfWorkerInfo, TransferServer, Update,
    VecSink,
};
use shardwise_core::json::nested_deeper_than;
use shardwise_tests::fuzz::{
    Budget, Rng, Verdict, keys_of, mutate_bytes, mutate_json, run, show_bytes,
};

// ---------------------------------------------------------------------------------------------
// Counting this thread's allocations

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, counting the live bytes and their peak of the calling thread.
struct Counting;

fn grow(n: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get().saturating_add(n);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn shrink(n: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(n)));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// bookkeeping only touches thread-local counters and never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        shrink(layout.size());
        grow(new_size);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most bytes it had allocated at once.
fn peak_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, PEAK.with(Cell::get).saturating_sub(base))
}

// ---------------------------------------------------------------------------------------------
// Seeds: the updates of a real session

/// A request decoded from its JSON, as the gateway decodes it.
macro_rules! req {
    ($t:ty, $v:expr) => {
        serde_json::from_value::<$t>($v).expect("a valid request")
    };
}

/// The journal of a short session (datasets, jobs of both modes, workers, clients, splits,
/// task completion), and the snapshot it ends in.
fn session_updates() -> Vec<Update> {
    let d = Dispatcher::new(DispatcherConfig::default(), "fuzz".into(), Millis(1_000))
        .expect("a dispatcher");
    let mut d = Driver::new(d, VecSink::default());
    let t = Millis(2_000);
    let ds = d.call(t, req!(RegisterDataset, json!({
            "dataset": {"source": {"range": {"stop": 10}}, "transforms": [{"batch": {"size": 2}}]},
            "metadata": {"owner": "fuzz", "é": [1, 2.5, null]}
        })))
        .expect("register")
        .dataset_id;
    let list = d
        .call(
            t,
            (req!(
                RegisterDataset,
                json!({
                    "dataset": {"source": {"list": {"elements": ["a", {"b": 1}, [2], null]}}},
                    "dataset_id": "named-dataset"
                })
            ))
            .clone(),
        )
        .expect("register")
        .dataset_id;
    for w in ["w1:1", "w2:2"] {
        d.call(t, req!(WorkerHeartbeat, json!({"worker_address": w, "tags": ["COLOCATED"]})))
            .expect("worker heartbeat");
    }
    let dynamic = d
        .call(
            t,
            (req!(
                CreateJob,
                json!({
                    "dataset_id": ds, "processing_mode": "distributed_epoch", "split_size": 3
                })
            ))
            .clone(),
        )
        .expect("job")
        .job_id;
    let parallel = d
        .call(
            t,
            (req!(
                CreateJob,
                json!({
                    "dataset_id": list, "processing_mode": "parallel_epochs", "job_name": "shared",
                    "num_consumers": 2
                })
            ))
            .clone(),
        )
        .expect("job")
        .job_id;
    let lease = d.call(t, (dynamic, req!(CreateIteration, json!({})))).expect("iteration");
    let _ = d.call(t, (parallel, req!(CreateIteration, json!({"consumer_index": 0}))));
    let reply = d
        .call(t, req!(WorkerHeartbeat, json!({"worker_address": "w1:1"})))
        .expect("worker heartbeat");
    let _ = d.call(
        t,
        (
            lease.iteration_id,
            (req!(GetSplits, json!({"worker_address": "w1:1", "repetition": 0, "max_splits": 3})))
                .clone(),
        ),
    );
    if let Some(task) = reply.new_tasks.first() {
        let _ = d.call(t, req!(WorkerUpdate, json!({
                "worker_address": "w1:1", "updates": [{"task_id": task.task_id, "completed": true}]
            })));
    }
    let _ = d.call(t, ReleaseClient { client_id: lease.client_id });
    // TensorFlow's side: an opaque dataset (bytes in base64), a TensorFlow worker with its
    // transfer servers, a run-time compression decision and DYNAMIC splits.
    let graph = RegisterTfDataset {
        dataset_id: None,
        dataset: TfDataset {
            graph: vec![10, 3, 0, 255, 128],
            element_spec: Some(vec![1, 2]),
            compression: 2,
            cardinality: 10,
            split_providers: Ok(vec![
                SplitProviderDef::Range { start: 5, step: 5, len: 3 },
                SplitProviderDef::Slices { len: 2 },
            ]),
            fingerprint: Some("0123456789abcdef0123456789abcdef".into()),
        },
    };
    let tf_ds = d.call(t, graph).expect("register a TensorFlow dataset").dataset_id;
    d.call(
        t,
        WorkerHeartbeat {
            worker_address: "tf:3".into(),
            worker_uid: Some("42".into()),
            tensorflow: Some(TfWorkerInfo {
                transfer_servers: vec![TransferServer {
                    protocol: "grpc".into(),
                    address: "tf:3".into(),
                    compatibility_info: vec![0, 9],
                    ..TransferServer::default()
                }],
            }),
            ..WorkerHeartbeat::default()
        },
    )
    .expect("TensorFlow worker heartbeat");
    let _ = d.call(t, DisableCompression { dataset_id: tf_ds.clone(), disable: true });
    let tf_job = d
        .call(
            t,
            req!(CreateJob, json!({"dataset_id": tf_ds, "processing_mode": "distributed_epoch"})),
        )
        .expect("TensorFlow job")
        .job_id;
    let tf_it = d.call(t, (tf_job, req!(CreateIteration, json!({})))).expect("iteration");
    let _ = d.call(t, (tf_it.iteration_id, TfGetSplit { repetition: 0, split_provider_index: 1 }));
    d.handle_timeout(Millis(10_000_000));
    let mut updates: Vec<Update> = std::mem::take(&mut d.sink_mut().records);
    updates.push(d.dispatcher().snapshot());
    assert!(updates.len() > 10, "a session journals its changes: {updates:?}");
    updates
}

fn segment<'a>(updates: impl IntoIterator<Item = &'a Update>) -> Vec<u8> {
    let mut seg = segment_header().to_vec();
    for u in updates {
        encode_update(u, &mut seg).expect("encode");
    }
    seg
}

/// Segments: the whole session, each update alone, a few runs, and the snapshot alone (a
/// compacted segment).
fn seed_segments(updates: &[Update]) -> Vec<Vec<u8>> {
    let mut seeds = vec![segment(updates), segment_header().to_vec()];
    seeds.extend(updates.iter().map(std::iter::once).map(segment));
    seeds.extend(updates.windows(3).map(segment));
    seeds
}

// ---------------------------------------------------------------------------------------------
// The checks

/// The bytes framing tokens worth inserting: the header, length fields near the limits.
fn tokens() -> Vec<&'static str> {
    vec!["SHARDWJ\0", "\u{1}\0\0\0", "\0\0\0\0", "\u{ff}\u{ff}", "{\"finish_task\":", "}"]
}

/// Checks one decode of `bytes`; `canonical`: every record in it was written by
/// `encode_update`, so what decodes must re-encode byte for byte.
fn check_decode(bytes: &[u8], canonical: bool) -> Verdict {
    let (result, peak) = peak_allocation(|| decode_updates(bytes));
    // Linear in the input: a JSON payload of small numbers becomes 32-byte values (and a
    // doubling vector) at up to ~32 bytes per input byte; a length field must add nothing.
    let limit = 64 * bytes.len() + (64 << 10);
    assert!(peak <= limit, "decoding {} bytes allocated {peak} bytes at once", bytes.len());
    let len = bytes.len() as u64;
    let is_header = bytes.get(..HEADER_LEN) == Some(&segment_header()[..]);
    match result {
        Ok(replayed) => {
            let end = match &replayed.tail {
                Tail::Clean => len,
                Tail::Torn { offset, discarded, reason } => {
                    assert_eq!(offset + discarded, len, "{reason}");
                    assert!(!reason.is_empty());
                    assert!(
                        *offset == 0 || (*offset >= HEADER_LEN as u64 && *offset < len),
                        "torn at {offset} of {len}"
                    );
                    *offset
                }
            };
            if end > 0 {
                let again = segment(&replayed.updates);
                if canonical {
                    assert_eq!(again, bytes[..end as usize], "re-encoding differs");
                } else {
                    assert_eq!(decode_updates(&again).map(|r| r.updates), Ok(replayed.updates));
                }
            } else {
                assert!(replayed.updates.is_empty());
            }
            Verdict::Accepted
        }
        Err(e) => {
            match &e {
                JournalError::Framing(FramingError::Corrupt { offset, reason }) => {
                    assert!(is_header && *offset >= HEADER_LEN as u64 && *offset < len, "{e}");
                    assert!(!reason.is_empty());
                }
                JournalError::BadRecord { offset, reason } => {
                    assert!(is_header && *offset >= HEADER_LEN as u64 && *offset < len, "{e}");
                    assert!(!reason.is_empty());
                    assert!(e.to_string().contains(&format!("at offset {offset}")), "{e}");
                }
                JournalError::Framing(
                    FramingError::BadHeader { .. } | FramingError::UnsupportedVersion { .. },
                ) => assert!(!is_header, "a header error for a valid header: {e}"),
                other => panic!("decoding gave an encoder's error: {other}"),
            }
            Verdict::Rejected
        }
    }
}

/// What one input is: damaged segment bytes, or an update's JSON mutated (framed intact).
#[derive(Debug)]
enum Input {
    Bytes(Vec<u8>),
    Json(Value),
}

fn make(rng: &mut Rng, seeds: &[Vec<u8>], jsons: &[Value], keys: &[&str]) -> Input {
    match rng.below(10) {
        0..=5 => Input::Bytes(mutate_bytes(rng, seeds, &tokens())),
        6 => {
            // A huge length field in front of a short tail.
            let mut seg = rng.pick(seeds).clone();
            let len =
                *rng.pick(&[u32::MAX, MAX_RECORD_LEN as u32, MAX_RECORD_LEN as u32 + 1, 1 << 30]);
            seg.extend_from_slice(&len.to_le_bytes());
            seg.extend((0..rng.below(64)).map(|_| (rng.next_u64() & 0xff) as u8));
            Input::Bytes(seg)
        }
        _ => Input::Json(mutate_json(rng, jsons, keys)),
    }
}

#[test]
fn fuzz_journal_decoder() {
    let updates = session_updates();
    let seeds = seed_segments(&updates);
    let jsons: Vec<Value> =
        updates.iter().map(|u| serde_json::to_value(u).expect("updates are JSON")).collect();
    // The seeds themselves decode to the session.
    assert_eq!(decode_updates(&seeds[0]).map(|r| r.updates), Ok(updates.clone()));
    let keys = keys_of(&jsons);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut round_trips = 0u64;
    let report = run(
        "journal-decoder",
        Budget::from_env(5_000),
        |rng, _| make(rng, &seeds, &jsons, &keys),
        |input| match input {
            Input::Bytes(b) => show_bytes(b),
            Input::Json(v) => show_bytes(v.to_string().as_bytes()),
        },
        |input| match input {
            Input::Bytes(bytes) => check_decode(bytes, true),
            Input::Json(v) => {
                let payload = v.to_string();
                let mut seg = segment_header().to_vec();
                encode_record(payload.as_bytes(), &mut seg).expect("frame");
                let verdict = check_decode(&seg, false);
                if let Ok(update) = serde_json::from_value::<Update>(v.clone()) {
                    // encode -> decode is the identity on any update the decoder's 128-level
                    // nesting limit admits (the dispatcher keeps client values within
                    // `MAX_NESTING`, far below it); deeper ones are refused with an offset.
                    let seg = segment([&update]);
                    match decode_updates(&seg) {
                        Ok(back) => {
                            assert_eq!(back.updates, vec![update]);
                            round_trips += 1;
                        }
                        Err(e) => {
                            assert!(nested_deeper_than(v, 120), "{e}");
                            assert!(matches!(e, JournalError::BadRecord { offset: 16, .. }), "{e}");
                        }
                    }
                }
                verdict
            }
        },
    );
    println!("fuzz journal-decoder: {round_trips} mutated updates round-tripped");
    assert!(report.accepted > 0 && report.rejected > 0 && round_trips > 0, "{report:?}");
}
