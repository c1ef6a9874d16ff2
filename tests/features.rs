//! The feature table in the README (the crate's docs) lists exactly the features of
//! Cargo.toml, each with its place in `default`.

use std::collections::BTreeMap;
use std::path::Path;

/// `name -> on by default` from Cargo.toml's `[features]` table (its own lines or a
/// normalized manifest's multi-line arrays; comments skipped).
fn manifest_features(manifest: &str) -> BTreeMap<String, bool> {
    let section: String = manifest
        .lines()
        .skip_while(|line| line.trim() != "[features]")
        .skip(1)
        .take_while(|line| {
            let line = line.trim();
            !(line.starts_with('[') && line.ends_with(']') && line.len() > 2)
        })
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    // Each entry is `name = [ ... ]`.
    let mut entries = BTreeMap::new();
    let mut rest = section.as_str();
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().to_owned();
        let close = rest[eq..]
            .find(']')
            .expect("a feature's list ends with `]`")
            + eq;
        entries.insert(name, rest[eq + 1..close].to_owned());
        rest = &rest[close + 1..];
    }
    let default = entries.remove("default").unwrap_or_default();
    let defaults: Vec<&str> = default
        .split(|c: char| c == ',' || c == '[' || c.is_whitespace())
        .map(|item| item.trim_matches('"'))
        .filter(|item| !item.is_empty())
        .collect();
    entries
        .into_keys()
        .map(|name| {
            let on = defaults.contains(&name.as_str());
            (name, on)
        })
        .collect()
}

/// `name -> on by default` from the README's "Feature flags" table.
fn readme_features(readme: &str) -> BTreeMap<String, bool> {
    readme
        .lines()
        .skip_while(|line| line.trim() != "## Feature flags")
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let default = match cells[2] {
                "yes" => true,
                "no" => false,
                other => panic!("default column must say yes or no, got {other:?} in {line}"),
            };
            (cells[1].trim_matches('`').to_owned(), default)
        })
        .collect()
}

#[test]
fn the_readme_lists_every_feature_with_its_default() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let declared = manifest_features(&manifest);
    assert!(!declared.is_empty(), "no [features] found in Cargo.toml");
    assert_eq!(
        readme_features(&readme),
        declared,
        "README.md's \"Feature flags\" table (left) differs from Cargo.toml's [features] (right)"
    );
}
