//! Only an awaiting execution can resolve an action.
use harness::action::{FormResponse, FormValues, Revision};
use harness::id::{ActionId, ExecutionId};
use harness::lifecycle::Execution;

fn main() {
    let running = Execution::queue(ExecutionId::generate()).start().run();
    let response = FormResponse::submit(ActionId::generate(), Revision::FIRST, FormValues::new());
    let _ = running.resolve(response);
}
