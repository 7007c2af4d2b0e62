//! The options, fingerprints, positions without a read, and a stream outside a runtime.

use super::*;

#[test]
fn fingerprints_are_stable_and_distinct() {
    let a: DatasetDef = r#"{"source": {"range": {"stop": 10}}}"#.parse().unwrap();
    let b: DatasetDef = r#"{"source": {"range": {"stop": 10, "step": 1}}}"#.parse().unwrap();
    let c: DatasetDef = r#"{"source": {"range": {"stop": 11}}}"#.parse().unwrap();
    assert_eq!(fingerprint(&a), fingerprint(&b), "canonical form");
    assert_ne!(fingerprint(&a), fingerprint(&c));
    assert_eq!(fingerprint(&a).len(), 35);
}

#[test]
fn options_are_validated() {
    let ok = DistributeOptions::default();
    assert!(validate(&ok).is_ok());
    let bad = [
        DistributeOptions { num_consumers: Some(2), ..ok.clone() },
        DistributeOptions {
            num_consumers: Some(2),
            consumer_index: Some(2),
            job_name: Some("j".into()),
            ..ok.clone()
        },
        DistributeOptions { num_consumers: Some(2), consumer_index: Some(0), ..ok.clone() },
        DistributeOptions { consumer_index: Some(0), ..ok.clone() },
        DistributeOptions { max_outstanding_requests: 0, ..ok.clone() },
        DistributeOptions { elements_per_request: 0, ..ok.clone() },
        DistributeOptions { target_workers: TargetWorkers::Local, ..ok.clone() },
        DistributeOptions { max_read_bytes: 4095, ..ok.clone() },
    ];
    for o in bad {
        assert_eq!(validate(&o).unwrap_err().code(), "INVALID_ARGUMENT", "{o:?}");
    }
}

#[test]
fn positions_say_why_a_read_has_none() {
    let dataset: DatasetDef = r#"{"source": {"range": {"stop": 100}}}"#.parse().unwrap();
    let stream = |options: &DistributeOptions| {
        ElementStream(Handout::new(
            mpsc::channel(2).1,
            Positions::new(
                &dataset,
                "ds".into(),
                options.processing_mode.policy(),
                options.num_consumers.is_some(),
                options.repetition,
                options.resume_from.as_ref(),
            ),
            tokio::sync::oneshot::channel().1,
            std::sync::Arc::default(),
            None,
        ))
    };
    let dynamic = DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        ..DistributeOptions::default()
    };
    assert_eq!(stream(&dynamic).position().unwrap().dataset_id, "ds");
    let err = stream(&DistributeOptions::default()).position().unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let why = "failed precondition: this stream has no read position: read positions need";
    assert!(err.to_string().starts_with(why), "{err}");
    let from = ReadPosition { dataset_id: "ds".into(), ..ReadPosition::default() };
    assert_eq!(
        validate(&DistributeOptions { resume_from: Some(from), ..DistributeOptions::default() })
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
}

/// Outside a tokio runtime there is nothing to spawn the reader on: the stream says so as
/// its only item instead of panicking.
#[test]
fn outside_a_runtime_the_stream_says_so() {
    use futures::StreamExt;
    let dataset: DatasetDef = r#"{"source": {"range": {"stop": 10}}}"#.parse().unwrap();
    assert!(tokio::runtime::Handle::try_current().is_err());
    let mut stream = distribute("127.0.0.1:1", dataset, DistributeOptions::default());
    let first = futures::executor::block_on(stream.next());
    let Some(Err(e)) = first else { panic!("{first:?}") };
    assert_eq!(e, ClientError::NoRuntime);
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    assert!(futures::executor::block_on(stream.next()).is_none());
    assert!(stream.position().is_err(), "a parallel_epochs read has no position");
}
