//! macOS: a process's start time (`proc_pidinfo` with `PROC_PIDTBSDINFO`).
#![allow(unsafe_code)]

use super::Process;
use nix::libc;
use std::io;

/// `SZOMB` of `<sys/proc.h>`: a zombie (exited, not yet reaped).
const SZOMB: u32 = 5;

/// The process `pid`: its start time (microseconds since the Unix epoch) while it runs.
pub(crate) fn process(pid: u32) -> Process {
    let Ok(id) = libc::c_int::try_from(pid) else {
        return Process::Gone;
    };
    // SAFETY: `proc_bsdinfo` is plain data, valid when zeroed.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: a local buffer of `size` bytes.
    let n =
        unsafe { libc::proc_pidinfo(id, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    if n != size {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Process::Gone,
            _ if n == 0 && e.raw_os_error().is_none_or(|c| c == 0) => Process::Gone,
            _ => Process::Unreadable(e),
        };
    }
    if info.pbi_status == SZOMB {
        return Process::Exited;
    }
    Process::Running(
        info.pbi_start_tvsec
            .wrapping_mul(1_000_000)
            .wrapping_add(info.pbi_start_tvusec),
    )
}
