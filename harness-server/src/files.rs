//! Uploaded files: `POST /v1/files` takes a file's bytes, validates them as the engine
//! validates input files, and keeps them in the server's [`FileStore`] as the caller's, until
//! the operator's retention lapses; a start request then names the file by id
//! (`"files": [{"fileId": "file_..."}]`).
//!
//! # What happens when...
//!
//! - **a file is uploaded**: the raw body is the file, `Content-Type` its declared type,
//!   `?name=` its display name (`upload` when left out; at most 255 characters, no control
//!   characters). A `Content-Length` past the operator's `max_file_bytes` (`[files]` of
//!   `harness.toml`) is refused before any
//!   byte is read, and so is a body that grows past it (`413 FILE_TOO_LARGE`). The content
//!   decides the type exactly as at start ([`harness_core::file`]): a declared type the content
//!   contradicts, or content of no type taken, is `415` (`FILE_TYPE_MISMATCH`,
//!   `FILE_TYPE_UNSUPPORTED`) naming the type that would be right. The answer is `201` with
//!   the file's id, name, media type, size and expiry ([`FileView`]), and `Location`.
//! - **it comes as a form** (`Content-Type: multipart/form-data; boundary=...`, what a
//!   browser's `<input type="file">` and `curl -F file=@x.png` send): the form is one part,
//!   named `file`; its `filename` (the last component of a path) is the display name unless
//!   `?name=` gives one, its `Content-Type` the declared type. A second `file` part, a part of
//!   another name or a form without one is `400` naming it; the part's bytes are bounded as a
//!   raw body's are, and the whole form by that plus 64 KiB for its headers and boundaries.
//! - **a file comes inline in a start request** (`{"name", "mediaType", "data"}`): past
//!   [`DEFAULT_MAX_INLINE_FILE_BYTES`] decoded (`[files] max_inline_bytes`), it is refused
//!   `413 FILE_TOO_LARGE` naming the file and pointing to an upload; inline files are for
//!   small inputs, since the body that carries them is held whole while it is parsed.
//! - **another principal names the id**: `GET` and `DELETE` answer `404 FILE_NOT_FOUND`, and
//!   a start request naming it is refused `FILE_NOT_FOUND`, exactly as for an id that never
//!   existed or has expired.
//! - **uploads arrive together**: at most [`UPLOADS_AT_ONCE`] bodies are read at once; one
//!   more is `503` (`capacity`, `Retry-After`), so the memory uploads hold is bounded by that
//!   many times `max_file_bytes`, whatever the clients do.
//! - **a file expires**: it is not found from then on; the server sweeps expired files from
//!   the store periodically (every half retention, at most a minute apart).
//!
//! Decisions where the spec is silent:
//! - `GET /v1/files/{id}` answers the metadata only, never the bytes: the caller has them,
//!   and a server that hands uploaded bytes back becomes a file host for whoever holds a
//!   token (content served from the API's origin), which is not its job.
//! - The limits are the engine's: the same [`FileLimits::max_file_bytes`] bounds an upload
//!   and a file at start, so an upload the server took is never refused later for its size.
//! - Without a file store ([`ServerBuilder::files`](crate::ServerBuilder::files)), the
//!   `/v1/files` endpoints answer `404 ENDPOINT_NOT_FOUND` saying files go inline.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State as Extract};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use harness_core::artifact::MediaType;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::file::{FileId, FileLimits, InputFile};
use harness_core::id::CallerId;
use harness_core::time::Timestamp;
use harness_store::files::{FileInfo, FileStore, NewFile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::routes::{Caller, Shared, fail};

/// The default retention of uploaded files: a day.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// How many upload bodies are read at once, at most.
pub const UPLOADS_AT_ONCE: usize = 8;

/// The default most bytes of one inline file
/// ([`ServerBuilder::max_inline_file_bytes`](crate::ServerBuilder::max_inline_file_bytes)):
/// 512 KiB, which fits the default request body limit once encoded in base64.
pub const DEFAULT_MAX_INLINE_FILE_BYTES: u64 = 512 << 10;

/// The longest display name, in characters.
const MAX_NAME: usize = 255;

/// Where a server keeps uploaded files, and the operator's policy for them: the limits
/// (those of the engine's validation) and the retention.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use harness_core::file::FileLimits;
/// use harness_server::files::Uploads;
/// use harness_store::files::MemoryFiles;
///
/// let uploads = Uploads::new(Arc::new(MemoryFiles::new()))
///     .limits(FileLimits { max_file_bytes: 1 << 20, ..FileLimits::default() })
///     .retention(Duration::from_secs(3600));
/// assert_eq!(uploads.file_limits().max_file_bytes, 1 << 20);
/// ```
#[derive(Clone)]
pub struct Uploads {
    store: Arc<dyn FileStore>,
    limits: FileLimits,
    retention: Duration,
    reading: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploads")
            .field("limits", &self.limits)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Uploads {
    /// Uploads kept in `store`, with the default [`FileLimits`] and [`DEFAULT_RETENTION`].
    /// The same store must be the instances' file workspace
    /// ([`HarnessStack::files`](harness_layers::stack::HarnessStack::files)) for uploaded
    /// ids to resolve at start.
    #[must_use]
    pub fn new(store: Arc<dyn FileStore>) -> Self {
        Self {
            store,
            limits: FileLimits::default(),
            retention: DEFAULT_RETENTION,
            reading: Arc::new(tokio::sync::Semaphore::new(UPLOADS_AT_ONCE)),
        }
    }

    /// The limits an upload is validated against (give the instances the same ones,
    /// [`HarnessStack::file_limits`](harness_layers::stack::HarnessStack::file_limits)).
    #[must_use]
    pub fn limits(mut self, limits: FileLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How long an uploaded file is kept.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The limits.
    #[must_use]
    pub fn file_limits(&self) -> &FileLimits {
        &self.limits
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn FileStore> {
        &self.store
    }

    /// Sweeps expired files every half retention (at least a second, at most a minute
    /// apart) while the store is held elsewhere; needs a Tokio runtime, else does nothing.
    pub(crate) fn sweep_periodically(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let every = (self.retention / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let store = Arc::downgrade(&self.store);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(store) = store.upgrade() else {
                    return;
                };
                if let Err(e) = store.sweep().await {
                    tracing::warn!(error = %e, "sweeping expired uploaded files failed");
                }
            }
        });
    }
}

/// An uploaded file, as the API shows it (never its bytes).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileView {
    /// Its id: what a start request names (`{"fileId": ...}`).
    pub id: FileId,
    /// Its display name.
    pub name: String,
    /// Its media type, as its content showed it.
    pub media_type: MediaType,
    /// Its size in bytes.
    pub size: u64,
    /// When it was uploaded.
    pub created_at: Timestamp,
    /// When it stops being found.
    pub expires_at: Timestamp,
}

impl From<FileInfo> for FileView {
    fn from(info: FileInfo) -> Self {
        Self {
            id: info.id,
            name: info.name,
            media_type: info.media_type,
            size: info.size,
            created_at: info.created_at,
            expires_at: info.expires_at,
        }
    }
}

fn refusal(code: ErrorCode, message: String) -> ApiError {
    ApiError::new(HarnessError::new(ErrorCategory::Configuration, message).with_code(code))
}

fn not_found(id: &str) -> ApiError {
    let shown: String = id.chars().take(128).collect();
    refusal(
        ErrorCode::FILE_NOT_FOUND,
        format!("no uploaded file `{shown}`"),
    )
}

fn uploads(state: &crate::State) -> Result<&Uploads, ApiError> {
    state.uploads.as_ref().ok_or_else(|| {
        refusal(
            ErrorCode::ENDPOINT_NOT_FOUND,
            "this server keeps no uploaded files: give files inline in the start request \
             (`{\"name\", \"mediaType\", \"data\"}`)"
                .to_owned(),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadQuery {
    name: Option<String>,
}

fn too_large(size: impl std::fmt::Display, limits: &FileLimits) -> ApiError {
    refusal(
        ErrorCode::FILE_TOO_LARGE,
        format!(
            "the file has {size} bytes; this server takes at most {} per file",
            limits.max_file_bytes
        ),
    )
}

pub(crate) async fn upload(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    headers: HeaderMap,
    query: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Response {
    match take(&state, &caller, &headers, query, body).await {
        Ok(view) => {
            let location = format!("/v1/files/{}", view.id);
            (
                StatusCode::CREATED,
                [(header::LOCATION, location)],
                Json(view),
            )
                .into_response()
        }
        Err(e) => fail(&state, e),
    }
}

async fn take(
    state: &crate::State,
    caller: &CallerId,
    headers: &HeaderMap,
    query: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<FileView, ApiError> {
    let uploads = uploads(state)?;
    let limits = &uploads.limits;
    let Query(query) = query.map_err(|e| ApiError::invalid(format!("the query: {e}")))?;
    if let Some(name) = &query.name {
        check_name(name, "`name`")?;
    }
    let content_type = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| {
            refusal(
                ErrorCode::FILE_TYPE_UNSUPPORTED,
                "`Content-Type` is not a media type (`type/subtype`)".to_owned(),
            )
        })?),
    };
    let boundary = content_type.map(multipart_boundary).transpose()?.flatten();
    // A multipart body carries its part's headers and boundaries besides the file.
    let allowed = match boundary {
        Some(_) => limits.max_file_bytes.saturating_add(MULTIPART_OVERHEAD),
        None => limits.max_file_bytes,
    };
    // Refused before a byte is read when the client says how large it is.
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = length
        && length > allowed
    {
        return Err(too_large(length, limits));
    }
    let _reading = Arc::clone(&uploads.reading)
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                HarnessError::new(
                    ErrorCategory::Capacity,
                    format!(
                        "this server reads at most {UPLOADS_AT_ONCE} uploads at once: retry shortly"
                    ),
                )
                .with_code(ErrorCode::CAPACITY_EXHAUSTED),
            )
        })?;
    let (name, declared, bytes) = match boundary {
        Some(boundary) => {
            let part = read_part(body, boundary, limits).await?;
            let name = match (query.name, part.file_name) {
                (Some(name), _) => name,
                (None, Some(file_name)) => {
                    check_name(&file_name, "the part's `filename`")?;
                    file_name
                }
                (None, None) => "upload".to_owned(),
            };
            (
                name,
                declared_type(part.content_type.as_deref(), "the part's `Content-Type`")?,
                part.bytes,
            )
        }
        None => {
            let declared = declared_type(content_type, "`Content-Type`")?;
            // Sized once when the client says how large (within the limit, checked above).
            let mut bytes = Vec::with_capacity(usize::try_from(length.unwrap_or(0)).unwrap_or(0));
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    ApiError::invalid(format!("the request body could not be read: {e}"))
                })?;
                if (bytes.len() + chunk.len()) as u64 > limits.max_file_bytes {
                    return Err(too_large(
                        format_args!("more than {}", limits.max_file_bytes),
                        limits,
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
            (
                query.name.unwrap_or_else(|| "upload".to_owned()),
                declared,
                bytes,
            )
        }
    };
    let bytes: Arc<[u8]> = bytes.into();
    let one = FileLimits {
        max_files: 1,
        max_total_bytes: limits.max_file_bytes,
        ..limits.clone()
    };
    let file = InputFile::inline(name, declared, Arc::clone(&bytes));
    let validated = harness_core::file::validate(&[file], caller, None, &one).await?;
    let Some(validated) = validated.into_iter().next() else {
        return Err(ApiError::invalid("no file was given"));
    };
    let info = uploads
        .store
        .put(
            caller,
            NewFile {
                name: validated.name().to_owned(),
                media_type: validated.media_type().clone(),
                bytes,
                retention: uploads.retention,
            },
        )
        .await?;
    Ok(info.into())
}

/// A display name, or what is wrong with it (`what` names where it came from).
fn check_name(name: &str, what: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {MAX_NAME} characters without control characters"
        )));
    }
    Ok(())
}

/// The declared type of the file, from `value` (the header named by `what`).
fn declared_type(value: Option<&str>, what: &str) -> Result<MediaType, ApiError> {
    let Some(value) = value else {
        return Err(refusal(
            ErrorCode::FILE_TYPE_UNSUPPORTED,
            format!(
                "declare the file's type in {what}: image/png, image/jpeg, image/gif, \
                 image/webp, application/pdf, text/plain, text/markdown or application/json"
            ),
        ));
    };
    value.parse().map_err(|_| {
        refusal(
            ErrorCode::FILE_TYPE_UNSUPPORTED,
            format!("{what} is not a media type (`type/subtype`)"),
        )
    })
}

/// The bytes a multipart body may carry besides its file: the part's headers, the
/// boundaries, and small preambles.
const MULTIPART_OVERHEAD: u64 = 64 << 10;

/// The boundary of a `multipart/form-data` body, `None` for any other type.
fn multipart_boundary(content_type: &str) -> Result<Option<String>, ApiError> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("multipart/form-data") {
        return Ok(None);
    }
    multer::parse_boundary(content_type).map(Some).map_err(|_| {
        ApiError::invalid(
            "`Content-Type: multipart/form-data` needs its `boundary` parameter \
             (`multipart/form-data; boundary=...`)",
        )
    })
}

/// The one part of a multipart upload.
struct Part {
    file_name: Option<String>,
    content_type: Option<String>,
    bytes: Vec<u8>,
}

/// Reads a `multipart/form-data` body of exactly one part, named `file`: its bytes (at most
/// the limit), its `filename` (the last path component) and its `Content-Type`.
async fn read_part(body: Body, boundary: String, limits: &FileLimits) -> Result<Part, ApiError> {
    let bounds = multer::SizeLimit::new()
        .whole_stream(limits.max_file_bytes.saturating_add(MULTIPART_OVERHEAD))
        .per_field(limits.max_file_bytes);
    let mut parts = multer::Multipart::with_constraints(
        body.into_data_stream(),
        boundary,
        multer::Constraints::new().size_limit(bounds),
    );
    let failed = |e: multer::Error| match e {
        multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. } => {
            too_large(format_args!("more than {}", limits.max_file_bytes), limits)
        }
        other => ApiError::invalid(format!("the multipart body: {other}")),
    };
    let none =
        || ApiError::invalid("the multipart body has no part named `file`: put the file there");
    let mut found: Option<Part> = None;
    loop {
        let field = match parts.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            // An empty form is only its closing boundary, which the parser calls incomplete.
            Err(multer::Error::IncompleteStream) if found.is_none() => return Err(none()),
            Err(e) => return Err(failed(e)),
        };
        let mut field = field;
        if field.name() != Some("file") {
            let shown: String = field.name().unwrap_or("").chars().take(64).collect();
            return Err(ApiError::invalid(format!(
                "the multipart body has a part named `{shown}`: an upload is one part, named \
                 `file`"
            )));
        }
        if found.is_some() {
            return Err(ApiError::invalid(
                "the multipart body has more than one `file` part: upload one file per request",
            ));
        }
        // Browsers once sent the client's whole path; only its last component is a name.
        let file_name = field
            .file_name()
            .map(|n| n.rsplit(['/', '\\']).next().unwrap_or(n).to_owned());
        let content_type = field.content_type().map(ToString::to_string);
        let mut bytes = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(failed)? {
            if (bytes.len() + chunk.len()) as u64 > limits.max_file_bytes {
                return Err(too_large(
                    format_args!("more than {}", limits.max_file_bytes),
                    limits,
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        found = Some(Part {
            file_name,
            content_type,
            bytes,
        });
    }
    found.ok_or_else(none)
}

/// Refuses an inline file past the server's inline limit, naming it and the way that takes
/// it (an upload) when the server keeps uploads.
pub(crate) fn check_inline(state: &crate::State, files: &[InputFile]) -> Result<(), ApiError> {
    for file in files {
        if let InputFile::Inline { name, data, .. } = file
            && data.len() as u64 > state.max_inline
        {
            let shown: String = name.chars().take(120).collect();
            let instead = if state.uploads.is_some() {
                ": upload it first (`POST /v1/files`) and name it by `fileId`"
            } else {
                ""
            };
            return Err(refusal(
                ErrorCode::FILE_TOO_LARGE,
                format!(
                    "the inline file `{shown}` has {} bytes; this server takes at most {} bytes \
                     per inline file{instead}",
                    data.len(),
                    state.max_inline
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) async fn read(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Response {
    let found: Result<FileView, ApiError> = async {
        let uploads = uploads(&state)?;
        let parsed: FileId = id.parse().map_err(|_| not_found(&id))?;
        match uploads.store.info(&caller, &parsed).await? {
            Some(info) => Ok(info.into()),
            None => Err(not_found(&id)),
        }
    }
    .await;
    match found {
        Ok(view) => Json(view).into_response(),
        Err(e) => fail(&state, e),
    }
}

pub(crate) async fn delete(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Response {
    let deleted: Result<(), ApiError> = async {
        let uploads = uploads(&state)?;
        let parsed: FileId = id.parse().map_err(|_| not_found(&id))?;
        if uploads.store.delete(&caller, &parsed).await? {
            Ok(())
        } else {
            Err(not_found(&id))
        }
    }
    .await;
    match deleted {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => fail(&state, e),
    }
}
