//! Corruption (docs/spec.md §2 reading rules): sessions generated with the library are damaged by
//! flipping, deleting or inserting one byte at a random position of a committed line
//! (seeded xorshift; `CORRUPTIONS` files, default 600). Every damaged file is
//!
//! - refused by the strict reader with the line that holds the damage (corrupt line,
//!   invalid entry, duplicate id, cycle, bad header), or with the line of an entry whose
//!   parent the damage removed or renamed (a dangling parent naming the damaged entry);
//! - or read with a warning at the damaged line, when the damage leaves a line that reads
//!   as torn (truncated JSON) and nothing refers to its entry;
//! - or, when the damage leaves valid JSON of the right shape (a changed value, a changed
//!   leaf id, a parent changed to another existing entry), read as it is: the log has no
//!   checksums, as Pi's has none. These are counted as undetectable value edits; a damaged
//!   state envelope among them is caught when its plugin is read (an error naming the
//!   entry and line).
//!
//! `session-state verify --json` reports the same line and exit code on a sample, and no
//! reader (strict, salvage, verify) changes a byte of the file.
#![expect(clippy::unwrap_used)]

use crate::common;
use common::examples::Rng;
use session_state::{LogError, StateError};

use serde_json::{Value, json};
use session_state::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const PLUGINS: [&str; 2] = ["role", "todo"];

/// A session of `n` entries: messages (with multi-byte text), state events of two
/// plugins in both scopes (set, patch, drop), labels, and forks (the leaf moved back to a
/// random earlier entry), so that many entries have children and some leaves sit in the
/// middle of the file.
fn generate(dir: &Path, rng: &mut Rng, n: usize) -> PathBuf {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj/ünïcode")
        .unwrap();
    let db = dir.join("gen.sqlite");
    let states = plugin_states(&db);
    let mut ids: Vec<String> = Vec::new();
    while log.len() < n {
        if !ids.is_empty() && rng.below(12) == 0 {
            let to = ids[rng.below(ids.len())].clone();
            log.navigate(&to).unwrap();
        }
        let i = log.len();
        let id = match rng.below(10) {
            0..=3 => {
                let role = if i.is_multiple_of(2) {
                    "user"
                } else {
                    "assistant"
                };
                let content = json!([{"type": "text", "text": format!("message {i}: héllo ✓ 😀 \"quoted\"")}]);
                Some(
                    log.append(NewEntry::message(json!({"role": role, "content": content})))
                        .unwrap(),
                )
            }
            4..=5 => states[0]
                .write(
                    &mut log,
                    &json!({"name": format!("r{i}"), "n": i, "tags": ["a", "b"]}),
                )
                .unwrap(),
            6 => states[0].drop(&mut log).unwrap(),
            7..=8 => states[1]
                .patch(
                    &mut log,
                    &json!({format!("k{}", i % 5): i, "done": i.is_multiple_of(3)}),
                )
                .unwrap(),
            _ => {
                let target = ids.last().cloned().unwrap_or_default();
                let mut f = serde_json::Map::new();
                f.insert("targetId".into(), target.into());
                f.insert("label".into(), format!("l{i}").into());
                Some(log.append(NewEntry::new("label", f)).unwrap())
            }
        };
        ids.extend(id);
    }
    log.path().to_path_buf()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Flip,
    Delete,
    Insert,
}

/// One damaged copy and what the damage did to the line structure.
struct Damage {
    op: Op,
    pos: usize,
    /// 1-based line (of the original) holding the damaged byte.
    line: u64,
    bytes: Vec<u8>,
    /// Lines at which a strict refusal counts as "the right line".
    lines: Vec<u64>,
}

/// A position: a third uniform over the file (mostly message text and values), a third
/// in the first 64 bytes of a line (type, ids, custom type), a third in its last 3
/// bytes (closing braces and the newline, where damage makes torn and merged lines).
fn position(orig: &[u8], starts: &[usize], rng: &mut Rng) -> usize {
    let l = rng.below(starts.len());
    let (start, end) = (starts[l], starts.get(l + 1).copied().unwrap_or(orig.len()));
    match rng.below(3) {
        0 => rng.below(orig.len()),
        1 => start + rng.below((end - start).min(64)),
        _ => end - 1 - rng.below(3.min(end - start)),
    }
}

fn damage(orig: &[u8], starts: &[usize], rng: &mut Rng) -> Damage {
    let op = [Op::Flip, Op::Delete, Op::Insert][rng.below(3)];
    let pos = position(orig, starts, rng);
    let line = 1 + orig[..pos].iter().filter(|&&b| b == b'\n').count() as u64;
    let mut bytes = orig.to_vec();
    let new_byte = loop {
        // Mostly printable bytes, sometimes anything (control bytes, high bytes, NUL).
        let b = if rng.below(4) == 0 {
            rng.below(256) as u8
        } else {
            0x20 + rng.below(0x5f) as u8
        };
        if op != Op::Flip || b != orig[pos] {
            break b;
        }
    };
    match op {
        Op::Flip => bytes[pos] = new_byte,
        Op::Delete => {
            bytes.remove(pos);
        }
        Op::Insert => bytes.insert(pos, new_byte),
    }
    // A new newline splits the line in two: the damage is then on line L or L+1.
    let splits = op != Op::Delete && new_byte == b'\n';
    let lines = if splits {
        vec![line, line + 1]
    } else {
        vec![line]
    };
    Damage {
        op,
        pos,
        line,
        bytes,
        lines,
    }
}

/// What happened to one damaged file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Refused, naming the damaged line.
    RefusedAtLine,
    /// Refused at a later entry whose parent the damage removed or renamed.
    RefusedAtChild,
    /// Read with a warning at the damaged line (a torn record or torn tail).
    Warned,
    /// Read as is; its state envelope no longer decodes: reading the plugin fails there.
    BadEventOnRead,
    /// Read as is, but the damaged `parentId` key made the entry a root, as Pi reads an
    /// entry without `parentId` (see `a_missing_parent_id_key_is_refused_by_the_strict_reader`).
    BecameRoot,
    /// Read as is: a value edit that no check can see (no checksums).
    ValueOnly,
}

struct Original {
    bytes: Vec<u8>,
    /// Byte offset of each line's start.
    starts: Vec<usize>,
    entries: usize,
    /// Entry id by line number.
    id_at: HashMap<u64, String>,
    /// Parent id by entry id.
    parent_of: HashMap<String, Option<String>>,
}

fn original(path: PathBuf) -> Original {
    let log = SessionLog::open(&path).unwrap();
    let parent_of = log
        .entries()
        .map(|e| (e.id().to_owned(), e.parent_id().map(str::to_owned)))
        .collect();
    assert!(log.findings().is_empty());
    let bytes = std::fs::read(&path).unwrap();
    let starts = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&i| i < bytes.len())
        .collect();
    Original {
        bytes,
        starts,
        entries: log.len(),
        id_at: log
            .entries()
            .map(|e| (e.location().line, e.id().to_owned()))
            .collect(),
        parent_of,
    }
}

/// The strict error's line, and the id the error blames on another line.
fn error_line(e: &Error) -> Option<u64> {
    match e {
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DuplicateId { at, .. })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent {
            at, ..
        })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Cycle { at, .. }))) => {
            Some(at.line)
        }
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::MissingHeader { .. })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidHeader { .. })))
        | Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::UnsupportedVersion {
            ..
        }))) => Some(1),
        _ => None,
    }
}

fn classify(
    o: &Original,
    d: &Damage,
    file: &Path,
    states: &[SessionState<Value>],
) -> (Outcome, Option<u64>) {
    let what = format!("{:?} at byte {} (line {})", d.op, d.pos, d.line);
    let before = std::fs::read(file).unwrap();
    let strict = SessionLog::open(file).map_err(Error::from);
    let salvage = LogOptions::new().mode(ReadMode::Salvage).open(file);
    assert_eq!(
        std::fs::read(file).unwrap(),
        before,
        "{what}: a reader modified the file"
    );
    if d.line > 1 {
        let s = salvage.unwrap_or_else(|e| panic!("{what}: salvage refused: {e}"));
        assert!(
            s.len() + 2 >= o.entries,
            "{what}: salvage kept {} of {}",
            s.len(),
            o.entries
        );
    }
    match strict {
        Err(e) => {
            let line = error_line(&e).unwrap_or_else(|| panic!("{what}: unexpected error {e}"));
            let shown = e.to_string();
            assert!(
                shown.contains(&file.display().to_string()),
                "{what}: {shown}"
            );
            if d.lines.contains(&line) {
                if line > 1 {
                    assert!(shown.contains(&format!("line {line} ")), "{what}: {shown}");
                }
                return (Outcome::RefusedAtLine, Some(line));
            }
            // Caught downstream: the damaged entry vanished (skipped as torn) or changed
            // its id, so a later entry names a parent that is no longer there, or the
            // damaged entry took an id that a later entry also has.
            let damaged_id = o.id_at.get(&d.line);
            let blamed = match &e {
                Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent {
                    parent,
                    ..
                }))) => damaged_id == Some(parent),
                Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DuplicateId {
                    first_line,
                    ..
                }))) => first_line.is_some_and(|l| d.lines.contains(&l)),
                _ => false,
            };
            assert!(
                blamed,
                "{what}: refused at line {line}, not at the damage: {shown}"
            );
            (Outcome::RefusedAtChild, Some(line))
        }
        Ok(log) => {
            let findings = log.findings();
            if !findings.is_empty() {
                for f in &findings {
                    assert_eq!(f.severity, Severity::Warning, "{what}: {f}");
                    assert!(
                        d.lines.contains(&f.at.line),
                        "{what}: finding elsewhere: {f}"
                    );
                    assert!(
                        matches!(
                            f.kind,
                            FindingKind::TornRecord
                                | FindingKind::TornTail
                                | FindingKind::UnparsableFinalLine
                        ),
                        "{what}: {f}"
                    );
                }
                assert!(log.len() + 1 >= o.entries, "{what}");
                return (Outcome::Warned, None);
            }
            assert_eq!(
                log.len(),
                o.entries,
                "{what}: an entry vanished without a finding"
            );
            if let Some(id) = o.id_at.get(&d.line)
                && let Some(e) = log.entry(id)
                && e.parent_id().is_none()
                && o.parent_of[id].is_some()
            {
                return (Outcome::BecameRoot, None);
            }
            // A damaged envelope is reported when its plugin is read at that entry.
            if let Some(id) = o.id_at.get(&d.line).filter(|id| log.entry(id).is_some()) {
                for st in states {
                    if let Err(e) = st.read_at(&log, id) {
                        let Error::State(StateError::BadEvent {
                            at,
                            entry_id,
                            plugin,
                            ..
                        }) = &e
                        else {
                            panic!("{what}: reading {}: {e}", st.plugin_id())
                        };
                        assert_eq!(at.line, d.line, "{what}: {e}");
                        assert_eq!(entry_id, id, "{what}");
                        assert_eq!(plugin, st.plugin_id(), "{what}");
                        return (Outcome::BadEventOnRead, None);
                    }
                }
            }
            (Outcome::ValueOnly, None)
        }
    }
}

/// `session-state verify --json`: exit code and the line it reports.
fn verify(file: &Path) -> (i32, Option<u64>, Value) {
    let before = std::fs::read(file).unwrap();
    let out = common::cli()
        .arg("verify")
        .arg(file)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        std::fs::read(file).unwrap(),
        before,
        "verify modified the file"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let line = report["error"]["line"].as_u64();
    (out.status.code().unwrap_or(-1), line, report)
}

#[test]
fn random_byte_damage_is_refused_at_its_line_warned_or_a_value_edit() {
    let n = env_usize("CORRUPTIONS", 600);
    let seed = env_usize("CORRUPTION_SEED", 0xc077_5eed) as u64 | 1;
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let originals: Vec<Original> = (0..2)
        .map(|i| {
            let d = dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(&d).unwrap();
            original(generate(&d, &mut rng, 150 + 100 * i))
        })
        .collect();
    let states = plugin_states(&dir.path().join("r.sqlite"));

    let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut by_op: BTreeMap<(Op, Outcome), usize> = BTreeMap::new();
    let mut verified = 0;
    let file = dir.path().join("damaged.jsonl");
    for i in 0..n {
        let o = &originals[i % originals.len()];
        let d = damage(&o.bytes, &o.starts, &mut rng);
        std::fs::write(&file, &d.bytes).unwrap();
        let (outcome, line) = classify(o, &d, &file, &states);
        *outcomes.entry(outcome).or_default() += 1;
        *by_op.entry((d.op, outcome)).or_default() += 1;
        if i % 12 == 0 {
            let (code, vline, report) = verify(&file);
            match line {
                Some(l) => {
                    assert_eq!(code, 1, "{:?} at {}: {report}", d.op, d.pos);
                    assert_eq!(vline, Some(l), "{report}");
                }
                None => assert_eq!(code, 0, "{:?} at {}: {report}", d.op, d.pos),
            }
            verified += 1;
        }
    }
    let refused_line = outcomes.get(&Outcome::RefusedAtLine).copied().unwrap_or(0);
    let refused_child = outcomes.get(&Outcome::RefusedAtChild).copied().unwrap_or(0);
    let warned = outcomes.get(&Outcome::Warned).copied().unwrap_or(0);
    let bad_events = outcomes.get(&Outcome::BadEventOnRead).copied().unwrap_or(0);
    let value_only = outcomes.get(&Outcome::ValueOnly).copied().unwrap_or(0);
    let became_root = outcomes.get(&Outcome::BecameRoot).copied().unwrap_or(0);
    println!(
        "files corrupted: {n}, refused with the right line: {} ({refused_line} at the damaged \
         line, {refused_child} at an entry whose parent it destroyed), warnings: {warned}, \
         value-only edits: {} ({bad_events} of them caught when the plugin is read), \
         parentId key lost (read as a root, as Pi does): {became_root}, verify runs: \
         {verified}, seed {seed:#x}",
        refused_line + refused_child,
        bad_events + value_only,
    );
    println!("by damage: {by_op:?}");
    assert_eq!(
        refused_line + refused_child + warned + bad_events + value_only + became_root,
        n
    );
    // Most single-byte damage breaks the JSON or the structure; a generator that stopped
    // producing such damage would make this test vacuous.
    assert!(refused_line > n / 3, "{outcomes:?}");
    assert!(warned > 0 && value_only > 0, "{outcomes:?}");
}

/// An entry line without a `parentId` key. Pi always writes the key (`null` for a root),
/// so in a version-3 file its absence is damage (here: the key name lost a byte). Pi reads
/// such an entry as a root, silently moving it and its subtree out of their branch, which
/// changes every fold below it. Strict mode must refuse it at its line, as it refuses a
/// parent that names no earlier entry; salvage reads it as a root, as Pi does.
#[test]
fn a_missing_parent_id_key_is_refused_by_the_strict_reader() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .unwrap();
    let a = log
        .append(NewEntry::message(json!({"role": "user", "content": "a"})))
        .unwrap();
    let b = log
        .append(NewEntry::message(
            json!({"role": "assistant", "content": "b"}),
        ))
        .unwrap();
    log.append(NewEntry::message(json!({"role": "user", "content": "c"})))
        .unwrap();
    let path = log.path().to_path_buf();
    let text = std::fs::read_to_string(&path).unwrap();
    let damaged = text.replacen(
        &format!("\"parentId\":\"{a}\""),
        &format!("\"parentI\":\"{a}\""),
        1,
    );
    assert_ne!(damaged, text);
    std::fs::write(&path, &damaged).unwrap();

    let salvage = LogOptions::new()
        .mode(ReadMode::Salvage)
        .open(&path)
        .unwrap();
    assert_eq!(
        salvage.entry(&b).unwrap().parent_id(),
        None,
        "salvage reads it as Pi does"
    );
    match SessionLog::open(&path) {
        Err(OpenError::Invalid(InvalidLog::InvalidEntry { at, id, .. })) => {
            assert_eq!(at.line, 3);
            assert_eq!(id.as_deref(), Some(b.as_str()));
        }
        Err(e) => panic!("refused, but not as an invalid entry at line 3: {e}"),
        Ok(log) => panic!(
            "strict read accepted entry {b} without a parentId key as a root: roots {:?}",
            log.roots()
        ),
    }
}

/// The first plugin in branch scope, the others in session scope.
fn plugin_states(db: &Path) -> Vec<SessionState<Value>> {
    PLUGINS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let scope = if i == 0 {
                Scope::Branch
            } else {
                Scope::Session
            };
            Store::at(db)
                .and_then(|store| store.state(*p, scope))
                .unwrap()
        })
        .collect()
}
