//! Costs linear in events and independent of other plugins (docs/projection.md,
//! "Segments"): building a session of N events of N plugins does O(N) work, a read
//! of one plugin does not grow with the other plugins' events, and the check of the folded
//! events after a foreign append reads few rows and no byte the prefix digests already
//! proved. Work is counted through the projection's counters, never timed; every answer
//! is compared with the in-memory fold or a naive reference fold.

use crate::common;

use common::reference;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::{Value, json};
use session_state::{Scope, SessionLog, Store};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const HEADER: &str = "{\"type\":\"session\",\"version\":3,\"id\":\"plugins-test\",\
                      \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}";

/// One entry of a generated session: a state event or a message, a child of `parent`
/// (an index into the entries so far; `None`: a root).
#[derive(Debug, Clone)]
struct Entry {
    parent: Option<usize>,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Event { plugin: String, data: Value },
    Message(usize),
}

impl Entry {
    fn set(parent: Option<usize>, plugin: &str, scope: &'static str, value: Value) -> Entry {
        Entry {
            parent,
            kind: Kind::Event {
                plugin: plugin.into(),
                data: json!({"v": 1, "scope": scope, "op": "set", "value": value}),
            },
        }
    }

    /// The entry as Pi lays it out (ids `e0`, `e1`, …).
    fn json(&self, i: usize) -> Value {
        let parent = self.parent.map(|p| format!("e{p}"));
        match &self.kind {
            Kind::Event { plugin, data, .. } => json!({
                "type": "custom", "customType": format!("session-state/{plugin}"),
                "data": data, "id": format!("e{i}"), "parentId": parent,
                "timestamp": "2026-01-01T00:00:00.000Z"
            }),
            Kind::Message(len) => json!({
                "type": "message", "id": format!("e{i}"), "parentId": parent,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "message": {"role": "user", "content": "x".repeat(*len)}
            }),
        }
    }
}

/// A chain: every entry a child of the one before.
fn chain(kinds: impl IntoIterator<Item = Kind>) -> Vec<Entry> {
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Entry {
            parent: i.checked_sub(1),
            kind,
        })
        .collect()
}

fn event(plugin: &str, scope: &'static str, value: Value) -> Kind {
    Entry::set(None, plugin, scope, value).kind
}

fn text(entries: &[Entry], range: std::ops::Range<usize>) -> String {
    let mut out = String::new();
    for i in range {
        let _ = writeln!(out, "{}", entries[i].json(i));
    }
    out
}

/// Writes the session file (header and `entries`) into `dir`.
fn write_file(dir: &Path, entries: &[Entry]) -> PathBuf {
    let file = dir.join("s.jsonl");
    std::fs::write(
        &file,
        format!("{HEADER}\n{}", text(entries, 0..entries.len())),
    )
    .expect("write the session");
    file
}

fn append(file: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .expect("open for appending");
    f.write_all(line.as_bytes()).expect("append");
}

/// A message appended behind the projection's back, as another extension writes it.
fn foreign_append(file: &Path, parent: &str) {
    append(
        file,
        &format!(
            "{}\n",
            json!({"type": "custom", "customType": "other-extension", "data": {"i": 1},
                   "id": "foreign", "parentId": parent,
                   "timestamp": "2026-01-01T00:00:00.000Z"})
        ),
    );
}

/// The projection's work counters, as differences.
#[derive(Debug)]
struct Work {
    lookups: u64,
    lookup_vm_steps: u64,
    verify_rows: u64,
    verify_reads: u64,
}

/// The work of `f` on this thread's projection.
fn work_of<R>(store: &Store, f: impl FnOnce() -> R) -> (R, Work) {
    let before = store.projection_work();
    let r = f();
    let after = store.projection_work();
    (
        r,
        Work {
            lookups: after.lookups - before.lookups,
            lookup_vm_steps: after.lookup_vm_steps - before.lookup_vm_steps,
            verify_rows: after.verify_rows - before.verify_rows,
            verify_reads: after.verify_reads - before.verify_reads,
        },
    )
}

fn read(store: &Store, file: &Path, plugin: &str, scope: Scope, at: Option<&str>) -> Option<Value> {
    store
        .read_value(file, plugin, scope, at)
        .expect("projection read")
}

/// The naive reference at entry `at`: fold over the path root → `at` (branch scope), or
/// over the whole file (session scope).
fn reference_at(entries: &[Entry], at: usize, plugin: &str, scope: Scope) -> Option<Value> {
    let all: Vec<Value> = entries.iter().enumerate().map(|(i, e)| e.json(i)).collect();
    match scope {
        Scope::Session => reference::fold(&all, plugin, "session"),
        Scope::Branch => {
            let mut path = vec![at];
            while let Some(p) = entries[*path.last().expect("non-empty")].parent {
                path.push(p);
            }
            reference::fold(path.iter().rev().map(|&i| &all[i]), plugin, "branch")
        }
    }
}

#[test]
fn a_build_with_one_plugin_per_event_is_linear_in_the_plugins() {
    for n in [250usize, 1000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries = chain((0..n).map(|i| event(&format!("p{i}"), "branch", json!(i))));
        let file = write_file(dir.path(), &entries);
        let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
        let (c, work) = work_of(&store, || store.catch_up(&file).expect("build"));
        assert!(c.rebuilt && c.entries_added == n as u64, "{c:?}");
        assert!(
            work.lookups <= 2 * n as u64,
            "{} lookups to build {n} events of {n} plugins",
            work.lookups
        );
        // Every plugin at the leaf and at a few entries, against the reference and the
        // in-memory fold.
        let log = SessionLog::open(&file).expect("open");
        for i in (0..n).step_by(n / 10) {
            let plugin = format!("p{i}");
            let last = entries.len() - 1;
            assert_eq!(
                read(&store, &file, &plugin, Scope::Branch, None),
                Some(json!(i))
            );
            let fold = store.state::<Value>(&plugin, Scope::Branch).expect("state");
            assert_eq!(fold.read(&log).expect("fold"), Some(json!(i)));
            for at in [0, i.saturating_sub(1), i, last] {
                assert_eq!(
                    read(
                        &store,
                        &file,
                        &plugin,
                        Scope::Branch,
                        Some(&format!("e{at}"))
                    ),
                    reference_at(&entries, at, &plugin, Scope::Branch),
                    "{plugin} at e{at}"
                );
            }
        }
    }
}

#[test]
fn a_quiet_plugins_read_does_not_grow_with_another_plugins_events() {
    let reads: [(&str, Scope); 5] = [
        ("a", Scope::Branch),
        ("absent", Scope::Branch),
        ("b", Scope::Branch),
        ("a", Scope::Session),
        ("absent", Scope::Session),
    ];
    let mut per_read = Vec::new();
    for k in [100usize, 3000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kinds = vec![
            event("a", "branch", json!("a")),
            event("a", "session", json!(1)),
        ];
        kinds.extend((0..k).map(|i| event("b", "branch", json!(i))));
        let entries = chain(kinds);
        let file = write_file(dir.path(), &entries);
        let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
        let (_, build) = work_of(&store, || store.catch_up(&file).expect("build"));
        assert!(build.lookups <= 2 * (k as u64 + 2), "build: {build:?}");
        let mut counts = Vec::new();
        for (plugin, scope) in reads {
            let (v, work) = work_of(&store, || read(&store, &file, plugin, scope, None));
            assert_eq!(
                v,
                reference_at(&entries, entries.len() - 1, plugin, scope),
                "{plugin}"
            );
            // The statements run, and the rows they step over (SQLite VM steps: the
            // lookup must use the per-plugin index, not scan the session's events).
            counts.push((work.lookups, work.lookup_vm_steps));
        }
        per_read.push(counts);
    }
    assert_eq!(
        per_read[0], per_read[1],
        "reads beside 100 and 3000 events of `b`"
    );
    assert!(
        per_read[1].iter().all(|&(w, steps)| w <= 3 && steps <= 200),
        "{per_read:?}"
    );
}

#[test]
fn a_read_on_a_side_branch_crosses_segments_not_the_other_plugins_events() {
    // `a` at the root, `b` down a main line, and a side branch off every fifth entry.
    let dir = tempfile::tempdir().expect("tempdir");
    let is_tip = |i: usize| i > 0 && i.is_multiple_of(5);
    let mut entries = vec![Entry::set(None, "a", "branch", json!("root"))];
    for i in 1..600 {
        let parent = if is_tip(i) || is_tip(i - 1) {
            i - 2
        } else {
            i - 1
        };
        entries.push(Entry::set(Some(parent), "b", "branch", json!(i)));
    }
    let file = write_file(dir.path(), &entries);
    let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
    store.catch_up(&file).expect("build");
    for tip in (5..600).filter(|&i| is_tip(i)) {
        let at = format!("e{tip}");
        let (v, work) = work_of(&store, || {
            read(&store, &file, "a", Scope::Branch, Some(&at))
        });
        assert_eq!(v, Some(json!("root")), "at {at}");
        assert!(work.lookups <= 4, "{work:?} at {at}");
        let b = read(&store, &file, "b", Scope::Branch, Some(&at));
        assert_eq!(
            b,
            reference_at(&entries, tip, "b", Scope::Branch),
            "b at {at}"
        );
    }
}

/// A session of `events` state events (two plugins, both scopes), each after a message of
/// `gap` bytes.
fn spaced_events(events: usize, gap: usize) -> Vec<Entry> {
    chain((0..events).flat_map(|i| {
        let plugin = if i.is_multiple_of(2) { "p" } else { "q" };
        let scope = if i.is_multiple_of(3) {
            "session"
        } else {
            "branch"
        };
        [Kind::Message(gap), event(plugin, scope, json!({ "i": i }))]
    }))
}

#[test]
fn the_check_after_a_foreign_append_reads_few_rows_and_is_exact() {
    let events = 3000;
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = spaced_events(events, 300);
    let file = write_file(dir.path(), &entries);
    let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
    store.catch_up(&file).expect("build");
    foreign_append(&file, &format!("e{}", entries.len() - 1));
    let (c, work) = work_of(&store, || store.catch_up(&file).expect("catch up"));
    assert!(!c.rebuilt && c.entries_added == 1, "{c:?}");
    // A row per 256 events, and one per event after the last whole group.
    assert!(
        work.verify_rows <= events as u64 / 256 + 256,
        "{} rows read to check {events} events",
        work.verify_rows
    );
    // Dense events: the reads are few and large, bounded in size.
    let file_len = std::fs::metadata(&file).expect("stat").len();
    assert!(
        work.verify_reads <= 2 + file_len / (256 << 10) + 1,
        "{} reads to check {file_len} bytes",
        work.verify_reads
    );
    assert!(c.verified_bytes >= 1500 * 60, "{c:?}");
}

#[test]
fn events_inside_the_digest_spans_are_not_read_again() {
    // A few events, all inside the first and the last 4 KiB of the file: the two digest
    // spans prove them.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut kinds = vec![
        event("p", "branch", json!(1)),
        event("q", "session", json!(2)),
    ];
    kinds.push(Kind::Message(40_000));
    kinds.push(event("p", "branch", json!(3)));
    let entries = chain(kinds);
    let file = write_file(dir.path(), &entries);
    let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
    store.catch_up(&file).expect("build");
    foreign_append(&file, "e3");
    let (c, work) = work_of(&store, || store.catch_up(&file).expect("catch up"));
    assert!(!c.rebuilt, "{c:?}");
    assert_eq!(work.verify_reads, 2, "the two digest spans only: {work:?}");
    assert_eq!(
        read(&store, &file, "p", Scope::Branch, None),
        Some(json!(3))
    );
}

/// Overwrites one byte of the `nth` state event's value (same length) with `by`.
fn edit_event(file: &Path, nth: usize) {
    let bytes = std::fs::read(file).expect("read");
    let mut seen = 0;
    let mut offset = 0;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if line.windows(14).any(|w| w == b"session-state/") {
            if seen == nth {
                let at = line
                    .windows(5)
                    .position(|w| w == b"\"i\":1" || w == b"\"i\":2")
                    .expect("a value to edit")
                    + 4;
                let mut edited = bytes.clone();
                edited[offset + at] = if line[at] == b'1' { b'2' } else { b'1' };
                std::fs::write(file, edited).expect("write");
                return;
            }
            seen += 1;
        }
        offset += line.len();
    }
    panic!("no event {nth}");
}

#[test]
fn an_edit_of_any_folded_event_is_caught_after_a_foreign_append() {
    let events = 600;
    for nth in [1, 150, 333, 599] {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries: Vec<Entry> = chain((0..events).flat_map(|i| {
            let v = json!({ "i": 1 + i % 2 });
            [Kind::Message(5000 + 97 * (i % 7)), event("p", "branch", v)]
        }));
        let file = write_file(dir.path(), &entries);
        let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
        store.catch_up(&file).expect("build");
        edit_event(&file, nth);
        foreign_append(&file, &format!("e{}", entries.len() - 1));
        let c = store.catch_up(&file).expect("catch up");
        assert!(c.rebuilt, "an edit of event {nth} must rebuild: {c:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Random trees against the reference
// ---------------------------------------------------------------------------------------

fn arb_session() -> impl Strategy<Value = (Vec<Entry>, Vec<usize>)> {
    let entry = (0usize..100, 0usize..8, 0usize..3, 0usize..4, any::<u8>());
    (
        prop::collection::vec(entry, 1..70),
        prop::collection::vec(1usize..70, 0..3),
    )
        .prop_map(|(raw, cuts)| {
            let mut entries: Vec<Entry> = Vec::new();
            for (i, (parent, what, plugin, op, v)) in raw.into_iter().enumerate() {
                // Mostly the previous entry; sometimes any earlier one (a fork), rarely
                // a new root.
                let parent = match (i, parent) {
                    (0, _) | (_, 0) => None,
                    (_, p) if p < 70 => Some(i - 1),
                    (_, p) => Some(p % i),
                };
                let plugin = ["a", "b", "c"][plugin];
                let scope = if what < 2 { "session" } else { "branch" };
                let data = match op {
                    0 => json!({"v": 1, "scope": scope, "op": "drop"}),
                    1 => json!({"v": 1, "scope": scope, "op": "patch", "patch": {"k": v % 4}}),
                    _ => json!({"v": 1, "scope": scope, "op": "set", "value": {"v": v}}),
                };
                entries.push(Entry {
                    parent,
                    kind: if what == 7 {
                        Kind::Message(v as usize)
                    } else {
                        Kind::Event {
                            plugin: plugin.into(),
                            data,
                        }
                    },
                });
            }
            (entries, cuts)
        })
}

/// Every node, every plugin, both scopes: the projection (built in several catch-ups of
/// small chunks) and the in-memory fold equal the reference.
fn check_session(entries: &[Entry], cuts: &[usize]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    std::fs::write(&file, format!("{HEADER}\n")).expect("write");
    let store = common::open_store(&dir.path().join("db.sqlite")).expect("store");
    store.set_chunk_hook(5, None).expect("chunks");
    let mut at = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (entries.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(entries.len());
    for cut in cuts {
        if cut > at {
            append(&file, &text(entries, at..cut));
            at = cut;
            store.catch_up(&file).expect("catch up");
        }
    }
    let log = SessionLog::open(&file).expect("open");
    for plugin in ["a", "b", "c", "absent"] {
        for scope in [Scope::Branch, Scope::Session] {
            let fold = store.state::<Value>(plugin, scope).expect("state");
            for node in 0..entries.len() {
                let at = format!("e{node}");
                let expect = reference_at(entries, node, plugin, scope);
                prop_assert_eq!(
                    read(&store, &file, plugin, scope, Some(&at)),
                    expect.clone(),
                    "projection: {} {:?} at {}",
                    plugin,
                    scope,
                    at
                );
                prop_assert_eq!(
                    fold.read_at(&log, &at).expect("fold"),
                    expect,
                    "in-memory fold: {} {:?} at {}",
                    plugin,
                    scope,
                    at
                );
            }
        }
    }
    Ok(())
}

#[test]
fn random_trees_read_as_the_reference_at_every_entry_in_both_folds() {
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/plugins.txt"
        )))),
        ..Config::default()
    });
    runner
        .run(&arb_session(), |(entries, cuts)| {
            check_session(&entries, &cuts)
        })
        .expect("projection equals the reference");
}
