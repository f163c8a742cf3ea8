//! The error every conversion in this crate reports: which field, and what is wrong with it.

/// A field that does not make sense. `field` is a path such as
/// `spec.containers[0].resources.requests.cpu`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Prefixes the field path (`containers[0]` → `spec.containers[0]`).
    pub fn within(mut self, prefix: &str) -> FieldError {
        self.field = if self.field.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}
