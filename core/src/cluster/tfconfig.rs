//! `TFConfigClusterResolver`: the cluster and this task from a `TF_CONFIG` JSON string.
//!
//! Core never reads the environment: the caller passes the variable's value in (and may
//! replace it with [`TfConfigResolver::set_tf_config`], which is what TensorFlow's "re-read on
//! every access" amounts to). Malformed input fails the accessors that need it, as in
//! TensorFlow, not construction.
//!
//! Differences from TensorFlow, on purpose: an empty (or all-blank) `TF_CONFIG` means unset
//! (TensorFlow raises a JSON error); duplicate keys are refused; a `TF_CONFIG` that is JSON
//! but not an object, or whose `task` is not an object, is refused with a clear message
//! (TensorFlow answers with Python `in`-operator accidents).

use serde_json::{Map, Value};

use super::error::{ClusterError, TfException};
use super::resolver::{
    Accelerators, ClusterResolver, Device, DeviceMatch, count_accelerators, format_master_url,
};
use super::spec::{ClusterSpec, TaskIndex};
use crate::pyrepr::{python_int, str_of};

/// The conventional environment variable name.
pub const TF_CONFIG_VAR: &str = "TF_CONFIG";

/// A resolver over a `TF_CONFIG` value.
#[derive(Debug, Clone)]
pub struct TfConfigResolver {
    config: Result<Map<String, Value>, ClusterError>,
    task_type: Option<String>,
    task_id: Option<TaskIndex>,
    rpc_layer: Option<String>,
    environment: Option<String>,
    device_match: DeviceMatch,
}

fn parse_tf_config(raw: Option<&str>) -> Result<Map<String, Value>, ClusterError> {
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else { return Ok(Map::new()) };
    match crate::json::parse_strict(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ClusterError::invalid_input(format!(
            "TF_CONFIG must be a JSON object, not {}",
            json_kind(&other)
        ))),
        Err(e) => Err(ClusterError::invalid(
            TfException::ValueError,
            format!("TF_CONFIG is not valid JSON: {}", e.message),
        )),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Python's `int(v)` for a JSON value (TF_CONFIG's `task.index`).
pub(crate) fn python_int_of(v: &Value) -> Result<TaskIndex, ClusterError> {
    let out_of_range =
        || ClusterError::invalid_input(format!("task index {} is out of range", str_of(v)));
    match v {
        Value::Bool(b) => Ok(TaskIndex::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i)
            } else if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                let t = f.trunc();
                if t >= i64::MIN as f64 && t < i64::MAX as f64 {
                    Ok(t as i64)
                } else {
                    Err(out_of_range())
                }
            } else {
                Err(out_of_range())
            }
        }
        Value::String(s) => python_int(s)
            .map_err(|e| ClusterError::invalid(TfException::ValueError, e.to_string()))?
            .ok_or_else(out_of_range),
        other => {
            let ty = match other {
                Value::Null => "NoneType",
                Value::Array(_) => "list",
                _ => "dict",
            };
            Err(ClusterError::invalid(
                TfException::TypeError,
                format!(
                    "int() argument must be a string, a bytes-like object or a real number, not '{ty}'"
                ),
            ))
        }
    }
}

impl TfConfigResolver {
    /// A resolver over the given `TF_CONFIG` value (`None`: the variable is unset).
    pub fn new(tf_config: Option<&str>) -> Self {
        TfConfigResolver {
            config: parse_tf_config(tf_config),
            task_type: None,
            task_id: None,
            rpc_layer: None,
            environment: None,
            device_match: DeviceMatch::default(),
        }
    }

    /// Replaces the `TF_CONFIG` value (TensorFlow re-reads the variable on every access).
    pub fn set_tf_config(&mut self, tf_config: Option<&str>) {
        self.config = parse_tf_config(tf_config);
    }

    /// Sets the environment string (TensorFlow's constructor argument; default `None`).
    pub fn with_environment(mut self, environment: Option<String>) -> Self {
        self.environment = environment;
        self
    }

    /// Chooses how `num_accelerators` filters a device list.
    pub fn with_device_match(mut self, device_match: DeviceMatch) -> Self {
        self.device_match = device_match;
        self
    }

    fn config(&self) -> Result<&Map<String, Value>, ClusterError> {
        self.config.as_ref().map_err(Clone::clone)
    }

    fn task_field(&self, field: &str) -> Result<Option<&Value>, ClusterError> {
        match self.config()?.get("task") {
            None => Ok(None),
            Some(Value::Object(task)) => Ok(task.get(field)),
            Some(other) => Err(ClusterError::invalid_input(format!(
                "TF_CONFIG's \"task\" must be a JSON object, not {}",
                json_kind(other)
            ))),
        }
    }

    /// TF_CONFIG's `session_master`, verbatim, if present and not null.
    pub fn session_master(&self) -> Result<Option<String>, ClusterError> {
        Ok(self.config()?.get("session_master").filter(|v| !v.is_null()).map(str_of))
    }
}

impl ClusterResolver for TfConfigResolver {
    /// `ClusterSpec(TF_CONFIG["cluster"])`, or an empty cluster without a `cluster` key.
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        match self.config()?.get("cluster") {
            None => Ok(ClusterSpec::new()),
            Some(cluster) => ClusterSpec::from_json(cluster),
        }
    }

    /// TensorFlow's order: `session_master` verbatim if present; `""` for a cluster with no
    /// job, or one job with one task; else the task's address (arguments over overrides over
    /// TF_CONFIG), with the RPC layer (an explicit `""` argument suppresses the scheme).
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        if let Some(master) = self.session_master()? {
            return Ok(master);
        }
        let spec = self.cluster_spec()?;
        let mut jobs = spec.jobs();
        match (jobs.len(), jobs.next()) {
            (0, _) => return Ok(String::new()),
            (1, Some(only)) if spec.job_tasks_len(only)? == 1 => return Ok(String::new()),
            _ => {}
        }
        let task_type = match task_type {
            Some(t) => Some(t.to_owned()),
            None => self.task_type()?,
        };
        let task_id = match task_id {
            Some(i) => Some(i),
            None => self.task_id()?,
        };
        let rpc_layer = match rpc_layer {
            Some(l) => Some(l.to_owned()),
            None => self.rpc_layer()?,
        };
        let address = spec.task_address_opt(task_type.as_deref(), task_id)?;
        Ok(format_master_url(address, rpc_layer.as_deref()))
    }

    /// The override, else `str(TF_CONFIG["task"]["type"])`.
    fn task_type(&self) -> Result<Option<String>, ClusterError> {
        if let Some(t) = &self.task_type {
            return Ok(Some(t.clone()));
        }
        Ok(self.task_field("type")?.map(str_of))
    }

    /// The override, else `int(TF_CONFIG["task"]["index"])` with Python's `int()` rules.
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError> {
        if let Some(i) = self.task_id {
            return Ok(Some(i));
        }
        self.task_field("index")?.map(python_int_of).transpose()
    }

    fn rpc_layer(&self) -> Result<Option<String>, ClusterError> {
        if let Some(l) = &self.rpc_layer {
            return Ok(Some(l.clone()));
        }
        Ok(self.config()?.get("rpc_layer").filter(|v| !v.is_null()).map(str_of))
    }

    fn environment(&self) -> Option<String> {
        self.environment.clone()
    }

    /// Fills a missing task type and id from TF_CONFIG, then counts that task's devices.
    fn num_accelerators(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        let task_type = match task_type {
            Some(t) => Some(t.to_owned()),
            None => self.task_type()?,
        };
        let task_id = match task_id {
            Some(i) => Some(i),
            None => self.task_id()?,
        };
        Ok(count_accelerators(devices, task_type.as_deref(), task_id, self.device_match))
    }

    fn set_task_type(&mut self, task_type: Option<String>) {
        self.task_type = task_type;
    }
    fn set_task_id(&mut self, task_id: Option<TaskIndex>) {
        self.task_id = task_id;
    }
    fn set_rpc_layer(&mut self, rpc_layer: Option<String>) {
        self.rpc_layer = rpc_layer;
    }
}

/// Renders the `TF_CONFIG` a task of `cluster` should be started with:
/// `{"cluster": <as_dict>, "task": {"type", "index"}, "rpc_layer"}` (task and rpc_layer only
/// when known). Parsing the result with [`TfConfigResolver`] gives back the same cluster,
/// task type, task id and RPC layer.
pub fn render_tf_config(
    cluster: &ClusterSpec,
    task_type: Option<&str>,
    task_id: Option<TaskIndex>,
    rpc_layer: Option<&str>,
) -> String {
    let mut out = Map::new();
    out.insert("cluster".into(), cluster.as_dict());
    if task_type.is_some() || task_id.is_some() {
        let mut task = Map::new();
        if let Some(t) = task_type {
            task.insert("type".into(), Value::String(t.to_owned()));
        }
        if let Some(i) = task_id {
            task.insert("index".into(), Value::from(i));
        }
        out.insert("task".into(), Value::Object(task));
    }
    if let Some(l) = rpc_layer {
        out.insert("rpc_layer".into(), Value::String(l.to_owned()));
    }
    Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_means_unset_and_non_objects_are_refused() {
        let r = TfConfigResolver::new(Some("  "));
        assert_eq!(r.cluster_spec().unwrap(), ClusterSpec::new());
        assert_eq!(r.master(None, None, None).unwrap(), "");
        let r = TfConfigResolver::new(Some("[1]"));
        assert_eq!(r.task_type().unwrap_err().code(), "INVALID_ARGUMENT");
        let r = TfConfigResolver::new(Some("{"));
        assert_eq!(r.cluster_spec().unwrap_err().tf_exception(), Some(TfException::ValueError));
        let r = TfConfigResolver::new(Some(r#"{"task": {"index": null}}"#));
        assert_eq!(
            r.task_id().unwrap_err().detail(),
            "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"
        );
        let r = TfConfigResolver::new(Some(r#"{"task": {"index": 1.9, "type": null}}"#));
        assert_eq!(r.task_id().unwrap(), Some(1));
        assert_eq!(r.task_type().unwrap().as_deref(), Some("None"));
    }

    #[test]
    fn master_missing_task_is_no_such_job_none() {
        let r = TfConfigResolver::new(Some(r#"{"cluster": {"a": ["x:1"], "b": ["y:1"]}}"#));
        assert_eq!(
            r.master(None, None, None).unwrap_err().detail(),
            "No such job in cluster: None"
        );
        // A single sparse task with index 3 is not "one task".
        let r = TfConfigResolver::new(Some(r#"{"cluster": {"w": {"3": "x:1"}}}"#));
        assert_eq!(r.master(Some("w"), Some(3), Some("grpc")).unwrap(), "grpc://x:1");
    }

    #[test]
    fn render_round_trips() {
        let spec = ClusterSpec::from_json(&serde_json::json!({
            "worker": ["a:1", "b:1"], "ps": {"2": "c:1"}, "empty": []
        }))
        .unwrap();
        let text = render_tf_config(&spec, Some("worker"), Some(1), Some("grpc"));
        let r = TfConfigResolver::new(Some(&text));
        assert_eq!(r.cluster_spec().unwrap(), spec);
        assert_eq!(
            r.cluster_spec().unwrap().jobs().collect::<Vec<_>>(),
            spec.jobs().collect::<Vec<_>>()
        );
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(1));
        assert_eq!(r.rpc_layer().unwrap().as_deref(), Some("grpc"));
        assert_eq!(render_tf_config(&ClusterSpec::new(), None, None, None), r#"{"cluster":{}}"#);
    }
}
