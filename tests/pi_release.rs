//! One version for a release: the crate, the Pi package's addon crate and the Pi package
//! carry the same one, and `npm run bump -- X.Y.Z` (`pi/scripts/bump.mjs`) sets it
//! everywhere in one step (pi/RELEASING.md).

use crate::common::pi_addon;
use std::fs;
use std::path::Path;

/// The files that hold the version, relative to the repository's root.
const FILES: [&str; 9] = [
    "Cargo.toml",
    "Cargo.lock",
    "pi/native/Cargo.toml",
    "pi/package.json",
    "pi/package-lock.json",
    "README.md",
    "pi/README.md",
    "pi/RELEASING.md",
    "docs/pi-extension.md",
];

/// Every place a release's version is written, as found in the checkout at `root`.
fn versions(root: &Path) -> Vec<(String, String)> {
    let read = |f: &str| fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let mut found = Vec::new();
    for (file, crate_name) in [
        ("Cargo.toml", "session-state"),
        ("pi/native/Cargo.toml", "session-state-pi"),
    ] {
        let toml = read(file);
        let head = format!("[package]\nname = \"{crate_name}\"\nversion = \"");
        let at = toml
            .find(&head)
            .unwrap_or_else(|| panic!("{file}: no {head:?}"))
            + head.len();
        found.push((
            file.to_owned(),
            toml[at..].split('"').next().unwrap().to_owned(),
        ));
    }
    let lock = read("Cargo.lock");
    for name in ["session-state", "session-state-pi"] {
        let head = format!("name = \"{name}\"\nversion = \"");
        let at = lock
            .find(&head)
            .unwrap_or_else(|| panic!("Cargo.lock: no {name}"))
            + head.len();
        found.push((
            format!("Cargo.lock {name}"),
            lock[at..].split('"').next().unwrap().to_owned(),
        ));
    }
    let pkg: serde_json::Value = serde_json::from_str(&read("pi/package.json")).expect("JSON");
    found.push((
        "pi/package.json".into(),
        pkg["version"].as_str().unwrap().to_owned(),
    ));
    let lock: serde_json::Value =
        serde_json::from_str(&read("pi/package-lock.json")).expect("JSON");
    found.push((
        "pi/package-lock.json".into(),
        lock["version"].as_str().unwrap().to_owned(),
    ));
    found.push((
        "pi/package-lock.json packages[\"\"]".into(),
        lock["packages"][""]["version"].as_str().unwrap().to_owned(),
    ));
    for doc in [
        "README.md",
        "pi/README.md",
        "pi/RELEASING.md",
        "docs/pi-extension.md",
    ] {
        let text = read(doc);
        let mut any = false;
        for part in text.split("@session-state/pi@").skip(1) {
            let v: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
                .collect();
            let v = v.trim_end_matches('.').to_owned();
            found.push((doc.to_owned(), v));
            any = true;
        }
        assert!(any, "{doc} shows the install command with a version");
    }
    found
}

#[test]
fn the_crate_the_addon_and_the_package_carry_one_version() {
    let found = versions(Path::new(env!("CARGO_MANIFEST_DIR")));
    let first = &found[0].1;
    for (file, v) in &found {
        assert_eq!(
            v, first,
            "{file} has version {v}, Cargo.toml {first}: run npm run bump -- X.Y.Z in pi/"
        );
    }
}

#[test]
fn bump_sets_every_version_in_one_step_or_none() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    for f in FILES {
        let to = dir.path().join(f);
        fs::create_dir_all(to.parent().unwrap()).expect("mkdir");
        fs::copy(repo.join(f), &to).unwrap_or_else(|e| panic!("copy {f}: {e}"));
    }
    let bump = |version: &str| {
        let mut c = pi_addon::command(pi_addon::node());
        c.arg("scripts/bump.mjs")
            .arg(version)
            .arg("--root")
            .arg(dir.path());
        c.output().expect("run bump.mjs")
    };
    let before = versions(dir.path());

    // A version that is not semver changes nothing.
    let out = bump("1.2");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: npm run bump -- X.Y.Z"));
    assert_eq!(versions(dir.path()), before);

    // One file without the current version: nothing is written, and the error names it.
    let readme = dir.path().join("pi/README.md");
    let kept = fs::read_to_string(&readme).unwrap();
    fs::write(&readme, "no install line here\n").unwrap();
    let out = bump("9.8.7");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pi/README.md: found 0"),
        "{out:?}"
    );
    fs::write(&readme, &kept).unwrap();
    assert_eq!(versions(dir.path()), before);

    // Every place, in one step.
    let out = bump("9.8.7-rc.1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = versions(dir.path());
    assert_eq!(after.len(), before.len());
    for (file, v) in &after {
        assert_eq!(v, "9.8.7-rc.1", "{file}");
    }
    // Nothing else moved: the files differ from the checkout's only in the version.
    let current = &before[0].1;
    for f in FILES {
        let was = fs::read_to_string(repo.join(f)).unwrap();
        let now = fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(now.replace("9.8.7-rc.1", current), was, "{f}");
    }
}
