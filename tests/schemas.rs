//! The committed JSON Schemas under `schemas/` match the wire types.
//!
//! `UPDATE_SCHEMAS=1 cargo test --test schemas` rewrites them after an intended change.

use std::path::PathBuf;

#[test]
fn committed_schemas_match_the_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut drifted = Vec::new();
    let mut expected_files = Vec::new();
    for (name, schema) in harness::schema::wire_schemas() {
        let path = dir.join(format!("{name}.json"));
        expected_files.push(format!("{name}.json"));
        let fresh = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &fresh).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == fresh => {}
            Ok(_) => drifted.push(format!("{} differs from the type", path.display())),
            Err(e) => drifted.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    if !update {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            if file.ends_with(".json") && !expected_files.contains(&file) {
                drifted.push(format!("schemas/{file} belongs to no wire type"));
            }
        }
    }
    assert!(
        drifted.is_empty(),
        "JSON Schemas drifted:\n  {}\nRun `UPDATE_SCHEMAS=1 cargo test --test schemas` and commit the result.",
        drifted.join("\n  ")
    );
}

#[test]
fn every_schema_is_a_valid_2020_12_schema() {
    for (name, schema) in harness::schema::wire_schemas() {
        let value = serde_json::to_value(&schema).unwrap();
        assert!(
            jsonschema::meta::is_valid(&value),
            "schema {name} is not a valid JSON Schema"
        );
    }
}
