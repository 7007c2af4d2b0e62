//! Resolving: TensorFlow's ordering and failure, addresses, Shardwise's options, and the
//! resolver surface.

use super::*;

// -----------------------------------------------------------------------------------------
// TensorFlow's ordering and failure

#[test]
fn a_live_resolver_resolves_from_its_membership_with_stable_indices() {
    let mut r = KubernetesResolver::new(KubernetesConfig::default()).expect("resolver");
    assert!(!r.has_snapshot());
    r.go_live().expect("live");
    assert!(r.has_snapshot() && r.membership().is_some());
    assert!(matches!(r.cluster_spec(), Err(ClusterError::FailedPrecondition { .. })));
    let m = r.membership_mut().expect("membership");
    m.reset(DEFAULT_SELECTOR, &pod_list(vec![running("b", "10.0.0.2"), running("a", "10.0.0.1")]));
    assert_eq!(
        r.cluster_spec().expect("cluster").as_dict(),
        json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]})
    );
    // "a" leaves: "b" keeps index 1 (a snapshot would renumber it to 0).
    let m = r.membership_mut().expect("membership");
    m.reset(DEFAULT_SELECTOR, &pod_list(vec![running("b", "10.0.0.2")]));
    assert_eq!(
        r.cluster_spec().expect("cluster").as_dict(),
        json!({"worker": {"1": "10.0.0.2:8470"}})
    );
    assert_eq!(r.master(Some("worker"), Some(1), None).expect("master"), "grpc://10.0.0.2:8470");
}

#[test]
fn sorts_each_selectors_pods_by_name_in_code_point_order() {
    let pods = pod_list_json(vec![
        running("w-2", "10.0.0.2"),
        running("w-10", "10.0.0.10"),
        running("W-9", "10.0.0.99"),
        running("w-1", "10.0.0.1"),
    ]);
    let cluster = dict(json!({"pods": {"job-name=tensorflow": pods}}));
    // `W` (U+0057) sorts before `w`, and `w-10` before `w-2`.
    assert_eq!(
        cluster,
        json!({"worker": ["10.0.0.99:8470", "10.0.0.1:8470", "10.0.0.10:8470", "10.0.0.2:8470"]})
    );
}

#[test]
fn selectors_concatenate_in_order_without_deduplication() {
    let cluster = dict(json!({
        "job_to_label_mapping": {"worker": ["app=b", "tier=x"], "ps": ["app=ps"],
                                 "chief": ["app=chief"]},
        "pods": {
            "app=b": pod_list_json(vec![running("s-0", "10.0.0.5"), running("b-1", "10.0.0.4")]),
            // `a-1` sorts before both pods of the first selector, yet comes after them.
            "tier=x": pod_list_json(vec![running("s-0", "10.0.0.5"), running("a-1", "10.0.0.3")]),
            "app=ps": pod_list_json(vec![running("ps-0", "10.0.1.1")]),
            "app=chief": pod_list_json(vec![]),
        }
    }));
    assert_eq!(
        cluster,
        json!({
            "worker": ["10.0.0.4:8470", "10.0.0.5:8470", "10.0.0.3:8470", "10.0.0.5:8470"],
            "ps": ["10.0.1.1:8470"],
            "chief": {}
        })
    );
    // Jobs keep the mapping's order; the job with no pods exists with no tasks.
    let r = resolver(json!({
        "job_to_label_mapping": {"z": ["a=1"], "a": ["a=1"]},
        "pods": {"a=1": {"items": []}}
    }));
    let spec = r.cluster_spec().unwrap();
    assert_eq!(spec.jobs().collect::<Vec<_>>(), ["z", "a"]);
    assert_eq!(spec.as_dict(), json!({"z": {}, "a": {}}));
    assert_eq!(spec.num_tasks("z").unwrap(), 0);
}

#[test]
fn the_first_non_running_pod_in_name_order_fails_the_call() {
    let e = resolve(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
        with_phase("w-3", "Pending"),
        with_phase("w-1", "Failed"),
        running("w-0", "10.0.0.1"),
        with_phase("w-2", "Succeeded"),
    ])}}))
    .unwrap_err();
    assert_eq!(e.detail(), "Pod \"w-1\" is not running; phase: \"Failed\"");
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert_eq!(e.tf_exception(), Some(TfException::RuntimeError));

    // A pod without a phase reads as Python's None.
    let e = resolve(json!({"pods": {"job-name=tensorflow": {"items": [
        {"metadata": {"name": "w-0"}, "status": {"podIP": "10.0.0.1"}}
    ]}}}))
    .unwrap_err();
    assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"None\"");

    // Selector order comes before name order.
    let e = resolve(json!({
        "job_to_label_mapping": {"worker": ["app=z", "app=a"]},
        "pods": {"app=z": pod_list_json(vec![with_phase("z-0", "Unknown")]),
                 "app=a": pod_list_json(vec![with_phase("a-0", "Pending")])}
    }))
    .unwrap_err();
    assert_eq!(e.detail(), "Pod \"z-0\" is not running; phase: \"Unknown\"");

    // Phase names are case-sensitive, as in TensorFlow.
    let e = resolve(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
        with_phase("w-0", "running"),
    ])}}))
    .unwrap_err();
    assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"running\"");
}

// -----------------------------------------------------------------------------------------
// Addresses

#[test]
fn address_is_the_pod_ip_by_default_and_the_host_ip_on_request() {
    // Two pods on one node.
    let pods = pod_list_json(vec![
        pod_with("w-0", "Running", "10.0.0.1", "192.168.0.7"),
        pod_with("w-1", "Running", "10.0.0.2", "192.168.0.7"),
    ]);
    let by_pod = dict(json!({"pods": {"job-name=tensorflow": pods.clone()}}));
    assert_eq!(by_pod, json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
    let explicit =
        dict(json!({"address": "pod_ip", "pods": {"job-name=tensorflow": pods.clone()}}));
    assert_eq!(explicit, by_pod);
    let by_host = dict(json!({"address": "host_ip", "pods": {"job-name=tensorflow": pods}}));
    assert_eq!(by_host, json!({"worker": ["192.168.0.7:8470", "192.168.0.7:8470"]}));
    assert_eq!(AddressSource::default(), AddressSource::PodIp);
}

#[test]
fn ipv6_addresses_are_bracketed() {
    let pods = pod_list_json(vec![pod_with("w-0", "Running", "fd00::5", "fd00:1::7")]);
    assert_eq!(
        dict(json!({"pods": {"job-name=tensorflow": pods.clone()}})),
        json!({"worker": ["[fd00::5]:8470"]})
    );
    assert_eq!(
        dict(json!({"address": "host_ip", "tf_server_port": 2222,
                    "pods": {"job-name=tensorflow": pods}})),
        json!({"worker": ["[fd00:1::7]:2222"]})
    );
}

#[test]
fn custom_port() {
    let pods = pod_list_json(vec![running("w-0", "10.0.0.1")]);
    for (port, want) in [(1, "10.0.0.1:1"), (2222, "10.0.0.1:2222"), (65535, "10.0.0.1:65535")] {
        let cluster = dict(json!({"tf_server_port": port,
                                  "pods": {"job-name=tensorflow": pods.clone()}}));
        assert_eq!(cluster, json!({"worker": [want]}), "port {port}");
    }
}

#[test]
fn a_pod_without_the_address_field_in_use_is_invalid() {
    let no_pod_ip = json!({"metadata": {"name": "w-1"},
                           "status": {"phase": "Running", "hostIP": "192.168.0.1"}});
    let pods = pod_list_json(vec![running("w-0", "10.0.0.1"), no_pod_ip]);
    let e = resolve(json!({"pods": {"job-name=tensorflow": pods.clone()}})).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(e.detail(), "Pod \"w-1\" has no status.podIP, which address \"pod_ip\" needs");
    // The host IP is there, so TensorFlow's mode resolves.
    assert_eq!(
        dict(json!({"address": "host_ip", "pods": {"job-name=tensorflow": pods}})),
        json!({"worker": ["192.168.0.1:8470", "192.168.0.1:8470"]})
    );

    let no_host_ip = json!({"metadata": {"name": "w-0"},
                            "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": ""}});
    let e = resolve(json!({"address": "host_ip",
                           "pods": {"job-name=tensorflow": {"items": [no_host_ip]}}}))
    .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(e.detail(), "Pod \"w-0\" has no status.hostIP, which address \"host_ip\" needs");
}

// -----------------------------------------------------------------------------------------
// Shardwise's options

#[test]
fn namespace_scopes_pods_and_queries() {
    let mut other = running("w-1", "10.0.0.2");
    other["metadata"]["namespace"] = json!("other");
    let mut unscoped = running("w-2", "10.0.0.3");
    unscoped["metadata"].as_object_mut().unwrap().remove("namespace");
    let pods = pod_list_json(vec![running("w-0", "10.0.0.1"), other, unscoped]);

    let scoped =
        resolver(json!({"namespace": "ml", "pods": {"job-name=tensorflow": pods.clone()}}));
    assert_eq!(
        scoped.cluster_spec().unwrap().as_dict(),
        json!({"worker": ["10.0.0.1:8470", "10.0.0.3:8470"]})
    );
    assert_eq!(
        scoped.config().queries(),
        vec![PodQuery {
            namespace: Some("ml".to_owned()),
            selector: LabelSelector::parse("job-name=tensorflow").unwrap()
        }]
    );
    // Without a namespace every pod counts, as in TensorFlow.
    let everywhere = resolver(json!({"pods": {"job-name=tensorflow": pods}}));
    assert_eq!(
        everywhere.cluster_spec().unwrap().as_dict(),
        json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]})
    );
    assert_eq!(everywhere.config().queries()[0].namespace, None);
}

#[test]
fn require_ready_refuses_unready_and_terminating_pods() {
    let mut unready = running("w-1", "10.0.0.2");
    unready["status"]["conditions"][1]["status"] = json!("False");
    let mut terminating = running("w-2", "10.0.0.3");
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut no_condition = running("w-3", "10.0.0.4");
    no_condition["status"].as_object_mut().unwrap().remove("conditions");
    let ready = running("w-0", "10.0.0.1");

    for (bad, name) in [(unready, "w-1"), (terminating, "w-2"), (no_condition, "w-3")] {
        let pods = pod_list_json(vec![ready.clone(), bad]);
        let e =
            resolve(json!({"require_ready": true, "pods": {"job-name=tensorflow": pods.clone()}}))
                .unwrap_err();
        assert_eq!(e.code(), "FAILED_PRECONDITION", "{name}");
        assert_eq!(e.detail(), format!("Pod \"{name}\" is not ready"));
        assert_eq!(e.tf_exception(), None);
        // Without require_ready a Running pod is enough.
        assert_eq!(
            resolve(json!({"pods": {"job-name=tensorflow": pods}}))
                .unwrap()
                .num_tasks("worker")
                .unwrap(),
            2
        );
    }
    // Not running is reported as such, before readiness.
    let pods = pod_list_json(vec![with_phase("w-0", "Pending")]);
    let e =
        resolve(json!({"require_ready": true, "pods": {"job-name=tensorflow": pods}})).unwrap_err();
    assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"Pending\"");
}

#[test]
fn expected_skips_pods_that_do_not_qualify_and_reports_the_shortfall() {
    let mut unready = running("w-1", "10.0.0.2");
    unready["status"]["conditions"][1]["status"] = json!("Unknown");
    let pods = pod_list_json(vec![
        running("w-2", "10.0.0.3"),
        with_phase("w-0", "Pending"),
        unready,
        running("w-3", "10.0.0.4"),
    ]);
    let base = json!({
        "job_to_label_mapping": {"worker": ["job-name=tensorflow"], "ps": ["app=ps"]},
        "require_ready": true,
        "pods": {"job-name=tensorflow": pods, "app=ps": pod_list_json(vec![])}
    });
    let with_expected = |expected: Value| {
        let mut v = base.clone();
        v["expected"] = expected;
        resolve(v)
    };
    // Exactly enough: the two qualifying pods, in name order.
    let spec = with_expected(json!({"worker": 2})).unwrap();
    assert_eq!(spec.as_dict(), json!({"worker": ["10.0.0.3:8470", "10.0.0.4:8470"], "ps": {}}));
    // More than expected: all are kept.
    assert_eq!(with_expected(json!({"worker": 1})).unwrap(), spec);
    assert_eq!(with_expected(json!({"worker": 0, "ps": 0})).unwrap(), spec);
    // Fewer: Unavailable, with the shortfall of each short job.
    let e = with_expected(json!({"worker": 4, "ps": 2})).unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    let ClusterError::Unavailable { missing, detail } = e else { unreachable!() };
    assert_eq!(missing, BTreeMap::from([("ps".to_owned(), 2), ("worker".to_owned(), 2)]));
    assert_eq!(
        detail,
        "the cluster is not complete yet: job 'ps' has 0 of 2 expected pods, job 'worker' \
         has 2 of 4 expected pods"
    );
    let e = with_expected(json!({"worker": 2, "ps": 1})).unwrap_err();
    let ClusterError::Unavailable { missing, .. } = e else { unreachable!() };
    assert_eq!(missing, BTreeMap::from([("ps".to_owned(), 1)]));
    // A job without an expected count still fails on a pod that does not qualify.
    let e = with_expected(json!({"ps": 0})).unwrap_err();
    assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"Pending\"");
}

// -----------------------------------------------------------------------------------------
// The resolver surface

#[test]
fn master_is_empty_without_a_full_task_and_needs_no_snapshot() {
    let mut r = KubernetesResolver::new(KubernetesConfig::default()).unwrap();
    assert_eq!(r.master(None, None, None).unwrap(), "");
    r.set_task_type(Some("worker".to_owned()));
    assert_eq!(r.master(None, None, None).unwrap(), "");
    assert_eq!(r.master(None, None, Some("grpc")).unwrap(), "");
    r.set_task_type(None);
    r.set_task_id(Some(0));
    assert_eq!(r.master(None, None, None).unwrap(), "");
    // With a full task the pods are needed.
    assert_eq!(r.master(Some("worker"), None, None).unwrap_err().code(), "FAILED_PRECONDITION");
    assert_eq!(r.environment().as_deref(), Some(""));
}

#[test]
fn master_is_the_tasks_address_with_the_rpc_layer() {
    let mut r = resolver(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
        running("w-0", "10.0.0.1"), running("w-1", "10.0.0.2"),
    ])}}));
    assert_eq!(r.rpc_layer().unwrap().as_deref(), Some("grpc"));
    assert_eq!(r.master(Some("worker"), Some(1), Some("grpc")).unwrap(), "grpc://10.0.0.2:8470");
    r.set_task_type(Some("worker".to_owned()));
    r.set_task_id(Some(0));
    assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
    assert_eq!(r.task_id().unwrap(), Some(0));
    assert_eq!(r.master(None, None, None).unwrap(), "grpc://10.0.0.1:8470");
    // Arguments override the resolver's task and RPC layer.
    assert_eq!(r.master(None, Some(1), None).unwrap(), "grpc://10.0.0.2:8470");
    assert_eq!(r.master(None, None, Some("http")).unwrap(), "http://10.0.0.1:8470");
    // TensorFlow's `rpc_layer or self.rpc_layer`: an empty argument does not override.
    assert_eq!(r.master(None, None, Some("")).unwrap(), "grpc://10.0.0.1:8470");
    // A task that is not in the cluster.
    assert_eq!(r.master(None, Some(2), None).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(r.master(Some("ps"), None, None).unwrap_err().code(), "NOT_FOUND");
    // Removing the RPC layer removes the scheme.
    r.set_rpc_layer(None);
    assert_eq!(r.rpc_layer().unwrap(), None);
    assert_eq!(r.master(None, None, None).unwrap(), "10.0.0.1:8470");
    assert_eq!(r.master(None, None, Some("grpc")).unwrap(), "grpc://10.0.0.1:8470");
    // Or a spec without one.
    let r = resolver(json!({"rpc_layer": null, "pods": {"job-name=tensorflow": pod_list_json(vec![
        running("w-0", "10.0.0.1"),
    ])}}));
    assert_eq!(r.master(Some("worker"), Some(0), None).unwrap(), "10.0.0.1:8470");
}
