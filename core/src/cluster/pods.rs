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
mod tests;
