//! The read-only views of `session_state::inspect` and the command line's own (through the
//! `__internal` test seam: what `session-state replay`, `verify`
//! and `status` print) on generated sessions, read strictly or, with damage added (a blank
//! line, a corrupt line, a line cut by a crash, a torn tail), in salvage mode:
//! - `replay`: at every tip, every plugin's branch value is the reference fold of the
//!   tip's path, its session value the fold of the file, its depth, branch key and other
//!   extensions' entries what the path says; `replay_tips` gives the same report;
//!   `fold_tips` and `value_at` agree with it;
//! - `event_counts` counts what the reference decodes, and `integrity` lists every
//!   undecodable event once, among the reader's findings, in file order.
//!
//! Proptest relatives: `tests/replay.rs`, `src/inspect/tests.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use session_state::__internal::{
    IntegrityKind, ReplayValue, fold_tips, integrity, replay, replay_tips,
};
use session_state::inspect;
use session_state::{EntryType, InvalidLog, LogOptions, OpenError, ReadMode, Scope};
use session_state_fuzz::{Expected, Input, PLUGINS, Reference, Session, Unreadable, scratch_dir};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> &'static (tempfile::TempDir, PathBuf) {
    static S: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch_dir();
        let file = dir.path().join("inspect.jsonl");
        (dir, file)
    })
}

fn shown(v: &ReplayValue) -> Expected {
    match v {
        ReplayValue::Present(v) => Ok(Some(v.clone())),
        ReplayValue::Absent => Ok(None),
        ReplayValue::Unreadable(_) => Err(Unreadable),
    }
}

fn same(what: &str, got: Expected, want: &Expected) {
    let ok = match (&got, want) {
        (Ok(g), Ok(w)) => session_state_fuzz::js_eq_opt(g.as_ref(), w.as_ref()) && g == w,
        (Err(Unreadable), Err(Unreadable)) => true,
        _ => false,
    };
    assert!(ok, "{what}: replay says {got:?}, the reference {want:?}");
}

/// The damage a crash or an editor can leave, placed between the lines.
fn damaged(inp: &mut Input<'_>, s: &Session) -> (String, bool) {
    let mut out = s.text(0);
    let mut any = false;
    for l in &s.lines {
        match inp.byte() % 32 {
            0 => {
                out.push('\n');
                any = true;
            }
            1 => {
                out.push_str("{\"type\":\"message\",\"id\":\n");
                any = true;
            }
            2 => {
                // A line cut short, then the next record (a torn record).
                let mut cut = l.len() / 2;
                while !l.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&l[..cut]);
                out.push('\n');
                any = true;
            }
            _ => {}
        }
        out.push_str(l);
        out.push('\n');
    }
    if let Some(t) = &s.torn {
        out.push_str(t);
        any = true;
    }
    (out, any)
}

fuzz_target!(|data: &[u8]| {
    let (_, file) = scratch();
    let mut inp = Input::new(data);
    let session = Session::generate(&mut inp, 3, "fuzz", 64);
    let (text, damaged_) = damaged(&mut inp, &session);
    std::fs::write(file, &text).expect("write the session");
    let mode = if damaged_ {
        ReadMode::Salvage
    } else {
        ReadMode::Strict
    };
    let log = match LogOptions::new().mode(mode).open(file) {
        Ok(log) => log,
        Err(e) => {
            assert!(damaged_, "the undamaged session is refused: {e}");
            return;
        }
    };

    // What `verify` reads first: the strict reader's answer, or its refusal as reported.
    match LogOptions::new().open(file) {
        Ok(strict) => {
            let ids = |l: &session_state::SessionLog| {
                l.entries().map(|e| e.id().to_owned()).collect::<Vec<_>>()
            };
            assert_eq!(
                ids(&strict),
                ids(&log),
                "strict and salvage read different entries"
            );
        }
        Err(e) => {
            // Where the refusal points (the line and byte `verify` reports): in the file.
            let at = match &e {
                OpenError::Invalid(
                    InvalidLog::Corrupt { at, .. }
                    | InvalidLog::InvalidEntry { at, .. }
                    | InvalidLog::DuplicateId { at, .. }
                    | InvalidLog::DanglingParent { at, .. }
                    | InvalidLog::Cycle { at, .. },
                ) => Some(*at),
                _ => None,
            };
            if let Some(at) = at {
                assert!(
                    at.line >= 1 && at.offset < text.len() as u64,
                    "refused at line {}, byte {}",
                    at.line,
                    at.offset
                );
            }
        }
    }

    // Event counts and integrity: the reference's decoding of every state event.
    let reference = Reference::of(&log);
    let counts = inspect::event_counts(&log);
    let mut want: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    let mut bad = Vec::new();
    for e in log.entries() {
        let Some(ct) = e.custom_type() else { continue };
        let Some(p) = ct.strip_prefix("session-state/") else {
            continue;
        };
        if e.entry_type() != EntryType::Custom || !PLUGINS.contains(&p) {
            continue;
        }
        let c = want.entry(p.to_owned()).or_default();
        match reference.scope_of(e.id()) {
            Some(Scope::Branch) => c[0] += 1,
            Some(Scope::Session) => c[2] += 1,
            None => {
                assert!(reference.is_bad(e.id()));
                c[1] += 1;
                bad.push(e.id().to_owned());
            }
        }
    }
    // What the counts say, as `session-state status --json` and `replay --json` print them.
    let counted = serde_json::to_value(&counts).expect("counts serialize");
    let got: BTreeMap<String, [u64; 3]> = counted
        .as_object()
        .expect("an object of plugins")
        .iter()
        .map(|(p, c)| {
            let n = |s: &str| c.get(s).and_then(Value::as_u64).unwrap_or(0);
            (p.clone(), [n("branch"), n("invalid"), n("session")])
        })
        .collect();
    assert_eq!(got, want, "event counts");
    let integrity = integrity(&log);
    assert_eq!(integrity.entries, log.len());
    let listed: Vec<&str> = integrity
        .findings
        .iter()
        .filter(|f| f.kind == IntegrityKind::BadStateEvent)
        .filter_map(|f| f.entry_id.as_deref())
        .collect();
    assert_eq!(listed, bad, "the undecodable events integrity lists");
    assert!(
        integrity
            .findings
            .windows(2)
            .all(|w| w[0].at.offset <= w[1].at.offset),
        "findings out of file order"
    );
    for f in &integrity.findings {
        assert!(!f.to_string().is_empty());
    }

    // The replay against the reference, tip by tip.
    let report = replay(&log, |_| {});
    let tips = log.tips();
    assert_eq!(report.tips.len(), tips.len(), "one report per tip");
    assert_eq!(report.leaf.as_deref(), log.leaf_id());
    for p in got.keys() {
        let want = match log.leaf_id() {
            Some(leaf) => reference.expected(&log, p, Scope::Session, leaf),
            None => Ok(None),
        };
        same(
            &format!("session value of {p}"),
            shown(&report.session[p]),
            &want,
        );
    }
    for (t, id) in report.tips.iter().zip(&tips) {
        assert_eq!(&t.tip, id, "tips in file order");
        let path = log.path_to(id).expect("a path");
        assert_eq!(t.depth, path.len(), "depth of {id}");
        assert_eq!(
            t.branch_key,
            log.branch_key_of(id).expect("a key"),
            "branch key of {id}"
        );
        assert_eq!(t.leaf, log.leaf_id() == Some(*id));
        for p in got.keys() {
            let want = reference.expected(&log, p, Scope::Branch, id);
            same(&format!("{p} at tip {id}"), shown(&t.branch[p]), &want);
            let one = inspect::value_at(&log, p, Scope::Branch, id).map_err(|_| Unreadable);
            same(&format!("value_at {p} at tip {id}"), one, &want);
        }
        let mut custom: BTreeMap<String, (u64, String)> = BTreeMap::new();
        for e in path.iter().filter_map(|e| log.entry(e)) {
            if e.entry_type() == EntryType::Custom
                && let Some(ct) = e.custom_type().filter(|c| !c.starts_with("session-state/"))
            {
                let c = custom.entry(ct.to_owned()).or_insert((0, String::new()));
                c.0 += 1;
                c.1 = e.id().to_owned();
            }
        }
        let got: BTreeMap<String, (u64, String)> = t
            .custom
            .iter()
            .map(|(ct, c)| (ct.clone(), (c.entries, c.last_entry.clone())))
            .collect();
        assert_eq!(got, custom, "other extensions' entries at tip {id}");
    }

    // The streamed form and the callback walk say the same.
    let whole = serde_json::to_value(&report).expect("a report serializes");
    let (head, each) = replay_tips(&log, |_| {});
    let mut streamed = serde_json::to_value(&head).expect("a report serializes");
    let each: Vec<Value> = each
        .map(|t| serde_json::to_value(&t).expect("a tip serializes"))
        .collect();
    streamed["tips"] = Value::Array(each);
    assert!(streamed == whole, "replay_tips and replay disagree");
    let mut walked = 0;
    fold_tips(&log, |t| {
        walked += 1;
        for (p, v) in &t.branch {
            let want = reference.expected(&log, p, Scope::Branch, t.tip);
            same(
                &format!("fold_tips {p} at {}", t.tip),
                v.as_ref().map_or(Err(Unreadable), |x| Ok(x.clone())),
                &want,
            );
        }
    });
    assert_eq!(walked, tips.len());
});
