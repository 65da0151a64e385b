//! Version 1 and 2 files, migrated to version 3 exactly as Pi migrates them.
//!
//! In memory, the scanner assigns v1 entries their ids as it reads. On disk, the file is
//! rewritten once, before the first append: a temporary file in the same directory,
//! `sync_data`, rename over the original, fsync the directory. Every line is kept: lines
//! that do not parse are copied verbatim, so nothing is lost.

use super::io::FileSystem;
use super::reader::{LineClass, classify, for_each_line};
use crate::error::{Error, IoContext, Location, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Deterministic ids for v1 entries: the same file always migrates to the same ids, so a
/// reader and the later on-disk migration agree. Pi draws random ids; only the tree's
/// shape is specified.
pub(crate) fn v1_id(session_id: &str, ordinal: u64, attempt: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session_id
        .bytes()
        .chain(ordinal.to_le_bytes())
        .chain(attempt.to_le_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", (h >> 32) as u32 ^ (h as u32))
}

/// Transforms one parsed line of a v1/v2 file. `ids` holds the ids assigned to entries
/// in file order (v1 only); `parsed` are the ids by Pi's `entries` index (header = 0).
fn transform(
    value: &mut Value,
    version: u32,
    entry_id: Option<(&str, Option<&str>)>,
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
        if let Some((id, parent)) = entry_id {
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

/// Rewrites `path` as version 3. `assigned` maps each entry ordinal (file order) to its
/// id and parent id, as the in-memory migration assigned them.
pub(crate) fn migrate_file(
    fs: &dyn FileSystem,
    path: &Path,
    version: u32,
    assigned: &[(String, Option<String>)],
) -> Result<()> {
    // Pass 1: Pi's `entries` index (every line that parses as JSON, header = 0) to ids.
    let mut by_index: Vec<Option<String>> = Vec::new();
    let mut ordinal = 0usize;
    let start = Location { line: 1, offset: 0 };
    let file = std::fs::File::open(path).ctx("opening", path)?;
    for_each_line(file, path, start, |bytes, at| {
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

    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp: PathBuf = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        // A random suffix: a crashed migration's leftover never blocks a later one.
        name.push(format!(".migrating-{}", uuid::Uuid::new_v4().simple()));
        dir.join(name)
    };
    let result = (|| -> Result<()> {
        let mut out = fs.create_new(&tmp).ctx("creating", &tmp)?;
        let mut write_all = |bytes: &[u8]| -> Result<()> {
            let n = out.write(bytes).ctx("writing", &tmp)?;
            if n != bytes.len() {
                return Err(Error::Io {
                    action: "writing",
                    path: tmp.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("short write: {n} of {} bytes", bytes.len()),
                    ),
                });
            }
            Ok(())
        };
        let mut ordinal = 0usize;
        let file = std::fs::File::open(path).ctx("opening", path)?;
        let mut first = true;
        let tail = for_each_line(&file, path, start, |bytes, _at| {
            let is_header = std::mem::take(&mut first);
            let text = std::str::from_utf8(bytes).ok();
            let parsed: Option<Value> = text.and_then(|t| serde_json::from_str(t).ok());
            let out_line = match parsed {
                Some(mut v) => {
                    let is_entry = !is_header
                        && v.get("type")
                            .and_then(Value::as_str)
                            .is_some_and(|t| t != "session");
                    let ids = if is_entry {
                        let a = assigned.get(ordinal);
                        ordinal += 1;
                        a.map(|(id, parent)| (id.as_str(), parent.as_deref()))
                    } else {
                        None
                    };
                    transform(&mut v, version, ids, &by_index);
                    let mut s = v.to_string().into_bytes();
                    s.push(b'\n');
                    s
                }
                None => {
                    let mut s = bytes.to_vec();
                    s.push(b'\n');
                    s
                }
            };
            write_all(&out_line)
        })?;
        if tail > 0 {
            // Copy the torn tail too: no byte of the original is dropped.
            let len = std::fs::metadata(path).ctx("reading", path)?.len();
            use std::io::{Read, Seek, SeekFrom};
            let mut f = &file;
            f.seek(SeekFrom::Start(len - tail)).ctx("reading", path)?;
            let mut rest = Vec::new();
            f.take(tail).read_to_end(&mut rest).ctx("reading", path)?;
            write_all(&rest)?;
        }
        out.sync_data().ctx("syncing", &tmp)?;
        drop(out);
        // IMPORTANT: rename only after the new content is durable, then fsync the folder.
        fs.rename(&tmp, path)
            .ctx("renaming the migrated file to", path)?;
        fs.sync_dir(dir).ctx("syncing the directory", dir)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs.remove(&tmp);
    }
    result
}
