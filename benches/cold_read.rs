//! Cold read with a warm projection (docs/spec.md §10): the cost of a read in a new process on an
//! unchanged session file must not grow with the session (100k entries ≤ 1.5× 1k).
//!
//! ```text
//! cargo bench --bench cold_read
//! ```
//!
//! At run time it generates three Pi-like sessions in a temp dir (1k, 10k and 100k
//! entries, about 6.6 KB per entry as in sessions Pi writes: user messages, assistant
//! messages with thinking, tool results; a state event every 20 entries; a fork every
//! 1,000), then warms one projection database per session.
//!
//! - `cold_read/<n>`: the library's cold read: a fresh [`Store`] (a new connection: "a new
//!   process" minus process start) and one `SessionState::read_file` of a branch-scope
//!   state at the file's leaf, through the projection.
//! - `parts/open/<n>` and `parts/read_on_open_connection/<n>`: the two halves of a cold
//!   read, measured apart.
//! - `catch_up/<n>/<k>`: the same, after `k` entries were appended behind the
//!   projection's back. Before each iteration the file is cut back to its warm length and
//!   the database restored from a snapshot, so every iteration catches up exactly `k`
//!   entries.
//!
//! Results go to `docs/performance.md`.

use std::fs::{self, File, OpenOptions};
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::Value;
use session_state::{Scope, Store};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const CATCH_UP_SIZES: [usize; 2] = [1_000, 100_000];
const APPENDED: [usize; 3] = [1, 10, 100];
const PLUGIN: &str = "todo";

/// xorshift64*: deterministic and fast enough to generate 600 MB.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Writes Pi-format lines; entry `i` gets a distinct 8-hex id.
struct Generator {
    rng: Rng,
    prose: String,
    next: u32,
    /// Ids of recent entries, newest last (for forks).
    recent: Vec<String>,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        let mut rng = Rng(seed | 1);
        let words = [
            "the", "session", "log", "keeps", "every", "entry", "as", "one", "line", "and",
            "branches", "form", "a", "tree", "so", "state", "follows", "path", "from", "root",
            "to", "leaf", "while", "siblings", "never", "see", "writes", "of", "each", "other",
            "tool", "calls", "read", "files", "run", "commands", "return", "results", "model",
        ];
        let mut prose = String::with_capacity(1 << 17);
        while prose.len() < (1 << 17) {
            prose.push_str(words[rng.below(words.len())]);
            prose.push(if rng.below(12) == 0 { '.' } else { ' ' });
        }
        Generator {
            rng,
            prose,
            next: 0,
            recent: Vec::new(),
        }
    }

    fn text(&mut self, min: usize, max: usize) -> &str {
        let len = min + self.rng.below(max - min);
        let start = self.rng.below(self.prose.len() - len);
        &self.prose[start..start + len]
    }

    fn id(&mut self) -> String {
        // An odd multiplier is a bijection on u32: ids never repeat.
        let id = format!("{:08x}", self.next.wrapping_mul(0x9e37_79b1));
        self.next += 1;
        id
    }

    fn header(&self, session_id: &str) -> String {
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{session_id}\",\
             \"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/proj\"}}\n"
        )
    }

    /// The next entry's line. Every 20th entry is a state event, every 1,000th forks
    /// from an entry a few steps back.
    fn entry(&mut self) -> String {
        let i = self.next as usize;
        let id = self.id();
        let parent = if i > 0 && i.is_multiple_of(1000) && self.recent.len() > 10 {
            format!("\"{}\"", self.recent[self.recent.len() - 8])
        } else {
            self.recent
                .last()
                .map_or("null".to_owned(), |p| format!("\"{p}\""))
        };
        let ts = format!("2025-01-01T00:{:02}:{:02}.000Z", (i / 60) % 60, i % 60);
        let head = format!("\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"{ts}\"");
        let line = if i % 20 == 19 {
            let k = i / 20;
            if k % 4 == 3 {
                format!(
                    "{{\"type\":\"custom\",\"customType\":\"session-state/mode\",\
                     \"data\":{{\"v\":1,\"scope\":\"session\",\"op\":\"set\",\"value\":\"m{k}\"}},{head}}}\n"
                )
            } else {
                format!(
                    "{{\"type\":\"custom\",\"customType\":\"session-state/{PLUGIN}\",\
                     \"data\":{{\"v\":1,\"scope\":\"branch\",\"op\":\"set\",\
                     \"value\":{{\"items\":[\"step {k}\",\"review\",\"ship\"],\"done\":{k}}}}},{head}}}\n"
                )
            }
        } else {
            match i % 3 {
                0 => {
                    let text = self.text(400, 3_700).to_owned();
                    format!(
                        "{{\"type\":\"message\",{head},\"message\":{{\"role\":\"user\",\
                         \"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"timestamp\":{i}}}}}\n"
                    )
                }
                1 => {
                    let thinking = self.text(700, 4_400).to_owned();
                    let text = self.text(1_500, 13_200).to_owned();
                    format!(
                        "{{\"type\":\"message\",{head},\"message\":{{\"role\":\"assistant\",\
                         \"content\":[{{\"type\":\"thinking\",\"thinking\":\"{thinking}\",\
                         \"thinkingSignature\":\"sig\"}},{{\"type\":\"text\",\"text\":\"{text}\"}},\
                         {{\"type\":\"toolCall\",\"id\":\"call_{id}\",\"name\":\"read\",\
                         \"arguments\":{{\"path\":\"src/lib.rs\"}}}}],\"api\":\"anthropic-messages\",\
                         \"provider\":\"anthropic\",\"model\":\"claude-sonnet-4-5\",\"usage\":{{\"input\":\
                         1200,\"output\":400,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":1600,\
                         \"cost\":{{\"input\":0.0036,\"output\":0.006,\"cacheRead\":0,\"cacheWrite\":0,\
                         \"total\":0.0096}}}},\"stopReason\":\"toolUse\",\"timestamp\":{i}}}}}\n"
                    )
                }
                _ => {
                    let text = self.text(1_500, 14_000).to_owned();
                    format!(
                        "{{\"type\":\"message\",{head},\"message\":{{\"role\":\"toolResult\",\
                         \"toolCallId\":\"call_x\",\"toolName\":\"read\",\"content\":[{{\"type\":\
                         \"text\",\"text\":\"{text}\"}}],\"isError\":false,\"timestamp\":{i}}}}}\n"
                    )
                }
            }
        };
        self.recent.push(id);
        if self.recent.len() > 64 {
            self.recent.drain(..32);
        }
        line
    }
}

/// A generated session with a warm projection and a snapshot of its database.
struct Prepared {
    entries: usize,
    file: PathBuf,
    db: PathBuf,
    snapshot: PathBuf,
    warm_len: u64,
    /// Lines for the catch-up benchmarks, continuing the session.
    more: Vec<String>,
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = fs::remove_file(PathBuf::from(p));
    }
}

fn prepare(dir: &Path, entries: usize) -> Prepared {
    let file = dir.join(format!("session-{entries}.jsonl"));
    let db = dir.join(format!("states-{entries}.sqlite"));
    let mut g = Generator::new(entries as u64);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&file).expect("create session"));
    w.write_all(g.header(&format!("bench-{entries}")).as_bytes())
        .expect("write");
    for _ in 0..entries {
        w.write_all(g.entry().as_bytes()).expect("write");
    }
    w.into_inner()
        .expect("flush")
        .sync_all()
        .expect("sync session");
    let more = (0..*APPENDED.iter().max().expect("sizes"))
        .map(|_| g.entry())
        .collect();
    let warm_len = fs::metadata(&file).expect("stat").len();

    let started = std::time::Instant::now();
    let proj = open_store(&db);
    let c = proj.catch_up(&file).expect("warm the projection");
    assert_eq!(c.entries_added, entries as u64);
    let value = proj
        .read_value(&file, PLUGIN, Scope::Branch, None)
        .expect("read");
    assert!(value.is_some(), "the leaf has a {PLUGIN} value");
    drop(proj);
    eprintln!(
        "{entries} entries: {:.1} MB ({:.1} KB/entry), projection built in {:.2?} ({:.1} MB)",
        warm_len as f64 / 1e6,
        warm_len as f64 / entries as f64 / 1e3,
        started.elapsed(),
        fs::metadata(&db).expect("stat db").len() as f64 / 1e6
    );
    let snapshot = dir.join(format!("states-{entries}.snapshot"));
    fs::copy(&db, &snapshot).expect("snapshot the database");
    Prepared {
        entries,
        file,
        db,
        snapshot,
        warm_len,
        more,
    }
}

/// A store on `db`, its database opened now.
fn open_store(db: &Path) -> Store {
    let store = Store::at(db).expect("a store");
    store.connect().expect("open the database");
    store
}

/// The library's cold read: a new store, a typed key, one read of the file's leaf.
fn cold_read(p: &Prepared) -> Store {
    let store = Store::at(&p.db).expect("a store");
    let todo = store
        .state::<Value>(PLUGIN, Scope::Branch)
        .expect("a state key");
    black_box(todo.read(&p.file).expect("read"));
    store
}

/// Cuts the file back to its warm length, restores the warm database and appends `k`
/// entries behind its back.
fn reset_and_append(p: &Prepared, k: usize) {
    OpenOptions::new()
        .write(true)
        .open(&p.file)
        .expect("open")
        .set_len(p.warm_len)
        .expect("truncate");
    remove_db(&p.db);
    fs::copy(&p.snapshot, &p.db).expect("restore the database");
    // Write-back of the restored copy must not land inside the timed read.
    File::open(&p.db)
        .and_then(|f| f.sync_all())
        .expect("sync the database");
    let mut f = OpenOptions::new().append(true).open(&p.file).expect("open");
    f.write_all(p.more[..k].concat().as_bytes())
        .expect("append");
    f.sync_data().expect("sync the session");
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let prepared: Vec<Prepared> = SIZES.iter().map(|&n| prepare(dir.path(), n)).collect();

    let mut group = c.benchmark_group("cold_read");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for p in &prepared {
        // Unchanged file: nothing to catch up.
        let check = open_store(&p.db);
        assert_eq!(check.catch_up(&p.file).expect("catch up").bytes_read, 0);
        drop(check);
        group.bench_function(p.entries.to_string(), |b| {
            b.iter_batched(|| (), |()| cold_read(p), BatchSize::PerIteration)
        });
    }
    group.finish();

    // The parts of a cold read: opening the connection, and a read on an open one.
    let mut group = c.benchmark_group("parts");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    for p in &prepared {
        group.bench_function(format!("open/{}", p.entries), |b| {
            b.iter_batched(|| (), |()| open_store(&p.db), BatchSize::PerIteration)
        });
        let proj = open_store(&p.db);
        group.bench_function(format!("read_on_open_connection/{}", p.entries), |b| {
            b.iter(|| {
                proj.read_value(&p.file, PLUGIN, Scope::Branch, None)
                    .expect("read")
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("catch_up");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500));
    for p in prepared
        .iter()
        .filter(|p| CATCH_UP_SIZES.contains(&p.entries))
    {
        for k in APPENDED {
            reset_and_append(p, k);
            let check = open_store(&p.db);
            let c = check.catch_up(&p.file).expect("catch up");
            assert!(!c.rebuilt && c.entries_added == k as u64, "{c:?}");
            drop(check);
            group.bench_function(format!("{}/{k}", p.entries), |b| {
                b.iter_batched(
                    || reset_and_append(p, k),
                    |()| cold_read(p),
                    BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(cold, benches);
criterion_main!(cold);
