//! The SQL the PostgreSQL store runs, and the constants it is tuned by.

/// The key of the transaction-scoped advisory lock that serializes schema creation
/// between processes ("SessStat" in ASCII).
pub(super) const SCHEMA_LOCK_KEY: i64 = 0x5365_7373_5374_6174;

/// `read_lines` fetches rows this many at a time.
pub(super) const READ_PAGE: i32 = 512;

/// One page of `read_lines`: the session's `next_seq` with the rows from `$2`, below
/// `$3`, at most `$4` (no row: no such session; a row without `seq`: no entries there).
pub(super) const READ_PAGE_SQL: &str = "
SELECT s.next_seq, e.seq, e.line
FROM session_state_sessions s
LEFT JOIN LATERAL (
    SELECT seq, line FROM session_state_entries
    WHERE session_id = s.session_id AND seq >= $2 AND seq < least($3, s.next_seq)
    ORDER BY seq LIMIT $4
) e ON true
WHERE s.session_id = $1
ORDER BY e.seq
";

/// A batch of at least this many lines goes in with `COPY`, not one statement.
pub(super) const COPY_LINES: usize = 64;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS session_state_sessions (
    session_id  text PRIMARY KEY,
    header      text NOT NULL,
    next_seq    bigint NOT NULL CHECK (next_seq >= 0),
    last_id     text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS session_state_entries (
    session_id  text NOT NULL,
    seq         bigint NOT NULL CHECK (seq >= 0),
    entry_id    text NOT NULL,
    line        text NOT NULL,
    PRIMARY KEY (session_id, seq),
    CONSTRAINT session_state_entries_id_unique UNIQUE (session_id, entry_id)
);
";

/// The steady-state append: one statement, so one round trip and one commit. It locks
/// the session's row (waiting at most `lock_timeout` for another writer's transaction),
/// and inserts the lines and advances `next_seq` only when the stored next sequence
/// number is `$2`. It returns what it found, so a refused append tells the stored state.
///
/// It needs no set-up of its connection, so it can be a connection's first statement:
/// before it touches the session's row it sets, for its own transaction, the lock wait
/// (`$10`) and the commit setting (`on` where the connection has it `off`), and it writes
/// only where the tables are of this build's version (`$11`; the fourth column is the
/// version found, `NULL` for none, read together with the two settings so that the
/// statement cannot leave them out).
///
/// A writer outside the turns (`$8` false) first tries the turn's lock shared, for the
/// transaction: it appends only when no writer holds a turn or waits for one (a request
/// that conflicts with a waiting one is not granted), and a writer that asks for its turn
/// meanwhile waits for this commit; if not, nothing is locked or written, and the third
/// column is false. It also appends only after the entry it decided on: the session's
/// `last_id` must be `$9`. A writer in its turn (`$8` true) tries no lock (a writer
/// waiting behind its own turn would refuse it) and has read the session's end.
pub(super) const APPEND: &str = "
WITH t AS MATERIALIZED (
    SELECT set_config('lock_timeout', $10::text, true) AS wait,
           CASE WHEN current_setting('synchronous_commit') = 'off'
                THEN set_config('synchronous_commit', 'on', true) END AS sync,
           (SELECT max(version) FROM session_state_schema) AS version,
           CASE WHEN $8::boolean THEN true ELSE pg_try_advisory_xact_lock_shared(
               hashtextextended('session-state/turn/' || $1::text, 0)) END AS free
), s AS MATERIALIZED (
    SELECT next_seq, last_id FROM session_state_sessions
    WHERE session_id = $1 AND (SELECT free AND version IS NOT DISTINCT FROM $11::integer FROM t)
    FOR UPDATE
), ok AS MATERIALIZED (
    SELECT 1 FROM s
    WHERE next_seq = $2 AND ($8::boolean OR last_id IS NOT DISTINCT FROM $9::text)
), ins AS (
    INSERT INTO session_state_entries (session_id, seq, entry_id, line)
    SELECT $1, e.seq, e.id, e.line
    FROM unnest($3::bigint[], $4::text[], $5::text[]) AS e (seq, id, line)
    WHERE EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), upd AS (
    UPDATE session_state_sessions SET next_seq = $6, last_id = $7, updated_at = now()
    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
)
SELECT (SELECT next_seq FROM s), (SELECT count(*) FROM upd), (SELECT free FROM t),
       (SELECT version FROM t WHERE wait IS NOT NULL AND sync IS DISTINCT FROM 'off')
";

/// A writer's turn on a session: a session-level advisory lock on the session id (granted
/// in the order asked, waiting at most `lock_timeout`), released by [`TURN_END`] or with
/// the connection.
pub(super) const TURN_BEGIN: &str =
    "SELECT pg_advisory_lock(hashtextextended('session-state/turn/' || $1::text, 0))";

/// Ends a turn [`TURN_BEGIN`] took.
pub(super) const TURN_END: &str =
    "SELECT pg_advisory_unlock(hashtextextended('session-state/turn/' || $1::text, 0))";

/// A new session: its row and its first lines, one statement.
pub(super) const CREATE_WITH_ENTRIES: &str = "
WITH s AS (
    INSERT INTO session_state_sessions (session_id, header, next_seq, last_id)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING 1
), ins AS (
    INSERT INTO session_state_entries (session_id, seq, entry_id, line)
    SELECT $1, e.seq, e.id, e.line
    FROM unnest($5::bigint[], $6::text[], $7::text[]) AS e (seq, id, line)
    WHERE EXISTS (SELECT 1 FROM s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM s)
";

/// Who holds the session, as the server knows it: first the writer in its turn (the
/// session-level advisory lock [`TURN_BEGIN`] takes: in `pg_locks`, a bigint key is
/// `classid` (its high 32 bits) and `objid` (its low 32 bits) with `objsubid` 1), else the
/// transaction holding the session's row (the row's `xmax`). Its `application_name`,
/// backend pid, client address, since when (the turn: its connection's last change of
/// state; the row: its transaction's start), when it connected, its state, and whether
/// it holds the turn. Never the asking connection itself.
pub(super) const HOLDER: &str = "
SELECT * FROM (
    SELECT a.application_name, a.pid, host(a.client_addr),
           to_char(a.state_change AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
           to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
           a.state, true AS turn
    FROM pg_locks l
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
      AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint)
          = hashtextextended('session-state/turn/' || $1::text, 0)
    LIMIT 1
) turn
UNION ALL
SELECT * FROM (
    SELECT a.application_name, a.pid, host(a.client_addr),
           to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
           to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
           a.state, false AS turn
    FROM session_state_sessions s
    JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = s.xmax
                    AND l.granted AND l.mode = 'ExclusiveLock'
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE s.session_id = $1 AND l.pid <> pg_backend_pid()
    LIMIT 1
) row_lock
LIMIT 1
";
