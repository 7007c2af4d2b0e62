use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::address::{AddressError, HostPort, parse_address};
use super::*;
use crate::code::Code;

fn spec(v: Value) -> ClusterSpec {
    ClusterSpec::from_json(&v).unwrap()
}

fn group(s: &ClusterSpec, job: &str, index: TaskIndex, options: &LaunchOptions) -> ProcessGroup {
    process_group(s, Some(job), Some(index), options).unwrap().unwrap()
}

fn error(s: &ClusterSpec, job: &str, index: TaskIndex, options: &LaunchOptions) -> ClusterError {
    process_group(s, Some(job), Some(index), options).unwrap_err()
}

fn port(p: u16) -> LaunchOptions {
    LaunchOptions { master_port: Some(p), ..Default::default() }
}

fn jobs(j: &[&str]) -> LaunchOptions {
    LaunchOptions { jobs: Some(j.iter().map(|s| (*s).to_owned()).collect()), master_port: None }
}

#[test]
fn chief_then_workers_in_index_order() {
    let s = spec(json!({"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"],
                        "chief": ["c0:2223"], "evaluator": ["e0:2222"]}));
    let o = LaunchOptions::default();
    let chief = group(&s, "chief", 0, &o);
    assert_eq!(
        chief,
        ProcessGroup {
            rank: 0,
            world_size: 3,
            local_rank: 0,
            local_world_size: 1,
            master_host: "c0".into(),
            master_port: 2223,
        }
    );
    assert_eq!(group(&s, "worker", 0, &o).rank, 1);
    let w1 = group(&s, "worker", 1, &o);
    assert_eq!((w1.rank, w1.world_size, w1.master_address()), (2, 3, "c0:2223".to_owned()));
    // ps and evaluator tasks are not ranks.
    assert_eq!(process_group(&s, Some("ps"), Some(0), &o), Ok(None));
    assert_eq!(process_group(&s, Some("evaluator"), Some(0), &o), Ok(None));
    // Nor is a task that is not named.
    assert_eq!(process_group(&s, None, Some(0), &o), Ok(None));
    assert_eq!(process_group(&s, Some("worker"), None, &o), Ok(None));
}

#[test]
fn launch_renders_torch_env_and_jax_args() {
    let s = spec(json!({"worker": ["w0:1234", "w0:1235", "w1:1234"]}));
    let launch = group(&s, "worker", 1, &LaunchOptions::default()).launch();
    assert_eq!(
        serde_json::to_value(&launch).unwrap(),
        json!({"torch": {"MASTER_ADDR": "w0", "MASTER_PORT": "1234", "RANK": "1",
                         "WORLD_SIZE": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
               "jax": {"coordinator_address": "w0:1234", "num_processes": 3, "process_id": 1}})
    );
    let names: Vec<&str> = launch.torch.vars().iter().map(|v| v.0).collect();
    assert_eq!(
        names,
        ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]
    );
    assert_eq!(
        launch.jax.vars(),
        [
            ("JAX_COORDINATOR_ADDRESS", "w0:1234".to_owned()),
            ("JAX_NUM_PROCESSES", "3".to_owned()),
            ("JAX_PROCESS_ID", "1".to_owned()),
        ]
    );
}

#[test]
fn local_ranks_count_tasks_on_the_same_host() {
    // Slurm's 2 nodes x 2 tasks, and a third node with one task.
    let s = spec(json!({"worker": ["n1:8888", "n1:8889", "N2:8888", "n2:8889", "n3:8888"]}));
    let o = LaunchOptions::default();
    let got: Vec<(usize, usize, usize)> = (0..5)
        .map(|i| {
            let g = group(&s, "worker", i, &o);
            (g.rank, g.local_rank, g.local_world_size)
        })
        .collect();
    // Host names compare without ASCII case: N2 and n2 are one host.
    assert_eq!(got, [(0, 0, 2), (1, 1, 2), (2, 0, 2), (3, 1, 2), (4, 0, 1)]);
}

#[test]
fn every_task_of_a_mixed_cluster_gets_a_distinct_rank() {
    let s = spec(json!({
        "chief": ["h0:10"],
        "worker": {"0": "h0:11", "2": "h1:10", "7": "h1:11", "9": "[fd00::1]:10"},
        "ps": ["h2:10"]
    }));
    let o = LaunchOptions::default();
    let mut ranks = BTreeSet::new();
    let mut local: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let tasks = [("chief", 0), ("worker", 0), ("worker", 2), ("worker", 7), ("worker", 9)];
    for (job, index) in tasks {
        let g = group(&s, job, index, &o);
        assert_eq!((g.world_size, g.master_address()), (5, "h0:10".to_owned()));
        assert!(ranks.insert(g.rank));
        let address = s.task_address(job, index).unwrap();
        let host = parse_address(address).unwrap().host.to_owned();
        assert!(local.entry(host.clone()).or_default().insert(g.local_rank));
        assert_eq!(
            g.local_world_size,
            [("h0", 2), ("h1", 2), ("fd00::1", 1)].iter().find(|h| h.0 == host).unwrap().1
        );
    }
    // A hole in the worker indices leaves no hole in the ranks.
    assert_eq!(ranks, (0..5).collect());
    for ranks in local.values() {
        assert_eq!(*ranks, (0..ranks.len()).collect());
    }
}

#[test]
fn ipv6_masters_in_and_out_of_brackets() {
    let s = spec(json!({"worker": ["[fd00::1]:8470", "[FD00::1]:8470", "[fe80::2%eth0]"]}));
    let g = group(&s, "worker", 1, &LaunchOptions::default());
    assert_eq!((g.local_rank, g.local_world_size), (1, 2));
    let launch = g.launch();
    assert_eq!(launch.torch.master_addr, "fd00::1");
    assert_eq!(launch.jax.coordinator_address, "[fd00::1]:8470");
    // A master without a port takes launch.master_port; other tasks need no port.
    let s = spec(json!({"worker": ["[fe80::2%eth0]", "w1"]}));
    let launch = group(&s, "worker", 1, &port(29500)).launch();
    assert_eq!(
        (launch.torch.master_addr.as_str(), launch.jax.coordinator_address.as_str()),
        ("fe80::2%eth0", "[fe80::2%eth0]:29500")
    );
}

#[test]
fn master_port_option_replaces_rank_zero_port() {
    let s = spec(json!({"chief": ["c:2222"], "worker": ["w:2222"]}));
    let g = group(&s, "worker", 0, &port(29500));
    assert_eq!((g.master_host.as_str(), g.master_port), ("c", 29500));
    let e = error(&s, "worker", 0, &port(0));
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.detail().contains("master_port"), "{e}");
}

#[test]
fn a_master_without_a_port_is_named() {
    let s = spec(json!({"chief": ["chief-host"], "worker": ["w:2222"]}));
    let e = error(&s, "worker", 0, &LaunchOptions::default());
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.detail(),
        "the master, task chief:0 at \"chief-host\", has no port: give one in the address or as \
         launch.master_port"
    );
    // A worker without a port is fine when it is not the master.
    let s = spec(json!({"worker": ["w0:2222", "w1"]}));
    assert_eq!(group(&s, "worker", 1, &LaunchOptions::default()).master_port, 2222);
}

#[test]
fn jobs_option_chooses_and_orders_the_group() {
    let s = spec(json!({"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]}));
    // Only workers train: the chief has no rank, worker 0 is the master.
    let o = jobs(&["worker"]);
    assert_eq!(process_group(&s, Some("chief"), Some(0), &o), Ok(None));
    let g = group(&s, "worker", 1, &o);
    assert_eq!((g.rank, g.world_size, g.master_host.as_str()), (1, 2, "w0"));
    // Workers first, then the evaluator; a job the cluster lacks is skipped.
    let o = jobs(&["worker", "trainer", "evaluator"]);
    let g = group(&s, "evaluator", 0, &o);
    assert_eq!((g.rank, g.world_size, g.master_host.as_str()), (2, 3, "w0"));
    // A cluster without chief still has its workers under the default jobs.
    let s = spec(json!({"worker": ["w0:1"], "ps": ["p:1"]}));
    assert_eq!(group(&s, "worker", 0, &LaunchOptions::default()).rank, 0);
}

#[test]
fn bad_jobs_options_are_refused() {
    let s = spec(json!({"worker": ["w0:1"]}));
    for (o, want) in [
        (jobs(&[]), "launch.jobs is empty"),
        (jobs(&["worker", ""]), "launch.jobs has an empty job name"),
        (jobs(&["worker", "chief", "worker"]), "launch.jobs names job \"worker\" twice"),
    ] {
        let e = error(&s, "worker", 0, &o);
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.detail().starts_with(want), "{e}");
        // Refused even for a task that has no rank.
        assert!(process_group(&s, Some("ps"), Some(0), &o).is_err());
    }
}

#[test]
fn a_task_outside_the_cluster_is_not_found() {
    let s = spec(json!({"worker": ["w0:1", "w1:1"]}));
    for (job, index) in [("worker", 2), ("worker", -1), ("chief", 0)] {
        let e = error(&s, job, index, &LaunchOptions::default());
        assert_eq!(e.code(), Code::NotFound, "{job}:{index}");
        assert_eq!(
            e.detail(),
            format!("task {job}:{index} is not in the cluster, so it has no rank")
        );
    }
}

#[test]
fn not_in_group_says_why() {
    let o = LaunchOptions::default();
    let e = not_in_group(Some("ps"), Some(1), &o);
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.detail(),
        "task ps:1 has no rank: only the jobs chief, worker train (launch.jobs)"
    );
    let e = not_in_group(None, None, &o);
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.detail().starts_with("this task has no rank: the request names no task"), "{e}");
    let long = "j".repeat(10_000);
    assert!(not_in_group(Some(&long), Some(0), &o).detail().len() < 300);
}

#[test]
fn addresses_split_into_host_and_port() {
    let ok: &[(&str, &str, Option<u16>)] = &[
        ("w0:2222", "w0", Some(2222)),
        ("w0", "w0", None),
        ("10.0.0.1:1", "10.0.0.1", Some(1)),
        ("host_1.example-x.com:65535", "host_1.example-x.com", Some(65535)),
        ("[::1]:8470", "::1", Some(8470)),
        ("[::1]", "::1", None),
        ("[::ffff:10.0.0.1]:80", "::ffff:10.0.0.1", Some(80)),
        ("[fe80::1%eth0]:80", "fe80::1%eth0", Some(80)),
        ("w0:00080", "w0", Some(80)),
    ];
    for &(address, host, port) in ok {
        assert_eq!(parse_address(address), Ok(HostPort { host, port }), "{address}");
    }
    let long_host = "h".repeat(254);
    let long_v6 = format!("[{}]", "1:".repeat(127));
    let bad: &[(&str, AddressError)] = &[
        ("", AddressError::Empty),
        ("grpc://w0:2222", AddressError::Scheme),
        ("fd00::1:8470", AddressError::UnbracketedIpv6),
        ("::1", AddressError::UnbracketedIpv6),
        ("[::1", AddressError::Brackets),
        ("[::1]8470", AddressError::Brackets),
        ("[::1]:", AddressError::Port),
        ("[]:80", AddressError::Host),
        ("[w0]:80", AddressError::Host),
        ("[::1%]:80", AddressError::Host),
        ("[::1%a b]:80", AddressError::Host),
        ("[::1]]:80", AddressError::Brackets),
        (":2222", AddressError::Host),
        ("w0:", AddressError::Port),
        ("w0:0", AddressError::Port),
        ("w0:65536", AddressError::Port),
        ("w0:123456", AddressError::Port),
        ("w0:+80", AddressError::Port),
        ("w0: 80", AddressError::Port),
        ("w0:80 ", AddressError::Port),
        ("w 0:80", AddressError::Host),
        ("$(reboot):80", AddressError::Host),
        ("w0';x:80", AddressError::Host),
        ("w0\n:80", AddressError::Host),
        ("wé:80", AddressError::Host),
        (&long_host, AddressError::Host),
        (&long_v6, AddressError::Host),
    ];
    for (address, want) in bad {
        assert_eq!(parse_address(address), Err(*want), "{address:?}");
    }
    assert_eq!(parse_address(&"h".repeat(253)).map(|h| h.host.len()), Ok(253));
}

#[test]
fn a_bad_address_anywhere_in_the_group_is_named_and_capped() {
    let junk = format!("w1 {}", "x".repeat(100_000));
    let s = spec(json!({"worker": ["w0:1", junk], "ps": ["not an address"]}));
    let e = error(&s, "worker", 0, &LaunchOptions::default());
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.detail().contains("of task worker:1 cannot be used to launch: its host"), "{e}");
    assert!(e.detail().len() < 400, "{}", e.detail().len());
    // A ps address is not part of the group: not checked.
    let s = spec(json!({"worker": ["w0:1"], "ps": ["not an address"]}));
    assert_eq!(group(&s, "worker", 0, &LaunchOptions::default()).world_size, 1);
    let s = spec(json!({"worker": ["fd00::1:8470", "w1:1"]}));
    let e = error(&s, "worker", 1, &LaunchOptions::default());
    assert_eq!(
        e.detail(),
        "the address \"fd00::1:8470\" of task worker:0 cannot be used to launch: an IPv6 \
         address needs brackets to tell it from its port ([fd00::1]:2222)"
    );
}

#[test]
fn a_large_group_is_linear() {
    let hosts: Vec<String> = (0..50_000).map(|i| format!("n{}:{}", i / 8, 1000 + i % 8)).collect();
    let s = spec(json!({"worker": hosts}));
    let g = group(&s, "worker", 49_999, &LaunchOptions::default());
    assert_eq!((g.rank, g.world_size, g.local_rank, g.local_world_size), (49_999, 50_000, 7, 8));
}

#[test]
fn many_jobs_against_a_long_job_list_stay_linear() {
    let mut cluster = serde_json::Map::new();
    for i in 0..100_000 {
        cluster.insert(format!("j{i}"), json!([]));
    }
    cluster.insert("worker".into(), json!(["w0:1"]));
    let s = spec(Value::Object(cluster));
    let mut names: Vec<String> = (0..100_000).map(|i| format!("x{i}")).collect();
    names.push("worker".into());
    let o = LaunchOptions { jobs: Some(names), master_port: None };
    let started = std::time::Instant::now();
    assert_eq!(group(&s, "worker", 0, &o).world_size, 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}

proptest::proptest! {
    #[test]
    fn any_address_splits_or_is_refused(address in "\\PC{0,40}|[\\[\\]:0-9a-f%.]{0,20}") {
        let _ = parse_address(&address);
    }

    #[test]
    fn host_and_port_round_trip(
        host in "[a-z0-9][a-z0-9._-]{0,30}|[0-9a-f]{1,4}(:[0-9a-f]{0,4}){1,7}",
        port in 1u16..,
    ) {
        let joined = address::join_host_port(&host, port);
        proptest::prop_assert_eq!(
            parse_address(&joined),
            Ok(HostPort { host: &host, port: Some(port) })
        );
    }
}

mod through_the_request {
    use serde_json::json;

    use crate::cluster::request::{HostInputs, ResolveReply, ResolveRequest};
    use crate::code::Code;

    fn reply(request: serde_json::Value) -> serde_json::Value {
        let request = ResolveRequest::from_json(&request.to_string()).unwrap();
        serde_json::to_value(request.resolve(&HostInputs::default()).unwrap()).unwrap()
    }

    const TF_CONFIG: &str = r#"{"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w0:2223"], "ps": ["p:2222"]}, "task": {"type": "worker", "index": 1}}"#;

    #[test]
    fn launch_is_absent_unless_asked_and_null_without_a_rank() {
        let plain = reply(json!({"resolver": {"tf_config": {"value": TF_CONFIG}}}));
        assert!(plain.get("launch").is_none(), "{plain}");
        let asked = reply(json!({"resolver": {"tf_config": {"value": TF_CONFIG}}, "launch": {}}));
        assert_eq!(
            asked["launch"],
            json!({"torch": {"MASTER_ADDR": "c", "MASTER_PORT": "2222", "RANK": "2",
                             "WORLD_SIZE": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
                   "jax": {"coordinator_address": "c:2222", "num_processes": 3, "process_id": 2}})
        );
        // Everything else is the same reply.
        let mut without = asked.clone();
        without.as_object_mut().unwrap().remove("launch");
        assert_eq!(without, plain);
        let ps = reply(json!({"resolver": {"tf_config": {"value": TF_CONFIG}},
                              "task_type": "ps", "task_id": 0,
                              "launch": {"jobs": ["worker"], "master_port": 29500}}));
        assert_eq!(ps["launch"], serde_json::Value::Null);
        // The reply decodes back with the same three states.
        for r in [plain, asked, ps] {
            let back: ResolveReply = serde_json::from_value(r.clone()).unwrap();
            assert_eq!(serde_json::to_value(back).unwrap(), r);
        }
    }

    #[test]
    fn launch_options_decode_strictly() {
        for (bad, want) in [
            (r#"{"launch": {"job": ["worker"]}}"#, "unknown field"),
            (r#"{"launch": {"master_port": 70000}}"#, "70000"),
            (r#"{"launch": {"master_port": -1}}"#, "-1"),
            (r#"{"launch": {"master_port": "29500"}}"#, "29500"),
            (r#"{"launch": {"jobs": "worker"}}"#, "worker"),
            (r#"{"launch": {"jobs": [1]}}"#, "1"),
            (r#"{"launch": [], "launch": {}}"#, "duplicate"),
            (r#"{"launch": 3}"#, "3"),
        ] {
            let text = bad.replacen('{', r#"{"resolver": {"simple": {"cluster": {}}}, "#, 1);
            let e = ResolveRequest::from_json(&text).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{text}");
            assert!(e.detail().contains(want), "{text}: {e}");
        }
        // `"launch": null` is the same as no launch.
        let r = ResolveRequest::from_json(
            r#"{"resolver": {"simple": {"cluster": {}}}, "launch": null}"#,
        );
        assert!(r.unwrap().launch.is_none());
    }

    #[test]
    fn a_launch_error_fails_the_resolve() {
        let request = json!({"resolver": {"simple": {"cluster": {"worker": ["w0", "w1:1"]},
                                                     "task_type": "worker", "task_id": 1}},
                             "launch": {}});
        let request = ResolveRequest::from_json(&request.to_string()).unwrap();
        let e = request.resolve(&HostInputs::default()).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.detail().contains("has no port"), "{e}");
    }
}
