//! Sessions and their messages, with full-text search over messages.

use super::{Backend, Result, Store, new_id, now_ms, with_pool};

/// Messages one transaction of [`Store::index_messages`] indexes at most,
/// so that catching up after a long stretch does not hold SQLite's write
/// lock for long.
const INDEX_BATCH: i64 = 2000;

/// What is needed to open a session for a key.
#[derive(Debug, Clone)]
pub struct NewSession<'a> {
    /// Session key, e.g. `telegram:dm:42` (SPEC §5).
    pub key: &'a str,
    /// Platform name.
    pub platform: &'a str,
    /// Chat or channel id on that platform.
    pub chat_id: &'a str,
    /// Thread (topic, Slack thread_ts, Discord thread) when there is one.
    pub thread_id: Option<&'a str>,
    /// The user the session belongs to, when it belongs to one.
    pub user_id: Option<&'a str>,
}

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Session {
    /// Random id; a key gets a new id each time its session is reset.
    pub id: String,
    /// Session key.
    pub key: String,
    /// Platform name.
    pub platform: String,
    /// Chat or channel id.
    pub chat_id: String,
    /// Thread id, if any.
    pub thread_id: Option<String>,
    /// Owning user, if any.
    pub user_id: Option<String>,
    /// Creation time (Unix ms).
    pub created_at: i64,
    /// Last activity (Unix ms).
    pub last_active_at: i64,
    /// When the session was ended (reset, expired), if it was.
    pub ended_at: Option<i64>,
    /// Why it ended.
    pub end_reason: Option<String>,
    /// The session this one continues (it outgrew the context window).
    pub parent_id: Option<String>,
    /// The model chosen for it with `/model`, if one was.
    pub model: Option<String>,
}

/// Pushes onto `$qb` (a query builder of either backend) the insert of
/// `$messages` into session `$session_id`, in order.
macro_rules! message_rows {
    ($qb:expr, $session_id:expr, $messages:expr) => {{
        let (session_id, now): (&str, i64) = ($session_id, $crate::store::now_ms());
        $qb.push(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, name, created_at) ",
        );
        $qb.push_values($messages, |mut row, m: &$crate::store::NewMessage<'_>| {
            row.push_bind(session_id)
                .push_bind(m.role)
                .push_bind($crate::store::storable(m.content))
                .push_bind(m.tool_calls.map($crate::store::storable))
                .push_bind(m.tool_call_id.map($crate::store::storable))
                .push_bind(m.name.map($crate::store::storable))
                .push_bind(now);
        });
    }};
}
pub(super) use message_rows;

/// A message to append to a session's history.
#[derive(Debug, Clone, Default)]
pub struct NewMessage<'a> {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'a str,
    /// Text content.
    pub content: &'a str,
    /// JSON array of tool calls (assistant messages).
    pub tool_calls: Option<&'a str>,
    /// The call a tool result answers.
    pub tool_call_id: Option<&'a str>,
    /// Tool name (tool results).
    pub name: Option<&'a str>,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct StoredMessage {
    /// Monotonic id; orders a session's history.
    pub id: i64,
    /// Owning session.
    pub session_id: String,
    /// Role.
    pub role: String,
    /// Text content.
    pub content: String,
    /// JSON array of tool calls.
    pub tool_calls: Option<String>,
    /// The call a tool result answers.
    pub tool_call_id: Option<String>,
    /// Tool name.
    pub name: Option<String>,
    /// Creation time (Unix ms).
    pub created_at: i64,
}

/// A full-text search hit.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct MessageHit {
    /// Message id.
    pub id: i64,
    /// Session of the message.
    pub session_id: String,
    /// Key of that session.
    pub session_key: String,
    /// Role.
    pub role: String,
    /// Text content.
    pub content: String,
    /// Creation time (Unix ms).
    pub created_at: i64,
}

macro_rules! session_columns {
    () => {
        "id, key, platform, chat_id, thread_id, user_id, created_at, last_active_at, ended_at, end_reason, parent_id, model"
    };
}
pub(super) use session_columns;

/// The start of a new session's insert.
macro_rules! insert_session {
    () => {
        "INSERT INTO sessions (id, key, platform, chat_id, thread_id, user_id, created_at, last_active_at) "
    };
}
pub(super) use insert_session;

impl Store {
    /// The open session for `new.key`, created if there is none. Safe
    /// against concurrent callers: the unique index on open keys decides.
    pub async fn open_session(&self, new: &NewSession<'_>) -> Result<Session> {
        if let Some(session) = self.open_session_by_key(new.key).await? {
            return Ok(session);
        }
        Ok(self.create_session(new).await?.0)
    }

    /// Opens a session for `new.key`, where the caller found none; true
    /// with it when this call created it (so it holds nothing yet), false
    /// when another writer opened one first.
    pub async fn create_session(&self, new: &NewSession<'_>) -> Result<(Session, bool)> {
        let now = now_ms();
        let id = new_id();
        let inserted = with_pool!(self, pool => sqlx::query(concat!(
            insert_session!(), "VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING"))
            .bind(&id).bind(new.key).bind(new.platform).bind(new.chat_id)
            .bind(new.thread_id).bind(new.user_id).bind(now)
            .execute(pool).await?.rows_affected());
        if inserted == 1 {
            // What was written, without reading it back.
            let session = Session {
                id,
                key: new.key.to_string(),
                platform: new.platform.to_string(),
                chat_id: new.chat_id.to_string(),
                thread_id: new.thread_id.map(str::to_string),
                user_id: new.user_id.map(str::to_string),
                created_at: now,
                last_active_at: now,
                ended_at: None,
                end_reason: None,
                parent_id: None,
                model: None,
            };
            return Ok((session, true));
        }
        // Another writer opened it first.
        let session =
            self.open_session_by_key(new.key)
                .await?
                .ok_or_else(|| super::StoreError::Corrupt {
                    what: "sessions",
                    reason: format!("open session for {} vanished after insert", new.key),
                })?;
        Ok((session, false))
    }

    /// The open (not ended) session for a key.
    pub async fn open_session_by_key(&self, key: &str) -> Result<Option<Session>> {
        let sql = concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE key = $1 AND ended_at IS NULL"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(key).fetch_optional(pool).await?))
    }

    /// A session by id, open or ended.
    pub async fn session(&self, id: &str) -> Result<Option<Session>> {
        let sql = concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE id = $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(id).fetch_optional(pool).await?))
    }

    /// Records activity on a session now.
    pub async fn touch_session(&self, id: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query("UPDATE sessions SET last_active_at = $1 WHERE id = $2")
            .bind(now_ms()).bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Ends the open session of `key`, if there is one. Returns whether
    /// there was.
    pub async fn end_session_by_key(&self, key: &str, reason: &str) -> Result<bool> {
        let done = with_pool!(self, pool => sqlx::query(
            "UPDATE sessions SET ended_at = $1, end_reason = $2 WHERE key = $3 AND ended_at IS NULL")
            .bind(now_ms()).bind(reason).bind(key).execute(pool).await?.rows_affected());
        Ok(done > 0)
    }

    /// Ends a session (reset, expiry). Returns false if it was not open.
    pub async fn end_session(&self, id: &str, reason: &str) -> Result<bool> {
        let done = with_pool!(self, pool => sqlx::query(
            "UPDATE sessions SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL")
            .bind(now_ms()).bind(reason).bind(id).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// Ends `old` (reason `split`) and opens the session that continues
    /// it under the same key, linked to it by `parent_id`, in one
    /// transaction. Fails if `old` was no longer open.
    pub async fn split_session(&self, old: &Session) -> Result<Session> {
        let now = now_ms();
        let id = new_id();
        let sql = concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE id = $1"
        );
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            let ended = sqlx::query(
                "UPDATE sessions SET ended_at = $1, end_reason = 'split' WHERE id = $2 AND ended_at IS NULL")
                .bind(now).bind(&old.id).execute(&mut *tx).await?.rows_affected();
            if ended != 1 {
                return Err(super::StoreError::Corrupt {
                    what: "sessions",
                    reason: format!("session {} was no longer open to split", old.id),
                });
            }
            sqlx::query(
                "INSERT INTO sessions (id, key, platform, chat_id, thread_id, user_id, created_at, last_active_at, parent_id, model) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)")
                .bind(&id).bind(&old.key).bind(&old.platform).bind(&old.chat_id)
                .bind(&old.thread_id).bind(&old.user_id).bind(now).bind(&old.id).bind(&old.model)
                .execute(&mut *tx).await?;
            let session: Session = sqlx::query_as(sql).bind(&id).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            Ok(session)
        })
    }

    /// Saves the history the model sees for `session_id`, shortened to fit
    /// the context, covering its messages up to `through_id`; replaces the
    /// previous checkpoint.
    pub async fn save_context(
        &self,
        session_id: &str,
        through_id: i64,
        history: &str,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO context_checkpoints (session_id, through_id, history, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id) DO UPDATE SET through_id = excluded.through_id, \
             history = excluded.history, created_at = excluded.created_at")
            .bind(session_id).bind(through_id).bind(history).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The latest checkpoint of `session_id`: through which message it
    /// goes, and the shortened history as saved.
    pub async fn context(&self, session_id: &str) -> Result<Option<(i64, String)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT through_id, history FROM context_checkpoints WHERE session_id = $1")
            .bind(session_id).fetch_optional(pool).await?))
    }

    /// A session's messages after `after_id`, oldest first.
    pub async fn messages_after(
        &self,
        session_id: &str,
        after_id: i64,
    ) -> Result<Vec<StoredMessage>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT id, session_id, role, content, tool_calls, tool_call_id, name, created_at \
             FROM messages WHERE session_id = $1 AND id > $2 ORDER BY id")
            .bind(session_id).bind(after_id).fetch_all(pool).await?))
    }

    /// Sets (or with `None` clears) the model a session talks to.
    pub async fn set_session_model(&self, id: &str, model: Option<&str>) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query("UPDATE sessions SET model = $1 WHERE id = $2")
            .bind(model).bind(id).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// The most recently active sessions, newest first.
    pub async fn list_sessions(&self, limit: i64) -> Result<Vec<Session>> {
        let sql = concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions ORDER BY last_active_at DESC, id LIMIT $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(limit).fetch_all(pool).await?))
    }

    /// Appends a message to a session's history; returns its id.
    pub async fn append_message(&self, session_id: &str, message: &NewMessage<'_>) -> Result<i64> {
        let id = self
            .append_messages(session_id, std::slice::from_ref(message))
            .await?;
        Ok(id.unwrap_or_default())
    }

    /// Appends `messages` in order in one statement; the last one's id
    /// (`None` for none).
    pub async fn append_messages(
        &self,
        session_id: &str,
        messages: &[NewMessage<'_>],
    ) -> Result<Option<i64>> {
        if messages.is_empty() {
            return Ok(None);
        }
        // On SQLite it runs as it is (no `RETURNING`, so its commit's error
        // is not lost) and the last row's id is the connection's last insert
        // rowid.
        Ok(Some(match &self.backend {
            Backend::Sqlite(pool) => {
                let mut qb = sqlx::QueryBuilder::new("");
                message_rows!(qb, session_id, messages);
                qb.build().execute(pool).await?.last_insert_rowid()
            }
            Backend::Postgres(pool) => {
                let mut qb = sqlx::QueryBuilder::new("");
                message_rows!(qb, session_id, messages);
                qb.push(" RETURNING id");
                let ids: Vec<i64> = qb.build_query_scalar().fetch_all(pool).await?;
                ids.into_iter().max().unwrap_or_default()
            }
        }))
    }

    /// A session's whole history, oldest first.
    pub async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>> {
        self.messages_after(session_id, 0).await
    }

    /// Brings SQLite's full-text index of messages up to date, in
    /// transactions of [`INDEX_BATCH`] messages; how many it indexed. A
    /// message is indexed here, not as it is stored (migration 0014 says
    /// why); PostgreSQL indexes each row as it is written, so this does
    /// nothing there.
    pub async fn index_messages(&self) -> Result<u64> {
        let Backend::Sqlite(pool) = &self.backend else {
            return Ok(0);
        };
        let behind: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE id > (SELECT through FROM messages_fts_through))",
        )
        .fetch_one(pool)
        .await?;
        if !behind {
            return Ok(0);
        }
        let sql = concat!(
            "BEGIN IMMEDIATE; ",
            "INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages ",
            "WHERE id > (SELECT through FROM messages_fts_through) ORDER BY id LIMIT $1; ",
            "UPDATE messages_fts_through SET through = coalesce((SELECT max(id) FROM ",
            "(SELECT id FROM messages WHERE id > through ORDER BY id LIMIT $1)), through); ",
            "COMMIT"
        );
        let mut indexed = 0;
        loop {
            let query = sqlx::query(sql).bind(INDEX_BATCH);
            let steps =
                super::SqliteWrite::whole((pool, &self.gate), query, "index_messages").await?;
            let n = steps.get(1)?.result.rows_affected();
            indexed += n;
            if n < INDEX_BATCH as u64 {
                return Ok(indexed);
            }
        }
    }

    /// Full-text search over stored messages, best matches first. Every
    /// word of `query` must occur; punctuation and search-syntax characters
    /// are treated as separators, never as operators. With `user`, only
    /// sessions of that `(platform, user_id)` are searched.
    pub async fn search_messages(
        &self,
        query: &str,
        user: Option<(&str, &str)>,
        limit: i64,
    ) -> Result<Vec<MessageHit>> {
        let words: Vec<&str> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let (platform, user_id) = user.unzip();
        let hits = match &self.backend {
            Backend::Sqlite(pool) => {
                self.index_messages().await?;
                let fts_query = words
                    .iter()
                    .map(|w| format!("\"{w}\""))
                    .collect::<Vec<_>>()
                    .join(" ");
                sqlx::query_as(
                    "SELECT m.id, m.session_id, s.key AS session_key, m.role, m.content, m.created_at \
                     FROM messages_fts f JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.id = m.session_id \
                     WHERE messages_fts MATCH $1 AND ($2 IS NULL OR (s.platform = $2 AND s.user_id = $3)) \
                     ORDER BY bm25(messages_fts), m.id DESC LIMIT $4")
                    .bind(fts_query).bind(platform).bind(user_id).bind(limit)
                    .fetch_all(pool).await?
            }
            Backend::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT m.id, m.session_id, s.key AS session_key, m.role, m.content, m.created_at \
                     FROM messages m JOIN sessions s ON s.id = m.session_id \
                     WHERE m.search @@ plainto_tsquery('simple', $1) \
                       AND ($2::TEXT IS NULL OR (s.platform = $2 AND s.user_id = $3)) \
                     ORDER BY ts_rank(m.search, plainto_tsquery('simple', $1)) DESC, m.id DESC LIMIT $4")
                    .bind(words.join(" ")).bind(platform).bind(user_id).bind(limit)
                    .fetch_all(pool).await?
            }
        };
        Ok(hits)
    }
}
