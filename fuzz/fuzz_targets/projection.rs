//! The projection against the in-memory fold and a naive reference, across forks and
//! across appends. The input is a generated session (a tree with forks, three plugins'
//! events in both scopes, `set` / `patch` / `drop`, envelopes this crate cannot read,
//! other extensions' entries), written in stages: after each stage every plugin is read
//! in both scopes at (a sample of) every entry, through the projection
//! (`read_at` on the file: a first catch-up, then catch-ups that read only what was appended),
//! folded in memory (`read_at`) and folded by the reference (the path from the root), and
//! the three must agree. Between stages the library writes too: through an open log
//! (the write transaction, `store/write.rs`) and without one (the tail path,
//! `write` on the file), and the value it wrote must be what every reader then reads.
//! Proptest relatives: `tests/projection.rs`, `tests/differential.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use session_state::{Error, On, SessionLog, SessionState, Store, json, StateError};
use session_state_fuzz::{
    Input, PLUGINS, Reference, SCOPES, Session, Unreadable, agree, expected, sample, scratch_dir,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

struct Scratch {
    dir: tempfile::TempDir,
    store: Store,
    states: Vec<SessionState<Value>>,
    last: Mutex<Option<PathBuf>>,
}

fn scratch() -> &'static Scratch {
    static S: std::sync::OnceLock<Scratch> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch_dir();
        let store = Store::at(dir.path().join("states.sqlite")).expect("a database path");
        let states = PLUGINS
            .iter()
            .flat_map(|p| SCOPES.map(|s| (p, s)))
            .map(|(p, s)| store.state(p, s).expect("a plugin id"))
            .collect();
        Scratch {
            dir,
            store,
            states,
            last: Mutex::new(None),
        }
    })
}

/// Every plugin in both scopes at a sample of the entries: projection, memory, reference.
fn check(s: &Scratch, file: &Path) -> SessionLog {
    let log = SessionLog::open(file).expect("the generated session reads strictly");
    let reference = Reference::of(&log);
    // A read through the projection costs a few hundred µs (it checks the file each
    // time), one in memory a few: the projection is asked at fewer places.
    let mut at = sample(&log, 12);
    at.extend(log.tips().into_iter().take(4).map(str::to_owned));
    let mut projected = sample(&log, 3);
    projected.extend(log.tips().into_iter().take(2).map(str::to_owned));
    at.extend(projected.iter().cloned());
    at.sort();
    at.dedup();
    for st in &s.states {
        let p = st.plugin_id();
        for id in &at {
            let want = reference.expected(&log, p, st.scope(), id);
            agree(
                &format!("memory {p} {:?} at {id}", st.scope()),
                &st.read_at(&log, id),
                &want,
                p,
            );
            if projected.contains(id) {
                let proj = st.read_at(file, id);
                agree(
                    &format!("projection {p} {:?} at {id}", st.scope()),
                    &proj,
                    &want,
                    p,
                );
            }
        }
        if let Some(leaf) = log.leaf_id() {
            let want = reference.expected(&log, p, st.scope(), leaf);
            agree(
                &format!("projection {p} at the leaf"),
                &st.read(file),
                &want,
                p,
            );
            agree(&format!("memory {p} at the leaf"), &st.read(&log), &want, p);
        }
    }
    log
}

/// What the library is asked to write between two stages.
enum Write_ {
    Set(Value),
    Patch(Value),
    Drop,
}

fn library_write(s: &Scratch, file: &Path, inp: &mut Input<'_>) {
    let st = &s.states[inp.below(s.states.len())];
    let text = session_state_fuzz::value(inp, 0);
    let Ok(v) = json::from_str(&text) else { return };
    let w = match inp.byte() % 4 {
        0 | 1 => Write_::Set(v),
        2 => Write_::Patch(v),
        _ => Write_::Drop,
    };
    let through_log = inp.chance(2);
    let before = SessionLog::open(file).expect("reads strictly");
    // At the last entry, or (a fork) at an earlier one.
    let at: Option<String> = if inp.chance(3) && !before.is_empty() {
        before
            .entries()
            .nth(inp.below(before.len()))
            .map(|e| e.id().to_owned())
    } else {
        None
    };
    let leaf = at.clone().or_else(|| before.leaf_id().map(str::to_owned));
    let current = match &leaf {
        Some(l) => expected(&before, st.plugin_id(), st.scope(), l),
        None => Ok(None),
    };
    let result: Result<Option<String>, Error> = if through_log {
        let mut log = before;
        if let Some(at) = &at {
            log.navigate(at).expect("navigate to an entry");
        }
        match &w {
            Write_::Set(v) => st.write(&mut log, v),
            Write_::Patch(p) => st.patch(&mut log, p),
            Write_::Drop => st.drop(&mut log),
        }
    } else {
        drop(before);
        match &w {
            Write_::Set(v) => st.write(On::file(file, at.as_deref()), v),
            Write_::Patch(p) => st.patch(On::file(file, at.as_deref()), p),
            Write_::Drop => st.drop(On::file(file, at.as_deref())),
        }
    };
    let after = SessionLog::open(file).expect("reads strictly after a write");
    match (&result, &current) {
        (Err(Error::State(StateError::BadEvent { plugin, .. })), Err(Unreadable)) if plugin == st.plugin_id() => {}
        // A value JavaScript would not read back (an integer beyond 2^53).
        (Err(Error::State(StateError::UnrepresentableValue { .. })), _) => {}
        (Err(e), _) => panic!("a write of {} failed: {e}", st.plugin_id()),
        (Ok(_), Err(Unreadable)) => {
            panic!("a write over a bad event of {} succeeded", st.plugin_id())
        }
        (Ok(id), Ok(cur)) => {
            let want = match &w {
                Write_::Set(v) => Some(v.clone()),
                Write_::Drop => None,
                Write_::Patch(p) => {
                    let mut doc = cur
                        .clone()
                        .unwrap_or_else(|| Value::Object(Default::default()));
                    json::merge_patch(&mut doc, p);
                    Some(doc)
                }
            };
            let leaf = after.leaf_id().expect("a leaf after a write").to_owned();
            match id {
                Some(id) => {
                    assert_eq!(&leaf, id, "the new event is the last entry");
                    let parent = after
                        .entry(id)
                        .and_then(|e| e.parent_id())
                        .map(str::to_owned);
                    assert!(
                        at.is_none() || parent == at,
                        "written at {at:?}, its parent is {parent:?}"
                    );
                }
                None => assert!(
                    session_state_fuzz::js_eq_opt(cur.as_ref(), want.as_ref()),
                    "nothing was appended, but the value changes: {cur:?} -> {want:?}"
                ),
            }
            // Nothing appended: the value at the position written at is unchanged.
            let pos = if id.is_some() {
                Some(leaf.clone())
            } else {
                at.clone().or(Some(leaf.clone()))
            };
            let now = expected(
                &after,
                st.plugin_id(),
                st.scope(),
                pos.as_deref().unwrap_or_default(),
            );
            assert!(
                matches!(&now, Ok(v) if session_state_fuzz::js_eq_opt(v.as_ref(), want.as_ref())),
                "after the write the reference reads {now:?}, not {want:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    static N: AtomicU64 = AtomicU64::new(0);
    let s = scratch();
    let mut inp = Input::new(data);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let session = Session::generate(&mut inp, 3, &format!("fuzz-{n}"), 48);
    if session.lines.is_empty() {
        return;
    }
    let file = s.dir.path().join(format!("s{n}.jsonl"));
    // The previous input's file and its rows: each input starts from nothing.
    if let Some(prev) = s.last.lock().expect("not poisoned").replace(file.clone()) {
        s.store.forget(&prev).expect("forget a session's rows");
        let _ = std::fs::remove_file(prev);
    }
    let mut stages = session.stages.clone();
    stages.push(session.lines.len());
    std::fs::write(&file, session.text(stages[0])).expect("write the session");
    check(s, &file);
    for w in stages.windows(2) {
        if inp.chance(2) {
            library_write(s, &file, &mut inp);
            check(s, &file);
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .expect("open");
        f.write_all(session.lines_text(w[0], w[1]).as_bytes())
            .expect("append");
        drop(f);
        check(s, &file);
    }
    if inp.chance(2) {
        library_write(s, &file, &mut inp);
        check(s, &file);
    }
});
