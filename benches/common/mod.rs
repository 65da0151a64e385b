//! Shared by the benches of docs/spec.md §10 (`hot_read`, `replay`, `write`, `memory`) and
//! `examples/replay_mem.rs`: a fast generator of Pi-format sessions, and peak-RSS probes.
//!
//! The generator writes what `bench/compare/gen.mjs` makes Pi 1.6.0 write, with the same
//! mixture and line sizes (6.6 KB per entry on average, as in the sessions docs/spec.md §10's
//! baselines were measured on): user prompts (0.3-1.5 KB), assistant replies with
//! thinking (7-23 KB), tool calls (0.9 KB) and their results (3-9 KB), a state event about
//! every twelfth entry (`session-state/{alpha,beta,bench}`, 80% `set`, mostly branch
//! scope) and a fork every fiftieth step. Field order and escaping follow Pi's
//! `JSON.stringify`. The last entry is a `bench` state event, so every plugin read at the
//! leaf has something to fold. It writes 100k entries (667 MB) in a few seconds, where
//! driving Pi takes minutes; the comparison script uses the real Pi.
#![expect(dead_code)]

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// How much longer message bodies are than in `big` of tests/interop/gen.mjs.
const SCALE: f64 = 3.15;

const WORDS: &[&str] = &[
    "the",
    "session",
    "log",
    "keeps",
    "every",
    "entry",
    "as",
    "one",
    "line",
    "and",
    "branches",
    "form",
    "a",
    "tree",
    "so",
    "state",
    "follows",
    "path",
    "from",
    "root",
    "to",
    "leaf",
    "while",
    "siblings",
    "never",
    "see",
    "writes",
    "of",
    "each",
    "other",
    "compaction",
    "summarises",
    "older",
    "turns",
    "tool",
    "calls",
    "read",
    "files",
    "run",
    "commands",
    "return",
    "results",
    "that",
    "model",
    "uses",
    "continue",
    "its",
    "work",
];

/// xorshift64*: deterministic and fast.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// What a generated session holds.
#[derive(Debug, Clone)]
pub struct Generated {
    pub entries: usize,
    pub bytes: u64,
    pub last_id: String,
}

/// Writes Pi-format lines for one session.
pub struct Generator {
    rng: Rng,
    /// Ids of every entry in append order (as counters; see [`Generator::id`]).
    ids: Vec<u32>,
    leaf: Option<u32>,
    next: u32,
    calls: u32,
    clock_ms: u64,
}

/// A distinct 8-hex id per counter (an odd multiplier is a bijection on u32).
pub fn id_of(n: u32) -> String {
    format!("{:08x}", n.wrapping_mul(0x9e37_79b1) ^ 0x5bd1_e995)
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            rng: Rng::new(seed),
            ids: Vec::new(),
            leaf: None,
            next: 0,
            calls: 0,
            clock_ms: 1_764_000_000_000,
        }
    }

    /// Prose of about `bytes` characters, JSON-escaped (paragraph breaks are `\n\n`).
    fn prose(&mut self, out: &mut String, bytes: usize) {
        let mut len = 0;
        let mut first = true;
        while len < bytes {
            if !first {
                out.push(' ');
            }
            first = false;
            let w = WORDS[self.rng.below(WORDS.len())];
            out.push_str(w);
            len += w.len() + 1;
            if self.rng.chance(0.06) {
                out.push_str(" \\n\\n");
                len += 3;
            }
        }
    }

    fn text(&mut self, bytes: usize) -> String {
        let mut s = String::with_capacity(bytes * 4);
        self.prose(&mut s, (bytes as f64 * SCALE).round() as usize);
        s
    }

    fn now(&mut self) -> u64 {
        self.clock_ms += 1 + self.rng.below(3000) as u64;
        self.clock_ms
    }

    fn iso(ms: u64) -> String {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        humantime::format_rfc3339_millis(t).to_string()
    }

    /// The session header line.
    pub fn header(session_id: &str) -> String {
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{session_id}\",\
             \"timestamp\":\"2025-11-24T16:00:00.000Z\",\"cwd\":\"/home/dev/acme-api\"}}\n"
        )
    }

    /// `"id":…,"parentId":…,"timestamp":…` of a new entry, which becomes the leaf.
    fn head(&mut self) -> (String, String) {
        let n = self.next;
        self.next += 1;
        let id = id_of(n);
        let parent = self
            .leaf
            .map_or_else(|| "null".to_owned(), |p| format!("\"{}\"", id_of(p)));
        let ts = Self::iso(self.clock_ms);
        self.ids.push(n);
        self.leaf = Some(n);
        (
            format!("\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"{ts}\""),
            id,
        )
    }

    fn message(&mut self, message: String) -> (String, String) {
        let (head, id) = self.head();
        (
            format!("{{\"type\":\"message\",{head},\"message\":{message}}}\n"),
            id,
        )
    }

    fn user(&mut self, text: &str) -> (String, String) {
        let ts = self.now();
        self.message(format!(
            "{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"timestamp\":{ts}}}"
        ))
    }

    fn assistant(
        &mut self,
        text: &str,
        tool: Option<(&str, &str)>,
        thinking: Option<&str>,
    ) -> (String, String) {
        let mut content = String::new();
        if let Some(t) = thinking {
            let _ = write!(
                content,
                "{{\"type\":\"thinking\",\"thinking\":\"{t}\",\"thinkingSignature\":\"sig-{}\"}},",
                text.len()
            );
        }
        let _ = write!(content, "{{\"type\":\"text\",\"text\":\"{text}\"}}");
        if let Some((id, path)) = tool {
            let _ = write!(
                content,
                ",{{\"type\":\"toolCall\",\"id\":\"{id}\",\"name\":\"read\",\"arguments\":{{\"path\":\"{path}\"}}}}"
            );
        }
        let input = 1200 + text.len();
        let output = 40 + text.len().div_ceil(4);
        let (ci, co) = (input as f64 * 3e-6, output as f64 * 15e-6);
        let stop = if tool.is_some() { "toolUse" } else { "stop" };
        let ts = self.now();
        self.message(format!(
            "{{\"role\":\"assistant\",\"content\":[{content}],\"api\":\"anthropic-messages\",\
             \"provider\":\"anthropic\",\"model\":\"claude-sonnet-4-5\",\"usage\":{{\"input\":{input},\
             \"output\":{output},\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":{},\"cost\":\
             {{\"input\":{ci},\"output\":{co},\"cacheRead\":0,\"cacheWrite\":0,\"total\":{}}}}},\
             \"stopReason\":\"{stop}\",\"timestamp\":{ts}}}",
            input + output,
            ci + co
        ))
    }

    fn tool_result(&mut self, call: &str, text: &str) -> (String, String) {
        let ts = self.now();
        self.message(format!(
            "{{\"role\":\"toolResult\",\"toolCallId\":\"{call}\",\"toolName\":\"read\",\
             \"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"isError\":false,\"timestamp\":{ts}}}"
        ))
    }

    /// A state event, laid out as Pi's `appendCustomEntry` writes it.
    pub fn custom(&mut self, plugin: &str, data: &str) -> (String, String) {
        self.now();
        let (head, id) = self.head();
        (
            format!(
                "{{\"type\":\"custom\",\"customType\":\"session-state/{plugin}\",\"data\":{data},{head}}}\n"
            ),
            id,
        )
    }

    /// The next step: zero lines (a fork: only the leaf moves), one or two.
    fn step(&mut self, remaining: usize, out: &mut Vec<(String, String)>) {
        let x = self.rng.unit();
        let len = self.ids.len();
        if x < 0.02 && len > 10 {
            let back = self.rng.below(len.min(500));
            self.leaf = Some(self.ids[len - 1 - back]);
        } else if x < 0.12 {
            let plugin = ["alpha", "beta", "bench"][self.rng.below(3)];
            let data = if self.rng.chance(0.8) {
                let scope = if self.rng.chance(0.8) {
                    "branch"
                } else {
                    "session"
                };
                let mut note = String::new();
                self.prose(&mut note, 60);
                format!(
                    "{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"set\",\"value\":{{\"step\":{len},\"note\":\"{note}\"}}}}"
                )
            } else {
                format!(
                    "{{\"v\":1,\"scope\":\"branch\",\"op\":\"patch\",\"patch\":{{\"step\":{len}}}}}"
                )
            };
            out.push(self.custom(plugin, &data));
        } else if x < 0.35 {
            let n = 80 + self.rng.below(400);
            let t = self.text(n);
            out.push(self.user(&t));
        } else if x < 0.7 || remaining < 3 {
            let n = 2000 + self.rng.below(4000);
            let t = self.text(n);
            let n = 300 + self.rng.below(1200);
            let th = self.text(n);
            out.push(self.assistant(&t, None, Some(&th)));
        } else {
            self.calls += 1;
            let call = format!("toolu_{}", self.calls);
            let path = format!("src/mod{}.rs", self.calls);
            let t = self.text(300);
            out.push(self.assistant(&t, Some((&call, &path)), None));
            let n = 1000 + self.rng.below(2000);
            let t = self.text(n);
            out.push(self.tool_result(&call, &t));
        }
    }

    /// The next `k` entry lines, continuing the session (for appends behind a reader's back).
    pub fn lines(&mut self, k: usize) -> Vec<String> {
        let mut out = Vec::new();
        while out.len() < k {
            self.step(k - out.len(), &mut out);
        }
        out.truncate(k);
        out.into_iter().map(|(l, _)| l).collect()
    }
}

/// Writes a session of `entries` entries to `path` and syncs it.
pub fn write_session(path: &Path, entries: usize, seed: u64) -> Generated {
    assert!(entries >= 2);
    let mut g = Generator::new(seed);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).expect("create session"));
    let mut bytes = 0u64;
    let header = Generator::header(&format!("0199b000-0000-7000-8000-{seed:012x}"));
    w.write_all(header.as_bytes()).expect("write");
    bytes += header.len() as u64;
    let mut written = 0;
    let mut buf = Vec::new();
    let mut last_id = String::new();
    while written < entries - 1 {
        buf.clear();
        g.step(entries - 1 - written, &mut buf);
        for (line, id) in buf.drain(..) {
            if written == entries - 1 {
                break;
            }
            w.write_all(line.as_bytes()).expect("write");
            bytes += line.len() as u64;
            written += 1;
            last_id = id;
        }
    }
    let step = g.ids.len();
    let (line, id) = g.custom(
        "bench",
        &format!(
            "{{\"v\":1,\"scope\":\"branch\",\"op\":\"set\",\"value\":{{\"step\":{step},\"note\":\"final\"}}}}"
        ),
    );
    w.write_all(line.as_bytes()).expect("write");
    bytes += line.len() as u64;
    let _ = last_id;
    last_id = id;
    w.into_inner()
        .expect("flush")
        .sync_all()
        .expect("sync session");
    Generated {
        entries,
        bytes,
        last_id,
    }
}

/// Writes a session of `entries` entries shaped for the worst case of a replay that walks
/// every tip's path: the mixture of [`write_session`] as one deep chain (with its own
/// occasional forks), and after every `every`-th chain entry one side entry as its child
/// (a branch-scope `session-state/side` event), which is a tip; the chain goes on from
/// the fork point. So one entry in `every + 1` is a tip, each as deep as the chain so far.
pub fn write_side_tip_session(path: &Path, entries: usize, seed: u64, every: usize) -> Generated {
    assert!(entries >= 2 && every >= 1);
    let mut g = Generator::new(seed);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).expect("create session"));
    let header = Generator::header(&format!("0199b000-0000-7000-8001-{seed:012x}"));
    w.write_all(header.as_bytes()).expect("write");
    let mut bytes = header.len() as u64;
    let (mut written, mut since_fork, mut tips) = (0, 0, 0u64);
    let mut buf = Vec::new();
    while written < entries - 1 {
        if since_fork >= every && g.leaf.is_some() {
            let at = g.leaf;
            let data = format!(
                "{{\"v\":1,\"scope\":\"branch\",\"op\":\"set\",\"value\":{{\"tip\":{tips}}}}}"
            );
            let (line, _) = g.custom("side", &data);
            w.write_all(line.as_bytes()).expect("write");
            bytes += line.len() as u64;
            written += 1;
            tips += 1;
            since_fork = 0;
            g.leaf = at;
            continue;
        }
        buf.clear();
        g.step(entries - 1 - written, &mut buf);
        for (line, _) in buf.drain(..) {
            if written == entries - 1 {
                break;
            }
            w.write_all(line.as_bytes()).expect("write");
            bytes += line.len() as u64;
            written += 1;
            since_fork += 1;
        }
    }
    let step = g.ids.len();
    let (line, last_id) = g.custom(
        "bench",
        &format!(
            "{{\"v\":1,\"scope\":\"branch\",\"op\":\"set\",\"value\":{{\"step\":{step},\"note\":\"final\"}}}}"
        ),
    );
    w.write_all(line.as_bytes()).expect("write");
    bytes += line.len() as u64;
    w.into_inner()
        .expect("flush")
        .sync_all()
        .expect("sync session");
    Generated {
        entries,
        bytes,
        last_id,
    }
}

/// A field of `/proc/self/status` in KiB (`VmHWM`: peak RSS; `VmRSS`: current RSS).
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
