//! The migration report: every ingress-nginx, Traefik and other controller's annotation found in a snapshot, how many objects use it, and how fully sluice honours the values they give it.

use std::collections::BTreeMap;
use std::fmt::Write;

use hashbrown::HashMap;
use serde::Serialize;

use crate::annotations::annotation_field;
use crate::annotations::support::{is_ingress_nginx_name, lookup};
pub use crate::annotations::support::{Support, INGRESS_NGINX, TRAEFIK};
use crate::compile::{compile, CompileOptions};
use crate::diagnostic::{Diagnostic, ObjectRef, Severity};
use crate::snapshot::Snapshot;

const NGINX_PREFIXES: [&str; 2] = ["nginx.ingress.kubernetes.io/", "ingress.kubernetes.io/"];
const TRAEFIK_PREFIX: &str = "traefik.ingress.kubernetes.io/";

/// How fully sluice honours one annotation as one object uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Grade {
    Fully,
    Partly,
    Not,
}

impl Grade {
    pub fn word(self) -> &'static str {
        match self {
            Self::Fully => "fully",
            Self::Partly => "partly",
            Self::Not => "not",
        }
    }
}

impl Support {
    fn grade(&self) -> Grade {
        match self {
            Self::Full => Grade::Fully,
            Self::Partly(_) => Grade::Partly,
            Self::Not(_) => Grade::Not,
        }
    }
}

/// One annotation found in the snapshot, with the grade its values got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationRow {
    /// The annotation key, with the prefix it was found under.
    pub annotation: String,
    /// How many objects (Ingresses, or Services for `service.*`) carry it with this grade.
    pub objects: usize,
    #[serde(rename = "support")]
    pub grade: Grade,
    /// What differs, or why it is not honoured (empty when fully).
    pub note: String,
}

/// Counts by grade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GradeCounts {
    pub fully: usize,
    pub partly: usize,
    pub not: usize,
}

impl GradeCounts {
    fn add(&mut self, grade: Grade, count: usize) {
        match grade {
            Grade::Fully => self.fully += count,
            Grade::Partly => self.partly += count,
            Grade::Not => self.not += count,
        }
    }
}

/// The totals: annotation uses (object and key) by grade, and objects by their worst grade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub uses: GradeCounts,
    pub objects: GradeCounts,
}

/// The migration report: every controller annotation on the snapshot's Ingresses and
/// Services, graded by the value each object gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    pub rows: Vec<MigrationRow>,
    pub totals: Totals,
}

const UNKNOWN_NGINX: Support = Support::Not("not an ingress-nginx annotation sluice knows of");
const UNKNOWN_TRAEFIK: Support = Support::Not("not a Traefik annotation sluice knows of");

/// The class the report compiles every Ingress as, whatever class it names.
const REPORT_CLASS: &str = "sluice-migration-report";

/// Every ingress-nginx, Traefik and other controller's annotation on the snapshot's Ingresses
/// and Services, served or not (a migration starts with Ingresses of another class), graded
/// by what sluice makes of the value used: a key whose value sluice ignores or refuses is
/// "not" for that object, whatever the key's table says. Rows are sorted by key.
pub fn migration_report(snapshot: &Snapshot, options: &CompileOptions) -> MigrationReport {
    let findings = findings_as_served(snapshot, options);
    let ingresses = snapshot.ingresses.iter().map(|(key, ingress)| {
        (
            ObjectRef::ingress(key),
            ingress.metadata.annotations.as_ref(),
        )
    });
    let services = snapshot.services.iter().map(|(key, service)| {
        let object = ObjectRef::new("Service", Some(&key.namespace), &key.name);
        (object, service.metadata.annotations.as_ref())
    });
    let mut rows: BTreeMap<(String, Grade, String), usize> = BTreeMap::new();
    let mut totals = Totals::default();
    for (object, annotations) in ingresses.chain(services) {
        let Some(annotations) = annotations else {
            continue;
        };
        let mut worst = None;
        for key in annotations.keys() {
            let folded = fold_key(key);
            let Some(support) = support_of(&folded) else {
                continue;
            };
            let field = annotation_field(&folded);
            let (grade, note) = graded(support, findings.get(&(object.clone(), field)));
            totals.uses.add(grade, 1);
            worst = worst.max(Some(grade));
            *rows.entry((key.clone(), grade, note)).or_default() += 1;
        }
        if let Some(worst) = worst {
            totals.objects.add(worst, 1);
        }
    }
    let rows = rows
        .into_iter()
        .map(|((annotation, grade, note), objects)| MigrationRow {
            annotation,
            objects,
            grade,
            note,
        })
        .collect();
    MigrationReport { rows, totals }
}

/// A Traefik key as its decoder reads it (the part after the prefix in any case).
fn fold_key(key: &str) -> String {
    match key.strip_prefix(TRAEFIK_PREFIX) {
        Some(rest) => format!("{TRAEFIK_PREFIX}{}", rest.to_ascii_lowercase()),
        None => key.to_owned(),
    }
}

/// What the compile says about each annotation when every Ingress is served: the real
/// parsers' findings, by object and field.
fn findings_as_served(
    snapshot: &Snapshot,
    options: &CompileOptions,
) -> HashMap<(ObjectRef, String), Vec<Diagnostic>> {
    let mut served = snapshot.clone();
    for ingress in served.ingresses.values_mut() {
        if let Some(annotations) = ingress.metadata.annotations.as_mut() {
            annotations.remove(crate::annotations::INGRESS_CLASS);
        }
        ingress
            .spec
            .get_or_insert_with(Default::default)
            .ingress_class_name = Some(REPORT_CLASS.to_owned());
    }
    let options = CompileOptions {
        ingress_class: REPORT_CLASS.to_owned(),
        ..options.clone()
    };
    let mut findings: HashMap<(ObjectRef, String), Vec<Diagnostic>> = HashMap::new();
    for diagnostic in compile(&served, &options).diagnostics {
        findings
            .entry((diagnostic.object.clone(), diagnostic.field.clone()))
            .or_default()
            .push(diagnostic);
    }
    findings
}

/// The grade and note of one use: an error, or a finding that says the value is ignored, is
/// "not"; another warning is "partly"; else the key's own support.
fn graded(support: Support, findings: Option<&Vec<Diagnostic>>) -> (Grade, String) {
    let findings = findings.map(Vec::as_slice).unwrap_or_default();
    let ignored = |message: &str| {
        let lower = message.to_ascii_lowercase();
        [
            "ignored",
            "invalid value",
            "unsupported value",
            "not honoured",
            "not supported",
            "answers 503",
            "refused",
        ]
        .iter()
        .any(|word| lower.contains(word))
    };
    if let Some(finding) = findings.iter().find(|d| d.severity == Severity::Error) {
        return (Grade::Not, short(&finding.message));
    }
    if let Some(finding) = findings.iter().find(|d| d.severity == Severity::Warning) {
        let grade = if ignored(&finding.message) {
            Grade::Not
        } else {
            Grade::Partly.max(support.grade())
        };
        return (grade, short(&finding.message));
    }
    if let Some(finding) = findings.iter().find(|d| ignored(&d.message)) {
        return (Grade::Not, short(&finding.message));
    }
    (support.grade(), support.note().to_owned())
}

/// A finding's message as a note: its first sentence, at most 160 characters.
fn short(message: &str) -> String {
    let sentence = message.split(". ").next().unwrap_or(message);
    match sentence.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &sentence[..at]),
        None => sentence.to_owned(),
    }
}

/// The support of a controller annotation key (Traefik keys already folded); `None` for
/// any other key.
fn support_of(key: &str) -> Option<Support> {
    if let Some(name) = NGINX_PREFIXES
        .iter()
        .find_map(|prefix| key.strip_prefix(prefix))
    {
        if let Some(support) = lookup(INGRESS_NGINX, name) {
            return Some(support);
        }
        if key.starts_with("nginx.ingress.kubernetes.io/") {
            return Some(UNKNOWN_NGINX);
        }
    }
    if let Some(name) = key.strip_prefix(TRAEFIK_PREFIX) {
        let numbered = numbered_domain(name);
        return Some(
            lookup(TRAEFIK, numbered.as_deref().unwrap_or(name)).unwrap_or(UNKNOWN_TRAEFIK),
        );
    }
    let controller = crate::annotations::controller_of(key, is_ingress_nginx_name)?;
    Some(Support::Not(match controller {
        "the AWS Load Balancer Controller" => {
            "other controller (the AWS Load Balancer Controller): not honoured"
        }
        "GKE Ingress" => "other controller (GKE Ingress): not honoured",
        "Contour" => "other controller (Contour): not honoured",
        "Kong" => "other controller (Kong): not honoured",
        "F5 NGINX Ingress Controller" => {
            "other controller (F5 NGINX Ingress Controller): not honoured"
        }
        "the HAProxy Kubernetes Ingress Controller" | "HAProxy Ingress" => {
            "other controller (HAProxy): not honoured"
        }
        "the Azure Application Gateway Ingress Controller" => {
            "other controller (Azure Application Gateway): not honoured"
        }
        "the AWS cloud provider's Service load balancer" => {
            "other controller (the AWS cloud provider's load balancer): not honoured"
        }
        _ => "other controller: not honoured",
    }))
}

/// `router.tls.domains.0.main` as the table writes it (`router.tls.domains.n.main`).
fn numbered_domain(name: &str) -> Option<String> {
    let rest = name.strip_prefix("router.tls.domains.")?;
    let (index, field) = rest.split_once('.')?;
    index
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| format!("router.tls.domains.n.{field}"))
}

/// The report as a text table, with the totals by grade.
pub fn render_report(report: &MigrationReport) -> String {
    let rows = &report.rows;
    if rows.is_empty() {
        return "Migration report: no ingress-nginx, Traefik or other controller annotations found.\n".to_owned();
    }
    let width = rows
        .iter()
        .map(|row| row.annotation.len())
        .max()
        .unwrap_or(10)
        .max(10);
    let mut out = format!(
        "Migration report ({} row(s)):\n  {:<width$}  {:>7}  {:<6}  {}\n",
        rows.len(),
        "ANNOTATION",
        "OBJECTS",
        "SLUICE",
        "NOTES"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "  {:<width$}  {:>7}  {:<6}  {}",
            row.annotation,
            row.objects,
            row.grade.word(),
            row.note
        );
    }
    let (uses, objects) = (report.totals.uses, report.totals.objects);
    let _ = writeln!(
        out,
        "\nAnnotation uses honoured fully: {}, partly: {}, not: {}.\nObjects by their least honoured annotation: fully {}, partly {}, not {}.",
        uses.fully, uses.partly, uses.not, objects.fully, objects.partly, objects.not
    );
    out
}

/// Both tables in Markdown, as docs/annotations.md carries them.
pub fn markdown_tables() -> String {
    let mut out = String::new();
    for (title, prefix, table) in [
        (
            "ingress-nginx",
            "nginx.ingress.kubernetes.io/",
            INGRESS_NGINX,
        ),
        ("Traefik", TRAEFIK_PREFIX, TRAEFIK),
    ] {
        let _ = writeln!(out, "| {title} annotation (`{prefix}`) | sluice | Notes |");
        out.push_str("|---|---|---|\n");
        for (name, support) in table {
            let _ = writeln!(
                out,
                "| `{name}` | {} | {} |",
                support.word(),
                support.note()
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_sluice_reads_is_in_the_table_as_honoured() {
        for name in crate::annotations::nginx_names() {
            let support = lookup(INGRESS_NGINX, name);
            assert!(
                matches!(support, Some(Support::Full | Support::Partly(_))),
                "{name}: {support:?}"
            );
        }
    }

    #[test]
    fn names_are_listed_once() {
        for table in [INGRESS_NGINX, TRAEFIK] {
            let mut names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
            names.sort_unstable();
            let before = names.len();
            names.dedup();
            assert_eq!(before, names.len());
        }
    }

    #[test]
    fn keys_map_to_their_rows() {
        assert_eq!(
            support_of("ingress.kubernetes.io/use-regex"),
            Some(Support::Full)
        );
        assert_eq!(
            support_of("nginx.ingress.kubernetes.io/made-up"),
            Some(UNKNOWN_NGINX)
        );
        assert_eq!(
            support_of("traefik.ingress.kubernetes.io/router.tls.domains.0.main").map(|s| s.word()),
            Some("not")
        );
        assert_eq!(support_of("example.com/owner"), None);
    }

    fn report(yaml: &str) -> MigrationReport {
        let objects = crate::manifest::parse_manifest(yaml, crate::manifest::Format::Yaml)
            .unwrap()
            .into_iter()
            .filter_map(|document| match document {
                crate::manifest::Document::Object(object) => Some(object),
                crate::manifest::Document::Skipped { .. } => None,
            });
        migration_report(&Snapshot::from_objects(objects), &CompileOptions::default())
    }

    fn ingress(name: &str, annotations: &str) -> String {
        format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, annotations: {{{annotations}}}}}\nspec: {{ingressClassName: nginx, rules: [{{host: {name}.test, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]}}\n---\n")
    }

    fn grade_of(report: &MigrationReport, key: &str) -> Vec<(Grade, usize)> {
        report
            .rows
            .iter()
            .filter(|row| row.annotation == key)
            .map(|row| (row.grade, row.objects))
            .collect()
    }

    #[test]
    fn the_value_used_decides_the_grade() {
        let protocol = "nginx.ingress.kubernetes.io/backend-protocol";
        let hash = "nginx.ingress.kubernetes.io/upstream-hash-by";
        let text = ingress("a", &format!("{protocol}: GRPC, {hash}: $remote_addr"))
            + &ingress("b", &format!("{protocol}: FCGI, {hash}: $arg_x"))
            + &ingress("c", &format!("{protocol}: grpcs"))
            + "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n";
        let report = report(&text);
        assert_eq!(
            grade_of(&report, protocol),
            [(Grade::Fully, 2), (Grade::Not, 1)]
        );
        assert_eq!(
            grade_of(&report, hash),
            [(Grade::Fully, 1), (Grade::Not, 1)]
        );
        assert_eq!(
            report.totals.uses,
            GradeCounts {
                fully: 3,
                partly: 0,
                not: 2
            }
        );
        assert_eq!(
            report.totals.objects,
            GradeCounts {
                fully: 2,
                partly: 0,
                not: 1
            }
        );
    }

    #[test]
    fn refusals_middlewares_and_other_controllers_are_graded_by_what_sluice_does() {
        let middleware = "apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {name: strip}\nspec: {stripPrefix: {prefixes: [/a]}}\n---\n";
        let text = middleware.to_owned()
            + &ingress(
                "snippet",
                "nginx.ingress.kubernetes.io/server-snippet: 'deny all;'",
            )
            + &ingress(
                "found",
                "traefik.ingress.kubernetes.io/router.middlewares: default-strip@kubernetescrd",
            )
            + &ingress(
                "missing",
                "traefik.ingress.kubernetes.io/Router.Middlewares: default-gone@kubernetescrd",
            )
            + &ingress("alb", "alb.ingress.kubernetes.io/scheme: internet-facing");
        let report = report(&text);
        assert_eq!(
            grade_of(&report, "nginx.ingress.kubernetes.io/server-snippet"),
            [(Grade::Not, 1)]
        );
        assert_eq!(
            grade_of(&report, "traefik.ingress.kubernetes.io/router.middlewares"),
            [(Grade::Fully, 1)]
        );
        assert_eq!(
            grade_of(&report, "traefik.ingress.kubernetes.io/Router.Middlewares"),
            [(Grade::Not, 1)]
        );
        let alb = &report
            .rows
            .iter()
            .find(|r| r.annotation == "alb.ingress.kubernetes.io/scheme")
            .unwrap();
        assert_eq!(alb.grade, Grade::Not);
        assert!(
            alb.note.contains("AWS Load Balancer Controller"),
            "{}",
            alb.note
        );
    }

    #[test]
    fn the_documentation_carries_the_tables() {
        let docs = include_str!("../../../docs/annotations.md");
        assert!(
            docs.contains(markdown_tables().trim_end()),
            "docs/annotations.md must contain migration::markdown_tables() verbatim"
        );
    }
}
