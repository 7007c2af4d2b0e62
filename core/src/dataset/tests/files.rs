//! Files: requested one at a time, JSON Lines errors, bytes files, DYNAMIC path splits.

use super::*;

#[test]
fn files_are_requested_one_at_a_time() {
    let d = def_json(json!({"source": {"files": {"paths": ["a", "b"], "format": "lines"}}}));
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    assert_eq!(p.next(), Step::NeedFile { path: "a".into() });
    assert_eq!(p.next(), Step::NeedFile { path: "a".into() }, "asked again until provided");
    p.provide_file("a", b"1\r\n2");
    assert_eq!(p.next(), Step::Element(json!("1").into()));
    assert_eq!(p.next(), Step::Element(json!("2").into()));
    assert_eq!(p.next(), Step::NeedFile { path: "b".into() });
    p.provide_file("b", b"");
    assert_eq!(p.next(), Step::End);
    assert_eq!(p.next(), Step::End);
}

#[test]
fn jsonl_errors_name_file_and_line() {
    let d = def_json(json!({"source": {"files": {"paths": ["data/x.jsonl"], "format": "jsonl"}}}));
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    assert_eq!(p.next(), Step::NeedFile { path: "data/x.jsonl".into() });
    p.provide_file("data/x.jsonl", b"{\"a\": 1}\n\n[1, 2\n3\n");
    assert_eq!(p.next(), Step::Element(json!({"a": 1}).into()));
    let Step::Error(err) = p.next() else { panic!("expected an error") };
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.message().starts_with("file \"data/x.jsonl\" line 3 is not valid JSON"), "{err}");
    assert_eq!(p.next(), Step::Error(err.clone()), "the error sticks");
    p.provide_file("data/x.jsonl", b"1");
    assert_eq!(p.next(), Step::Error(err));
}

#[test]
fn bytes_files_are_one_element_each() {
    let d = def_json(json!({"source": {"files": {"paths": ["t", "b"], "format": "bytes"}}}));
    let files: Files = [("t".to_string(), b"hi\nthere".to_vec()), ("b".to_string(), vec![0xff, 1])]
        .into_iter()
        .collect();
    // One element type: a base64 string for a UTF-8 file and a binary one alike.
    assert_eq!(
        run_with(&d, Sharding::Off, &files).unwrap(),
        [json!("aGkKdGhlcmU="), json!("/wE=")]
    );
}

#[test]
fn dynamic_files_come_as_path_splits() {
    let (d, files) = five_files();
    let outputs = run_dynamic_limited(&d, 2, 1, &files, usize::MAX);
    let mut all: Vec<String> =
        outputs.iter().flatten().map(|v| v.as_str().unwrap().to_owned()).collect();
    all.sort();
    assert_eq!(all, ["0", "1", "1", "2", "2", "2", "3", "3", "3", "3", "4", "4", "4", "4", "4"]);
}
