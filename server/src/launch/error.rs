//! Why a launch failed: found out before the clone (`resolve.rs`), or
//! reported by the child for the step it was at (`child.rs`).

use std::io;

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such program on the child's PATH (or at the given path).
    #[error("program {0:?} not found")]
    NotFound(String),
    /// The program exists but cannot be executed.
    #[error("program {0:?} is not executable: {1}")]
    NotExecutable(String, io::Error),
    /// A step before or at exec failed.
    #[error("could not start {program:?}: {step}: {error}")]
    Failed {
        /// The program.
        program: String,
        /// What the child was doing.
        step: &'static str,
        /// The error of that step.
        error: io::Error,
    },
}
