//! `docs/api.md` lists the public surface: the table between its `surface:begin` and
//! `surface:end` markers names, for the crate root and each public module, every public
//! name. This test derives the names from the sources and requires the two to be equal, so
//! a name added to the surface without a line in `docs/api.md` fails, and so does a name
//! the table keeps after it is gone.
//!
//! What counts as public: in `src/lib.rs`, the items declared `pub` at the top level
//! (`fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`, `union`, `mod`) and every
//! name a `pub use` gives (a `{…}` group, nested groups and `as` renames included); then,
//! one level down, the same in each public module, inline (`pub mod x { … }`) or in its own
//! file (`src/x.rs`, `src/x/mod.rs`). `pub(crate)` items, methods and items under
//! `#[cfg(test)]`, `#[cfg(doctest)]`, `#[doc(hidden)]` or the `__internal` feature are not
//! the surface. A glob (`pub use x::*`) is refused: its names could not be listed.
//!
//! The surface is also bounded: at most [`MOST_NAMES`] names in all (the test prints the
//! count).

use std::collections::BTreeSet;
use std::path::Path;

use crate::architecture::code_of;

/// A public name: the module it is reached through (`""` for the crate root, `lock` for
/// `session_state::lock`) and the name.
type Name = (String, String);

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifier at the start of `s` (after whitespace).
fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let n = s.bytes().take_while(|&c| is_ident(c)).count();
    &s[..n]
}

/// The byte after the `}` closing the `{` at `open`.
fn close_of(code: &str, open: usize) -> usize {
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

/// The names a `use` tree gives (the text after `pub use`, without the `;`):
/// `a::{B, c::{D, E as F}, self}` → `B`, `D`, `F`, `a`. A glob is an error.
fn use_names(tree: &str, out: &mut Vec<String>) -> Result<(), String> {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let prefix = tree[..open].trim_end_matches("::").trim();
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0;
        let mut start = 0;
        for (k, c) in body.char_indices().chain([(body.len(), ',')]) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let item = body[start..k].trim();
                    start = k + 1;
                    if item == "self" {
                        out.push(prefix.rsplit("::").next().unwrap_or(prefix).to_owned());
                    } else if !item.is_empty() {
                        use_names(item, out)?;
                    }
                }
                _ => {}
            }
        }
        return Ok(());
    }
    let name = match tree.split_once(" as ") {
        Some((_, alias)) => alias.trim(),
        None => tree.rsplit("::").next().unwrap_or(tree).trim(),
    };
    if name == "*" {
        return Err(format!(
            "`pub use {tree}`: a glob re-export cannot be listed"
        ));
    }
    if name == "_" {
        return Ok(());
    }
    out.push(name.to_owned());
    Ok(())
}

/// One public item at the top level of some code.
#[derive(Debug, PartialEq)]
enum Item {
    /// A name (a `pub use` gives one per leaf).
    Name(String),
    /// `pub mod x;`: a module in its own file.
    ModFile(String),
    /// `pub mod x { … }`: the module and its body.
    ModInline(String, String),
}

/// Whether the attributes before an item keep it out of the surface.
fn hidden(before: &str) -> bool {
    let attrs: String = before
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("#["))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    [
        "#[cfg(test)]",
        "#[cfg(doctest)]",
        "#[doc(hidden)]",
        "\"__internal\"",
    ]
    .iter()
    .any(|h| attrs.contains(h))
}

/// The public items at the top level of `text` (a file, or a module's body): only items
/// at brace depth 0, so no method, and nothing inside a function.
fn items(text: &str) -> Result<Vec<Item>, String> {
    let code = code_of(text);
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    // Where the current item's attributes begin: after the last item at depth 0.
    let mut item_start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    item_start = i + 1;
                }
            }
            b';' if depth == 0 => item_start = i + 1,
            b'p' if depth == 0
                && code[i..].starts_with("pub")
                && (i == 0 || !is_ident(b[i - 1]))
                && b.get(i + 3).is_some_and(|c| c.is_ascii_whitespace()) =>
            {
                let rest = &code[i + 3..];
                let mut words = rest.trim_start();
                // `pub const fn f`, `pub async fn f`, `pub unsafe fn f`, `pub extern "C" fn`.
                let mut kind = ident(words);
                while matches!(kind, "async" | "unsafe" | "extern")
                    || (kind == "const" && ident(&words[kind.len()..]) == "fn")
                {
                    words = words[kind.len()..].trim_start();
                    kind = ident(words);
                }
                let after = &words[kind.len()..];
                let skip = hidden(&text[item_start..i]);
                let at = i + 3 + (rest.len() - words.len()) + kind.len();
                match kind {
                    "use" => {
                        let end = code[at..].find(';').map_or(code.len(), |k| at + k);
                        let mut names = Vec::new();
                        use_names(&code[at..end], &mut names)?;
                        if !skip {
                            out.extend(names.into_iter().map(Item::Name));
                        }
                        i = end;
                        continue;
                    }
                    "mod" => {
                        let name = ident(after).to_owned();
                        let open = code[at..].find(['{', ';']).map_or(code.len(), |k| at + k);
                        if b.get(open) == Some(&b'{') {
                            let close = close_of(&code, open);
                            if !skip {
                                out.push(Item::ModInline(name, text[open + 1..close - 1].into()));
                            }
                            i = close;
                            item_start = close;
                            continue;
                        }
                        if !skip {
                            out.push(Item::ModFile(name));
                        }
                    }
                    "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union" => {
                        let name = ident(after);
                        if name.is_empty() {
                            return Err(format!("`pub {kind}` without a name"));
                        }
                        if !skip {
                            out.push(Item::Name(name.to_owned()));
                        }
                    }
                    other => return Err(format!("`pub {other}`: an item this test cannot read")),
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(out)
}

/// The public names of the crate whose root is `lib_rs`, reading a public module's own
/// file with `file(rel)` (`settings.rs`, `lock/mod.rs`; `None` when it does not exist).
fn surface(lib_rs: &str, file: impl Fn(&str) -> Option<String>) -> Result<BTreeSet<Name>, String> {
    let mut names = BTreeSet::new();
    for item in items(lib_rs)? {
        let (module, body) = match item {
            Item::Name(n) => {
                names.insert((String::new(), n));
                continue;
            }
            Item::ModInline(m, body) => (m, body),
            Item::ModFile(m) => {
                let body = file(&format!("{m}.rs"))
                    .or_else(|| file(&format!("{m}/mod.rs")))
                    .ok_or_else(|| format!("pub mod {m}: neither src/{m}.rs nor src/{m}/mod.rs"))?;
                (m, body)
            }
        };
        names.insert((String::new(), module.clone()));
        for inner in items(&body).map_err(|e| format!("{module}: {e}"))? {
            match inner {
                Item::Name(n) => names.insert((module.clone(), n)),
                Item::ModFile(n) | Item::ModInline(n, _) => names.insert((module.clone(), n)),
            };
        }
    }
    Ok(names)
}

/// The names the table of `doc` lists, between `<!-- surface:begin -->` and
/// `<!-- surface:end -->`: each row is `| module path | what | names |`, the path and the
/// names in backticks (`` `session_state::lock` ``, `` `Holder`, `LEASE` ``).
fn documented(doc: &str) -> Result<BTreeSet<Name>, Vec<String>> {
    let begin = doc
        .find("<!-- surface:begin -->")
        .ok_or(vec!["no surface:begin marker".into()])?;
    let end = doc
        .find("<!-- surface:end -->")
        .ok_or(vec!["no surface:end marker".into()])?;
    let first_line = doc[..begin].lines().count() + 1;
    let mut names = BTreeSet::new();
    let mut problems = Vec::new();
    for (k, line) in doc[begin..end].lines().enumerate().skip(1) {
        let at = format!("docs/api.md:{}", first_line + k);
        let line = line.trim();
        if line.is_empty()
            || line.starts_with("| module")
            || line.starts_with("|--")
            || line.starts_with("| --")
        {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [path, _, listed] = cells[..] else {
            problems.push(format!(
                "{at}: a row is `| module | what | names |`: {line}"
            ));
            continue;
        };
        let module = match path.trim_matches('`').strip_prefix("session_state") {
            Some("") => String::new(),
            Some(m) if m.starts_with("::") => m[2..].to_owned(),
            _ => {
                problems.push(format!("{at}: `{path}` is not a path in session_state"));
                continue;
            }
        };
        let ticked: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
        if ticked.is_empty() {
            problems.push(format!("{at}: no name in backticks"));
        }
        for n in ticked {
            if !names.insert((module.clone(), n.to_owned())) {
                problems.push(format!("{at}: `{n}` is listed twice"));
            }
        }
    }
    if names.is_empty() && problems.is_empty() {
        problems.push("the surface table lists no name".into());
    }
    if problems.is_empty() {
        Ok(names)
    } else {
        Err(problems)
    }
}

fn shown((module, name): &Name) -> String {
    if module.is_empty() {
        format!("session_state::{name}")
    } else {
        format!("session_state::{module}::{name}")
    }
}

/// What differs between the code's names and the table's.
fn differences(code: &BTreeSet<Name>, doc: &BTreeSet<Name>) -> Vec<String> {
    let mut out: Vec<String> = code
        .difference(doc)
        .map(|n| format!("{} is public but docs/api.md does not list it", shown(n)))
        .collect();
    out.extend(
        doc.difference(code)
            .map(|n| format!("docs/api.md lists {}, which is not public", shown(n))),
    );
    out
}

/// The most public names the crate has: its root and its public modules, each name once
/// (`docs/api.md`, "The surface").
const MOST_NAMES: usize = 110;

/// The public names of this crate, from its sources.
fn crate_surface() -> BTreeSet<Name> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs");
    surface(&lib, |rel| std::fs::read_to_string(src.join(rel)).ok())
        .unwrap_or_else(|e| panic!("src/lib.rs: {e}"))
}

/// Whether `names` is within the bound; the problem names the count, per module.
fn within_bound(names: &BTreeSet<Name>, most: usize) -> Result<(), String> {
    if names.len() <= most {
        return Ok(());
    }
    let mut per_module = std::collections::BTreeMap::<&str, usize>::new();
    for (module, _) in names {
        *per_module.entry(module.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = per_module
        .iter()
        .map(|(m, n)| format!("{}: {n}", if m.is_empty() { "(root)" } else { m }))
        .collect();
    Err(format!(
        "{} public names, more than {most} ({})",
        names.len(),
        counts.join(", ")
    ))
}

#[test]
fn the_surface_has_at_most_110_names() {
    let names = crate_surface();
    println!("public names: {}", names.len());
    within_bound(&names, MOST_NAMES).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn docs_api_md_lists_every_public_name_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let code = crate_surface();
    assert!(
        code.len() > 40,
        "only {} public names found: {code:?}",
        code.len()
    );
    let doc = std::fs::read_to_string(root.join("docs/api.md")).expect("read docs/api.md");
    let doc = documented(&doc).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let problems = differences(&code, &doc);
    assert!(
        problems.is_empty(),
        "the surface table of docs/api.md does not match the code:\n{}",
        problems.join("\n")
    );
}

/// The checks above on small sources written here: they can fail.
mod parser {
    use super::*;

    fn names(list: &[(&str, &str)]) -> BTreeSet<Name> {
        list.iter()
            .map(|(m, n)| ((*m).to_owned(), (*n).to_owned()))
            .collect()
    }

    const LIB: &str = "//! pub fn in_a_comment() {}\n\
        mod private;\n\
        pub mod json;\n\
        pub(crate) fn internal() {}\n\
        pub use error::{Error, Result};\n\
        pub use store::{Store, state::{SessionState as State, self}};\n\
        #[cfg(feature = \"postgres\")]\n\
        pub use persistence::PostgresStore;\n\
        pub fn branch_key() -> &'static str { \"pub fn in_a_string\" }\n\
        pub const fn limit() -> usize { 1 }\n\
        pub const MAX: usize = 1;\n\
        impl Store { pub fn method(&self) {} }\n\
        /// Docs.\n\
        pub mod lock {\n    pub use crate::lock::{Holder, LEASE};\n    pub struct Row;\n}\n\
        #[doc(hidden)]\n\
        pub fn hook() {}\n\
        #[cfg(feature = \"__internal\")]\n\
        pub use store::Work;\n\
        #[cfg(doctest)]\n\
        pub struct ReadmeDoctests;\n";

    fn json_file(rel: &str) -> Option<String> {
        (rel == "json/mod.rs").then(|| {
            "mod scan;\npub use scan::Depth;\npub enum JsonError { A }\n\
             pub(crate) fn walk() {}\nfn private() { pub fn nested() {} }\n"
                .to_owned()
        })
    }

    #[test]
    fn the_surface_is_read_from_the_root_and_one_level_of_public_modules() {
        let got = surface(LIB, json_file).expect("readable");
        let want = names(&[
            ("", "json"),
            ("", "Error"),
            ("", "Result"),
            ("", "Store"),
            ("", "State"),
            ("", "state"),
            ("", "PostgresStore"),
            ("", "branch_key"),
            ("", "limit"),
            ("", "MAX"),
            ("", "lock"),
            ("lock", "Holder"),
            ("lock", "LEASE"),
            ("lock", "Row"),
            ("json", "Depth"),
            ("json", "JsonError"),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn a_glob_a_missing_module_file_and_an_unknown_item_are_refused() {
        let glob = surface("pub use store::*;", |_| None).expect_err("a glob");
        assert!(glob.contains("glob"), "{glob}");
        let missing = surface("pub mod gone;", |_| None).expect_err("no file");
        assert!(missing.contains("src/gone.rs"), "{missing}");
        let unknown = surface("pub macro m() {}", |_| None).expect_err("an unknown item");
        assert!(unknown.contains("pub macro"), "{unknown}");
    }

    #[test]
    fn a_name_missing_from_the_table_or_listed_and_gone_fails() {
        let code = surface(LIB, json_file).expect("readable");
        let doc = "# API\n\n<!-- surface:begin -->\n\
            | module | what | names |\n|---|---|---|\n\
            | `session_state` | modules | `json`, `lock` |\n\
            | `session_state` | the rest | `Error`, `Result`, `Store`, `State`, `state`, `PostgresStore`, `branch_key`, `limit`, `MAX` |\n\
            | `session_state::lock` | lock | `Holder`, `LEASE`, `Row` |\n\
            | `session_state::json` | json | `Depth`, `JsonError` |\n\
            <!-- surface:end -->\n";
        let listed = documented(doc).expect("a table");
        assert!(
            differences(&code, &listed).is_empty(),
            "{:?}",
            differences(&code, &listed)
        );

        let short = doc
            .replace(", `Row`", "")
            .replace("`MAX` |", "`MAX`, `Gone` |");
        let problems = differences(&code, &documented(&short).expect("a table"));
        assert_eq!(
            problems,
            [
                "session_state::lock::Row is public but docs/api.md does not list it",
                "docs/api.md lists session_state::Gone, which is not public",
            ]
        );
    }

    #[test]
    fn a_surface_over_the_bound_fails_and_names_the_count() {
        let code = surface(LIB, json_file).expect("readable");
        assert_eq!(code.len(), 16);
        assert!(within_bound(&code, 16).is_ok());
        let over = within_bound(&code, 15).expect_err("16 names, bound 15");
        assert!(
            over.starts_with("16 public names, more than 15 ((root): 11, json: 2, lock: 3)"),
            "{over}"
        );
    }

    #[test]
    fn a_malformed_table_is_refused() {
        assert!(documented("no markers").is_err());
        assert!(documented("<!-- surface:begin -->\n<!-- surface:end -->").is_err());
        let bad = "<!-- surface:begin -->\n| `session_state` | two cells |\n\
                   | `other::x` | what | `A` |\n| `session_state` | what | `A`, `A` |\n\
                   <!-- surface:end -->";
        let problems = documented(bad).expect_err("three bad rows");
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("docs/api.md:2"), "{problems:?}");
        assert!(
            problems[1].contains("not a path in session_state"),
            "{problems:?}"
        );
        assert!(problems[2].contains("listed twice"), "{problems:?}");
    }
}
