//! The slice of a Kubernetes `v1` Pod that cluster resolution needs, decoded from the JSON the
//! API server returns (`GET /api/v1/namespaces/{ns}/pods`, and watch events on it).
//!
//! Decoding is lenient exactly where the API is: unknown fields are ignored everywhere, `kind`
//! and `apiVersion` are optional, a `null` optional field counts as absent and `"items": null`
//! is an empty list. It is strict where resolution would otherwise go wrong silently: a
//! non-object where an object is required, `items` that is not an array, a pod without a
//! non-empty string `metadata.name`, a field of the wrong type (`status.phase`, `status.podIP`,
//! ...), labels that are not string to string, and a `Status` (an API error) where a pod or a
//! pod list was expected. Errors are `INVALID_ARGUMENT` and name the path of the offending
//! field, e.g. `pod list item 3: metadata.name is missing`. Field names are the API's
//! (camelCase).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::ClusterError;

type Object = Map<String, Value>;

/// What resolution needs to know about one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pod {
    /// `metadata.name` (always present and non-empty).
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.labels` (absent means no labels).
    pub labels: BTreeMap<String, String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.deletionTimestamp`: set once deletion has been requested.
    pub deletion_timestamp: Option<String>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`), as given.
    pub phase: Option<String>,
    /// `status.podIP`, as given.
    pub pod_ip: Option<String>,
    /// `status.hostIP`, as given.
    pub host_ip: Option<String>,
    /// The `Ready` condition: `Some(true)` for status `"True"`, `Some(false)` for `"False"` or
    /// `"Unknown"` (a pod on an unreachable node is not ready), `None` when the pod has no
    /// `Ready` condition (yet).
    pub ready: Option<bool>,
}

impl Pod {
    /// Decodes one pod (the body of `GET .../pods/{name}`, or an item of a pod list).
    pub fn from_json(v: &Value) -> Result<Pod, ClusterError> {
        decode_pod(v, "").map_err(|e| {
            let prefix = match &e.pod {
                Some(name) => format!("pod {name:?}"),
                None => "pod".to_owned(),
            };
            e.into_error(&prefix)
        })
    }

    /// Whether deletion of the pod has been requested (`metadata.deletionTimestamp` is set):
    /// it may still be running, but is on its way out.
    pub fn is_terminating(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// A list of pods and the resource version it was read at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodList {
    /// The pods, in the order the API returned them.
    pub items: Vec<Pod>,
    /// `metadata.resourceVersion` of the list (where a watch can start from).
    pub resource_version: Option<String>,
}

impl PodList {
    /// Decodes a `PodList` (or a generic `List` of pods).
    ///
    /// Item errors name the item's 0-based index: `pod list item 3: metadata.name is missing`.
    pub fn from_json(v: &Value) -> Result<PodList, ClusterError> {
        let invalid = |detail: String| ClusterError::invalid_input(format!("pod list: {detail}"));
        let obj = as_object(v, "the pod list").map_err(invalid)?;
        check_kind(obj, "", &["PodList", "List"]).map_err(invalid)?;
        let resource_version =
            match optional_object(obj, "metadata", "metadata").map_err(invalid)? {
                Some(meta) => optional_string(meta, "resourceVersion", "metadata.resourceVersion")
                    .map_err(invalid)?,
                None => None,
            };
        let items = match obj.get("items") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    decode_pod(item, "").map_err(|e| {
                        let prefix = match &e.pod {
                            Some(name) => format!("pod list item {i} ({name:?})"),
                            None => format!("pod list item {i}"),
                        };
                        e.into_error(&prefix)
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(invalid(format!("items must be an array, found {}", describe(other))));
            }
        };
        Ok(PodList { items, resource_version })
    }
}

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventType {
    /// `ADDED`: the pod was created (or first seen by this watch).
    Added,
    /// `MODIFIED`: the pod changed.
    Modified,
    /// `DELETED`: the pod is gone; the object is its last state.
    Deleted,
    /// `BOOKMARK`: no change, only a newer resource version to resume from.
    Bookmark,
    /// `ERROR`: the watch failed; the object is a `Status`.
    Error,
}

impl WatchEventType {
    /// The wire name (`"ADDED"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventType::Added => "ADDED",
            WatchEventType::Modified => "MODIFIED",
            WatchEventType::Deleted => "DELETED",
            WatchEventType::Bookmark => "BOOKMARK",
            WatchEventType::Error => "ERROR",
        }
    }

    /// Parses a wire name; `None` for anything else (names are case-sensitive).
    pub fn from_wire(name: &str) -> Option<Self> {
        match name {
            "ADDED" => Some(WatchEventType::Added),
            "MODIFIED" => Some(WatchEventType::Modified),
            "DELETED" => Some(WatchEventType::Deleted),
            "BOOKMARK" => Some(WatchEventType::Bookmark),
            "ERROR" => Some(WatchEventType::Error),
            _ => None,
        }
    }
}

/// One event of a pod watch (`?watch=true`), e.g. `{"type":"ADDED","object":{...}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchEventType,
    /// The pod, for `ADDED`, `MODIFIED` and `DELETED`; `None` for `BOOKMARK` and `ERROR`.
    pub pod: Option<Pod>,
    /// The resource version to resume the watch from: the pod's for `ADDED`, `MODIFIED` and
    /// `DELETED`, the bookmark's for `BOOKMARK`, `None` for `ERROR`.
    pub resource_version: Option<String>,
    /// The `Status` object of an `ERROR` event, unchanged; `None` otherwise.
    pub status: Option<Value>,
}

impl WatchEvent {
    /// Decodes one watch event.
    pub fn from_json(v: &Value) -> Result<WatchEvent, ClusterError> {
        let obj = as_object(v, "the watch event")
            .map_err(|d| ClusterError::invalid_input(format!("watch event: {d}")))?;
        let kind = match obj.get("type") {
            None | Some(Value::Null) => {
                return Err(ClusterError::invalid_input("watch event: type is missing"));
            }
            Some(Value::String(name)) => WatchEventType::from_wire(name).ok_or_else(|| {
                ClusterError::invalid_input(format!(
                    "watch event: unknown type {name:?} (expected ADDED, MODIFIED, DELETED, \
                     BOOKMARK or ERROR)"
                ))
            })?,
            Some(other) => {
                return Err(ClusterError::invalid_input(format!(
                    "watch event: type must be a string, found {}",
                    describe(other)
                )));
            }
        };
        let invalid = |detail: String| {
            ClusterError::invalid_input(format!("watch event {}: {detail}", kind.as_str()))
        };
        let object = match obj.get("object") {
            None | Some(Value::Null) => return Err(invalid("object is missing".to_owned())),
            Some(object) => object,
        };
        let object_map = as_object(object, "object").map_err(invalid)?;
        match kind {
            WatchEventType::Added | WatchEventType::Modified | WatchEventType::Deleted => {
                let pod = decode_pod(object, "object.").map_err(|e| {
                    let prefix = match &e.pod {
                        Some(name) => format!("watch event {} (pod {name:?})", kind.as_str()),
                        None => format!("watch event {}", kind.as_str()),
                    };
                    e.into_error(&prefix)
                })?;
                let resource_version = pod.resource_version.clone();
                Ok(WatchEvent { kind, pod: Some(pod), resource_version, status: None })
            }
            WatchEventType::Bookmark => {
                let resource_version =
                    match optional_object(object_map, "metadata", "object.metadata")
                        .map_err(invalid)?
                    {
                        Some(meta) => optional_string(
                            meta,
                            "resourceVersion",
                            "object.metadata.resourceVersion",
                        )
                        .map_err(invalid)?,
                        None => None,
                    };
                Ok(WatchEvent { kind, pod: None, resource_version, status: None })
            }
            WatchEventType::Error => Ok(WatchEvent {
                kind,
                pod: None,
                resource_version: None,
                status: Some(object.clone()),
            }),
        }
    }

    /// The `code` of an `ERROR` event's `Status` (e.g. `410`), if it has one.
    pub fn status_code(&self) -> Option<i64> {
        self.status.as_ref()?.get("code")?.as_i64()
    }

    /// Whether this is an `ERROR` event saying the watch's resource version is too old
    /// (HTTP 410 Gone, reason `Expired` or `Gone`): the caller must list again.
    pub fn is_gone(&self) -> bool {
        let reason = self.status.as_ref().and_then(|s| s.get("reason")).and_then(Value::as_str);
        self.kind == WatchEventType::Error
            && (self.status_code() == Some(410) || matches!(reason, Some("Expired" | "Gone")))
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding helpers

/// A decoding failure inside one pod: the path-relative detail, and the pod's name once known.
struct PodError {
    pod: Option<String>,
    detail: String,
}

impl PodError {
    fn into_error(self, prefix: &str) -> ClusterError {
        ClusterError::invalid_input(format!("{prefix}: {}", self.detail))
    }
}

/// Decodes a pod; `base` prefixes every field path (`""`, or `"object."` in a watch event).
fn decode_pod(v: &Value, base: &str) -> Result<Pod, PodError> {
    let anonymous = |detail: String| PodError { pod: None, detail };
    let what =
        if base.is_empty() { "the pod".to_owned() } else { base.trim_end_matches('.').to_owned() };
    let obj = as_object(v, &what).map_err(anonymous)?;
    check_kind(obj, base, &["Pod"]).map_err(anonymous)?;

    let meta_path = format!("{base}metadata");
    let meta = optional_object(obj, "metadata", &meta_path).map_err(anonymous)?;
    let name_path = format!("{meta_path}.name");
    let name = match meta.and_then(|m| m.get("name")) {
        None | Some(Value::Null) => return Err(anonymous(format!("{name_path} is missing"))),
        Some(Value::String(name)) if name.is_empty() => {
            return Err(anonymous(format!("{name_path} is empty")));
        }
        Some(Value::String(name)) => name.clone(),
        Some(other) => {
            return Err(anonymous(format!(
                "{name_path} must be a string, found {}",
                describe(other)
            )));
        }
    };
    let named = |detail: String| PodError { pod: Some(name.clone()), detail };

    let empty = Object::new();
    let meta = meta.unwrap_or(&empty);
    let meta_string =
        |field: &str| optional_string(meta, field, &format!("{meta_path}.{field}")).map_err(named);
    let namespace = meta_string("namespace")?;
    let uid = meta_string("uid")?;
    let resource_version = meta_string("resourceVersion")?;
    let deletion_timestamp = meta_string("deletionTimestamp")?;
    let labels = decode_labels(meta, &meta_path).map_err(named)?;

    let status_path = format!("{base}status");
    let status = optional_object(obj, "status", &status_path).map_err(named)?.unwrap_or(&empty);
    let status_string = |field: &str| {
        optional_string(status, field, &format!("{status_path}.{field}")).map_err(named)
    };
    let phase = status_string("phase")?;
    let pod_ip = status_string("podIP")?;
    let host_ip = status_string("hostIP")?;
    let ready = decode_ready(status, &status_path).map_err(named)?;

    Ok(Pod {
        name,
        namespace,
        labels,
        uid,
        resource_version,
        deletion_timestamp,
        phase,
        pod_ip,
        host_ip,
        ready,
    })
}

fn decode_labels(meta: &Object, meta_path: &str) -> Result<BTreeMap<String, String>, String> {
    let path = format!("{meta_path}.labels");
    let Some(labels) = optional_object(meta, "labels", &path)? else {
        return Ok(BTreeMap::new());
    };
    labels
        .iter()
        .map(|(key, value)| match value {
            Value::String(value) => Ok((key.clone(), value.clone())),
            other => Err(format!("{path}[{key:?}] must be a string, found {}", describe(other))),
        })
        .collect()
}

/// The status of the `Ready` condition, if there is one.
fn decode_ready(status: &Object, status_path: &str) -> Result<Option<bool>, String> {
    let path = format!("{status_path}.conditions");
    let conditions = match status.get("conditions") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(conditions)) => conditions,
        Some(other) => {
            return Err(format!("{path} must be an array, found {}", describe(other)));
        }
    };
    let mut ready = None;
    for (i, condition) in conditions.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let condition = as_object(condition, &at)?;
        let kind = match condition.get("type") {
            Some(Value::String(kind)) => kind,
            None | Some(Value::Null) => return Err(format!("{at}.type is missing")),
            Some(other) => {
                return Err(format!("{at}.type must be a string, found {}", describe(other)));
            }
        };
        if kind != "Ready" {
            continue;
        }
        if ready.is_some() {
            return Err(format!("{path} has more than one Ready condition"));
        }
        ready = match condition.get("status") {
            Some(Value::String(s)) if s == "True" => Some(true),
            Some(Value::String(s)) if s == "False" || s == "Unknown" => Some(false),
            None | Some(Value::Null) => return Err(format!("{at}.status is missing")),
            Some(other) => {
                return Err(format!(
                    "{at}.status must be \"True\", \"False\" or \"Unknown\", found {}",
                    describe(other)
                ));
            }
        };
    }
    Ok(ready)
}

/// `v` as an object, or "`what` must be a JSON object, found ...".
fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a Object, String> {
    v.as_object().ok_or_else(|| format!("{what} must be a JSON object, found {}", describe(v)))
}

/// `obj[field]` as an object; absent or `null` is `None`.
fn optional_object<'a>(
    obj: &'a Object,
    field: &str,
    path: &str,
) -> Result<Option<&'a Object>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        Some(other) => Err(format!("{path} must be a JSON object, found {}", describe(other))),
    }
}

/// `obj[field]` as a string; absent or `null` is `None`.
fn optional_string(obj: &Object, field: &str, path: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{path} must be a string, found {}", describe(other))),
    }
}

/// Accepts an absent or `null` `kind`, or one of `expected`. A `Status` (the API's error
/// reply) is reported with its reason, code and message.
fn check_kind(obj: &Object, base: &str, expected: &[&str]) -> Result<(), String> {
    let kind = match obj.get("kind") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(kind)) => kind,
        Some(other) => {
            return Err(format!("{base}kind must be a string, found {}", describe(other)));
        }
    };
    if expected.contains(&kind.as_str()) {
        return Ok(());
    }
    let wanted = expected.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(" or ");
    let mut detail = format!("{base}kind must be {wanted}, found {kind:?}");
    if kind == "Status" {
        detail.push_str(" (the API server returned an error");
        let text = |field: &str| obj.get(field).and_then(Value::as_str);
        if let Some(reason) = text("reason") {
            detail.push_str(&format!(": {reason}"));
        }
        if let Some(code) = obj.get("code").and_then(Value::as_i64) {
            detail.push_str(&format!(" ({code})"));
        }
        if let Some(message) = text("message") {
            detail.push_str(&format!(": {message}"));
        }
        detail.push(')');
    }
    Err(detail)
}

/// "a number: 5", "an array", ... for error messages (scalars shown, containers named).
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("a boolean: {b}"),
        Value::Number(n) => format!("a number: {n}"),
        Value::String(s) => format!("a string: {s:?}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            ok(Pod::from_json(&json!({"metadata": {"name": "p"}, "status": null}))).phase,
            None
        );
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
            assert_eq!(
                ok(PodList::from_json(&v)),
                PodList { items: vec![], resource_version: None }
            );
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
            (
                json!({"type": 1, "object": {}}),
                "watch event: type must be a string, found a number: 1",
            ),
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
                "", "Pod", "PodList", "Status", "Ready", "True", "False", "ADDED", "BOOKMARK",
                "ERROR", "Running", "w-0",
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
}
