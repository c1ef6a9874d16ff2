//! The error code catalog is kept in step with the code: every code is a constant of the
//! catalog (none is made from a literal anywhere else), every catalog entry is used, and the
//! table in the error module's docs is generated from it (`UPDATE_ERROR_CODES=1` rewrites it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use harness_core::error::{CATALOG, ErrorCode};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file of the workspace, outside build output and installed packages.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn table() -> String {
    let mut out = String::from("| code | category | meaning |\n|---|---|---|\n");
    for def in CATALOG {
        let category = def
            .category()
            .map_or("(a tool's bounded failure)".to_owned(), |c| {
                format!("`{c}`")
            });
        out.push_str(&format!(
            "| `{}` | {category} | {} |\n",
            def.name(),
            def.meaning()
        ));
    }
    out
}

#[test]
fn the_catalog_lists_each_code_once_as_its_constant_spells_it() {
    let mut seen = BTreeSet::new();
    for def in CATALOG {
        assert!(seen.insert(def.name()), "{} is listed twice", def.name());
        let code: ErrorCode = def.name().parse().unwrap();
        assert_eq!(code.as_str(), def.name());
        assert!(!def.meaning().is_empty(), "{} has no meaning", def.name());
    }
}

#[test]
fn no_code_is_made_outside_the_catalog_and_every_entry_is_used() {
    let mut files = Vec::new();
    sources(&workspace(), &mut files);
    assert!(files.len() > 50, "the walk found the sources");
    let mut text = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        if !file.ends_with("harness-core/src/error.rs") && !file.ends_with("tests/error_codes.rs") {
            // (HTTP header values have a `from_static` of their own.)
            let made = source.matches("from_static(\"").count()
                - source.matches("HeaderValue::from_static(\"").count();
            assert!(
                made == 0,
                "{} makes an error code from a literal: add it to the catalog in \
                 harness-core/src/error.rs and use the constant",
                file.display()
            );
        }
        text.push_str(&source);
    }
    for def in CATALOG {
        assert!(
            text.contains(&format!("ErrorCode::{}", def.name())),
            "the catalog lists {} but no code uses it",
            def.name()
        );
    }
}

#[test]
fn the_docs_table_is_generated_from_the_catalog() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ERROR_CODES.md");
    let want = table();
    if std::env::var_os("UPDATE_ERROR_CODES").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        have, want,
        "harness-core/ERROR_CODES.md is stale: run UPDATE_ERROR_CODES=1 cargo test -p harness-core --test error_codes"
    );
}
