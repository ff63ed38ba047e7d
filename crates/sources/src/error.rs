//! Errors of the sources that stop a load as a whole (a single bad file is a [`crate::FileError`] instead).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read manifest directory {dir}")]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch manifest directory {dir}")]
    Watch {
        dir: PathBuf,
        #[source]
        source: notify::Error,
    },
}
