//! A valid log cut at every byte offset of its last line loads exactly the complete
//! lines; a corrupt middle line is refused with its line number.
#![expect(clippy::unwrap_used)]

use serde_json::json;
use session_state::*;

fn sample(dir: &std::path::Path) -> (std::path::PathBuf, Vec<String>) {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .unwrap();
    let mut ids = vec![];
    ids.push(
        log.append(NewEntry::message(
            json!({"role":"user","content":"héllo wörld ✓"}),
        ))
        .unwrap(),
    );
    ids.push(
        log.append(NewEntry::custom(
            "session-state/role",
            Some(json!({"v":1,"scope":"branch","op":"set","value":{"name":"ünïcode ✓"}})),
        ))
        .unwrap(),
    );
    ids.push(
        log.append(NewEntry::message(
            json!({"role":"assistant","content":[{"type":"text","text":"multi\nline ✓ 😀"}]}),
        ))
        .unwrap(),
    );
    (log.path().to_path_buf(), ids)
}

#[test]
fn every_cut_of_the_last_line_loads_exactly_the_complete_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = sample(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let cut_path = dir.path().join("cut.jsonl");
    let mut cuts = 0;
    for cut in last_start..=bytes.len() {
        std::fs::write(&cut_path, &bytes[..cut]).unwrap();
        let log = SessionLog::open(&cut_path).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let got: Vec<&str> = log.entries().map(|e| e.id()).collect();
        let expect = if cut == bytes.len() {
            &ids[..]
        } else {
            &ids[..2]
        };
        assert_eq!(got, expect, "cut at byte {cut}");
        let findings = log.findings();
        if cut == last_start || cut == bytes.len() {
            assert!(findings.is_empty(), "cut at {cut}: {findings:?}");
        } else {
            assert_eq!(findings.len(), 1, "cut at {cut}");
            assert_eq!(findings[0].kind, FindingKind::TornTail);
            assert_eq!(findings[0].at.offset, last_start as u64);
        }
        // Reading never modifies the file.
        assert_eq!(std::fs::read(&cut_path).unwrap(), &bytes[..cut]);
        cuts += 1;
    }
    println!("cuts checked: {cuts}");
}

#[test]
fn a_torn_record_inside_the_file_is_skipped_wherever_it_stands() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = sample(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    // Cut line 3 (ids[1]) at every offset and terminate it, as Pi 1.x does after a crash.
    for cut in 1..lines[2].len() - 1 {
        let mut f = Vec::new();
        f.extend_from_slice(lines[0]);
        f.extend_from_slice(lines[1]);
        f.extend_from_slice(&lines[2][..cut]);
        f.push(b'\n');
        // The entry after it names the torn entry as parent; re-parent it to ids[0].
        let next = String::from_utf8(lines[3].to_vec())
            .unwrap()
            .replace(&ids[1], &ids[0]);
        f.extend_from_slice(next.as_bytes());
        let p = dir.path().join("torn.jsonl");
        std::fs::write(&p, &f).unwrap();
        let log = SessionLog::open(&p).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let got: Vec<&str> = log.entries().map(|e| e.id()).collect();
        assert_eq!(got, vec![ids[0].as_str(), ids[2].as_str()], "cut {cut}");
        let f = log.findings();
        assert_eq!(f.len(), 1, "cut {cut}: {f:?}");
        assert_eq!(f[0].kind, FindingKind::TornRecord);
        assert_eq!(f[0].at.line, 3);
    }
}

#[test]
fn a_corrupt_middle_line_is_refused_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[2] = lines[2].replacen(",", ",,", 1);
    let corrupt = lines.join("\n") + "\n";
    let p = dir.path().join("corrupt.jsonl");
    std::fs::write(&p, &corrupt).unwrap();
    let offset = (lines[0].len() + lines[1].len() + 2) as u64;
    match SessionLog::open(&p).unwrap_err() {
        OpenError::Invalid(InvalidLog::Corrupt { at, .. }) => {
            assert_eq!(at.line, 3);
            assert_eq!(at.offset, offset);
        }
        e => panic!("expected Corrupt, got {e}"),
    }
    let msg = SessionLog::open(&p).unwrap_err().to_string();
    assert!(
        msg.contains("line 3") && msg.contains(&format!("byte offset {offset}")),
        "{msg}"
    );
    // Salvage reads what Pi would: the other entries, with the bad line reported.
    let log = LogOptions::new().mode(ReadMode::Salvage).open(&p).unwrap();
    assert_eq!(log.len(), 2);
    let f = log.findings();
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!((f[0].kind, f[0].at.line), (FindingKind::Corrupt, 3));
    // Its child lost its parent: salvage reads it as a root, as Pi does.
    assert_eq!((f[1].kind, f[1].at.line), (FindingKind::DanglingParent, 4));
    assert_eq!(log.roots().len(), 2);
    // The same damage on the final line is a torn record, not corruption.
    let mut last = text.lines().map(str::to_owned).collect::<Vec<_>>();
    let n = last.len() - 1;
    last[n] = last[n].replacen(",", ",,", 1);
    std::fs::write(&p, last.join("\n") + "\n").unwrap();
    let log = SessionLog::open(&p).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log.findings()[0].kind, FindingKind::UnparsableFinalLine);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), last.join("\n") + "\n");
}
