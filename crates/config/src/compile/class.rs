//! Ingress class filtering: which Ingresses this sluice serves.

use k8s_openapi::api::networking::v1::Ingress;

use crate::annotations::{is_default_class, IngressAnnotations, INGRESS_CLASS};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// The `spec.controller` value of IngressClasses that sluice implements.
pub const CONTROLLER: &str = "sluice.dev/ingress-controller";

/// Decides whether an Ingress belongs to the configured class.
pub(super) struct ClassFilter<'a> {
    class: &'a str,
    serve_classless: bool,
}

impl<'a> ClassFilter<'a> {
    pub(super) fn new(
        snapshot: &Snapshot,
        class: &'a str,
        watch_without_class: bool,
        diagnostics: &mut Diagnostics,
    ) -> Self {
        let mut has_default = false;
        for (name, ingress_class) in &snapshot.ingress_classes {
            let controller = ingress_class
                .spec
                .as_ref()
                .and_then(|s| s.controller.as_deref());
            let ours = controller == Some(CONTROLLER);
            has_default |= ours && is_default_class(ingress_class.metadata.annotations.as_ref());
            if name == class && !ours {
                diagnostics.warning(
                    &ObjectRef::new("IngressClass", None, name),
                    "spec.controller",
                    format!(
                        "IngressClass {name} names controller {:?}, not {CONTROLLER:?}; sluice serves class {name} anyway because it is configured to",
                        controller.unwrap_or_default()
                    ),
                );
            }
        }
        Self {
            class,
            serve_classless: watch_without_class || has_default,
        }
    }

    pub(super) fn serves(
        &self,
        ingress: &Ingress,
        annotations: &IngressAnnotations,
        key: &ObjectKey,
        diagnostics: &mut Diagnostics,
    ) -> bool {
        let spec_class = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref());
        let legacy_class = annotations.legacy_class.as_deref();
        if let (Some(spec), Some(legacy)) = (spec_class, legacy_class) {
            if spec != legacy {
                diagnostics.warning(
                    &ObjectRef::ingress(key),
                    format!("metadata.annotations[{INGRESS_CLASS}]"),
                    format!("ignored: spec.ingressClassName {spec:?} takes precedence over the legacy annotation {legacy:?}"),
                );
            }
        }
        match spec_class.or(legacy_class) {
            Some(class) if class == self.class => true,
            Some(class) => {
                let field = if spec_class.is_some() {
                    "spec.ingressClassName".to_owned()
                } else {
                    format!("metadata.annotations[{INGRESS_CLASS}]")
                };
                diagnostics.info(
                    &ObjectRef::ingress(key),
                    field,
                    format!(
                        "class {class:?} is not {:?}; not served by this sluice",
                        self.class
                    ),
                );
                false
            }
            None if self.serve_classless => true,
            None => {
                diagnostics.warning(
                    &ObjectRef::ingress(key),
                    "spec.ingressClassName",
                    format!(
                        "no ingress class and no default IngressClass for {CONTROLLER}; not served (set spec.ingressClassName: {}, mark an IngressClass as default, or pass --watch-ingress-without-class)",
                        self.class
                    ),
                );
                false
            }
        }
    }
}
