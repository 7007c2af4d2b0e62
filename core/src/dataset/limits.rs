//! What a pipeline may hold: the byte budget of its transforms' buffers and the weight of an
//! element.

use serde_json::Value;

use super::error::DatasetError;

/// The default of [`Limits::max_buffered_bytes`]: 256 MiB.
pub const DEFAULT_MAX_BUFFERED_BYTES: u64 = 256 << 20;

/// Run-time limits of a [`Pipeline`](super::Pipeline) that no definition can lift.
///
/// Element counts are bounded when a definition is validated
/// ([`MAX_BUFFER_ELEMENTS`](super::MAX_BUFFER_ELEMENTS)); what the buffered elements weigh is
/// only known while the pipeline runs, so it is bounded here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The most bytes (as [`approx_bytes`] weighs them) the `shuffle` and `batch` buffers of
    /// one pipeline hold together. A pipeline that would hold more fails with
    /// [`DatasetError::ResourceExhausted`].
    pub max_buffered_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES }
    }
}

/// The bytes of one node of a JSON value in memory (a `serde_json::Value` is 32 bytes on
/// 64-bit targets, before what its string, array or map owns).
const NODE_BYTES: u64 = 32;

/// An approximation of the memory `value` takes: 32 bytes per node, plus the bytes of every
/// string and object key. Iterative, so any nesting depth is fine; linear in the size of the
/// value, like serializing it.
pub fn approx_bytes(value: &Value) -> u64 {
    let mut total: u64 = 0;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(NODE_BYTES);
        match v {
            Value::String(s) => total = total.saturating_add(len(s.len())),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    total = total.saturating_add(len(key.len())).saturating_add(NODE_BYTES);
                    stack.push(item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    total
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The bytes held by a pipeline's buffers, against its limit.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    used: u64,
    max: u64,
}

impl Budget {
    pub(super) fn new(limits: Limits) -> Self {
        Budget { used: 0, max: limits.max_buffered_bytes }
    }

    /// Takes `bytes` for an element `what` (e.g. `transforms[2].shuffle`) buffers; refuses
    /// them (taking nothing) when the pipeline would hold more than its limit.
    pub(super) fn take(&mut self, bytes: u64, what: &str) -> Result<(), DatasetError> {
        let used = self.used.saturating_add(bytes);
        if used > self.max {
            return Err(DatasetError::ResourceExhausted(format!(
                "{what} would hold more than {} bytes of elements with the other buffers of this \
                 pipeline (the worker's limit): use a smaller buffer or batch, or smaller elements",
                self.max
            )));
        }
        self.used = used;
        Ok(())
    }

    /// Gives back `bytes` a buffer released.
    pub(super) fn give(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }

    #[cfg(test)]
    pub(super) fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn weights() {
        assert_eq!(approx_bytes(&json!(1)), 32);
        assert_eq!(approx_bytes(&json!("abcd")), 36);
        assert_eq!(approx_bytes(&json!([1, 2])), 96);
        assert_eq!(approx_bytes(&json!({"ab": null})), 32 + 2 + 32 + 32);
        let mut deep = json!(0);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(approx_bytes(&deep), 32 * 100_001);
        // Dropping it recursively would overflow the stack: take it apart instead.
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn budget_refuses_and_gives_back() {
        let mut b = Budget::new(Limits { max_buffered_bytes: 100 });
        assert!(b.take(60, "x").is_ok());
        let err = b.take(41, "transforms[0].shuffle").unwrap_err();
        assert_eq!(err.code(), "RESOURCE_EXHAUSTED");
        assert!(err.message().starts_with("transforms[0].shuffle would hold more than 100 bytes"));
        assert_eq!(b.used(), 60);
        b.give(60);
        assert!(b.take(100, "x").is_ok());
        assert_eq!(Limits::default().max_buffered_bytes, 256 << 20);
    }
}
