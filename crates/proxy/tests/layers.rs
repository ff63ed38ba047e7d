//! The proxy crate's layers, read from its own source: every `crate::` path points down the order `server → request → filters → upstream → telemetry → bottom`, the filter contract names nothing of the crate, and the phase driver names no filter.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers from the top down; a file may use its own layer and those after it.
const LAYERS: [&str; 6] = [
    "server",
    "request",
    "filters",
    "upstream",
    "telemetry",
    "bottom",
];

/// Files at the crate's root that form its bottom.
const BOTTOM: [&str; 7] = [
    "client_body",
    "connection",
    "error",
    "headers",
    "shutdown",
    "switch",
    "worker",
];

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// The layer a file or a top-level module belongs to; `None` for `lib.rs`.
fn layer_of_module(module: &str) -> Option<usize> {
    if BOTTOM.contains(&module) {
        return Some(LAYERS.len() - 1);
    }
    LAYERS.iter().position(|layer| *layer == module)
}

fn layer_of_file(relative: &Path) -> Option<usize> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    layer_of_module(first.trim_end_matches(".rs"))
}

/// The source without comments and without its `#[cfg(test)]` module, which may reach
/// anywhere.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module a file's code names as `crate::<module>`.
fn crate_paths(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `crate::` itself, not the tail of `sluice_crate::` or the like.
            *at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric()
        })
        .map(|(at, _)| {
            code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_crate_path_points_down_the_layers() {
    let root = source_root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut upward: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap();
        let Some(layer) = layer_of_file(relative) else {
            continue;
        };
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for module in crate_paths(&code) {
            checked += 1;
            let Some(target) = layer_of_module(&module) else {
                upward
                    .entry(relative.display().to_string())
                    .or_default()
                    .push(format!("crate::{module} (not a layer)"));
                continue;
            };
            if target < layer {
                upward
                    .entry(relative.display().to_string())
                    .or_default()
                    .push(format!("crate::{module}"));
            }
        }
    }
    assert!(checked > 100, "the scan found only {checked} crate paths");
    assert!(
        upward.is_empty(),
        "paths that point up a layer: {upward:#?}"
    );
}

#[test]
fn the_filter_contract_names_nothing_of_the_crate() {
    let text = std::fs::read_to_string(source_root().join("filters/contract.rs")).unwrap();
    let code = code_of(&text);
    assert!(crate_paths(&code).is_empty(), "contract.rs uses the crate");
    assert!(!code.contains("super::"), "contract.rs uses its siblings");
}

#[test]
fn the_phase_driver_names_no_filter() {
    let text = std::fs::read_to_string(source_root().join("request/driver.rs")).unwrap();
    let code = code_of(&text);
    let named: Vec<&str> = code
        .match_indices("filters::")
        .map(|(at, _)| {
            let rest = &code[at + "filters::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    assert!(!named.is_empty(), "the driver runs the filters' hooks");
    for module in named {
        assert!(
            ["contract", "registry", "services"].contains(&module),
            "the driver names the filter module {module:?}"
        );
    }
}
