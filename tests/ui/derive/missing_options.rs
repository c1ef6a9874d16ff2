use harness::Adapter;
use harness::manifest::{Adapter, HarnessDescriptor};

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    capability("stream.text", native),
)]
struct Echo;

// Code using the derive still compiles: the one error is the missing `options`.
fn descriptor() -> &'static HarnessDescriptor {
    Echo::static_descriptor()
}

fn main() {
    let _ = descriptor;
}
