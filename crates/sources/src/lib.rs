//! Sources of snapshots: the manifest directory (the embedded default) and the Kubernetes API.

mod error;
pub mod kubernetes;
mod manifest_dir;

pub use error::SourceError;
pub use manifest_dir::{watch_dir, DirChanges, FileError, Load, ManifestDir};
