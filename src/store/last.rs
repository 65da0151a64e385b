//! What a state's last decided event left, for a host that appends its events itself (the
//! Pi package, through `pi.appendEntry`): the next write on top of that event starts from
//! the value after it, without reading what the host appended since. The host says where
//! its leaf is and which entries it appended; [`LastEvent::value_at`] decides whether the
//! leaf still stands on the event.

use crate::log::io::{FileIdentity, Meta, open_status};
use crate::log::known::{End, Look};
use crate::state::envelope::Scope;
use crate::state::key::StateKey;
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One entry a host appended after a state's last event, as the host holds it in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended<'a> {
    /// The entry's id.
    pub id: &'a str,
    /// Its parent's id (`None`: a root).
    pub parent_id: Option<&'a str>,
    /// Its `customType` (`None`: not a `custom` entry).
    pub custom_type: Option<&'a str>,
}

/// The memo of one branch-scope state's last decided event in a session file: the file
/// (path, identity, length and change stamp, its last bytes), the value after the event, the entry it was decided on (its
/// parent) and, once the host has appended it, its entry id.
///
/// A write asks [`value_at`](LastEvent::value_at) first. When it answers, the write lands
/// on the value after the last event and reads nothing of what the host appended since
/// (the next read reads it); otherwise the write reads the value at the leaf as a read
/// does. Either way, the caller then records the event it decided
/// ([`decided`](LastEvent::decided)) and, once appended, its id
/// ([`appended`](LastEvent::appended)).
///
/// ```
/// use session_state::{Appended, LastEvent, Op, Scope, StateKey};
/// # let dir = tempfile::tempdir()?;
/// # let file = dir.path().join("s.jsonl");
/// # std::fs::write(&file, "{}\n")?;
/// let key = StateKey::<serde_json::Value>::new("todo", Scope::Branch)?;
/// let mut last = LastEvent::new(&key);
/// // A write decided `set 1` at entry "a" (the value read there); the host appended it as "b".
/// last.decided(Some(&file), Some("a"), Some(serde_json::json!(1)));
/// assert!(last.appended("b", Some("a")));
/// // The host appended a message "c" under "b": the next write lands on the value after "b".
/// let since = [Appended { id: "c", parent_id: Some("b"), custom_type: None }];
/// assert_eq!(last.value_at(&file, Some("c"), since), Some(Some(&serde_json::json!(1))));
/// // An event of this state in between: the memo cannot answer.
/// let since = [Appended { id: "c", parent_id: Some("b"), custom_type: Some(key.custom_type()) }];
/// assert_eq!(last.value_at(&file, Some("c"), since), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LastEvent {
    custom_type: String,
    scope: Scope,
    kept: Option<Kept>,
}

/// What the last decided event left.
#[derive(Debug, Clone)]
struct Kept {
    file: PathBuf,
    identity: FileIdentity,
    /// That file, open for reading: [`LastEvent::value_at`] looks at it with one `fstat`,
    /// and at the path only when it was renamed or linked since its last write.
    open: Option<Arc<File>>,
    /// Its length and change stamp, from one look.
    seen: Look,
    /// Its bytes before that length, read through `open` (`None`: they could not be): a
    /// file that grew must still hold them, or it was rewritten.
    end: Option<End>,
    value: Option<Value>,
    /// The entry the event was decided on: its parent once appended.
    parent: Option<String>,
    /// The event's entry id, once the host has appended it.
    entry: Option<String>,
    /// Whether the last `value_at` answered (it looked at the file: its identity, length,
    /// stamp and last bytes are now), so that recording the event decided on its answer needs no second look.
    checked: bool,
}

impl LastEvent {
    /// An empty memo for the state of `key`. A session-scope state's is always empty: its
    /// fold counts events anywhere in the file, also those the host did not append.
    pub fn new<T>(key: &StateKey<T>) -> LastEvent {
        LastEvent {
            custom_type: key.custom_type().to_owned(),
            scope: key.scope(),
            kept: None,
        }
    }

    /// The value where a write at the host's `leaf` in `file` lands, when that leaf stands
    /// on the last event with nothing of this state since: the value after the event.
    /// `since` is the host's entries from `leaf` up, newest first, as many as it appended
    /// after the event (more are ignored): each the parent of the one before, none of this
    /// state's `customType`, reaching the event's entry. The file must still be the one the
    /// event was decided in, not shorter: one `fstat` of the file the memo keeps open since
    /// then, and a `stat` of the path as well when that file was renamed or linked since its
    /// last write. It must not have been rewritten in place: at the length last seen, its
    /// change stamp must be the one seen then; grown, it must still hold the bytes before
    /// that length (one `pread`, with what follows them when that is at most 4 KiB).
    /// `None` when it cannot answer so: nothing kept, the event not appended yet, another
    /// file, a file rewritten, a leaf off the event's path, or an event of this state in
    /// between; the write then reads the value at its leaf.
    pub fn value_at<'e>(
        &mut self,
        file: impl AsRef<Path>,
        leaf: Option<&str>,
        since: impl IntoIterator<Item = Appended<'e>>,
    ) -> Option<Option<&Value>> {
        let kept = self.kept.as_mut()?;
        kept.checked = false;
        let entry = kept.entry.as_deref()?;
        let file = file.as_ref();
        if kept.file != file || !stands_on(entry, leaf, since, &self.custom_type) {
            return None;
        }
        let now = match kept.open.as_deref().map(open_status) {
            Some(Ok(Some(open))) if open.links == 0 => return None,
            Some(Ok(Some(open))) if open.written_last => Look {
                len: open.len,
                stamp: open.changed,
            },
            _ => {
                let meta = Meta::of_path(file).ok()?;
                if meta.identity() != kept.identity {
                    return None;
                }
                Look::of(&meta)
            }
        };
        if now.len < kept.seen.len || kept.seen.rewritten_at_same_length(now) {
            return None;
        }
        if now.len > kept.seen.len {
            let (open, end) = (kept.open.as_deref()?, kept.end.as_ref()?);
            kept.end = Some(end.still_then_end(open, kept.seen.len, now.len).ok()??);
        }
        kept.seen = now;
        kept.checked = true;
        Some(kept.value.as_ref())
    }

    /// Records the event a write decided at entry `at` (`None`: no entry yet) in `file`
    /// and `after`, the value after it (the core's fold step on the value it was decided
    /// on); its entry id is unknown until [`appended`](LastEvent::appended). Looks at the
    /// file's identity, length and change stamp, opens it for reading (the file kept open
    /// before is kept when it is still the one at the path) and reads its last bytes, unless
    /// the last `value_at` answered for this file (a write on top of the last event makes
    /// one `fstat` and one `pread`, in `value_at`). No
    /// `file` (entries only in the host's memory), a file that cannot be looked at, or a
    /// session-scope state: nothing is kept.
    pub fn decided(
        &mut self,
        file: Option<impl AsRef<Path>>,
        at: Option<&str>,
        after: Option<Value>,
    ) {
        let (Some(file), Scope::Branch) = (file, self.scope) else {
            self.kept = None;
            return;
        };
        let file = file.as_ref();
        let (seen, open, end) = match self.kept.take() {
            Some(k) if k.checked && k.file == file => {
                (Some((k.file, k.identity, k.seen)), k.open, k.end)
            }
            k => {
                let seen = Meta::of_path(file)
                    .ok()
                    .map(|m| (file.to_path_buf(), m.identity(), Look::of(&m)));
                // The file kept open, if it is still the one at the path; else opened (and
                // kept if it is the one looked at).
                let same = |id: FileIdentity| seen.as_ref().is_some_and(|s| s.1 == id);
                let open = match k.filter(|k| same(k.identity)).and_then(|k| k.open) {
                    Some(open) => Some(open),
                    None => {
                        open_at(file).filter(|f| Meta::of_file(f).is_ok_and(|m| same(m.identity())))
                    }
                };
                let end = match (&open, &seen) {
                    (Some(f), Some(s)) => End::read(f, s.2.len).ok(),
                    _ => None,
                };
                (seen, open, end)
            }
        };
        self.kept = seen.map(|(file, identity, seen)| Kept {
            open,
            file,
            identity,
            seen,
            end,
            value: after,
            parent: at.map(str::to_owned),
            entry: None,
            checked: false,
        });
    }

    /// The host appended the decided event as `entry_id`, a child of `parent_id`. Kept
    /// (`true`) only when that is the entry it was decided on; otherwise forgotten.
    pub fn appended(&mut self, entry_id: &str, parent_id: Option<&str>) -> bool {
        match self.kept.as_mut() {
            Some(k) if k.entry.is_none() && k.parent.as_deref() == parent_id => {
                k.entry = Some(entry_id.to_owned());
                k.checked = false;
                true
            }
            _ => {
                self.kept = None;
                false
            }
        }
    }

    /// Forgets the last event (another session, or the host's view of it re-read).
    pub fn forget(&mut self) {
        self.kept = None;
    }
}

/// `file` opened for reading, for its `fstat`s and the reads of its last bytes (a regular
/// file only: a FIFO at the path is never opened; without touching its access time where
/// the system allows).
fn open_at(file: &Path) -> Option<Arc<File>> {
    crate::log::reader::open_regular_for_looks(file)
        .ok()
        .map(Arc::new)
}

/// Whether `leaf` is the entry `event` or a descendant of it with none of `custom_type`
/// in between, as the chain `since` (newest first, from `leaf` up) shows.
fn stands_on<'e>(
    event: &str,
    leaf: Option<&str>,
    since: impl IntoIterator<Item = Appended<'e>>,
    custom_type: &str,
) -> bool {
    let mut at = leaf;
    for e in since {
        if at == Some(event) {
            return true;
        }
        if at != Some(e.id) || e.custom_type == Some(custom_type) {
            return false;
        }
        at = e.parent_id;
    }
    at == Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CT: &str = "session-state/todo";

    fn msg<'a>(id: &'a str, parent: &'a str) -> Appended<'a> {
        Appended {
            id,
            parent_id: Some(parent),
            custom_type: None,
        }
    }

    /// A memo whose event `b` (decided on `a`, value 1) was appended in a file of 10 bytes.
    fn kept(dir: &Path, scope: Scope) -> (LastEvent, PathBuf) {
        let file = dir.join("s.jsonl");
        std::fs::write(&file, "0123456789").expect("write the file");
        let key = StateKey::<Value>::new("todo", scope).expect("key");
        let mut last = LastEvent::new(&key);
        last.decided(Some(&file), Some("a"), Some(json!(1)));
        assert_eq!(last.appended("b", Some("a")), scope == Scope::Branch);
        (last, file)
    }

    #[test]
    fn a_leaf_on_the_event_or_below_it_lands_on_the_value_after_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        assert_eq!(last.value_at(&file, Some("b"), []), Some(Some(&json!(1))));
        let since = [msg("d", "c"), msg("c", "b")];
        assert_eq!(
            last.value_at(&file, Some("d"), since),
            Some(Some(&json!(1)))
        );
        // An entry appended off the leaf's path is not on the walk: still on the event.
        let since = [msg("d", "b"), msg("x", "b")];
        assert_eq!(
            last.value_at(&file, Some("d"), since),
            Some(Some(&json!(1)))
        );
    }

    #[test]
    fn an_entry_of_the_same_custom_type_since_makes_it_read() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        let other = Appended {
            id: "c",
            parent_id: Some("b"),
            custom_type: Some(CT),
        };
        assert_eq!(
            last.value_at(&file, Some("d"), [msg("d", "c"), other]),
            None
        );
        // Another plugin's event is just an entry.
        let alpha = Appended {
            custom_type: Some("session-state/alpha"),
            ..other
        };
        assert!(
            last.value_at(&file, Some("d"), [msg("d", "c"), alpha])
                .is_some()
        );
    }

    #[test]
    fn a_leaf_off_the_events_path_makes_it_read() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        // The leaf moved back to the entry the event was decided on.
        assert_eq!(last.value_at(&file, Some("a"), []), None);
        // A sibling of the event.
        assert_eq!(last.value_at(&file, Some("x"), [msg("x", "a")]), None);
        // Fewer entries than the path holds: the event is not reached.
        assert_eq!(last.value_at(&file, Some("d"), [msg("d", "c")]), None);
        // Entries that are not a chain from the leaf.
        assert_eq!(last.value_at(&file, Some("d"), [msg("c", "b")]), None);
        assert_eq!(last.value_at(&file, None, [msg("c", "b")]), None);
    }

    #[test]
    fn a_file_replaced_shorter_or_other_makes_it_read() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        let other = dir.path().join("t.jsonl");
        std::fs::write(&other, "0123456789").expect("write");
        assert_eq!(last.value_at(&other, Some("b"), []), None, "another path");
        std::fs::write(&file, "0123").expect("truncate in place");
        assert_eq!(last.value_at(&file, Some("b"), []), None, "shorter");
        std::fs::write(&file, "0123456789ab").expect("grow in place");
        assert!(last.value_at(&file, Some("b"), []).is_some(), "grown");
        // Moved away, another file at the path: the kept file's change time moved, not its
        // modification time (set back here, as a rename after a clock tick leaves them).
        let moved = dir.path().join("moved.jsonl");
        std::fs::rename(&file, &moved).expect("move away");
        std::fs::File::options()
            .write(true)
            .open(&moved)
            .and_then(|f| f.set_modified(std::time::UNIX_EPOCH))
            .expect("set the modification time");
        std::fs::write(&file, "0123456789abcdef").expect("another file at the path");
        assert_eq!(last.value_at(&file, Some("b"), []), None, "moved away");
        std::fs::rename(&other, &file).expect("replace");
        std::fs::write(&file, "0123456789abcdef").expect("grow the new file");
        assert_eq!(last.value_at(&file, Some("b"), []), None, "replaced");
        std::fs::remove_file(&file).expect("remove");
        assert_eq!(last.value_at(&file, Some("b"), []), None, "gone");
    }

    /// Rewrites `file` in place with `bytes`, its modification time a millisecond later
    /// than it was (a rewrite within one clock tick of the last write can leave it equal).
    fn rewrite_in_place(file: &Path, bytes: &str) {
        let before = std::fs::metadata(file)
            .and_then(|m| m.modified())
            .expect("modification time");
        std::fs::write(file, bytes).expect("rewrite");
        std::fs::File::options()
            .write(true)
            .open(file)
            .and_then(|f| f.set_modified(before + std::time::Duration::from_millis(1)))
            .expect("set the modification time");
    }

    #[test]
    fn a_file_rewritten_in_place_makes_it_read_and_appends_do_not() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        let append = |bytes: &str| {
            use std::io::Write;
            std::fs::File::options()
                .append(true)
                .open(&file)
                .and_then(|mut f| f.write_all(bytes.as_bytes()))
                .expect("append");
        };
        // The host appends (one line, then more than one read's worth): still on the event.
        append("{\"n\":1}\n");
        assert!(last.value_at(&file, Some("b"), []).is_some(), "appended");
        assert!(last.value_at(&file, Some("b"), []).is_some(), "unchanged");
        append(&format!("{}\n", "x".repeat(10_000)));
        assert!(
            last.value_at(&file, Some("b"), []).is_some(),
            "a long append"
        );
        // Rewritten at the same length: the value is read, never answered from the memo.
        let now = std::fs::read_to_string(&file).expect("read");
        rewrite_in_place(&file, &now.replacen("{\"n\":1}", "{\"n\":3}", 1));
        assert_eq!(last.value_at(&file, Some("b"), []), None, "same length");
        // Rewritten longer, the bytes before the length last seen moved: read too.
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        std::fs::write(&file, "0123456789ab").expect("grow in place");
        assert!(last.value_at(&file, Some("b"), []).is_some(), "grown");
        std::fs::write(&file, "01234567X89ab").expect("rewrite longer");
        assert_eq!(last.value_at(&file, Some("b"), []), None, "longer");
        // Recorded afresh on the file as it is: answers again.
        last.decided(Some(&file), Some("b"), Some(json!(2)));
        assert!(last.appended("c", Some("b")));
        assert_eq!(last.value_at(&file, Some("c"), []), Some(Some(&json!(2))));
    }

    #[test]
    fn a_decided_event_answers_only_once_appended_where_it_was_decided() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        assert!(last.value_at(&file, Some("b"), []).is_some());
        last.decided(Some(&file), Some("b"), Some(json!(2)));
        assert_eq!(
            last.value_at(&file, Some("b"), []),
            None,
            "not appended yet"
        );
        assert!(last.appended("c", Some("b")));
        assert_eq!(last.value_at(&file, Some("c"), []), Some(Some(&json!(2))));
        // Appended elsewhere than it was decided: forgotten.
        last.decided(Some(&file), Some("c"), None);
        assert!(!last.appended("d", Some("b")));
        assert_eq!(last.value_at(&file, Some("d"), []), None);
        assert!(!last.appended("d", Some("c")), "nothing kept to append");
        // Decided with no file: nothing kept.
        last.decided(None::<&Path>, None, Some(json!(3)));
        assert!(!last.appended("e", None));
    }

    #[test]
    fn forget_and_session_scope_keep_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        last.forget();
        assert_eq!(last.value_at(&file, Some("b"), []), None);
        let (mut session, file) = kept(dir.path(), Scope::Session);
        assert_eq!(session.value_at(&file, Some("b"), []), None);
    }

    /// The memo's looks at the file (its last bytes read before each write) leave the
    /// access time alone on Linux: under `relatime` a plain read after an append would
    /// update it, an inode update in the journal before the write's `fdatasync`.
    #[cfg(target_os = "linux")]
    #[test]
    fn looks_at_the_file_leave_its_access_time_alone() {
        use std::io::Write;
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().expect("dir");
        let (mut last, file) = kept(dir.path(), Scope::Branch);
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let set_old = || {
            let f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .expect("open");
            f.set_times(std::fs::FileTimes::new().set_accessed(old))
                .expect("set the access time");
        };
        let atime = || {
            std::fs::metadata(&file)
                .expect("stat")
                .accessed()
                .expect("atime")
        };
        // Appended (the modification time is now, after the access time), then looked at.
        set_old();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .expect("open");
        f.write_all(b"{\"m\":1}\n").expect("append");
        set_old();
        assert_eq!(last.value_at(&file, Some("b"), []), Some(Some(&json!(1))));
        assert_eq!(
            atime(),
            old,
            "the look read the file's bytes and moved its access time"
        );
        // A plain read of the same file does move it (the mount updates access times).
        let _ = std::fs::read(&file).expect("read");
        assert_ne!(
            atime(),
            old,
            "this mount never updates access times: the test shows nothing"
        );
    }
}
