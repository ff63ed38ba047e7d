//! A slot in which the data plane keeps its own runtime state on a published object, so a request reaches that state without a lookup.

use std::any::Any;
use std::fmt;
use std::sync::OnceLock;

/// Holds one value of a type the routing crate does not know (the proxy's connection pools,
/// health, retry budget and filters), set once, typically when the object is published. A
/// clone of the owning object starts with an empty slot, and the slot plays no part in the
/// owner's equality: it is derived from the owner, or learnt at run time.
#[derive(Default)]
pub struct Attached(OnceLock<Box<dyn Any + Send + Sync>>);

impl Clone for Attached {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Attached {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Attached {}

impl Attached {
    /// The attached value, attaching `attach()` first when the slot is empty. `None` only when
    /// a value of another type is already attached.
    pub fn get_or_attach<T: Any + Send + Sync>(&self, attach: impl FnOnce() -> T) -> Option<&T> {
        self.0
            .get_or_init(|| Box::new(attach()))
            .downcast_ref::<T>()
    }

    /// The attached value, if one of type `T` is attached.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get()?.downcast_ref::<T>()
    }
}

impl fmt::Debug for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Attached(..)"
        } else {
            "Attached(empty)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attachment_stays() {
        let slot = Attached::default();
        assert_eq!(slot.get::<u32>(), None);
        assert_eq!(slot.get_or_attach(|| 7u32), Some(&7));
        assert_eq!(slot.get_or_attach(|| 9u32), Some(&7), "attached once");
        assert_eq!(slot.get_or_attach(|| "other type"), None);
    }
}
