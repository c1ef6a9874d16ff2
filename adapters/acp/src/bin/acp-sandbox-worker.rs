//! `acp-sandbox-worker`: hosts an ACP agent's runtime (the ACP client and the agent) inside
//! the operator's sandbox, and reaches the control plane only over the Sandbox Worker
//! Protocol v1 on its stdin and stdout (`AcpAgent::hosted_by_worker`). The control plane
//! starts it; nobody else should.
//!
//! It logs nothing to stdout (the protocol's): failures go to stderr, which the control
//! plane drains.

use std::process::ExitCode;
use std::sync::Arc;

use harness_core::adapter::HarnessAdapter;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("acp-sandbox-worker: no async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(harness_sandbox::worker::serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        Box::new(|settings| {
            let adapter = harness_acp::adapter_from_settings(&settings)?;
            Ok(Arc::new(adapter) as Arc<dyn HarnessAdapter>)
        }),
    ));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("acp-sandbox-worker: {e:?}");
            ExitCode::FAILURE
        }
    }
}
