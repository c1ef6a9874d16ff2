//! The certification report.

use std::fmt;

use harness_core::capability::CapabilityKey;
use harness_core::manifest::HarnessDescriptor;
use serde::Serialize;

use crate::{Fixture, FixtureOutcome, Group, SUITE_VERSION};

/// One fixture's entry in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FixtureResult {
    /// The fixture id.
    pub id: String,
    /// Its group.
    pub group: Group,
    /// The capabilities it exercises.
    pub capabilities: Vec<CapabilityKey>,
    /// The capabilities this result is evidence for: the fixture's capabilities when it
    /// passed (each was usable for the configuration and the rule held), none otherwise. A
    /// capability claim links to the fixtures that verified it through this list (see
    /// [`Report::verified_by`]).
    pub verifies: Vec<CapabilityKey>,
    /// How it ended.
    pub outcome: FixtureOutcome,
}

impl FixtureResult {
    pub(crate) fn new(fixture: &Fixture, outcome: FixtureOutcome) -> Self {
        let verifies = if matches!(outcome, FixtureOutcome::Passed { .. }) {
            fixture.capabilities.to_vec()
        } else {
            Vec::new()
        };
        Self {
            id: fixture.id.to_owned(),
            group: fixture.group,
            capabilities: fixture.capabilities.to_vec(),
            verifies,
            outcome,
        }
    }
}

/// A certification report: who was certified, by which suite, and every fixture's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The adapter id.
    pub adapter: String,
    /// The adapter's implementation version.
    pub implementation_version: String,
    /// The contract versions the adapter speaks.
    pub contract_versions: Vec<String>,
    /// The suite version ([`SUITE_VERSION`]).
    pub suite_version: String,
    /// What the capability gate decided on: [`GATE_EVALUATED`] (the adapter's `evaluate`
    /// for the knobs' plain request, within its descriptor), or why it fell back to the
    /// descriptor alone.
    pub capability_gate: String,
    /// Every fixture's outcome, in run order.
    pub results: Vec<FixtureResult>,
    /// `conformance:<adapter>:<suite version>:<fnv1a-128 of the canonical JSON of everything
    /// above>`: stable for the same content, different for any other.
    pub evidence_id: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Canonical<'a> {
    adapter: &'a str,
    implementation_version: &'a str,
    contract_versions: &'a [String],
    suite_version: &'a str,
    capability_gate: &'a str,
    results: &'a [FixtureResult],
}

/// [`Report::capability_gate`] when `evaluate` answered: the levels gating the fixtures are
/// those it reports for the knobs' plain request, narrowed to the descriptor's.
pub const GATE_EVALUATED: &str = "evaluate for the plain request, within the descriptor";

impl Report {
    pub(crate) fn new(
        descriptor: &HarnessDescriptor,
        capability_gate: String,
        results: Vec<FixtureResult>,
    ) -> Self {
        let adapter = descriptor.id().as_str().to_owned();
        let implementation_version = descriptor.implementation_version().to_owned();
        let contract_versions: Vec<String> = descriptor
            .contract_versions()
            .iter()
            .map(ToString::to_string)
            .collect();
        let canonical = Canonical {
            adapter: &adapter,
            implementation_version: &implementation_version,
            contract_versions: &contract_versions,
            suite_version: SUITE_VERSION,
            capability_gate: &capability_gate,
            results: &results,
        };
        // Struct fields serialize in declaration order and maps in key order: canonical.
        let json = serde_json::to_vec(&canonical).unwrap_or_default();
        let evidence_id = format!(
            "conformance:{adapter}:{SUITE_VERSION}:{:032x}",
            fnv1a_128(&json)
        );
        Self {
            adapter,
            implementation_version,
            contract_versions,
            suite_version: SUITE_VERSION.to_owned(),
            capability_gate,
            results,
            evidence_id,
        }
    }

    /// Whether no fixture failed.
    #[must_use]
    pub fn passed(&self) -> bool {
        !self.results.iter().any(|r| r.outcome.is_failure())
    }

    /// The failed fixtures.
    pub fn failures(&self) -> impl Iterator<Item = &FixtureResult> {
        self.results.iter().filter(|r| r.outcome.is_failure())
    }

    /// The result of fixture `id`.
    #[must_use]
    pub fn result(&self, id: &str) -> Option<&FixtureResult> {
        self.results.iter().find(|r| r.id == id)
    }

    /// The ids of the fixtures that verified `capability` (passed with it usable), in run
    /// order; empty when none did. Each fixture's evidence is
    /// `<`[`evidence_id`](Self::evidence_id)`>#<fixture id>`.
    ///
    /// ```no_run
    /// # async fn link(report: harness_conformance::Report) {
    /// use harness_core::capability::CapabilityKey;
    /// for id in report.verified_by(CapabilityKey::RuntimeRestart) {
    ///     println!("runtime.restart verified by {}#{id}", report.evidence_id);
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn verified_by(&self, capability: CapabilityKey) -> Vec<&str> {
        self.results
            .iter()
            .filter(|r| r.verifies.contains(&capability))
            .map(|r| r.id.as_str())
            .collect()
    }

    /// Every capability some fixture verified, each with the fixtures that did, in key
    /// order.
    #[must_use]
    pub fn verified(&self) -> std::collections::BTreeMap<CapabilityKey, Vec<&str>> {
        let mut map: std::collections::BTreeMap<CapabilityKey, Vec<&str>> =
            std::collections::BTreeMap::new();
        for r in &self.results {
            for key in &r.verifies {
                map.entry(*key).or_default().push(r.id.as_str());
            }
        }
        map
    }

    /// The report as pretty JSON.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks the report against the one published at `path` (its text form, as `Display`
    /// writes it): the same fixtures with the same outcome statuses, in order. Details (counts,
    /// timings) may differ between runs and are not compared. With the environment variable
    /// `UPDATE_REPORTS=1`, writes the report to `path` instead.
    ///
    /// A published report stays true this way: an outcome that changes fails the test that
    /// certifies the adapter until the report is published again.
    ///
    /// # Errors
    /// A message naming each fixture whose status differs (or that is missing or extra), or
    /// why `path` could not be read or written.
    ///
    /// ```no_run
    /// # async fn certify_it(report: harness_conformance::Report) {
    /// report
    ///     .check_published(std::path::Path::new("conformance/my-adapter.txt"))
    ///     .unwrap_or_else(|drift| panic!("{drift}"));
    /// # }
    /// ```
    pub fn check_published(&self, path: &std::path::Path) -> Result<(), String> {
        if std::env::var_os("UPDATE_REPORTS").is_some_and(|v| v == "1") {
            return std::fs::write(path, format!("{self}\n"))
                .map_err(|e| format!("cannot write {}: {e}", path.display()));
        }
        let published = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read the published report {}: {e} (UPDATE_REPORTS=1 writes it)",
                path.display()
            )
        })?;
        let rows = |text: &str| -> Vec<(String, String)> {
            text.lines()
                .filter_map(|line| {
                    // `id  group  status  detail`: columns apart by two spaces or more.
                    let mut cells = line.split("  ").map(str::trim).filter(|c| !c.is_empty());
                    let id = cells.next()?;
                    let group = cells.next()?;
                    let status = cells.next()?;
                    (group.parse::<u8>().is_ok() && id.contains('.'))
                        .then(|| (id.to_owned(), status.to_owned()))
                })
                .collect()
        };
        let (ours, theirs) = (rows(&self.to_string()), rows(&published));
        if ours == theirs {
            return Ok(());
        }
        let mut drift = Vec::new();
        for (id, status) in &ours {
            match theirs.iter().find(|(other, _)| other == id) {
                Some((_, was)) if was == status => {}
                Some((_, was)) => drift.push(format!("  {id}: published {was}, now {status}")),
                None => drift.push(format!("  {id}: not in the published report, now {status}")),
            }
        }
        for (id, was) in &theirs {
            if !ours.iter().any(|(other, _)| other == id) {
                drift.push(format!("  {id}: published {was}, no longer run"));
            }
        }
        if drift.is_empty() {
            drift.push("  the fixtures' order changed".to_owned());
        }
        Err(format!(
            "the report differs from the one published at {} (UPDATE_REPORTS=1 publishes this \
             one):\n{}\n\n{self}",
            path.display(),
            drift.join("\n")
        ))
    }

    /// Panics, listing every failed fixture with its reason, unless the report passed.
    ///
    /// # Panics
    /// When a fixture failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.passed() {
            let list: Vec<String> = self
                .failures()
                .map(|r| format!("  {}: {}", r.id, r.outcome.detail()))
                .collect();
            panic!(
                "adapter {} failed conformance suite {}:\n{}\n\n{self}",
                self.adapter,
                self.suite_version,
                list.join("\n")
            );
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance report: adapter {} {} | contract {} | suite {}",
            self.adapter,
            self.implementation_version,
            self.contract_versions.join(","),
            self.suite_version
        )?;
        writeln!(f, "evidence: {}", self.evidence_id)?;
        writeln!(f, "capabilities gated on: {}", self.capability_gate)?;
        let id_width = self.results.iter().map(|r| r.id.len()).max().unwrap_or(2);
        writeln!(
            f,
            "{:<id_width$}  {:>2}  {:<31}  detail",
            "fixture", "gr", "outcome"
        )?;
        for r in &self.results {
            writeln!(
                f,
                "{:<id_width$}  {:>2}  {:<31}  {}",
                r.id,
                r.group.number(),
                r.outcome.status(),
                r.outcome.detail()
            )?;
        }
        // One line per verified capability, single-spaced (the table's rows alone are
        // compared by `check_published`).
        for (key, ids) in self.verified() {
            writeln!(f, "verified {} by {}", key.as_str(), ids.join(", "))?;
        }
        let count = |status: &str| {
            self.results
                .iter()
                .filter(|r| r.outcome.status() == status)
                .count()
        };
        write!(
            f,
            "{} fixtures: {} passed, {} refused at preflight, {} not exercised, {} FAILED",
            self.results.len(),
            count("passed"),
            count("refused at preflight (declared)"),
            count("not exercised"),
            count("FAILED")
        )
    }
}

/// FNV-1a, 128 bits.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, b| {
        (hash ^ u128::from(*b)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::{FixtureResult, Report, fnv1a_128};
    use crate::{FixtureOutcome, Group};

    fn report(outcomes: &[(&str, FixtureOutcome)]) -> Report {
        Report {
            adapter: "test".into(),
            implementation_version: "0.1.0".into(),
            contract_versions: vec!["1".into()],
            suite_version: "0.1.0".into(),
            capability_gate: "test".into(),
            results: outcomes
                .iter()
                .map(|(id, outcome)| FixtureResult {
                    id: (*id).to_owned(),
                    group: Group::Streaming,
                    capabilities: Vec::new(),
                    verifies: Vec::new(),
                    outcome: outcome.clone(),
                })
                .collect(),
            evidence_id: "conformance:test".into(),
        }
    }

    fn passed(evidence: &str) -> FixtureOutcome {
        FixtureOutcome::Passed {
            evidence: evidence.into(),
        }
    }

    #[test]
    fn a_published_report_matches_on_statuses_and_names_each_drift() {
        let dir = std::env::temp_dir().join(format!("harness-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.txt");
        let published = report(&[
            ("stream.text", passed("2 message.delta")),
            (
                "stream.usage",
                FixtureOutcome::NotExercised {
                    reason: "no".into(),
                },
            ),
        ]);
        std::fs::write(&path, format!("{published}\n")).unwrap();

        // Other details (counts vary between runs of a real harness): still the same.
        let rerun = report(&[
            ("stream.text", passed("5 message.delta")),
            (
                "stream.usage",
                FixtureOutcome::NotExercised {
                    reason: "no".into(),
                },
            ),
        ]);
        assert_eq!(rerun.check_published(&path), Ok(()));

        let changed = report(&[
            (
                "stream.text",
                FixtureOutcome::Failed {
                    reason: "gap".into(),
                },
            ),
            ("stream.reasoning", passed("1 reasoning.delta")),
        ]);
        let drift = changed.check_published(&path).unwrap_err();
        assert!(
            drift.contains("stream.text: published passed, now FAILED"),
            "{drift}"
        );
        assert!(
            drift.contains("stream.reasoning: not in the published report"),
            "{drift}"
        );
        assert!(
            drift.contains("stream.usage: published not exercised, no longer run"),
            "{drift}"
        );

        let missing = changed
            .check_published(&dir.join("absent.txt"))
            .unwrap_err();
        assert!(missing.contains("UPDATE_REPORTS=1"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_passed_fixture_verifies_its_capabilities_and_no_other_outcome_does() {
        use crate::Fixture;
        use harness_core::capability::CapabilityKey as K;
        let fixture = Fixture {
            id: "session.restart",
            group: Group::Sessions,
            capabilities: &[K::RuntimeRestart],
            rule: "restart",
        };
        let passed = FixtureResult::new(&fixture, passed("ok"));
        let failed = FixtureResult::new(
            &fixture,
            FixtureOutcome::Failed {
                reason: "no".into(),
            },
        );
        assert_eq!(passed.verifies, vec![K::RuntimeRestart]);
        assert!(failed.verifies.is_empty());
        let mut report = report(&[]);
        report.results = vec![passed, failed];
        assert_eq!(
            report.verified_by(K::RuntimeRestart),
            vec!["session.restart"]
        );
        assert!(report.verified_by(K::StreamText).is_empty());
        let text = report.to_string();
        assert!(
            text.contains("verified runtime.restart by session.restart"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(
            json["results"][0]["verifies"],
            serde_json::json!(["runtime.restart"])
        );
    }

    #[test]
    fn fnv1a_128_matches_the_reference_vectors() {
        assert_eq!(fnv1a_128(b""), 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }
}
