//! Whether a wire type's new schema is compatible with the one a contract version pinned.
//!
//! The contract says additive optional fields do not require a new contract version; other
//! changes do. [`incompatibilities`] compares a committed baseline schema (what the current
//! [`ContractVersion`](crate::manifest::ContractVersion) promised) with the schema the types
//! produce now, and lists every change a reader or writer of the baseline would trip on:
//!
//! | change | incompatible because |
//! |---|---|
//! | a field removed (or a capability key, a map's key schema) | a reader that needs it, a writer that sends it to a closed type |
//! | a field made required (new, or optional before) | a baseline writer does not send it |
//! | a type changed (`type`, `format`, a `const`) | a baseline reader cannot parse the new value |
//! | an enum value or a tagged variant removed | a baseline writer still sends it |
//! | a wire type removed | a reader of it has nothing to read |
//!
//! Additions pass: a new optional field, a new variant or enum value, a new wire type, a
//! looser bound. (An older reader refuses an enum value it does not know, which is why new
//! variants are announced in the changelog; see [`crate::wire`].) Descriptions, titles,
//! examples, defaults and validation keywords (`pattern`, `minimum`, lengths) are not
//! compared: they change text or bounds, not shape.
//!
//! [`semantic_incompatibilities`] does the same for what a schema cannot say: which event
//! kinds exist and which of them end an execution ([`contract_semantics`]).
//!
//! The workspace test `harness-core/tests/schema_compat.rs` runs both against
//! `schemas/baseline/v<CURRENT>/` and fails on any finding until
//! [`ContractVersion::CURRENT`](crate::manifest::ContractVersion::CURRENT) names a new version
//! with its own baseline.
//!
//! ```
//! use harness_core::schema::compat::incompatibilities;
//! use serde_json::json;
//!
//! let v1 = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
//! // An optional field added: compatible.
//! let additive = json!({"type": "object", "required": ["text"],
//!     "properties": {"text": {"type": "string"}, "lang": {"type": "string"}}});
//! assert!(incompatibilities(&v1, &additive).is_empty());
//! // The field removed: not.
//! let removed = json!({"type": "object", "properties": {}});
//! let found = incompatibilities(&v1, &removed);
//! assert_eq!(found[0].to_string(), "at `/properties/text`: field `text` removed");
//! ```

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use serde_json::{Map, Value, json};

/// One change of a schema that a baseline reader or writer would trip on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    /// Where, as a JSON pointer into the baseline schema (through resolved `$ref`s: the
    /// pointer names the referencing property, then the referenced definition's keywords).
    pub path: String,
    /// What changed.
    pub kind: IncompatibilityKind,
}

/// What kind of incompatible change an [`Incompatibility`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IncompatibilityKind {
    /// A field of an object is gone.
    FieldRemoved(String),
    /// A field is required that the baseline did not require.
    RequiredFieldAdded(String),
    /// A value's type changed (`type`, `format` or `const`), baseline then current.
    TypeChanged(String, String),
    /// An enum value or a tagged variant is gone.
    VariantRemoved(String),
    /// A whole wire type (or a semantic list such as the event kinds) is gone.
    TypeRemoved(String),
    /// What ends an execution changed: the terminal event kinds, baseline then current.
    TerminalSemanticsChanged(Vec<String>, Vec<String>),
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at `{}`: ", self.path)?;
        match &self.kind {
            IncompatibilityKind::FieldRemoved(name) => write!(f, "field `{name}` removed"),
            IncompatibilityKind::RequiredFieldAdded(name) => {
                write!(f, "field `{name}` is now required")
            }
            IncompatibilityKind::TypeChanged(from, to) => {
                write!(f, "type changed from {from} to {to}")
            }
            IncompatibilityKind::VariantRemoved(name) => write!(f, "variant {name} removed"),
            IncompatibilityKind::TypeRemoved(name) => write!(f, "wire type `{name}` removed"),
            IncompatibilityKind::TerminalSemanticsChanged(from, to) => write!(
                f,
                "the terminal event kinds changed from [{}] to [{}]",
                from.join(", "),
                to.join(", ")
            ),
        }
    }
}

/// Every change from `baseline` to `current` (two JSON Schemas of one wire type, as
/// [`super::schema_for`] writes them) that a baseline reader or writer would trip on; empty
/// when `current` only adds. See the [module docs](self) for what counts.
#[must_use]
pub fn incompatibilities(baseline: &Value, current: &Value) -> Vec<Incompatibility> {
    let mut walk = Walk {
        baseline_root: baseline,
        current_root: current,
        seen: HashSet::new(),
        found: Vec::new(),
    };
    walk.compare(baseline, current, "");
    walk.found
}

struct Walk<'a> {
    baseline_root: &'a Value,
    current_root: &'a Value,
    /// Pairs of definitions already compared (recursive types end here).
    seen: HashSet<(String, String)>,
    found: Vec<Incompatibility>,
}

/// The parts of a schema node: the node, then what its `$ref` (to `#/$defs/...` in `root`)
/// points at, and so on. In JSON Schema 2020-12 a `$ref` beside other keywords applies both
/// (schemars writes a tagged variant of a struct as `{"$ref": ..., "properties": {tag}}`), so
/// the parts are read together. Also the name of the last definition reached, and whether the
/// node is a bare reference (nothing but the `$ref` and annotations beside it).
fn parts<'a>(node: &'a Value, root: &'a Value) -> (Vec<&'a Value>, Option<String>, bool) {
    const ANNOTATIONS: &[&str] = &["$ref", "description", "title", "default", "examples"];
    let bare = node.as_object().is_some_and(|o| {
        o.contains_key("$ref") && o.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))
    });
    let mut out = vec![node];
    let mut name = None;
    let mut at = node;
    for _ in 0..32 {
        let Some(reference) = at.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
        else {
            break;
        };
        name = Some(reference.to_owned());
        out.push(target);
        at = target;
    }
    (out, name, bare)
}

/// The first part that has `key`.
fn first<'a>(parts: &[&'a Value], key: &str) -> Option<&'a Value> {
    parts.iter().find_map(|p| p.get(key))
}

/// The `type` keyword as a sorted list (absent: empty, meaning "any").
fn types(parts: &[&Value]) -> Vec<String> {
    let mut out: Vec<String> = match first(parts, "type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    out.sort();
    out
}

/// An object view: `properties` and `required` of every part and of their `allOf` parts.
fn object_view(parts: &[&Value], root: &Value) -> (Map<String, Value>, BTreeSet<String>) {
    let mut properties = Map::new();
    let mut required = BTreeSet::new();
    let mut all: Vec<&Value> = Vec::new();
    for part in parts {
        all.push(part);
        if let Some(members) = part.get("allOf").and_then(Value::as_array) {
            for member in members {
                all.extend(self::parts(member, root).0);
            }
        }
    }
    for part in all {
        if let Some(props) = part.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                properties.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        if let Some(req) = part.get("required").and_then(Value::as_array) {
            required.extend(req.iter().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    (properties, required)
}

/// How a `oneOf`/`anyOf` branch is recognized across versions: its tag values (properties
/// holding a `const`), its own `const`, the definition it refers to, or (for anything else)
/// its position.
fn signature(branch: &Value, root: &Value, index: usize) -> String {
    let (parts, name, _) = parts(branch, root);
    if let Some(c) = first(&parts, "const") {
        return format!("`{c}`");
    }
    if let Some(Value::Array(values)) = first(&parts, "enum")
        && values.len() == 1
    {
        return format!("`{}`", values[0]);
    }
    let mut tags = BTreeMap::new();
    for part in &parts {
        if let Some(props) = part.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                if let Some(c) = v.get("const") {
                    tags.entry(k.clone()).or_insert_with(|| c.clone());
                }
            }
        }
    }
    if !tags.is_empty() {
        return tags
            .iter()
            .map(|(k, v)| format!("`{k}: {v}`"))
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(name) = name {
        return format!("`{}`", name.rsplit('/').next().unwrap_or(&name));
    }
    let ts = types(&parts);
    if !ts.is_empty() && ts != ["object"] {
        return format!("of type {}", ts.join("|"));
    }
    format!("#{index}")
}

impl Walk<'_> {
    fn push(&mut self, path: &str, kind: IncompatibilityKind) {
        self.found.push(Incompatibility {
            path: if path.is_empty() {
                "/".to_owned()
            } else {
                path.to_owned()
            },
            kind,
        });
    }

    fn compare(&mut self, baseline: &Value, current: &Value, path: &str) {
        let (b, b_name, b_bare) = parts(baseline, self.baseline_root);
        let (c, c_name, c_bare) = parts(current, self.current_root);
        // A definition reached again through a bare reference was compared already
        // (recursive types end here).
        if let (Some(b_name), Some(c_name)) = (&b_name, &c_name)
            && b_bare
            && c_bare
            && !self.seen.insert((b_name.clone(), c_name.clone()))
        {
            return;
        }
        // `true`, `{}`: the baseline promised nothing about this value.
        let promised = |parts: &[&Value]| {
            parts
                .iter()
                .any(|p| p.as_object().is_some_and(|o| o.keys().any(|k| k != "$ref")))
        };
        if !promised(&b) {
            return;
        }
        if c.contains(&&Value::Bool(false)) {
            self.push(
                path,
                IncompatibilityKind::TypeChanged(describe(&b), "nothing".into()),
            );
            return;
        }
        if !promised(&c) {
            return;
        }

        let (bt, ct) = (types(&b), types(&c));
        if !bt.is_empty() && bt != ct {
            self.push(
                path,
                IncompatibilityKind::TypeChanged(bt.join("|"), or_any(&ct.join("|"))),
            );
            return;
        }
        for keyword in ["format", "const"] {
            let (bv, cv) = (first(&b, keyword), first(&c, keyword));
            if let Some(bv) = bv
                && cv != Some(bv)
            {
                self.push(
                    path,
                    IncompatibilityKind::TypeChanged(
                        format!("{keyword} {bv}"),
                        cv.map_or_else(|| format!("no {keyword}"), |cv| format!("{keyword} {cv}")),
                    ),
                );
            }
        }
        if let Some(Value::Array(b_values)) = first(&b, "enum") {
            let c_values = first(&c, "enum").and_then(Value::as_array);
            for v in b_values {
                if !c_values.is_some_and(|cs| cs.contains(v)) {
                    self.push(path, IncompatibilityKind::VariantRemoved(format!("`{v}`")));
                }
            }
        }

        let (b_props, b_req) = object_view(&b, self.baseline_root);
        let (c_props, c_req) = object_view(&c, self.current_root);
        for (name, b_prop) in &b_props {
            let at = format!("{path}/properties/{}", escape(name));
            match c_props.get(name) {
                None => self.push(&at, IncompatibilityKind::FieldRemoved(name.clone())),
                Some(c_prop) => self.compare(b_prop, c_prop, &at),
            }
        }
        for name in c_req.difference(&b_req) {
            self.push(
                &format!("{path}/required"),
                IncompatibilityKind::RequiredFieldAdded(name.clone()),
            );
        }

        for keyword in ["items", "additionalProperties"] {
            if let (Some(bi), Some(ci)) = (first(&b, keyword), first(&c, keyword))
                && bi.is_object()
            {
                self.compare(bi, ci, &format!("{path}/{keyword}"));
            }
        }

        for keyword in ["oneOf", "anyOf"] {
            let Some(b_branches) = first(&b, keyword).and_then(Value::as_array) else {
                continue;
            };
            let c_branches = first(&c, "oneOf")
                .or_else(|| first(&c, "anyOf"))
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            let c_signed: Vec<(String, &Value)> = c_branches
                .iter()
                .enumerate()
                .map(|(i, br)| (signature(br, self.current_root, i), br))
                .collect();
            for (i, b_branch) in b_branches.iter().enumerate() {
                let sig = signature(b_branch, self.baseline_root, i);
                let at = format!("{path}/{keyword}/{i}");
                match c_signed.iter().find(|(s, _)| *s == sig) {
                    Some((_, c_branch)) => self.compare(b_branch, c_branch, &at),
                    None => self.push(&at, IncompatibilityKind::VariantRemoved(sig)),
                }
            }
        }
    }
}

fn describe(parts: &[&Value]) -> String {
    or_any(&types(parts).join("|"))
}

fn or_any(t: &str) -> String {
    if t.is_empty() {
        "any".to_owned()
    } else {
        t.to_owned()
    }
}

/// A JSON pointer token.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// What the contract means that no schema says: every event kind, and the kinds that end an
/// execution. Committed beside the schemas as `contract.json`.
///
/// ```
/// let semantics = harness_core::schema::compat::contract_semantics();
/// assert_eq!(semantics["terminalEventKinds"][0], "run.succeeded");
/// ```
#[must_use]
pub fn contract_semantics() -> Value {
    use crate::event::EventKind;
    let kinds: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
    let terminal: Vec<&str> = EventKind::ALL
        .iter()
        .filter(|k| k.is_terminal())
        .map(|k| k.as_str())
        .collect();
    json!({
        "eventKinds": kinds,
        "terminalEventKinds": terminal,
    })
}

/// Every change from `baseline` to `current` (two [`contract_semantics`] documents) that
/// breaks the contract: an event kind removed, or any change to the set of terminal kinds (a
/// new one would end executions that a baseline reader sees still running; one fewer would
/// leave a baseline reader waiting for an end that never comes).
#[must_use]
pub fn semantic_incompatibilities(baseline: &Value, current: &Value) -> Vec<Incompatibility> {
    let list = |v: &Value, key: &str| -> Vec<String> {
        v.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut found = Vec::new();
    let current_kinds = list(current, "eventKinds");
    for kind in list(baseline, "eventKinds") {
        if !current_kinds.contains(&kind) {
            found.push(Incompatibility {
                path: "/eventKinds".into(),
                kind: IncompatibilityKind::VariantRemoved(format!("`{kind}`")),
            });
        }
    }
    let mut before = list(baseline, "terminalEventKinds");
    let mut after = list(current, "terminalEventKinds");
    before.sort();
    after.sort();
    if before != after {
        found.push(Incompatibility {
            path: "/terminalEventKinds".into(),
            kind: IncompatibilityKind::TerminalSemanticsChanged(before, after),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small wire type in the shape schemars writes: a struct with a required and an
    /// optional field, a nested definition, a string enum and an internally tagged enum.
    fn v1() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Thing",
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "count": {"type": "integer", "format": "uint64", "minimum": 0},
                "note": {"type": ["string", "null"]},
                "level": {"$ref": "#/$defs/Level"},
                "outcome": {"$ref": "#/$defs/Outcome"},
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}
            },
            "required": ["id", "level"],
            "$defs": {
                "Level": {"type": "string", "enum": ["native", "emulated"]},
                "Outcome": {"oneOf": [
                    {"type": "object", "properties": {"status": {"const": "success", "type": "string"},
                                                       "output": {}}, "required": ["status"]},
                    {"type": "object", "properties": {"status": {"const": "failure", "type": "string"},
                                                       "message": {"type": "string"}},
                     "required": ["status", "message"]}
                ]},
                "Item": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "child": {"$ref": "#/$defs/Item"}},
                         "required": ["name"]}
            }
        })
    }

    /// Sorted: the order of an object's keys depends on serde_json's features.
    fn kinds(found: &[Incompatibility]) -> Vec<String> {
        let mut out: Vec<String> = found.iter().map(ToString::to_string).collect();
        out.sort();
        out
    }

    #[test]
    fn the_same_schema_and_additions_pass() {
        assert!(incompatibilities(&v1(), &v1()).is_empty());
        let mut added = v1();
        // An optional field at the top, in a nested type, in a variant; a new variant; a new
        // enum value; a new definition; text and bounds changed; closed to open.
        added["properties"]["lang"] = json!({"type": "string"});
        added["$defs"]["Item"]["properties"]["size"] = json!({"type": "integer"});
        added["$defs"]["Outcome"]["oneOf"][1]["properties"]["hint"] = json!({"type": "string"});
        added["$defs"]["Outcome"]["oneOf"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type": "object", "properties": {"status": {"const": "rejected", "type": "string"}},
                              "required": ["status"]}));
        added["$defs"]["Level"]["enum"] = json!(["native", "emulated", "degraded"]);
        added["$defs"]["New"] = json!({"type": "string"});
        added["properties"]["count"]["minimum"] = json!(1);
        added["description"] = json!("changed text");
        added["additionalProperties"] = json!(true);
        assert_eq!(
            kinds(&incompatibilities(&v1(), &added)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_removed_field_is_found_at_any_depth() {
        let mut removed = v1();
        removed["properties"]
            .as_object_mut()
            .unwrap()
            .remove("note");
        removed["$defs"]["Item"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("child");
        removed["$defs"]["Outcome"]["oneOf"][1]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("message");
        assert_eq!(
            kinds(&incompatibilities(&v1(), &removed)),
            [
                "at `/properties/items/items/properties/child`: field `child` removed",
                "at `/properties/note`: field `note` removed",
                "at `/properties/outcome/oneOf/1/properties/message`: field `message` removed",
            ]
        );
    }

    #[test]
    fn a_required_field_added_or_made_required_is_found() {
        let mut required = v1();
        required["properties"]["owner"] = json!({"type": "string"});
        required["required"] = json!(["id", "level", "owner", "note"]);
        required["$defs"]["Item"]["required"] = json!(["name", "child"]);
        assert_eq!(
            kinds(&incompatibilities(&v1(), &required)),
            [
                "at `/properties/items/items/required`: field `child` is now required",
                "at `/required`: field `note` is now required",
                "at `/required`: field `owner` is now required",
            ]
        );
    }

    #[test]
    fn a_changed_type_is_found() {
        let mut changed = v1();
        changed["properties"]["id"] = json!({"type": "integer"});
        changed["properties"]["count"]["format"] = json!("uint32");
        changed["properties"]["note"] = json!({"type": "string"});
        changed["$defs"]["Outcome"]["oneOf"][0]["properties"]["output"] = json!({"type": "string"});
        assert_eq!(
            kinds(&incompatibilities(&v1(), &changed)),
            [
                "at `/properties/count`: type changed from format \"uint64\" to format \"uint32\"",
                "at `/properties/id`: type changed from string to integer",
                "at `/properties/note`: type changed from null|string to string",
            ]
        );
        // `output` was "anything" in the baseline: narrowing it is a validation change, not
        // a shape the baseline promised.
    }

    #[test]
    fn a_removed_variant_or_enum_value_is_found() {
        let mut removed = v1();
        removed["$defs"]["Level"]["enum"] = json!(["native"]);
        removed["$defs"]["Outcome"]["oneOf"]
            .as_array_mut()
            .unwrap()
            .remove(1);
        assert_eq!(
            kinds(&incompatibilities(&v1(), &removed)),
            [
                "at `/properties/level`: variant `\"emulated\"` removed",
                "at `/properties/outcome/oneOf/1`: variant `status: \"failure\"` removed",
            ]
        );
    }

    /// schemars writes a tagged variant of a struct as a `$ref` beside the tag; a closed
    /// struct is inlined instead. Both are the same variant.
    #[test]
    fn a_variant_inlined_or_referenced_is_the_same_variant() {
        let inlined = json!({"oneOf": [{"type": "object", "additionalProperties": false,
            "properties": {"type": {"const": "form", "type": "string"}, "title": {"type": "string"}},
            "required": ["type"]}]});
        let referenced = json!({"oneOf": [{"$ref": "#/$defs/Form", "type": "object",
            "properties": {"type": {"const": "form", "type": "string"}}, "required": ["type"]}],
            "$defs": {"Form": {"type": "object", "properties": {"title": {"type": "string"}}}}});
        assert!(incompatibilities(&inlined, &referenced).is_empty());
        let mut lost = referenced;
        lost["$defs"]["Form"]["properties"] = json!({});
        assert_eq!(
            kinds(&incompatibilities(&inlined, &lost)),
            ["at `/oneOf/0/properties/title`: field `title` removed"]
        );
    }

    #[test]
    fn recursive_definitions_end() {
        // `Item.child` refers to `Item`: compared once.
        let mut changed = v1();
        changed["$defs"]["Item"]["properties"]["name"] = json!({"type": "integer"});
        assert_eq!(incompatibilities(&v1(), &changed).len(), 1);
    }

    #[test]
    fn terminal_semantics_and_removed_kinds_are_found() {
        let base = contract_semantics();
        assert!(semantic_incompatibilities(&base, &base).is_empty());
        let mut added_kind = base.clone();
        added_kind["eventKinds"]
            .as_array_mut()
            .unwrap()
            .push(json!("run.paused"));
        assert!(semantic_incompatibilities(&base, &added_kind).is_empty());
        let mut new_terminal = base.clone();
        new_terminal["terminalEventKinds"]
            .as_array_mut()
            .unwrap()
            .push(json!("run.expired"));
        let found = kinds(&semantic_incompatibilities(&base, &new_terminal));
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("at `/terminalEventKinds`: the terminal event kinds changed from [run.cancelled, run.failed, run.succeeded] to [run.cancelled, run.expired, run.failed, run.succeeded]"),
            "{found:?}"
        );
        let mut removed = base.clone();
        removed["eventKinds"]
            .as_array_mut()
            .unwrap()
            .retain(|k| k != "usage");
        assert_eq!(
            kinds(&semantic_incompatibilities(&base, &removed)),
            ["at `/eventKinds`: variant `usage` removed"]
        );
    }

    #[test]
    fn the_committed_schemas_of_this_crate_compare_clean_with_themselves() {
        for (name, schema) in super::super::wire_schemas() {
            let value = serde_json::to_value(&schema).unwrap();
            assert!(
                incompatibilities(&value, &value).is_empty(),
                "{name}: {:?}",
                incompatibilities(&value, &value)
            );
        }
    }
}
