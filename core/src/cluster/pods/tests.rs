//! Tests of `cluster::pods`.
use super::*;
use proptest::prelude::*;
use serde_json::json;

fn err_detail(result: Result<impl std::fmt::Debug, ClusterError>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => {
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert_eq!(e.tf_exception(), None);
            e.detail().to_owned()
        }
    }
}

fn ok<T>(result: Result<T, ClusterError>) -> T {
    result.unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

fn real_list() -> Value {
    json!({"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"w-0","namespace":"ml","labels":{"job-name":"w"}},"status":{"phase":"Running","podIP":"10.0.0.5","hostIP":"192.168.1.2","conditions":[{"type":"Ready","status":"True"}]}}]})
}

#[test]
fn decodes_the_real_shaped_pod_list() {
    let list = ok(PodList::from_json(&real_list()));
    assert_eq!(list.resource_version.as_deref(), Some("42"));
    assert_eq!(
        list.items,
        vec![Pod {
            name: "w-0".to_owned(),
            namespace: Some("ml".to_owned()),
            labels: BTreeMap::from([("job-name".to_owned(), "w".to_owned())]),
            uid: None,
            resource_version: None,
            deletion_timestamp: None,
            phase: Some("Running".to_owned()),
            pod_ip: Some("10.0.0.5".to_owned()),
            host_ip: Some("192.168.1.2".to_owned()),
            ready: Some(true),
        }]
    );
    let Some(pod) = list.items.first() else { panic!("no pod") };
    assert!(!pod.is_terminating());
    assert_eq!(
        serde_json::to_value(pod).unwrap_or_default(),
        json!({"name":"w-0","namespace":"ml","labels":{"job-name":"w"},"uid":null,
                   "resource_version":null,"deletion_timestamp":null,"phase":"Running",
                   "pod_ip":"10.0.0.5","host_ip":"192.168.1.2","ready":true})
    );
}

#[test]
fn decodes_a_full_pod_and_ignores_unknown_fields() {
    let v = json!({
        "kind": "Pod", "apiVersion": "v1", "spec": {"containers": []},
        "metadata": {
            "name": "w-1", "namespace": "ml", "uid": "u-1", "resourceVersion": "7",
            "deletionTimestamp": "2024-01-01T00:00:00Z", "generateName": "w-",
            "labels": {"a": "1", "b": ""}, "annotations": {"x": "y"}
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.6", "hostIP": "10.1.0.1",
            "podIPs": [{"ip": "10.0.0.6"}], "startTime": "2024-01-01T00:00:00Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            ]
        }
    });
    let pod = ok(Pod::from_json(&v));
    assert_eq!(pod.name, "w-1");
    assert_eq!(pod.uid.as_deref(), Some("u-1"));
    assert_eq!(pod.resource_version.as_deref(), Some("7"));
    assert_eq!(pod.deletion_timestamp.as_deref(), Some("2024-01-01T00:00:00Z"));
    assert!(pod.is_terminating());
    assert_eq!(pod.labels.len(), 2);
    assert_eq!(pod.ready, Some(false));
}

#[test]
fn lenient_where_the_api_is() {
    // Minimal pod: only a name.
    let pod = ok(Pod::from_json(&json!({"metadata": {"name": "p"}})));
    assert_eq!(pod.name, "p");
    assert!(pod.labels.is_empty());
    assert_eq!((pod.phase, pod.pod_ip, pod.ready), (None, None, None));
    // Nulls count as absent.
    let pod = ok(Pod::from_json(&json!({
        "kind": null,
        "metadata": {"name": "p", "namespace": null, "labels": null, "uid": null},
        "status": {"phase": null, "podIP": null, "hostIP": null, "conditions": null}
    })));
    assert_eq!(pod.namespace, None);
    assert!(pod.labels.is_empty());
    assert_eq!(ok(Pod::from_json(&json!({"metadata": {"name": "p"}, "status": null}))).phase, None);
    // Pending pod: conditions without Ready.
    let pod = ok(Pod::from_json(&json!({
        "metadata": {"name": "p"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    })));
    assert_eq!(pod.ready, None);
    // Ready Unknown (node lost) is not ready.
    let pod = ok(Pod::from_json(&json!({
        "metadata": {"name": "p"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
    })));
    assert_eq!(pod.ready, Some(false));
    // Lists: items null or missing, kind/apiVersion/metadata optional, generic List.
    for v in [
        json!({"items": null}),
        json!({}),
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}),
        json!({"kind": "List", "metadata": null, "items": []}),
    ] {
        assert_eq!(ok(PodList::from_json(&v)), PodList { items: vec![], resource_version: None });
    }
}

#[test]
fn rejects_malformed_pods() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "pod: the pod must be a JSON object, found an array"),
        (json!("p"), "pod: the pod must be a JSON object, found a string: \"p\""),
        (json!({}), "pod: metadata.name is missing"),
        (json!({"metadata": null}), "pod: metadata.name is missing"),
        (json!({"metadata": []}), "pod: metadata must be a JSON object, found an array"),
        (json!({"metadata": {"name": null}}), "pod: metadata.name is missing"),
        (json!({"metadata": {"name": ""}}), "pod: metadata.name is empty"),
        (
            json!({"metadata": {"name": 5}}),
            "pod: metadata.name must be a string, found a number: 5",
        ),
        (
            json!({"kind": "Service", "metadata": {"name": "p"}}),
            "pod: kind must be \"Pod\", found \"Service\"",
        ),
        (
            json!({"kind": 1, "metadata": {"name": "p"}}),
            "pod: kind must be a string, found a number: 1",
        ),
        (
            json!({"metadata": {"name": "p", "namespace": 3}}),
            "pod \"p\": metadata.namespace must be a string, found a number: 3",
        ),
        (
            json!({"metadata": {"name": "p", "resourceVersion": 3}}),
            "pod \"p\": metadata.resourceVersion must be a string, found a number: 3",
        ),
        (
            json!({"metadata": {"name": "p", "deletionTimestamp": true}}),
            "pod \"p\": metadata.deletionTimestamp must be a string, found a boolean: true",
        ),
        (
            json!({"metadata": {"name": "p", "labels": ["a"]}}),
            "pod \"p\": metadata.labels must be a JSON object, found an array",
        ),
        (
            json!({"metadata": {"name": "p", "labels": {"a": "x", "job-name": 1}}}),
            "pod \"p\": metadata.labels[\"job-name\"] must be a string, found a number: 1",
        ),
        (
            json!({"metadata": {"name": "p", "labels": {"a": null}}}),
            "pod \"p\": metadata.labels[\"a\"] must be a string, found null",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": "Running"}),
            "pod \"p\": status must be a JSON object, found a string: \"Running\"",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"phase": 1}}),
            "pod \"p\": status.phase must be a string, found a number: 1",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"podIP": ["10.0.0.1"]}}),
            "pod \"p\": status.podIP must be a string, found an array",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"hostIP": {}}}),
            "pod \"p\": status.hostIP must be a string, found an object",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": {}}}),
            "pod \"p\": status.conditions must be an array, found an object",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": ["Ready"]}}),
            "pod \"p\": status.conditions[0] must be a JSON object, found a string: \"Ready\"",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": [{"status": "True"}]}}),
            "pod \"p\": status.conditions[0].type is missing",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": [{"type": 1}]}}),
            "pod \"p\": status.conditions[0].type must be a string, found a number: 1",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": [{"type": "Ready"}]}}),
            "pod \"p\": status.conditions[0].status is missing",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": [{"type": "Ready", "status": true}]}}),
            "pod \"p\": status.conditions[0].status must be \"True\", \"False\" or \"Unknown\", found a boolean: true",
        ),
        (
            json!({"metadata": {"name": "p"}, "status": {"conditions": [
                    {"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]}}),
            "pod \"p\": status.conditions has more than one Ready condition",
        ),
        (
            json!({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                       "message": "pods \"p\" not found"}),
            "pod: kind must be \"Pod\", found \"Status\" (the API server returned an error: NotFound (404): pods \"p\" not found)",
        ),
    ];
    for (v, expected) in cases {
        assert_eq!(err_detail(Pod::from_json(&v)), expected, "{v}");
    }
}

#[test]
fn rejects_malformed_pod_lists() {
    let pod = json!({"metadata": {"name": "w-0"}});
    let cases: Vec<(Value, &str)> = vec![
        (json!(null), "pod list: the pod list must be a JSON object, found null"),
        (json!([pod]), "pod list: the pod list must be a JSON object, found an array"),
        (json!({"items": {}}), "pod list: items must be an array, found an object"),
        (json!({"items": "x"}), "pod list: items must be an array, found a string: \"x\""),
        (
            json!({"metadata": 1, "items": []}),
            "pod list: metadata must be a JSON object, found a number: 1",
        ),
        (
            json!({"metadata": {"resourceVersion": 42}, "items": []}),
            "pod list: metadata.resourceVersion must be a string, found a number: 42",
        ),
        (
            json!({"items": [pod, pod, pod, {"metadata": {}}]}),
            "pod list item 3: metadata.name is missing",
        ),
        (
            json!({"items": [pod, 7]}),
            "pod list item 1: the pod must be a JSON object, found a number: 7",
        ),
        (
            json!({"items": [{"metadata": {"name": "w-9"}, "status": {"podIP": 5}}]}),
            "pod list item 0 (\"w-9\"): status.podIP must be a string, found a number: 5",
        ),
        (
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "pods is forbidden", "reason": "Forbidden", "code": 403}),
            "pod list: kind must be \"PodList\" or \"List\", found \"Status\" (the API server returned an error: Forbidden (403): pods is forbidden)",
        ),
        (
            json!({"kind": "Pod", "metadata": {"name": "p"}}),
            "pod list: kind must be \"PodList\" or \"List\", found \"Pod\"",
        ),
    ];
    for (v, expected) in cases {
        assert_eq!(err_detail(PodList::from_json(&v)), expected, "{v}");
    }
}

#[test]
fn decodes_watch_events() {
    let event = ok(WatchEvent::from_json(&json!({
        "type": "ADDED",
        "object": {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"name": "w-0", "resourceVersion": "43"},
                   "status": {"phase": "Pending"}}
    })));
    assert_eq!(event.kind, WatchEventType::Added);
    assert_eq!(event.resource_version.as_deref(), Some("43"));
    assert_eq!(event.pod.as_ref().map(|p| p.name.as_str()), Some("w-0"));
    assert_eq!(event.status, None);
    assert!(!event.is_gone());

    for (wire, kind) in
        [("MODIFIED", WatchEventType::Modified), ("DELETED", WatchEventType::Deleted)]
    {
        let event = ok(WatchEvent::from_json(
            &json!({"type": wire, "object": {"metadata": {"name": "p"}}}),
        ));
        assert_eq!(event.kind, kind);
        assert_eq!(kind.as_str(), wire);
        assert_eq!(WatchEventType::from_wire(wire), Some(kind));
        assert_eq!(event.resource_version, None);
    }

    let bookmark = ok(WatchEvent::from_json(&json!({
        "type": "BOOKMARK",
        "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "99",
                   "annotations": {"k8s.io/initial-events-end": "true"}}}
    })));
    assert_eq!(
        bookmark,
        WatchEvent {
            kind: WatchEventType::Bookmark,
            pod: None,
            resource_version: Some("99".to_owned()),
            status: None
        }
    );

    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "too old resource version: 1 (42)", "reason": "Expired", "code": 410});
    let error = ok(WatchEvent::from_json(&json!({"type": "ERROR", "object": status})));
    assert_eq!(error.kind, WatchEventType::Error);
    assert_eq!(error.pod, None);
    assert_eq!(error.resource_version, None);
    assert_eq!(error.status.as_ref(), Some(&status));
    assert_eq!(error.status_code(), Some(410));
    assert!(error.is_gone());

    let other = ok(WatchEvent::from_json(&json!({"type": "ERROR", "object": {"code": 500}})));
    assert_eq!(other.status_code(), Some(500));
    assert!(!other.is_gone());
    assert_eq!(WatchEventType::from_wire("added"), None);
}

#[test]
fn rejects_malformed_watch_events() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "watch event: the watch event must be a JSON object, found an array"),
        (json!({"object": {}}), "watch event: type is missing"),
        (json!({"type": 1, "object": {}}), "watch event: type must be a string, found a number: 1"),
        (
            json!({"type": "added", "object": {}}),
            "watch event: unknown type \"added\" (expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR)",
        ),
        (json!({"type": "ADDED"}), "watch event ADDED: object is missing"),
        (json!({"type": "ERROR", "object": null}), "watch event ERROR: object is missing"),
        (
            json!({"type": "ERROR", "object": "boom"}),
            "watch event ERROR: object must be a JSON object, found a string: \"boom\"",
        ),
        (
            json!({"type": "ADDED", "object": {}}),
            "watch event ADDED: object.metadata.name is missing",
        ),
        (
            json!({"type": "MODIFIED", "object": {"metadata": {"name": "p"}, "status": {"phase": 2}}}),
            "watch event MODIFIED (pod \"p\"): object.status.phase must be a string, found a number: 2",
        ),
        (
            json!({"type": "DELETED", "object": {"kind": "Status", "metadata": {"name": "p"}}}),
            "watch event DELETED: object.kind must be \"Pod\", found \"Status\" (the API server returned an error)",
        ),
        (
            json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": 5}}}),
            "watch event BOOKMARK: object.metadata.resourceVersion must be a string, found a number: 5",
        ),
        (
            json!({"type": "BOOKMARK", "object": {"metadata": "x"}}),
            "watch event BOOKMARK: object.metadata must be a JSON object, found a string: \"x\"",
        ),
    ];
    for (v, expected) in cases {
        assert_eq!(err_detail(WatchEvent::from_json(&v)), expected, "{v}");
    }
}

/// Arbitrary JSON, biased toward the field names and shapes decoding looks at.
fn json_value() -> impl Strategy<Value = Value> {
    let names = proptest::sample::select(vec![
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "uid",
        "resourceVersion",
        "deletionTimestamp",
        "status",
        "phase",
        "podIP",
        "hostIP",
        "conditions",
        "type",
        "items",
        "object",
        "code",
        "reason",
        "Ready",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        proptest::sample::select(vec![
            "", "Pod", "PodList", "Status", "Ready", "True", "False", "ADDED", "BOOKMARK", "ERROR",
            "Running", "w-0",
        ])
        .prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((names.clone(), inner), 0..6).prop_map(|fields| {
                Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_json_never_panics(v in json_value()) {
        let _ = Pod::from_json(&v);
        let _ = PodList::from_json(&v);
        let _ = WatchEvent::from_json(&v);
        let _ = PodList::from_json(&json!({"items": [v.clone()]}));
        let _ = WatchEvent::from_json(&json!({"type": "ADDED", "object": v.clone()}));
        let _ = WatchEvent::from_json(&json!({"type": "BOOKMARK", "object": v.clone()}));
        let _ = WatchEvent::from_json(&json!({"type": "ERROR", "object": v}));
    }

    #[test]
    fn decoded_pods_survive_reencoding(
        name in "[a-z][a-z0-9-]{0,10}",
        labels in proptest::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..4),
        phase in proptest::option::of(proptest::sample::select(vec!["Pending", "Running"])),
        ready in proptest::option::of(any::<bool>()),
    ) {
        let mut status = json!({});
        if let Some(phase) = phase {
            status["phase"] = json!(phase);
        }
        if let Some(ready) = ready {
            let s = if ready { "True" } else { "False" };
            status["conditions"] = json!([{"type": "Ready", "status": s}]);
        }
        let v = json!({"metadata": {"name": name, "labels": labels}, "status": status});
        let pod = Pod::from_json(&v);
        prop_assert!(pod.is_ok(), "{:?}", pod);
        let pod = pod.unwrap_or_else(|_| unreachable!());
        prop_assert_eq!(&pod.name, &name);
        prop_assert_eq!(&pod.labels, &labels);
        prop_assert_eq!(pod.phase.as_deref(), phase);
        prop_assert_eq!(pod.ready, ready);
    }
}
