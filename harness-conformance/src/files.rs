//! Group 8, file modalities and limits: an image and a document are accepted and read by the
//! adapter after validation; a file too large, one whose content is not its declared type,
//! and too many files are refused before anything runs, each with its code, naming the file.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use harness_core::adapter::BoxFuture;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::file::{
    FileHandle, FileId, FileLimits, FileSource, FileWorkspace, InputFile, StoredFile,
};
use harness_core::id::CallerId;
use harness_core::service::{ExecutionRequest, Outcome};

use crate::Knobs;
use crate::probe;

/// A 1×1 PNG.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\xff\xff?\0\x05\xfe\x02\xfe\xa7\x35\x81\x84\0\0\0\0IEND\xaeB`\x82";
const NOTES: &[u8] = b"# Conformance notes\n\nThe harness reads this document.\n";

/// Bytes that count their reads.
struct Counted(Arc<[u8]>, Arc<AtomicUsize>);

impl FileSource for Counted {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>> {
        self.1.fetch_add(1, SeqCst);
        let bytes = Arc::clone(&self.0);
        Box::pin(async move { Ok(bytes) })
    }
}

/// A workspace of two files whose reads are counted.
struct Counting {
    files: Vec<(FileId, StoredFile, Arc<AtomicUsize>)>,
}

impl Counting {
    fn new(files: &[(&str, &str, &[u8])]) -> Self {
        let files = files
            .iter()
            .map(|(name, media_type, bytes)| {
                let reads = Arc::new(AtomicUsize::new(0));
                let stored = StoredFile {
                    name: (*name).to_owned(),
                    media_type: media_type.parse().expect("a media type"),
                    handle: FileHandle::new(Counted(bytes.to_vec().into(), Arc::clone(&reads))),
                };
                (FileId::generate(), stored, reads)
            })
            .collect();
        Self { files }
    }
}

impl FileWorkspace for Counting {
    fn open<'a>(
        &'a self,
        _caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<StoredFile>, HarnessError>> {
        let found = self
            .files
            .iter()
            .find(|(i, ..)| i == id)
            .map(|(_, f, _)| f.clone());
        Box::pin(async move { Ok(found) })
    }
}

fn with_files(mut request: ExecutionRequest, files: Vec<InputFile>) -> ExecutionRequest {
    request.files = files;
    request
}

fn inline(name: &str, media_type: &str, bytes: &[u8]) -> InputFile {
    InputFile::inline(
        name,
        media_type.parse().expect("a media type"),
        bytes.to_vec(),
    )
}

/// The fixture: `request` is one the adapter runs to success.
pub(crate) async fn modalities<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
) -> Result<String, String> {
    let b = knobs.bounds();
    let workspace = Arc::new(Counting::new(&[
        ("pixel.png", "image/png", PNG),
        ("notes.md", "text/markdown", NOTES),
    ]));
    let files = workspace
        .files
        .iter()
        .map(|(id, ..)| InputFile::stored(id.clone()))
        .collect();
    let service = probe::builder(knobs.adapter(), b)
        .files(Arc::clone(&workspace) as Arc<dyn FileWorkspace>)
        .build();
    let obs = probe::run_to_end(&service, with_files(request.clone(), files), b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "a run with an image and a document did not succeed: {}",
            obs.ended()
        ));
    }
    for (_, file, reads) in &workspace.files {
        // Once by the engine's validation; the adapter reads again to hand the bytes over.
        if reads.load(SeqCst) < 2 {
            return Err(format!(
                "file `{}` was accepted but never read by the adapter: a file dropped silently",
                file.name
            ));
        }
    }

    let refusals: [(&str, FileLimits, Vec<InputFile>, &str); 3] = [
        (
            "FILE_TOO_LARGE",
            FileLimits {
                max_file_bytes: 32,
                ..FileLimits::default()
            },
            vec![inline("large.md", "text/markdown", NOTES)],
            "large.md",
        ),
        (
            "FILE_TYPE_MISMATCH",
            FileLimits::default(),
            vec![inline("fake.png", "image/png", NOTES)],
            "fake.png",
        ),
        (
            "FILES_TOO_MANY",
            FileLimits {
                max_files: 1,
                ..FileLimits::default()
            },
            vec![
                inline("a.png", "image/png", PNG),
                inline("b.png", "image/png", PNG),
            ],
            "2 files",
        ),
    ];
    let mut refused = Vec::new();
    for (code, limits, files, names) in refusals {
        let service = probe::builder(knobs.adapter(), b)
            .file_limits(limits)
            .build();
        match service.start(with_files(request.clone(), files)).await {
            Ok(execution) => {
                execution.cancel(harness_core::event::CancelReason::new(
                    "conformance: should have been refused",
                ));
                return Err(format!("a request that should be refused {code} started"));
            }
            Err(e)
                if e.code().as_str() == code
                    && e.category() == ErrorCategory::Configuration
                    && e.message().contains(names) =>
            {
                refused.push(code);
            }
            Err(e) => {
                return Err(format!(
                    "expected a configuration refusal {code} naming {names}, got {} {}: {}",
                    e.category(),
                    e.code(),
                    e.message()
                ));
            }
        }
    }
    Ok(format!(
        "image/png and text/markdown accepted and read by the adapter after validation, \
         run.succeeded; refused before anything ran: {}",
        refused.join(", ")
    ))
}
