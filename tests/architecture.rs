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
//!
//! The table between its `rules:begin` and `rules:end` markers says where each of the
//! crate's small rules lives, as `file:function` (a free function by its name, a method
//! as `Type::method`, found in the `impl` or `trait` blocks of that type): every row must
//! name a file of the repository and a function defined in it exactly once (in code, not
//! in a comment), and no function may be named by two rows, so that the map can point
//! neither at nothing nor at two places.
//!
//! The table between its `homes:begin` and `homes:end` markers names, for a rule that has
//! one home, the patterns that define it (`"BEGIN`, `transaction_with_behavior`,
//! `Landed::`, the envelope's keys as printed, …) and the files or folders where they may
//! stand: a pattern found anywhere else in `src/` (in code or a string literal, not in a
//! comment, nor in test code) fails, naming the file and line, so a rule written a second
//! time cannot go unseen.

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
pub(crate) fn code_of(text: &str) -> String {
    stripped(text, false)
}

/// `text` with every comment replaced by spaces, and, unless `keep_literals`, every
/// string and char literal too.
fn stripped(text: &str, keep_literals: bool) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank_comment = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        if keep_literals {
            return;
        }
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
            blank_comment(&mut out, start, i);
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
            blank_comment(&mut out, start, i);
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

fn architecture_doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
        .expect("read docs/architecture.md")
}

fn documented() -> Graph {
    let doc = architecture_doc();
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
        "os",
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

/// One row of the rule table: the rule, and where it lives (`src/sqlite.rs` and
/// `end_transaction`, or `src/log/writer.rs` and `LogWriter::append` for a method).
#[derive(Debug, PartialEq)]
struct Rule {
    /// The row's line in the document (1-based).
    line: usize,
    rule: String,
    file: String,
    function: String,
}

/// The rows of the table between the `rules:begin` and `rules:end` markers of `doc`: a
/// Markdown table whose first cell is the rule and whose last cell is one
/// `` `file:function` ``. A row of any other shape is a problem, and so is a table
/// without rows.
fn rules_in(doc: &str) -> Result<Vec<Rule>, Vec<String>> {
    let (Some(begin), Some(end)) = (
        doc.find("<!-- rules:begin -->"),
        doc.find("<!-- rules:end -->"),
    ) else {
        return Err(vec![
            "docs/architecture.md has no `<!-- rules:begin -->` … `<!-- rules:end -->` table"
                .to_owned(),
        ]);
    };
    let first_line = doc[..begin].lines().count() + 1;
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    let mut header_seen = false;
    for (k, row) in doc[begin..end].lines().enumerate() {
        let line = first_line + k;
        let row = row.trim();
        if !row.starts_with('|') {
            continue;
        }
        if !header_seen {
            header_seen = true; // the table's header row
            continue;
        }
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| matches!(ch, '-' | ':')))
        {
            continue; // the separator row
        }
        let target = cells
            .last()
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
            .and_then(|c| c.split_once(".rs:"));
        match (cells.len(), target) {
            (2.., Some((file, function)))
                if !function.is_empty()
                    && function
                        .split("::")
                        .all(|p| !p.is_empty() && p.bytes().all(is_ident)) =>
            {
                rules.push(Rule {
                    line,
                    rule: cells[0].to_owned(),
                    file: format!("{file}.rs"),
                    function: function.to_owned(),
                });
            }
            _ => problems.push(format!(
                "docs/architecture.md:{line}: a rule's row must end in one `path/file.rs:function` \
                 (or `path/file.rs:Type::method`) cell, not: {row}"
            )),
        }
    }
    if rules.is_empty() && problems.is_empty() {
        problems.push("docs/architecture.md: the rule table has no rows".to_owned());
    }
    if problems.is_empty() {
        Ok(rules)
    } else {
        Err(problems)
    }
}

/// Whether the word `w` stands at `i` in `code`, with no identifier character on either
/// side.
fn word_at(code: &str, i: usize, w: &str) -> bool {
    let b = code.as_bytes();
    code[i..].starts_with(w)
        && (i == 0 || !is_ident(b[i - 1]))
        && b.get(i + w.len()).is_none_or(|&c| !is_ident(c))
}

/// The byte after the `}` that closes the `{` at `open` (the end of `code` if none).
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (k, c) in code[open..].bytes().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The type an `impl` header (the text between `impl` and its `{`) is for:
/// `<T> SessionState<T>` → `SessionState`, `std::fmt::Display for Scope` → `Scope`.
fn impl_type(header: &str) -> String {
    let mut h = header.trim();
    if h.starts_with('<') {
        // The impl's generics; the `>` of a `->` inside them closes nothing.
        let mut depth = 0i32;
        let b = h.as_bytes();
        for (k, &c) in b.iter().enumerate() {
            match c {
                b'<' => depth += 1,
                b'>' if k == 0 || b[k - 1] != b'-' => {
                    depth -= 1;
                    if depth == 0 {
                        h = &h[k + 1..];
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(k) = (0..h.len()).rev().find(|&k| word_at(h, k, "for")) {
        h = &h[k + 3..];
    }
    if let Some(k) = (0..h.len()).find(|&k| word_at(h, k, "where")) {
        h = &h[..k];
    }
    let path: String = h
        .trim()
        .trim_start_matches(['&', ' '])
        .trim_start_matches("dyn ")
        .chars()
        .take_while(|&c| c.is_ascii() && (is_ident(c as u8) || c == ':'))
        .collect();
    path.rsplit("::").next().unwrap_or_default().to_owned()
}

/// Every function defined in `code` (comments and literals blanked by [`code_of`]): the
/// type or trait whose `impl` or `trait` block it is in (`None`: a free function), its
/// name, and its line.
fn definitions(code: &str) -> Vec<(Option<String>, String, usize)> {
    let b = code.as_bytes();
    let mut blocks: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    for kw in ["impl", "trait"] {
        for (i, _) in code.match_indices(kw) {
            if !word_at(code, i, kw) {
                continue;
            }
            if kw == "impl" {
                // An item, not a type in a signature (`-> impl Trait`, `x: impl Fn()`).
                let before = code[..i].trim_end();
                let unsafe_impl = before
                    .strip_suffix("unsafe")
                    .is_some_and(|r| r.bytes().last().is_none_or(|c| !is_ident(c)));
                let item =
                    unsafe_impl || before.is_empty() || before.ends_with(['}', ';', '{', ']']);
                if !item {
                    continue;
                }
            }
            let from = i + kw.len();
            let Some(open) = code[from..].find(['{', ';']).map(|k| from + k) else {
                continue;
            };
            if b[open] != b'{' {
                continue;
            }
            let header = &code[from..open];
            let owner = if kw == "trait" {
                header
                    .trim_start()
                    .bytes()
                    .take_while(|&c| is_ident(c))
                    .map(char::from)
                    .collect()
            } else {
                impl_type(header)
            };
            blocks.push((owner, open..block_end(code, open)));
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices("fn") {
        if !word_at(code, i, "fn") {
            continue;
        }
        let rest = code[i + 2..].trim_start();
        let n = rest.bytes().take_while(|&c| is_ident(c)).count();
        let after = rest[n..].trim_start();
        if n == 0 || !(after.starts_with('(') || after.starts_with('<')) {
            continue;
        }
        let owner = blocks
            .iter()
            .filter(|(_, r)| r.contains(&i))
            .min_by_key(|(_, r)| r.len())
            .map(|(t, _)| t.clone());
        let line = code[..i].matches('\n').count() + 1;
        out.push((owner, rest[..n].to_owned(), line));
    }
    out
}

/// What is wrong with `rules`, given the text of each file they name (`None`: no such
/// file): a file that does not exist, a function it does not define or defines more
/// than once, a function listed twice.
fn rule_problems(rules: &[Rule], text_of: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for r in rules {
        let at = format!(
            "docs/architecture.md:{} (\"{}\"): `{}:{}`",
            r.line, r.rule, r.file, r.function
        );
        if let Some(first) = seen.insert((&r.file, &r.function), r.line) {
            problems.push(format!("{at} is listed twice (also on line {first})"));
        }
        let Some(text) = text_of(&r.file) else {
            problems.push(format!("{at}: {} does not exist", r.file));
            continue;
        };
        let (owner, name) = match r.function.rsplit_once("::") {
            Some((t, n)) => (Some(t.rsplit("::").next().unwrap_or(t)), n),
            None => (None, r.function.as_str()),
        };
        let lines: Vec<usize> = definitions(&code_of(&text))
            .into_iter()
            .filter(|(o, n, _)| n == name && o.as_deref() == owner)
            .map(|(_, _, line)| line)
            .collect();
        let what = match owner {
            Some(t) => format!("method `{name}` of `{t}`"),
            None => format!("free function `{name}`"),
        };
        match lines.len() {
            1 => {}
            0 => problems.push(format!(
                "{at}: {} defines no {what}{}",
                r.file,
                if owner.is_none() {
                    " (a method is named `Type::method`)"
                } else {
                    ""
                }
            )),
            _ => problems.push(format!(
                "{at}: {} defines the {what} {} times (lines {lines:?}): a rule names one",
                r.file,
                lines.len()
            )),
        }
    }
    problems
}

#[test]
fn every_rule_in_the_table_names_one_function_that_exists() {
    let rules = rules_in(&architecture_doc()).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let problems = rule_problems(&rules, |file| std::fs::read_to_string(root.join(file)).ok());
    assert!(
        problems.is_empty(),
        "the rule table of docs/architecture.md does not match the code:\n{}",
        problems.join("\n")
    );
}

/// One row of the homes table: a rule written once, the patterns that define it (text
/// that any code writing the rule again would contain), and its home: the files (or
/// folders, ending in `/`) where those patterns may stand.
#[derive(Debug, PartialEq)]
struct Home {
    /// The row's line in the document (1-based).
    line: usize,
    rule: String,
    patterns: Vec<String>,
    homes: Vec<String>,
}

/// The pieces of `cell` between backticks.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The rows of the table between the `homes:begin` and `homes:end` markers of `doc`:
/// `| rule | patterns | home |`, each pattern and each home in backticks. A row of any
/// other shape is a problem, and so is a table without rows.
fn homes_in(doc: &str) -> Result<Vec<Home>, Vec<String>> {
    let (Some(begin), Some(end)) = (
        doc.find("<!-- homes:begin -->"),
        doc.find("<!-- homes:end -->"),
    ) else {
        return Err(vec![
            "docs/architecture.md has no `<!-- homes:begin -->` … `<!-- homes:end -->` table"
                .to_owned(),
        ]);
    };
    let first_line = doc[..begin].lines().count() + 1;
    let mut homes = Vec::new();
    let mut problems = Vec::new();
    let rows = doc[begin..end]
        .lines()
        .enumerate()
        .filter(|(_, row)| row.trim().starts_with('|'))
        .skip(2); // the header and the separator
    for (k, row) in rows {
        let line = first_line + k;
        let cells: Vec<&str> = row
            .trim()
            .trim_matches('|')
            .split(" | ")
            .map(str::trim)
            .collect();
        let (patterns, places) = match cells.as_slice() {
            [_, p, h] => (quoted(p), quoted(h)),
            _ => (Vec::new(), Vec::new()),
        };
        if patterns.is_empty() || places.is_empty() || patterns.iter().any(String::is_empty) {
            problems.push(format!(
                "docs/architecture.md:{line}: a home's row is `| rule | `pattern` … | \
                 `src/file.rs` … |`, not: {row}"
            ));
            continue;
        }
        homes.push(Home {
            line,
            rule: cells[0].to_owned(),
            patterns,
            homes: places,
        });
    }
    if homes.is_empty() && problems.is_empty() {
        problems.push("docs/architecture.md: the homes table has no rows".to_owned());
    }
    if problems.is_empty() {
        Ok(homes)
    } else {
        Err(problems)
    }
}

/// `code` with the items under `#[cfg(test)]` (a test module, a test helper) blanked:
/// a test's fixture may spell out what the rule writes (the line it expects).
fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(test)]") {
        let at = from + k;
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            break;
        };
        let end = if code.as_bytes()[open] == b'{' {
            block_end(code, open)
        } else {
            open + 1
        };
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).expect("only whole items were replaced")
}

/// Every place where a rule's defining pattern stands outside its home, in `files`
/// (comments and test code left out; string literals searched, as SQL and printed JSON
/// live in them). A file named `tests.rs` is test code.
fn written_twice(homes: &[Home], files: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    for f in files {
        if f.rel == "tests.rs" || f.rel.ends_with("/tests.rs") {
            continue;
        }
        let path = format!("src/{}", f.rel);
        let text = without_tests(&stripped(&f.text, true));
        find_written(homes, &path, &text, &mut problems);
    }
    problems
}

/// The Pi package's sources, which write the same rules from outside the crate: the
/// addon's Rust (`pi/native/src/`) and the package's TypeScript (`pi/src/`), each as its
/// path from the repository's root and its text without comments (and, for Rust, without
/// test code).
fn package_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut addon = Vec::new();
    rust_files(&root.join("pi/native/src"), &mut addon);
    for f in addon {
        let text = std::fs::read_to_string(&f).expect("read the addon's source");
        out.push((relative(root, &f), without_tests(&stripped(&text, true))));
    }
    let mut ts: Vec<PathBuf> = std::fs::read_dir(root.join("pi/src"))
        .expect("read pi/src")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "ts"))
        .collect();
    ts.sort();
    for f in ts {
        let text = std::fs::read_to_string(&f).expect("read the package's source");
        out.push((relative(root, &f), ts_without_comments(&text)));
    }
    out
}

fn relative(root: &Path, f: &Path) -> String {
    f.strip_prefix(root)
        .expect("under the repository")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// TypeScript `text` with its `//` and `/* */` comments blanked (lines kept), its string
/// and template literals left as they are.
fn ts_without_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |e| i + e);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                blank(&mut out, i, end);
                i = end;
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

/// Every pattern of `homes` in `text` (the file at `path`, comments blanked) outside the
/// rule's home, as a problem naming the file and line.
fn find_written(homes: &[Home], path: &str, text: &str, problems: &mut Vec<String>) {
    {
        for h in homes {
            let at_home = h.homes.iter().any(|home| match home.strip_suffix('/') {
                Some(dir) => path.starts_with(&format!("{dir}/")),
                None => path == *home,
            });
            if at_home {
                continue;
            }
            for p in &h.patterns {
                for (i, _) in text.match_indices(p.as_str()) {
                    let line = text[..i].matches('\n').count() + 1;
                    problems.push(format!(
                        "{path}:{line}: `{p}` writes the rule \"{}\" (docs/architecture.md:{}) \
                         outside its home {}: call the home instead",
                        h.rule,
                        h.line,
                        h.homes.join(", ")
                    ));
                }
            }
        }
    }
}

#[test]
fn no_rule_is_written_outside_its_home() {
    let homes = homes_in(&architecture_doc()).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let missing: Vec<String> = homes
        .iter()
        .flat_map(|h| &h.homes)
        .filter(|home| !root.join(home).exists())
        .map(|home| format!("docs/architecture.md: the home {home} does not exist"))
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    let mut problems = written_twice(&homes, &sources());
    for (path, text) in package_sources() {
        find_written(&homes, &path, &text, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "a rule with one home is written again elsewhere:\n{}",
        problems.join("\n")
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

    #[test]
    fn a_rule_names_a_free_function_or_a_method_defined_once() {
        let text = "//! fn in_a_comment() {}\n\
                    pub(crate) fn apply(x: u8) -> u8 { x }\n\
                    impl Op {\n    pub fn apply(&self) -> u8 { apply(1) }\n}\n\
                    impl<T: Fn() -> u8> std::fmt::Display for Wrap<T> {\n    \
                    fn fmt(&self, f: &mut Formatter<'_>) -> Result { todo!() }\n}\n\
                    fn uses(f: impl Fn() -> u8) -> impl Iterator<Item = u8> { todo!() }\n\
                    fn twice() {}\nmod tests { fn twice() {} }\n\
                    const S: &str = \"fn in_a_string() {}\";\n\
                    trait Seam { fn len(&self) -> u64; }\n";
        let rule = |line, function: &str| Rule {
            line,
            rule: format!("rule {line}"),
            file: "src/a.rs".to_owned(),
            function: function.to_owned(),
        };
        let rules = [
            rule(1, "apply"),
            rule(2, "Op::apply"),
            rule(3, "Wrap::fmt"),
            rule(4, "uses"),
            rule(5, "Seam::len"),
        ];
        let text_of = |f: &str| (f == "src/a.rs").then(|| text.to_owned());
        assert!(
            rule_problems(&rules, text_of).is_empty(),
            "{:?}",
            rule_problems(&rules, text_of)
        );
        let bad = [
            rule(10, "twice"),
            rule(11, "in_a_comment"),
            rule(12, "in_a_string"),
            rule(13, "fmt"),
            rule(14, "Op::apply"),
            rule(15, "Op::apply"),
            Rule {
                file: "src/gone.rs".to_owned(),
                ..rule(16, "apply")
            },
        ];
        let problems = rule_problems(&bad, text_of);
        let expect = [
            "twice` 2 times",
            "no free function `in_a_comment`",
            "no free function `in_a_string`",
            "no free function `fmt`",
            "listed twice (also on line 14)",
            "src/gone.rs does not exist",
        ];
        assert_eq!(problems.len(), expect.len(), "{problems:#?}");
        for (p, e) in problems.iter().zip(expect) {
            assert!(p.contains(e), "{p:?} should say {e:?}");
        }
    }

    #[test]
    fn the_rule_table_is_read_between_its_markers() {
        let doc = "# Map\n\n| rule | where |\n|---|---|\n| not in the table | `src/x.rs:f` |\n\
                   <!-- rules:begin -->\n| rule | where |\n|---|:--|\n\
                   | the one decision | `src/state/decide.rs:decide_versioned` |\n\
                   | the fold step | `src/state/step.rs:Op::apply` |\n\
                   <!-- rules:end -->\n";
        let rules = rules_in(doc).expect("a table");
        assert_eq!(
            rules,
            [
                Rule {
                    line: 9,
                    rule: "the one decision".to_owned(),
                    file: "src/state/decide.rs".to_owned(),
                    function: "decide_versioned".to_owned(),
                },
                Rule {
                    line: 10,
                    rule: "the fold step".to_owned(),
                    file: "src/state/step.rs".to_owned(),
                    function: "Op::apply".to_owned(),
                },
            ]
        );
        let bad = "<!-- rules:begin -->\n| rule | where |\n|---|---|\n| a rule | somewhere |\n\
                   <!-- rules:end -->";
        let problems = rules_in(bad).expect_err("a row without a file:function");
        assert!(
            problems[0].contains("docs/architecture.md:4"),
            "{problems:?}"
        );
        assert!(rules_in("no markers").is_err());
        assert!(rules_in("<!-- rules:begin -->\n<!-- rules:end -->").is_err());
    }

    #[test]
    fn a_rule_written_outside_its_home_is_found_and_a_test_fixture_is_not() {
        let doc = "<!-- homes:begin -->\n| rule | patterns | home |\n|---|---|---|\n\
                   | the bracket | `\"BEGIN` `transaction_with_behavior` | `src/sqlite.rs` |\n\
                   | the Tx | `.transaction()` | `src/persistence/postgres/` |\n\
                   <!-- homes:end -->\n";
        let homes = homes_in(doc).expect("a table");
        assert_eq!(homes.len(), 2);
        assert_eq!(homes[0].patterns, ["\"BEGIN", "transaction_with_behavior"]);
        assert_eq!(homes[0].line, 4);
        let files = src(&[
            (
                "sqlite.rs",
                "fn begin(c: &C) { c.execute(\"BEGIN IMMEDIATE\") }\n",
            ),
            (
                "projection/prune.rs",
                "// \"BEGIN in a comment\n\
                 fn f(c: &C) {\n    c.execute_batch(\"BEGIN IMMEDIATE\");\n}\n\
                 #[cfg(test)]\nmod tests {\n    const L: &str = \"BEGIN\";\n}\n",
            ),
            (
                "persistence/postgres/mod.rs",
                "fn g(c: &mut C) { c.transaction(); }\n",
            ),
            (
                "store/presence.rs",
                "fn h(c: &mut C) { c.transaction(); }\n",
            ),
            ("json/tests.rs", "const T: &str = \"BEGIN\";\n"),
        ]);
        let problems = written_twice(&homes, &files);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems[0].starts_with(
                "src/projection/prune.rs:3: `\"BEGIN` writes the rule \"the bracket\""
            ),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("src/store/presence.rs:1: `.transaction()`"),
            "{problems:?}"
        );
        let bad = "<!-- homes:begin -->\n| rule | patterns | home |\n|---|---|---|\n\
                   | a rule | no pattern | `src/x.rs` |\n<!-- homes:end -->";
        let problems = homes_in(bad).expect_err("a row without a pattern");
        assert!(
            problems[0].contains("docs/architecture.md:4"),
            "{problems:?}"
        );
        assert!(homes_in("no markers").is_err());
    }

    #[test]
    fn the_package_typescript_is_searched_in_code_and_literals_not_in_comments() {
        let doc = "<!-- homes:begin -->\n| rule | patterns | home |\n|---|---|---|\n\
                   | the envelope | `\"scope\":` | `src/state/envelope.rs` |\n<!-- homes:end -->\n";
        let homes = homes_in(doc).expect("a table");
        let ts = "// {\"scope\": in a comment\n\
                  /* and \"scope\": in\n a block */\n\
                  const url = \"http://x\"; // a // inside a string is not a comment\n\
                  const head = `{\"v\":1,\"scope\":\"${scope}\"`;\n";
        let text = ts_without_comments(ts);
        assert_eq!(text.lines().count(), ts.lines().count(), "lines kept");
        let mut problems = Vec::new();
        find_written(&homes, "pi/src/event.ts", &text, &mut problems);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(
            problems[0]
                .starts_with("pi/src/event.ts:5: `\"scope\":` writes the rule \"the envelope\""),
            "{problems:?}"
        );
    }
}
