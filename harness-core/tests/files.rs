//! Input files through the service: validated and refused before anything runs, handed to
//! the adapter as read handles when its descriptor takes them.

use std::sync::Arc;

use futures_util::StreamExt;
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::event::{Content, RunSucceeded, TextDelta};
use harness_core::file::{InMemoryFileWorkspace, InputFile};
use harness_core::id::{CallerId, Cursor};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};

/// Says, for each file it gets, its name, type, size and first bytes (read on demand).
struct Lister(HarnessDescriptor);
impl Describe for Lister {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}
impl SimpleAdapter for Lister {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        Box::pin(async_stream(run))
    }
}

fn async_stream(run: RunContext) -> impl futures_util::Stream<Item = EventResult> {
    futures_util::stream::once(async move {
        let mut text = String::new();
        for f in &run.turn.files {
            let bytes = f.read().await?;
            text.push_str(&format!(
                "{} {} {} {:?};",
                f.name(),
                f.media_type(),
                f.size(),
                String::from_utf8_lossy(&bytes[..bytes.len().min(4)])
            ));
        }
        Ok::<_, harness_core::error::HarnessError>(text)
    })
    .flat_map(|text| {
        futures_util::stream::iter(match text {
            Ok(text) => vec![
                Ok(AdapterEvent::Content(Content::MessageDelta(
                    TextDelta::new(text),
                ))),
                Ok(AdapterEvent::Completed(RunSucceeded::default())),
            ],
            Err(e) => vec![Err(e)],
        })
    })
}

fn service(images: bool, workspace: Arc<InMemoryFileWorkspace>) -> AdapterService<Simple<Lister>> {
    let mut builder = HarnessDescriptor::builder("lister".parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .capability(CapabilityKey::StreamText, Capability::native())
        .capability(CapabilityKey::InputDocuments, Capability::native());
    if images {
        builder = builder.capability(CapabilityKey::InputImages, Capability::native());
    }
    AdapterService::builder(Simple::new(Lister(builder.build().unwrap())))
        .files(workspace)
        .build()
}

async fn text_of(service: &AdapterService<Simple<Lister>>, request: ExecutionRequest) -> String {
    let execution = service.start(request).await.unwrap();
    let mut text = String::new();
    let mut events = execution.events(Cursor::START);
    while let Some(e) = events.next().await {
        if let harness_core::event::EventPayload::MessageDelta(d) = e.payload() {
            text.push_str(&d.text);
        }
    }
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    text
}

#[tokio::test]
async fn the_adapter_reads_uploaded_and_inline_files_and_nothing_is_refused_silently() {
    let workspace = Arc::new(InMemoryFileWorkspace::new());
    let alice: CallerId = "alice".parse().unwrap();
    let png = b"\x89PNG\r\n\x1a\nrest".to_vec();
    let id = workspace.put(&alice, "dot.png", "image/png".parse().unwrap(), png);
    let with_images = service(true, Arc::clone(&workspace));

    let mut request = ExecutionRequest::new("look");
    request.files = vec![
        InputFile::stored(id.clone()),
        InputFile::inline(
            "n.md",
            "text/markdown".parse().unwrap(),
            b"# notes".to_vec(),
        ),
    ];
    request.extensions.insert(alice.clone());
    let text = text_of(&with_images, request.clone()).await;
    assert_eq!(
        text,
        "dot.png image/png 12 \"\u{fffd}PNG\";n.md text/markdown 7 \"# no\";"
    );

    // Bob cannot use Alice's file: refused before anything runs.
    let mut bobs = request.clone();
    bobs.extensions.insert("bob".parse::<CallerId>().unwrap());
    let err = with_images.start(bobs).await.unwrap_err();
    assert_eq!(err.code().as_str(), "FILE_NOT_FOUND");

    // An adapter without `input.images` refuses the image, naming it.
    let without = service(false, workspace);
    let err = without.start(request).await.unwrap_err();
    assert_eq!(err.code().as_str(), "FILE_MODALITY_UNSUPPORTED");
    assert!(err.message().contains("`dot.png`"), "{}", err.message());
}
