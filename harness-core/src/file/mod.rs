//! Input files: what a request gives ([`InputFile`]), what the engine checks
//! ([`FileLimits`], by content), what adapters get ([`ValidatedInputFile`], a read handle),
//! and where uploaded files come from ([`FileWorkspace`]).
//!
//! # What happens when...
//!
//! - **a request gives files**: before anything runs, the service resolves each one (an
//!   uploaded file through its [`FileWorkspace`], in the caller's scope; an inline one from
//!   its bytes), checks count, size and total size against the operator's [`FileLimits`]
//!   (sizes before any byte is read), then reads each file once and decides its type by its
//!   content ([`sniff`]): PNG, JPEG, GIF, WebP, PDF by their magic bytes, and text (UTF-8
//!   without control characters) as `text/plain`, `text/markdown` or `application/json` as
//!   declared (JSON must parse). Then each file must be a modality the adapter declares
//!   usable (`input.images`, `input.documents`) within that capability's constraints
//!   ([`MEDIA_TYPES`], [`MAX_BYTES`], [`MAX_FILES`]). Any failure refuses the request with a
//!   `configuration` error naming the file and what would be right; nothing is dropped.
//! - **an adapter reads a file**: it gets [`ValidatedInputFile`]s in
//!   [`TurnInput::files`](crate::adapter::TurnInput::files): name, media type by content,
//!   size, and [`ValidatedInputFile::read`], which fetches the bytes on demand. No host path
//!   ever reaches an adapter.
//! - **an uploaded file is someone else's**: the workspace answers `None` for it, and the
//!   request is refused `FILE_NOT_FOUND`, the same as for an id that never existed.
//!
//! Decisions where the spec is silent:
//! - The content decides the type; a declared type that contradicts it is refused
//!   (`FILE_TYPE_MISMATCH`) rather than corrected, so a caller learns its mistake. The name
//!   (its extension) plays no part.
//! - Text is a document. Other `text/*` types (HTML, CSV) are refused: what a model makes of
//!   them varies, and an operator can allow them later without breaking callers.
//! - Validation reads each file once and keeps nothing: the adapter reads again when it
//!   needs the bytes, so a turn holds no file in memory that its adapter does not use.
//!   Workspaces serve immutable bytes; a read whose length differs from the validated size
//!   fails (`FILE_NOT_FOUND`) rather than hand unvalidated bytes over.
//!
//! ```
//! use harness_core::file::{FileKind, FileLimits, InputFile, validate};
//! use harness_core::id::CallerId;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let png = InputFile::inline("dot.png", "image/png".parse().unwrap(), b"\x89PNG\r\n\x1a\n....".to_vec());
//! let files = validate(&[png], &CallerId::ANONYMOUS, None, &FileLimits::default()).await.unwrap();
//! assert_eq!(files[0].kind(), FileKind::Image);
//!
//! let lying = InputFile::inline("notes.png", "image/png".parse().unwrap(), b"just text".to_vec());
//! let err = validate(&[lying], &CallerId::ANONYMOUS, None, &FileLimits::default()).await.unwrap_err();
//! assert_eq!(err.code().as_str(), "FILE_TYPE_MISMATCH");
//! # });
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::artifact::MediaType;
use crate::boxed::BoxFuture;
use crate::capability::{CapabilityKey, CapabilityReport};
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::CallerId;

crate::id::opaque_id!(
    /// The id of an uploaded file, unique within its workspace (and meaningful only to the
    /// caller that uploaded it).
    FileId,
    "file id",
    "The id of an uploaded file.",
    "file"
);

/// The default [`FileLimits::max_file_bytes`]: 20 MiB, what the model providers take for
/// one image.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// The default [`FileLimits::max_files`].
pub const DEFAULT_MAX_FILES: usize = 10;
/// The default [`FileLimits::max_total_bytes`]: 50 MiB.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 50 * 1024 * 1024;

/// The constraint of `input.images` and `input.documents` listing the media types the adapter
/// takes (an array of strings); absent: every type the engine validates for that modality.
pub const MEDIA_TYPES: &str = "mediaTypes";
/// The constraint of `input.images` and `input.documents` bounding one file's bytes.
pub const MAX_BYTES: &str = "maxBytes";
/// The constraint of `input.images` and `input.documents` bounding the files of that modality
/// in one request.
pub const MAX_FILES: &str = "maxFiles";

/// The image types the engine recognizes by content.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
/// The document types the engine recognizes by content.
pub const DOCUMENT_TYPES: [&str; 4] = [
    "application/pdf",
    "text/plain",
    "text/markdown",
    "application/json",
];

/// A file in a request: an uploaded file by id, or (small) bytes inline. Wire form:
/// `{"fileId": "file_..."}` or `{"name": "...", "mediaType": "...", "data": "<base64>"}`
/// (standard alphabet, padded).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "InputFileWire", into = "InputFileWire")]
#[schemars(with = "InputFileWire")]
pub enum InputFile {
    /// An uploaded file, resolved in the caller's scope.
    Stored {
        /// Its id.
        file_id: FileId,
    },
    /// Bytes given in the request.
    Inline {
        /// Display name.
        name: String,
        /// Declared media type (the content decides; see the [module docs](self)).
        media_type: MediaType,
        /// The bytes.
        data: Arc<[u8]>,
    },
}

impl InputFile {
    /// An uploaded file.
    #[must_use]
    pub fn stored(file_id: FileId) -> Self {
        Self::Stored { file_id }
    }

    /// A file given inline.
    ///
    /// ```
    /// use harness_core::file::InputFile;
    /// let inline: InputFile = serde_json::from_str(
    ///     r#"{"name": "a.txt", "mediaType": "text/plain", "data": "aGk="}"#).unwrap();
    /// assert_eq!(inline, InputFile::inline("a.txt", "text/plain".parse().unwrap(), b"hi".to_vec()));
    /// let err = serde_json::from_str::<InputFile>(r#"{"name": "a.txt"}"#).unwrap_err();
    /// assert!(err.to_string().contains("either `fileId`"));
    /// ```
    #[must_use]
    pub fn inline(
        name: impl Into<String>,
        media_type: MediaType,
        data: impl Into<Arc<[u8]>>,
    ) -> Self {
        Self::Inline {
            name: name.into(),
            media_type,
            data: data.into(),
        }
    }

    /// How errors name it: the inline name, or the uploaded file's id.
    fn label(&self) -> String {
        match self {
            Self::Stored { file_id } => format!("`{file_id}`"),
            Self::Inline { name, .. } => {
                format!("`{}`", name.chars().take(120).collect::<String>())
            }
        }
    }
}

impl fmt::Debug for InputFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stored { file_id } => f.debug_struct("Stored").field("file_id", file_id).finish(),
            Self::Inline {
                name,
                media_type,
                data,
            } => f
                .debug_struct("Inline")
                .field("name", name)
                .field("media_type", media_type)
                .field("bytes", &data.len())
                .finish(),
        }
    }
}

/// An input file: an uploaded file's id, or a name, a declared media type and the bytes in
/// base64.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "InputFile")]
struct InputFileWire {
    /// An uploaded file's id (in the service's file workspace); alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file_id: Option<FileId>,
    /// The inline file's display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// The inline file's declared media type; its content decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<MediaType>,
    /// The inline file's bytes, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
}

impl TryFrom<InputFileWire> for InputFile {
    type Error = String;
    fn try_from(w: InputFileWire) -> Result<Self, String> {
        match w {
            InputFileWire {
                file_id: Some(file_id),
                name: None,
                media_type: None,
                data: None,
            } => Ok(Self::Stored { file_id }),
            InputFileWire {
                file_id: None,
                name: Some(name),
                media_type: Some(media_type),
                data: Some(data),
            } => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.as_bytes())
                    .map_err(|e| {
                        format!(
                            "file `{name}`: `data` is not base64 (standard alphabet, padded): {e}"
                        )
                    })?;
                Ok(Self::Inline {
                    name,
                    media_type,
                    data: bytes.into(),
                })
            }
            _ => Err(
                "an input file gives either `fileId` alone (an uploaded file) or `name`, \
                      `mediaType` and `data` (its bytes in base64)"
                    .to_owned(),
            ),
        }
    }
}

impl From<InputFile> for InputFileWire {
    fn from(f: InputFile) -> Self {
        match f {
            InputFile::Stored { file_id } => Self {
                file_id: Some(file_id),
                name: None,
                media_type: None,
                data: None,
            },
            InputFile::Inline {
                name,
                media_type,
                data,
            } => Self {
                file_id: None,
                name: Some(name),
                media_type: Some(media_type),
                data: Some(base64::engine::general_purpose::STANDARD.encode(&data)),
            },
        }
    }
}

/// Where a file's bytes come from: a workspace's handle on one file.
pub trait FileSource: Send + Sync + 'static {
    /// The file's size in bytes, known without reading it.
    fn size(&self) -> u64;
    /// The file's bytes.
    fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>>;
}

impl FileSource for Arc<[u8]> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>> {
        let bytes = Arc::clone(self);
        Box::pin(async move { Ok(bytes) })
    }
}

/// A read handle on one file: bytes on demand, never a path.
#[derive(Clone)]
pub struct FileHandle(Arc<dyn FileSource>);

impl FileHandle {
    /// A handle on `source`.
    #[must_use]
    pub fn new(source: impl FileSource) -> Self {
        Self(Arc::new(source))
    }

    /// The file's size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.0.size()
    }

    /// The file's bytes.
    ///
    /// # Errors
    /// The workspace's, when it cannot read the file.
    pub async fn read(&self) -> Result<Arc<[u8]>, HarnessError> {
        self.0.read().await
    }
}

impl fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileHandle")
            .field("size", &self.size())
            .finish()
    }
}

/// An uploaded file, as a [`FileWorkspace`] finds it.
#[derive(Debug, Clone)]
pub struct StoredFile {
    /// Its display name.
    pub name: String,
    /// The media type its uploader declared (the content decides).
    pub media_type: MediaType,
    /// Its bytes.
    pub handle: FileHandle,
}

/// Where uploaded files live, scoped to the caller that uploaded them.
pub trait FileWorkspace: Send + Sync + 'static {
    /// The file `id` of `caller`; `None` when there is none for this caller (never uploaded,
    /// expired, or another caller's: the three are indistinguishable).
    fn open<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<StoredFile>, HarnessError>>;
}

/// A [`FileWorkspace`] in memory: for tests and single-process use (no retention: files live
/// as long as the workspace).
#[derive(Debug, Default)]
pub struct InMemoryFileWorkspace {
    files: Mutex<HashMap<FileId, (CallerId, StoredFile)>>,
}

impl InMemoryFileWorkspace {
    /// An empty workspace.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `bytes` as `caller`'s file; returns its id.
    pub fn put(
        &self,
        caller: &CallerId,
        name: impl Into<String>,
        media_type: MediaType,
        bytes: impl Into<Arc<[u8]>>,
    ) -> FileId {
        let id = FileId::generate();
        let file = StoredFile {
            name: name.into(),
            media_type,
            handle: FileHandle::new(bytes.into()),
        };
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), (caller.clone(), file));
        id
    }
}

impl FileWorkspace for InMemoryFileWorkspace {
    fn open<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<StoredFile>, HarnessError>> {
        let found = self
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .filter(|(owner, _)| owner == caller)
            .map(|(_, file)| file.clone());
        Box::pin(async move { Ok(found) })
    }
}

/// The operator's limits on a request's input files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLimits {
    /// The most bytes of one file.
    pub max_file_bytes: u64,
    /// The most files in one request.
    pub max_files: usize,
    /// The most bytes of a request's files together.
    pub max_total_bytes: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

/// What a file is, for the capability that takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// An image (`input.images`).
    Image,
    /// A document: PDF or text (`input.documents`).
    Document,
}

impl FileKind {
    /// The capability that takes this kind.
    #[must_use]
    pub fn capability(self) -> CapabilityKey {
        match self {
            Self::Image => CapabilityKey::InputImages,
            Self::Document => CapabilityKey::InputDocuments,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Self::Image => "an image",
            Self::Document => "a document",
        }
    }
}

/// A file that passed validation: what adapters get.
#[derive(Debug, Clone)]
pub struct ValidatedInputFile {
    name: String,
    media_type: MediaType,
    kind: FileKind,
    size: u64,
    handle: FileHandle,
}

impl PartialEq for ValidatedInputFile {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.media_type == other.media_type
            && self.size == other.size
            && Arc::ptr_eq(&self.handle.0, &other.handle.0)
    }
}

impl ValidatedInputFile {
    /// A file the engine validated elsewhere, rebuilt on the far side of a transport: a
    /// runtime hosted by a sandbox worker gets its turn's files this way, each reading its
    /// bytes back through the control plane (which validated them). Nothing is checked
    /// here; a runtime that builds one for itself only fools itself.
    #[must_use]
    pub fn relayed(
        name: String,
        media_type: MediaType,
        kind: FileKind,
        size: u64,
        handle: FileHandle,
    ) -> Self {
        Self {
            name,
            media_type,
            kind,
            size,
            handle,
        }
    }

    /// Its display name (caller data: not a path).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its media type, as its content shows.
    #[must_use]
    pub fn media_type(&self) -> &MediaType {
        &self.media_type
    }

    /// Image or document.
    #[must_use]
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// Its size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether it is text (UTF-8, validated): `text/plain`, `text/markdown`,
    /// `application/json`.
    #[must_use]
    pub fn is_text(&self) -> bool {
        matches!(
            self.media_type.as_str(),
            "text/plain" | "text/markdown" | "application/json"
        )
    }

    /// Its bytes, read now.
    ///
    /// # Errors
    /// The workspace's; `FILE_NOT_FOUND` if the bytes are no longer those validated (their
    /// length changed).
    pub async fn read(&self) -> Result<Arc<[u8]>, HarnessError> {
        let bytes = self.handle.read().await?;
        if bytes.len() as u64 != self.size {
            return Err(refusal(
                ErrorCode::FILE_NOT_FOUND,
                format!(
                    "file `{}` changed after it was validated ({} bytes, then {}): upload it again",
                    self.name,
                    self.size,
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }
}

fn refusal(code: ErrorCode, message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message).with_code(code)
}

/// What content shows a file to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// A binary type recognized by its magic bytes (`image/png`, ..., `application/pdf`).
    Binary(&'static str),
    /// UTF-8 text without control characters (other than tab, line feed, form feed and
    /// carriage return).
    Text,
}

/// What `bytes` are, by content; `None` for anything else.
///
/// ```
/// use harness_core::file::{sniff, Sniffed};
/// assert_eq!(sniff(b"%PDF-1.7\n"), Some(Sniffed::Binary("application/pdf")));
/// assert_eq!(sniff("héllo\n".as_bytes()), Some(Sniffed::Text));
/// assert_eq!(sniff(b"\x00\x01binary"), None);
/// ```
#[must_use]
pub fn sniff(bytes: &[u8]) -> Option<Sniffed> {
    const MAGIC: [(&[u8], &str); 5] = [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"%PDF-", "application/pdf"),
    ];
    if let Some((_, ty)) = MAGIC.iter().find(|(m, _)| bytes.starts_with(m)) {
        return Some(Sniffed::Binary(ty));
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Some(Sniffed::Binary("image/webp"));
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let clean = !text
        .bytes()
        .any(|b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r')) || b == 0x7f);
    clean.then_some(Sniffed::Text)
}

/// The media type `bytes` are, given what was `declared`; or the refusal naming `label`.
fn content_type(
    label: &str,
    declared: &MediaType,
    bytes: &[u8],
) -> Result<MediaType, HarnessError> {
    let declared_essence = declared.essence();
    match sniff(bytes) {
        Some(Sniffed::Binary(actual)) if actual == declared_essence => Ok(declared.clone()),
        Some(Sniffed::Binary(actual)) => Err(refusal(
            ErrorCode::FILE_TYPE_MISMATCH,
            format!(
                "file {label} is declared `{declared_essence}` but its content is `{actual}`: \
                 declare `{actual}` (the content decides, not the declared type or the name)"
            ),
        )),
        Some(Sniffed::Text) => match declared_essence.as_str() {
            "text/plain" | "text/markdown" => Ok(declared.clone()),
            "application/json" => match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => Ok(declared.clone()),
                Err(e) => Err(refusal(
                    ErrorCode::FILE_TYPE_MISMATCH,
                    format!(
                        "file {label} is declared `application/json` but is not JSON ({e}): \
                         declare `text/plain`, or fix the JSON"
                    ),
                )),
            },
            other if IMAGE_TYPES.contains(&other) || other == "application/pdf" => Err(refusal(
                ErrorCode::FILE_TYPE_MISMATCH,
                format!(
                    "file {label} is declared `{other}` but its content is text: declare \
                     `text/plain`, `text/markdown` or `application/json`"
                ),
            )),
            other => Err(refusal(
                ErrorCode::FILE_TYPE_UNSUPPORTED,
                format!(
                    "file {label} is text declared `{other}`, which is not taken: declare \
                     `text/plain`, `text/markdown` or `application/json`"
                ),
            )),
        },
        None => Err(refusal(
            ErrorCode::FILE_TYPE_UNSUPPORTED,
            format!(
                "file {label} (declared `{declared_essence}`) is none of the types taken by \
                 content: PNG, JPEG, GIF or WebP images, PDF, or UTF-8 text"
            ),
        )),
    }
}

fn kind_of(media_type: &MediaType) -> FileKind {
    if media_type.essence().starts_with("image/") {
        FileKind::Image
    } else {
        FileKind::Document
    }
}

/// Resolves and validates `files` for `caller` against `limits` (see the
/// [module docs](self)): count and sizes first, from the handles, then each file's content.
///
/// # Errors
/// `configuration`, naming the file: `FILE_NOT_FOUND` (an id the caller has no file under,
/// or an uploaded file without a `workspace`), `FILES_TOO_MANY`, `FILE_TOO_LARGE`,
/// `FILE_TYPE_MISMATCH`, `FILE_TYPE_UNSUPPORTED`; a workspace's own error.
pub async fn validate(
    files: &[InputFile],
    caller: &CallerId,
    workspace: Option<&dyn FileWorkspace>,
    limits: &FileLimits,
) -> Result<Vec<ValidatedInputFile>, HarnessError> {
    if files.len() > limits.max_files {
        return Err(refusal(
            ErrorCode::FILES_TOO_MANY,
            format!(
                "the request gives {} files; this service takes at most {} per request",
                files.len(),
                limits.max_files
            ),
        ));
    }
    let mut resolved = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for file in files {
        let label = file.label();
        let (name, declared, handle) = match file {
            InputFile::Inline {
                name,
                media_type,
                data,
            } => (
                name.clone(),
                media_type.clone(),
                FileHandle::new(Arc::clone(data)),
            ),
            InputFile::Stored { file_id } => {
                let found = match workspace {
                    Some(workspace) => workspace.open(caller, file_id).await?,
                    None => None,
                };
                let Some(stored) = found else {
                    return Err(refusal(
                        ErrorCode::FILE_NOT_FOUND,
                        format!(
                            "no uploaded file {label} for this caller: give it inline, or upload \
                             it to this service's file workspace first"
                        ),
                    ));
                };
                (stored.name, stored.media_type, stored.handle)
            }
        };
        let size = handle.size();
        if size > limits.max_file_bytes {
            return Err(refusal(
                ErrorCode::FILE_TOO_LARGE,
                format!(
                    "file {label} has {size} bytes; this service takes at most {} per file",
                    limits.max_file_bytes
                ),
            ));
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(refusal(
                ErrorCode::FILE_TOO_LARGE,
                format!(
                    "the request's files reach {total} bytes at file {label}; this service \
                     takes at most {} in all",
                    limits.max_total_bytes
                ),
            ));
        }
        resolved.push((label, name, declared, handle, size));
    }
    let mut out = Vec::with_capacity(resolved.len());
    for (label, name, declared, handle, size) in resolved {
        let bytes = handle.read().await?;
        if bytes.len() as u64 != size {
            return Err(refusal(
                ErrorCode::FILE_NOT_FOUND,
                format!("file {label} changed while it was read: upload it again"),
            ));
        }
        let media_type = content_type(&label, &declared, &bytes)?;
        out.push(ValidatedInputFile {
            name,
            kind: kind_of(&media_type),
            media_type,
            size,
            handle,
        });
    }
    Ok(out)
}

/// Checks that the adapter whose capabilities are `report` takes each of `files`: its kind's
/// capability usable, its media type in [`MEDIA_TYPES`], its size within [`MAX_BYTES`], the
/// files of its kind within [`MAX_FILES`].
///
/// # Errors
/// `configuration`, naming the file: `FILE_MODALITY_UNSUPPORTED`, `FILE_TYPE_UNSUPPORTED`,
/// `FILE_TOO_LARGE`, `FILES_TOO_MANY`.
pub fn check_modalities(
    adapter: &str,
    report: &CapabilityReport,
    files: &[ValidatedInputFile],
) -> Result<(), HarnessError> {
    let mut counts: HashMap<FileKind, u64> = HashMap::new();
    for file in files {
        let key = file.kind.capability();
        let capability = report.get(key);
        let name = &file.name;
        let ty = file.media_type.essence();
        if !capability.level().is_usable() {
            return Err(refusal(
                ErrorCode::FILE_MODALITY_UNSUPPORTED,
                format!(
                    "file `{name}` ({ty}) is {} and adapter `{adapter}` does not take them \
                     (`{key}` is {}): send it to an adapter that declares `{key}`",
                    file.kind.noun(),
                    capability.level(),
                    key = key.as_str(),
                ),
            ));
        }
        let constraints = capability.constraints();
        if let Some(serde_json::Value::Array(types)) = constraints.get(MEDIA_TYPES)
            && !types.iter().any(|t| t.as_str() == Some(ty.as_str()))
        {
            let list: Vec<&str> = types.iter().filter_map(serde_json::Value::as_str).collect();
            return Err(refusal(
                ErrorCode::FILE_TYPE_UNSUPPORTED,
                format!(
                    "file `{name}` is `{ty}`, which adapter `{adapter}` does not take; it takes {}",
                    list.join(", ")
                ),
            ));
        }
        if let Some(max) = constraints
            .get(MAX_BYTES)
            .and_then(serde_json::Value::as_u64)
            && file.size > max
        {
            return Err(refusal(
                ErrorCode::FILE_TOO_LARGE,
                format!(
                    "file `{name}` has {} bytes; adapter `{adapter}` takes at most {max}",
                    file.size
                ),
            ));
        }
        let count = counts.entry(file.kind).or_default();
        *count += 1;
        if let Some(max) = constraints
            .get(MAX_FILES)
            .and_then(serde_json::Value::as_u64)
            && *count > max
        {
            return Err(refusal(
                ErrorCode::FILES_TOO_MANY,
                format!(
                    "file `{name}` is one {} too many: adapter `{adapter}` takes at most {max} \
                     per request",
                    match file.kind {
                        FileKind::Image => "image",
                        FileKind::Document => "document",
                    }
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
