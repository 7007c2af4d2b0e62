//! Membership: TensorFlow's indices, then watch events keeping them stable.

use super::*;
use crate::cluster::pods::{WatchEvent, WatchEventType};

// -----------------------------------------------------------------------------------------
// Membership

const SEL: &str = "job-name=tensorflow";

fn event(kind: &str, object: Value) -> WatchEvent {
    WatchEvent::from_json(&json!({"type": kind, "object": object})).expect("a valid event")
}

fn gone() -> WatchEvent {
    event(
        "ERROR",
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "too old resource version: 100 (250)", "reason": "Expired",
               "code": 410}),
    )
}

fn membership(v: Value) -> Membership {
    Membership::new(config(v)).expect("a valid config")
}

fn members(m: &Membership) -> Value {
    m.cluster_spec().expect("a complete cluster").as_dict()
}

/// `w-0` .. `w-{n-1}` at `10.0.0.1` .. `10.0.0.n`, Running.
fn workers(n: usize) -> Vec<Value> {
    (0..n).map(|i| running(&format!("w-{i}"), &format!("10.0.0.{}", i + 1))).collect()
}

#[test]
fn membership_starts_with_tensorflows_indices() {
    let items =
        vec![running("w-2", "10.0.0.3"), running("w-10", "10.0.0.11"), running("w-1", "10.0.0.2")];
    let mut m = membership(json!({}));
    assert_eq!(m.queries(), KubernetesConfig::default().queries());
    assert!(m.reset(SEL, &pod_list(items.clone())));
    let mut snapshot = PodSnapshot::new();
    snapshot.insert(SEL, pod_list(items));
    let tf = KubernetesConfig::default().resolve(&snapshot).unwrap();
    assert_eq!(m.cluster_spec().unwrap(), tf);
    assert_eq!(
        members(&m),
        json!({"worker": ["10.0.0.2:8470", "10.0.0.11:8470", "10.0.0.3:8470"]})
    );
    assert_eq!(m.resource_version(SEL), Some("100"));
    // The same list again changes nothing.
    assert!(!m.reset(
        SEL,
        &pod_list(vec![
            running("w-1", "10.0.0.2"),
            running("w-2", "10.0.0.3"),
            running("w-10", "10.0.0.11"),
        ])
    ));
}

#[test]
fn membership_matches_tensorflow_with_shared_selectors_whatever_the_list_order() {
    let v = json!({"job_to_label_mapping": {"ps": ["role=ps"], "worker": ["role=w", "role=ps"]}});
    let lists = [
        ("role=ps", pod_list(vec![running("ps-1", "10.0.1.2"), running("ps-0", "10.0.1.1")])),
        ("role=w", pod_list(vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")])),
    ];
    let mut snapshot = PodSnapshot::new();
    for (s, l) in &lists {
        snapshot.insert(*s, l.clone());
    }
    let tf = config(v.clone()).resolve(&snapshot).unwrap();
    assert_eq!(
        tf.as_dict(),
        json!({"ps": ["10.0.1.1:8470", "10.0.1.2:8470"],
               "worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.1.1:8470", "10.0.1.2:8470"]})
    );
    // In query order (`role=ps` first, although worker lists it second) and reversed.
    for order in [[0, 1], [1, 0]] {
        let mut m = membership(v.clone());
        let (first, list) = &lists[order[0]];
        assert!(m.reset(first, list) == (*first == "role=ps"), "{first}");
        let e = m.cluster_spec().unwrap_err();
        assert_eq!(e.code(), "FAILED_PRECONDITION");
        let (second, list) = &lists[order[1]];
        assert!(e.detail().contains(&format!("{second:?}")), "{}", e.detail());
        assert!(m.reset(second, list));
        assert_eq!(m.cluster_spec().unwrap().as_dict(), tf.as_dict(), "{order:?}");
    }
}

#[test]
fn membership_added_pods_take_the_next_index() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(2))));
    // A pod that sorts first still goes to the end: nobody moves.
    assert_eq!(m.apply(SEL, &event("ADDED", running("a-0", "10.0.0.9"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.9:8470"]}));
    // A pod that does not qualify yet changes nothing.
    assert_eq!(m.apply(SEL, &event("ADDED", with_phase("w-5", "Pending"))), Ok(false));
    assert_eq!(m.cluster_spec().unwrap().num_tasks("worker").unwrap(), 3);
    // It joins once running.
    assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-5", "10.0.0.6"))), Ok(true));
    assert_eq!(m.cluster_spec().unwrap().task_address("worker", 3).unwrap(), "10.0.0.6:8470");
    // A repeated ADDED is not a new member.
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-5", "10.0.0.6"))), Ok(false));
    assert_eq!(m.resource_version(SEL), Some("7"));
}

#[test]
fn membership_deleted_pods_leave_holes_that_new_pods_fill_lowest_first() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(4))));
    assert_eq!(m.apply(SEL, &event("DELETED", running("w-1", "10.0.0.2"))), Ok(true));
    assert_eq!(
        members(&m),
        json!({"worker": {"0": "10.0.0.1:8470", "2": "10.0.0.3:8470", "3": "10.0.0.4:8470"}})
    );
    assert_eq!(m.apply(SEL, &event("DELETED", running("w-2", "10.0.0.3"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": {"0": "10.0.0.1:8470", "3": "10.0.0.4:8470"}}));
    // Deleting a pod that is not a member changes nothing.
    assert_eq!(m.apply(SEL, &event("DELETED", running("w-7", "10.0.0.8"))), Ok(false));
    // Two new pods: the lowest hole first, in the order they arrive.
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-9", "10.0.0.10"))), Ok(true));
    assert_eq!(
        members(&m),
        json!({"worker": {"0": "10.0.0.1:8470", "1": "10.0.0.10:8470", "3": "10.0.0.4:8470"}})
    );
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-8", "10.0.0.9"))), Ok(true));
    assert_eq!(
        members(&m),
        json!({"worker": ["10.0.0.1:8470", "10.0.0.10:8470", "10.0.0.9:8470", "10.0.0.4:8470"]})
    );
    // The last member leaving leaves an empty job.
    for name in ["w-0", "w-9", "w-8", "w-3"] {
        assert_eq!(m.apply(SEL, &event("DELETED", running(name, "1.1.1.1"))), Ok(true));
    }
    assert_eq!(members(&m), json!({"worker": {}}));
}

#[test]
fn membership_modified_pods_leave_and_rejoin() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(3))));
    assert_eq!(m.apply(SEL, &event("MODIFIED", with_phase("w-1", "Failed"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": {"0": "10.0.0.1:8470", "2": "10.0.0.3:8470"}}));
    assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-1", "10.0.0.2"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]}));
    // A change that does not touch membership (labels, resource version).
    let mut relabelled = running("w-0", "10.0.0.1");
    relabelled["metadata"]["labels"]["extra"] = json!("yes");
    relabelled["metadata"]["resourceVersion"] = json!("120");
    assert_eq!(m.apply(SEL, &event("MODIFIED", relabelled)), Ok(false));
    assert_eq!(m.resource_version(SEL), Some("120"));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]}));
}

#[test]
fn membership_readiness_and_namespace() {
    let mut m = membership(json!({"require_ready": true, "namespace": "ml"}));
    assert!(!m.reset(SEL, &pod_list(vec![])));
    assert_eq!(members(&m), json!({"worker": {}}));
    let mut unready = running("w-0", "10.0.0.1");
    unready["status"]["conditions"][1]["status"] = json!("False");
    assert_eq!(m.apply(SEL, &event("ADDED", unready)), Ok(false));
    assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-0", "10.0.0.1"))), Ok(true));
    let mut elsewhere = running("w-1", "10.0.0.2");
    elsewhere["metadata"]["namespace"] = json!("other");
    assert_eq!(m.apply(SEL, &event("ADDED", elsewhere)), Ok(false));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470"]}));
    let mut terminating = running("w-0", "10.0.0.1");
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(m.apply(SEL, &event("MODIFIED", terminating)), Ok(true));
    assert_eq!(members(&m), json!({"worker": {}}));
}

#[test]
fn membership_bookmark_records_the_version_and_changes_nothing() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(2))));
    let before = m.cluster_spec().unwrap();
    let bookmark = event(
        "BOOKMARK",
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "250"}}),
    );
    assert_eq!(m.apply(SEL, &bookmark), Ok(false));
    assert_eq!(m.resource_version(SEL), Some("250"));
    assert_eq!(m.cluster_spec().unwrap(), before);
    assert_eq!(m.resource_version("other"), None);
}

#[test]
fn membership_error_events_are_errors_and_change_nothing() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(2))));
    let before = members(&m);
    let e = m.apply(SEL, &gone()).unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    assert!(e.detail().contains("410"), "{}", e.detail());
    assert!(e.detail().contains(SEL), "{}", e.detail());
    assert_eq!(members(&m), before);
    assert_eq!(m.resource_version(SEL), Some("100"));
    // Even an ERROR event that carries a version does not move the resume point.
    let mut odd = gone();
    odd.resource_version = Some("999".to_owned());
    assert!(m.apply(SEL, &odd).is_err());
    assert_eq!(m.resource_version(SEL), Some("100"));
    // Nor does a pod event without a pod.
    let broken = WatchEvent {
        kind: WatchEventType::Added,
        pod: None,
        resource_version: Some("998".to_owned()),
        status: None,
    };
    assert_eq!(m.apply(SEL, &broken).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(m.resource_version(SEL), Some("100"));
    assert_eq!(members(&m), before);
}

#[test]
fn membership_relist_after_gone_keeps_the_indices_of_staying_pods() {
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(4))));
    assert_eq!(m.apply(SEL, &event("DELETED", running("w-1", "10.0.0.2"))), Ok(true));
    assert!(m.apply(SEL, &gone()).unwrap_err().detail().contains("Expired"));
    // While the watch was down: w-2 left, w-7 came. The re-list is in API order.
    let mut relist = pod_list_json(vec![
        running("w-3", "10.0.0.4"),
        running("w-7", "10.0.0.8"),
        running("w-0", "10.0.0.1"),
    ]);
    relist["metadata"]["resourceVersion"] = json!("300");
    assert!(m.reset(SEL, &PodList::from_json(&relist).unwrap()));
    assert_eq!(
        members(&m),
        json!({"worker": {"0": "10.0.0.1:8470", "1": "10.0.0.8:8470", "3": "10.0.0.4:8470"}})
    );
    assert_eq!(m.resource_version(SEL), Some("300"));
    // A re-list without a version forgets the old one rather than resuming from it.
    let unversioned = PodList::from_json(&json!({"items": relist["items"].clone()})).unwrap();
    assert!(!m.reset(SEL, &unversioned));
    assert_eq!(m.resource_version(SEL), None);
}

#[test]
fn membership_reports_a_changed_address() {
    // A StatefulSet pod re-created under the same name while the watch was down.
    let mut m = membership(json!({}));
    assert!(m.reset(SEL, &pod_list(workers(2))));
    assert!(m.reset(SEL, &pod_list(vec![running("w-0", "10.0.0.1"), running("w-1", "10.0.5.5")])));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.5.5:8470"]}));
    // Or moved to another node, in TensorFlow's host_ip mode.
    let mut m = membership(json!({"address": "host_ip"}));
    assert!(m.reset(SEL, &pod_list(vec![pod_with("w-0", "Running", "10.0.0.1", "192.168.0.1")])));
    let moved = pod_with("w-0", "Running", "10.0.0.1", "192.168.0.2");
    assert_eq!(m.apply(SEL, &event("MODIFIED", moved)), Ok(true));
    assert_eq!(members(&m), json!({"worker": ["192.168.0.2:8470"]}));
}

#[test]
fn membership_waits_for_expected_members() {
    let mut m = membership(json!({"expected": {"worker": 3}}));
    assert!(
        m.reset(SEL, &pod_list(vec![running("w-0", "10.0.0.1"), with_phase("w-1", "Pending")]))
    );
    let e = m.cluster_spec().unwrap_err();
    let ClusterError::Unavailable { missing, .. } = e else { unreachable!("{e:?}") };
    assert_eq!(missing, BTreeMap::from([("worker".to_owned(), 2)]));
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-2", "10.0.0.3"))), Ok(true));
    let ClusterError::Unavailable { missing, .. } = m.cluster_spec().unwrap_err() else {
        unreachable!()
    };
    assert_eq!(missing, BTreeMap::from([("worker".to_owned(), 1)]));
    assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-1", "10.0.0.2"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.0.3:8470", "10.0.0.2:8470"]}));
    // Losing one makes it incomplete again.
    assert_eq!(m.apply(SEL, &event("DELETED", running("w-0", "10.0.0.1"))), Ok(true));
    assert_eq!(m.cluster_spec().unwrap_err().code(), "UNAVAILABLE");
}

#[test]
fn membership_tracks_pods_matched_by_two_selectors_twice() {
    let mut m = membership(json!({"job_to_label_mapping": {"worker": ["a=1", "b=2"]}}));
    assert!(!m.reset("a=1", &pod_list(vec![running("s-0", "10.0.0.5")])));
    assert!(m.reset("b=2", &pod_list(vec![running("s-0", "10.0.0.5")])));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.5:8470", "10.0.0.5:8470"]}));
    // Leaving one selector frees one slot only.
    assert_eq!(m.apply("a=1", &event("DELETED", running("s-0", "10.0.0.5"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": {"1": "10.0.0.5:8470"}}));
    // Events on a selector no job maps are kept apart.
    assert_eq!(m.apply("c=3", &event("ADDED", running("x-0", "10.0.0.6"))), Ok(false));
    assert_eq!(members(&m), json!({"worker": {"1": "10.0.0.5:8470"}}));
}

#[test]
fn membership_can_start_from_a_watch_alone() {
    // A watch without a prior list sends the existing pods as ADDED events.
    let mut m = membership(json!({}));
    assert_eq!(m.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-1", "10.0.0.2"))), Ok(true));
    assert_eq!(m.apply(SEL, &event("ADDED", running("w-0", "10.0.0.1"))), Ok(true));
    assert_eq!(members(&m), json!({"worker": ["10.0.0.2:8470", "10.0.0.1:8470"]}));
}
