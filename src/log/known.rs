//! What a reader knew of a session file, to tell another writer's append from a rewrite in
//! place (`docs/durability.md`, "A file changed behind an open log"): the file's length and
//! change stamp from one look ([`Look`]), and the last bytes before the end of what was
//! read ([`End`]). Pi appends without a lock, so the file growing is normal; its bytes up to
//! what was read never change unless the file was rewritten.

use super::io::Meta;
use std::fs::File;
use std::io;

/// How many bytes before the end of what was read [`End`] keeps: a rewrite that moves
/// any line before that end changes them unless the moved bytes happen to repeat there.
const END_BYTES: usize = 32;

/// At most this many bytes that followed an [`End`] are read with it in one `pread`
/// ([`End::still_then_end`]); more cost a second one.
const ONE_READ: u64 = 4096;

/// A stamp of the file's last change ([`super::io::change_stamp`], beside `Meta`).
pub(crate) use super::io::change_stamp;

/// One look at a file: its length and its change stamp, from the same `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    /// The length.
    pub len: u64,
    /// [`change_stamp`].
    pub stamp: i64,
}

impl Look {
    /// The look that `meta` is.
    pub(crate) fn of(meta: &Meta) -> Look {
        Look {
            len: meta.len(),
            stamp: change_stamp(meta),
        }
    }

    /// Whether a file seen as `now` was rewritten in place since this look, at the same
    /// length: its stamp moved while its length stayed what this look saw.
    pub(crate) fn rewritten_at_same_length(&self, now: Look) -> bool {
        now.len == self.len && now.stamp != self.stamp
    }
}

/// The last bytes (up to 32) before an offset of a file: what must still be there when the
/// file grew by appends only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct End {
    bytes: [u8; END_BYTES],
    len: u8,
}

impl End {
    /// The bytes last in `bytes`.
    fn of(bytes: &[u8]) -> End {
        let keep = &bytes[bytes.len().saturating_sub(END_BYTES)..];
        let mut end = End {
            bytes: [0; END_BYTES],
            len: keep.len() as u8,
        };
        end.bytes[..keep.len()].copy_from_slice(keep);
        end
    }

    /// [`End::of`] for callers outside this module: the bytes last in `bytes`.
    pub(crate) fn of_bytes(bytes: &[u8]) -> End {
        End::of(bytes)
    }

    /// Reads, with one `pread`, these bytes before `at` and what follows them up to `len`
    /// (`len` ≥ `at`, the file's length now): `Some((n, bytes))` with these `n` bytes
    /// first when the file still holds them, `None` when it does not (it was rewritten, or
    /// is shorter than `len` now).
    pub(crate) fn still_then_read(
        &self,
        file: &File,
        at: u64,
        len: u64,
    ) -> io::Result<Option<(usize, Vec<u8>)>> {
        let n = self.len as u64;
        if at < n || len < at {
            return Ok(None);
        }
        let mut buf = vec![0u8; (len - at + n) as usize];
        match read_at(file, &mut buf, at - n) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        if &buf[..n as usize] != self.as_slice() {
            return Ok(None);
        }
        Ok(Some((n as usize, buf)))
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The end once `appended` follows these bytes (a line this process appended).
    pub(crate) fn then(&self, appended: &[u8]) -> End {
        if appended.len() >= END_BYTES {
            return End::of(appended);
        }
        let mut both = self.as_slice().to_vec();
        both.extend_from_slice(appended);
        End::of(&both)
    }

    /// The bytes of `file` before the offset `at`.
    pub(crate) fn read(file: &File, at: u64) -> io::Result<End> {
        let n = at.min(END_BYTES as u64);
        let mut buf = [0u8; END_BYTES];
        read_at(file, &mut buf[..n as usize], at - n)?;
        Ok(End::of(&buf[..n as usize]))
    }

    /// Whether `file` still holds these bytes before the offset `at` (a file shorter than
    /// `at` does not).
    pub(crate) fn still(&self, file: &File, at: u64) -> io::Result<bool> {
        Ok(self.still_then_end(file, at, at)?.is_some())
    }

    /// Whether `file` still holds these bytes before `at`, and if so the end before `len`
    /// (`len` ≥ `at`, the file's length now): one `pread` when at most 4 KiB follow `at`.
    pub(crate) fn still_then_end(&self, file: &File, at: u64, len: u64) -> io::Result<Option<End>> {
        let n = self.len as u64;
        if at < n || len < at {
            return Ok(None);
        }
        let from = at - n;
        if len - at > ONE_READ {
            let mut buf = [0u8; END_BYTES];
            let held = match read_at(file, &mut buf[..n as usize], from) {
                Ok(()) => &buf[..n as usize] == self.as_slice(),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => false,
                Err(e) => return Err(e),
            };
            return match held {
                true => End::read(file, len).map(Some),
                false => Ok(None),
            };
        }
        let mut buf = vec![0u8; (len - from) as usize];
        match read_at(file, &mut buf, from) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        if &buf[..n as usize] != self.as_slice() {
            return Ok(None);
        }
        // The new end: the kept bytes and what follows them, so a short append still
        // fills it.
        Ok(Some(End::of(&buf)))
    }
}

/// Reads exactly `buf.len()` bytes of `file` at `offset`, leaving its position alone where
/// the platform can (`pread`).
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_append_keeps_the_end_and_a_rewrite_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let head = b"{\"type\":\"session\",\"id\":\"x\"}\n{\"n\":1}\n";
        std::fs::write(&path, head).unwrap();
        let file = File::open(&path).unwrap();
        let end = End::read(&file, head.len() as u64).unwrap();
        assert_eq!(end.as_slice(), &head[head.len() - 32..]);
        // Appended to: still there, and the new end is the appended line's.
        let mut grown = head.to_vec();
        grown.extend_from_slice(b"{\"n\":2}\n");
        std::fs::write(&path, &grown).unwrap();
        let after = end
            .still_then_end(&file, head.len() as u64, grown.len() as u64)
            .unwrap()
            .unwrap();
        assert_eq!(after, End::of(&grown));
        assert_eq!(after, end.then(b"{\"n\":2}\n"));
        // Rewritten longer: not there.
        std::fs::write(
            &path,
            b"{\"type\":\"session\",\"id\":\"x\"}\n{\"n\":10}\n{\"n\":2}\n",
        )
        .unwrap();
        assert!(!end.still(&file, head.len() as u64).unwrap());
        // Shorter than the offset: not there.
        std::fs::write(&path, b"{}\n").unwrap();
        assert!(!end.still(&file, head.len() as u64).unwrap());
        assert_eq!(
            end.still_then_end(&file, head.len() as u64, 3).unwrap(),
            None
        );
    }

    #[test]
    fn a_long_append_reads_the_end_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc\n").unwrap();
        let file = File::open(&path).unwrap();
        let end = End::read(&file, 4).unwrap();
        let mut grown = b"abc\n".to_vec();
        grown.extend(std::iter::repeat_n(b'x', 10_000));
        grown.push(b'\n');
        std::fs::write(&path, &grown).unwrap();
        let after = end.still_then_end(&file, 4, grown.len() as u64).unwrap();
        assert_eq!(after, Some(End::of(&grown)));
        // A short end grows with what is appended after it.
        assert_eq!(End::of(b"ab").then(b"c\n"), End::of(b"abc\n"));
    }
}
