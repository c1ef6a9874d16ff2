//! Content is appended only while running or cancelling.
use harness::action::{FormField, FieldKind, FormRequest};
use harness::event::{Content, TextDelta};
use harness::id::{ActionId, ExecutionId};
use harness::lifecycle::Execution;

fn main() {
    let form = FormRequest::new([FormField::new("name".parse().unwrap(), "Name", FieldKind::Boolean)]).unwrap();
    let mut awaiting = Execution::queue(ExecutionId::generate())
        .start()
        .run()
        .request_input(ActionId::generate(), form);
    let _ = awaiting.emit(Content::MessageDelta(TextDelta::new("no")));
}
