//! Which version of an object a compile read: its `resourceVersion` from the API server, or the object itself from a manifest file.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Which version of an object a fragment saw.
pub(super) enum Version<T> {
    /// From the API server: its `resourceVersion` changes with every write.
    Resource(String),
    /// From a manifest file, which carries no `resourceVersion`: the object itself.
    Content(Box<T>),
}

impl<T> Version<T>
where
    T: k8s_openapi::Metadata<Ty = ObjectMeta> + Clone + PartialEq,
{
    pub(super) fn of(object: &T) -> Self {
        match &object.metadata().resource_version {
            Some(version) => Self::Resource(version.clone()),
            None => Self::Content(Box::new(object.clone())),
        }
    }

    /// Whether an object read as `seen` (`None`: found missing) is as it was: `now` is what
    /// the snapshot holds.
    pub(super) fn unchanged(seen: &Option<Self>, now: Option<&T>) -> bool {
        match (seen, now) {
            (Some(seen), Some(now)) => seen.matches(now),
            (None, None) => true,
            _ => false,
        }
    }

    pub(super) fn matches(&self, object: &T) -> bool {
        match self {
            Self::Resource(version) => {
                object.metadata().resource_version.as_deref() == Some(version.as_str())
            }
            Self::Content(seen) => **seen == *object,
        }
    }
}
