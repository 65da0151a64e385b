//! The advisory lock on the session file itself (`docs/lock.md`, "The one lock"): who
//! holds it, for the refusal of a writer that waited for it in vain.
//!
//! The lock row and SQLite's write lock live in one projection database, but two writers
//! of one session file may use two databases. So every append of this crate also holds
//! an exclusive `flock` on the session file, from its check of the file's length to the
//! end of its `fdatasync` (`src/log/writer.rs` takes it through the I/O seam). Linux
//! lists the holders of such locks in `/proc/locks`, with the pid that took the lock and
//! the file's device and inode; that is how a refusal names the holder.

use super::{Holder, LockError, identity::assess_raw};
use std::path::Path;
use std::time::Duration;

/// The refusal of a writer that waited `waited` for the lock on `file` (device and inode
/// `identity`, when known) before its `action`, or that found a holder of the session
/// there (`holder`: a `Store::lock` or a running Pi, refused at once): the holder read
/// from `/proc/locks`, the reason, and what clears it.
pub(crate) fn held(
    file: &Path,
    identity: Option<(u64, u64)>,
    action: &str,
    waited: Duration,
    holder: bool,
) -> LockError {
    let pid = holder_of(file, identity, holder);
    let (initiator, why) = match pid {
        Some(pid) => {
            let holder =
                Holder::for_pid(pid).map_or_else(|| format!("pid:{pid}"), |h| h.to_string());
            let (_, why) = assess_raw(&holder);
            (holder, format!("{why}; it"))
        }
        None => ("another process".to_owned(), "that process".to_owned()),
    };
    LockError::FileHeld {
        initiator,
        action: action.to_owned(),
        object: file.to_path_buf(),
        reason: if holder {
            format!(
                "{why} holds the session: it holds the advisory lock on the session file for as \
                 long as it has the session open (a running Pi with the session-state \
                 package, or a Store::lock), whatever projection database it uses"
            )
        } else {
            format!(
                "{why} holds the advisory lock on the session file (another writer of \
                 session-state, between its check of the file's end and its append, perhaps \
                 through another projection database) and did not release it within {} s",
                waited.as_secs_f64()
            )
        },
        pid,
    }
}

/// The pid that holds the session file's lock: on Linux read from `/proc/locks`; on
/// Windows, of a holder, from its pid bytes (`crate::lock::hold::holder_pid`); unknown
/// elsewhere.
fn holder_of(file: &Path, identity: Option<(u64, u64)>, holder: bool) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let _ = (file, holder);
        let (dev, ino) = identity?;
        let table = std::fs::read_to_string("/proc/locks").ok()?;
        holder_pid(&table, dev, ino)
    }
    #[cfg(windows)]
    {
        let _ = identity;
        holder
            .then(|| crate::lock::hold::holder_pid(file))
            .flatten()
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (file, identity, holder);
        None
    }
}

/// The pid that holds a `flock` on the file `dev`/`ino`, from the text of `/proc/locks`:
///
/// ```text
/// 1: FLOCK  ADVISORY  WRITE 12345 fd:01:1048602 0 EOF
/// 1: -> FLOCK  ADVISORY  WRITE 12346 fd:01:1048602 0 EOF     (a waiter)
/// ```
///
/// The device in the table is the file system's (`MAJOR:MINOR` in hex), which on some
/// file systems differs from the device `stat` reports; an entry with the same inode on
/// another device is taken when none matches both.
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "Linux's /proc/locks")
)]
fn holder_pid(table: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = split_dev(dev);
    let mut same_inode = None;
    for line in table.lines() {
        let mut fields = line.split_whitespace().skip(1).peekable();
        if fields.peek() == Some(&"->") {
            continue;
        }
        let fields: Vec<&str> = fields.collect();
        let [kind, _, _, pid, place, ..] = fields[..] else {
            continue;
        };
        let mut parts = place.split(':');
        let (Some(maj), Some(min), Some(inode)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(pid), Ok(inode)) = (pid.parse::<u32>(), inode.parse::<u64>()) else {
            continue;
        };
        if kind != "FLOCK" || inode != ino || pid == 0 {
            continue;
        }
        let same_dev =
            u64::from_str_radix(maj, 16) == Ok(major) && u64::from_str_radix(min, 16) == Ok(minor);
        if same_dev {
            return Some(pid);
        }
        same_inode.get_or_insert(pid);
    }
    same_inode
}

/// Linux's `major()` and `minor()` of a device number.
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "Linux's /proc/locks")
)]
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        // 253:1 is `fd:01`; st_dev encodes it as major << 8 | minor.
        let dev = (253 << 8) | 1;
        let table = "\
1: POSIX  ADVISORY  WRITE 111 fd:01:42 0 EOF
2: FLOCK  ADVISORY  WRITE 222 00:2e:42 0 EOF
3: FLOCK  ADVISORY  WRITE 333 fd:01:42 0 EOF
3: -> FLOCK  ADVISORY  WRITE 444 fd:01:42 0 EOF
4: OFDLCK ADVISORY  READ  -1 fd:01:42 0 EOF
";
        assert_eq!(
            holder_pid(table, dev, 42),
            Some(333),
            "same device and inode"
        );
        assert_eq!(
            holder_pid(table, 7 << 8, 42),
            Some(222),
            "only the inode matches: the first flock on it"
        );
        assert_eq!(holder_pid(table, dev, 43), None);
        assert_eq!(holder_pid("garbage\n1: FLOCK\n", dev, 42), None);
        // glibc's makedev of major 0x1234, minor 0x56789.
        let (major, minor) = (0x1234_u64, 0x5_6789_u64);
        let dev = ((major & 0xfff) << 8)
            | ((major & 0xffff_f000) << 32)
            | (minor & 0xff)
            | ((minor & 0xffff_ff00) << 12);
        assert_eq!(split_dev(dev), (major, minor));
    }
}
