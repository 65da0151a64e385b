//! Who holds a write lock, and whether it still runs: the holder string stored in
//! `write_lock.holder` and what judges it: `/proc` on Linux, the process's creation time
//! on Windows (`OpenProcess`, `GetProcessTimes`), its start time on macOS
//! (`proc_pidinfo`). Elsewhere a holder is never judged dead, only its lease frees the row.

use std::fmt;
use std::sync::OnceLock;

/// The identity of a lock holder: a process, told apart from a later process that reuses
/// its pid, and from any process of an earlier boot.
///
/// Stored in `write_lock.holder` as `;`-separated `key:value` fields, `pid` first:
///
/// ```text
/// pid:1234;start:567890;boot:eef3f6c1-2340-4aff-9ddd-19cfb5f34435;pidns:4026531836
/// ```
///
/// - `pid`: the process id (required).
/// - `start`: the process start time, field 22 of `/proc/<pid>/stat` (clock ticks since
///   boot); on Windows its creation time (100 ns since 1601), on macOS its start time
///   (microseconds since 1970). A pid reused by another process has another start time.
/// - `boot`: `/proc/sys/kernel/random/boot_id`; start times are only comparable within
///   one boot.
/// - `pidns`: the inode of `/proc/<pid>/ns/pid`; a pid means nothing in another pid
///   namespace (another container sharing the database file).
///
/// The optional fields are left out where they cannot be read (`boot` and `pidns` outside
/// Linux): a holder without `start` is never judged dead, only its lease frees the row.
///
/// ```
/// use session_state::lock::Holder;
/// let h = Holder::parse("pid:1234;start:567890;boot:eef3f6c1").expect("valid");
/// assert_eq!(h.pid(), 1234);
/// assert_eq!(h.to_string(), "pid:1234;start:567890;boot:eef3f6c1");
/// assert!(Holder::parse("pid:abc").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pid: u32,
    start_ticks: Option<u64>,
    boot_id: Option<String>,
    pid_ns: Option<u64>,
}

impl Holder {
    /// This process. Computed once per process.
    pub fn current() -> Holder {
        static CURRENT: OnceLock<Holder> = OnceLock::new();
        let pid = std::process::id();
        let make = || {
            Holder::for_pid(pid).unwrap_or(Holder {
                pid,
                start_ticks: None,
                boot_id: None,
                pid_ns: None,
            })
        };
        let cached = CURRENT.get_or_init(make);
        // A forked child must not pass for its parent.
        if cached.pid == pid {
            cached.clone()
        } else {
            make()
        }
    }

    /// The identity of the running process `pid`, read from `/proc` (Linux), from its
    /// creation time (Windows) or its start time (macOS); `None` when it does not run or
    /// the system cannot tell.
    pub fn for_pid(pid: u32) -> Option<Holder> {
        #[cfg(any(windows, target_os = "macos"))]
        {
            let crate::os::Process::Running(start) = os_process(pid) else {
                return None;
            };
            Some(Holder {
                pid,
                start_ticks: Some(start),
                boot_id: None,
                pid_ns: None,
            })
        }
        #[cfg(not(any(windows, target_os = "macos")))]
        Holder::for_pid_proc(pid)
    }

    #[cfg(not(any(windows, target_os = "macos")))]
    fn for_pid_proc(pid: u32) -> Option<Holder> {
        let stat = std::fs::read(stat_path(pid)).ok()?;
        let stat = parse_stat(&stat)?;
        Some(Holder {
            pid,
            start_ticks: Some(stat.start_ticks),
            boot_id: boot_id(),
            pid_ns: pid_namespace(&format!("/proc/{pid}/ns/pid")),
        })
    }

    /// Parses a holder string written by [`Holder`]'s `Display`. Returns `None` for
    /// anything else (a foreign or hand-written format): such a holder's liveness is
    /// [`Liveness::Unknown`].
    pub fn parse(s: &str) -> Option<Holder> {
        let mut fields = s.split(';');
        let pid = fields.next()?.strip_prefix("pid:")?;
        let pid = parse_decimal::<u32>(pid)?;
        let mut holder = Holder {
            pid,
            start_ticks: None,
            boot_id: None,
            pid_ns: None,
        };
        for field in fields {
            let (key, value) = field.split_once(':')?;
            match key {
                "start" if holder.start_ticks.is_none() => {
                    holder.start_ticks = Some(parse_decimal(value)?);
                }
                "boot" if holder.boot_id.is_none() => {
                    let valid = !value.is_empty()
                        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
                    if !valid {
                        return None;
                    }
                    holder.boot_id = Some(value.to_owned());
                }
                "pidns" if holder.pid_ns.is_none() => {
                    holder.pid_ns = Some(parse_decimal(value)?);
                }
                _ => return None,
            }
        }
        Some(holder)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process start time in clock ticks since boot, when known.
    pub fn start_ticks(&self) -> Option<u64> {
        self.start_ticks
    }

    /// The boot id the process ran under, when known.
    pub fn boot_id(&self) -> Option<&str> {
        self.boot_id.as_deref()
    }

    /// Whether this process is still running, judged from `/proc` (Linux), from its
    /// creation time (Windows) or its start time (macOS).
    ///
    /// - [`Liveness::Alive`]: same boot, `/proc/<pid>` exists and has the recorded start
    ///   time (elsewhere: the pid runs, with the recorded start time).
    /// - [`Liveness::NotAlive`]: the pid is gone or a zombie, belongs to a process with
    ///   another start time (a reused pid), or the holder ran in an earlier boot.
    /// - [`Liveness::Unknown`]: no `/proc` (and no other way on this system), the holder
    ///   is in another pid namespace, it records no start time while its pid exists, or
    ///   the system refuses to tell.
    pub fn liveness(&self) -> Liveness {
        self.assess().0
    }

    /// The liveness and a phrase explaining it, for error messages.
    fn assess(&self) -> (Liveness, String) {
        #[cfg(any(windows, target_os = "macos"))]
        {
            self.assess_by_start(os_process(self.pid))
        }
        #[cfg(not(any(windows, target_os = "macos")))]
        self.assess_proc()
    }

    /// [`Holder::assess`] from what the system says of the process (Windows, macOS).
    #[cfg(any(windows, target_os = "macos"))]
    fn assess_by_start(&self, process: crate::os::Process) -> (Liveness, String) {
        use crate::os::Process;
        let pid = self.pid;
        match (process, self.start_ticks) {
            (Process::Gone, _) => (Liveness::NotAlive, format!("holder pid {pid} is gone")),
            (Process::Exited, _) => (Liveness::NotAlive, format!("holder pid {pid} has exited")),
            (Process::Unreadable(e), _) => (
                Liveness::Unknown,
                format!("the system does not tell whether pid {pid} runs ({e})"),
            ),
            (Process::Running(_), None) => (
                Liveness::Unknown,
                format!(
                    "pid {pid} is running but the holder records no start time, so it may be \
                     another process that reused the pid"
                ),
            ),
            (Process::Running(now), Some(start)) if now == start => {
                (Liveness::Alive, format!("holder pid {pid} is alive"))
            }
            (Process::Running(now), Some(start)) => (
                Liveness::NotAlive,
                format!(
                    "pid {pid} now belongs to another process (start time {now}, the holder's \
                     was {start})"
                ),
            ),
        }
    }

    /// [`Holder::assess`] from `/proc`.
    #[cfg(not(any(windows, target_os = "macos")))]
    fn assess_proc(&self) -> (Liveness, String) {
        let pid = self.pid;
        if !std::path::Path::new("/proc/self/stat").exists() {
            return (
                Liveness::Unknown,
                format!("there is no /proc on this system to check whether pid {pid} runs"),
            );
        }
        if let (Some(theirs), Some(ours)) = (&self.boot_id, boot_id())
            && *theirs != ours
        {
            return (
                Liveness::NotAlive,
                format!("holder pid {pid} ran before the last reboot"),
            );
        }
        if let (Some(theirs), Some(ours)) = (self.pid_ns, own_pid_namespace())
            && theirs != ours
        {
            return (
                Liveness::Unknown,
                format!("holder pid {pid} lives in another pid namespace (a container?)"),
            );
        }
        let stat = match std::fs::read(stat_path(pid)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (Liveness::NotAlive, format!("holder pid {pid} is gone"));
            }
            Err(e) => {
                return (
                    Liveness::Unknown,
                    format!("/proc/{pid}/stat cannot be read ({e})"),
                );
            }
        };
        let Some(stat) = parse_stat(&stat) else {
            return (
                Liveness::Unknown,
                format!("/proc/{pid}/stat has a format this version cannot read"),
            );
        };
        if matches!(stat.state, 'Z' | 'X' | 'x') {
            return (
                Liveness::NotAlive,
                format!("holder pid {pid} has exited (it is a zombie)"),
            );
        }
        match self.start_ticks {
            None => (
                Liveness::Unknown,
                format!(
                    "pid {pid} is running but the holder records no start time, so it may be \
                     another process that reused the pid"
                ),
            ),
            Some(start) if start == stat.start_ticks => {
                (Liveness::Alive, format!("holder pid {pid} is alive"))
            }
            Some(start) => (
                Liveness::NotAlive,
                format!(
                    "pid {pid} now belongs to another process (start time {}, the holder's was \
                     {start})",
                    stat.start_ticks
                ),
            ),
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid:{}", self.pid)?;
        if let Some(start) = self.start_ticks {
            write!(f, ";start:{start}")?;
        }
        if let Some(boot) = &self.boot_id {
            write!(f, ";boot:{boot}")?;
        }
        if let Some(ns) = self.pid_ns {
            write!(f, ";pidns:{ns}")?;
        }
        Ok(())
    }
}

/// Whether a lock holder is still running. See [`Holder::liveness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The holder process provably runs.
    Alive,
    /// The holder process provably does not run any more.
    NotAlive,
    /// It cannot be told; the row is respected until its lease expires.
    Unknown,
}

impl Liveness {
    /// Whether the holder may still run: it is not known to be gone. What `force-refresh`
    /// asks about before it clears a row, lease or not.
    pub fn may_be_alive(self) -> bool {
        self != Liveness::NotAlive
    }
}

impl fmt::Display for Liveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Liveness::Alive => "alive",
            Liveness::NotAlive => "not alive",
            Liveness::Unknown => "unknown",
        })
    }
}

/// What the system says of the process `pid` (Windows, macOS).
#[cfg(any(windows, target_os = "macos"))]
fn os_process(pid: u32) -> crate::os::Process {
    #[cfg(windows)]
    {
        crate::os::windows::process(pid)
    }
    #[cfg(target_os = "macos")]
    {
        crate::os::macos::process(pid)
    }
}

/// Liveness of a raw `holder` column value, with an explanation.
pub(super) fn assess_raw(holder: &str) -> (Liveness, String) {
    match Holder::parse(holder) {
        Some(h) => h.assess(),
        None => (
            Liveness::Unknown,
            format!("holder '{holder}' is not in a format this version can check"),
        ),
    }
}

/// `/proc/<pid>/stat`, spelled `/proc/./<pid>/stat`: the kernel reads both the same, but
/// qemu-user (an arm64 program on an x86-64 machine, as binfmt runs foreign containers)
/// answers a process's reads of its own `/proc/self/stat` and `/proc/<own pid>/stat` with
/// a made-up start time, a few ticks off the kernel's. A holder that recorded that one
/// would be judged dead, a reused pid, by every process reading the real one. The `.`
/// passes qemu's check, so every process reads the kernel's.
#[cfg(not(any(windows, target_os = "macos")))]
fn stat_path(pid: u32) -> String {
    format!("/proc/./{pid}/stat")
}

#[cfg(not(any(windows, target_os = "macos")))]
/// The fields of `/proc/<pid>/stat` we use.
struct Stat {
    state: char,
    start_ticks: u64,
}

#[cfg(not(any(windows, target_os = "macos")))]
/// Parses `/proc/<pid>/stat`. The second field (`comm`, in parentheses) may itself
/// contain spaces, parentheses and non-UTF-8 bytes, so the fixed fields are counted from
/// the *last* `)`.
fn parse_stat(bytes: &[u8]) -> Option<Stat> {
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    // After comm: field 3 is the state, field 22 the start time.
    let state = fields.next()?;
    let mut chars = state.chars();
    let state = chars.next()?;
    if chars.next().is_some() {
        return None;
    }
    let start_ticks = parse_decimal(fields.nth(22 - 4)?)?;
    Some(Stat { state, start_ticks })
}

fn parse_decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(not(any(windows, target_os = "macos")))]
fn boot_id() -> Option<String> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty()).then(|| id.to_owned())
    })
    .clone()
}

#[cfg(not(any(windows, target_os = "macos")))]
fn own_pid_namespace() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| pid_namespace("/proc/self/ns/pid"))
}

#[cfg(not(any(windows, target_os = "macos")))]
/// The inode in a `pid:[4026531836]` namespace link.
fn pid_namespace(link: &str) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let target = target.to_str()?;
    parse_decimal(target.strip_prefix("pid:[")?.strip_suffix(']')?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path that passes qemu-user's check reads the kernel's own file. (Under qemu a
    /// process's `/proc/<own pid>/stat` is made up; tests/pi_arm64.rs runs the Pi package
    /// under qemu, where a live Pi's lock row is judged by a native process.)
    #[cfg(target_os = "linux")]
    #[test]
    fn the_stat_path_is_the_kernels_file_past_qemus_own_answers() {
        let pid = std::process::id();
        assert!(stat_path(pid).starts_with("/proc/./"), "{}", stat_path(pid));
        let via = parse_stat(&std::fs::read(stat_path(pid)).expect("read")).expect("parse");
        let direct = std::fs::read(format!("/proc/{pid}/stat")).expect("read");
        let direct = parse_stat(&direct).expect("parse");
        assert_eq!(via.start_ticks, direct.start_ticks);
        assert_eq!(
            Holder::for_pid(pid).and_then(|h| h.start_ticks),
            Some(direct.start_ticks)
        );
    }

    #[cfg(not(any(windows, target_os = "macos")))]
    fn stat_line(comm: &str, state: char, start: u64) -> Vec<u8> {
        // Fields 4..=21 are filler; field 22 is the start time.
        let filler: Vec<String> = (4..=21).map(|n| n.to_string()).collect();
        format!(
            "4242 ({comm}) {state} {} {start} 99 100\n",
            filler.join(" ")
        )
        .into_bytes()
    }

    #[cfg(not(any(windows, target_os = "macos")))]
    #[test]
    fn stat_parse_counts_fields_from_the_last_paren() {
        for comm in ["sleep", "a b", "x) S 1 2 (y", ") )", "(", ""] {
            let stat = parse_stat(&stat_line(comm, 'S', 567_890)).expect(comm);
            assert_eq!(stat.start_ticks, 567_890, "comm {comm:?}");
            assert_eq!(stat.state, 'S');
        }
        let mut non_utf8 = b"7 (\xff\xfe) ".to_vec();
        non_utf8.extend_from_slice(&stat_line("z", 'Z', 5)[b"4242 (z) ".len()..]);
        let stat = parse_stat(&non_utf8).expect("non-UTF-8 comm");
        assert_eq!((stat.state, stat.start_ticks), ('Z', 5));
    }

    #[cfg(not(any(windows, target_os = "macos")))]
    #[test]
    fn stat_parse_rejects_truncated_or_garbage() {
        assert!(parse_stat(b"").is_none());
        assert!(parse_stat(b"1 (a) S 1 2 3").is_none());
        assert!(
            parse_stat(b"no paren at all S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20")
                .is_none()
        );
        let negative = String::from_utf8(stat_line("a", 'S', 1))
            .expect("ascii")
            .replace(" 1 99", " -1 99");
        assert!(parse_stat(negative.as_bytes()).is_none());
    }

    /// This process, a process that has exited, and a pid whose start time is not the
    /// holder's are judged by the system (Linux `/proc`, Windows the creation time, macOS
    /// the start time): alive, not alive, not alive; never unknown.
    #[test]
    fn a_holder_is_judged_by_its_start_time_never_unknown() {
        let me = Holder::current();
        let start = me.start_ticks().expect("this process's start time");
        assert_eq!(me.liveness(), Liveness::Alive, "{:?}", me.assess());
        let reused = Holder::parse(&format!("pid:{};start:{}", me.pid(), start + 1)).expect("p");
        assert_eq!(
            reused.liveness(),
            Liveness::NotAlive,
            "{:?}",
            reused.assess()
        );

        let mut child = crate::lock::hold::tests::helper(&[("SS_TEST_WAIT", "1")]);
        let held = Holder::for_pid(child.id()).expect("the child runs");
        assert!(held.start_ticks().is_some_and(|s| s != start));
        assert_eq!(held.liveness(), Liveness::Alive, "{:?}", held.assess());
        drop(child.stdin.take());
        assert!(child.wait().expect("wait").success());
        assert_eq!(held.liveness(), Liveness::NotAlive, "{:?}", held.assess());
        drop(child);
        assert_eq!(held.liveness(), Liveness::NotAlive, "{:?}", held.assess());
    }

    #[test]
    fn holder_round_trips_and_rejects_foreign_formats() {
        let s = "pid:1;start:2;boot:ab-c;pidns:4026531836";
        assert_eq!(Holder::parse(s).expect("valid").to_string(), s);
        assert_eq!(
            Holder::parse("pid:77").expect("pid only").to_string(),
            "pid:77"
        );
        for bad in [
            "",
            "pid:",
            "pid:abc",
            "pid:-1",
            "pid:+1",
            "1234",
            "pid:1;start:x",
            "pid:1;start:1;start:2",
            "pid:1;host:foo",
            "pid:1;boot:",
            "pid:1;boot:a b",
            "pid:1;",
            "host=foo,pid=1",
            "pid:99999999999",
        ] {
            assert!(Holder::parse(bad).is_none(), "{bad:?} should not parse");
        }
    }
}
