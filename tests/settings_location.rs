//! docs/spec.md §4 "Location, first hit wins": every source, trust mode, value form and broken
//! file, each on a throwaway home / agent dir / project under one `tempfile::tempdir()`.
#![expect(clippy::unwrap_used)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use session_state::settings::{
    Fallback, LocationInputs, LocationSource, ProjectTrust, ResolvedLocation, SettingsDiagnostic,
    SettingsError, SettingsProblem, agent_dir,
};
use tempfile::TempDir;

/// `{root}/home/ada` (home), `{home}/.pi/agent` (agent dir), `{root}/work/repo/app` (cwd).
struct World {
    _tmp: TempDir,
    root: PathBuf,
    home: PathBuf,
    agent: PathBuf,
    cwd: PathBuf,
}

impl World {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        // Canonical, because trust.json keys are canonical paths.
        let root = fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("home").join("ada");
        let agent = home.join(".pi").join("agent");
        let cwd = root.join("work").join("repo").join("app");
        fs::create_dir_all(&agent).unwrap();
        fs::create_dir_all(&cwd).unwrap();
        World {
            _tmp: tmp,
            root,
            home,
            agent,
            cwd,
        }
    }

    fn user_file(&self) -> PathBuf {
        self.agent.join("settings.json")
    }

    fn project_dir(&self) -> PathBuf {
        self.cwd.join(".pi")
    }

    fn project_file(&self) -> PathBuf {
        self.project_dir().join("settings.json")
    }

    fn trust_file(&self) -> PathBuf {
        self.agent.join("trust.json")
    }

    fn default(&self) -> PathBuf {
        self.agent.join("sessions").join("states.sqlite")
    }

    fn write_user(&self, content: &str) {
        fs::write(self.user_file(), content).unwrap();
    }

    fn write_project(&self, content: &str) {
        fs::create_dir_all(self.project_dir()).unwrap();
        fs::write(self.project_file(), content).unwrap();
    }

    fn set_user(&self, value: serde_json::Value) {
        self.write_user(&json!({"sessionState": {"databasePath": value}}).to_string());
    }

    fn set_project(&self, value: serde_json::Value) {
        self.write_project(&json!({"sessionState": {"databasePath": value}}).to_string());
    }

    fn write_trust(&self, entries: serde_json::Value) {
        fs::write(self.trust_file(), entries.to_string()).unwrap();
    }

    fn key(&self, dir: &Path) -> String {
        dir.to_str().unwrap().to_owned()
    }

    fn inputs(&self, trust: ProjectTrust) -> LocationInputs {
        LocationInputs::new(&self.cwd, &self.agent)
            .home(&self.home)
            .trust(trust)
    }

    fn resolve(&self, trust: ProjectTrust) -> ResolvedLocation {
        self.inputs(trust).resolve().unwrap()
    }
}

fn assert_clean(r: &ResolvedLocation, path: &Path, source: LocationSource) {
    assert_eq!(r.path, path, "path");
    assert_eq!(r.source, source, "source");
    assert_eq!(
        r.diagnostics,
        Vec::<SettingsDiagnostic>::new(),
        "diagnostics"
    );
}

/// Resolved to the default with exactly one diagnostic about `file`, whose Display names
/// the file, the problem (`mentions`) and the default it fell back to.
fn assert_fell_back(
    w: &World,
    r: &ResolvedLocation,
    file: &Path,
    mentions: &str,
) -> SettingsProblem {
    assert_eq!(r.path, w.default(), "path");
    assert_eq!(r.source, LocationSource::Default, "source");
    assert_eq!(r.diagnostics.len(), 1, "diagnostics: {:?}", r.diagnostics);
    let d = &r.diagnostics[0];
    assert_eq!(d.file, file);
    assert_eq!(d.fallback, Fallback::Default(w.default()));
    let shown = d.to_string();
    assert!(
        shown.starts_with(&format!("{}: ", file.display())),
        "{shown}"
    );
    assert!(
        shown.contains(mentions),
        "{shown:?} should mention {mentions:?}"
    );
    assert!(
        shown.contains(&w.default().display().to_string()),
        "{shown}"
    );
    d.problem.clone()
}

// ---------------------------------------------------------------------------------------
// Each source winning, and first-hit-wins ordering.

#[test]
fn nothing_configured_uses_the_default() {
    let w = World::new();
    let r = w.resolve(ProjectTrust::Trusted);
    assert_clean(&r, &w.default(), LocationSource::Default);
}

#[test]
fn option_wins_over_project_and_user_settings() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let explicit = w.root.join("explicit.sqlite");
    let r = w
        .inputs(ProjectTrust::Trusted)
        .database_path(&explicit)
        .resolve()
        .unwrap();
    assert_clean(&r, &explicit, LocationSource::Option);
}

#[test]
fn option_wins_without_reading_broken_settings() {
    let w = World::new();
    w.write_project("{not json");
    w.write_user("[1]");
    let explicit = w.root.join("explicit.sqlite");
    let r = w
        .inputs(ProjectTrust::Trusted)
        .database_path(&explicit)
        .resolve()
        .unwrap();
    assert_clean(&r, &explicit, LocationSource::Option);
}

#[test]
fn trusted_project_wins_over_user() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::Trusted);
    assert_clean(
        &r,
        Path::new("/project/db.sqlite"),
        LocationSource::ProjectSettings(w.project_file()),
    );
}

/// Also the case of a trusted project with no `.pi/settings.json`: it passes silently to
/// the user level.
#[test]
fn user_wins_over_default() {
    let w = World::new();
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::Trusted);
    assert_clean(
        &r,
        Path::new("/user/db.sqlite"),
        LocationSource::UserSettings(w.user_file()),
    );
}

#[test]
fn missing_key_passes_silently_to_next_source() {
    let w = World::new();
    w.set_user(json!("/user/db.sqlite"));
    for project in [
        r#"{}"#,
        r#"{"defaultModel": "x", "sessionDir": "/elsewhere"}"#,
        r#"{"sessionState": {}}"#,
        r#"{"sessionState": {"other": 1}}"#,
        "",
    ] {
        w.write_project(project);
        let r = w.resolve(ProjectTrust::Trusted);
        assert_clean(
            &r,
            Path::new("/user/db.sqlite"),
            LocationSource::UserSettings(w.user_file()),
        );
    }
    // And at user level, to the default.
    w.write_project("{}");
    w.write_user(r#"{"sessionState": {}}"#);
    let r = w.resolve(ProjectTrust::Trusted);
    assert_clean(&r, &w.default(), LocationSource::Default);
}

#[test]
fn byte_order_mark_is_accepted_like_pi() {
    let w = World::new();
    w.write_user("\u{feff}{\"sessionState\":{\"databasePath\":\"/bom.sqlite\"}}");
    let r = w.resolve(ProjectTrust::Untrusted);
    assert_clean(
        &r,
        Path::new("/bom.sqlite"),
        LocationSource::UserSettings(w.user_file()),
    );
}

// ---------------------------------------------------------------------------------------
// Trust.

#[test]
fn untrusted_project_counts_as_absent() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::Untrusted);
    assert_clean(
        &r,
        Path::new("/user/db.sqlite"),
        LocationSource::UserSettings(w.user_file()),
    );
}

#[test]
fn untrusted_broken_project_file_is_not_even_read() {
    let w = World::new();
    w.write_project("{broken");
    let r = w.resolve(ProjectTrust::Untrusted);
    assert_clean(&r, &w.default(), LocationSource::Default);
}

#[test]
fn untrusted_is_the_default_trust() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    assert_eq!(ProjectTrust::default(), ProjectTrust::Untrusted);
    let r = LocationInputs::new(&w.cwd, &w.agent).resolve().unwrap();
    assert_clean(&r, &w.default(), LocationSource::Default);
}

/// Project and user both set; which one wins under Pi's saved decisions.
fn with_saved_decisions(entries: serde_json::Value) -> (World, ResolvedLocation) {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let entries = match entries {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| (w.key(&w.root.join(k)), v))
            .collect::<serde_json::Map<_, _>>(),
        _ => unreachable!(),
    };
    w.write_trust(serde_json::Value::Object(entries));
    let r = w.resolve(ProjectTrust::FromPiDecisions);
    (w, r)
}

fn assert_project_won(w: &World, r: &ResolvedLocation) {
    assert_clean(
        r,
        Path::new("/project/db.sqlite"),
        LocationSource::ProjectSettings(w.project_file()),
    );
}

fn assert_user_won(w: &World, r: &ResolvedLocation) {
    assert_clean(
        r,
        Path::new("/user/db.sqlite"),
        LocationSource::UserSettings(w.user_file()),
    );
}

#[test]
fn pi_decision_on_cwd_itself_trusts() {
    let (w, r) = with_saved_decisions(json!({"work/repo/app": true}));
    assert_project_won(&w, &r);
}

#[test]
fn pi_decision_on_nearest_ancestor_trusts() {
    let (w, r) = with_saved_decisions(json!({"work/repo": true, "elsewhere": false}));
    assert_project_won(&w, &r);
}

#[test]
fn pi_decision_nearest_false_overrides_farther_true() {
    let (w, r) = with_saved_decisions(json!({"work": true, "work/repo": false}));
    assert_user_won(&w, &r);
}

#[test]
fn pi_decision_nearest_true_overrides_farther_false() {
    let (w, r) = with_saved_decisions(json!({"work": false, "work/repo/app": true}));
    assert_project_won(&w, &r);
}

#[test]
fn pi_decision_null_is_no_decision() {
    // Pi writes null-free files but accepts null as "no decision here".
    let (w, r) = with_saved_decisions(json!({"work/repo/app": null, "work": true}));
    assert_project_won(&w, &r);
}

#[test]
fn pi_decision_for_a_child_or_sibling_does_not_apply() {
    let (w, r) = with_saved_decisions(json!({"work/repo/app/sub": true, "work/repo/other": true}));
    assert_user_won(&w, &r);
}

#[test]
fn pi_decision_absent_means_untrusted() {
    let (w, r) = with_saved_decisions(json!({}));
    assert_user_won(&w, &r);
}

#[test]
fn pi_decision_key_with_trailing_separator_matches() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    let key = format!("{}{}", w.key(&w.cwd), std::path::MAIN_SEPARATOR);
    w.write_trust(json!({ key: true }));
    let r = w.resolve(ProjectTrust::FromPiDecisions);
    assert_project_won(&w, &r);
}

#[cfg(unix)]
#[test]
fn pi_decision_follows_symlinked_cwd_to_its_canonical_folder() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    let link = w.root.join("link-to-app");
    std::os::unix::fs::symlink(&w.cwd, &link).unwrap();
    w.write_trust(json!({ w.key(&w.cwd): true }));
    let r = LocationInputs::new(&link, &w.agent)
        .home(&w.home)
        .trust(ProjectTrust::FromPiDecisions)
        .resolve()
        .unwrap();
    let project_file = link.join(".pi").join("settings.json");
    assert_clean(
        &r,
        Path::new("/project/db.sqlite"),
        LocationSource::ProjectSettings(project_file),
    );
}

#[test]
fn pi_decisions_without_trust_file_is_untrusted() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::FromPiDecisions);
    assert_user_won(&w, &r);
}

#[test]
fn broken_trust_file_is_reported_and_untrusted() {
    let cases: [(&str, &str); 4] = [
        ("{oops", "is not valid JSON"),
        ("", "is not valid JSON"),
        ("[]", "must contain a JSON object, found an array"),
        (
            r#"{"/x": true, "/y": "yes"}"#,
            r#"the entry for "/y" must be true, false or null, found a string"#,
        ),
    ];
    for (content, mentions) in cases {
        let w = World::new();
        w.set_project(json!("/project/db.sqlite"));
        w.set_user(json!("/user/db.sqlite"));
        fs::write(w.trust_file(), content).unwrap();
        let r = w.resolve(ProjectTrust::FromPiDecisions);
        // Untrusted counts as absent, so the user file still applies.
        assert_eq!(r.path, Path::new("/user/db.sqlite"), "{content}");
        assert_eq!(r.source, LocationSource::UserSettings(w.user_file()));
        assert_eq!(r.diagnostics.len(), 1, "{content}: {:?}", r.diagnostics);
        let d = &r.diagnostics[0];
        assert_eq!(d.file, w.trust_file());
        assert_eq!(d.fallback, Fallback::Untrusted);
        let shown = d.to_string();
        assert!(shown.contains(mentions), "{shown}");
        assert!(
            shown.contains("treating the project as untrusted"),
            "{shown}"
        );
        assert!(
            shown.starts_with(&w.trust_file().display().to_string()),
            "{shown}"
        );
    }
}

#[test]
fn trust_file_is_not_consulted_without_project_settings() {
    let w = World::new();
    fs::write(w.trust_file(), "{oops").unwrap();
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::FromPiDecisions);
    assert_user_won(&w, &r);
}

#[test]
fn explicit_trust_ignores_saved_decisions() {
    let w = World::new();
    w.set_project(json!("/project/db.sqlite"));
    w.write_trust(json!({ w.key(&w.cwd): false }));
    let r = w.resolve(ProjectTrust::Trusted);
    assert_project_won(&w, &r);

    w.write_trust(json!({ w.key(&w.cwd): true }));
    let r = w.resolve(ProjectTrust::Untrusted);
    assert_clean(&r, &w.default(), LocationSource::Default);
}

// ---------------------------------------------------------------------------------------
// Value forms.

#[test]
fn value_forms_at_user_level() {
    let w = World::new();
    let abs = w.root.join("abs").join("db.sqlite");
    let cases: Vec<(serde_json::Value, PathBuf)> = vec![
        (json!(abs.to_str().unwrap()), abs.clone()),
        (json!("~"), w.home.clone()),
        (json!("~/"), w.home.clone()),
        (json!("~/dbs/s.sqlite"), w.home.join("dbs").join("s.sqlite")),
        (json!("dbs/s.sqlite"), w.agent.join("dbs").join("s.sqlite")),
        (json!("./s.sqlite"), w.agent.join("s.sqlite")),
        (json!("../s.sqlite"), w.agent.join("..").join("s.sqlite")),
        (json!("s.sqlite"), w.agent.join("s.sqlite")),
    ];
    for (value, expected) in cases {
        w.set_user(value.clone());
        let r = w.resolve(ProjectTrust::Untrusted);
        assert_eq!(r.path, expected, "{value}");
        assert_eq!(
            r.source,
            LocationSource::UserSettings(w.user_file()),
            "{value}"
        );
        assert!(r.diagnostics.is_empty(), "{value}: {:?}", r.diagnostics);
    }
}

#[test]
fn value_forms_at_project_level() {
    let w = World::new();
    w.set_user(json!("/user/db.sqlite"));
    let abs = w.root.join("abs").join("db.sqlite");
    let cases: Vec<(serde_json::Value, PathBuf)> = vec![
        (json!(abs.to_str().unwrap()), abs.clone()),
        (json!("~"), w.home.clone()),
        (json!("~/dbs/s.sqlite"), w.home.join("dbs").join("s.sqlite")),
        // Relative to the project's .pi, not to cwd and not to the agent dir.
        (
            json!("dbs/s.sqlite"),
            w.project_dir().join("dbs").join("s.sqlite"),
        ),
        (json!("./s.sqlite"), w.project_dir().join("s.sqlite")),
        (
            json!("../state.sqlite"),
            w.project_dir().join("..").join("state.sqlite"),
        ),
    ];
    for (value, expected) in cases {
        w.set_project(value.clone());
        let r = w.resolve(ProjectTrust::Trusted);
        assert_eq!(r.path, expected, "{value}");
        assert_eq!(
            r.source,
            LocationSource::ProjectSettings(w.project_file()),
            "{value}"
        );
        assert!(r.diagnostics.is_empty(), "{value}: {:?}", r.diagnostics);
    }
}

#[test]
fn tilde_user_is_unsupported_at_user_level() {
    let w = World::new();
    for value in ["~bob", "~bob/db.sqlite", "~root/x"] {
        w.set_user(json!(value));
        let r = w.resolve(ProjectTrust::Untrusted);
        let problem = assert_fell_back(&w, &r, &w.user_file(), "`~user` is not supported");
        assert!(
            matches!(&problem, SettingsProblem::UnsupportedForm { value: v, .. } if v == value),
            "{problem:?}"
        );
    }
}

#[test]
fn tilde_user_is_unsupported_at_project_level_and_does_not_fall_to_user() {
    let w = World::new();
    w.set_project(json!("~bob/db.sqlite"));
    w.set_user(json!("/user/db.sqlite"));
    let r = w.resolve(ProjectTrust::Trusted);
    let problem = assert_fell_back(&w, &r, &w.project_file(), "\"~bob/db.sqlite\"");
    assert!(matches!(problem, SettingsProblem::UnsupportedForm { .. }));
}

#[test]
fn tilde_without_known_home_falls_back_with_a_diagnostic() {
    let w = World::new();
    for value in ["~", "~/db.sqlite"] {
        w.set_user(json!(value));
        let r = LocationInputs::new(&w.cwd, &w.agent).resolve().unwrap();
        let problem = assert_fell_back(&w, &r, &w.user_file(), "home directory");
        assert_eq!(
            problem,
            SettingsProblem::HomeUnknown {
                value: value.to_owned()
            }
        );
    }
    // Same at project level.
    w.set_project(json!("~/db.sqlite"));
    let r = LocationInputs::new(&w.cwd, &w.agent)
        .trust(ProjectTrust::Trusted)
        .resolve()
        .unwrap();
    let problem = assert_fell_back(&w, &r, &w.project_file(), "home directory");
    assert!(matches!(problem, SettingsProblem::HomeUnknown { .. }));
}

#[test]
fn urls_are_unsupported() {
    let w = World::new();
    w.set_user(json!("file:///var/db.sqlite"));
    let r = w.resolve(ProjectTrust::Untrusted);
    let problem = assert_fell_back(&w, &r, &w.user_file(), "URLs are not supported");
    assert!(matches!(problem, SettingsProblem::UnsupportedForm { .. }));
}

// ---------------------------------------------------------------------------------------
// Broken files: fall back to the default, report once, never pass to the next source.

fn broken_cases() -> Vec<(&'static str, &'static str, SettingsProblem)> {
    vec![
        (
            "{\"sessionState\": ",
            "is not valid JSON",
            SettingsProblem::InvalidJson {
                message: String::new(),
            },
        ),
        (
            "   ",
            "is not valid JSON",
            SettingsProblem::InvalidJson {
                message: String::new(),
            },
        ),
        (
            "[\"sessionState\"]",
            "must contain a JSON object, found an array",
            SettingsProblem::NotAnObject { found: "an array" },
        ),
        (
            "\"db.sqlite\"",
            "must contain a JSON object, found a string",
            SettingsProblem::NotAnObject { found: "a string" },
        ),
        (
            r#"{"sessionState": "db.sqlite"}"#,
            "`sessionState` must be an object, found a string",
            SettingsProblem::SectionNotAnObject { found: "a string" },
        ),
        (
            r#"{"sessionState": null}"#,
            "`sessionState` must be an object, found null",
            SettingsProblem::SectionNotAnObject { found: "null" },
        ),
        (
            r#"{"sessionState": ["x"]}"#,
            "`sessionState` must be an object, found an array",
            SettingsProblem::SectionNotAnObject { found: "an array" },
        ),
        (
            r#"{"sessionState": {"databasePath": 42}}"#,
            "`sessionState.databasePath` must be a string, found a number",
            SettingsProblem::NotAString { found: "a number" },
        ),
        (
            r#"{"sessionState": {"databasePath": null}}"#,
            "`sessionState.databasePath` must be a string, found null",
            SettingsProblem::NotAString { found: "null" },
        ),
        (
            r#"{"sessionState": {"databasePath": true}}"#,
            "must be a string, found a boolean",
            SettingsProblem::NotAString { found: "a boolean" },
        ),
        (
            r#"{"sessionState": {"databasePath": {"path": "/x"}}}"#,
            "must be a string, found an object",
            SettingsProblem::NotAString { found: "an object" },
        ),
        (
            r#"{"sessionState": {"databasePath": ""}}"#,
            "`sessionState.databasePath` is empty",
            SettingsProblem::EmptyValue,
        ),
        (
            r#"{"sessionState": {"databasePath": "  "}}"#,
            "`sessionState.databasePath` is empty",
            SettingsProblem::EmptyValue,
        ),
        (
            "{\"sessionState\": {\"databasePath\": \"a\\u0000b\"}}",
            "NUL byte",
            SettingsProblem::UnsupportedForm {
                value: "a\0b".into(),
                reason: "",
            },
        ),
    ]
}

fn same_variant(a: &SettingsProblem, b: &SettingsProblem) -> bool {
    match (a, b) {
        (SettingsProblem::InvalidJson { .. }, SettingsProblem::InvalidJson { .. }) => true,
        (
            SettingsProblem::UnsupportedForm { value: x, .. },
            SettingsProblem::UnsupportedForm { value: y, .. },
        ) => x == y,
        _ => a == b,
    }
}

#[test]
fn broken_user_file_falls_back_to_default() {
    for (content, mentions, expected) in broken_cases() {
        let w = World::new();
        w.write_user(content);
        let r = w.resolve(ProjectTrust::Untrusted);
        let problem = assert_fell_back(&w, &r, &w.user_file(), mentions);
        assert!(same_variant(&problem, &expected), "{content}: {problem:?}");
    }
}

#[test]
fn broken_project_file_falls_back_to_default_not_to_user() {
    for (content, mentions, expected) in broken_cases() {
        let w = World::new();
        w.write_project(content);
        w.set_user(json!("/user/db.sqlite"));
        let r = w.resolve(ProjectTrust::Trusted);
        let problem = assert_fell_back(&w, &r, &w.project_file(), mentions);
        assert!(same_variant(&problem, &expected), "{content}: {problem:?}");
    }
}

#[test]
fn broken_project_file_stops_resolution_so_a_broken_user_file_is_not_reported() {
    let w = World::new();
    w.write_project("{oops");
    w.write_user("{also broken");
    let r = w.resolve(ProjectTrust::Trusted);
    assert_fell_back(&w, &r, &w.project_file(), "line 1");
}

#[test]
fn invalid_json_message_has_line_and_column() {
    let w = World::new();
    w.write_user("{\n  \"sessionState\": {\n    \"databasePath\": \"/x\",\n  }\n}");
    let r = w.resolve(ProjectTrust::Untrusted);
    assert_fell_back(&w, &r, &w.user_file(), "line 4 column 3");
}

#[test]
fn unreadable_settings_file_falls_back_with_a_diagnostic() {
    // A directory where the file should be fails to read for every user, root included.
    let w = World::new();
    fs::create_dir_all(w.user_file()).unwrap();
    let r = w.resolve(ProjectTrust::Untrusted);
    let problem = assert_fell_back(&w, &r, &w.user_file(), "cannot be read");
    assert!(
        matches!(problem, SettingsProblem::Unreadable { .. }),
        "{problem:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The explicit option.

#[test]
fn explicit_empty_path_is_an_error() {
    let w = World::new();
    let err = w
        .inputs(ProjectTrust::Trusted)
        .database_path("")
        .resolve()
        .unwrap_err();
    assert!(matches!(err, SettingsError::EmptyDatabasePath), "{err:?}");
    assert!(err.to_string().contains("absolute path"), "{err}");
}

#[test]
fn explicit_relative_path_is_an_error_not_a_fallback() {
    let w = World::new();
    w.set_user(json!("/user/db.sqlite"));
    for rel in ["db.sqlite", "./db.sqlite", "../x/db.sqlite"] {
        let err = w
            .inputs(ProjectTrust::Trusted)
            .database_path(rel)
            .resolve()
            .unwrap_err();
        match &err {
            SettingsError::RelativeDatabasePath { path } => assert_eq!(path, Path::new(rel)),
            other => panic!("{other:?}"),
        }
        let shown = err.to_string();
        assert!(shown.contains(rel) && shown.contains("absolute"), "{shown}");
    }
}

#[test]
fn explicit_tilde_path_is_an_error_with_a_hint() {
    let w = World::new();
    let err = w
        .inputs(ProjectTrust::Untrusted)
        .database_path("~/db.sqlite")
        .resolve()
        .unwrap_err();
    assert!(matches!(err, SettingsError::RelativeDatabasePath { .. }));
    assert!(err.to_string().contains("`~` is not expanded"), "{err}");
}

// ---------------------------------------------------------------------------------------
// $PI_CODING_AGENT_DIR, through the pure helper.

#[test]
fn agent_dir_from_env_value_and_home() {
    let home = Path::new("/home/ada");
    let some = |s: &str| Some(OsString::from(s));
    let cases: Vec<(Option<OsString>, Option<&Path>, Option<PathBuf>)> = vec![
        (None, Some(home), Some(home.join(".pi").join("agent"))),
        (None, None, None),
        // Pi treats an empty value as unset.
        (some(""), Some(home), Some(home.join(".pi").join("agent"))),
        (some(""), None, None),
        (some("/srv/pi"), Some(home), Some("/srv/pi".into())),
        (some("/srv/pi"), None, Some("/srv/pi".into())),
        (some("~"), Some(home), Some(home.to_path_buf())),
        (some("~/"), Some(home), Some(home.to_path_buf())),
        (
            some("~/agents/pi"),
            Some(home),
            Some(home.join("agents/pi")),
        ),
        (some("~/agents/pi"), None, None),
        // Pi does not expand `~user` nor resolve relative values; neither do we.
        (some("~bob/pi"), Some(home), Some("~bob/pi".into())),
        (some("rel/pi"), Some(home), Some("rel/pi".into())),
        // Pi's normalizePath turns file: URLs into paths.
        (some("file:///srv/my%20pi"), None, Some("/srv/my pi".into())),
        (
            some("file://localhost/srv/pi"),
            None,
            Some("/srv/pi".into()),
        ),
        (some("file:///bad%zz"), None, Some("file:///bad%zz".into())),
    ];
    for (env, home, expected) in cases {
        assert_eq!(agent_dir(env.clone(), home), expected, "{env:?} {home:?}");
    }
}

#[test]
fn resolution_uses_the_agent_dir_for_user_settings_and_default() {
    let w = World::new();
    let custom = agent_dir(Some(OsString::from("~/custom-agent")), Some(&w.home)).unwrap();
    assert_eq!(custom, w.home.join("custom-agent"));
    fs::create_dir_all(&custom).unwrap();
    // The standard agent dir's settings must not be consulted.
    w.set_user(json!("/standard/db.sqlite"));
    let inputs = LocationInputs::new(&w.cwd, &custom).home(&w.home);
    let r = inputs.resolve().unwrap();
    assert_clean(
        &r,
        &custom.join("sessions").join("states.sqlite"),
        LocationSource::Default,
    );

    fs::write(
        custom.join("settings.json"),
        json!({"sessionState": {"databasePath": "db/states.sqlite"}}).to_string(),
    )
    .unwrap();
    let r = inputs.resolve().unwrap();
    assert_clean(
        &r,
        &custom.join("db").join("states.sqlite"),
        LocationSource::UserSettings(custom.join("settings.json")),
    );
}

#[test]
fn from_env_gives_absolute_paths() {
    // Reads the real environment but asserts only what holds for any environment that
    // has a home or PI_CODING_AGENT_DIR.
    match LocationInputs::from_env("relative/project", ProjectTrust::FromPiDecisions) {
        Ok(inputs) => {
            assert!(inputs.cwd.is_absolute());
            assert!(inputs.cwd.ends_with("relative/project"));
            assert!(inputs.agent_dir.is_absolute());
            assert_eq!(inputs.trust, ProjectTrust::FromPiDecisions);
            assert_eq!(inputs.database_path, None);
        }
        Err(SettingsError::NoAgentDir) => {}
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn source_display_names_the_file() {
    let file = PathBuf::from("/p/.pi/settings.json");
    assert_eq!(
        LocationSource::ProjectSettings(file.clone()).to_string(),
        "project settings /p/.pi/settings.json"
    );
    assert_eq!(
        LocationSource::UserSettings(file).to_string(),
        "user settings /p/.pi/settings.json"
    );
    assert_eq!(LocationSource::Default.to_string(), "the default location");
}
