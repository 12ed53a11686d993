//! The one validation error every receiver answers with: a row that parsed
//! but holds a value that cannot be right, named by its row and field. It sits
//! apart so that the hub's row checks, the JSON body and the OTLP serving
//! mapping share it without importing one another.

/// A request that parsed but holds a value that cannot be right.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}
