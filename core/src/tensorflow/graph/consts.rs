//! Reading `Const` nodes: the scalars, strings and int vectors a graph's sources are built of.

use crate::tensorflow::proto::tensorflow::{AttrValue, DataType, NodeDef, TensorProto, attr_value};

use super::walk::unsupported;
use super::{GraphError, MAX_CONST_ELEMENTS};

/// The strings of a `Const` string scalar or vector input of `user` (`MatchingFiles`'
/// patterns), and how many times more the last one stands at the end: a vector with fewer
/// values than its shape repeats its last value (none: empty strings), and the repeats are
/// counted, not copied (a 1 MB value in a vector of 65,536 is not 64 GB).
pub(super) fn const_strings(
    user: &NodeDef,
    node: &NodeDef,
) -> Result<(Vec<String>, usize), GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: &str| unsupported(user, format!("its input `{}` {what}", node.name));
    if tensor.dtype != DataType::DtString as i32 {
        return Err(bad("is not a string tensor"));
    }
    let shape = tensor.tensor_shape.clone().unwrap_or_default();
    let n = match shape.dim[..] {
        _ if shape.unknown_rank => return Err(bad("has an unknown shape")),
        [] => 1,
        [ref d] => usize::try_from(d.size).map_err(|_| bad("has an unknown size"))?,
        _ => return Err(bad("is neither a scalar nor a vector")),
    };
    if n as u64 > MAX_CONST_ELEMENTS || tensor.string_val.len() > n {
        return Err(bad("has more patterns than the dispatcher reads or its shape holds"));
    }
    let mut values: Vec<String> = tensor
        .string_val
        .iter()
        .map(|b| String::from_utf8(b.clone()).map_err(|_| bad("is not UTF-8")))
        .collect::<Result<_, _>>()?;
    // Fewer values than elements repeat the last one (none: empty strings).
    if values.is_empty() && n > 0 {
        values.push(String::new());
    }
    let repeats = n - values.len();
    Ok((values, repeats))
}

/// The tensor of a `Const` node (its `value` attribute).
pub(super) fn const_tensor<'g>(
    user: &NodeDef,
    node: &'g NodeDef,
) -> Result<&'g TensorProto, GraphError> {
    if node.op != "Const" {
        return Err(unsupported(
            user,
            format!("its input `{}` is a `{}`, not a constant", node.name, node.op),
        ));
    }
    match node.attr.get("value") {
        Some(AttrValue { value: Some(attr_value::Value::Tensor(t)) }) => Ok(t),
        _ => Err(unsupported(user, format!("its input `{}` has no tensor value", node.name))),
    }
}

/// The integer scalar of a `Const` input of `user`.
pub(super) fn const_scalar(user: &NodeDef, node: &NodeDef) -> Result<i64, GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: String| unsupported(user, format!("its input `{}` {what}", node.name));
    if tensor.tensor_shape.as_ref().is_some_and(|s| s.unknown_rank || !s.dim.is_empty()) {
        return Err(bad("is not a scalar".into()));
    }
    match const_ints(tensor).map_err(|e| bad(e.to_string()))?[..] {
        [value] => Ok(value),
        _ => Err(bad("is not a scalar".into())),
    }
}

/// The number of slices of a `Const` component of `user` (its first dimension).
pub(super) fn slice_count(user: &NodeDef, node: &NodeDef) -> Result<i64, GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: &str| unsupported(user, format!("its component `{}` {what}", node.name));
    match &tensor.tensor_shape {
        Some(shape) if !shape.unknown_rank => match shape.dim.first() {
            Some(dim) if dim.size >= 0 => Ok(dim.size),
            Some(_) => Err(bad("has an unknown first dimension")),
            None => Err(bad("is a scalar")),
        },
        _ => Err(bad("has an unknown shape")),
    }
}

/// Why a `Const` tensor is not a usable integer scalar or vector (each text completes "its
/// input `NAME` ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConstError {
    /// Neither int64 nor int32.
    #[error("has dtype {0}, not int64 or int32")]
    Dtype(i32),
    /// Of rank 2 or more, or of unknown rank.
    #[error("is neither a scalar nor a vector")]
    Rank,
    /// A dimension of unknown size.
    #[error("has an unknown size")]
    UnknownSize,
    /// More elements than the dispatcher reads.
    #[error("has more than {MAX_CONST_ELEMENTS} elements")]
    TooLarge,
    /// `tensor_content` does not hold exactly the shape's elements.
    #[error("has content of the wrong length for its shape")]
    ContentLength,
    /// More typed values than the shape holds.
    #[error("has more values than its shape holds")]
    TooManyValues,
}

/// The values of an int64 or int32 tensor of rank 0 or 1, as TensorFlow reads them: from
/// `tensor_content` (little-endian) when set, else from the typed field, where fewer values
/// than elements repeat the last one (none: zeros).
pub fn const_ints(tensor: &TensorProto) -> Result<Vec<i64>, ConstError> {
    let width = match DataType::try_from(tensor.dtype) {
        Ok(DataType::DtInt64) => 8,
        Ok(DataType::DtInt32) => 4,
        _ => return Err(ConstError::Dtype(tensor.dtype)),
    };
    let shape = tensor.tensor_shape.clone().unwrap_or_default();
    if shape.unknown_rank || shape.dim.len() > 1 {
        return Err(ConstError::Rank);
    }
    let n = match shape.dim.first() {
        None => 1,
        Some(d) => u64::try_from(d.size).map_err(|_| ConstError::UnknownSize)?,
    };
    if n > MAX_CONST_ELEMENTS {
        return Err(ConstError::TooLarge);
    }
    let n = n as usize;
    if !tensor.tensor_content.is_empty() {
        if tensor.tensor_content.len() != n * width {
            return Err(ConstError::ContentLength);
        }
        return Ok(tensor
            .tensor_content
            .chunks_exact(width)
            .map(|b| match *b {
                [a, b, c, d] => i64::from(i32::from_le_bytes([a, b, c, d])),
                _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
            })
            .collect());
    }
    let values: Vec<i64> = if width == 8 {
        tensor.int64_val.clone()
    } else {
        tensor.int_val.iter().map(|&v| i64::from(v)).collect()
    };
    if values.len() > n {
        return Err(ConstError::TooManyValues);
    }
    let last = values.last().copied().unwrap_or(0);
    Ok(values.iter().copied().chain(std::iter::repeat_n(last, n - values.len())).collect())
}
