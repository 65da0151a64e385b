//! What the fuzz targets share: a cursor over the fuzzer's bytes, a generator that turns
//! them into a session file (a tree with forks, state events of three plugins in both
//! scopes, `set` / `patch` / `drop` and envelopes this crate cannot read, other
//! extensions' entries, stages at which the file is read before the rest is appended),
//! a naive reference fold (each position's path folded from the root, as
//! `docs/data-flow.md` ("Fold") defines the value), and a scratch directory.

use serde_json::Value;
use session_state::{Error, Scope, SessionLog, json, StateError};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The fuzzer's bytes, read front to back; zeros once they run out.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        let b = if n > 256 {
            usize::from(self.byte()) << 8 | usize::from(self.byte())
        } else {
            usize::from(self.byte())
        };
        b % n
    }

    pub fn chance(&mut self, one_in: u8) -> bool {
        self.byte().is_multiple_of(one_in)
    }

    /// Up to `max` bytes, as text (lossy), without newlines.
    pub fn text(&mut self, max: usize) -> String {
        let n = self.below(max + 1).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        String::from_utf8_lossy(head).replace(['\n', '\r'], " ")
    }
}

/// The plugins the generator writes events of.
pub const PLUGINS: [&str; 3] = ["a", "b", "c"];
pub const SCOPES: [Scope; 2] = [Scope::Branch, Scope::Session];
pub const TIMESTAMP: &str = "2026-01-01T00:00:00.000Z";

/// A header line of format `version` (1: no `version` key).
pub fn header(version: u8, session_id: &str) -> String {
    let v = if version == 1 {
        String::new()
    } else {
        format!(r#""version":{version},"#)
    };
    format!(
        r#"{{"type":"session",{v}"id":"{session_id}","timestamp":"{TIMESTAMP}","cwd":"/fuzz"}}"#
    )
}

/// A small JSON value as text: numbers in the forms JavaScript prints differently
/// (`1.0`, `-0.0`, `1e21`), strings with lone surrogate escapes and U+10FFFF, keys that
/// JavaScript orders first (`"1"`, `"10"`), nulls (a `patch` deletes with them), nesting.
pub fn value(inp: &mut Input<'_>, depth: usize) -> String {
    const ATOMS: [&str; 16] = [
        "0",
        "1",
        "-7",
        "1.0",
        "-0.0",
        "0.1",
        "1e21",
        "9007199254740993",
        "null",
        "true",
        "false",
        r#""x""#,
        r#""cut \ud83d""#,
        r#""\udc00\ud83d\ude00""#,
        "\"\u{10FFFF}\"",
        r#""""#,
    ];
    const KEYS: [&str; 6] = ["k0", "k1", "k2", "1", "10", "0"];
    match inp.byte() % 8 {
        0..=3 if depth < 3 => {
            let n = inp.below(4);
            let mut keys: Vec<&str> = Vec::new();
            for _ in 0..n {
                let k = KEYS[inp.below(KEYS.len())];
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!(r#""{k}":{}"#, value(inp, depth + 1)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        4 if depth < 3 => {
            let items: Vec<String> = (0..inp.below(4)).map(|_| value(inp, depth + 1)).collect();
            format!("[{}]", items.join(","))
        }
        _ => ATOMS[inp.below(ATOMS.len())].to_owned(),
    }
}

/// The `data` of a state event: mostly readable envelopes, sometimes one this crate
/// refuses (with or without a scope it can still tell).
pub fn event_data(inp: &mut Input<'_>) -> Option<String> {
    let scope = if inp.chance(3) { "session" } else { "branch" };
    Some(match inp.byte() % 16 {
        0..=5 => format!(
            r#"{{"v":1,"scope":"{scope}","op":"set","value":{}}}"#,
            value(inp, 0)
        ),
        6..=10 => format!(
            r#"{{"v":1,"scope":"{scope}","op":"patch","patch":{}}}"#,
            value(inp, 0)
        ),
        11 | 12 => format!(r#"{{"v":1,"scope":"{scope}","op":"drop"}}"#),
        13 => format!(r#"{{"v":9,"scope":"{scope}","op":"set","value":1}}"#),
        14 => format!(r#"{{"v":1,"scope":"{scope}","op":"frob"}}"#),
        _ => match inp.byte() % 5 {
            0 => r#"{"v":1,"scope":"galaxy","op":"drop"}"#.to_owned(),
            1 => r#"{"v":1,"op":"drop"}"#.to_owned(),
            2 => "[1]".to_owned(),
            3 => return None,
            _ => r#""text""#.to_owned(),
        },
    })
}

/// A generated session: the entry lines in file order (no header), their ids, and the
/// stages (line counts) at which a target reads the file before appending the rest.
pub struct Session {
    pub version: u8,
    pub session_id: String,
    pub lines: Vec<String>,
    pub ids: Vec<String>,
    pub stages: Vec<usize>,
    /// The input left over, for the target's own choices.
    pub torn: Option<String>,
}

impl Session {
    /// Up to `max` entries of format `version` (1: no ids, one chain; 2 and 3: a tree).
    pub fn generate(inp: &mut Input<'_>, version: u8, session_id: &str, max: usize) -> Session {
        let mut s = Session {
            version,
            session_id: session_id.to_owned(),
            lines: Vec::new(),
            ids: Vec::new(),
            stages: Vec::new(),
            torn: None,
        };
        let mut parent: Option<usize> = None;
        while !inp.is_empty() && s.lines.len() < max {
            let n = s.lines.len();
            let link = |parent: Option<usize>, ids: &[String]| -> String {
                if version == 1 {
                    return String::new();
                }
                let p = parent.map_or("null".to_owned(), |p| format!("\"{}\"", ids[p]));
                format!(r#""id":"e{n:04}","parentId":{p},"#)
            };
            let body = match inp.byte() % 16 {
                0..=6 => {
                    let plugin = PLUGINS[inp.below(PLUGINS.len())];
                    let data = event_data(inp).map_or(String::new(), |d| format!(r#""data":{d},"#));
                    format!(r#""type":"custom","customType":"session-state/{plugin}",{data}"#)
                }
                7..=9 => {
                    let role = if inp.chance(2) { "user" } else { "assistant" };
                    let text = json::to_string(&Value::String(inp.text(12)));
                    format!(
                        r#""type":"message","message":{{"role":"{role}","content":[{{"type":"text","text":{text}}}],"timestamp":1}},"#
                    )
                }
                10 => {
                    let ct = ["x", "1", "session-statex"][inp.below(3)];
                    let data = if inp.chance(3) {
                        String::new()
                    } else {
                        format!(r#""data":{},"#, value(inp, 0))
                    };
                    format!(r#""type":"custom","customType":"{ct}",{data}"#)
                }
                11 | 12 if version > 1 && n > 0 => {
                    // A fork: go on from an earlier entry (now and then a new root).
                    parent = if inp.chance(8) { None } else { Some(inp.below(n)) };
                    continue;
                }
                13 if n > 0 => {
                    if s.stages.last() != Some(&n) && s.stages.len() < 4 {
                        s.stages.push(n);
                    }
                    continue;
                }
                14 if version == 2 => {
                    r#""type":"message","message":{"role":"hookMessage","customType":"h","content":"c","display":true,"timestamp":1},"#
                        .to_owned()
                }
                _ => r#""type":"thinking_level_change","thinkingLevel":"high","#.to_owned(),
            };
            let line = format!(
                "{{{body}{}\"timestamp\":\"{TIMESTAMP}\"}}",
                link(parent, &s.ids)
            );
            s.ids.push(format!("e{n:04}"));
            s.lines.push(line);
            parent = Some(n);
        }
        if inp.chance(4) {
            let cut = inp.below(40);
            s.torn = Some(
                r#"{"type":"custom","customType":"session-state/a","data":{"v":1,"#
                    .chars()
                    .take(cut.max(1))
                    .collect(),
            );
        }
        s
    }

    /// The file's text up to `lines` entry lines (header included).
    pub fn text(&self, lines: usize) -> String {
        let mut out = header(self.version, &self.session_id);
        out.push('\n');
        for l in &self.lines[..lines] {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    /// The lines `from..to`, each with its newline.
    pub fn lines_text(&self, from: usize, to: usize) -> String {
        let mut out = String::new();
        for l in &self.lines[from..to] {
            let _ = writeln!(out, "{l}");
        }
        out
    }
}

/// What an event of a plugin means to the reference fold.
enum Event {
    Apply(Scope, Op),
    /// An envelope this crate cannot read, and the scope it declares when it can tell.
    Bad(Option<Scope>),
}

enum Op {
    Set(Value),
    Patch(Value),
    Drop,
}

/// The envelope's rules, written out again (the reference does not share the decoder).
fn decode(data: Option<&Value>) -> Event {
    let Some(Value::Object(m)) = data else {
        return Event::Bad(None);
    };
    let scope = match m.get("scope").and_then(Value::as_str) {
        Some("branch") => Scope::Branch,
        Some("session") => Scope::Session,
        _ => return Event::Bad(None),
    };
    if m.get("v").and_then(Value::as_u64) != Some(1) {
        return Event::Bad(Some(scope));
    }
    let op = match (
        m.get("op").and_then(Value::as_str),
        m.get("value"),
        m.get("patch"),
    ) {
        (Some("set"), Some(v), _) => Op::Set(v.clone()),
        (Some("patch"), _, Some(p)) => Op::Patch(p.clone()),
        (Some("drop"), _, _) => Op::Drop,
        _ => return Event::Bad(Some(scope)),
    };
    Event::Apply(scope, op)
}

/// A plugin's value at a position as the reference fold finds it, or [`Unreadable`].
pub type Expected = Result<Option<Value>, Unreadable>;

/// An event the fold must apply cannot be read (or the position does not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// The reference's decoding of every state event of a log, done once.
pub struct Reference {
    events: HashMap<String, (String, Event)>,
}

impl Reference {
    pub fn of(log: &SessionLog) -> Reference {
        let mut events = HashMap::new();
        for e in log.entries() {
            let Some(plugin) = e
                .custom_type()
                .and_then(|c| c.strip_prefix("session-state/"))
            else {
                continue;
            };
            let Ok(line) = log.raw_line(e.id()) else {
                continue;
            };
            let Ok(v) = json::from_str(&line) else {
                continue;
            };
            events.insert(
                e.id().to_owned(),
                (plugin.to_owned(), decode(v.get("data"))),
            );
        }
        Reference { events }
    }

    /// Whether entry `id` is a state event whose envelope this crate cannot read.
    pub fn is_bad(&self, id: &str) -> bool {
        matches!(self.events.get(id), Some((_, Event::Bad(_))))
    }

    /// The scope a readable state event at `id` declares.
    pub fn scope_of(&self, id: &str) -> Option<Scope> {
        match self.events.get(id) {
            Some((_, Event::Apply(s, _))) => Some(*s),
            _ => None,
        }
    }

    /// `plugin`'s value in `scope` as if the leaf were `at`: branch scope folds the
    /// events on the path from the root to `at`, session scope every event of the file in
    /// order.
    pub fn expected(&self, log: &SessionLog, plugin: &str, scope: Scope, at: &str) -> Expected {
        let ids: Vec<&str> = match scope {
            Scope::Branch => log.path_to(at).map_err(|_| Unreadable)?,
            Scope::Session => log.entries().map(|e| e.id()).collect(),
        };
        let mut v: Option<Value> = None;
        for id in ids {
            match self.events.get(id) {
                Some((p, ev)) if p == plugin => match ev {
                    Event::Apply(s, op) if *s == scope => {
                        v = match op {
                            Op::Set(x) => Some(x.clone()),
                            Op::Drop => None,
                            Op::Patch(p) => {
                                let mut doc = match v {
                                    Some(d) => d,
                                    None => Value::Object(serde_json::Map::new()),
                                };
                                json::merge_patch(&mut doc, p);
                                Some(doc)
                            }
                        }
                    }
                    Event::Apply(..) => {}
                    Event::Bad(Some(s)) if *s != scope => {}
                    Event::Bad(_) => return Err(Unreadable),
                },
                _ => {}
            }
        }
        Ok(v)
    }
}

/// [`Reference::expected`] for one question (decodes the log's events first).
pub fn expected(log: &SessionLog, plugin: &str, scope: Scope, at: &str) -> Expected {
    Reference::of(log).expected(log, plugin, scope, at)
}

/// Asserts that a read agrees with the reference: the same value, or a bad-event error
/// naming the plugin where the reference cannot fold.
pub fn agree(what: &str, got: &Result<Option<Value>, Error>, want: &Expected, plugin: &str) {
    match (got, want) {
        (Ok(g), Ok(w)) => assert!(g == w, "{what}: got {g:?}, the reference folds {w:?}"),
        (Err(Error::State(StateError::BadEvent { plugin: p, .. })), Err(Unreadable)) if p == plugin => {}
        (Err(e), Err(Unreadable)) => panic!("{what}: expected a bad event of {plugin}, got: {e}"),
        (Err(e), Ok(w)) => panic!("{what}: the reference folds {w:?}, got: {e}"),
        (Ok(g), Err(Unreadable)) => panic!("{what}: got {g:?}, the reference meets a bad event"),
    }
}

/// [`json::js_eq`] of two optional values: absent equals only absent.
pub fn js_eq_opt(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => json::js_eq(a, b),
        _ => false,
    }
}

/// A directory of this fuzzing process under the temporary directory. `fuzz/run` points
/// `TMPDIR` at a directory on tmpfs (so that the writes' `fdatasync` costs no disk flush)
/// and removes it afterwards: libFuzzer ends the process without dropping this.
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("session-state-fuzz-")
        .tempdir()
        .expect("a scratch directory")
}

/// Entry ids of `log` to check: all of them when few, else an even sample and the last.
pub fn sample(log: &SessionLog, max: usize) -> Vec<String> {
    let ids: Vec<String> = log.entries().map(|e| e.id().to_owned()).collect();
    if ids.len() <= max {
        return ids;
    }
    let step = ids.len().div_ceil(max);
    let mut out: Vec<String> = ids.iter().step_by(step).cloned().collect();
    if let Some(last) = ids.last()
        && out.last() != Some(last)
    {
        out.push(last.clone());
    }
    out
}
