//! Incompatible wire changes are tied to `ContractVersion`: today's schemas of the wire types,
//! and the contract's event semantics, are compared with the baseline committed for
//! `ContractVersion::CURRENT` (`schemas/baseline/v<N>/` at the workspace root). An additive
//! optional field passes; a removed field, a newly required one, a changed type, a removed
//! variant or a change of what ends an execution fails here until `ContractVersion::CURRENT`
//! names a new version.
//!
//! Introducing a new contract version: bump `ContractVersion::CURRENT`, then
//! `UPDATE_SCHEMA_BASELINE=1 cargo test -p harness-core --test schema_compat` writes
//! `schemas/baseline/v<new>/` (it never overwrites an existing baseline: a version's promise
//! does not move).

use std::path::{Path, PathBuf};

use harness_core::manifest::ContractVersion;
use harness_core::schema::compat::{
    contract_semantics, incompatibilities, semantic_incompatibilities,
};
use serde_json::Value;

fn baseline_dir(version: ContractVersion) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../schemas/baseline")
        .join(format!("v{}", version.get()))
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn current() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = harness_core::schema::wire_schemas()
        .into_iter()
        .map(|(name, schema)| {
            (
                format!("{name}.json"),
                serde_json::to_value(&schema).unwrap(),
            )
        })
        .collect();
    out.push(("contract.json".into(), contract_semantics()));
    out
}

/// Writes the baseline of a new contract version; refuses to touch an existing one.
fn write_baseline(dir: &Path) {
    assert!(
        !dir.exists(),
        "{} exists: a contract version's baseline is its promise and is never rewritten; \
         bump `ContractVersion::CURRENT` for an incompatible change",
        dir.display()
    );
    std::fs::create_dir_all(dir).unwrap();
    for (file, value) in current() {
        std::fs::write(
            dir.join(file),
            serde_json::to_string_pretty(&value).unwrap() + "\n",
        )
        .unwrap();
    }
}

#[test]
fn todays_wire_is_compatible_with_the_current_contract_versions_baseline() {
    let version = ContractVersion::CURRENT;
    let dir = baseline_dir(version);
    if std::env::var_os("UPDATE_SCHEMA_BASELINE").is_some() {
        write_baseline(&dir);
        return;
    }
    assert!(
        dir.is_dir(),
        "no committed schema baseline for contract version {version} at {}: a new contract \
         version commits its baseline (UPDATE_SCHEMA_BASELINE=1 cargo test -p harness-core \
         --test schema_compat)",
        dir.display()
    );
    let now = current();
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if !file.ends_with(".json") {
            continue;
        }
        let baseline = read(&path);
        let Some((_, current)) = now.iter().find(|(f, _)| *f == file) else {
            found.push(format!("{file}: the wire type is gone"));
            continue;
        };
        let problems = if file == "contract.json" {
            semantic_incompatibilities(&baseline, current)
        } else {
            incompatibilities(&baseline, current)
        };
        found.extend(problems.into_iter().map(|p| format!("{file}: {p}")));
    }
    assert!(
        found.is_empty(),
        "the wire changed incompatibly with contract version {version}'s baseline ({}):\n  {}\n\
         Make the change additive (a new optional field, a new variant), or bump \
         `ContractVersion::CURRENT` and commit the new version's baseline.",
        dir.display(),
        found.join("\n  ")
    );
}

#[test]
fn the_baseline_has_every_wire_type_and_the_semantics() {
    let dir = baseline_dir(ContractVersion::CURRENT);
    for (file, _) in current() {
        assert!(
            dir.join(&file).is_file(),
            "{} has no {file}: a wire type added since the baseline is compatible, but the \
             baseline of a version lists every type it promised",
            dir.display()
        );
    }
}

/// The check can fail for real: the committed baseline against a copy of today's event
/// schema with a field removed and a terminal kind added.
#[test]
fn an_incompatible_change_against_the_real_baseline_is_found() {
    let dir = baseline_dir(ContractVersion::CURRENT);
    let baseline = read(&dir.join("event.json"));
    let mut broken = current()
        .into_iter()
        .find(|(f, _)| f == "event.json")
        .unwrap()
        .1;
    broken["properties"].as_object_mut().unwrap().remove("seq");
    broken["$defs"]["TextDelta"]["required"] = serde_json::json!(["text", "lang"]);
    let found: Vec<String> = incompatibilities(&baseline, &broken)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        found.contains(&"at `/properties/seq`: field `seq` removed".to_owned()),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.ends_with("field `lang` is now required")),
        "{found:?}"
    );
    let semantics = read(&dir.join("contract.json"));
    let mut more_terminal = contract_semantics();
    more_terminal["terminalEventKinds"]
        .as_array_mut()
        .unwrap()
        .push("run.awaiting_input".into());
    assert_eq!(
        semantic_incompatibilities(&semantics, &more_terminal).len(),
        1
    );
}
