//! TensorFlow's DYNAMIC split providers on `shardwise dispatcher`, and graph walks that stay
//! bounded whatever graph a client registers.

use std::time::{Duration, Instant};

use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_gateway::tf::proto::tensorflow::{GraphDef, NodeDef};
use shardwise_tests::{Dispatcher, TempDir, http, poll_until, runtime};
use tf::dispatcher_service_client::DispatcherServiceClient;

fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|&i| i.to_owned()).collect(),
        ..Default::default()
    }
}

fn register(graph: Vec<u8>) -> tf::GetOrRegisterDatasetRequest {
    tf::GetOrRegisterDatasetRequest {
        dataset: Some(tf::DatasetDef { graph: graph.into() }),
        metadata: Some(tf::DataServiceMetadata {
            compression: 1,
            cardinality: -2,
            ..Default::default()
        }),
        optional_dataset_id: None,
    }
}

/// SIGTERM to the dispatcher; how long it took to exit, and its status.
fn sigterm(d: &mut Dispatcher, bound: Duration) -> (Duration, std::process::ExitStatus) {
    let pid = d.child.id().to_string();
    let started = Instant::now();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exited = poll_until("an exit on SIGTERM", bound, || {
        d.child.try_wait().unwrap().ok_or("still running")
    });
    (started.elapsed(), exited)
}

/// Issue 22, point 5: a 300 KB graph whose `ZipDataset` lists itself 100,000 times as input
/// (a walk that follows every input visits it K^2 times per visit) is answered within a
/// bound, `/healthz` answers meanwhile, SIGTERM ends the process within a bound, and a
/// restart on the same work dir succeeds.
#[test]
fn a_self_zipping_graph_is_answered_quickly_and_sigterm_still_stops_the_dispatcher() {
    const K: usize = 100_000;
    let mut zip = node("z", "ZipDataset", &[]);
    zip.input = vec!["z".to_owned(); K];
    let graph = prost::Message::encode_to_vec(&GraphDef {
        node: vec![zip, node("dataset", "_Retval", &["z"])],
        library: None,
    });
    assert!(graph.len() >= 300_000, "{} bytes", graph.len());

    let dir = TempDir::new("self-zip");
    let args = ["--work-dir", dir.path(), "--fault-tolerant"];
    let mut d = Dispatcher::start(&args);
    let url = d.url.clone();
    let rt = runtime();
    let call = rt.spawn(async move {
        let started = Instant::now();
        let channel = tonic::transport::Endpoint::from_shared(url).expect("a URL");
        let mut c = DispatcherServiceClient::new(channel.connect().await.expect("connected"))
            .max_encoding_message_size(usize::MAX);
        let reply = c.get_or_register_dataset(register(graph)).await;
        (started.elapsed(), reply.map(|r| r.into_inner().dataset_id))
    });
    // /healthz answers while the registration is read.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut checks = 0;
    while checks == 0 || (!call.is_finished() && Instant::now() < deadline) {
        let health = http("GET", &d.url, "/healthz", None).expect("/healthz answers");
        assert_eq!(health.status, 200, "{}", health.body);
        checks += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let (took, reply) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), call).await })
        .expect("GetOrRegisterDataset answers within 20 s")
        .expect("the call's task");
    assert!(took < Duration::from_secs(10), "GetOrRegisterDataset took {took:?}: {reply:?}");
    let health = http("GET", &d.url, "/healthz", None).expect("/healthz answers");
    assert_eq!(health.status, 200, "{}", health.body);
    // Registered (the graph is stored as sent) or refused; a DYNAMIC iteration of it is
    // refused either way, naming why.
    if let Ok(id) = &reply {
        let dataset = d.call("GET", &format!("/v1/datasets/{id}"), None);
        assert_eq!(dataset.status, 200, "{}", dataset.body);
        let why = dataset.json()["dataset"]["tensorflow"]["split_providers"]["unsupported"].clone();
        assert!(
            why.as_str().is_some_and(|w| w.contains("ZipDataset") || w.contains("graph")),
            "{why}"
        );
    }

    let (took, status) = sigterm(&mut d, Duration::from_secs(30));
    assert!(took < Duration::from_secs(10), "SIGTERM took {took:?} to stop the dispatcher");
    assert_eq!(status.code(), Some(0), "{}", d.output());
    let again = Dispatcher::try_start(&args);
    assert!(again.is_ok(), "a restart on the same work dir: {:?}", again.err());
}
