//! An older reader reads a newer writer's events and descriptor (a rolling upgrade: a replica
//! one minor release behind reads what one ahead stored), from the committed fixture
//! `tests/fixtures/newer-writer/` (see its README), and writes back what it kept.

use std::path::PathBuf;

use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::manifest::HarnessDescriptor;
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/newer-writer")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Removes the field at `pointer` (`/a/b/c`) from `value`, which must hold it.
fn remove(value: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let removed = value
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .and_then(|o| o.remove(key));
    assert!(removed.is_some(), "the fixture has no {pointer}");
}

/// Sorted: the order of a JSON object's keys depends on serde_json's features.
fn sorted<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = keys.collect();
    keys.sort_unstable();
    keys
}

/// The fields deeper than the top level of `data`: read past, not written back.
const DROPPED: &[&str] = &[
    "/5/data/outcome/durationMs",
    "/6/data/kind/layout",
    "/8/data/error/hint",
];

#[test]
fn an_older_reader_reads_a_newer_writers_events_and_keeps_two_levels() {
    let text = fixture("events.json");
    // The one-pass reader over text (how a store reads a row) and over a value agree.
    let events: Vec<Event> = serde_json::from_str(&text).unwrap();
    let written: Value = serde_json::from_str(&text).unwrap();
    let via_value: Vec<Event> = serde_json::from_value(written.clone()).unwrap();
    assert_eq!(events, via_value);

    let kinds: Vec<EventKind> = events.iter().map(Event::kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::RunQueued,
            EventKind::RunRunning,
            EventKind::MessageDelta,
            EventKind::Usage,
            EventKind::ToolCallStarted,
            EventKind::ToolCallCompleted,
            EventKind::ActionRequested,
            EventKind::Native,
            EventKind::RunFailed,
        ]
    );
    // What this version knows reads as it always did.
    let EventPayload::MessageDelta(delta) = events[2].payload() else {
        panic!("{:?}", events[2]);
    };
    assert_eq!(delta.text, "Hel");
    let EventPayload::Usage(usage) = events[3].payload() else {
        panic!("{:?}", events[3]);
    };
    assert_eq!((usage.input_tokens, usage.output_tokens), (3, 4));
    assert!(events[8].payload().is_terminal());

    // The envelope and the top level of `data` are kept.
    assert_eq!(
        events[0].unknown_envelope_fields().get("replica"),
        Some(&json!({"zone": "b", "build": 7}))
    );
    assert!(events[1].unknown_envelope_fields().is_empty());
    assert!(events[1].unknown_data_fields().is_empty());
    assert_eq!(
        events[2].unknown_data_fields().get("lang"),
        Some(&json!("en"))
    );
    assert_eq!(
        events[3].unknown_data_fields().get("cacheWriteTokens"),
        Some(&json!(2))
    );
    let kept: Vec<(usize, Vec<&str>, Vec<&str>)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            (
                i,
                sorted(e.unknown_envelope_fields().keys()),
                sorted(e.unknown_data_fields().keys()),
            )
        })
        .filter(|(_, envelope, data)| !envelope.is_empty() || !data.is_empty())
        .collect();
    assert_eq!(
        kept,
        [
            (0, vec!["replica", "traceId"], vec![]),
            (2, vec!["traceId"], vec!["lang"]),
            (3, vec![], vec!["cacheWriteTokens"]),
            (4, vec![], vec!["server"]),
            (5, vec![], vec!["attempt"]),
            (6, vec![], vec!["priority"]),
            (7, vec![], vec!["schemaVersion"]),
            (8, vec!["traceId"], vec!["failedAt"]),
        ]
    );

    // Written back (an older replica serving them): exactly what was written, less the
    // deeper fields.
    let mut expected = written;
    for pointer in DROPPED {
        remove(&mut expected, pointer);
    }
    assert_eq!(serde_json::to_value(&events).unwrap(), expected);
    // And reading that back changes nothing.
    let again: Vec<Event> = serde_json::from_str(&serde_json::to_string(&events).unwrap()).unwrap();
    assert_eq!(again, events);
}

#[test]
fn an_event_this_version_wrote_keeps_nothing_extra() {
    let text = fixture("events.json");
    let events: Vec<Event> = serde_json::from_str(&text).unwrap();
    for e in &events {
        let fresh = Event::new(
            e.execution_id().clone(),
            e.seq(),
            e.time(),
            e.payload().clone(),
        );
        assert!(fresh.unknown_envelope_fields().is_empty());
        assert!(fresh.unknown_data_fields().is_empty());
        let wire = serde_json::to_value(&fresh).unwrap();
        for key in ["traceId", "replica"] {
            assert!(wire.get(key).is_none(), "{wire}");
        }
        // A kept field makes the event differ from the one rebuilt without it.
        let has_kept =
            !e.unknown_envelope_fields().is_empty() || !e.unknown_data_fields().is_empty();
        assert_eq!(&fresh == e, !has_kept, "{wire}");
    }
}

#[test]
fn an_older_reader_reads_a_newer_writers_descriptor_and_keeps_its_fields() {
    let text = fixture("descriptor.json");
    let written: Value = serde_json::from_str(&text).unwrap();
    let descriptor: HarnessDescriptor = serde_json::from_str(&text).unwrap();
    assert_eq!(descriptor.id().as_str(), "scripted");
    assert_eq!(
        descriptor.unknown_fields().keys().collect::<Vec<_>>(),
        ["provenance"]
    );
    let text_cap = descriptor
        .capabilities()
        .get(harness_core::capability::CapabilityKey::StreamText);
    assert_eq!(
        text_cap.unknown_fields().get("verifiedAt"),
        Some(&json!("2026-12-01"))
    );
    // Passed on (a registry serving it), it is what the newer writer wrote, at every level.
    assert_eq!(serde_json::to_value(&descriptor).unwrap(), written);
    let again: HarnessDescriptor =
        serde_json::from_value(serde_json::to_value(&descriptor).unwrap()).unwrap();
    assert_eq!(again, descriptor);
}

#[test]
fn a_newer_writers_form_field_is_refused() {
    // Form fields are also an operator's vocabulary (a scripted adapter's script), so closed:
    // see `harness_core::wire`.
    let mut written: Value = serde_json::from_str(&fixture("events.json")).unwrap();
    written[6]["data"]["kind"]["fields"][0]["placeholder"] = json!("ada@example.com");
    let err = serde_json::from_value::<Event>(written[6].clone()).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `placeholder`"),
        "{err}"
    );
}

#[test]
fn a_newer_writers_execution_mode_field_is_still_refused() {
    // The one exception: the execution mode says what the adapter can reach.
    let mut written: Value = serde_json::from_str(&fixture("descriptor.json")).unwrap();
    written["executionMode"]["hostNetwork"] = json!(true);
    let err = serde_json::from_value::<HarnessDescriptor>(written).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `hostNetwork`"),
        "{err}"
    );
}
