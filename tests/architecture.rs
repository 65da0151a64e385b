//! The layers of `docs/architecture.md` are the imports of the code: the table between its
//! `layers:begin` and `layers:end` markers lists, for every module of `src/`, the modules
//! it imports. This test computes that relation from the sources and requires it to equal
//! the table, so every arrow drawn is an import and no import is missing from the drawing
//! (an upward import would have to be drawn).
//!
//! What counts as an import is a path in the code, not in a comment (a doc link such as
//! ``[`Store`](crate::Store)`` draws no arrow): `crate::<module>::…`, and `crate::<Name>`,
//! a name the crate root re-exports, which counts as an import of the module it comes
//! from (so a root re-export cannot hide an arrow). Inside a folder, the files of one
//! module must not import each other in a cycle either (`super::<file>`, or a name the
//! folder's `mod.rs` takes from a file), nor may any path name something this test cannot
//! place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// One source file: its path under `src/` with `/` separators (`log/reader.rs`) and its
/// text.
struct Source {
    rel: String,
    text: String,
}

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

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| Source {
            rel: f
                .strip_prefix(&src)
                .expect("under src")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/"),
            text: std::fs::read_to_string(&f).expect("read source"),
        })
        .collect()
}

/// `text` with every comment (doc comments and their links included) and every string
/// and char literal replaced by spaces, so that only code is left to search.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            blank(&mut out, start, i);
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            blank(&mut out, start, i);
        } else if b[i] == b'r' && starts_literal(b, i) && matches!(b.get(i + 1), Some(b'"' | b'#'))
        {
            // A raw string: r"…", r#"…"#, br#"…"#.
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            i = j + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            blank(&mut out, start, i);
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            blank(&mut out, start, i);
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}', 'é'), or a lifetime ('a): left alone.
            let rest = &text[i + 1..];
            let body = match rest.strip_prefix('\\') {
                Some(esc) if esc.starts_with('u') => esc.find('}').map(|e| e + 2),
                Some(esc) => esc.chars().next().map(|c| c.len_utf8() + 1),
                None => rest.chars().next().map(char::len_utf8),
            };
            let len = body.filter(|&n| rest[n..].starts_with('\''));
            match len {
                Some(n) => {
                    i += n + 2;
                    blank(&mut out, start, i);
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether the `r` at `i` starts a raw string literal (`r"`, `br"`), not an identifier.
fn starts_literal(b: &[u8], i: usize) -> bool {
    let before = |k: usize| i >= k && is_ident(b[i - k]);
    !before(1) || (b[i - 1] == b'b' && !before(2))
}

/// Every path in `code` that starts with `root::` (`crate` or `super`), as its segments
/// after the root; a `{…}` group gives one path per item, each ending at the item's first
/// segment (`super::{a::b, C}` → `[a]`, `[C]`). `super::super::…` is left out: it names
/// no sibling.
fn paths(code: &str, root: &str) -> Vec<Vec<String>> {
    let lead = format!("{root}::");
    let mut out = Vec::new();
    for (i, _) in code.match_indices(&lead) {
        // `session_state::`, `my_crate::` and `a::crate::` are not this root.
        let before = &code.as_bytes()[..i];
        if before.last().is_some_and(|&c| is_ident(c)) || code[..i].ends_with("::") {
            continue;
        }
        let mut rest = &code[i + lead.len()..];
        if root == "super" && rest.starts_with("super::") {
            continue;
        }
        let mut segs = Vec::new();
        loop {
            let n = rest.bytes().take_while(|&c| is_ident(c)).count();
            if n > 0 {
                segs.push(rest[..n].to_owned());
                rest = &rest[n..];
                if let Some(r) = rest.strip_prefix("::") {
                    rest = r;
                    continue;
                }
                out.push(segs);
            } else if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let item = item.trim();
                    let n = item.bytes().take_while(|&c| is_ident(c)).count();
                    if n > 0 {
                        let mut p = segs.clone();
                        p.push(item[..n].to_owned());
                        out.push(p);
                    }
                }
            }
            break;
        }
    }
    out
}

/// The names a `mod.rs` (or `lib.rs`) takes from its own children with `use`: name →
/// the child it comes from (`pub use error::{LockError, LockRow};` → `LockError` →
/// `error`), `as` renames included.
fn imported_names(code: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for (i, _) in code.match_indices("use ") {
        if code.as_bytes()[..i].last().is_some_and(|&c| is_ident(c)) {
            continue;
        }
        let stmt = &code[i + 4..];
        let stmt = stmt[..stmt.find(';').unwrap_or(stmt.len())].trim();
        let from: String = stmt
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        if from.is_empty() || ["crate", "super", "self", "std"].contains(&from.as_str()) {
            continue;
        }
        let leaves = match (stmt.find('{'), stmt.rfind('}')) {
            (Some(a), Some(z)) if a < z => stmt[a + 1..z].split(',').collect::<Vec<_>>(),
            _ => vec![stmt],
        };
        for leaf in leaves {
            let leaf = leaf.trim();
            let name = match leaf.split_once(" as ") {
                Some((_, alias)) => alias,
                None => leaf.rsplit("::").next().unwrap_or(leaf),
            };
            let name = name.trim_matches(|c: char| !is_ident(c as u8) || !c.is_ascii());
            if !name.is_empty() && name != "self" && name != "*" {
                names.insert(name.to_owned(), from.clone());
            }
        }
    }
    names
}

/// The top-level module of a file under `src/` (`log/reader.rs` → `log`); `None` for the
/// crate root and the binary, which are not layers (the CLI uses only public paths).
fn module_of(rel: &str) -> Option<String> {
    let first = rel.split('/').next()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The import relation of the top-level modules, and every `crate::` path that names
/// nothing this test can place.
fn actual_in(files: &[Source]) -> (Graph, Vec<String>) {
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&f.rel)).collect();
    let root = files
        .iter()
        .find(|f| f.rel == "lib.rs")
        .map(|f| imported_names(&code_of(&f.text)))
        .unwrap_or_default();
    let mut g = Graph::new();
    let mut problems = Vec::new();
    for f in files {
        let Some(m) = module_of(&f.rel) else { continue };
        let deps = g.entry(m.clone()).or_default();
        for p in paths(&code_of(&f.text), "crate") {
            let first = &p[0];
            let target = if modules.contains(first) {
                first.clone()
            } else if let Some(from) = root.get(first) {
                from.clone()
            } else {
                problems.push(format!(
                    "{}: crate::{first} is neither a module nor a name the crate root \
                     re-exports",
                    f.rel
                ));
                continue;
            };
            if target != m {
                deps.insert(target);
            }
        }
    }
    (g, problems)
}

fn actual() -> Graph {
    let (g, problems) = actual_in(&sources());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    g
}

/// The cycles among the files of one folder of `src/`, each as `dir: a → b → a`. A
/// folder's nodes are its files (not `mod.rs`, which declares them) and its subfolders;
/// a file imports a sibling by `super::<sibling>`, `crate::<folder>::<sibling>`, or a
/// name the folder's `mod.rs` takes from that sibling.
fn folder_cycles(files: &[Source]) -> Vec<String> {
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    for f in files {
        if let Some((d, _)) = f.rel.rsplit_once('/') {
            dirs.insert(d.to_owned());
        }
    }
    let mut cycles = Vec::new();
    for dir in dirs {
        let prefix = format!("{dir}/");
        // Node of a file: `log/reader.rs` → `reader`; `persistence/postgres/mod.rs` →
        // `postgres` (its `super::` names its parent's children).
        let node_of = |rel: &str| -> Option<String> {
            let rest = rel.strip_prefix(&prefix)?;
            match rest.split_once('/') {
                None if rest != "mod.rs" => Some(rest.trim_end_matches(".rs").to_owned()),
                None => None,
                Some((sub, "mod.rs")) => Some(sub.to_owned()),
                Some(_) => None,
            }
        };
        let nodes: BTreeSet<String> = files.iter().filter_map(|f| node_of(&f.rel)).collect();
        let from_mod = files
            .iter()
            .find(|f| f.rel == format!("{dir}/mod.rs"))
            .map(|f| imported_names(&code_of(&f.text)))
            .unwrap_or_default();
        let crate_path: Vec<String> = dir.split('/').map(str::to_owned).collect();
        let mut g = Graph::new();
        for f in files {
            let Some(node) = node_of(&f.rel) else {
                continue;
            };
            let code = code_of(&f.text);
            let mut named: Vec<String> = paths(&code, "super")
                .into_iter()
                .map(|p| p[0].clone())
                .collect();
            named.extend(paths(&code, "crate").into_iter().filter_map(|p| {
                (p.len() > crate_path.len() && p[..crate_path.len()] == crate_path[..])
                    .then(|| p[crate_path.len()].clone())
            }));
            let deps = g.entry(node.clone()).or_default();
            for n in named {
                let target = if nodes.contains(&n) {
                    Some(n)
                } else {
                    from_mod.get(&n).filter(|t| nodes.contains(*t)).cloned()
                };
                if let Some(t) = target.filter(|t| *t != node) {
                    deps.insert(t);
                }
            }
        }
        for cycle in find_cycles(&g) {
            cycles.push(format!("{dir}: {}", cycle.join(" → ")));
        }
    }
    cycles
}

/// One cycle through each node that is on one (as `a → b → a`), found by depth-first
/// search; a cycle is reported once, from its least node.
fn find_cycles(g: &Graph) -> Vec<Vec<String>> {
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for start in g.keys() {
        // Paths from `start`, looking for one back to it through nodes after it.
        let mut stack: Vec<Vec<String>> = vec![vec![start.clone()]];
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = path.last().expect("non-empty");
            for next in g.get(last).into_iter().flatten() {
                if next == start {
                    let mut c = path.clone();
                    c.push(start.clone());
                    found.insert(c);
                } else if next > start && seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push(p);
                }
            }
        }
    }
    found.into_iter().collect()
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

#[test]
fn no_two_files_of_a_module_import_each_other() {
    let cycles = folder_cycles(&sources());
    assert!(
        cycles.is_empty(),
        "cycles inside a module:\n{}",
        cycles.join("\n")
    );
}

/// The checks above on small sources written here: they can fail.
mod parser {
    use super::*;

    fn src(files: &[(&str, &str)]) -> Vec<Source> {
        files
            .iter()
            .map(|(rel, text)| Source {
                rel: (*rel).to_owned(),
                text: (*text).to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_cycle_between_two_files_of_a_folder_is_found() {
        let files = src(&[
            (
                "log/mod.rs",
                "mod header;\nmod reader;\npub use reader::Finding;\n",
            ),
            (
                "log/header.rs",
                "use super::Finding;\npub fn too_long() {}\n",
            ),
            (
                "log/reader.rs",
                "pub struct Finding;\nfn f() { super::header::too_long() }\n",
            ),
            ("log/writer.rs", "use super::{reader, header::too_long};\n"),
        ]);
        assert_eq!(
            folder_cycles(&files),
            ["log: header → reader → header"],
            "the re-exported name counts as an import of the file it comes from"
        );
        // Through `crate::log::…` as well, over three files.
        let files = src(&[
            ("state/a.rs", "use crate::state::b::X;"),
            ("state/b.rs", "fn f() -> crate::state::c::Y { todo!() }"),
            ("state/c.rs", "use super::a;"),
            ("state/d.rs", "use super::a;"),
        ]);
        assert_eq!(folder_cycles(&files), ["state: a → b → c → a"]);
    }

    #[test]
    fn a_folder_without_a_cycle_passes_and_mod_rs_is_not_a_node() {
        let files = src(&[
            (
                "lock/mod.rs",
                "mod error;\nmod table;\npub use error::LockError;\nuse table::now;",
            ),
            ("lock/error.rs", "use super::table::LEASE;\n"),
            (
                "lock/table.rs",
                "pub const LEASE: u8 = 1;\nuse super::Holder;\n",
            ),
        ]);
        assert!(folder_cycles(&files).is_empty());
    }

    #[test]
    fn doc_links_comments_and_strings_are_not_imports() {
        let files = src(&[
            ("lib.rs", "pub use store::Store;\n"),
            (
                "log/reader.rs",
                "//! See [`Store`](crate::Store) and crate::store::Store.\n\
                 /* crate::tree::SessionLog */\n\
                 /// [`x`](crate::projection::x)\n\
                 const S: &str = \"crate::state::x\";\n\
                 const R: &str = r#\"crate::state::\"y\"\"#;\n\
                 const C: char = '\"';\n\
                 const E: [char; 3] = ['\\\\', '\\'', '\\u{22}'];\n\
                 const B: &[u8] = br#\"crate::state::\"z\"\"#;\n\
                 fn f<'a>(x: &'a str) -> crate::error::Result<()> { Ok(()) }\n",
            ),
            ("store/mod.rs", "pub struct Store;"),
            ("error.rs", ""),
        ]);
        let (g, problems) = actual_in(&files);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            g["log"].iter().map(String::as_str).collect::<Vec<_>>(),
            ["error"]
        );
    }

    #[test]
    fn a_root_re_export_counts_as_an_import_of_its_module() {
        let files = src(&[
            (
                "lib.rs",
                "pub use store::{Store, state::SessionState as State};\n\
                 pub use error::Error;\n",
            ),
            (
                "log/reader.rs",
                "fn f(s: &crate::Store, t: crate::State) {}",
            ),
            (
                "tree/mod.rs",
                "fn g() -> crate::Error { todo!() } fn h() { crate::nowhere(); }",
            ),
            ("store/mod.rs", ""),
            ("error.rs", ""),
        ]);
        let (g, problems) = actual_in(&files);
        assert_eq!(
            g["log"].iter().map(String::as_str).collect::<Vec<_>>(),
            ["store"]
        );
        assert_eq!(
            g["tree"].iter().map(String::as_str).collect::<Vec<_>>(),
            ["error"]
        );
        assert_eq!(
            problems,
            [
                "tree/mod.rs: crate::nowhere is neither a module nor a name the crate root \
              re-exports"
            ]
        );
    }
}
