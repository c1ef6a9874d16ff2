#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

pub mod health;
pub mod logging;
pub mod names;
pub mod otlp;
pub mod prometheus;

use harness_layers::metrics::names as execution;

/// The metric catalog as a Markdown table (name, type, unit, labels, meaning; one line each):
/// every metric of [`harness_layers::metrics::names::CATALOG`], then the health gauges of
/// [`names::CATALOG`]. The README's table is this text (a test keeps them in sync).
#[must_use]
pub fn catalog_table() -> String {
    let mut rows = vec![
        "| name | type | unit | labels | meaning |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    let row = |name: &str, kind: &str, unit: metrics::Unit, labels: &[&str], help: &str| {
        let labels = if labels.is_empty() {
            "none".to_owned()
        } else {
            labels.join(", ")
        };
        format!(
            "| `{name}` | {kind} | {} | {labels} | {help} |",
            unit.as_str()
        )
    };
    for def in execution::CATALOG {
        rows.push(row(
            def.name,
            def.metric_type.as_str(),
            def.unit,
            def.labels,
            def.help,
        ));
    }
    for def in names::CATALOG {
        rows.push(row(def.name, "gauge", def.unit, def.labels, def.help));
    }
    rows.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_catalog_is_the_catalog() {
        let readme = include_str!("../README.md");
        let table = super::catalog_table();
        let start = readme
            .find("<!-- catalog:start -->\n")
            .expect("the README marks its catalog")
            + "<!-- catalog:start -->\n".len();
        let end = readme[start..]
            .find("<!-- catalog:end -->")
            .expect("the README marks the end of its catalog")
            + start;
        assert_eq!(
            &readme[start..end],
            table,
            "the README's catalog is stale; replace it with:\n{table}"
        );
    }
}
