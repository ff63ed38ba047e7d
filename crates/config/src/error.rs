//! Errors of manifest parsing: which document (and `List` item) failed, and why.

/// A document of a manifest that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", location(*.document, *.item))]
pub struct DocumentError {
    /// 1-based document number, counting non-empty documents; `None` when the whole text failed.
    pub document: Option<usize>,
    /// 1-based item number inside a `kind: List` document.
    pub item: Option<usize>,
    pub reason: String,
}

impl DocumentError {
    pub(crate) fn syntax(reason: String) -> Self {
        Self {
            document: None,
            item: None,
            reason,
        }
    }

    pub(crate) fn document(document: usize, item: Option<usize>, reason: String) -> Self {
        Self {
            document: Some(document),
            item,
            reason,
        }
    }
}

fn location(document: Option<usize>, item: Option<usize>) -> String {
    match (document, item) {
        (Some(document), Some(item)) => format!("document {document}, item {item}: "),
        (Some(document), None) => format!("document {document}: "),
        _ => String::new(),
    }
}
