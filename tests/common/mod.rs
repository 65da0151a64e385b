#![allow(dead_code)]

pub mod examples;
pub mod holders;
pub mod pi;
pub mod reference;

/// Milliseconds since the Unix epoch: the unit of the lock's `acquired_at`.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("ms since the epoch fit in i64")
}
