//! The `kubernetes` resolver of the resolve contract, as JSON gives it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::cluster::error::ClusterError;
use crate::cluster::selector::LabelSelector;

use super::{AddressSource, KubernetesConfig, PodSnapshot};

/// The `kubernetes` resolver of the resolve contract, as JSON gives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSpec {
    /// Job -> list of label selectors (TensorFlow's default when absent or empty).
    #[serde(default)]
    pub job_to_label_mapping: Option<serde_json::Map<String, Value>>,
    /// The port (default 8470).
    #[serde(default)]
    pub tf_server_port: Option<i64>,
    /// The RPC layer (default `grpc`; `null` for none).
    #[serde(default = "default_grpc")]
    pub rpc_layer: Option<String>,
    /// `pod_ip` (default) or `host_ip`.
    #[serde(default)]
    pub address: AddressSource,
    /// Namespace scope.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Require the `Ready` condition.
    #[serde(default)]
    pub require_ready: bool,
    /// Expected replicas per job.
    #[serde(default)]
    pub expected: Option<BTreeMap<String, usize>>,
    /// Inline pods (`{selector: <v1 PodList>}`): resolve offline.
    #[serde(default)]
    pub pods: Option<Value>,
}

fn default_grpc() -> Option<String> {
    Some("grpc".to_owned())
}

impl KubernetesSpec {
    /// Validates the JSON form (selectors parsed before any API call) into a configuration
    /// and, when given, the inline snapshot.
    pub fn build(self) -> Result<(KubernetesConfig, Option<PodSnapshot>), ClusterError> {
        let mut config = KubernetesConfig::default();
        if let Some(mapping) = self.job_to_label_mapping.filter(|m| !m.is_empty()) {
            let mut out = Vec::with_capacity(mapping.len());
            for (job, selectors) in mapping {
                let Value::Array(items) = selectors else {
                    return Err(ClusterError::invalid_input(format!(
                        "job_to_label_mapping[{job:?}] must be a list of label selectors"
                    )));
                };
                let mut parsed = Vec::with_capacity(items.len());
                for item in items {
                    let Value::String(text) = item else {
                        return Err(ClusterError::invalid_input(format!(
                            "job_to_label_mapping[{job:?}] must hold strings, not {item}"
                        )));
                    };
                    parsed.push(LabelSelector::parse(&text)?);
                }
                out.push((job, parsed));
            }
            config.job_to_label_mapping = out;
        }
        if let Some(port) = self.tf_server_port {
            config.tf_server_port =
                u16::try_from(port).ok().filter(|p| *p != 0).ok_or_else(|| {
                    ClusterError::invalid_input(format!(
                        "tf_server_port must be in 1..=65535, not {port}"
                    ))
                })?;
        }
        config.rpc_layer = self.rpc_layer;
        config.address = self.address;
        config.namespace = self.namespace;
        config.require_ready = self.require_ready;
        config.expected = self.expected.unwrap_or_default();
        config.validate()?;
        let snapshot = self.pods.as_ref().map(PodSnapshot::from_json).transpose()?;
        Ok((config, snapshot))
    }
}
