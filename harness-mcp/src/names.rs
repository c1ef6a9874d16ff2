//! MCP tool names as tool ids: `<server>.<segment>`, the segment made from the server's
//! name for the tool, stable for a given list of names.

use harness_core::tool::{TOOL_ID_MAX_LEN, ToolId};

/// The ids of `names` (a server's tool names, in the order given) under `server`: each
/// name lowercased, `camelCase` split with `_`, every character outside `[a-z0-9_]` made
/// `_`, runs of `_` collapsed, a leading digit or an empty result prefixed with `t`, cut to
/// fit; names that end up alike get `_2`, `_3`, ... in the order of their original names
/// (so the same list always gives the same ids).
pub(crate) fn tool_ids(server: &str, names: &[&str]) -> Vec<ToolId> {
    let room = TOOL_ID_MAX_LEN - server.len() - 1;
    let base: Vec<String> = names
        .iter()
        .map(|n| segment(n, room.saturating_sub(4)))
        .collect();
    // Number clashes in the order of the original names.
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| names[i]);
    let mut taken = std::collections::BTreeSet::new();
    let mut chosen = vec![String::new(); names.len()];
    for i in order {
        let mut candidate = base[i].clone();
        let mut n = 2;
        while !taken.insert(candidate.clone()) {
            candidate = format!("{}_{n}", base[i]);
            n += 1;
        }
        chosen[i] = candidate;
    }
    chosen
        .into_iter()
        .map(|s| {
            format!("{server}.{s}")
                .parse()
                .unwrap_or_else(|_| format!("{server}.tool").parse().expect("a valid id"))
        })
        .collect()
}

fn segment(name: &str, max: usize) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else {
            out.push('_');
            previous_lower = false;
        }
    }
    let mut collapsed = String::with_capacity(out.len());
    for c in out.chars() {
        if c == '_' && (collapsed.is_empty() || collapsed.ends_with('_')) {
            continue;
        }
        collapsed.push(c);
    }
    while collapsed.ends_with('_') {
        collapsed.pop();
    }
    if collapsed.is_empty() || collapsed.starts_with(|c: char| c.is_ascii_digit()) {
        collapsed.insert(0, 't');
    }
    collapsed.truncate(max.max(1));
    while collapsed.ends_with('_') {
        collapsed.pop();
    }
    collapsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        tool_ids("srv", names)
            .into_iter()
            .map(|i| i.to_string())
            .collect()
    }

    #[test]
    fn names_become_segments() {
        assert_eq!(
            ids(&[
                "echo",
                "get-sum",
                "getTinyImage",
                "trigger-long-running-operation",
                "9lives",
                "!!!",
                "ÄÖ"
            ]),
            [
                "srv.echo",
                "srv.get_sum",
                "srv.get_tiny_image",
                "srv.trigger_long_running_operation",
                "srv.t9lives",
                "srv.t",
                "srv.t_2"
            ]
        );
    }

    #[test]
    fn clashes_are_numbered_by_name_order_whatever_the_listing_order() {
        let a = ids(&["get-sum", "get_sum", "getSum"]);
        assert_eq!(a, ["srv.get_sum", "srv.get_sum_3", "srv.get_sum_2"]);
        let b = ids(&["getSum", "get_sum", "get-sum"]);
        assert_eq!(b, ["srv.get_sum_2", "srv.get_sum_3", "srv.get_sum"]);
    }

    #[test]
    fn long_names_fit_an_id() {
        let long = "x".repeat(500);
        let id = &tool_ids("srv", &[&long, &long])[1];
        assert!(id.as_str().len() <= TOOL_ID_MAX_LEN);
        assert!(ToolId::is_valid(id.as_str()));
    }
}
