//! The committed JSON Schemas under `schemas/` match the wire types.
//!
//! `UPDATE_SCHEMAS=1 cargo test --test schemas` rewrites them after an intended change.

use std::path::PathBuf;

/// The schema with every object's keys sorted, so the committed files do not depend on
/// whether some crate in the build turns on serde_json's `preserve_order` (cargo unifies
/// features across the workspace).
fn canonical(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(canonical).collect())
        }
        other => other,
    }
}

#[test]
fn committed_schemas_match_the_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut drifted = Vec::new();
    let mut expected_files = Vec::new();
    for (name, schema) in harness::schema::wire_schemas() {
        let path = dir.join(format!("{name}.json"));
        expected_files.push(format!("{name}.json"));
        let fresh =
            serde_json::to_string_pretty(&canonical(serde_json::to_value(&schema).unwrap()))
                .unwrap()
                + "\n";
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

/// A validated string type's schema pattern says what its parser takes: for each sample,
/// the schema accepts it exactly when deserialization does (schemathesis, given the API's
/// document, sends both kinds and expects each to be answered accordingly).
fn agrees<T: serde::de::DeserializeOwned + schemars::JsonSchema>(samples: &[&str]) {
    let schema = serde_json::to_value(harness::schema::schema_for::<T>()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    for sample in samples {
        let value = serde_json::Value::String((*sample).to_owned());
        let parsed = serde_json::from_value::<T>(value.clone()).is_ok();
        assert_eq!(
            validator.is_valid(&value),
            parsed,
            "{}: the schema and the parser disagree on {sample:?}",
            std::any::type_name::<T>()
        );
    }
}

#[test]
fn string_type_patterns_agree_with_their_parsers() {
    let long = format!("text/{}", "x".repeat(128));
    agrees::<harness::artifact::MediaType>(&[
        "text/plain",
        " text/plain ; charset=utf-8",
        "application/vnd.api+json",
        "\u{2003}text/plain",
        "text/plain\u{85}",
        "text/plain; a=\u{7}",
        "text",
        "/plain",
        "0/0",
        &long,
    ]);
    agrees::<harness::id::IdempotencyKey>(&["order-42/attempt", "", "has space", "é"]);
}
