//! Windows: a file's identity, links and change time (`GetFileInformationByHandle`,
//! `GetFileInformationByHandleEx(FileBasicInfo)`), byte-range locks (`LockFileEx`,
//! `UnlockFileEx`) and a process's creation time (`OpenProcess`, `GetProcessTimes`).
#![allow(unsafe_code)]

use super::Process;
use std::fs::File;
use std::io;
use std::os::windows::io::AsRawHandle;
use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_INVALID_PARAMETER, ERROR_LOCK_VIOLATION, FILETIME, HANDLE,
};
use windows_sys::Win32::Storage::FileSystem::{
    BY_HANDLE_FILE_INFORMATION, FILE_BASIC_INFO, FileBasicInfo, GetFileInformationByHandle,
    GetFileInformationByHandleEx, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LockFileEx,
    UnlockFileEx,
};
use windows_sys::Win32::System::IO::OVERLAPPED;
use windows_sys::Win32::System::Threading::{
    GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
};

/// What Windows tells of an open file beyond std's stable metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileInfo {
    /// The volume's serial number.
    pub volume: u64,
    /// The file's index on its volume (its NTFS file id).
    pub index: u64,
    /// Its number of names (hard links).
    pub links: u64,
    /// Its last write time (100 ns since 1601).
    pub last_write: i64,
    /// Its change time: moved by a write, a rename, a new link, a change of attributes.
    pub change: i64,
}

fn handle(file: &File) -> HANDLE {
    file.as_raw_handle() as HANDLE
}

/// [`FileInfo`] of an open file: two calls on its handle.
pub(crate) fn file_info(file: &File) -> io::Result<FileInfo> {
    let mut by = BY_HANDLE_FILE_INFORMATION::default();
    // SAFETY: a valid handle of an open file and a local buffer of the right type.
    if unsafe { GetFileInformationByHandle(handle(file), &mut by) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let mut basic = FILE_BASIC_INFO::default();
    // SAFETY: as above; the buffer's size is passed with it.
    let ok = unsafe {
        GetFileInformationByHandleEx(
            handle(file),
            FileBasicInfo,
            (&raw mut basic).cast(),
            size_of::<FILE_BASIC_INFO>() as u32,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileInfo {
        volume: u64::from(by.dwVolumeSerialNumber),
        index: (u64::from(by.nFileIndexHigh) << 32) | u64::from(by.nFileIndexLow),
        links: u64::from(by.nNumberOfLinks),
        last_write: basic.LastWriteTime,
        change: basic.ChangeTime,
    })
}

fn overlapped(offset: u64) -> OVERLAPPED {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = offset as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov
}

/// Tries once to lock the byte at `offset` of `file` through this handle, exclusive or
/// shared: `Ok(false)` when another handle's lock is in the way. Windows locks are
/// mandatory for the bytes they cover, so only bytes far past any content are locked.
pub(crate) fn try_lock(file: &File, offset: u64, exclusive: bool) -> io::Result<bool> {
    let mut ov = overlapped(offset);
    let flags = LOCKFILE_FAIL_IMMEDIATELY
        | if exclusive {
            LOCKFILE_EXCLUSIVE_LOCK
        } else {
            0
        };
    // SAFETY: a valid handle of a synchronous file; the OVERLAPPED lives across the call,
    // which with LOCKFILE_FAIL_IMMEDIATELY never pends.
    if unsafe { LockFileEx(handle(file), flags, 0, 1, 0, &mut ov) } != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Releases the lock of this handle on the byte at `offset`.
pub(crate) fn unlock(file: &File, offset: u64) -> io::Result<()> {
    let mut ov = overlapped(offset);
    // SAFETY: as in `try_lock`.
    if unsafe { UnlockFileEx(handle(file), 0, 1, 0, &mut ov) } != 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The process `pid`: its creation time while it runs.
pub(crate) fn process(pid: u32) -> Process {
    // SAFETY: no pointers; a null handle is checked below.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(ERROR_INVALID_PARAMETER as i32) {
            Process::Gone
        } else {
            Process::Unreadable(e)
        };
    }
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the handle just opened, local buffers.
    let ok = unsafe { GetProcessTimes(h, &mut created, &mut exited, &mut kernel, &mut user) };
    let e = io::Error::last_os_error();
    // SAFETY: the handle just opened, closed once.
    unsafe { CloseHandle(h) };
    if ok == 0 {
        return Process::Unreadable(e);
    }
    let time = |t: FILETIME| (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
    if time(exited) != 0 {
        return Process::Exited;
    }
    Process::Running(time(created))
}
