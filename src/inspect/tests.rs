use super::*;
use crate::error::Result;
use crate::log::reader::FindingKind;
use crate::state::envelope::{STATE_PREFIX, Scope};
use crate::tree::SessionLog;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The per-tip answers: [`value_at`] per plugin, `path_to`, `branch_key_of`, and the
/// custom entries counted along the path.
fn per_tip(log: &SessionLog) -> Vec<String> {
    let plugins: std::collections::BTreeSet<&str> =
        log.entries().filter_map(|e| e.state_plugin()).collect();
    log.tips()
        .into_iter()
        .map(|tip| {
            let path = log.path_to(tip).unwrap();
            let mut custom: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
            for id in &path {
                let e = log.entry(id).unwrap();
                if e.entry_type() == crate::EntryType::Custom
                    && let Some(ct) = e.custom_type().filter(|c| !c.starts_with(STATE_PREFIX))
                {
                    let slot = custom.entry(ct).or_insert((0, id));
                    slot.0 += 1;
                    slot.1 = id;
                }
            }
            let branch: Vec<(&str, String)> = plugins
                .iter()
                .map(|p| (*p, show(value_at(log, p, Scope::Branch, tip))))
                .collect();
            let custom: Vec<(&str, u64, &str)> =
                custom.into_iter().map(|(c, (n, l))| (c, n, l)).collect();
            format!(
                "{tip} {} {} {branch:?} {custom:?}",
                path.len(),
                log.branch_key_of(tip).unwrap()
            )
        })
        .collect()
}

fn show(r: Result<Option<Value>>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error {e}"),
    }
}

/// The one walk's answers, in file order of the tips.
fn walked(log: &SessionLog) -> Vec<String> {
    let mut rows = Vec::new();
    fold_tips(log, |t| {
        let branch: Vec<(&str, String)> = t.branch.into_iter().map(|(p, v)| (p, show(v))).collect();
        assert_eq!(log.entries().nth(t.index).unwrap().id(), t.tip);
        rows.push((
            t.index,
            format!(
                "{} {} {} {branch:?} {:?}",
                t.tip, t.depth, t.branch_key, t.custom
            ),
        ));
    });
    rows.sort_by_key(|r| r.0);
    rows.into_iter().map(|r| r.1).collect()
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A report as the CLI prints it.
fn printed(report: &impl Serialize) -> String {
    crate::json::to_string(&serde_json::to_value(report).unwrap())
}

#[test]
fn event_counts_count_every_event_by_plugin_and_scope() {
    let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
    let counts = event_counts(&log);
    assert_eq!(
        printed(&counts),
        r#"{"role":{"invalid":2},"todo":{"session":2}}"#
    );
    assert_eq!(
        printed(&counts.rows()),
        r#"[{"plugin":"role","scope":"invalid","events":2},{"plugin":"todo","scope":"session","events":2}]"#
    );
    assert!(counts.of("role").may_set(Scope::Branch));
    assert!(counts.of("todo").may_set(Scope::Session));
    assert!(!counts.of("todo").may_set(Scope::Branch));
    assert_eq!(counts.of("nobody"), PluginEvents::default());
    // Every branch counts, not only the active one.
    let example = SessionLog::open(fixture("example.jsonl")).unwrap();
    assert_eq!(
        printed(&event_counts(&example)),
        r#"{"role":{"branch":2},"todo":{"session":2}}"#
    );
}

/// Every [`FindingKind`], in declaration order. The `match` is exhaustive, so a new kind
/// does not compile until it is listed here (and so tested below).
fn every_finding_kind() -> Vec<FindingKind> {
    use FindingKind::*;
    let mut all = Vec::new();
    let mut next = Some(TornTail);
    while let Some(k) = next {
        all.push(k);
        next = match k {
            TornTail => Some(TornRecord),
            TornRecord => Some(UnparsableFinalLine),
            UnparsableFinalLine => Some(BlankLine),
            BlankLine => Some(ExtraHeader),
            ExtraHeader => Some(ByteOrderMark),
            ByteOrderMark => Some(Corrupt),
            Corrupt => Some(InvalidEntry),
            InvalidEntry => Some(DuplicateId),
            DuplicateId => Some(DanglingParent),
            DanglingParent => Some(Cycle),
            Cycle => Some(InvalidHeader),
            InvalidHeader => Some(RepeatedMember),
            RepeatedMember => None,
        };
    }
    all
}

#[test]
fn integrity_kind_names_are_the_serialized_finding_kinds() {
    let kinds = every_finding_kind();
    let count = kinds.len();
    let mut names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    for k in kinds {
        let name = serde_json::to_value(k).unwrap();
        assert_eq!(serde_json::to_value(IntegrityKind::Log(k)).unwrap(), name);
        assert_eq!(name, k.as_str());
        assert!(
            k.as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-'),
            "{k:?}"
        );
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "the names are distinct");
    assert_eq!(IntegrityKind::BadStateEvent.as_str(), "bad-state-event");
}

#[test]
fn integrity_lists_undecodable_events_among_the_findings_in_file_order() {
    let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
    let report = integrity(&log);
    assert_eq!(report.entries, 7);
    let kinds: Vec<(&str, u64)> = report
        .findings
        .iter()
        .map(|f| (f.kind.as_str(), f.at.line))
        .collect();
    assert_eq!(kinds, [("bad-state-event", 4), ("bad-state-event", 5)]);
    assert_eq!(
        report.findings[0].to_string(),
        "warning bad-state-event at line 4, byte 823, entry 'a0000003': plugin 'role': \
         unknown envelope version v=9 (this crate reads v=1 and v=2); reads of this plugin fail"
    );
    let salvaged = crate::LogOptions::new()
        .mode(crate::ReadMode::Salvage)
        .open(fixture("edge/torn-tail.jsonl"))
        .unwrap();
    let report = integrity(&salvaged);
    assert_eq!(
        report.findings[0].kind,
        IntegrityKind::Log(FindingKind::TornTail)
    );
}

#[test]
fn a_replay_prints_its_values_losslessly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let lines = [
        r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}"#,
        r#"{"type":"custom","customType":"session-state/p","data":{"v":1,"scope":"branch","op":"set","value":{"t":"cut \ud83d","n":1.0,"1":0}},"id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}"#,
        r#"{"type":"custom","customType":"x","data":{"error":"\udc00"},"id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:00.000Z"}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let log = SessionLog::open(&path).unwrap();
    let mut ticks = Vec::new();
    let r = replay(&log, |tip| ticks.push(tip.to_owned()));
    assert_eq!(ticks, ["e2"]);
    assert!(r.is_complete());
    let tip = &r.tips[0];
    assert!(tip.leaf);
    assert_eq!(
        printed(&tip.branch),
        r#"{"p":{"value":{"1":0,"t":"cut \ud83d","n":1}}}"#
    );
    // Another extension's data is its own, even when it looks like an error report.
    assert_eq!(
        printed(&tip.custom),
        r#"{"x":{"entries":1,"lastEntry":"e2","lastData":{"error":"\udc00"}}}"#
    );
    assert_eq!(printed(&r.session), r#"{"p":{"absent":true}}"#);
}

#[test]
fn a_replay_is_incomplete_when_a_value_cannot_be_read() {
    let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
    let r = replay(&log, |_| {});
    assert!(!r.is_complete());
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["tips"][0]["branch"]["role"]["error"].is_string(), "{v}");
    let log = SessionLog::open(fixture("example.jsonl")).unwrap();
    let r = replay(&log, |_| {});
    assert!(r.is_complete());
    assert_eq!(r.tips.len(), 2);
    assert_eq!(r.tips.iter().filter(|t| t.leaf).count(), 1);
    assert_eq!(r.leaf.as_deref(), log.leaf_id());
}

#[test]
fn one_walk_agrees_with_per_tip_folds_on_the_fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut compared = 0;
    for sub in [dir.clone(), dir.join("edge")] {
        for f in std::fs::read_dir(sub).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_none_or(|x| x != "jsonl") {
                continue;
            }
            // Files the strict reader refuses have no tree to walk.
            let Ok(log) = SessionLog::open(&path) else {
                continue;
            };
            assert_eq!(walked(&log), per_tip(&log), "{}", path.display());
            compared += 1;
        }
    }
    assert!(compared >= 12, "only {compared} fixtures compared");
}

#[test]
fn one_walk_agrees_with_per_tip_folds_on_random_trees() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut saw_error, mut saw_fork) = (false, false);
    for round in 0..60 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut s = String::from(
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\
             \"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
        );
        let n = 1 + next(80) as usize;
        for i in 0..n {
            let parent = if i == 0 || next(15) == 0 {
                "null".to_owned()
            } else {
                // Mostly recent entries, so deep chains and forks both occur.
                let window = if next(2) == 0 { 3 } else { 40 };
                let back = 1 + next((i as u64).min(window));
                format!("\"e{}\"", i as u64 - back)
            };
            let head = format!(
                "\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\""
            );
            let plugin = ["a", "b", "c"][next(3) as usize];
            let scope = if next(4) == 0 { "session" } else { "branch" };
            let body = match next(9) {
                0 | 1 => format!(
                    "{{\"type\":\"message\",{head},\"message\":{{\"role\":\"user\",\
                     \"content\":\"hi\",\"timestamp\":1}}}}"
                ),
                2 => format!(
                    "{{\"type\":\"custom\",\"customType\":\"x{}\",\"data\":{i},{head}}}",
                    next(3)
                ),
                3 => format!(
                    "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                     \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"drop\"}},{head}}}"
                ),
                4 => format!(
                    "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                     \"data\":{{\"v\":{},\"scope\":\"{scope}\",\"op\":\"set\",\"value\":1}},{head}}}",
                    if next(6) == 0 { 9 } else { 1 }
                ),
                5 | 6 => format!(
                    "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                     \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"patch\",\
                     \"value\":{{\"k{}\":{i}}}}},{head}}}",
                    next(3)
                ),
                _ => format!(
                    "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                     \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"set\",\
                     \"value\":{{\"n\":{i}}}}},{head}}}"
                ),
            };
            let _ = writeln!(s, "{body}");
        }
        std::fs::write(&path, &s).unwrap();
        let log = SessionLog::open(&path).unwrap();
        let rows = walked(&log);
        assert_eq!(rows, per_tip(&log), "round {round}:\n{s}");
        saw_error |= rows.iter().any(|r| r.contains("error"));
        saw_fork |= !log.forks().is_empty();
    }
    assert!(saw_error && saw_fork, "the trees lack bad events or forks");
}
