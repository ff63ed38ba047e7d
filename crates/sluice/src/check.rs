//! `sluice check`: parse and compile a manifest directory, print the route table, the Gateway API status, every diagnostic and (asked) the migration report, and fail on errors.

use sluice_config::migration::{migration_report, render_report};
use sluice_config::{compile, Severity};
use sluice_routing::TableView;
use sluice_sources::ManifestDir;

use crate::cli::CheckArgs;

/// Prints the report to stdout. Returns `Ok(false)` when any file failed or any error-level
/// diagnostic exists.
pub fn run(args: &CheckArgs) -> anyhow::Result<bool> {
    let load = ManifestDir::new(&args.manifests).load()?;
    let options = args.compile_options();
    let compiled = compile(&load.snapshot, &options);
    let mut diagnostics = load.diagnostics("");
    diagnostics.extend(compiled.diagnostics);
    diagnostics.sort_by_key(|d| std::cmp::Reverse(d.severity));
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    if args.json {
        let report = migration_report(&load.snapshot, &options);
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(errors == 0);
    }

    println!(
        "Read {} manifest file(s) from {}.\n",
        load.files,
        args.manifests.display()
    );
    print!("{}", TableView::of(&compiled.table));
    println!();
    if !compiled.gateways.is_empty() {
        println!("Gateway API status (as the leader would write it):");
        print!("{}", compiled.gateways);
        println!();
    }
    if diagnostics.is_empty() {
        println!("Diagnostics: none");
    } else {
        println!("Diagnostics ({}):", diagnostics.len());
        for diagnostic in &diagnostics {
            println!("  {diagnostic}");
        }
    }
    if args.migration_report {
        println!();
        print!(
            "{}",
            render_report(&migration_report(&load.snapshot, &options))
        );
    }
    println!();
    if errors == 0 {
        println!("OK: no errors.");
    } else {
        println!("FAILED: {errors} error(s).");
    }
    Ok(errors == 0)
}
