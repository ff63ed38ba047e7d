//! Other ingress controllers' annotations: named per controller so nobody believes they apply, and failed closed where they restrict access or routing (AWS load balancer actions and conditions, auth, allow lists, WAFs).

use super::values::{annotation_field, Found, Report};
use super::Annotations;
use crate::diagnostic::{Diagnostics, ObjectRef};

/// Annotation key prefixes (or whole keys) of other controllers, with the controller's name.
/// `ingress.kubernetes.io/` comes last: sluice reads ingress-nginx's names under it, and only
/// the other names are another controller's.
pub const OTHER_CONTROLLERS: &[(&str, &str)] = &[
    ("alb.ingress.kubernetes.io/", "the AWS Load Balancer Controller"),
    (
        "service.beta.kubernetes.io/aws-load-balancer-",
        "the AWS cloud provider's Service load balancer",
    ),
    ("networking.gke.io/", "GKE Ingress"),
    ("cloud.google.com/", "GKE Ingress"),
    ("kubernetes.io/ingress.global-static-ip-name", "GKE Ingress"),
    ("kubernetes.io/ingress.regional-static-ip-name", "GKE Ingress"),
    ("kubernetes.io/ingress.allow-http", "GKE Ingress"),
    ("kubernetes.io/ingress.pre-shared-cert", "GKE Ingress"),
    ("projectcontour.io/", "Contour"),
    ("konghq.com/", "Kong"),
    ("haproxy.org/", "the HAProxy Kubernetes Ingress Controller"),
    ("haproxy-ingress.github.io/", "HAProxy Ingress"),
    ("nginx.org/", "F5 NGINX Ingress Controller"),
    ("nginx.com/", "F5 NGINX Ingress Controller"),
    (
        "appgw.ingress.kubernetes.io/",
        "the Azure Application Gateway Ingress Controller",
    ),
    ("ingress.citrix.com/", "the Citrix Ingress Controller"),
    ("getambassador.io/", "Emissary-ingress"),
    ("zalando.org/", "Skipper"),
    (
        "ingress.kubernetes.io/",
        "another controller (GKE writes its status under ingress.kubernetes.io/; HAProxy, Voyager and Skipper read it)",
    ),
];

/// The controller whose annotation `key` is, or `None`. A key under `ingress.kubernetes.io/`
/// counts only when `nginx_known` says ingress-nginx has no annotation of that name.
pub fn controller_of(key: &str, nginx_known: impl Fn(&str) -> bool) -> Option<&'static str> {
    OTHER_CONTROLLERS.iter().find_map(|(prefix, controller)| {
        let rest = key.strip_prefix(prefix)?;
        if *prefix == "ingress.kubernetes.io/" && nginx_known(rest) {
            return None;
        }
        Some(*controller)
    })
}

/// One warning per controller whose annotations the Ingress carries, naming them.
pub(crate) fn report_other_controllers(
    annotations: &Annotations,
    nginx_known: impl Fn(&str) -> bool,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) {
    let mut by_controller: Vec<(&str, Vec<&str>)> = Vec::new();
    for key in annotations.keys() {
        let Some(controller) = controller_of(key, &nginx_known) else {
            continue;
        };
        match by_controller.iter_mut().find(|(c, _)| *c == controller) {
            Some((_, keys)) => keys.push(key),
            None => by_controller.push((controller, vec![key])),
        }
    }
    for (controller, keys) in by_controller {
        let field = match keys.as_slice() {
            [one] => annotation_field(one),
            _ => "metadata.annotations".to_owned(),
        };
        let message = format!(
            "annotations of {controller} are not honoured by sluice (it is another controller's configuration): {}",
            keys.join(", ")
        );
        diagnostics.warning(object, field, message);
    }
}

/// What an access-restricting annotation of another controller does, when its value turns it
/// on; `None` for an annotation that restricts nothing.
fn restriction(key: &str, value: &str) -> Option<&'static str> {
    let name = |prefix: &str| key.strip_prefix(prefix);
    if let Some(name) = name("alb.ingress.kubernetes.io/") {
        return match name {
            "auth-type" if !value.trim().eq_ignore_ascii_case("none") => {
                Some("the AWS load balancer's authentication (Cognito or OIDC)")
            }
            "inbound-cidrs" => Some("the AWS load balancer's allowed client ranges"),
            "wafv2-acl-arn" | "waf-acl-id" => Some("an AWS WAF"),
            _ => None,
        };
    }
    if let Some(name) = name("nginx.org/").or_else(|| name("nginx.com/")) {
        return match name {
            "basic-auth-secret" => Some("F5 NGINX's basic authentication"),
            name if name.starts_with("jwt-") => Some("F5 NGINX Plus's JWT validation"),
            name if name.ends_with("-snippets") => Some("F5 NGINX configuration snippets"),
            _ => None,
        };
    }
    if let Some(name) = name("haproxy.org/") {
        return match name {
            "auth-type" | "auth-secret" => Some("HAProxy's basic authentication"),
            "allow-list" | "whitelist" | "deny-list" | "blacklist" => {
                Some("HAProxy's client address lists")
            }
            name if name.ends_with("-snippet") => Some("HAProxy configuration snippets"),
            _ => None,
        };
    }
    if let Some(name) = name("haproxy-ingress.github.io/") {
        let lists = [
            "allowlist-source-range",
            "whitelist-source-range",
            "denylist-source-range",
        ];
        return match name {
            name if name.starts_with("auth-") => Some("HAProxy Ingress's authentication"),
            name if lists.contains(&name) => Some("HAProxy Ingress's client address lists"),
            name if name.starts_with("config-") => Some("HAProxy Ingress configuration snippets"),
            _ => None,
        };
    }
    if key == "konghq.com/plugins" {
        return Some("Kong plugins (authentication, ACLs, rate limits)");
    }
    if key == "appgw.ingress.kubernetes.io/waf-policy-for-path" {
        return Some("an Azure Application Gateway WAF policy");
    }
    None
}

/// Reports each access-restricting annotation of another controller as an error; returns the
/// keys, which make every route of the Ingress answer 503.
pub(crate) fn refused_by_other_controllers<'a>(
    annotations: &'a Annotations,
    report: &mut Report<'_>,
) -> Vec<&'a str> {
    let mut refused = Vec::new();
    for (key, value) in annotations {
        let Some(what) = restriction(key, value) else {
            continue;
        };
        report.error(
            Found { key, value },
            format!("{what} restricts who may use these routes, and sluice cannot apply another controller's configuration: every route of this Ingress answers 503 rather than serve them open; express the restriction with sluice's annotations (auth-url, auth-type, allowlist-source-range, a Traefik Middleware) or remove it"),
        );
        refused.push(key.as_str());
    }
    refused
}

/// The backends an AWS load balancer action or condition claims: `actions.NAME` and
/// `conditions.NAME` apply to the backend Service `NAME` (a port named `use-annotation`
/// points at the action). Each with the field that claims it.
pub(crate) fn alb_claims(annotations: &Annotations) -> Vec<(String, String)> {
    annotations
        .keys()
        .filter_map(|key| {
            let rest = key.strip_prefix("alb.ingress.kubernetes.io/")?;
            let service = rest
                .strip_prefix("actions.")
                .or_else(|| rest.strip_prefix("conditions."))?;
            Some((service.to_owned(), annotation_field(key)))
        })
        .collect()
}

/// The port name with which an Ingress backend points at an AWS load balancer action.
pub const USE_ANNOTATION: &str = "use-annotation";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_named_by_their_controller_and_nginx_names_stay_nginx() {
        let nginx = |name: &str| name == "ssl-redirect";
        assert_eq!(
            controller_of("alb.ingress.kubernetes.io/scheme", nginx),
            Some("the AWS Load Balancer Controller")
        );
        assert_eq!(
            controller_of("kubernetes.io/ingress.global-static-ip-name", nginx),
            Some("GKE Ingress")
        );
        assert_eq!(
            controller_of("ingress.kubernetes.io/ssl-redirect", nginx),
            None
        );
        assert!(controller_of("ingress.kubernetes.io/backends", nginx).is_some());
        assert_eq!(controller_of("kubernetes.io/ingress.class", nginx), None);
        assert_eq!(controller_of("example.com/team", nginx), None);
    }

    #[test]
    fn alb_actions_and_conditions_claim_their_service() {
        let annotations: Annotations = [
            ("alb.ingress.kubernetes.io/conditions.argogrpc", "[]"),
            ("alb.ingress.kubernetes.io/actions.ssl-redirect", "{}"),
            ("alb.ingress.kubernetes.io/scheme", "internet-facing"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let claimed: Vec<String> = alb_claims(&annotations)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(claimed, ["ssl-redirect", "argogrpc"]);
    }

    #[test]
    fn only_access_restrictions_fail_closed() {
        assert!(restriction("alb.ingress.kubernetes.io/auth-type", "cognito").is_some());
        assert!(restriction("alb.ingress.kubernetes.io/auth-type", "none").is_none());
        assert!(restriction("alb.ingress.kubernetes.io/scheme", "internal").is_none());
        assert!(restriction("nginx.org/server-snippets", "deny all;").is_some());
        assert!(restriction("konghq.com/plugins", "key-auth").is_some());
        assert!(restriction("haproxy.org/timeout-server", "5s").is_none());
    }
}
