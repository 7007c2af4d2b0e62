//! The replay check every dispatcher test harness makes, in one place: the journal a harness
//! keeps (the records its dispatcher emitted, in order) must replay to the live state, and so
//! must a snapshot of the live state, compared in full.
//!
//! Included by the harnesses directly (`#[path]`) and by the simulation (`support::replay`).
#![allow(dead_code)]

use shardwise_core::dispatch::{State, Update, VecSink};

/// Moves the records `sink` holds onto `journal`, each checked to come back unchanged from its
/// JSON encoding (the encoding of the journal's records).
pub(crate) fn take_records(sink: &mut VecSink, journal: &mut Vec<Update>) {
    for u in std::mem::take(&mut sink.records) {
        let text = serde_json::to_string(&u).expect("a record encodes");
        let back: Update = serde_json::from_str(&text).expect("a record decodes");
        assert_eq!(back, u, "a record survives its encoding");
        journal.push(u);
    }
}

/// Panics (saying `what` was compared) unless `replayed` is the same state as `live`: equal
/// durable fields (`State`'s `PartialEq`, which names every field) and the same update count
/// (`version`, which that equality leaves out): together, every field a snapshot record holds.
/// Cheap enough to run after every call.
pub(crate) fn assert_same_state(what: &str, replayed: &State, live: &State) {
    assert!(replayed == live, "{what}: the states differ\nreplayed: {replayed:?}\nlive: {live:?}");
    assert_eq!(replayed.version(), live.version(), "{what}: the update counts differ");
}

/// Panics (saying whose they are) unless the derived indexes of `state` are what a rebuild
/// makes of its durable fields.
pub(crate) fn assert_indexes(what: &str, state: &State) {
    state.check_heartbeat_index().unwrap_or_else(|e| panic!("{what}: derived indexes: {e:?}"));
}

/// The full replay check: `journal` replayed onto a fresh state (configured with
/// `worker_addresses`) is `live` ([`assert_same_state`]), and so is a snapshot record of
/// `live`, through its JSON encoding, replayed alone (what a compacted journal holds); the
/// derived indexes of all three are what a rebuild makes ([`assert_indexes`]). `when` says
/// when the check ran in a failure's message (e.g. a simulation's seed).
pub(crate) fn check_replay(
    when: &str,
    worker_addresses: Vec<String>,
    journal: &[Update],
    live: &State,
) {
    let replayed = State::replay(worker_addresses, journal);
    assert_same_state(&format!("the journal's replay{when}"), &replayed, live);
    assert_indexes(&format!("the live state{when}"), live);
    assert_indexes(&format!("the journal's replay{when}"), &replayed);
    let snapshot = Update::Snapshot { state: Box::new(live.clone()) };
    let text = serde_json::to_string(&snapshot).expect("a snapshot encodes");
    let snapshot: Update = serde_json::from_str(&text).expect("a snapshot decodes");
    let from_snapshot = State::replay(vec![], [&snapshot]);
    assert_same_state(&format!("a snapshot's replay{when}"), &from_snapshot, live);
    assert_indexes(&format!("a snapshot's replay{when}"), &from_snapshot);
}
