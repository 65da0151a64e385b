//! [`PostgresStore`] as a [`SessionStore`]: the statements of each call.

use super::client::PgError;
use super::errors::{classify, name_append};
use super::sql::{
    APPEND, COPY_LINES, CREATE_WITH_ENTRIES, READ_PAGE, READ_PAGE_SQL, TURN_BEGIN, TURN_END,
};
use super::wire::{seq_from_db, seq_to_db};
use super::{POSTGRES_SCHEMA_VERSION, Phase, PostgresStore, Prepared};
use crate::error::{Result, StoreError};
use crate::log::entry::Header;
use crate::persistence::retry::stored_before_is;
use crate::persistence::{LineVisitor, SessionStore};
use crate::sync::lock;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use std::time::Duration;

impl SessionStore for PostgresStore {
    fn create(
        &self,
        header: &Header,
        header_line: &str,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let session_id = header.id();
        let ids = self.ids(session_id, lines)?;
        let next = lines.len() as u64;
        let last = ids.last().cloned();
        let action = format!("storing the new session {session_id}");
        self.run(|client| {
            if lines.len() < COPY_LINES {
                let seqs: Vec<i64> = (0..next).map(seq_to_db).collect();
                let params: [&(dyn ToSql + Sync); 7] = [
                    &session_id,
                    &header_line,
                    &seq_to_db(next),
                    &last,
                    &seqs,
                    &ids,
                    &lines,
                ];
                let created: i64 = client
                    .query_one(CREATE_WITH_ENTRIES, &params)
                    .and_then(|r| Ok(r.try_get(0)?))
                    .map_err(self.failed(action.clone(), Phase::Writing))
                    .map_err(|e| self.id_taken_or(e, session_id))?;
                if created == 0 {
                    return Err(StoreError::AlreadyExists {
                        store: self.url.clone(),
                        session_id: session_id.into(),
                    });
                }
                return Ok(next);
            }
            let mut tx = client
                .transaction()
                .map_err(self.failed(action.clone(), Phase::Before))?;
            let inserted = tx
                .execute(
                    "INSERT INTO session_state_sessions (session_id, header, next_seq, last_id) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (session_id) DO NOTHING",
                    &[&session_id, &header_line, &seq_to_db(next), &last],
                )
                .map_err(self.failed(action.clone(), Phase::Writing))?;
            if inserted == 0 {
                return Err(StoreError::AlreadyExists {
                    store: self.url.clone(),
                    session_id: session_id.into(),
                });
            }
            self.copy_lines(&mut tx, session_id, 0, &ids, lines)?;
            tx.commit().map_err(self.failed(action, Phase::Writing))?;
            Ok(next)
        })
        .map_err(|e| name_append(e, session_id, 0))
    }

    fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self.run(|client| {
            client
                .query("SELECT session_id, header FROM session_state_sessions", &[])
                .map_err(self.failed("listing sessions", Phase::Before))
        })?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, String>(0)
                        .map_err(PgError::from)
                        .map_err(self.failed("listing sessions", Phase::Before))?,
                    row.try_get::<_, String>(1)
                        .map_err(PgError::from)
                        .map_err(self.failed("listing sessions", Phase::Before))?,
                ))
            })
            .collect()
    }

    fn header_line(&self, session_id: &str) -> Result<String, StoreError> {
        let action = format!("reading session {session_id}");
        let row = self.run(|client| {
            client
                .query_typed_opt(
                    "SELECT header FROM session_state_sessions WHERE session_id = $1",
                    &[(&session_id, Type::TEXT)],
                )
                .map_err(self.failed(action.clone(), Phase::Before))
        })?;
        match row {
            Some(r) => r
                .try_get(0)
                .map_err(PgError::from)
                .map_err(self.failed(action, Phase::Before)),
            None => Err(self.not_found(session_id)),
        }
    }

    /// Only the rows asked for, a page at a time: each page is one statement (its own
    /// snapshot) that returns the session's `next_seq` with the rows; the first page's
    /// `next_seq` bounds the later ones, whose rows an append-only session never changes.
    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut LineVisitor<'_>,
    ) -> Result<u64, StoreError> {
        let action = format!("reading session {session_id}");
        self.run(|client| {
            let fail = || self.failed(action.clone(), Phase::Before);
            let mut from = seq_to_db(from_seq);
            let mut end = i64::MAX;
            let mut next: Option<u64> = None;
            loop {
                let params: [(&(dyn ToSql + Sync), Type); 4] = [
                    (&session_id, Type::TEXT),
                    (&from, Type::INT8),
                    (&end, Type::INT8),
                    (&READ_PAGE, Type::INT4),
                ];
                let rows = client.query_typed(READ_PAGE_SQL, &params).map_err(fail())?;
                let Some(first) = rows.first() else {
                    return Err(self.not_found(session_id));
                };
                let stored = seq_from_db(first.try_get(0).map_err(PgError::from).map_err(fail())?);
                let n = *next.get_or_insert(stored);
                end = seq_to_db(n);
                let mut got = 0;
                for r in &rows {
                    let Some(seq) = r
                        .try_get::<_, Option<i64>>(1)
                        .map_err(PgError::from)
                        .map_err(fail())?
                    else {
                        break;
                    };
                    got += 1;
                    let line: &str = r.try_get(2).map_err(PgError::from).map_err(fail())?;
                    if visit(seq_from_db(seq), line).is_break() {
                        return Ok(n);
                    }
                    from = seq + 1;
                }
                if got < READ_PAGE {
                    return Ok(n);
                }
            }
        })
    }

    fn append_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        self.append(session_id, first_seq, lines, Outside::No)
            .and_then(|next| next.ok_or_else(|| self.refused_in_turn(session_id)))
    }

    fn append_lines_outside_turns(
        &self,
        session_id: &str,
        first_seq: u64,
        after: Option<&str>,
        lines: &[String],
    ) -> Result<Option<u64>, StoreError> {
        if lines.len() >= COPY_LINES {
            // A batch outside the turns takes one, for its transaction (the default's
            // check of `after`, then the append, in the turn).
            self.begin_turn(session_id)?;
            let r = self.append(session_id, first_seq, lines, Outside::Checked(after));
            self.end_turn(session_id);
            return r;
        }
        self.append(session_id, first_seq, lines, Outside::Yes(after))
    }

    fn begin_turn(&self, session_id: &str) -> Result<(), StoreError> {
        let action = format!("waiting for the turn to write to session {session_id}");
        // One round trip: the statement typed here, not prepared by the server first.
        self.run(
            |client| match client.query_typed(TURN_BEGIN, &[(&session_id, Type::TEXT)]) {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    Err(self.busy(client, session_id))
                }
                Err(e) => Err(self.failed(action, Phase::Before)(e)),
            },
        )
    }

    fn end_turn(&self, session_id: &str) {
        let ended = self.run(|client| {
            client
                .query_typed(TURN_END, &[(&session_id, Type::TEXT)])
                .map(|_| ())
                .map_err(self.failed("ending the turn", Phase::Before))
        });
        if let Err(e) = ended {
            tracing::debug!(error = %e, session_id, "the turn ends with its connection");
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }

    fn retry_window(&self) -> Duration {
        self.lock_wait
    }
}

impl PostgresStore {
    /// One append: with `COPY` in a transaction for a large batch, else [`APPEND`]. `None`:
    /// refused outside the turns (a writer holds or waits for one, or the session does
    /// not end where the writer decided).
    fn append(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
        outside: Outside<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let ids = self.ids(session_id, lines)?;
        let (in_turn, after) = match outside {
            Outside::No => (true, None),
            Outside::Yes(after) => (false, after),
            Outside::Checked(after) => {
                if !stored_before_is(self, session_id, first_seq, after)? {
                    return Ok(None);
                }
                (true, None)
            }
        };
        if lines.len() >= COPY_LINES {
            return self
                .run(
                    |client| match self.append_copy(client, session_id, first_seq, &ids, lines) {
                        Ok(next) => Ok(Some(next)),
                        Err(StoreError::SequenceMismatch { .. }) if outside.is_outside() => {
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    },
                )
                .map_err(|e| name_append(e, session_id, first_seq));
        }
        let statement = Append {
            session_id,
            first_seq,
            ids: &ids,
            lines,
            in_turn,
            after,
        };
        // The statement needs no set-up of the connection; tables it cannot use (missing,
        // of another version) set it up once, which makes, upgrades or refuses them.
        let r = match self.run_on(false, |client| self.append_one(client, &statement)) {
            Ok(Sent::SetUpFirst) => {
                self.set_up_again();
                match self.run(|client| self.append_one(client, &statement)) {
                    Ok(Sent::SetUpFirst) => Err(self.changed_version()),
                    Ok(Sent::Done(next)) => Ok(next),
                    Err(e) => Err(e),
                }
            }
            Ok(Sent::Done(next)) => Ok(next),
            Err(e) => Err(e),
        };
        r.map_err(|e| name_append(e, session_id, first_seq))
    }
}

/// One [`APPEND`]'s arguments.
struct Append<'a> {
    session_id: &'a str,
    first_seq: u64,
    ids: &'a [String],
    lines: &'a [String],
    in_turn: bool,
    after: Option<&'a str>,
}

/// What one [`APPEND`] did.
enum Sent {
    /// Appended (the next sequence number), or refused outside the turns (`None`).
    Done(Option<u64>),
    /// Nothing: the tables are missing or of another version; the connection must be set
    /// up first.
    SetUpFirst,
}

impl PostgresStore {
    /// Sends [`APPEND`] once: one round trip; the first append of a connection is parsed,
    /// bound and run together (typed parameters), and from the second on the statement
    /// is prepared.
    fn append_one(
        &self,
        client: &mut super::client::Client,
        a: &Append<'_>,
    ) -> Result<Sent, StoreError> {
        let Append {
            session_id,
            first_seq,
            ids,
            lines,
            in_turn,
            after,
        } = *a;
        let action = format!("appending to session {session_id} at seq {first_seq}");
        let seqs: Vec<i64> = (0..lines.len() as u64)
            .map(|i| seq_to_db(first_seq + i))
            .collect();
        let new_next = first_seq + lines.len() as u64;
        let new_last = ids.last().cloned();
        let (first, new_next_db) = (seq_to_db(first_seq), seq_to_db(new_next));
        let wait = format!("{}ms", self.lock_wait.as_millis().max(1));
        let params: [(&(dyn ToSql + Sync), Type); 11] = [
            (&session_id, Type::TEXT),
            (&first, Type::INT8),
            (&seqs, Type::INT8_ARRAY),
            (&ids, Type::TEXT_ARRAY),
            (&lines, Type::TEXT_ARRAY),
            (&new_next_db, Type::INT8),
            (&new_last, Type::TEXT),
            (&in_turn, Type::BOOL),
            (&after, Type::TEXT),
            (&wait, Type::TEXT),
            (&POSTGRES_SCHEMA_VERSION, Type::INT4),
        ];
        let stmt = {
            let mut p = lock(&self.append_stmt);
            match &*p {
                Prepared::Ready(stmt) => Some(stmt.clone()),
                Prepared::Unused => {
                    *p = Prepared::Once;
                    None
                }
                Prepared::Once => {
                    let types = params.each_ref().map(|(_, t)| t.clone());
                    let stmt = client
                        .prepare_typed(APPEND, &types)
                        .map_err(self.failed(action.clone(), Phase::Before))?;
                    *p = Prepared::Ready(stmt.clone());
                    Some(stmt)
                }
            }
        };
        let sent = match &stmt {
            Some(stmt) => {
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                client.query_one(stmt, &values)
            }
            None => client.query_typed_one(APPEND, &params),
        };
        let row = match sent {
            Ok(row) => row,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(Sent::SetUpFirst),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                return Err(self.busy(client, session_id));
            }
            Err(e) => {
                return Err(self.id_taken_or(
                    name_append(
                        classify(&self.url, action, Phase::Writing, e),
                        session_id,
                        first_seq,
                    ),
                    session_id,
                ));
            }
        };
        let fail = || self.failed(action.clone(), Phase::Before);
        let version: Option<i32> = row.try_get(3).map_err(PgError::from).map_err(fail())?;
        if version != Some(POSTGRES_SCHEMA_VERSION) {
            return Ok(Sent::SetUpFirst);
        }
        let free: bool = row.try_get(2).map_err(PgError::from).map_err(fail())?;
        if !free {
            return Ok(Sent::Done(None));
        }
        let stored: Option<i64> = row.try_get(0).map_err(PgError::from).map_err(fail())?;
        let updated: i64 = row.try_get(1).map_err(PgError::from).map_err(fail())?;
        let Some(stored) = stored.map(seq_from_db) else {
            return Err(self.not_found(session_id));
        };
        if updated == 1 {
            return Ok(Sent::Done(Some(new_next)));
        }
        if !in_turn {
            return Ok(Sent::Done(None));
        }
        Err(StoreError::SequenceMismatch {
            session_id: session_id.into(),
            expected: stored,
            got: first_seq,
        })
    }

    /// The tables changed version between the connection's set-up and its append.
    fn changed_version(&self) -> StoreError {
        StoreError::Database {
            store: self.url.clone(),
            action: "appending".into(),
            source: crate::error::BackendError {
                source: "the tables changed version while appending; nothing was written: \
                         try again"
                    .into(),
                sql_state: None,
            },
        }
    }
}

/// How an append stands to the writers' turns.
#[derive(Clone, Copy)]
enum Outside<'a> {
    /// In a turn, or a host's append: the sequence number alone is checked.
    No,
    /// Outside the turns, after the entry named (`None`: no entries), checked by the
    /// statement.
    Yes(Option<&'a str>),
    /// Outside the turns but in one taken for a batch: the entry named is read back
    /// first.
    Checked(Option<&'a str>),
}

impl Outside<'_> {
    fn is_outside(self) -> bool {
        !matches!(self, Outside::No)
    }
}

impl PostgresStore {
    /// An append in a turn tries no lock, so the statement never refuses it for one: a
    /// refusal is the database answering against the statement's own rules.
    fn refused_in_turn(&self, session_id: &str) -> StoreError {
        StoreError::Corrupt {
            store: self.url.clone(),
            session_id: session_id.into(),
            detail: "the append statement refused an append in a turn for a turn".into(),
        }
    }
}
