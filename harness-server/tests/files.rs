//! Input files over HTTP: inline files in the start request reach the engine's validation;
//! an adapter that takes no files refuses them by name, and a malformed one is refused
//! naming what is wrong. Uploads (`POST /v1/files`): validated by content and size before
//! they are kept, their principal's alone, gone once expired and swept, bounded in how many
//! are read at once, and named by id in a start request that the model loop then runs with
//! them (`harness serve` over SQLite, the mock model server).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/processes.rs"]
mod processes;
mod support;

use harness_core::file::{FileLimits, FileWorkspace};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::ScriptedAdapter;
use harness_server::auth::BearerTokens;
use harness_server::files::Uploads;
use harness_server::{Instance, Server};
use harness_store::SqliteStore;
use harness_store::files::FileStore;
use processes::{Killed, aimock, wait_for_line};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// A PNG's signature and the start of its header: what the engine recognizes an image by.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01";

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "harness-files-{name}-{}-{}",
        std::process::id(),
        harness_core::id::ExecutionId::generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A server over `store` (executions and uploads alike) offering the scripted adapter (which
/// takes no files), alice and bob, uploads kept `retention`, at most `max_file_bytes` each,
/// inline files at most half that.
async fn serve_uploads(
    store: Arc<SqliteStore>,
    retention: Duration,
    max_file_bytes: u64,
) -> String {
    let limits = FileLimits {
        max_file_bytes,
        ..FileLimits::default()
    };
    let adapter = ScriptedAdapter::quickstart();
    let workspace: Arc<dyn FileWorkspace> = store.clone();
    let stack = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .files(workspace)
        .file_limits(limits.clone());
    let tokens = BearerTokens::new()
        .with_token("alice", ALICE)
        .unwrap()
        .with_token("bob", BOB)
        .unwrap();
    let server = Server::builder()
        .instance(Instance::new(
            &stack,
            adapter,
            Arc::clone(&store),
            ReplicaId::new("r1"),
        ))
        .authenticate(tokens)
        .files(Uploads::new(store).limits(limits).retention(retention))
        .max_inline_file_bytes(max_file_bytes / 2)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `POST /v1/files` with `bytes`, `content_type` and `?name=`.
async fn upload(
    url: &str,
    token: &str,
    content_type: Option<&str>,
    name: Option<&str>,
    bytes: Vec<u8>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/v1/files"))
        .bearer_auth(token)
        .body(bytes);
    if let Some(ty) = content_type {
        request = request.header("content-type", ty);
    }
    if let Some(name) = name {
        request = request.query(&[("name", name)]);
    }
    answer(request.send().await.unwrap()).await
}

async fn get_file(url: &str, token: &str, id: &str) -> (u16, Value) {
    answer(
        reqwest::Client::new()
            .get(format!("{url}/v1/files/{id}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn start_as(url: &str, token: &str, adapter: &str, files: Value) -> (u16, Value) {
    answer(
        reqwest::Client::new()
            .post(format!("{url}/v1/executions"))
            .bearer_auth(token)
            .json(&json!({"adapter": adapter, "message": "describe these", "files": files}))
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

async fn start(url: &str, files: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/executions"))
        .bearer_auth(ALICE)
        .json(&json!({"adapter": "scripted", "message": "go", "files": files}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_files_are_validated_and_refused_by_name_where_not_taken() {
    let url = support::serve(Arc::new(MemoryStore::new()), "r1", &[("alice", ALICE)]).await;

    // The scripted adapter declares neither input.images nor input.documents.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAE=";
    let (status, body) = start(
        &url,
        json!([{"name": "dot.png", "mediaType": "image/png", "data": png}]),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    let text = body.to_string();
    assert!(
        text.contains("FILE_MODALITY_UNSUPPORTED") && text.contains("dot.png"),
        "{text}"
    );

    // The content decides: text declared as a PNG.
    let (status, body) = start(
        &url,
        json!([{"name": "fake.png", "mediaType": "image/png", "data": "aGVsbG8="}]),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("FILE_TYPE_MISMATCH"), "{body}");

    // Malformed: not base64, and half of each form.
    for (files, says) in [
        (
            json!([{"name": "a.txt", "mediaType": "text/plain", "data": "!!"}]),
            "not base64",
        ),
        (
            json!([{"fileId": "file_1", "name": "a.txt"}]),
            "either `fileId` alone",
        ),
    ] {
        let (status, body) = start(&url, files).await;
        assert!((400..500).contains(&status), "{status} {body}");
        assert!(body.to_string().contains(says), "{body}");
    }

    // An uploaded file id this server has no workspace for is not found.
    let (status, body) = start(&url, json!([{"fileId": "file_nope"}])).await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("FILE_NOT_FOUND"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_file_store_uploads_are_refused_saying_files_go_inline() {
    let url = support::serve(Arc::new(MemoryStore::new()), "r1", &[("alice", ALICE)]).await;
    let (status, body) = upload(&url, ALICE, Some("text/plain"), None, b"hi".to_vec()).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.to_string().contains("inline"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_validated_by_content_and_size_before_they_are_kept() {
    let dir = scratch("validated");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    let url = serve_uploads(store, Duration::from_secs(3600), 1024).await;

    let response = reqwest::Client::new()
        .post(format!("{url}/v1/files?name=dot.png"))
        .bearer_auth(ALICE)
        .header("content-type", "image/png")
        .body(PNG.to_vec())
        .send()
        .await
        .unwrap();
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let (status, file) = answer(response).await;
    assert_eq!(status, 201, "{file}");
    let id = file["id"].as_str().unwrap();
    assert!(id.starts_with("file_"), "{file}");
    assert_eq!(location, format!("/v1/files/{id}"));
    assert_eq!(file["name"], "dot.png");
    assert_eq!(file["mediaType"], "image/png");
    assert_eq!(file["size"], PNG.len());
    assert!(
        file["expiresAt"].as_str() > file["createdAt"].as_str(),
        "{file}"
    );
    let (status, read) = get_file(&url, ALICE, id).await;
    assert_eq!(
        (status, &read),
        (200, &file),
        "GET answers what the upload did"
    );
    assert!(read.get("data").is_none(), "never the bytes back");

    // The content decides: text declared as a PNG, named what would be right.
    let (status, body) = upload(
        &url,
        ALICE,
        Some("image/png"),
        Some("fake.png"),
        b"hello".to_vec(),
    )
    .await;
    assert_eq!((status, code(&body)), (415, "FILE_TYPE_MISMATCH"), "{body}");
    assert!(
        body.to_string().contains("text/plain") && body.to_string().contains("fake.png"),
        "{body}"
    );
    // A PNG declared as a PDF.
    let (status, body) = upload(&url, ALICE, Some("application/pdf"), None, PNG.to_vec()).await;
    assert_eq!((status, code(&body)), (415, "FILE_TYPE_MISMATCH"), "{body}");
    assert!(body.to_string().contains("declare `image/png`"), "{body}");
    // No type taken at all.
    let (status, body) = upload(&url, ALICE, Some("application/pdf"), None, vec![0, 1, 2, 3]).await;
    assert_eq!(
        (status, code(&body)),
        (415, "FILE_TYPE_UNSUPPORTED"),
        "{body}"
    );
    // No declared type.
    let (status, body) = upload(&url, ALICE, None, None, b"hello".to_vec()).await;
    assert_eq!(status, 415, "{body}");
    assert!(body.to_string().contains("Content-Type"), "{body}");

    // Too large: by its Content-Length, before it is read, and by its bytes when it gives
    // none (a streamed body).
    let (status, body) = upload(&url, ALICE, Some("text/plain"), None, vec![b'a'; 2000]).await;
    assert_eq!((status, code(&body)), (413, "FILE_TOO_LARGE"), "{body}");
    assert!(body.to_string().contains("at most 1024"), "{body}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b'a'; 100])).collect();
    let (status, body) = answer(
        reqwest::Client::new()
            .post(format!("{url}/v1/files"))
            .bearer_auth(ALICE)
            .header("content-type", "text/plain")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (413, "FILE_TOO_LARGE"), "{body}");
    // Exactly the limit is taken.
    let (status, body) = upload(&url, ALICE, Some("text/plain"), None, vec![b'a'; 1024]).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "upload");

    // A name with a control character.
    let (status, body) = upload(
        &url,
        ALICE,
        Some("text/plain"),
        Some("a\u{7}b"),
        b"x".to_vec(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "REQUEST_INVALID"), "{body}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `POST /v1/files` as `multipart/form-data`, from a real client's form.
async fn upload_form(url: &str, form: reqwest::multipart::Form, query: &str) -> (u16, Value) {
    answer(
        reqwest::Client::new()
            .post(format!("{url}/v1/files{query}"))
            .bearer_auth(ALICE)
            .multipart(form)
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn part(bytes: &[u8], name: &str, ty: &str) -> reqwest::multipart::Part {
    reqwest::multipart::Part::bytes(bytes.to_vec())
        .file_name(name.to_owned())
        .mime_str(ty)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_upload_is_one_part_named_file_checked_as_a_raw_one() {
    let dir = scratch("multipart");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    let url = serve_uploads(store, Duration::from_secs(3600), 1024).await;
    let form = || reqwest::multipart::Form::new();

    // The part's file name (its last path component) and type, as a browser's form sends.
    let (status, file) = upload_form(
        &url,
        form().part("file", part(PNG, "C:\\fakepath\\dot.png", "image/png")),
        "",
    )
    .await;
    assert_eq!(status, 201, "{file}");
    assert_eq!(
        (&file["name"], &file["mediaType"], &file["size"]),
        (&json!("dot.png"), &json!("image/png"), &json!(PNG.len()))
    );
    assert_eq!(
        get_file(&url, ALICE, file["id"].as_str().unwrap()).await.1,
        file
    );
    // `?name=` wins over the part's file name.
    let (status, file) = upload_form(
        &url,
        form().part("file", part(b"# notes", "x.md", "text/markdown")),
        "?name=notes.md",
    )
    .await;
    assert_eq!((status, &file["name"]), (201, &json!("notes.md")), "{file}");

    // The content decides, as for a raw body: text declared as a PNG.
    let (status, body) = upload_form(
        &url,
        form().part("file", part(b"hello", "a.png", "image/png")),
        "",
    )
    .await;
    assert_eq!((status, code(&body)), (415, "FILE_TYPE_MISMATCH"), "{body}");
    // A part without a type.
    let bare = reqwest::multipart::Part::bytes(b"hello".to_vec()).file_name("a.txt");
    let (status, body) = upload_form(&url, form().part("file", bare), "").await;
    assert_eq!(status, 415, "{body}");
    assert!(
        body.to_string().contains("the part's `Content-Type`"),
        "{body}"
    );
    // Past the limit, by the part's bytes (the body's length allows the form's overhead).
    let (status, body) = upload_form(
        &url,
        form().part("file", part(&[b'a'; 1025], "a.txt", "text/plain")),
        "",
    )
    .await;
    assert_eq!((status, code(&body)), (413, "FILE_TOO_LARGE"), "{body}");
    let (status, body) = upload_form(
        &url,
        form().part("file", part(&[b'a'; 1024], "a.txt", "text/plain")),
        "",
    )
    .await;
    assert_eq!(status, 201, "exactly the limit is taken: {body}");

    // One part, named `file`: anything else is refused, naming what was wrong.
    let two = form()
        .part("file", part(b"one", "1.txt", "text/plain"))
        .part("file", part(b"two", "2.txt", "text/plain"));
    let (status, body) = upload_form(&url, two, "").await;
    assert_eq!((status, code(&body)), (400, "REQUEST_INVALID"), "{body}");
    assert!(
        body.to_string().contains("more than one `file` part"),
        "{body}"
    );
    let other = form().part("upload", part(b"one", "1.txt", "text/plain"));
    let (status, body) = upload_form(&url, other, "").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("a part named `upload`"), "{body}");
    let (status, body) = upload_form(&url, form(), "").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("no part named `file`"), "{body}");
    let (status, body) = upload(
        &url,
        ALICE,
        Some("multipart/form-data"),
        None,
        b"--x\r\n".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("`boundary`"), "{body}");
    // A part whose file name is no name.
    let (status, body) = upload_form(
        &url,
        form().part("file", part(b"x", "a\u{7}b", "text/plain")),
        "",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_file_past_the_inline_limit_is_refused_pointing_to_uploads() {
    let dir = scratch("inline-limit");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    // Files up to 1024 bytes, inline ones up to 512.
    let url = serve_uploads(store, Duration::from_secs(3600), 1024).await;
    use base64::Engine as _;
    let inline = |n: usize| {
        json!([{"name": "big.txt", "mediaType": "text/plain",
                "data": base64::engine::general_purpose::STANDARD.encode(vec![b'a'; n])}])
    };
    let (status, body) = start_as(&url, ALICE, "scripted", inline(513)).await;
    assert_eq!((status, code(&body)), (413, "FILE_TOO_LARGE"), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`big.txt`")
            && message.contains("at most 512")
            && message.contains("POST /v1/files"),
        "{message}"
    );
    // At the limit it passes this check and meets the engine's (the scripted adapter takes
    // no files).
    let (status, body) = start_as(&url, ALICE, "scripted", inline(512)).await;
    assert_ne!(code(&body), "FILE_TOO_LARGE", "{status} {body}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_file_is_its_principals_alone() {
    let dir = scratch("scoped");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    let url = serve_uploads(store, Duration::from_secs(3600), 1 << 20).await;
    let (status, file) = upload(
        &url,
        ALICE,
        Some("text/markdown"),
        Some("notes.md"),
        b"# notes".to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{file}");
    let id = file["id"].as_str().unwrap();
    let never = "file_0000000000000000000000ff";

    // Bob: 404 exactly as for an id that never existed.
    let (status, bobs) = get_file(&url, BOB, id).await;
    let (never_status, nevers) = get_file(&url, ALICE, never).await;
    assert_eq!((status, code(&bobs)), (404, "FILE_NOT_FOUND"), "{bobs}");
    assert_eq!(
        (never_status, code(&nevers)),
        (404, "FILE_NOT_FOUND"),
        "{nevers}"
    );
    assert_eq!(
        bobs["error"]["message"].as_str().unwrap().replace(id, "ID"),
        nevers["error"]["message"]
            .as_str()
            .unwrap()
            .replace(never, "ID"),
        "another principal's file reads as a missing one"
    );
    let deleted = reqwest::Client::new()
        .delete(format!("{url}/v1/files/{id}"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 404);
    let (status, body) = start_as(&url, BOB, "scripted", json!([{"fileId": id}])).await;
    assert_eq!((status, code(&body)), (404, "FILE_NOT_FOUND"), "{body}");

    // Alice: her id resolves (the scripted adapter then refuses documents by name: past the
    // lookup), and bob's delete left it.
    assert_eq!(get_file(&url, ALICE, id).await.0, 200);
    let (status, body) = start_as(&url, ALICE, "scripted", json!([{"fileId": id}])).await;
    assert_eq!(
        (status, code(&body)),
        (422, "FILE_MODALITY_UNSUPPORTED"),
        "{body}"
    );
    assert!(body.to_string().contains("notes.md"), "{body}");

    // Deleted by her: gone for her too.
    let deleted = reqwest::Client::new()
        .delete(format!("{url}/v1/files/{id}"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(get_file(&url, ALICE, id).await.0, 404);
    let (status, body) = start_as(&url, ALICE, "scripted", json!([{"fileId": id}])).await;
    assert_eq!((status, code(&body)), (404, "FILE_NOT_FOUND"), "{body}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_upload_is_not_found_and_is_swept() {
    let dir = scratch("expiry");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    let url = serve_uploads(Arc::clone(&store), Duration::from_secs(1), 1 << 20).await;
    let (status, file) = upload(&url, ALICE, Some("text/plain"), None, b"brief".to_vec()).await;
    assert_eq!(status, 201, "{file}");
    let id = file["id"].as_str().unwrap();
    assert_eq!(get_file(&url, ALICE, id).await.0, 200);
    let (status, body) = start_as(&url, ALICE, "scripted", json!([{"fileId": id}])).await;
    assert_eq!(code(&body), "FILE_MODALITY_UNSUPPORTED", "{status} {body}");

    // Past its expiry, and past the next periodic sweep (every second here).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (status, body) = get_file(&url, ALICE, id).await;
    assert_eq!((status, code(&body)), (404, "FILE_NOT_FOUND"), "{body}");
    let (status, body) = start_as(&url, ALICE, "scripted", json!([{"fileId": id}])).await;
    assert_eq!((status, code(&body)), (404, "FILE_NOT_FOUND"), "{body}");
    assert_eq!(
        store.sweep().await.unwrap(),
        0,
        "the server's periodic sweep removed the expired file already"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_read_at_once_are_bounded_and_many_callers_each_find_their_own() {
    let dir = scratch("concurrent");
    let store = Arc::new(SqliteStore::open(dir.join("harness.db")).unwrap());
    let url = serve_uploads(store, Duration::from_secs(3600), 1 << 20).await;

    // Eight uploads whose bodies stall hold every reading slot: the ninth is refused with a
    // wait, and once they finish, all eight are kept.
    let mut feeds = Vec::new();
    let mut stalled = Vec::new();
    for _ in 0..harness_server::files::UPLOADS_AT_ONCE {
        let (feed, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        feed.send(Ok(b"part one, ".to_vec())).await.unwrap();
        feeds.push(feed);
        let body = reqwest::Body::wrap_stream(tokio_stream(rx));
        let request = reqwest::Client::new()
            .post(format!("{url}/v1/files"))
            .bearer_auth(ALICE)
            .header("content-type", "text/plain")
            .body(body);
        stalled.push(tokio::spawn(async move {
            answer(request.send().await.unwrap()).await
        }));
    }
    // Time for the eight to reach the server (a local connect takes far less).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        stalled.iter().all(|s| !s.is_finished()),
        "the stalled uploads are still being read"
    );
    let refused = reqwest::Client::new()
        .post(format!("{url}/v1/files"))
        .bearer_auth(ALICE)
        .header("content-type", "text/plain")
        .body("one more")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let (_, body) = answer(refused).await;
    assert_eq!(code(&body), "CAPACITY_EXHAUSTED", "{body}");
    for feed in feeds {
        feed.send(Ok(b"part two".to_vec())).await.unwrap();
    }
    for upload in stalled {
        let (status, body) = upload.await.unwrap();
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["size"], 18);
    }

    // 64 uploads at once by two principals (retrying when told to wait): each file is its
    // uploader's alone.
    let racers: Vec<_> = (0..64)
        .map(|n| {
            let url = url.clone();
            tokio::spawn(async move {
                let token = if n % 2 == 0 { ALICE } else { BOB };
                let body = format!("file number {n}");
                loop {
                    let (status, file) = upload(
                        &url,
                        token,
                        Some("text/plain"),
                        None,
                        body.clone().into_bytes(),
                    )
                    .await;
                    if status == 503 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    assert_eq!(status, 201, "{file}");
                    return (token, file["id"].as_str().unwrap().to_owned(), body.len());
                }
            })
        })
        .collect();
    for racer in racers {
        let (token, id, size) = racer.await.unwrap();
        let other = if token == ALICE { BOB } else { ALICE };
        let (status, file) = get_file(&url, token, &id).await;
        assert_eq!((status, file["size"].as_u64()), (200, Some(size as u64)));
        assert_eq!(get_file(&url, other, &id).await.0, 404);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rx` as a stream (what `reqwest::Body::wrap_stream` takes).
fn tokio_stream(
    rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// `harness serve` as an operator runs it (SQLite, `[files]`, two principals), the model loop
/// on the mock model server: an image and a document uploaded, then named by id in a start
/// request, reach the model as its API expects them; another principal's start with the
/// same ids is refused `FILE_NOT_FOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_files_named_by_id_reach_the_model() {
    let dir = scratch("served");
    let fixtures = json!([
        {"match": {"userMessage": "describe"}, "response": {"content": "A dot and some notes."}},
    ]);
    let (_mock, mock_url) = aimock(&dir, &fixtures);
    std::fs::write(
        dir.join("harness.toml"),
        format!(
            r#"[store]
path = "harness.db"

[files]
retention_secs = 600
max_file_bytes = 65536

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[[tokens]]
principal = "bob"
sha256 = "{bob}"

[openai.endpoints.default]
baseUrl = "{mock_url}/v1"
model = "gpt-4.1"
"#,
            alice = harness_server::auth::digest(ALICE),
            bob = harness_server::auth::digest(BOB),
        ),
    )
    .unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "serve",
            "--config",
            "harness.toml",
            "--listen",
            "127.0.0.1:0",
        ])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let url = wait_for_line(&mut serve, "harness serving on ");
    let _serve = Killed(serve);

    let (status, image) = upload(
        &url,
        ALICE,
        Some("image/png"),
        Some("dot.png"),
        PNG.to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{image}");
    let notes = "# Notes\nthe sky is plaid today\n";
    let (status, doc) = upload(
        &url,
        ALICE,
        Some("text/markdown"),
        Some("notes.md"),
        notes.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{doc}");
    // The operator's limit holds at upload.
    let (status, body) = upload(&url, ALICE, Some("text/plain"), None, vec![b'a'; 65537]).await;
    assert_eq!((status, code(&body)), (413, "FILE_TOO_LARGE"), "{body}");
    let files = json!([{"fileId": image["id"]}, {"fileId": doc["id"]}]);

    let (status, body) = start_as(&url, BOB, "openai", files.clone()).await;
    assert_eq!((status, code(&body)), (404, "FILE_NOT_FOUND"), "{body}");
    let (status, started) = start_as(&url, ALICE, "openai", files).await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap();

    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let page: Value = http
            .get(format!("{url}/v1/executions/{id}/events?after=0"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["ended"] == true {
            break page["events"].as_array().unwrap().clone();
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not end: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"run.succeeded"), "{kinds:?}");

    // What the model received: the image as a data URL, the document's text.
    let journal: Value = reqwest::get(format!("{mock_url}/__aimock/journal"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let request = journal.as_array().unwrap().last().unwrap()["body"].to_string();
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.encode(PNG);
    assert!(
        request.contains(&format!("data:image/png;base64,{png}")),
        "{request}"
    );
    assert!(request.contains("the sky is plaid today"), "{request}");
    std::fs::remove_dir_all(&dir).unwrap();
}
