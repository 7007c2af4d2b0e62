//! Read positions for Python: the fold of what a reader handed out ([`PositionTracker`]), the
//! merge of several readers' positions, and a dataset definition's fingerprint. The rules are
//! the core's (`shardwise_core::position`); this module only converts.
//!
//! Positions cross as JSON text (the Python layer's `json.dumps` and `json.loads`, both in C):
//! a position may hold 100,000 entries, which text carries at a fraction of the cost of one
//! Python object each.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::position::{self, MAX_POSITION_ENTRIES, OriginRun, ReadPosition};

use crate::value::from_py;

/// A position from its JSON text, checked: its members and their types, and at most
/// `MAX_POSITION_ENTRIES` `done`, `partial` and `more` entries.
pub(crate) fn parse_position(text: &str, what: &str) -> PyResult<ReadPosition> {
    let position: ReadPosition = shardwise_core::json::from_str_strict(text)
        .map_err(|e| PyValueError::new_err(format!("{what} is not a read position: {e}")))?;
    let more: usize = position.partial.iter().map(|p| p.more.len()).sum();
    let entries = position.done.len().saturating_add(position.partial.len()).saturating_add(more);
    if entries > MAX_POSITION_ENTRIES {
        return Err(PyValueError::new_err(format!(
            "{what} has {entries} entries (done, partial and their ranges); at most \
             {MAX_POSITION_ENTRIES} are accepted"
        )));
    }
    Ok(position)
}

/// A position's JSON text.
pub(crate) fn position_text(position: &ReadPosition) -> PyResult<String> {
    serde_json::to_string(position)
        .map_err(|e| PyValueError::new_err(format!("a position does not encode: {e}")))
}

/// The fold of the elements a reader handed out into a read position (the core's
/// `PositionTracker`); positions in and out as JSON text.
#[pyclass(module = "shardwise._native", skip_from_py_object)]
#[derive(Debug, Clone, Default)]
pub(crate) struct PositionTracker(position::PositionTracker);

#[pymethods]
impl PositionTracker {
    #[new]
    fn new() -> Self {
        PositionTracker::default()
    }

    /// An independent copy.
    fn copy(&self) -> Self {
        self.clone()
    }

    /// Adds what the position `text` consumed.
    fn load(&mut self, py: Python<'_>, text: &str) -> PyResult<()> {
        let position = parse_position(text, "the position")?;
        py.detach(|| self.0.absorb(&position));
        Ok(())
    }

    /// The first `taken` elements of the origin run `run` (a dict: `split`, `offset`,
    /// `count`, `end`) were handed out.
    fn consumed(&mut self, run: &Bound<'_, PyAny>, taken: i128) -> PyResult<()> {
        let run: OriginRun = serde_json::from_value(from_py(run, "the run")?)
            .map_err(|e| PyValueError::new_err(format!("not an origin run: {e}")))?;
        let taken = u64::try_from(taken).map_err(|_| {
            PyValueError::new_err(format!("taken must be in 0..=2^64-1, got {taken}"))
        })?;
        self.0.consumed(&run, taken);
        Ok(())
    }

    /// The JSON text of the position of what was consumed, naming `dataset_id` and
    /// `repetition`.
    fn position(&self, dataset_id: &str, repetition: u64) -> PyResult<String> {
        position_text(&self.0.position(dataset_id, repetition))
    }
}

/// Checks the origin runs of a worker's answer (a list of run dicts): `ValueError` naming
/// what is wrong.
#[pyfunction]
pub(crate) fn check_runs(runs: &Bound<'_, PyAny>) -> PyResult<()> {
    serde_json::from_value::<Vec<OriginRun>>(from_py(runs, "the origin runs")?)
        .map(drop)
        .map_err(|e| PyValueError::new_err(format!("the origin runs: {e}")))
}

/// The JSON text of one position holding what each of `positions` (JSON texts, of one
/// dataset and repetition) consumed. `ValueError` when none is given, when they are of
/// different reads, or when one is malformed.
#[pyfunction]
pub(crate) fn merge_positions(py: Python<'_>, positions: Vec<String>) -> PyResult<String> {
    let parsed = positions
        .iter()
        .enumerate()
        .map(|(i, p)| parse_position(p, &format!("position {i}")))
        .collect::<PyResult<Vec<_>>>()?;
    let merged = py
        .detach(|| position::merge_positions(&parsed))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    position_text(&merged)
}

/// The stable id of a dataset definition (a dict), as the Rust client registers it: `fp-`
/// and 32 hex digits of its canonical JSON; `None` for a definition the core cannot read
/// (registered without an id, the dispatcher answers why).
#[pyfunction]
pub(crate) fn fingerprint(definition: &Bound<'_, PyAny>) -> Option<String> {
    let def = definition_of(definition).ok()?;
    Some(shardwise_client::fingerprint(&def))
}

/// A dataset definition from Python, checked by the core.
pub(crate) fn definition_of(definition: &Bound<'_, PyAny>) -> PyResult<DatasetDef> {
    let value = from_py(definition, "the dataset")?;
    DatasetDef::from_json(&value)
        .map_err(|e| PyValueError::new_err(format!("the dataset: {}", e.message())))
}
