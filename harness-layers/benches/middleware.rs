//! The cost of the portable middleware per tool call, single thread:
//! `cargo bench -p harness-layers --bench middleware`.
//!
//! One tool (`weather.now`, a small object schema) called through a `ToolHandle` without a
//! policy, and through one with a realistic one: 20 tool rules (exact ids and globs such as
//! `fs.*`, `*delete*`, `mcp.*.admin_?`; the tool matches none and falls to the default), an
//! argument cap and one rewrite that applies to the tool (a field set, one removed), a
//! result cap, and result redaction by the project's redactor (two secrets, two patterns,
//! one of which matches the result). The calls run side by side in one process,
//! alternating the two handles in rounds so that drift in the machine's speed hits both;
//! each row is the median over the rounds. The aim is under 5 µs added per call; the last
//! line says PASS or OVER.
//!
//! Also: the per-tool decision (`PortableMiddlewarePolicy::decide`, made once per tool
//! per execution when the service builds the handles, and per permission request by the
//! ACP adapter) over the same 20 rules.
//!
//! Measured on the development machine (2 shared cores, release profile): without policy
//! 1.1 µs/call, with the policy 2.3 µs/call, **delta 1.2 µs/call** (PASS); `decide` over the
//! 20 rules 0.07 to 0.13 µs. Each call's time includes making its two ids; the delta is the argument
//! count and rewrite, the redaction of the result and its size count: the rule matching is
//! not on the call path at all (a handle keeps its tool's decision).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_core::id::{ExecutionId, ToolCallId};
use harness_core::middleware::MiddlewareConfig;
use harness_core::tool::{
    BoxFuture, PortableTool, ToolCallContext, ToolDescriptor, ToolHandle, ToolOutcome,
};
use serde_json::{Value, json};

const AIM: Duration = Duration::from_micros(5);
const CALLS_PER_ROUND: u32 = 20_000;
const ROUNDS: usize = 15;

struct Weather(ToolDescriptor);

impl PortableTool for Weather {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.0
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            ToolOutcome::Success(json!({
                "city": arguments["city"],
                "forecast": "sunny, 21 °C, wind 12 km/h from the north-west",
                "station": "internal key sk-station-0042 (do not share)",
                "readings": [20.5, 21.0, 21.3, 20.9],
            }))
        })
    }
}

fn config() -> MiddlewareConfig {
    let mut tools = vec![
        json!({"tool": "fs.read", "action": "allow"}),
        json!({"tool": "fs.*", "action": "deny"}),
        json!({"tool": "*delete*", "action": "require_approval"}),
        json!({"tool": "shell.exec", "action": "deny"}),
        json!({"tool": "mcp.*.admin_?", "action": "deny"}),
        json!({"tool": "github.create_*", "action": "require_approval"}),
        json!({"tool": "*.drop_table", "action": "deny"}),
        json!({"tool": "payments.*", "action": "require_approval"}),
    ];
    for i in 0..12 {
        tools.push(json!({"tool": format!("crm.tool_{i}"), "action": "allow"}));
    }
    serde_json::from_value(json!({
        "tools": tools,
        "arguments": {
            "maxBytes": 16384,
            "rewrite": [{"tool": "weather.*", "set": {"units": "metric"}, "remove": ["debug"]}]
        },
        "results": {
            "maxBytes": 65536,
            "redact": {
                "secrets": ["hunter2-db-password", "0123456789abcdef0123"],
                "patterns": {"station_key": "sk-station-[0-9]{4}", "ticket": "TCK-[0-9]{6}"}
            }
        },
        "limits": {"maxToolCalls": 50, "maxModelTurns": 20}
    }))
    .expect("the bench's configuration")
}

fn per_call(handle: &ToolHandle, arguments: &Value) -> Duration {
    let started = Instant::now();
    for _ in 0..CALLS_PER_ROUND {
        let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
        let outcome = futures_util::FutureExt::now_or_never(handle.invoke(arguments.clone(), ctx))
            .expect("the tool is ready at once");
        black_box(outcome);
    }
    started.elapsed() / CALLS_PER_ROUND
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let descriptor = ToolDescriptor::new(
        "weather.now".parse().unwrap(),
        "Current weather.",
        json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
            "required": ["city"]
        }),
    )
    .unwrap();
    let tool: Arc<dyn PortableTool> = Arc::new(Weather(descriptor));
    let policy = harness_layers::middleware::compile(&config()).expect("compiles");
    let plain = ToolHandle::new(Arc::clone(&tool));
    let governed = ToolHandle::new(tool).with_middleware(&policy);
    let arguments = json!({"city": "Lisbon", "debug": true});

    // The policy does what it says on this call (else the bench measures nothing).
    let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
    let ToolOutcome::Success(out) =
        futures_util::FutureExt::now_or_never(governed.invoke(arguments.clone(), ctx)).unwrap()
    else {
        panic!("the governed call failed")
    };
    assert!(out.to_string().contains("[REDACTED:station_key]"), "{out}");

    // Warm up both.
    per_call(&plain, &arguments);
    per_call(&governed, &arguments);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        without.push(per_call(&plain, &arguments));
        with.push(per_call(&governed, &arguments));
    }
    let (without, with) = (median(without), median(with));
    let delta = with.saturating_sub(without);

    let started = Instant::now();
    let n = 200_000u32;
    for i in 0..n {
        let id = if i % 2 == 0 {
            "weather.now"
        } else {
            "fs.write"
        };
        black_box(policy.decide(black_box(id)));
    }
    let decide = started.elapsed() / n;

    println!(
        "tool call without policy   {:>9.3} µs/call",
        micros(without)
    );
    println!("tool call with the policy  {:>9.3} µs/call", micros(with));
    println!(
        "delta per call             {:>9.3} µs/call   (aim < {} µs): {}",
        micros(delta),
        AIM.as_micros(),
        if delta < AIM { "PASS" } else { "OVER" }
    );
    println!(
        "decide (20 rules)          {:>9.3} µs/decision",
        micros(decide)
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
