//! ACP form elicitation (`elicitation/create`, form mode) ↔ the portable form-input action.
//!
//! A requested schema becomes a [`FormRequest`] only when every property and every
//! constraint it carries can be represented (and so enforced) by the portable form; anything
//! else is [`Unsupported`], and the adapter declines the elicitation saying why. Defaults
//! are not carried (the portable form has none); they constrain nothing.

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::{
    ElicitationAcceptAction, ElicitationAction, ElicitationContentValue, ElicitationMode,
    ElicitationPropertySchema, ElicitationSchema, MultiSelectItems,
};
use harness_core::action::{FieldKind, FieldName, FormField, FormRequest, FormValues};
use serde_json::Value;

/// Why an elicitation cannot become a portable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported(pub(crate) String);

/// The portable form for an `elicitation/create` request.
///
/// # Errors
/// [`Unsupported`] for URL (or unknown) mode and for schema shapes the portable form
/// cannot represent.
pub(crate) fn form_for(message: &str, mode: &ElicitationMode) -> Result<FormRequest, Unsupported> {
    let schema = match mode {
        ElicitationMode::Form(form) => &form.requested_schema,
        ElicitationMode::Url(_) => {
            return Err(Unsupported(
                "URL-mode elicitation is not supported: only form mode is advertised".to_owned(),
            ));
        }
        _ => {
            return Err(Unsupported(
                "an unknown elicitation mode is not supported".to_owned(),
            ));
        }
    };
    let fields = fields(schema)?;
    let form = FormRequest::new(fields)
        .map_err(|e| Unsupported(format!("the requested schema is not a valid form: {e}")))?;
    let title = schema
        .title
        .clone()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| message.to_owned());
    Ok(if title.trim().is_empty() {
        form
    } else {
        form.with_title(title)
    })
}

fn fields(schema: &ElicitationSchema) -> Result<Vec<FormField>, Unsupported> {
    let required = schema.required.clone().unwrap_or_default();
    if let Some(unknown) = required
        .iter()
        .find(|r| !schema.properties.contains_key(*r))
    {
        return Err(Unsupported(format!(
            "required property `{unknown}` is not defined"
        )));
    }
    schema
        .properties
        .iter()
        .map(|(name, property)| {
            let field_name: FieldName = name.parse().map_err(|_| {
                Unsupported(format!(
                    "property name `{name}` is not a portable form field name"
                ))
            })?;
            let (title, description, kind) = field(name, property)?;
            let mut field = FormField::new(field_name, title.unwrap_or_else(|| name.clone()), kind);
            if let Some(description) = description {
                field = field.with_description(description);
            }
            if required.contains(name) {
                field = field.required();
            }
            Ok(field)
        })
        .collect()
}

type Field = (Option<String>, Option<String>, FieldKind);

fn field(name: &str, property: &ElicitationPropertySchema) -> Result<Field, Unsupported> {
    let unsupported =
        |what: &str| Unsupported(format!("property `{name}`: {what} is not supported"));
    Ok(match property {
        ElicitationPropertySchema::String(s) => {
            if s.format.is_some() {
                return Err(unsupported("a string `format`"));
            }
            let kind = match (&s.enum_values, &s.one_of) {
                (Some(values), None) => FieldKind::choice(values.clone()),
                (None, Some(options)) => FieldKind::choice(options.iter().map(|o| o.value.clone())),
                (Some(_), Some(_)) => return Err(unsupported("both `enum` and `oneOf`")),
                (None, None) => FieldKind::Text {
                    min_length: s.min_length,
                    max_length: s.max_length,
                    pattern: s.pattern.clone(),
                },
            };
            if matches!(kind, FieldKind::Choice { .. })
                && (s.min_length.is_some() || s.max_length.is_some() || s.pattern.is_some())
            {
                return Err(unsupported("a length or pattern on an enumeration"));
            }
            (s.title.clone(), s.description.clone(), kind)
        }
        ElicitationPropertySchema::Number(n) => (
            n.title.clone(),
            n.description.clone(),
            FieldKind::Number {
                minimum: n.minimum,
                maximum: n.maximum,
                integer: false,
            },
        ),
        ElicitationPropertySchema::Integer(n) => {
            #[allow(clippy::cast_precision_loss)] // bounds beyond 2^53 are not meaningful here
            let bound = |b: Option<i64>| b.map(|b| b as f64);
            (
                n.title.clone(),
                n.description.clone(),
                FieldKind::Number {
                    minimum: bound(n.minimum),
                    maximum: bound(n.maximum),
                    integer: true,
                },
            )
        }
        ElicitationPropertySchema::Boolean(b) => {
            (b.title.clone(), b.description.clone(), FieldKind::Boolean)
        }
        ElicitationPropertySchema::Array(a) => {
            if a.min_items.is_some() || a.max_items.is_some() {
                return Err(unsupported("`minItems` / `maxItems`"));
            }
            let options: Vec<String> = match &a.items {
                MultiSelectItems::String(items) => items.values.clone(),
                MultiSelectItems::Titled(items) => {
                    items.options.iter().map(|o| o.value.clone()).collect()
                }
                _ => return Err(unsupported("an array of this item type")),
            };
            (
                a.title.clone(),
                a.description.clone(),
                FieldKind::multi_choice(options),
            )
        }
        _ => return Err(unsupported("this property type")),
    })
}

/// The `accept` answer carrying `values` (null values are left out; whole numbers of
/// integer fields are sent as integers).
pub(crate) fn accept(form: &FormRequest, values: &FormValues) -> ElicitationAction {
    let mut content = BTreeMap::new();
    for (name, value) in values.iter() {
        let integer = form
            .field(name)
            .is_some_and(|f| matches!(f.kind, FieldKind::Number { integer: true, .. }));
        let value = match value {
            Value::Null => continue,
            Value::Number(n) if integer => match n.as_i64() {
                Some(i) => ElicitationContentValue::Integer(i),
                #[allow(clippy::cast_possible_truncation)] // validated as a whole number
                None => ElicitationContentValue::Integer(n.as_f64().unwrap_or_default() as i64),
            },
            other => match serde_json::from_value(other.clone()) {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        content.insert(name.to_owned(), value);
    }
    ElicitationAction::Accept(ElicitationAcceptAction::new().content(content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mode(schema: &Value) -> ElicitationMode {
        serde_json::from_value(json!({
            "mode": "form", "sessionId": "s", "requestedSchema": schema
        }))
        .expect("a form elicitation")
    }

    #[test]
    fn a_form_schema_becomes_a_portable_form() {
        let form = form_for(
            "Who are you?",
            &mode(&json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name", "minLength": 1},
                    "age": {"type": "integer", "minimum": 0},
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                    "ok": {"type": "boolean"}
                },
                "required": ["name"]
            })),
        )
        .expect("supported");
        assert_eq!(form.title(), Some("Who are you?"));
        let name = form.field("name").expect("name");
        assert!(name.required);
        assert_eq!(name.label, "Name");
        assert_eq!(
            form.field("age").expect("age").kind,
            FieldKind::Number {
                minimum: Some(0.0),
                maximum: None,
                integer: true
            }
        );
        assert_eq!(
            form.field("color").expect("color").kind,
            FieldKind::choice(["red", "blue"])
        );
        assert_eq!(
            form.field("tags").expect("tags").kind,
            FieldKind::multi_choice(["a", "b"])
        );
        assert!(!form.field("ok").expect("ok").required);
    }

    #[test]
    fn unrepresentable_shapes_are_unsupported_with_a_reason() {
        for (schema, why) in [
            (
                json!({"properties": {"mail": {"type": "string", "format": "email"}}}),
                "format",
            ),
            (
                json!({"properties": {"2fa": {"type": "string"}}}),
                "field name",
            ),
            (
                json!({"properties": {"x": {"type": "object"}}}),
                "property type",
            ),
            (json!({"properties": {}, "required": ["y"]}), "not defined"),
        ] {
            let err = form_for("m", &mode(&schema)).expect_err("unsupported");
            assert!(err.0.contains(why), "{err:?} should mention {why}");
        }
        let url: ElicitationMode = serde_json::from_value(json!({
            "mode": "url", "sessionId": "s", "elicitationId": "e", "url": "https://example.com"
        }))
        .expect("a url elicitation");
        assert!(form_for("m", &url).expect_err("url").0.contains("URL"));
    }

    #[test]
    fn accepted_values_keep_integers_and_drop_nulls() {
        let form = form_for(
            "m",
            &mode(&json!({"properties": {
                "name": {"type": "string"}, "age": {"type": "integer"}, "x": {"type": "number"}
            }})),
        )
        .expect("supported");
        let values = FormValues::new()
            .with("name", "Ada")
            .with("age", 36.0)
            .with("x", Value::Null);
        let ElicitationAction::Accept(accept) = accept(&form, &values) else {
            panic!("accept");
        };
        let content = accept.content.expect("content");
        assert_eq!(
            content.get("age"),
            Some(&ElicitationContentValue::Integer(36))
        );
        assert_eq!(
            content.get("name"),
            Some(&ElicitationContentValue::String("Ada".to_owned()))
        );
        assert!(!content.contains_key("x"));
    }
}
