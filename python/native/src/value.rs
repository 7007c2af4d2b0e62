//! JSON values between Rust (`serde_json::Value`) and Python (`dict`, `list`, `str`, `int`,
//! `float`, `bool`, `None`), both ways without text in between.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};
use shardwise_core::json::MAX_NESTING;

/// `value` as Python objects.
pub(crate) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python object as JSON: dicts with `str` keys, lists and tuples, `str`, `int` (within
/// 64 bits), finite `float`, `bool` and `None`, nested at most
/// [`MAX_NESTING`](shardwise_core::json::MAX_NESTING) levels. `what` names it in errors.
pub(crate) fn from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    convert(obj, what, 0)
}

fn convert(obj: &Bound<'_, PyAny>, what: &str, depth: usize) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        return Err(PyValueError::new_err(format!(
            "{what}: the integer {} does not fit in 64 bits",
            shown(obj)
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{what}: {v} is not a JSON number")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    let nested = || {
        if depth >= MAX_NESTING {
            Err(PyValueError::new_err(format!(
                "{what}: lists and dicts nest more than {MAX_NESTING} levels deep"
            )))
        } else {
            Ok(())
        }
    };
    if let Ok(d) = obj.cast::<PyDict>() {
        nested()?;
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!("{what}: a key is not a str: {}", shown(&k)))
            })?;
            map.insert(key.to_str()?.to_owned(), convert(&v, what, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        nested()?;
        return l.iter().map(|v| convert(&v, what, depth + 1)).collect();
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        nested()?;
        return t.iter().map(|v| convert(&v, what, depth + 1)).collect();
    }
    // Mappings and sequences of other types (e.g. a torch state's OrderedDict subclasses are
    // dicts already): ask for their items.
    if let Ok(items) = obj.call_method0("items") {
        nested()?;
        let mut map = Map::new();
        for pair in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            let key = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!("{what}: a key is not a str: {}", shown(&k)))
            })?;
            map.insert(key.to_str()?.to_owned(), convert(&v, what, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    Err(PyTypeError::new_err(format!(
        "{what}: a {} is not JSON (dict, list, str, int, float, bool or None)",
        obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "value".into())
    )))
}

/// At most 80 characters of `obj`'s repr, for an error message.
fn shown(obj: &Bound<'_, PyAny>) -> String {
    let text = obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".into());
    if text.chars().count() > 80 {
        format!("{}...", text.chars().take(77).collect::<String>())
    } else {
        text
    }
}
