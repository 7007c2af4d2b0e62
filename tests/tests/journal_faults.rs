//! Damage to a fault-tolerant dispatcher's work dir, done to the real files: each kind gives
//! its documented outcome (docs/reliability.md) and never silently drops an acknowledged
//! record. Crash points inside the journal are enumerated exhaustively by the
//! `shardwise_journal::crash_points` unit test; these tests check the same outcomes end to end.

use std::path::PathBuf;

use serde_json::json;
use shardwise_tests::{Dispatcher, TempDir};

const FT: &[&str] = &["--fault-tolerant"];

fn start(dir: &TempDir) -> Result<Dispatcher, String> {
    let mut args = vec!["--work-dir", dir.path()];
    args.extend_from_slice(FT);
    Dispatcher::try_start(&args)
}

/// Registers a dataset of `stop` elements and returns its id (acknowledged: 200).
fn register(d: &Dispatcher, stop: u64) -> String {
    let r = d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": stop}}}})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["dataset_id"].as_str().unwrap().to_owned()
}

fn segments(dir: &TempDir) -> Vec<PathBuf> {
    let mut s: Vec<PathBuf> =
        std::fs::read_dir(dir.0.join("journal")).unwrap().map(|e| e.unwrap().path()).collect();
    s.sort();
    s
}

/// Every acknowledged dataset is there with its definition.
fn assert_all_there(d: &Dispatcher, acked: &[(String, u64)]) {
    for (id, stop) in acked {
        let r = d.call("GET", &format!("/v1/datasets/{id}"), None);
        assert_eq!(r.status, 200, "dataset {id} lost: {}", r.body);
        assert_eq!(r.json()["dataset"]["source"]["range"]["stop"], *stop, "dataset {id}");
    }
}

#[test]
fn a_missing_segment_refuses_to_start_and_names_it() {
    let dir = TempDir::new("missing-segment");
    for stop in 1..=3 {
        // Every run writes its own segment.
        let d = start(&dir).unwrap();
        register(&d, stop);
    }
    let segs = segments(&dir);
    assert_eq!(segs.len(), 3, "{segs:?}");
    std::fs::remove_file(&segs[1]).unwrap();
    let err = start(&dir).unwrap_err();
    assert!(err.contains("exited with Some("), "{err}");
    assert!(err.contains("is missing"), "{err}");
    assert!(err.contains(segs[1].to_str().unwrap()), "{err}");
    // Nothing was changed: the two remaining segments are as they were.
    assert_eq!(segments(&dir), vec![segs[0].clone(), segs[2].clone()]);
}

#[test]
fn a_segment_cut_short_while_created_is_dropped_and_every_later_start_works() {
    let dir = TempDir::new("torn-header");
    let mut acked = Vec::new();
    {
        let d = start(&dir).unwrap();
        for stop in 1..=3 {
            acked.push((register(&d, stop), stop));
        }
    }
    // A crash while the next run created its segment: an empty file, or part of a header.
    let header_start = std::fs::read(&segments(&dir)[0]).unwrap()[..5].to_vec();
    for torn in [&b""[..], &header_start[..]] {
        let segs = segments(&dir);
        let last = segs.last().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
        let n: u64 = last.trim_start_matches("segment-").trim_end_matches(".swj").parse().unwrap();
        let next = dir.0.join("journal").join(format!("segment-{:012}.swj", n + 1));
        std::fs::write(&next, torn).unwrap();
        for _ in 0..2 {
            let d = start(&dir).unwrap_or_else(|e| panic!("start after a torn header: {e}"));
            assert_all_there(&d, &acked);
            acked.push((register(&d, 10 + acked.len() as u64), 10 + acked.len() as u64));
        }
        assert!(
            segments(&dir).iter().all(|p| std::fs::metadata(p).unwrap().len() > 0),
            "no empty segment is left behind"
        );
    }
}

#[test]
fn a_flipped_byte_in_an_acknowledged_record_refuses_with_file_and_offset() {
    let dir = TempDir::new("flipped");
    {
        let d = start(&dir).unwrap();
        for stop in 1..=4 {
            register(&d, stop);
        }
    }
    let seg = segments(&dir)[0].clone();
    let good = std::fs::read(&seg).unwrap();
    // Every byte after the header, one at a time: refused (or, for the final record only,
    // truncated as a torn append, with a warning naming it), never silently accepted.
    let mut refused = 0;
    for at in (16..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        std::fs::write(&seg, &bad).unwrap();
        match start(&dir) {
            Err(err) => {
                assert!(err.contains("is corrupt at byte offset"), "{err}");
                assert!(err.contains(seg.to_str().unwrap()), "{err}");
                refused += 1;
            }
            Ok(d) => {
                // The warning goes to stderr, which is collected in the background.
                // (Bounded: the assertion below names what it printed instead.)
                let _ = shardwise_tests::try_poll_until(std::time::Duration::from_secs(10), || {
                    if d.output().contains("truncated a torn final record") {
                        Ok(())
                    } else {
                        Err(())
                    }
                });
                let out = d.output();
                drop(d);
                assert!(out.contains("truncated a torn final record"), "byte {at}: {out}");
                // Put the original back (the start truncated it and added a segment).
                for s in segments(&dir).into_iter().skip(1) {
                    std::fs::remove_file(s).unwrap();
                }
            }
        }
        std::fs::write(&seg, &good).unwrap();
    }
    assert!(refused > 0);
}

/// The journal's file cannot grow (the process limited to 64 KiB files, so a write
/// past it fails with `EFBIG`, as one to a full disk fails with `ENOSPC`). The write that fails
/// and every later change answer 503; `/readyz` names the real cause and that the dispatcher
/// stopped accepting changes (it used to say it was "replaying its journal"). Restarted
/// without the limit (space back), it has every acknowledged change and accepts more.
#[test]
fn a_journal_that_cannot_grow_is_named_by_readyz_and_a_restart_keeps_every_acknowledged_change() {
    let dir = TempDir::new("file-size-limit");
    let args = ["--work-dir", dir.path(), "--fault-tolerant"];
    let d = Dispatcher::try_start_file_size_limited(&args, 64 << 10).expect("a limited start");
    // About 2 KiB a record: the 64 KiB limit is reached within a few dozen.
    let padding = "x".repeat(2048);
    let mut acked = Vec::new();
    let refused = (0..1000)
        .find_map(|i| {
            let id = format!("ds-{i}");
            let def = json!({"source": {"list": {"elements": [{"i": i, "pad": padding}]}}});
            let r = d.call("POST", "/v1/datasets", Some(json!({"dataset": def, "dataset_id": id})));
            if r.status == 200 {
                acked.push(id);
                None
            } else {
                Some(r)
            }
        })
        .expect("a registration refused within 1000 (2 MiB) against a 64 KiB limit");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(acked.len() >= 10, "only {} registrations acknowledged", acked.len());
    // Nothing more is acknowledged.
    let r = d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 1}}}})),
    );
    assert_eq!(r.status, 503, "{}", r.body);
    let ready = d.call("GET", "/readyz", None);
    println!("/readyz: {} {}", ready.status, ready.body);
    assert_eq!(ready.status, 503, "{}", ready.body);
    for names in ["the journal could not be written", "File too large", "stopped accepting changes"]
    {
        assert!(ready.body.contains(names), "/readyz does not say {names:?}: {}", ready.body);
    }
    assert!(!ready.body.contains("replaying its journal"), "{}", ready.body);
    drop(d);
    // Space back: every acknowledged change is there, and changes are accepted again.
    let d = start(&dir).unwrap_or_else(|e| panic!("restart after the failed write: {e}"));
    for id in &acked {
        let r = d.call("GET", &format!("/v1/datasets/{id}"), None);
        assert_eq!(r.status, 200, "acknowledged dataset {id} lost: {}", r.body);
    }
    register(&d, 7);
}
