//! Where the projection database lives (`LocationInputs::resolve`): the fuzzer writes the
//! project's `.pi/settings.json`, the agent directory's `settings.json` and Pi's
//! `trust.json` (raw bytes, or a `sessionState.databasePath` of its choosing), and picks
//! the trust, the home directory and `PI_CODING_AGENT_DIR`'s value. Resolution must never
//! fail on a file's content (a broken file is a diagnostic, not an error), and:
//! - the path is absolute; the default source gives the default path;
//! - a diagnostic names one of the files it was given, and says what it fell back to;
//! - an untrusted project's settings are never read: the answer is the one without them;
//! - resolving is a function of its inputs: twice, the same answer.
//!
//! Proptest relatives: `tests/settings_location.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use session_state::{
    json,
    settings::{LocationInputs, LocationSource, ProjectTrust, agent_dir},
};
use session_state_fuzz::{Input, scratch_dir};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

fn dirs() -> &'static (tempfile::TempDir, PathBuf, PathBuf) {
    static S: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch_dir();
        let project = dir.path().join("project");
        let agent = dir.path().join("agent");
        std::fs::create_dir_all(project.join(".pi")).expect("mkdir");
        std::fs::create_dir_all(&agent).expect("mkdir");
        (dir, project, agent)
    })
}

/// A settings file's bytes: the fuzzer's own, or a `databasePath` it chose, or nothing.
fn settings(inp: &mut Input<'_>) -> Option<Vec<u8>> {
    match inp.byte() % 4 {
        0 => None,
        1 => Some(inp.text(64).into_bytes()),
        _ => {
            const FORMS: [&str; 8] = [
                "/abs/s.sqlite",
                "~/s.sqlite",
                "~",
                "rel/s.sqlite",
                "",
                "/a/../b",
                "~user/x",
                "file:///x",
            ];
            let path = if inp.chance(2) {
                FORMS[inp.below(FORMS.len())].to_owned()
            } else {
                inp.text(24)
            };
            let value = match inp.byte() % 6 {
                0 => "3".to_owned(),
                1 => "null".to_owned(),
                _ => json::to_string(&Value::String(path)),
            };
            let section = if inp.chance(6) {
                value
            } else {
                format!(r#"{{"databasePath":{value}}}"#)
            };
            Some(format!(r#"{{"other":1,"sessionState":{section}}}"#).into_bytes())
        }
    }
}

fn put(path: &std::path::Path, bytes: Option<Vec<u8>>) {
    match bytes {
        Some(b) => std::fs::write(path, b).expect("write a settings file"),
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (_, project, agent) = dirs();
    let mut inp = Input::new(data);
    let project_file = project.join(".pi").join("settings.json");
    let agent_file = agent.join("settings.json");
    let trust_file = agent.join("trust.json");
    put(&project_file, settings(&mut inp));
    put(&agent_file, settings(&mut inp));
    let trust_json = match inp.byte() % 4 {
        0 => None,
        1 => Some(inp.text(48).into_bytes()),
        n => Some(
            format!(
                r#"{{{}:{}}}"#,
                json::to_string(&Value::String(project.display().to_string())),
                ["true", "false", "null", "1"][usize::from(n) % 4]
            )
            .into_bytes(),
        ),
    };
    put(&trust_file, trust_json);
    let trust = [
        ProjectTrust::Trusted,
        ProjectTrust::Untrusted,
        ProjectTrust::FromPiDecisions,
    ][inp.below(3)];
    let home = inp.chance(2).then(|| PathBuf::from("/home/fuzz"));
    let env: Option<OsString> = inp.chance(2).then(|| inp.text(16).into());
    let _ = agent_dir(env, home.as_deref());

    let mut inputs = LocationInputs::new(project, agent).trust(trust);
    if let Some(h) = &home {
        inputs = inputs.home(h);
    }
    let r = inputs
        .resolve()
        .expect("a settings file's content is never an error");
    assert!(r.path.is_absolute(), "{:?}", r.path);
    if r.source == LocationSource::Default {
        // The default: `{agent_dir}/sessions/states.sqlite`.
        assert_eq!(r.path, agent.join("sessions").join("states.sqlite"));
    }
    for d in &r.diagnostics {
        assert!(
            [&project_file, &agent_file, &trust_file].contains(&&d.file),
            "a diagnostic names {:?}",
            d.file
        );
        assert!(!d.to_string().is_empty());
    }
    assert_eq!(
        inputs.resolve().expect("again"),
        r,
        "resolving twice differs"
    );
    if trust == ProjectTrust::Untrusted {
        let kept = std::fs::read(&project_file).ok();
        put(&project_file, None);
        let without = inputs.resolve().expect("without the project's settings");
        put(&project_file, kept);
        assert_eq!(without, r, "an untrusted project's settings were read");
    }
});
