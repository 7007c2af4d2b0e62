//! Datasets: registering (declarative and TensorFlow), compression decisions, deletion.

use serde_json::Value;

use crate::dispatch::error::DispatchError;
use crate::dispatch::protocol::DeleteDataset;
use crate::dispatch::state::{Update, footprint_declarative, footprint_tf};
use crate::dispatch::tensorflow::{
    COMPRESSION_SNAPPY, CompressionDecision, DisableCompression, RegisterTfDataset,
};
use crate::dispatch::wire::{DatasetDeleted, RegisterDataset};
use crate::echo::echo;

use super::{Dispatcher, not_found_dataset, valid_id};

impl Dispatcher {
    /// Get-or-register a dataset. With an explicit id that exists, the definitions and
    /// metadata must match. Without an id, a dataset equal to a registered one (definition
    /// and metadata) gets that one's id. A new dataset must fit in `max_dataset_bytes`.
    pub(super) fn register_dataset(
        &mut self,
        req: &RegisterDataset,
    ) -> Result<String, DispatchError> {
        // Bounds no definition may exceed (shuffle buffers, batch sizes): refused here rather
        // than failing every task of the dataset on its workers.
        req.dataset
            .validate()
            .map_err(|e| DispatchError::InvalidArgument(e.message().to_owned()))?;
        if let crate::dataset::SourceDef::Files(f) = &req.dataset.source
            && f.split == crate::dataset::FileSplit::Rows
            && f.rows.is_none()
        {
            return Err(DispatchError::FailedPrecondition(
                "a parquet source split by rows needs the row count of every file: the \
                 dispatcher reads them from the files' footers when it has a --data-root \
                 holding them (or give them as \"rows\")"
                    .to_owned(),
            ));
        }
        let metadata = req.metadata.clone().unwrap_or(Value::Null);
        if crate::json::nested_deeper_than(&metadata, crate::json::MAX_NESTING) {
            // Journaled inside a record, deeper metadata could not be replayed.
            return Err(DispatchError::InvalidArgument(format!(
                "metadata nests arrays and objects more than {} levels deep",
                crate::json::MAX_NESTING
            )));
        }
        if let Some(id) = &req.dataset_id {
            if !valid_id(id) {
                return Err(DispatchError::InvalidArgument(format!(
                    "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                    echo(id)
                )));
            }
            if let Some(existing) = self.state.datasets.get(id) {
                if existing.spec == req.dataset && existing.metadata == metadata {
                    return Ok(id.clone());
                }
                return Err(DispatchError::InvalidArgument(format!(
                    "Datasets with the same ID should have the same structure, got diff for \
                     dataset ID {id}: the {} differs. To fix this error, make sure you're \
                     registering the same dataset with the same ID.",
                    if existing.spec.is_tensorflow() {
                        "kind (a TensorFlow dataset has this id)"
                    } else if existing.spec == req.dataset {
                        "metadata"
                    } else {
                        "definition"
                    }
                )));
            }
        }
        let (fingerprint, bytes) = footprint_declarative(&req.dataset, &metadata);
        if req.dataset_id.is_none()
            && let Some(id) = self.state.datasets_by_fingerprint.get(&fingerprint).and_then(|ids| {
                ids.iter().find(|id| {
                    self.state
                        .datasets
                        .get(*id)
                        .is_some_and(|d| d.spec == req.dataset && d.metadata == metadata)
                })
            })
        {
            // The same dataset again (TensorFlow's GetOrRegisterDataset): nothing changes.
            return Ok(id.clone());
        }
        self.check_dataset_bytes(bytes)?;
        let id = req.dataset_id.clone().unwrap_or_else(|| self.state.peek_dataset_id());
        self.commit(Update::RegisterDataset {
            dataset_id: id.clone(),
            def: req.dataset.clone(),
            metadata,
        });
        Ok(id)
    }

    /// A new dataset of `bytes` must fit in `max_dataset_bytes`.
    fn check_dataset_bytes(&self, bytes: u64) -> Result<(), DispatchError> {
        let max = self.config.max_dataset_bytes;
        let total = self.state.dataset_bytes.saturating_add(bytes);
        if total > max {
            return Err(DispatchError::ResourceExhausted(format!(
                "the dispatcher's datasets are full: they hold {} bytes (definitions and \
                 metadata encoded as JSON, TensorFlow graphs and element specs) and this \
                 dataset has {bytes} more, past max_dataset_bytes = {max}. Raise it (shardwise \
                 dispatcher --max-dataset-bytes), or register smaller datasets (a `files` \
                 source rather than a long `list`)",
                self.state.dataset_bytes
            )));
        }
        Ok(())
    }

    /// Get-or-register a TensorFlow dataset. An explicit id that exists is the answer when
    /// the metadata matches (TensorFlow's get-or-register compares the metadata, not the
    /// graph, which differs between clients of the same pipeline). Without an id, the dataset
    /// of the same fingerprint (what the workers run, by structure) is the answer; a new one is
    /// named `tf-<fingerprint>`, or gets the next decimal id when an explicit registration
    /// already holds that name: a derived id never names another graph's dataset. A new dataset
    /// must fit in `max_dataset_bytes` (its graph and element spec).
    pub(super) fn register_tf_dataset(
        &mut self,
        req: RegisterTfDataset,
    ) -> Result<String, DispatchError> {
        let new = req.dataset;
        if let Some(id) = &req.dataset_id {
            if !valid_id(id) {
                return Err(DispatchError::InvalidArgument(format!(
                    "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                    echo(id)
                )));
            }
            if let Some(existing) = self.state.datasets.get(id) {
                let what = match existing.spec.tensorflow() {
                    None => "kind (a declarative dataset has this id)",
                    Some(t) if t.element_spec != new.element_spec => "element_spec",
                    Some(t) if t.compression != new.compression => "compression",
                    Some(t) if t.cardinality != new.cardinality => "cardinality",
                    Some(_) => return Ok(id.clone()),
                };
                return Err(DispatchError::InvalidArgument(format!(
                    "Datasets with the same ID should have the same structure, got diff for \
                     dataset ID {id}: the {what} differs. To fix this error, make sure you're \
                     registering the same dataset with the same ID."
                )));
            }
        }
        let (index_key, bytes) = footprint_tf(&new);
        if req.dataset_id.is_none()
            && let Some(id) = self.state.datasets_by_fingerprint.get(&index_key).and_then(|ids| {
                ids.iter().find(|id| {
                    self.state
                        .datasets
                        .get(*id)
                        .and_then(|d| d.spec.tensorflow())
                        .is_some_and(|t| t.same_dataset(&new))
                })
            })
        {
            return Ok(id.clone());
        }
        self.check_dataset_bytes(bytes)?;
        let id = match (req.dataset_id, &new.fingerprint) {
            (Some(id), _) => id,
            (None, Some(fingerprint)) => {
                let derived = format!("tf-{fingerprint}");
                if valid_id(&derived) && !self.state.datasets.contains_key(&derived) {
                    derived
                } else {
                    self.state.peek_dataset_id()
                }
            }
            (None, None) => self.state.peek_dataset_id(),
        };
        self.commit(Update::RegisterTfDataset { dataset_id: id.clone(), dataset: Box::new(new) });
        Ok(id)
    }

    /// TensorFlow's `DisableCompressionAtRuntime`: the first proposal for a SNAPPY dataset
    /// decides (journaled); later ones get that decision. Other datasets have no compression
    /// to disable (`None`).
    pub(super) fn disable_compression(
        &mut self,
        req: &DisableCompression,
    ) -> Result<CompressionDecision, DispatchError> {
        let ds = self
            .state
            .datasets
            .get(&req.dataset_id)
            .ok_or_else(|| not_found_dataset(&req.dataset_id))?;
        if ds.spec.tensorflow().is_none_or(|t| t.compression != COMPRESSION_SNAPPY) {
            return Ok(CompressionDecision { compression_disabled: None });
        }
        if let Some(decided) = ds.compression_disabled {
            return Ok(CompressionDecision { compression_disabled: Some(decided) });
        }
        self.commit(Update::DecideCompression {
            dataset_id: req.dataset_id.clone(),
            disabled: req.disable,
        });
        Ok(CompressionDecision { compression_disabled: Some(req.disable) })
    }

    /// Deletes a dataset that no job with iterations uses (jobs without iterations that name
    /// it, tombstones, go with it): its bytes leave the `max_dataset_bytes` budget and its
    /// definition the deduplication index. Journaled.
    pub(super) fn delete_dataset(
        &mut self,
        req: &DeleteDataset,
    ) -> Result<DatasetDeleted, DispatchError> {
        let id = req.dataset_id.as_str();
        if !valid_id(id) {
            return Err(DispatchError::InvalidArgument(format!(
                "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                echo(id)
            )));
        }
        let ds = self.state.datasets.get(id).ok_or_else(|| not_found_dataset(id))?;
        if let Some(job_id) = self.state.dataset_in_use(id) {
            return Err(DispatchError::FailedPrecondition(format!(
                "dataset {id} is used by job {job_id}, which has iterations: delete it once \
                 every job reading it is garbage-collected (job_gc_timeout after its last \
                 client leaves)"
            )));
        }
        let (_, freed_bytes) = crate::dispatch::state::footprint(&ds.spec, &ds.metadata);
        self.commit(Update::DeleteDataset { dataset_id: id.to_owned() });
        Ok(DatasetDeleted {
            dataset_id: id.to_owned(),
            freed_bytes,
            incarnation: self.incarnation.clone(),
        })
    }
}
