//! Input file validation and hand-over: bytes per second of `file::validate` (resolve, size
//! checks, read, type by content) then `ValidatedInputFile::read` (what an adapter does), for
//! 1 KiB, 1 MiB and 20 MiB files, an image (magic bytes only) and text (UTF-8 checked whole).
//!
//! ```sh
//! cargo bench -p harness-core --bench files
//! ```
//!
//! Figures are from one run on one machine; they are printed, never asserted.

use std::time::Instant;

use harness_core::file::{FileLimits, InMemoryFileWorkspace, InputFile, validate};
use harness_core::id::CallerId;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let caller = CallerId::ANONYMOUS;
    let workspace = InMemoryFileWorkspace::new();
    let limits = FileLimits::default();
    for (label, size) in [
        ("1 KiB", 1usize << 10),
        ("1 MiB", 1 << 20),
        ("20 MiB", 20 << 20),
    ] {
        for (kind, media_type) in [("image/png", "image/png"), ("text", "text/plain")] {
            let mut bytes = vec![b'a'; size];
            if kind == "image/png" {
                bytes[..8].copy_from_slice(b"\x89PNG\r\n\x1a\n");
            }
            let id = workspace.put(&caller, "f", media_type.parse().unwrap(), bytes);
            let files = [InputFile::stored(id)];
            let rounds = (64 << 20) / size + 3;
            let start = Instant::now();
            for _ in 0..rounds {
                runtime.block_on(async {
                    let valid = validate(&files, &caller, Some(&workspace), &limits)
                        .await
                        .unwrap();
                    let read = valid[0].read().await.unwrap();
                    std::hint::black_box(read);
                });
            }
            let elapsed = start.elapsed();
            let per = elapsed / rounds as u32;
            let rate = (size * rounds) as f64 / elapsed.as_secs_f64() / (1u64 << 30) as f64;
            println!("{label:>6} {kind:<9}: {per:>10.2?} per file, {rate:8.2} GiB/s");
        }
    }
}
