//! Naming a stored session by a prefix of its id, as Pi's `--session` does: the id
//! itself, or the start of exactly one stored session's id.
//!
//! One rule for every backend, on top of [`SessionStore::list`] (headers only).

use super::SessionStore;
use super::retry::Retry;
use crate::error::{Error, StoreError};

/// How many candidates an ambiguous prefix's error lists.
const SHOWN: usize = 8;

/// Why [`resolve_session`] named no session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No stored session has this id, nor an id that starts with it.
    #[error(
        "{store}: no stored session has the id {prefix} or an id that starts with it; \
         list the store's sessions to see their ids"
    )]
    NotFound {
        /// What was given.
        prefix: String,
        /// The store ([`SessionStore::describe`]: never a password).
        store: String,
    },
    /// The empty string names no session.
    #[error("{store}: an empty session id names no session")]
    Empty {
        /// The store ([`SessionStore::describe`]).
        store: String,
    },
    /// Several stored sessions' ids start with it, and none is it.
    #[error(
        "{store}: {prefix} is the start of {} stored session ids ({}); give more of the id",
        candidates.len(),
        shown(candidates)
    )]
    Ambiguous {
        /// What was given.
        prefix: String,
        /// The store ([`SessionStore::describe`]).
        store: String,
        /// Every id that starts with it, sorted.
        candidates: Vec<String>,
    },
    /// The store could not list its sessions.
    #[error(transparent)]
    Store(#[from] Error),
}

fn shown(candidates: &[String]) -> String {
    let mut text = candidates
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if candidates.len() > SHOWN {
        text.push_str(&format!(", and {} more", candidates.len() - SHOWN));
    }
    text
}

/// The id of the stored session that `id_or_prefix` names: a session whose id it is, or
/// else the one session whose id starts with it. A whole id is one lookup of its header
/// ([`SessionStore::header_line`]); only a prefix lists the store's headers
/// ([`SessionStore::list`]). A store that is unavailable is tried again with backoff
/// within its retry window ([`Error::StoreUnavailable`] after it).
///
/// Errors: [`ResolveError::NotFound`], [`ResolveError::Ambiguous`] (listing the
/// candidates), [`ResolveError::Empty`], or the store's own error.
pub fn resolve_session(
    store: &dyn SessionStore,
    id_or_prefix: &str,
) -> Result<String, ResolveError> {
    if id_or_prefix.is_empty() {
        return Err(ResolveError::Empty {
            store: store.describe(),
        });
    }
    let mut retry = Retry::new(store);
    match retry.transient(|| store.header_line(id_or_prefix)) {
        Ok(_) => return Ok(id_or_prefix.to_owned()),
        Err(Error::Store(StoreError::NotFound { .. })) => {}
        Err(e) => return Err(e.into()),
    }
    let mut candidates = Vec::new();
    for (id, _) in retry.transient(|| store.list())? {
        let id = id.as_str();
        if id == id_or_prefix {
            return Ok(id.to_owned());
        }
        if id.starts_with(id_or_prefix) {
            candidates.push(id.to_owned());
        }
    }
    candidates.sort();
    candidates.dedup();
    match candidates.len() {
        0 => Err(ResolveError::NotFound {
            prefix: id_or_prefix.to_owned(),
            store: store.describe(),
        }),
        1 => Ok(candidates.remove(0)),
        _ => Err(ResolveError::Ambiguous {
            prefix: id_or_prefix.to_owned(),
            store: store.describe(),
            candidates,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqliteStore;
    use crate::log::entry::Header;

    fn store_with(ids: &[&str]) -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("s.sqlite")).expect("open");
        for id in ids {
            let header = Header::new(*id, "/p");
            let line = serde_json::to_string(&header).expect("header line");
            let user = serde_json::json!({"type": "message", "id": "u1", "parentId": null,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "message": {"role": "user", "content": "hi", "timestamp": 0}});
            store
                .create(&header, &line, &[user.to_string()])
                .expect("create");
        }
        (dir, store)
    }

    #[test]
    fn an_id_or_a_unique_prefix_names_one_session() {
        let (_dir, store) = store_with(&["0195-aa", "0195-ab", "0195-aa-longer", "77"]);
        let resolve = |p: &str| resolve_session(&store, p);
        assert_eq!(resolve("77").expect("exact"), "77");
        assert_eq!(resolve("7").expect("unique prefix"), "77");
        assert_eq!(resolve("0195-ab").expect("exact"), "0195-ab");
        // An id that is also the start of another id names itself.
        assert_eq!(resolve("0195-aa").expect("exact wins"), "0195-aa");
        assert_eq!(resolve("0195-aa-").expect("unique"), "0195-aa-longer");
        match resolve("0195-a") {
            Err(ResolveError::Ambiguous { candidates, .. }) => {
                assert_eq!(candidates, ["0195-aa", "0195-aa-longer", "0195-ab"]);
            }
            other => panic!("{other:?}"),
        }
        let e = resolve("0195").expect_err("ambiguous");
        let text = e.to_string();
        assert!(text.contains("0195-aa, 0195-aa-longer, 0195-ab"), "{text}");
        assert!(matches!(resolve("9"), Err(ResolveError::NotFound { .. })));
        assert!(matches!(resolve(""), Err(ResolveError::Empty { .. })));
    }

    #[test]
    fn a_long_candidate_list_is_cut() {
        let ids: Vec<String> = (0..12).map(|i| format!("s-{i:02}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let (_dir, store) = store_with(&refs);
        let text = resolve_session(&store, "s-")
            .expect_err("ambiguous")
            .to_string();
        assert!(text.contains("12 stored session ids"), "{text}");
        assert!(text.contains("s-07, and 4 more"), "{text}");
        assert!(!text.contains("s-08"), "{text}");
    }

    /// A store that counts its listings; its header lookups and its listings are
    /// unavailable for their first `down` calls each.
    struct Counting {
        inner: SqliteStore,
        down_lookups: std::sync::atomic::AtomicU32,
        down_lists: std::sync::atomic::AtomicU32,
        lists: std::sync::atomic::AtomicU32,
    }

    fn up_or_down(down: &std::sync::atomic::AtomicU32) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        let left = down.load(SeqCst);
        if left == 0 {
            return Ok(());
        }
        down.store(left - 1, SeqCst);
        Err(StoreError::Unavailable {
            store: "counting".into(),
            action: "connecting".into(),
            source: crate::error::BackendError::new("connection refused"),
        })
    }

    impl SessionStore for Counting {
        fn create(&self, h: &Header, line: &str, lines: &[String]) -> Result<u64, StoreError> {
            self.inner.create(h, line, lines)
        }
        fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
            self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            up_or_down(&self.down_lists)?;
            self.inner.list()
        }
        fn header_line(&self, id: &str) -> Result<String, StoreError> {
            up_or_down(&self.down_lookups)?;
            self.inner.header_line(id)
        }
        fn read_lines(
            &self,
            id: &str,
            from: u64,
            visit: &mut crate::persistence::LineVisitor<'_>,
        ) -> Result<u64, StoreError> {
            self.inner.read_lines(id, from, visit)
        }
        fn append_lines(&self, id: &str, seq: u64, lines: &[String]) -> Result<u64, StoreError> {
            self.inner.append_lines(id, seq, lines)
        }
        fn describe(&self) -> String {
            "counting".into()
        }
        fn retry_window(&self) -> std::time::Duration {
            std::time::Duration::from_secs(2)
        }
    }

    fn counting(ids: &[&str], down: u32) -> (tempfile::TempDir, Counting) {
        let (dir, inner) = store_with(ids);
        let store = Counting {
            inner,
            down_lookups: down.into(),
            down_lists: down.into(),
            lists: 0.into(),
        };
        (dir, store)
    }

    #[test]
    fn a_whole_id_is_looked_up_without_listing_the_store() {
        let (_dir, store) = counting(&["0195-aa", "0195-aa-longer", "77"], 0);
        assert_eq!(
            resolve_session(&store, "0195-aa").expect("whole id"),
            "0195-aa"
        );
        assert_eq!(resolve_session(&store, "77").expect("whole id"), "77");
        assert_eq!(store.lists.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A prefix lists, once.
        assert_eq!(resolve_session(&store, "7").expect("prefix"), "77");
        assert_eq!(store.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn an_unavailable_store_is_retried_while_resolving() {
        // The lookup and the listing each down twice: both are tried again.
        let (_dir, store) = counting(&["0195-aa", "77"], 2);
        assert_eq!(resolve_session(&store, "7").expect("prefix"), "77");
        assert_eq!(store.lists.load(std::sync::atomic::Ordering::SeqCst), 3);
        let (_dir, store) = counting(&["77"], 2);
        assert_eq!(resolve_session(&store, "77").expect("whole id"), "77");
        // Down for longer than the window: refused saying how long and how many tries.
        let (_dir, store) = counting(&["77"], u32::MAX);
        let e = resolve_session(&store, "77").expect_err("gives up");
        assert!(
            matches!(&e, ResolveError::Store(Error::StoreUnavailable { attempts, .. }) if *attempts > 1),
            "{e:?}"
        );
        assert!(e.to_string().contains("trying again is safe"), "{e}");
    }
}
