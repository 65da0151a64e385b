//! Version 1 and 2 files, migrated to version 3 exactly as Pi migrates them.
//!
//! In memory, the scanner assigns v1 entries their ids as it reads. On disk, the file is
//! rewritten once, before the first append, through the log's one durable-create routine
//! ([`create_durably`]): a hidden temporary file in the same directory, `sync_data`,
//! rename over the original, fsync the directory.
//!
//! All or nothing, and never in disagreement with the reader:
//! - Lines are classified by the reader's own [`classify`], so the entries that get the
//!   ids of the in-memory migration are exactly the ones the reader counted.
//! - An ordinary entry line is never parsed into a `serde_json::Value` (which cannot hold a
//!   lone surrogate escape or nesting deeper than 128): `"id"` and `"parentId"` are inserted
//!   as text before its closing brace, where Pi's `entry.id = …; entry.parentId = …` puts
//!   them. Only the lines whose content changes are parsed: the header (`version`), a v1
//!   compaction (`firstKeptEntryIndex` → `firstKeptEntryId`), a v1 line that already has
//!   an `id` or `parentId` key, and a `hookMessage` message (role → `custom`). If such a
//!   line cannot be transformed, the migration is refused before the file is touched
//!   ([`AppendError::MigrationRefused`], naming the line).
//! - Lines that are not entries (torn records, corrupt lines, blank lines) and the torn
//!   tail are copied verbatim: nothing is lost.
//! - Before the rename, the temporary file is read back and checked: the same lines, each
//!   with the same content apart from the added or changed fields, every entry with the id
//!   and parent it was assigned (fresh unique ids and a linear chain for v1), the same tail;
//!   and the original still has the length and identity it had when the copy began.

use super::entry::{ParentKey, RawEntry, raw_str};
use super::hash::fnv1a;
use super::io::{FileSystem, Meta, Place, create_durably};
use super::reader::{self, LineClass, classify, for_each_line};
use crate::error::{AppendError, IoContext, Location};
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = AppendError> = std::result::Result<T, E>;

/// Deterministic ids for v1 entries: the same file always migrates to the same ids, so a
/// reader and the later on-disk migration agree. Pi draws random ids; only the tree's
/// shape is specified.
pub(crate) fn v1_id(session_id: &str, ordinal: u64, attempt: u32) -> String {
    let h = fnv1a(&[
        session_id.as_bytes(),
        &ordinal.to_le_bytes(),
        &attempt.to_le_bytes(),
    ]);
    format!("{:08x}", (h >> 32) as u32 ^ (h as u32))
}

/// What the migration does to one line of the original, and how to check the copy.
enum Plan {
    /// Copied byte for byte.
    Verbatim { hash: u64 },
    /// `suffix` inserted at byte `at` (before the closing brace).
    Inserted {
        hash: u64,
        at: usize,
        suffix: String,
    },
    /// Parsed and rewritten; `stripped` is the original without the fields that change.
    Transformed { stripped: Value },
}

/// The `id` and `parentId` an entry line must carry after the migration, as the reader
/// sees them: `None` for a missing id; a `parentId` that is `null` or not a string is
/// [`ParentKey::Null`].
type Link = (Option<String>, ParentKey<String>);

fn link_of(raw: &RawEntry<'_>) -> Link {
    let parent = match raw.parent_id {
        ParentKey::Missing => ParentKey::Missing,
        ParentKey::Null => ParentKey::Null,
        ParentKey::Given(p) => match raw_str(p) {
            Some(p) => ParentKey::Given(p.into_owned()),
            None => ParentKey::Null,
        },
    };
    (raw.id.and_then(raw_str).map(|c| c.into_owned()), parent)
}

/// The fields a migration may add, remove or change; the rest must be equal.
fn strip(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        for k in [
            "id",
            "parentId",
            "version",
            "firstKeptEntryIndex",
            "firstKeptEntryId",
        ] {
            obj.shift_remove(k);
        }
        if let Some(msg) = obj.get_mut("message").and_then(Value::as_object_mut)
            && msg.get("role").and_then(Value::as_str) == Some("hookMessage")
        {
            msg.insert("role".into(), "custom".into());
        }
    }
    v
}

/// Transforms one parsed line of a v1/v2 file the way Pi's `migrateToCurrentVersion` does.
/// `by_index` are the ids by Pi's `entries` index (header = 0).
fn transform(
    value: &mut Value,
    version: u32,
    link: Option<(&str, Option<&str>)>,
    by_index: &[Option<String>],
) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    if obj.get("type").and_then(Value::as_str) == Some("session") {
        obj.insert("version".into(), 3.into());
        return;
    }
    if version < 2 {
        if let Some((id, parent)) = link {
            obj.insert("id".into(), id.into());
            obj.insert(
                "parentId".into(),
                parent.map_or(Value::Null, |p| Value::String(p.into())),
            );
        }
        if obj.get("type").and_then(Value::as_str) == Some("compaction") {
            if let Some(idx) = obj.get("firstKeptEntryIndex").and_then(Value::as_u64) {
                if let Some(Some(target)) = by_index.get(idx as usize) {
                    obj.insert("firstKeptEntryId".into(), target.clone().into());
                }
                obj.shift_remove("firstKeptEntryIndex");
            } else if obj.get("firstKeptEntryIndex").is_some_and(Value::is_number) {
                obj.shift_remove("firstKeptEntryIndex");
            }
        }
    }
    if obj.get("type").and_then(Value::as_str) == Some("message")
        && let Some(msg) = obj.get_mut("message").and_then(Value::as_object_mut)
        && msg.get("role").and_then(Value::as_str) == Some("hookMessage")
    {
        msg.insert("role".into(), "custom".into());
    }
}

/// Whether an entry line's content (not just its links) changes in the migration.
fn must_parse(raw: &RawEntry<'_>, version: u32) -> bool {
    let hook = raw.ty.0 == "message"
        && raw
            .message
            .as_ref()
            .and_then(|m| m.role.as_ref())
            .is_some_and(|r| r.0 == "hookMessage");
    hook || (version < 2
        && (raw.ty.0 == "compaction" || raw.id.is_some() || raw.parent_id.is_present()))
}

/// Where the closing brace of an object line is (the line may end in spaces or `\r`).
fn closing_brace(bytes: &[u8]) -> Option<usize> {
    let end = bytes.iter().rposition(|b| !b" \t\r".contains(b))?;
    (bytes[end] == b'}').then_some(end)
}

fn json_str(s: &str) -> String {
    Value::String(s.into()).to_string()
}

/// Rewrites `path` as version 3. `assigned` maps each entry ordinal (file order) to its
/// id and parent id, as the in-memory migration assigned them.
pub(crate) fn migrate_file(
    fs: &dyn FileSystem,
    path: &Path,
    version: u32,
    assigned: &[(String, Option<String>)],
) -> Result<()> {
    let refuse = |detail: String| AppendError::MigrationRefused {
        path: path.to_path_buf(),
        at: Location { line: 1, offset: 0 },
        detail,
    };
    let start = Location { line: 1, offset: 0 };
    let file = reader::open_regular(path)?;
    let identity = Meta::of_file(&file).ok().map(|m| m.identity());

    // Pass 1: Pi's `entries` index (every line that parses as JSON, header = 0) to ids.
    let mut by_index: Vec<Option<String>> = Vec::new();
    let mut ordinal = 0usize;
    let mut length = 0u64;
    let tail = for_each_line::<_, AppendError>(&file, path, start, |bytes, at| {
        length = at.offset + bytes.len() as u64 + 1;
        if at.line == 1 {
            by_index.push(None);
            return Ok(());
        }
        match classify(bytes) {
            LineClass::Entry(raw) => {
                if raw.ty.0 == "session" {
                    by_index.push(None);
                } else {
                    by_index.push(assigned.get(ordinal).map(|a| a.0.clone()));
                    ordinal += 1;
                }
            }
            LineClass::Invalid(_) => by_index.push(None),
            _ => {}
        }
        Ok(())
    })?;
    let length = length + tail;
    drop(file);
    if version < 2 {
        if ordinal != assigned.len() {
            return Err(refuse(format!(
                "the file holds {ordinal} entries but {} were read into memory; reopen the \
                 session",
                assigned.len()
            )));
        }
        // Fresh unique ids, chained linearly (Pi's v1 migration).
        let mut seen = HashSet::new();
        for (k, (id, parent)) in assigned.iter().enumerate() {
            let want = k.checked_sub(1).map(|p| assigned[p].0.as_str());
            if !seen.insert(id.as_str()) || parent.as_deref() != want {
                return Err(refuse(format!(
                    "the ids assigned in memory are not a linear chain of unique ids \
                     (entry {k}, '{id}')"
                )));
            }
        }
    }

    // Pass 2: plan each line and write it to a temporary file, through the one
    // durable-create routine (sync, check, rename over the original, fsync the folder).
    let rewritten = create_durably(fs, path, "migrating", Place::Rename, |tmp| {
        let mut plans: Vec<Plan> = Vec::new();
        let mut links: Vec<Option<Link>> = Vec::new();
        let mut consumed = 0u64;
        let file = reader::open_regular(path)?;
        let mut ordinal = 0usize;
        let ctx = LineCtx {
            path,
            version,
            assigned,
            by_index: &by_index,
        };
        let tail = for_each_line::<_, AppendError>(&file, path, start, |bytes, at| {
            consumed = at.offset + bytes.len() as u64 + 1;
            let (plan, link, mut line) = ctx.plan(&mut ordinal, bytes, at)?;
            plans.push(plan);
            links.push(link);
            line.push(b'\n');
            tmp.write(&line)
        })?;
        if consumed + tail != length || (version < 2 && ordinal != assigned.len()) {
            return Err(AppendError::ChangedOnDisk {
                path: path.to_path_buf(),
                detail: format!(
                    "it changed while being migrated ({} bytes, {length} when first read); \
                     nothing was replaced",
                    consumed + tail
                ),
            });
        }
        let mut rest = Vec::new();
        if tail > 0 {
            // Copy the torn tail too: no byte of the original is dropped.
            use std::io::{Read, Seek, SeekFrom};
            let mut f = &file;
            f.seek(SeekFrom::Start(consumed)).ctx("reading", path)?;
            f.take(tail).read_to_end(&mut rest).ctx("reading", path)?;
            if rest.len() as u64 != tail {
                return Err(AppendError::ChangedOnDisk {
                    path: path.to_path_buf(),
                    detail: format!(
                        "it shrank while being migrated ({} of {tail} tail bytes left); \
                         nothing was replaced",
                        rest.len()
                    ),
                });
            }
            tmp.write(&rest)?;
        }
        drop(file);
        tmp.sync()?;
        check_copy(path, tmp.path(), &plans, &links, &rest)?;
        // The original must not have changed since it was read (Pi appends without a lock).
        let meta = Meta::of_path(path).ctx("checking", path)?;
        if meta.len() != consumed + tail || identity.is_some_and(|i| i != meta.identity()) {
            return Err(AppendError::ChangedOnDisk {
                path: path.to_path_buf(),
                detail: format!(
                    "it changed while being migrated ({} bytes, {} when read); nothing was \
                     replaced",
                    meta.len(),
                    consumed + tail
                ),
            });
        }
        Ok(())
    });
    rewritten.map_err(|failed| failed.error)
}

/// What [`LineCtx::plan`] needs to know about the whole file.
struct LineCtx<'a> {
    path: &'a Path,
    version: u32,
    assigned: &'a [(String, Option<String>)],
    by_index: &'a [Option<String>],
}

impl LineCtx<'_> {
    /// Decides what happens to one line of the original and returns the line to write.
    fn plan(
        &self,
        ordinal: &mut usize,
        bytes: &[u8],
        at: Location,
    ) -> Result<(Plan, Option<Link>, Vec<u8>)> {
        let refuse = |detail: String| AppendError::MigrationRefused {
            path: self.path.to_path_buf(),
            at,
            detail,
        };
        let parse = |what: &str| -> Result<Value> {
            let text = std::str::from_utf8(bytes).map_err(|e| refuse(e.to_string()))?;
            crate::json::from_str(text).map_err(|e| {
                refuse(format!(
                    "{what} must change, but the line cannot be rewritten: {e}"
                ))
            })
        };
        if at.line == 1 {
            let mut v = parse("the header's version")?;
            transform(&mut v, self.version, None, self.by_index);
            let out = crate::json::to_string_exact(&v).into_bytes();
            return Ok((Plan::Transformed { stripped: strip(v) }, None, out));
        }
        let raw = match classify(bytes) {
            LineClass::Entry(raw) if raw.ty.0 != "session" => raw,
            // Everything else is copied verbatim (a later header, torn, corrupt, blank).
            _ => {
                let hash = fnv1a(&[bytes]);
                return Ok((Plan::Verbatim { hash }, None, bytes.to_vec()));
            }
        };
        let v1 = self.version < 2;
        let (id, parent) = if v1 {
            self.assigned
                .get(*ordinal)
                .cloned()
                .ok_or_else(|| refuse("more entries than were read into memory".into()))?
        } else {
            (String::new(), None)
        };
        *ordinal += 1;
        let link: Link = if v1 {
            let parent = parent.clone().map_or(ParentKey::Null, ParentKey::Given);
            (Some(id.clone()), parent)
        } else {
            link_of(&raw)
        };
        if must_parse(&raw, self.version) {
            let what = if raw.ty.0 == "compaction" {
                "this compaction's firstKeptEntryIndex"
            } else if raw.ty.0 == "message" {
                "this message's role hookMessage"
            } else {
                "this version 1 entry's own id or parentId key"
            };
            let mut v = parse(what)?;
            let l = v1.then_some((id.as_str(), parent.as_deref()));
            transform(&mut v, self.version, l, self.by_index);
            let out = crate::json::to_string_exact(&v).into_bytes();
            return Ok((Plan::Transformed { stripped: strip(v) }, Some(link), out));
        }
        let hash = fnv1a(&[bytes]);
        if !v1 {
            return Ok((Plan::Verbatim { hash }, Some(link), bytes.to_vec()));
        }
        let brace = closing_brace(bytes)
            .ok_or_else(|| refuse("an entry line that does not end in `}`".into()))?;
        let parent = parent.as_deref().map_or("null".to_owned(), json_str);
        // Pi assigns `entry.id`, then `entry.parentId`: JSON.stringify puts them last.
        let suffix = format!(",\"id\":{},\"parentId\":{parent}", json_str(&id));
        let mut out = Vec::with_capacity(bytes.len() + suffix.len());
        out.extend_from_slice(&bytes[..brace]);
        out.extend_from_slice(suffix.as_bytes());
        out.extend_from_slice(&bytes[brace..]);
        let plan = Plan::Inserted {
            hash,
            at: brace,
            suffix,
        };
        Ok((plan, Some(link), out))
    }
}

/// Reads the migrated copy back and checks it against the plan, line by line.
fn check_copy(
    path: &Path,
    tmp: &Path,
    plans: &[Plan],
    links: &[Option<Link>],
    rest: &[u8],
) -> Result<()> {
    let mismatch = |at: Location, what: &str| AppendError::MigrationRefused {
        path: path.to_path_buf(),
        at,
        detail: format!(
            "the migrated copy does not match the original ({what}); nothing was replaced"
        ),
    };
    let file = reader::open_regular(tmp)?;
    let mut n = 0usize;
    let start = Location { line: 1, offset: 0 };
    let tail = for_each_line::<_, AppendError>(&file, tmp, start, |bytes, at| {
        let (Some(plan), Some(link)) = (plans.get(n), links.get(n)) else {
            return Err(mismatch(at, "more lines"));
        };
        n += 1;
        let same = match plan {
            Plan::Verbatim { hash } => fnv1a(&[bytes]) == *hash,
            Plan::Inserted { hash, at, suffix } => {
                let end = at + suffix.len();
                bytes.len() >= end
                    && &bytes[*at..end] == suffix.as_bytes()
                    && fnv1a(&[&bytes[..*at], &bytes[end..]]) == *hash
            }
            Plan::Transformed { stripped } => std::str::from_utf8(bytes)
                .ok()
                .and_then(|t| crate::json::from_str(t).ok())
                .is_some_and(|v| {
                    let version_ok = at.line != 1 || v.get("version") == Some(&Value::from(3));
                    version_ok && strip(v) == *stripped
                }),
        };
        if !same {
            return Err(mismatch(at, "content"));
        }
        if let Some(link) = link {
            let ok = match classify(bytes) {
                LineClass::Entry(raw) => link_of(&raw) == *link,
                _ => false,
            };
            if !ok {
                let id = link.0.as_deref().unwrap_or("?");
                return Err(mismatch(at, &format!("entry '{id}' lost its id or parent")));
            }
        }
        Ok(())
    })?;
    if n != plans.len() {
        return Err(mismatch(start, "fewer lines"));
    }
    if tail != rest.len() as u64 {
        return Err(mismatch(start, "the torn tail"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::v1_id;

    #[test]
    fn v1_ids_are_the_ids_earlier_versions_gave() {
        // A reader of an unmigrated v1 file and every migration since agree on these:
        // a change here renames the entries of every v1 session already migrated.
        assert_eq!(v1_id("s1", 0, 0), "9c86060b");
        assert_eq!(v1_id("s1", 1, 0), "ee055b1a");
        assert_eq!(v1_id("session-1", 7, 3), "469f105e");
        assert_eq!(
            v1_id("0195f0e0-7c1a-7000-8000-000000000000", 123_456, 1),
            "aa25818d"
        );
    }
}
