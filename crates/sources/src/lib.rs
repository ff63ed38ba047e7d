//! Sources of snapshots: today the manifest directory, the embedded default.

mod error;
mod manifest_dir;

pub use error::SourceError;
pub use manifest_dir::{watch_dir, DirChanges, FileError, Load, ManifestDir};
