//! Real processes standing in for other holders of the write lock (docs/spec.md §6).

use std::process::{Child, Command};

use session_state::lock::Holder;

/// A child process that is killed and reaped however the test ends.
pub struct Proc(pub Child);

impl Proc {
    /// A `sleep` that outlives any test: a live holder until it is ended.
    pub fn sleep() -> Proc {
        Proc::spawn(Command::new("sleep").arg("600"))
    }

    /// Runs `cmd` as a holder-to-be.
    pub fn spawn(cmd: &mut Command) -> Proc {
        Proc(cmd.spawn().expect("spawn child process"))
    }

    /// Its identity, as a lock row would record it.
    pub fn holder(&self) -> Holder {
        Holder::for_pid(self.0.id()).expect("child is visible in /proc")
    }

    /// Kills and reaps the child: afterwards its pid is gone.
    pub fn end(mut self) {
        self.0.kill().expect("kill");
        self.0.wait().expect("wait");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The identity of a process that ran and is gone (killed and reaped): what a lock row
/// left by a crashed writer names.
pub fn dead_holder() -> Holder {
    let p = Proc::sleep();
    let holder = p.holder();
    p.end();
    holder
}
