//! The manifest-directory source: reads Kubernetes YAML and JSON files from one directory and watches it for changes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sluice_config::{
    parse_manifest, Diagnostic, Document, DocumentError, Format, KubeObject, ObjectKey, ObjectRef,
    Severity, Snapshot,
};
use tokio::sync::mpsc;

use crate::error::SourceError;

/// How long to wait for more file events after the first before reloading: editors and
/// `kubectl`-style tools often write a file in several steps.
const SETTLE_TIME: Duration = Duration::from_millis(50);

/// A manifest file that could not be read or parsed; its previous good content stays in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    pub file: PathBuf,
    /// `None` when the file could not be read at all.
    pub error: Option<DocumentError>,
    pub reason: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            Some(error) => write!(f, "{}: {error}", self.file.display()),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

/// The result of reading the directory once.
#[derive(Clone, Debug, Default)]
pub struct Load {
    /// Every good file's objects; a bad file contributes its last good content, if any.
    pub snapshot: Snapshot,
    /// Files that failed this time.
    pub errors: Vec<FileError>,
    /// Objects defined in more than one file (the later file, by name, wins).
    pub duplicates: Vec<Diagnostic>,
    /// How many files were read.
    pub files: usize,
}

impl Load {
    /// File errors and duplicate objects as diagnostics; `consequence` is appended to each
    /// file error's message (e.g. that the last good content stays in use).
    pub fn diagnostics(&self, consequence: &str) -> Vec<Diagnostic> {
        let errors = self.errors.iter().map(|error| Diagnostic {
            severity: Severity::Error,
            object: file_object(&error.file),
            field: error.error.as_ref().map(location).unwrap_or_default(),
            message: format!("{}{consequence}", error.reason),
        });
        errors.chain(self.duplicates.iter().cloned()).collect()
    }
}

fn file_object(path: &Path) -> ObjectRef {
    ObjectRef::new("File", None, &path.display().to_string())
}

fn location(error: &DocumentError) -> String {
    match (error.document, error.item) {
        (Some(document), Some(item)) => format!("document {document}, item {item}"),
        (Some(document), None) => format!("document {document}"),
        _ => String::new(),
    }
}

/// One file's last good parse, and the text it came from.
struct ParsedFile {
    text: String,
    objects: Vec<KubeObject>,
}

/// The manifest directory with the last good parse of every file, so a broken edit never
/// removes what the file served before.
pub struct ManifestDir {
    dir: PathBuf,
    files: BTreeMap<PathBuf, ParsedFile>,
}

impl ManifestDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            files: BTreeMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads every `*.yaml`, `*.yml` and `*.json` file directly in the directory (not in
    /// subdirectories; hidden files are skipped). Unchanged files are not parsed again.
    pub fn load(&mut self) -> Result<Load, SourceError> {
        let paths = manifest_paths(&self.dir)?;
        self.files.retain(|path, _| paths.contains(path));
        let mut errors = Vec::new();
        for path in &paths {
            if let Err(error) = self.refresh(path) {
                tracing::warn!(%error, "manifest file rejected; its last good content stays in use");
                errors.push(error);
            }
        }
        let mut snapshot = Snapshot::default();
        let mut origin: BTreeMap<(&str, ObjectKey), &Path> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for (path, file) in &self.files {
            for object in &file.objects {
                let key = ObjectKey::of(object.metadata());
                if let Some(first) = origin.insert((object.kind(), key.clone()), path) {
                    duplicates.push(Diagnostic {
                        severity: Severity::Warning,
                        object: file_object(path),
                        field: String::new(),
                        message: format!(
                            "{} {}/{} is also defined in {}; this later file wins",
                            object.kind(),
                            key.namespace,
                            key.name,
                            first.display()
                        ),
                    });
                }
                snapshot.insert(object.clone());
            }
        }
        Ok(Load {
            snapshot,
            errors,
            duplicates,
            files: paths.len(),
        })
    }

    /// Re-parses one file if its text changed.
    fn refresh(&mut self, path: &Path) -> Result<(), FileError> {
        let text = std::fs::read_to_string(path).map_err(|error| FileError {
            file: path.to_owned(),
            error: None,
            reason: format!("cannot read: {error}"),
        })?;
        if self.files.get(path).is_some_and(|file| file.text == text) {
            return Ok(());
        }
        let objects = parse_file(path, &text)?;
        self.files
            .insert(path.to_owned(), ParsedFile { text, objects });
        Ok(())
    }
}

/// Parses one file's text; logs each object of a kind sluice does not read.
fn parse_file(path: &Path, text: &str) -> Result<Vec<KubeObject>, FileError> {
    let format = path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(Format::from_extension)
        .unwrap_or(Format::Yaml);
    let documents = parse_manifest(text, format).map_err(|mut errors| {
        let error = errors.remove(0);
        FileError {
            file: path.to_owned(),
            reason: error.reason.clone(),
            error: Some(error),
        }
    })?;
    let mut objects = Vec::new();
    for document in documents {
        match document {
            Document::Object(mut object) => {
                // A file's content is its version: a resourceVersion copied from a cluster
                // would not change when the file is edited, and the compiler trusts it.
                object.metadata_mut().resource_version = None;
                objects.push(object);
            }
            Document::Skipped {
                api_version,
                kind,
                name,
            } => {
                tracing::info!(file = %path.display(), %api_version, %kind, %name, "skipping a kind sluice does not read");
            }
        }
    }
    Ok(objects)
}

/// The manifest files of a directory, sorted.
fn manifest_paths(dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let read_dir = |source| SourceError::ReadDir {
        dir: dir.to_owned(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir)? {
        let path = entry.map_err(read_dir)?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        let manifest = path
            .extension()
            .and_then(|e| e.to_str())
            .and_then(Format::from_extension)
            .is_some();
        if manifest && !hidden && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Change notifications for a directory. Keep it alive as long as changes are wanted.
pub struct DirChanges {
    _watcher: RecommendedWatcher,
    events: mpsc::UnboundedReceiver<()>,
}

impl DirChanges {
    /// Waits for the next change, then for the directory to settle. Returns `false` once the
    /// watcher has stopped.
    pub async fn changed(&mut self) -> bool {
        if self.events.recv().await.is_none() {
            return false;
        }
        tokio::time::sleep(SETTLE_TIME).await;
        while self.events.try_recv().is_ok() {}
        true
    }
}

/// Watches `dir` (not recursively) for any change to its entries.
pub fn watch_dir(dir: &Path) -> Result<DirChanges, SourceError> {
    let (sender, events) = mpsc::unbounded_channel();
    let watch_error = |source| SourceError::Watch {
        dir: dir.to_owned(),
        source,
    };
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if event.kind.is_access() => {}
            Ok(_) => {
                let _ = sender.send(());
            }
            Err(error) => tracing::warn!(%error, "manifest directory watch error"),
        })
        .map_err(watch_error)?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(watch_error)?;
    Ok(DirChanges {
        _watcher: watcher,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str =
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n";

    #[test]
    fn a_broken_edit_keeps_the_last_good_content_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("web.yaml");
        std::fs::write(&file, SERVICE).unwrap();
        let mut source = ManifestDir::new(dir.path());
        assert_eq!(source.load().unwrap().snapshot.services.len(), 1);

        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Service\nmetadata: {name: web\n",
        )
        .unwrap();
        let load = source.load().unwrap();
        assert_eq!(
            load.snapshot.services.len(),
            1,
            "last good content must stay"
        );
        assert_eq!(load.errors.len(), 1);
        assert!(
            load.errors[0].to_string().contains("web.yaml"),
            "{}",
            load.errors[0]
        );
    }

    #[test]
    fn a_resource_version_copied_into_a_file_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let copied = SERVICE.replace("name: web", "name: web\n  resourceVersion: \"42\"");
        assert!(
            copied.contains("resourceVersion"),
            "the fixture carries one"
        );
        std::fs::write(dir.path().join("web.yaml"), copied).unwrap();
        let load = ManifestDir::new(dir.path()).load().unwrap();
        let service = &load.snapshot.services[&ObjectKey::new("default", "web")];
        assert_eq!(service.metadata.resource_version, None);
    }

    #[test]
    fn removing_a_file_removes_its_objects() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("web.yml");
        std::fs::write(&file, SERVICE).unwrap();
        let mut source = ManifestDir::new(dir.path());
        assert_eq!(source.load().unwrap().snapshot.services.len(), 1);
        std::fs::remove_file(&file).unwrap();
        assert!(source.load().unwrap().snapshot.services.is_empty());
    }

    #[test]
    fn an_object_in_two_files_is_a_warning_and_the_later_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), SERVICE).unwrap();
        std::fs::write(
            dir.path().join("b.yaml"),
            SERVICE.replace("port: 80", "port: 81"),
        )
        .unwrap();
        let load = ManifestDir::new(dir.path()).load().unwrap();
        let service = &load.snapshot.services[&ObjectKey::new("default", "web")];
        assert_eq!(
            service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
            81
        );
        let diagnostics = load.diagnostics("");
        assert_eq!(diagnostics.len(), 1);
        assert!(diagnostics[0].object.as_str().ends_with("b.yaml"));
        assert!(
            diagnostics[0].message.contains("a.yaml"),
            "{}",
            diagnostics[0]
        );
    }

    #[test]
    fn file_errors_become_error_diagnostics_naming_file_and_document() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bad.yaml"),
            format!("{SERVICE}---\napiVersion: v1\nkind: Service\nmetadata: {{}}\n"),
        )
        .unwrap();
        let diagnostics = ManifestDir::new(dir.path())
            .load()
            .unwrap()
            .diagnostics("; kept");
        assert_eq!(diagnostics[0].severity, Severity::Error);
        assert!(diagnostics[0].object.as_str().ends_with("bad.yaml"));
        assert_eq!(diagnostics[0].field, "document 2");
        assert!(diagnostics[0].message.ends_with("; kept"));
    }

    #[test]
    fn skips_hidden_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), SERVICE).unwrap();
        std::fs::write(dir.path().join("notes.txt"), SERVICE).unwrap();
        let load = ManifestDir::new(dir.path()).load().unwrap();
        assert_eq!(load.files, 0);
        assert!(load.snapshot.services.is_empty());
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let error = ManifestDir::new("/nonexistent/sluice-manifests")
            .load()
            .map(|_| ())
            .unwrap_err();
        assert!(error.to_string().contains("/nonexistent/sluice-manifests"));
    }

    #[tokio::test]
    async fn reports_a_change_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut changes = watch_dir(dir.path()).unwrap();
        std::fs::write(dir.path().join("web.yaml"), SERVICE).unwrap();
        let changed = tokio::time::timeout(Duration::from_secs(5), changes.changed()).await;
        assert_eq!(changed.ok(), Some(true));
    }
}
