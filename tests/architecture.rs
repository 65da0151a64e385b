//! The layers of `docs/architecture.md` are the imports of the code: the table between its
//! `layers:begin` and `layers:end` markers lists, for every module of `src/`, the modules
//! it imports (`crate::<module>` anywhere in its files). This test computes that relation
//! from the sources and requires it to equal the table, so every arrow drawn is an import
//! and no import is missing from the drawing (an upward import would have to be drawn).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module of a file under `src/` (`src/log/reader.rs` → `log`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let name = first.trim_end_matches(".rs").to_owned();
    // The crate root and the binary are not layers; the CLI uses only public paths.
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

fn actual() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g = Graph::new();
    for f in files {
        let Some(m) = module_of(&src, &f) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("read source");
        let deps = g.entry(m.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            // `session_state::` and `crate::` inside words are not crate paths.
            if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            // `crate::Error` and friends are re-exports at the root, not a module.
            if !name.is_empty() && name != m && rest[name.len()..].starts_with("::") {
                deps.insert(name);
            }
        }
    }
    g
}

fn documented() -> Graph {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .expect("read docs/architecture.md");
    let begin = doc.find("layers:begin").expect("a layers:begin marker");
    let end = doc.find("layers:end").expect("a layers:end marker");
    let mut g = Graph::new();
    for line in doc[begin..end].lines().skip(1) {
        let line = line.trim();
        if line.is_empty() || line.starts_with("```") || line.starts_with("module") {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(m) = words.next() else { continue };
        let deps = words
            .filter(|w| *w != "-" && *w != "←")
            .map(str::to_owned)
            .collect();
        g.insert(m.to_owned(), deps);
    }
    g
}

#[test]
fn the_documented_layers_are_the_imports_of_the_code() {
    let (actual, documented) = (actual(), documented());
    let mut problems = Vec::new();
    for m in actual
        .keys()
        .chain(documented.keys())
        .collect::<BTreeSet<_>>()
    {
        let a = actual.get(m).cloned().unwrap_or_default();
        let d = documented.get(m).cloned().unwrap_or_default();
        for x in a.difference(&d) {
            problems.push(format!("{m} imports {x}, which the drawing does not show"));
        }
        for x in d.difference(&a) {
            problems.push(format!(
                "the drawing shows {m} importing {x}, which it does not"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_import_goes_upward() {
    // The order of the layers, lowest first; a module may import only lower ones.
    const ORDER: &[&str] = &[
        "json",
        "settings",
        "sqlite",
        "sync",
        "lock",
        "error",
        "log",
        "tree",
        "state",
        "projection",
        "persistence",
        "store",
        "inspect",
        "cli",
    ];
    let rank = |m: &str| ORDER.iter().position(|o| *o == m);
    for (m, deps) in actual() {
        let r = rank(&m).unwrap_or_else(|| panic!("module {m} has no place in ORDER"));
        for d in deps {
            let rd = rank(&d).unwrap_or_else(|| panic!("module {d} has no place in ORDER"));
            assert!(rd < r, "{m} imports {d}, a layer above it");
        }
    }
}
