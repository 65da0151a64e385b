//! Naming a stored session by a prefix of its id, as Pi's `--session` does: the id
//! itself, or the start of exactly one stored session's id.
//!
//! One rule for every backend, on top of [`SessionStore::list`] (headers only).

use super::SessionStore;
use crate::error::Error;

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
/// else the one session whose id starts with it. Reads the store's headers only
/// ([`SessionStore::list`]), once.
///
/// ```no_run
/// use session_state::{SqliteStore, resolve_session};
/// let store = SqliteStore::open("/srv/sessions.sqlite")?;
/// let id = resolve_session(&store, "0195f1d0")?; // "0195f1d0-7c4e-7000-8000-…"
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    let mut candidates = Vec::new();
    for (id, _) in store.list().map_err(Error::from)? {
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
}
