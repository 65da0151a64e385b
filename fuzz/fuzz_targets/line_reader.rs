//! The line reader (docs/spec.md §2): any bytes as a session file, opened strictly and in salvage
//! mode. It must never panic, never change the file, and a file the strict reader
//! accepts must read the same in salvage mode.
//! Proptest equivalent: `tests/bad_input.rs::arbitrary_bytes_never_panic_a_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_state::{LogOptions, ReadMode, Severity};
use std::path::PathBuf;
use std::sync::OnceLock;

/// One file per fuzzing process, rewritten for every input.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("fuzz.jsonl");
        (dir, path)
    })
    .1
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).expect("write the input");
    let strict = LogOptions::new().mode(ReadMode::Strict).open(path);
    let salvage = LogOptions::new().mode(ReadMode::Salvage).open(path);
    assert_eq!(
        std::fs::read(path).expect("read back"),
        data,
        "a reader changed the file"
    );
    match (&strict, &salvage) {
        (Ok(s), Ok(v)) => {
            assert!(s.findings().iter().all(|f| f.severity == Severity::Warning));
            let a: Vec<&str> = s.entries().map(|e| e.id()).collect();
            let b: Vec<&str> = v.entries().map(|e| e.id()).collect();
            assert_eq!(a, b, "strict and salvage disagree on a file strict accepts");
            for e in s.entries() {
                let _ = s.raw_line(e.id());
                let _ = s.path_to(e.id());
                let _ = s.branch_key_of(e.id());
            }
        }
        (Ok(_), Err(e)) => panic!("strict accepts, salvage refuses: {e}"),
        (Err(e), _) => assert!(!e.to_string().is_empty()),
    }
});
