//! Why a service's AsyncAPI document cannot be made.

/// A document that cannot be made: every problem found, each a sentence
/// naming the part, handler or type at fault and what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AsyncApiError {
    /// Something the document needs is not described.
    #[error("the AsyncAPI document of service `{service}` cannot be made: {}", problems.join("; "))]
    Incomplete {
        /// The service.
        service: String,
        /// Each problem, one sentence each.
        problems: Vec<String>,
    },
}

impl AsyncApiError {
    /// Each problem, one sentence each.
    pub fn problems(&self) -> &[String] {
        match self {
            Self::Incomplete { problems, .. } => problems,
        }
    }
}
