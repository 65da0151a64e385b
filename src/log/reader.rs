//! Line splitting and the strict/salvage reading rules of docs/spec.md §2.
//!
//! The reader streams the file through a fixed buffer: memory does not grow with the
//! file, only with the longest line. Each complete line (terminated by `\n`) is
//! classified once; bytes after the last `\n` are the tail, invisible to readers.

use super::entry::{Header, ParentKey, RawEntry, raw_str};
use crate::error::{InvalidLog, IoContext, Location, OpenError, ReadFailure};
use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = OpenError> = std::result::Result<T, E>;

const READ_BUF: usize = 1 << 20;
/// The buffer starts small, so reading a short tail (a catch-up after one append) does not
/// zero a whole megabyte; it doubles up to [`READ_BUF`] while reads fill it.
const FIRST_READ_BUF: usize = 16 << 10;

/// How strictly to read a session file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// docs/spec.md §2's strict rules: corruption, bad structure, duplicate ids and dangling
    /// parents are errors. Torn records and a torn tail are warnings.
    #[default]
    Strict,
    /// Read what Pi would read: skip and report each bad line; a dangling parent makes
    /// its entry a root.
    Salvage,
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Readable; nothing is lost that was ever acknowledged.
    Warning,
    /// A strict read refuses the file; salvage skipped or repaired this in memory.
    Error,
}

/// What a finding is about. Serialized as its kebab-case name ([`FindingKind::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// Bytes after the last newline: an append in progress or torn by a crash.
    TornTail,
    /// A truncated JSON object terminated by a newline (Pi 1.x closes torn tails so).
    TornRecord,
    /// A final complete line that does not parse: treated as torn.
    UnparsableFinalLine,
    /// An empty or whitespace-only line.
    BlankLine,
    /// A later `"type":"session"` line; Pi ignores these, so do we.
    ExtraHeader,
    /// A UTF-8 byte order mark before the header.
    ByteOrderMark,
    /// A complete line that does not parse, followed by valid lines.
    Corrupt,
    /// Valid JSON that is not a valid entry.
    InvalidEntry,
    /// A second entry with an id already used.
    DuplicateId,
    /// A `parentId` naming no earlier entry (salvage makes the entry a root).
    DanglingParent,
    /// An entry that is its own parent (salvage makes it a root).
    Cycle,
    /// The header line is missing or invalid (salvage looks for the first header).
    InvalidHeader,
    /// An entry line that gives a member (`id`, `type`, `parentId`, `customType`, `data`,
    /// `message`) more than once: read as Pi's `JSON.parse` reads it, the last occurrence.
    RepeatedMember,
}

impl FindingKind {
    /// The kebab-case name (`torn-tail`, `duplicate-id`...), as `verify` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::TornTail => "torn-tail",
            FindingKind::TornRecord => "torn-record",
            FindingKind::UnparsableFinalLine => "unparsable-final-line",
            FindingKind::BlankLine => "blank-line",
            FindingKind::ExtraHeader => "extra-header",
            FindingKind::ByteOrderMark => "byte-order-mark",
            FindingKind::Corrupt => "corrupt",
            FindingKind::InvalidEntry => "invalid-entry",
            FindingKind::DuplicateId => "duplicate-id",
            FindingKind::DanglingParent => "dangling-parent",
            FindingKind::Cycle => "cycle",
            FindingKind::InvalidHeader => "invalid-header",
            FindingKind::RepeatedMember => "repeated-member",
        }
    }
}

impl serde::Serialize for FindingKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One observation about a session file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Warning or error.
    pub severity: Severity,
    /// What kind.
    pub kind: FindingKind,
    /// Where the line starts.
    pub at: Location,
    /// The entry id, when known.
    pub entry_id: Option<String>,
    /// A human-readable explanation.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{sev}: {}", self.at)?;
        if let Some(id) = &self.entry_id {
            write!(f, ", entry '{id}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The class of one complete line.
pub(crate) enum LineClass<'a> {
    Blank,
    Entry(RawEntry<'a>),
    /// Truncated JSON: the parser reached the end of the line inside the value.
    Torn(String),
    /// A syntax error, invalid UTF-8 or a NUL: corruption when valid lines follow.
    Bad(String),
    /// Valid JSON, not an entry.
    Invalid(String),
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

pub(crate) fn classify(line: &[u8]) -> LineClass<'_> {
    if is_blank(line) {
        return LineClass::Blank;
    }
    if let Some(first) = memchr::memchr(0, line)
        && line[first..].iter().all(|&b| b == 0)
    {
        // A run of zeros to the end of the line: the block a power loss leaves behind,
        // after nothing or after the start of a record (docs/spec.md §2). Never valid JSON.
        return LineClass::Torn(format!(
            "{} NUL bytes from byte {first} (a zero-filled block left by a crash)",
            line.len() - first
        ));
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return match e.error_len() {
                // The line ends inside a multi-byte character: cut mid-write.
                None => LineClass::Torn(format!(
                    "ends inside a UTF-8 character at byte {}",
                    e.valid_up_to()
                )),
                Some(_) => LineClass::Bad(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
            };
        }
    };
    match serde_json::from_str::<RawEntry<'_>>(text) {
        Ok(e) => LineClass::Entry(e),
        Err(e) => match e.classify() {
            serde_json::error::Category::Eof => LineClass::Torn(e.to_string()),
            serde_json::error::Category::Syntax | serde_json::error::Category::Io => {
                LineClass::Bad(e.to_string())
            }
            serde_json::error::Category::Data => {
                // Valid JSON of the wrong shape, unless it is not valid JSON at all:
                // serde reports type errors before it has seen the whole line.
                match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                    Ok(_) => LineClass::Invalid(e.to_string()),
                    Err(e2) if e2.classify() == serde_json::error::Category::Eof => {
                        LineClass::Torn(e2.to_string())
                    }
                    Err(e2) => LineClass::Bad(e2.to_string()),
                }
            }
        },
    }
}

/// The longest first line a session file may have: Pi 1.x's own header scan limit
/// (`MAX_SESSION_HEADER_SCAN_BYTES`, 1 MiB). A longer line 1 is refused before more of it
/// is buffered, so a huge or endless file (a link to `/dev/zero`) cannot grow memory.
pub const MAX_HEADER_LINE: usize = 1 << 20;

/// The error for a line 1 longer than `limit` bytes (the header's limit: a longer line is
/// never read whole).
pub(crate) fn too_long(path: &Path, limit: usize) -> InvalidLog {
    let size = match limit {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    };
    InvalidLog::InvalidHeader {
        path: path.to_path_buf(),
        detail: format!(
            "line 1 is longer than {size} ({limit} bytes, the header size limit) without a \
             newline"
        ),
    }
}

/// Opens a session file for reading, refusing anything but a regular file before it is
/// opened (opening a FIFO would block) and again on the opened handle (the path may
/// have been swapped in between). Follows symlinks.
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File> {
    open_regular_with(path, false)
}

/// [`open_regular`] for a handle kept to look at the file's last bytes before each write
/// (the Pi package's memo of a state's last event): on Linux with `O_NOATIME` when the
/// kernel allows it (the file is the caller's own), else as [`open_regular`] opens. A read
/// through it leaves the access time alone. Under `relatime` the first read after each
/// append would otherwise update it, an inode update in the journal just before the
/// write's own `fdatasync` (`docs/performance.md`, "The Pi package").
pub(crate) fn open_regular_for_looks(path: &Path) -> Result<std::fs::File> {
    open_regular_with(path, true)
}

fn open_regular_with(path: &Path, no_atime: bool) -> Result<std::fs::File> {
    let check = |meta: &std::fs::Metadata| -> Result<()> {
        if meta.is_file() {
            return Ok(());
        }
        Err(OpenError::NotARegularFile {
            path: path.to_path_buf(),
            kind: file_kind(&meta.file_type()).into(),
        })
    };
    check(&std::fs::metadata(path).ctx("opening", path)?)?;
    let file = match no_atime_open(path, no_atime) {
        Some(file) => file,
        None => std::fs::File::open(path).ctx("opening", path)?,
    };
    check(&file.metadata().ctx("opening", path)?)?;
    Ok(file)
}

/// `path` opened for reading with `O_NOATIME` when `wanted`, on Linux; `None` when not
/// asked, elsewhere, or refused (`EPERM`: not the file's owner), and the caller opens it
/// plainly (the plain open reports any other failure).
#[cfg(target_os = "linux")]
fn no_atime_open(path: &Path, wanted: bool) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if !wanted {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOATIME)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn no_atime_open(_path: &Path, _wanted: bool) -> Option<std::fs::File> {
    None
}

/// A file type, in words.
pub(crate) fn file_kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// The directory that holds `path`: `.` for a bare relative name (whose `parent()` is
/// the empty path, which cannot be opened or synced).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Streams the complete lines of `src`, starting at `start`. Returns the number of
/// bytes after the last newline (the tail), which are not passed to `f`.
pub(crate) fn for_each_line<R: Read, E: ReadFailure>(
    src: R,
    path: &Path,
    start: Location,
    f: impl FnMut(&[u8], Location) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    for_each_line_limited(src, path, start, None, f)
}

/// [`for_each_line`] over bytes already in memory (a refresh's one `pread`): each complete
/// line, without its newline, with where it starts; returns how many bytes follow the last
/// newline. No buffer is allocated and nothing is copied.
pub(crate) fn for_each_line_in<E>(
    bytes: &[u8],
    start: Location,
    mut f: impl FnMut(&[u8], Location) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    let mut at = start;
    let mut line_start = 0usize;
    for end in memchr::memchr_iter(b'\n', bytes) {
        f(&bytes[line_start..end], at)?;
        at.offset += (end + 1 - line_start) as u64;
        at.line += 1;
        line_start = end + 1;
    }
    Ok((bytes.len() - line_start) as u64)
}

/// [`for_each_line`], refusing a first line (at offset 0) longer than `first_line_limit`
/// before buffering more of it.
pub(crate) fn for_each_line_limited<R: Read, E: ReadFailure>(
    mut src: R,
    path: &Path,
    start: Location,
    first_line_limit: Option<usize>,
    mut f: impl FnMut(&[u8], Location) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    let mut buf: Vec<u8> = vec![0; FIRST_READ_BUF];
    let mut filled = 0usize;
    let mut at = start;
    loop {
        if filled == buf.len() {
            // A line longer than the buffer: grow it.
            buf.resize(buf.len() * 2, 0);
        }
        let n = loop {
            match src.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).ctx("reading", path).map_err(E::from),
            }
        };
        if n == 0 {
            return Ok(filled as u64);
        }
        let full = filled + n == buf.len();
        let scan_from = filled;
        filled += n;
        let mut line_start = 0usize;
        let mut search = scan_from;
        while let Some(pos) = memchr::memchr(b'\n', &buf[search..filled]) {
            let end = search + pos;
            f(&buf[line_start..end], at)?;
            at.offset += (end + 1 - line_start) as u64;
            at.line += 1;
            line_start = end + 1;
            search = line_start;
        }
        buf.copy_within(line_start..filled, 0);
        filled -= line_start;
        if let Some(limit) = first_line_limit
            && at.offset == 0
            && filled > limit
        {
            return Err(too_long(path, limit).into());
        }
        if full && buf.len() < READ_BUF {
            // More to read: fewer, larger reads.
            buf.resize(buf.len() * 2, 0);
        }
    }
}

/// Scanning state that survives between reads of the same file (open, then tails).
#[derive(Debug, Clone)]
pub(crate) struct ScanState {
    /// Where the next line starts.
    pub next: Location,
    /// Complete lines that did not parse and have no valid line after them yet. If a
    /// valid line follows, they are corruption; at the end of the file they are torn.
    pub pending_bad: Vec<(Location, String)>,
    /// Header version (1, 2 or 3) as read.
    pub version: u32,
    /// Entries seen so far (for v1 id assignment).
    pub ordinal: u64,
}

/// A well-formed entry line handed to a sink.
pub(crate) struct ScannedEntry<'a, 'b> {
    pub raw: &'b RawEntry<'a>,
    pub id: Cow<'b, str>,
    /// `None` for a root.
    pub parent: Option<Cow<'b, str>>,
    pub at: Location,
    /// Line length including the newline.
    pub len: u64,
}

/// Receives what the scanner finds.
/// `E` is what the sink's own failures are (the reader's refusals convert into it).
pub(crate) trait EntrySink<E = OpenError> {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, state: &ScanState) -> std::result::Result<(), E>;
    fn finding(&mut self, f: Finding);
    /// Id for a version-1 entry (which has none): deterministic per session and ordinal.
    fn assign_id(&mut self, ordinal: u64) -> String;
    /// The id of the previous entry in file order (v1's linear chain).
    fn last_id(&self) -> Option<String>;
}

impl ScanState {
    pub(crate) fn after_header(header: &Header, header_len: u64) -> ScanState {
        ScanState {
            next: Location {
                line: 2,
                offset: header_len,
            },
            pending_bad: Vec::new(),
            version: header.version(),
            ordinal: 0,
        }
    }

    /// Steps over a line this crate wrote at `at` (`len` bytes with its newline) and hands
    /// to its sink itself, as [`ScanState::line`] steps over a well-formed entry. `false`
    /// (nothing changed) unless the scan stands where `at` says, with no line pending
    /// judgement and ids in the file (version 2 or later): then the line must be read.
    pub(crate) fn own_line(&mut self, at: Location, len: u64) -> bool {
        if self.next != at || !self.pending_bad.is_empty() || self.version < 2 {
            return false;
        }
        self.next = Location {
            line: at.line + 1,
            offset: at.offset + len,
        };
        self.ordinal += 1;
        true
    }

    fn flush_pending<E: ReadFailure>(
        &mut self,
        path: &Path,
        mode: ReadMode,
        sink: &mut dyn EntrySink<E>,
    ) -> std::result::Result<(), E> {
        if self.pending_bad.is_empty() {
            return Ok(());
        }
        if mode == ReadMode::Strict {
            let (at, detail) = self.pending_bad[0].clone();
            return Err(InvalidLog::Corrupt {
                path: path.to_path_buf(),
                at,
                detail,
            }
            .into());
        }
        for (at, detail) in self.pending_bad.drain(..) {
            sink.finding(Finding {
                severity: Severity::Error,
                kind: FindingKind::Corrupt,
                at,
                entry_id: None,
                message: format!("skipped corrupt line: {detail}"),
            });
        }
        Ok(())
    }

    /// Handles one complete line (not the header).
    pub(crate) fn line<E: ReadFailure>(
        &mut self,
        path: &Path,
        mode: ReadMode,
        bytes: &[u8],
        at: Location,
        sink: &mut dyn EntrySink<E>,
    ) -> std::result::Result<(), E> {
        let len = bytes.len() as u64 + 1;
        self.next = Location {
            line: at.line + 1,
            offset: at.offset + len,
        };
        match classify(bytes) {
            LineClass::Blank => {
                sink.finding(Finding {
                    severity: Severity::Warning,
                    kind: FindingKind::BlankLine,
                    at,
                    entry_id: None,
                    message: "blank line skipped".into(),
                });
                Ok(())
            }
            LineClass::Torn(detail) => {
                sink.finding(Finding {
                    severity: Severity::Warning,
                    kind: FindingKind::TornRecord,
                    at,
                    entry_id: None,
                    message: format!("torn record skipped (truncated JSON: {detail})"),
                });
                Ok(())
            }
            LineClass::Bad(detail) => {
                self.pending_bad.push((at, detail));
                Ok(())
            }
            LineClass::Invalid(detail) => {
                self.flush_pending(path, mode, sink)?;
                if mode == ReadMode::Strict {
                    return Err(InvalidLog::InvalidEntry {
                        path: path.to_path_buf(),
                        at,
                        id: None,
                        detail,
                    }
                    .into());
                }
                sink.finding(Finding {
                    severity: Severity::Error,
                    kind: FindingKind::InvalidEntry,
                    at,
                    entry_id: None,
                    message: format!("skipped: not an entry: {detail}"),
                });
                Ok(())
            }
            LineClass::Entry(raw) => {
                self.flush_pending(path, mode, sink)?;
                self.entry(path, mode, &raw, at, len, sink)
            }
        }
    }

    fn entry<E: ReadFailure>(
        &mut self,
        path: &Path,
        mode: ReadMode,
        raw: &RawEntry<'_>,
        at: Location,
        len: u64,
        sink: &mut dyn EntrySink<E>,
    ) -> std::result::Result<(), E> {
        if raw.ty.0 == "session" {
            sink.finding(Finding {
                severity: Severity::Warning,
                kind: FindingKind::ExtraHeader,
                at,
                entry_id: None,
                message: "a second session header; ignored, as Pi ignores it".into(),
            });
            return Ok(());
        }
        let invalid = |sink: &mut dyn EntrySink<E>, id: Option<String>, detail: String| {
            if mode == ReadMode::Strict {
                return Err(InvalidLog::InvalidEntry {
                    path: path.to_path_buf(),
                    at,
                    id,
                    detail,
                }
                .into());
            }
            sink.finding(Finding {
                severity: Severity::Error,
                kind: FindingKind::InvalidEntry,
                at,
                entry_id: id,
                message: format!("skipped: {detail}"),
            });
            Ok(())
        };
        let (id, parent): (Cow<'_, str>, Option<Cow<'_, str>>) = if self.version < 2 {
            // Version 1: no ids. Pi assigns fresh ids in file order, chained linearly.
            let parent = sink.last_id().map(Cow::Owned);
            (Cow::Owned(sink.assign_id(self.ordinal)), parent)
        } else {
            let id = match raw.id.and_then(raw_str) {
                Some(id) if !id.is_empty() => id,
                Some(_) => return invalid(sink, None, "`id` is empty".into()),
                None => return invalid(sink, None, "`id` is missing or not a string".into()),
            };
            let parent = match raw.parent_id {
                // Pi writes `parentId` on every entry of a v2/v3 file: a missing key is
                // damage. Strict refuses it; salvage reads a root, as Pi does.
                ParentKey::Missing => {
                    if mode == ReadMode::Strict {
                        return invalid(
                            sink,
                            Some(id.into_owned()),
                            "`parentId` is missing".into(),
                        );
                    }
                    sink.finding(Finding {
                        severity: Severity::Error,
                        kind: FindingKind::DanglingParent,
                        at,
                        entry_id: Some(id.to_string()),
                        message: "`parentId` is missing; read as a root".into(),
                    });
                    None
                }
                ParentKey::Null => None,
                ParentKey::Given(p) => match raw_str(p) {
                    Some(p) => Some(p),
                    None => {
                        return invalid(
                            sink,
                            Some(id.into_owned()),
                            format!("`parentId` is {}, not a string or null", p.get()),
                        );
                    }
                },
            };
            (id, parent)
        };
        if let Some(member) = raw.repeated {
            sink.finding(Finding {
                severity: Severity::Warning,
                kind: FindingKind::RepeatedMember,
                at,
                entry_id: Some(id.to_string()),
                message: format!(
                    "the member `{member}` is given more than once; read as Pi reads it \
                     (JSON.parse keeps the last occurrence)"
                ),
            });
        }
        self.ordinal += 1;
        sink.entry(
            ScannedEntry {
                raw,
                id,
                parent,
                at,
                len,
            },
            self,
        )
    }

    /// Findings for the lines still pending at the end of what was read.
    pub(crate) fn trailing_findings(&self) -> Vec<Finding> {
        self.pending_bad
            .iter()
            .map(|(at, detail)| Finding {
                severity: Severity::Warning,
                kind: FindingKind::UnparsableFinalLine,
                at: *at,
                entry_id: None,
                message: format!("final complete line does not parse ({detail}); treated as torn"),
            })
            .collect()
    }
}

/// The finding for bytes after the last newline.
pub(crate) fn torn_tail_finding(at: Location, len: u64) -> Finding {
    Finding {
        severity: Severity::Warning,
        kind: FindingKind::TornTail,
        at,
        entry_id: None,
        message: format!(
            "{len} bytes after the last newline (an append in progress or torn by a crash); \
             invisible to readers"
        ),
    }
}
