//! Uploaded files, durable: the [`FileStore`] a server keeps its callers' uploads in, and
//! resolves `{"fileId": ...}` through (it is a [`FileWorkspace`]). [`SqliteStore`](crate::SqliteStore)
//! and `PostgresStore` keep them in their database beside the executions; [`MemoryFiles`]
//! keeps them in the process.
//!
//! # What happens when...
//!
//! - **a file is put**: it gets a new id and an expiry (now plus the retention given), and
//!   belongs to the caller that put it. The store takes the bytes as they are: the server
//!   validated them ([`harness_core::file`]) before.
//! - **a file is looked up** (`open`, `info`, `delete`): only its owner finds it; another
//!   caller's id, an expired one and one that never existed are all `None` (`false` for
//!   `delete`), indistinguishable.
//! - **a file expires**: from its expiry on it is not found, swept or not; [`FileStore::sweep`]
//!   deletes the expired rows (a server sweeps on each upload and periodically).
//! - **an adapter reads an opened file**: the handle reads the bytes from the store then, not
//!   at `open`; a file deleted or swept meanwhile fails the read `FILE_NOT_FOUND`.
//!
//! Decisions where the spec is silent:
//! - Expiry is by the database's clock on PostgreSQL (replicas' clocks may differ), by the
//!   process's on SQLite and in memory.
//! - A file an execution already validated reads until it is swept, even past its expiry:
//!   a run is not failed half-way by a retention that lapsed during it. A recovered
//!   execution validates its files again, and is refused `FILE_NOT_FOUND` once they expired.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use harness_core::artifact::MediaType;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::file::{FileHandle, FileId, FileSource, FileWorkspace, StoredFile};
use harness_core::id::CallerId;
use harness_core::time::Timestamp;

use crate::common::lock;

/// What is known of an uploaded file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Its id.
    pub id: FileId,
    /// Its display name.
    pub name: String,
    /// Its media type (as its content showed it at upload).
    pub media_type: MediaType,
    /// Its size in bytes.
    pub size: u64,
    /// When it was put.
    pub created_at: Timestamp,
    /// When it stops being found.
    pub expires_at: Timestamp,
}

/// A file to put.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Its display name.
    pub name: String,
    /// Its media type.
    pub media_type: MediaType,
    /// Its bytes.
    pub bytes: Arc<[u8]>,
    /// How long it is kept.
    pub retention: Duration,
}

/// Where a server keeps uploaded files, each its caller's, each until its expiry; see the
/// [module docs](self).
pub trait FileStore: FileWorkspace {
    /// Keeps `file` as `caller`'s, under a new id.
    ///
    /// # Errors
    /// `persistence` when the store fails (`STORE_FULL` when its disk is).
    fn put<'a>(
        &'a self,
        caller: &'a CallerId,
        file: NewFile,
    ) -> BoxFuture<'a, Result<FileInfo, HarnessError>>;

    /// What is known of `caller`'s file `id`; `None` when `caller` has none of that id
    /// (never put, expired, or another caller's).
    ///
    /// # Errors
    /// `persistence` when the store fails.
    fn info<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<FileInfo>, HarnessError>>;

    /// Deletes `caller`'s file `id`; `false` when `caller` has none of that id.
    ///
    /// # Errors
    /// `persistence` when the store fails.
    fn delete<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<bool, HarnessError>>;

    /// Deletes every expired file; resolves to how many.
    ///
    /// # Errors
    /// `persistence` when the store fails.
    fn sweep(&self) -> BoxFuture<'_, Result<u64, HarnessError>>;
}

/// The error of a handle whose file is gone.
pub(crate) fn gone(id: &FileId) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("uploaded file `{id}` is no longer there (deleted or expired): upload it again"),
    )
    .with_code(ErrorCode::FILE_NOT_FOUND)
}

/// Milliseconds of `retention`, bounded so that an expiry always fits.
pub(crate) fn retention_ms(retention: Duration) -> i64 {
    // A century: longer is forever for any deployment.
    const MAX: i64 = 100 * 365 * 24 * 3600 * 1000;
    i64::try_from(retention.as_millis()).unwrap_or(MAX).min(MAX)
}

/// A handle that reads a stored file's bytes when asked, through `read`.
pub(crate) struct LazyFile<F> {
    pub(crate) size: u64,
    pub(crate) read: F,
}

impl<F> FileSource for LazyFile<F>
where
    F: Fn() -> BoxFuture<'static, Result<Arc<[u8]>, HarnessError>> + Send + Sync + 'static,
{
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>> {
        (self.read)()
    }
}

/// A [`StoredFile`] of `info` whose bytes `read` fetches.
pub(crate) fn stored<F>(info: FileInfo, read: F) -> StoredFile
where
    F: Fn() -> BoxFuture<'static, Result<Arc<[u8]>, HarnessError>> + Send + Sync + 'static,
{
    StoredFile {
        name: info.name,
        media_type: info.media_type,
        handle: FileHandle::new(LazyFile {
            size: info.size,
            read,
        }),
    }
}

/// The media type stored as `text`.
pub(crate) fn media_type(text: &str) -> Result<MediaType, HarnessError> {
    text.parse().map_err(|e| {
        harness_core::store::StoreError::Corrupt(format!("a file's media type `{text}`: {e}"))
            .to_harness_error()
    })
}

/// The id stored as `text`.
pub(crate) fn file_id(text: &str) -> Result<FileId, HarnessError> {
    text.parse().map_err(|e| {
        harness_core::store::StoreError::Corrupt(format!("a file id `{text}`: {e}"))
            .to_harness_error()
    })
}

/// A [`FileStore`] in the process (the server's with `store.kind = "memory"`): lost on exit.
///
/// ```
/// use std::time::Duration;
/// use harness_core::file::FileWorkspace;
/// use harness_core::id::CallerId;
/// use harness_store::files::{FileStore, MemoryFiles, NewFile};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let files = MemoryFiles::new();
/// let alice: CallerId = "alice".parse().unwrap();
/// let bob: CallerId = "bob".parse().unwrap();
/// let info = files.put(&alice, NewFile {
///     name: "a.txt".into(), media_type: "text/plain".parse().unwrap(),
///     bytes: b"hi".to_vec().into(), retention: Duration::from_secs(60),
/// }).await.unwrap();
/// assert_eq!(files.info(&alice, &info.id).await.unwrap(), Some(info.clone()));
/// assert!(files.open(&bob, &info.id).await.unwrap().is_none());
/// # });
/// ```
#[derive(Debug, Default, Clone)]
pub struct MemoryFiles {
    files: Arc<Mutex<HashMap<FileId, Entry>>>,
}

#[derive(Debug)]
struct Entry {
    owner: CallerId,
    info: FileInfo,
    bytes: Arc<[u8]>,
}

impl MemoryFiles {
    /// No files.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&self, caller: &CallerId, id: &FileId) -> Option<(FileInfo, Arc<[u8]>)> {
        let now = Timestamp::now();
        lock(&self.files)
            .get(id)
            .filter(|e| e.owner == *caller && e.info.expires_at > now)
            .map(|e| (e.info.clone(), Arc::clone(&e.bytes)))
    }
}

impl FileWorkspace for MemoryFiles {
    fn open<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<StoredFile>, HarnessError>> {
        let found = self.find(caller, id).map(|(info, _)| {
            let files = Arc::clone(&self.files);
            let (id, caller) = (id.clone(), caller.clone());
            stored(info, move || {
                let bytes = lock(&files)
                    .get(&id)
                    .filter(|e| e.owner == caller)
                    .map(|e| Arc::clone(&e.bytes));
                let id = id.clone();
                Box::pin(async move { bytes.ok_or_else(|| gone(&id)) })
            })
        });
        Box::pin(async move { Ok(found) })
    }
}

impl FileStore for MemoryFiles {
    fn put<'a>(
        &'a self,
        caller: &'a CallerId,
        file: NewFile,
    ) -> BoxFuture<'a, Result<FileInfo, HarnessError>> {
        // Milliseconds, as stored.
        let now =
            Timestamp::from_millis(Timestamp::now().as_millis()).unwrap_or_else(Timestamp::now);
        let expires_at =
            Timestamp::from_millis(now.as_millis().saturating_add(retention_ms(file.retention)))
                .unwrap_or(now);
        let info = FileInfo {
            id: FileId::generate(),
            name: file.name,
            media_type: file.media_type,
            size: file.bytes.len() as u64,
            created_at: now,
            expires_at,
        };
        lock(&self.files).insert(
            info.id.clone(),
            Entry {
                owner: caller.clone(),
                info: info.clone(),
                bytes: file.bytes,
            },
        );
        Box::pin(async move { Ok(info) })
    }

    fn info<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<FileInfo>, HarnessError>> {
        let found = self.find(caller, id).map(|(info, _)| info);
        Box::pin(async move { Ok(found) })
    }

    fn delete<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<bool, HarnessError>> {
        let deleted = self.find(caller, id).is_some() && lock(&self.files).remove(id).is_some();
        Box::pin(async move { Ok(deleted) })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<u64, HarnessError>> {
        let now = Timestamp::now();
        let mut files = lock(&self.files);
        let before = files.len();
        files.retain(|_, e| e.info.expires_at > now);
        let swept = (before - files.len()) as u64;
        Box::pin(async move { Ok(swept) })
    }
}
