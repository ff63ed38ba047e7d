//! End-to-end: `sluice check --migration-report` on real manifests, as text and as JSON that validates against docs/migration-report.schema.json (checked by Python's jsonschema).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tests/fixtures")
}

/// `sluice check --migration-report --json --manifests dir` plus `args`: exit code and the JSON.
fn report(dir: &Path, args: &[&str]) -> (Option<i32>, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--migration-report", "--json", "--manifests"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"));
    (output.status.code(), json)
}

/// Validates `document` against the published schema with Python's jsonschema.
fn validate(document: &Value) {
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/migration-report.schema.json");
    let script = "import json, sys, jsonschema\nschema = json.load(open(sys.argv[1]))\njsonschema.Draft202012Validator.check_schema(schema)\njsonschema.validate(json.load(sys.stdin), schema, cls=jsonschema.Draft202012Validator)\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(schema)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(document.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the report does not validate: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn row<'a>(report: &'a Value, key: &str) -> Vec<&'a Value> {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["annotation"] == key)
        .collect()
}

#[test]
fn the_json_report_grades_real_manifests_by_value_and_validates_against_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, class) in [
        ("alb_conditions_fail_closed_argocd.yaml", "argocd"),
        ("snippet_fails_closed_nextcloud.yaml", "nextcloud"),
        ("traefik_forwardauth_authelia.yaml", "authelia"),
        ("backend_protocol_fcgi_fails_closed.yaml", "php"),
    ] {
        std::fs::copy(
            fixtures().join(fixture),
            dir.path().join(format!("{class}.yaml")),
        )
        .unwrap();
    }
    let (code, json) = report(dir.path(), &[]);
    validate(&json);
    assert_eq!(
        code,
        Some(1),
        "the directory has errors (as served by class sluice)"
    );
    let conditions = row(&json, "alb.ingress.kubernetes.io/conditions.argogrpc");
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0]["support"], "not");
    assert!(
        conditions[0]["note"]
            .as_str()
            .unwrap()
            .contains("answer 503"),
        "{json}"
    );
    let scheme = row(&json, "alb.ingress.kubernetes.io/listen-ports");
    assert_eq!(scheme[0]["support"], "not");
    assert!(scheme[0]["note"]
        .as_str()
        .unwrap()
        .contains("other controller (the AWS Load Balancer Controller)"));
    assert_eq!(
        row(&json, "nginx.ingress.kubernetes.io/server-snippet")[0]["support"],
        "not"
    );
    let middlewares = row(&json, "traefik.ingress.kubernetes.io/router.middlewares");
    assert_eq!(
        (
            middlewares[0]["support"].as_str(),
            middlewares[0]["objects"].as_u64()
        ),
        (Some("fully"), Some(1))
    );
    assert_eq!(
        row(&json, "traefik.ingress.kubernetes.io/router.entryPoints")[0]["support"],
        "fully"
    );
    let protocols: Vec<(&str, u64)> = row(&json, "nginx.ingress.kubernetes.io/backend-protocol")
        .iter()
        .map(|r| {
            (
                r["support"].as_str().unwrap(),
                r["objects"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        protocols,
        [("fully", 1), ("not", 1)],
        "GRPC fully, FCGI not"
    );
    let uses = &json["totals"]["uses"];
    let counted: u64 = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["objects"].as_u64().unwrap())
        .sum();
    let total = uses["fully"].as_u64().unwrap()
        + uses["partly"].as_u64().unwrap()
        + uses["not"].as_u64().unwrap();
    assert_eq!(counted, total, "the totals count every use once");
}

#[test]
fn the_report_of_the_projects_own_fixtures_validates() {
    let (_, json) = report(&fixtures(), &[]);
    validate(&json);
    let totals = &json["totals"];
    eprintln!("migration report of crates/config/tests/fixtures: {totals}");
    assert!(totals["objects"]["not"].as_u64().unwrap() > 0);
    assert!(totals["objects"]["fully"].as_u64().unwrap() > 0);
}

#[test]
fn json_needs_the_migration_report() {
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--json", "--manifests", "."])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2), "clap refuses --json alone");
}
