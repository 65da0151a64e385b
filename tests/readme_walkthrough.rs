//! The README's CLI session, run for real: every command of its console block is run in
//! one bash session (with `ss` the built binary and `/tmp/demo` moved into a temporary
//! folder), and what each prints is compared with what the README shows below it. Entry
//! ids differ per run, so ids are compared by where they recur: the n-th distinct id of
//! the README must stand where the n-th distinct id of the real output stands.
#![expect(clippy::unwrap_used)]

use crate::common;
use std::path::Path;
use std::process::Command;

/// The commands of the console block of the README's "CLI users", each with the lines
/// shown under it.
fn walkthrough(readme: &str) -> Vec<(String, String)> {
    let section = &readme[readme
        .find("## CLI users")
        .expect("the README has its CLI session, under \"CLI users\"")..];
    let start = section.find("```console\n").expect("a console block") + "```console\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let mut steps: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push((cmd.to_owned(), String::new()));
        } else {
            let (_, out) = steps.last_mut().expect("output before any command");
            out.push_str(line);
            out.push('\n');
        }
    }
    steps
}

/// Ids (eight lowercase hex digits standing alone) numbered by first appearance.
fn number_ids(text: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::new();
    let mut word = String::new();
    let mut flush = |word: &mut String, out: &mut String| {
        let is_id = word.len() == 8
            && word
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if is_id {
            let n = match seen.iter().position(|s| s == word) {
                Some(n) => n,
                None => {
                    seen.push(word.clone());
                    seen.len() - 1
                }
            };
            out.push_str(&format!("[ID{n}]"));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[test]
fn the_readme_walkthrough_shows_what_the_commands_print() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let steps = walkthrough(&readme);
    assert!(steps.len() >= 10, "{steps:?}");
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().canonicalize().unwrap();
    let tmp = tmp.to_str().unwrap();

    let mut script = format!("set -u\nss() {{ '{}' \"$@\"; }}\n", common::BIN);
    for (i, (cmd, _)) in steps.iter().enumerate() {
        if cmd.starts_with("alias ss=") {
            // `ss` is the function above: the test runs the binary it built.
            continue;
        }
        script.push_str(&format!(
            "echo '@@@ {i}'\n{}\n",
            cmd.replace("/tmp/demo", &format!("{tmp}/demo"))
        ));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr, "", "the walk-through prints nothing on stderr");

    // The real transcript, in the README's shape.
    let mut shown = vec![String::new(); steps.len()];
    let mut current = None;
    for line in stdout.lines() {
        if let Some(i) = line.strip_prefix("@@@ ") {
            current = Some(i.parse::<usize>().unwrap());
            continue;
        }
        let i = current.expect("output before the first marker");
        shown[i].push_str(&line.replace(&format!("{tmp}/demo"), "/tmp/demo"));
        shown[i].push('\n');
    }
    let transcript = |outs: &[String]| -> String {
        steps
            .iter()
            .zip(outs)
            .map(|((cmd, _), out)| format!("$ {cmd}\n{out}"))
            .collect()
    };
    let readme_outs: Vec<String> = steps.iter().map(|(_, o)| o.clone()).collect();
    assert_eq!(
        number_ids(&transcript(&shown)),
        number_ids(&transcript(&readme_outs)),
        "the README's CLI session (right) does not show what the commands print (left)"
    );
}

#[test]
fn ids_are_compared_by_where_they_recur() {
    assert_eq!(
        number_ids("a 7558f63f b 08b68632 7558f63f 01a22bc8-9653 deadbeefcafe"),
        "a [ID0] b [ID1] [ID0] [ID2]-9653 deadbeefcafe"
    );
    assert_ne!(
        number_ids("7558f63f 08b68632"),
        number_ids("7558f63f 7558f63f")
    );
}

/// Every README paragraph that tells library users about `default-features = false` names
/// each feature it leaves out: every one of Cargo.toml's default features.
#[test]
fn the_readme_names_every_default_feature_that_default_features_false_leaves_out() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.starts_with("default = ["))
        .expect("Cargo.toml has default features");
    let defaults: Vec<&str> = line["default = [".len()..line.len() - 1]
        .split(',')
        .map(|f| f.trim().trim_matches('"'))
        .collect();
    assert!(defaults.contains(&"postgres"), "{defaults:?}");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let paragraphs: Vec<&str> = readme
        .split("\n\n")
        .filter(|p| p.contains("default-features = false"))
        .collect();
    assert!(!paragraphs.is_empty());
    for p in paragraphs {
        for feature in &defaults {
            assert!(p.contains(&format!("`{feature}`")), "{feature}: {p}");
        }
    }
}
