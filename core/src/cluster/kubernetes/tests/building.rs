//! Building resolvers from specs, and fetching their pods.

use super::*;

// -----------------------------------------------------------------------------------------
// Building

#[test]
fn the_default_mapping_applies_when_absent_or_empty() {
    let default = KubernetesConfig::default();
    assert_eq!(
        default.job_to_label_mapping,
        vec![("worker".to_owned(), vec![LabelSelector::parse("job-name=tensorflow").unwrap()])]
    );
    assert_eq!(default.tf_server_port, 8470);
    assert_eq!(default.rpc_layer.as_deref(), Some("grpc"));
    assert_eq!(config(json!({})), default);
    assert_eq!(config(json!({"job_to_label_mapping": {}})), default);
    assert_eq!(config(json!({"job_to_label_mapping": null})), default);
    assert_eq!(config(json!({"rpc_layer": null})).rpc_layer, None);
    let c = config(json!({"expected": {"worker": 2}}));
    assert_eq!(c.expected, BTreeMap::from([("worker".to_owned(), 2)]));
    // A job mapped to no selectors exists with no tasks.
    let r = resolver(json!({"job_to_label_mapping": {"worker": []}, "pods": {}}));
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": {}}));
    assert!(r.config().queries().is_empty());
}

#[test]
fn invalid_specs_are_refused_at_build_time() {
    let invalid = |v: Value| build(v).expect_err("refused");
    for port in [json!(0), json!(70000), json!(-1), json!(65536)] {
        let e = invalid(json!({"tf_server_port": port}));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(e.detail(), format!("tf_server_port must be in 1..=65535, not {port}"));
    }
    let e = invalid(json!({"namespace": ""}));
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(e.detail(), "namespace must not be empty (omit it to list pods in all namespaces)");
    let e = invalid(json!({"expected": {"ps": 1}}));
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(e.detail(), "expected names job \"ps\", which job_to_label_mapping does not map");
    let e = invalid(json!({"job_to_label_mapping": {"worker": ["app in (a"]}}));
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.detail().contains("app in (a"), "{}", e.detail());
    let e = invalid(json!({"job_to_label_mapping": {"worker": "app=a"}}));
    assert_eq!(e.detail(), "job_to_label_mapping[\"worker\"] must be a list of label selectors");
    let e = invalid(json!({"job_to_label_mapping": {"worker": [1]}}));
    assert_eq!(e.detail(), "job_to_label_mapping[\"worker\"] must hold strings, not 1");
    let e = invalid(json!({"pods": []}));
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e = invalid(json!({"pods": {"job-name=tensorflow": {"items": [{"metadata": {}}]}}}));
    assert_eq!(
        e.detail(),
        "pods for selector \"job-name=tensorflow\": pod list item 0: metadata.name is missing"
    );
    // Unknown fields (TensorFlow's `executable_location`) and unknown addresses.
    assert!(
        serde_json::from_value::<KubernetesSpec>(json!({"executable_location": null})).is_err()
    );
    assert!(serde_json::from_value::<KubernetesSpec>(json!({"address": "node_ip"})).is_err());

    // The same checks guard configurations built in code.
    let zero_port = KubernetesConfig { tf_server_port: 0, ..KubernetesConfig::default() };
    let empty_namespace =
        KubernetesConfig { namespace: Some(String::new()), ..KubernetesConfig::default() };
    let unmapped = KubernetesConfig {
        expected: BTreeMap::from([("chief".to_owned(), 1)]),
        ..KubernetesConfig::default()
    };
    for c in [zero_port, empty_namespace, unmapped] {
        assert_eq!(KubernetesResolver::new(c.clone()).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(Membership::new(c).unwrap_err().code(), "INVALID_ARGUMENT");
    }
}

#[test]
fn an_invalid_selector_fails_the_request_before_any_api_call() {
    let request = ResolveRequest::from_json(
        r#"{"resolver": {"kubernetes": {"job_to_label_mapping": {"worker": ["a=1", "=x"]}}}}"#,
    )
    .unwrap();
    let e = request.build(&HostInputs::default()).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
}

#[test]
fn a_selector_without_a_list_is_a_failed_precondition() {
    let e = resolve(json!({
        "job_to_label_mapping": {"worker": ["a=1", "b=2"]},
        "pods": {"a=1": pod_list_json(vec![running("w-0", "10.0.0.1")])}
    }))
    .unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert_eq!(e.tf_exception(), None);
    assert!(e.detail().starts_with("no pod list for label selector \"b=2\""), "{}", e.detail());
    // Lists are keyed by the selector as written.
    let e =
        resolve(json!({"pods": {"job-name == tensorflow": pod_list_json(vec![])}})).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    // No snapshot at all.
    let (config, _) = build(json!({})).unwrap();
    let r = KubernetesResolver::new(config).unwrap();
    assert!(!r.has_snapshot());
    assert_eq!(r.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
}

#[test]
fn queries_are_the_distinct_selectors_in_mapping_order() {
    let c = config(json!({
        "namespace": "ml",
        "job_to_label_mapping": {"ps": ["app=ps"], "worker": ["app=w", "app=ps", "app=w"],
                                 "chief": ["app=c"], "evaluator": []}
    }));
    let queries = c.queries();
    let selectors: Vec<&str> = queries.iter().map(|q| q.selector.as_str()).collect();
    assert_eq!(selectors, ["app=ps", "app=w", "app=c"]);
    assert!(queries.iter().all(|q| q.namespace.as_deref() == Some("ml")));
    // Distinct by text: `a=1` and `a==1` are two calls.
    let c = config(json!({"job_to_label_mapping": {"w": ["a=1", "a==1"]}}));
    assert_eq!(c.queries().len(), 2);
}

// -----------------------------------------------------------------------------------------
// Fetching

/// Canned lists per selector; records every call as `namespace/selector`.
#[derive(Debug, Default)]
struct FakeLister {
    lists: BTreeMap<String, PodList>,
    calls: Mutex<Vec<String>>,
}

impl FakeLister {
    fn with(lists: Vec<(&str, Vec<Value>)>) -> Self {
        FakeLister {
            lists: lists.into_iter().map(|(s, items)| (s.to_owned(), pod_list(items))).collect(),
            calls: Mutex::default(),
        }
    }
    fn calls(&self) -> Vec<String> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }
}

#[async_trait]
impl PodLister for FakeLister {
    async fn list_pods(&self, query: &PodQuery) -> Result<PodList, ClusterError> {
        let ns = query.namespace.as_deref().unwrap_or("*");
        self.calls.lock().unwrap().push(format!("{ns}/{}", query.selector.as_str()));
        self.lists.get(query.selector.as_str()).cloned().ok_or_else(|| {
            ClusterError::precondition(None, format!("403 for {}", query.selector.as_str()))
        })
    }
}

#[test]
fn fetch_snapshot_asks_every_query_once() {
    let lister = FakeLister::with(vec![
        ("app=ps", vec![running("ps-0", "10.0.1.1")]),
        ("app=w", vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")]),
        ("app=unused", vec![]),
    ]);
    let c = config(json!({
        "namespace": "ml",
        "job_to_label_mapping": {"ps": ["app=ps"], "worker": ["app=w", "app=ps"]}
    }));
    let snapshot = futures::executor::block_on(fetch_snapshot(&lister, &c.queries())).unwrap();
    assert_eq!(lister.calls(), ["ml/app=ps", "ml/app=w"]);
    assert_eq!(snapshot.get("app=w"), lister.lists.get("app=w"));
    assert_eq!(snapshot.get("app=unused"), None);
    assert_eq!(
        c.resolve(&snapshot).unwrap().as_dict(),
        json!({"ps": ["10.0.1.1:8470"],
               "worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.1.1:8470"]})
    );
}

#[test]
fn a_lister_error_fails_the_fetch() {
    let lister = FakeLister::with(vec![("app=w", vec![running("w-0", "10.0.0.1")])]);
    let c = config(json!({"job_to_label_mapping": {"worker": ["app=w"], "ps": ["app=denied"]}}));
    let e = futures::executor::block_on(fetch_snapshot(&lister, &c.queries())).unwrap_err();
    assert_eq!(e, ClusterError::precondition(None, "403 for app=denied"));
    assert!(lister.calls().contains(&"*/app=denied".to_owned()));
    // No query: an empty snapshot, no call.
    let snapshot = futures::executor::block_on(fetch_snapshot(&lister, &[])).unwrap();
    assert_eq!(snapshot, PodSnapshot::new());
}

#[test]
fn attach_pods_fills_every_kubernetes_resolver_of_a_union() {
    let lister = FakeLister::with(vec![
        ("app=w", vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")]),
        ("app=ps", vec![running("ps-0", "10.0.1.1")]),
    ]);
    let request = ResolveRequest::from_json(
        r#"{"resolver": {"union": [
                {"kubernetes": {"job_to_label_mapping": {"worker": ["app=w"]}}},
                {"kubernetes": {"job_to_label_mapping": {"ps": ["app=ps"]}, "namespace": "ml"}},
                {"kubernetes": {"job_to_label_mapping": {"chief": ["app=c"]},
                                "pods": {"app=c": {"items": [{"metadata": {"name": "c-0"},
                                    "status": {"phase": "Running", "podIP": "10.0.2.1"}}]}}}}
            ]}, "task_type": "worker", "task_id": 1}"#,
    )
    .unwrap();
    let mut r = request.build(&HostInputs::default()).unwrap();
    assert_eq!(r.kubernetes_without_pods().len(), 2);
    assert_eq!(r.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
    futures::executor::block_on(r.attach_pods(&lister)).unwrap();
    // The member with inline pods was not fetched.
    assert_eq!(lister.calls(), ["*/app=w", "ml/app=ps"]);
    assert!(r.kubernetes_without_pods().is_empty());
    let reply = request.resolve_with(&r).unwrap();
    assert_eq!(
        reply.cluster,
        json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"], "ps": ["10.0.1.1:8470"],
               "chief": ["10.0.2.1:8470"]})
    );
    assert_eq!((reply.task_type.as_deref(), reply.task_id), (Some("worker"), Some(1)));
    assert_eq!(r.master(Some("worker"), Some(1), Some("grpc")).unwrap(), "grpc://10.0.0.2:8470");

    // A failing member fails the attach.
    let mut r = request.build(&HostInputs::default()).unwrap();
    let empty = FakeLister::default();
    assert!(futures::executor::block_on(r.attach_pods(&empty)).is_err());
}
