use super::*;
use crate::capability::Capability;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIF";
const PDF: &[u8] = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n";

fn ty(s: &str) -> MediaType {
    s.parse().unwrap()
}

fn inline(name: &str, media_type: &str, data: &[u8]) -> InputFile {
    InputFile::inline(name, ty(media_type), data.to_vec())
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn check(
    files: &[InputFile],
    limits: &FileLimits,
) -> Result<Vec<ValidatedInputFile>, HarnessError> {
    run(validate(files, &CallerId::ANONYMOUS, None, limits))
}

fn code(r: Result<Vec<ValidatedInputFile>, HarnessError>) -> (String, String) {
    let e = r.unwrap_err();
    assert_eq!(e.category(), ErrorCategory::Configuration);
    (e.code().as_str().to_owned(), e.message().to_owned())
}

#[test]
fn every_taken_type_is_recognized_by_content() {
    let webp = b"RIFF\x24\0\0\0WEBPVP8 ";
    let cases: [(&str, &[u8], FileKind); 8] = [
        ("image/png", PNG, FileKind::Image),
        ("image/jpeg", JPEG, FileKind::Image),
        ("image/gif", b"GIF89a\x01\0", FileKind::Image),
        ("image/webp", webp, FileKind::Image),
        ("application/pdf", PDF, FileKind::Document),
        (
            "text/plain",
            "naïve\ttext\r\n".as_bytes(),
            FileKind::Document,
        ),
        ("text/markdown", b"# title\n", FileKind::Document),
        ("application/json", br#"{"a": [1, 2]}"#, FileKind::Document),
    ];
    for (media_type, bytes, kind) in cases {
        let files = check(&[inline("f", media_type, bytes)], &FileLimits::default())
            .unwrap_or_else(|e| panic!("{media_type}: {e}"));
        assert_eq!(files[0].media_type().as_str(), media_type);
        assert_eq!(files[0].kind(), kind, "{media_type}");
        assert_eq!(files[0].size(), bytes.len() as u64);
        assert_eq!(&run(files[0].read()).unwrap()[..], bytes);
    }
}

#[test]
fn the_content_decides_not_the_declared_type_or_the_name() {
    let (c, m) = code(check(
        &[inline("photo.png", "image/png", JPEG)],
        &FileLimits::default(),
    ));
    assert_eq!(c, "FILE_TYPE_MISMATCH");
    assert!(
        m.contains("`photo.png`") && m.contains("declare `image/jpeg`"),
        "{m}"
    );

    let (c, m) = code(check(
        &[inline("a.pdf", "application/pdf", b"plain words")],
        &FileLimits::default(),
    ));
    assert_eq!(c, "FILE_TYPE_MISMATCH");
    assert!(m.contains("content is text"), "{m}");

    let (c, m) = code(check(
        &[inline("x.txt", "text/plain", b"\x7fELF\x02\x01\x01\0")],
        &FileLimits::default(),
    ));
    assert_eq!(c, "FILE_TYPE_UNSUPPORTED");
    assert!(
        m.contains("`x.txt`") && m.contains("PNG, JPEG, GIF or WebP"),
        "{m}"
    );

    let (c, _) = code(check(
        &[inline("d.json", "application/json", b"{not json")],
        &FileLimits::default(),
    ));
    assert_eq!(c, "FILE_TYPE_MISMATCH");

    let (c, m) = code(check(
        &[inline("p.html", "text/html", b"<p>hi</p>")],
        &FileLimits::default(),
    ));
    assert_eq!(c, "FILE_TYPE_UNSUPPORTED");
    assert!(m.contains("declare `text/plain`"), "{m}");
    // Invalid UTF-8 is not text.
    assert_eq!(sniff(b"caf\xe9"), None);
}

#[test]
fn count_and_sizes_are_bounded_before_any_byte_is_read() {
    struct Huge;
    impl FileSource for Huge {
        fn size(&self) -> u64 {
            u64::MAX
        }
        fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>> {
            panic!("a file over the limit was read")
        }
    }
    let workspace = InMemoryFileWorkspace::new();
    let alice: CallerId = "alice".parse().unwrap();
    let id = FileId::generate();
    workspace.files.lock().unwrap().insert(
        id.clone(),
        (
            alice.clone(),
            StoredFile {
                name: "huge.png".into(),
                media_type: ty("image/png"),
                handle: FileHandle::new(Huge),
            },
        ),
    );
    let err = run(validate(
        &[InputFile::stored(id)],
        &alice,
        Some(&workspace),
        &FileLimits::default(),
    ))
    .unwrap_err();
    assert_eq!(err.code().as_str(), "FILE_TOO_LARGE");

    let limits = FileLimits {
        max_file_bytes: 10,
        max_files: 2,
        max_total_bytes: 15,
    };
    let (c, m) = code(check(
        &[inline("big.txt", "text/plain", &[b'a'; 11])],
        &limits,
    ));
    assert_eq!(
        (c.as_str(), m.contains("`big.txt` has 11 bytes")),
        ("FILE_TOO_LARGE", true),
        "{m}"
    );
    let (c, m) = code(check(
        &[
            inline("a", "text/plain", &[b'a'; 8]),
            inline("b", "text/plain", &[b'a'; 8]),
        ],
        &limits,
    ));
    assert_eq!(c, "FILE_TOO_LARGE");
    assert!(m.contains("at most 15 in all"), "{m}");
    let three = vec![inline("a", "text/plain", b"a"); 3];
    assert_eq!(code(check(&three, &limits)).0, "FILES_TOO_MANY");
    assert_eq!(check(&three[..2], &limits).unwrap().len(), 2);
}

#[test]
fn an_uploaded_file_is_its_callers_only() {
    let workspace = InMemoryFileWorkspace::new();
    let alice: CallerId = "alice".parse().unwrap();
    let bob: CallerId = "bob".parse().unwrap();
    let id = workspace.put(&alice, "a.md", ty("text/markdown"), b"# hi".to_vec());
    let files = [InputFile::stored(id.clone())];
    let ok = run(validate(
        &files,
        &alice,
        Some(&workspace),
        &FileLimits::default(),
    ))
    .unwrap();
    assert_eq!(ok[0].name(), "a.md");
    let err = run(validate(
        &files,
        &bob,
        Some(&workspace),
        &FileLimits::default(),
    ))
    .unwrap_err();
    assert_eq!(err.code().as_str(), "FILE_NOT_FOUND");
    assert!(err.message().contains(id.as_str()));
    let never = [InputFile::stored(FileId::generate())];
    let other = run(validate(
        &never,
        &bob,
        Some(&workspace),
        &FileLimits::default(),
    ))
    .unwrap_err();
    // Another caller's file and a file that never was read the same, but for the id.
    assert_eq!(
        err.message().replace(id.as_str(), "X"),
        other
            .message()
            .replace(never[0].label().trim_matches('`'), "X")
    );
}

#[test]
fn the_wire_form_round_trips_and_refuses_halves() {
    let f = inline("a.txt", "text/plain", b"hi");
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"name": "a.txt", "mediaType": "text/plain", "data": "aGk="})
    );
    assert_eq!(serde_json::from_value::<InputFile>(json).unwrap(), f);
    let stored: InputFile = serde_json::from_str(r#"{"fileId": "file_1"}"#).unwrap();
    assert_eq!(stored, InputFile::stored("file_1".parse().unwrap()));
    for bad in [
        r#"{"fileId": "file_1", "data": "aGk="}"#,
        r#"{"name": "a", "mediaType": "text/plain"}"#,
        r#"{}"#,
    ] {
        let e = serde_json::from_str::<InputFile>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("either `fileId` alone"), "{bad}: {e}");
    }
    let e = serde_json::from_str::<InputFile>(
        r#"{"name": "a", "mediaType": "text/plain", "data": "!!"}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("file `a`: `data` is not base64"), "{e}");
    let e = serde_json::from_str::<InputFile>(r#"{"fileId": "f", "uri": "x:y"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `uri`"), "{e}");
}

#[test]
fn the_adapter_declares_what_it_takes() {
    let files = check(
        &[
            inline("a.png", "image/png", PNG),
            inline("b.pdf", "application/pdf", PDF),
        ],
        &FileLimits::default(),
    )
    .unwrap();
    let images_only =
        CapabilityReport::new().with(CapabilityKey::InputImages, Capability::native());
    let e = check_modalities("x", &images_only, &files).unwrap_err();
    assert_eq!(e.code().as_str(), "FILE_MODALITY_UNSUPPORTED");
    assert!(
        e.message()
            .contains("`b.pdf` (application/pdf) is a document"),
        "{}",
        e.message()
    );
    assert!(check_modalities("x", &images_only, &files[..1]).is_ok());

    let narrow = CapabilityReport::new().with(
        CapabilityKey::InputImages,
        Capability::native()
            .with_constraint(MEDIA_TYPES, serde_json::json!(["image/jpeg"]))
            .with_constraint(MAX_BYTES, 4)
            .with_constraint(MAX_FILES, 1),
    );
    let e = check_modalities("x", &narrow, &files[..1]).unwrap_err();
    assert_eq!(e.code().as_str(), "FILE_TYPE_UNSUPPORTED");
    assert!(
        e.message().contains("it takes image/jpeg"),
        "{}",
        e.message()
    );
    let jpegs = check(
        &[
            inline("1.jpg", "image/jpeg", JPEG),
            inline("2.jpg", "image/jpeg", JPEG),
        ],
        &FileLimits::default(),
    )
    .unwrap();
    assert_eq!(
        check_modalities("x", &narrow, &jpegs)
            .unwrap_err()
            .code()
            .as_str(),
        "FILE_TOO_LARGE"
    );
    let narrow = CapabilityReport::new().with(
        CapabilityKey::InputImages,
        Capability::native().with_constraint(MAX_FILES, 1),
    );
    let e = check_modalities("x", &narrow, &jpegs).unwrap_err();
    assert_eq!(e.code().as_str(), "FILES_TOO_MANY");
    assert!(e.message().contains("`2.jpg`"));
}
