//! Leases and the replicas that hold them (see migration 0009): a lease is
//! its holder's until it expires by the database's clock; the holder
//! renews all of its leases at once; a takeover increments the lease's
//! fencing token.

use super::{Backend, Result, Store, with_pool};

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LeaseRow {
    /// What it is the lease of (`ingress:telegram`, `session:<key>`).
    pub name: String,
    /// The replica holding it.
    pub holder: String,
    /// Incremented by each takeover.
    pub token: i64,
    /// When its holder took it (database clock, Unix ms).
    pub acquired_at: i64,
    /// When it lapses unless renewed.
    pub expires_at: i64,
}

/// A replica as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReplicaRow {
    /// Its id, unique per start.
    pub id: String,
    /// Its name (`cluster.name`, or host and pid).
    pub name: String,
    /// When it joined (database clock, Unix ms).
    pub started_at: i64,
    /// Its last renewal.
    pub seen_at: i64,
    /// Turns it was running at its last renewal.
    pub turns: i64,
    /// Sessions it handed to other replicas since it joined.
    pub moves_out: i64,
    /// Sessions other replicas handed to it since it joined.
    pub moves_in: i64,
    /// Its last move: `<session> -> <replica>` or `<session> <- <replica>`.
    pub last_move: String,
    /// When it made it (database clock, Unix ms; 0: none yet).
    pub moved_at: i64,
}

/// What a replica reports with each renewal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaActivity {
    /// Turns running.
    pub turns: i64,
    /// Sessions handed to other replicas so far.
    pub moves_out: i64,
    /// Sessions taken from other replicas' hand-offs so far.
    pub moves_in: i64,
    /// The last move, and how long ago it was made (ms).
    pub last_move: Option<(String, i64)>,
}

/// A lease a write is made under: the write happens only while `holder`
/// still has lease `name` under `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease (`session:<key>`).
    pub name: String,
    /// The replica that holds it.
    pub holder: String,
    /// The token it holds it under.
    pub token: i64,
}

/// PostgreSQL, inside write transaction `$tx`: returns
/// [`StoreError::Fenced`](super::StoreError::Fenced) (rolling back) unless
/// `$fence` is still held. The lease row stays locked until the
/// transaction ends, so a takeover waits for the write and then sees it.
macro_rules! check_fence {
    ($tx:ident, $fence:expr) => {{
        let fence: &$crate::store::Fence = $fence;
        let held: Option<i64> = sqlx::query_scalar(
            "SELECT token FROM leases WHERE name = $1 AND holder = $2 AND token = $3 FOR SHARE",
        )
        .bind(fence.name.as_str())
        .bind(fence.holder.as_str())
        .bind(fence.token)
        .fetch_optional(&mut *$tx)
        .await?;
        if held.is_none() {
            $tx.rollback().await?;
            return Err($crate::store::StoreError::Fenced {
                lease: fence.name.clone(),
            });
        }
    }};
}
pub(crate) use check_fence;

/// SQLite: pushes onto `qb` the statement that returns a row if `fence` is
/// still held (in a write transaction, which holds the database's write
/// lock: no takeover can come between it and the commit).
pub(super) fn fence_row(qb: &mut sqlx::QueryBuilder<sqlx::Sqlite>, fence: &Fence) {
    qb.push("SELECT token FROM leases WHERE name = ")
        .push_bind(fence.name.as_str())
        .push(" AND holder = ")
        .push_bind(fence.holder.as_str())
        .push(" AND token = ")
        .push_bind(fence.token);
}

/// When the oldest unprocessed event of the session named by `key` (the
/// outer query's column) was received, found on PostgreSQL through the
/// index of unprocessed events by session; compared with `NOW - $2`.
/// Events are numbered as they are stored, so the oldest by number is the
/// oldest received but for the clocks of replicas apart. One dated further
/// ahead than `$2` (by a replica whose clock runs ahead) counts as old: it
/// would otherwise hide the older events of its session behind it until
/// its date. Events keep their replica's date, which the replay window
/// and the catch-up compare with that replica's clock.
fn oldest_waiting(key: &str) -> String {
    format!(
        "SELECT CASE WHEN i.received_at > NOW + $2 THEN 0 ELSE i.received_at END \
         FROM inbox i WHERE i.session_key = {key} AND i.processed_at IS NULL \
         ORDER BY i.id LIMIT 1"
    )
}

/// `NOW` in `sql` as the backend's clock in Unix ms: every replica reads
/// the same clock, so theirs need not agree.
fn clocked(backend: &Backend, sql: &str) -> String {
    let now = match backend {
        Backend::Sqlite(_) => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        Backend::Postgres(_) => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
    };
    sql.replace("NOW", now)
}

impl Store {
    /// The database's clock (Unix ms).
    pub async fn db_now_ms(&self) -> Result<i64> {
        let sql = clocked(&self.backend, "SELECT NOW");
        Ok(
            with_pool!(self, pool => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(pool).await?),
        )
    }

    /// Records replica `id` as joined.
    pub async fn replica_join(&self, id: &str, name: &str) -> Result<()> {
        let sql = clocked(
            &self.backend,
            "INSERT INTO replicas (id, name, started_at, seen_at, takes_sessions) \
             VALUES ($1, $2, NOW, NOW, TRUE) ON CONFLICT (id) DO UPDATE SET seen_at = NOW",
        );
        with_pool!(self, pool => sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).bind(name).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Replica `id` drains: it takes no more sessions handed over.
    pub async fn replica_draining(&self, id: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE replicas SET takes_sessions = FALSE WHERE id = $1")
            .bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Removes replica `id` and lets every lease it holds lapse now (a
    /// clean stop: the others take over at once instead of waiting).
    pub async fn replica_leave(&self, id: &str) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query("UPDATE leases SET expires_at = 0 WHERE holder = $1").bind(id).execute(pool).await?;
            sqlx::query("DELETE FROM replicas WHERE id = $1").bind(id).execute(pool).await?.rows_affected()
        });
        Ok(())
    }

    /// The replicas on record, first joined first, and the database's
    /// clock (to judge how long ago each was seen).
    pub async fn replicas(&self) -> Result<(Vec<ReplicaRow>, i64)> {
        let rows = with_pool!(self, pool => sqlx::query_as(
            "SELECT id, name, started_at, seen_at, turns, moves_out, moves_in, last_move, moved_at \
             FROM replicas ORDER BY started_at, id")
            .fetch_all(pool).await?);
        Ok((rows, self.db_now_ms().await?))
    }

    /// Replicas not seen for `older_than_ms` are forgotten, and so are
    /// leases lapsed for a day (a lease given up stays, lapsed, so that
    /// its next holder's token is still greater than any before). Returns
    /// how many replicas were.
    pub async fn replicas_prune(&self, older_than_ms: i64) -> Result<u64> {
        let leases = clocked(
            &self.backend,
            "DELETE FROM leases WHERE expires_at < NOW - 86400000",
        );
        let replicas = clocked(
            &self.backend,
            "DELETE FROM replicas WHERE seen_at < NOW - $1",
        );
        Ok(with_pool!(self, pool => {
            sqlx::query(sqlx::AssertSqlSafe(leases)).execute(pool).await?;
            sqlx::query(sqlx::AssertSqlSafe(replicas)).bind(older_than_ms).execute(pool).await?.rows_affected()
        }))
    }

    /// Takes lease `name` for `holder` for `ttl_ms` if it is free or has
    /// lapsed (or `holder` has it already). Returns its fencing token, or
    /// `None` while another holder has it.
    pub async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<i64>> {
        let sql = clocked(
            &self.backend,
            "INSERT INTO leases (name, holder, token, acquired_at, expires_at) \
             VALUES ($1, $2, 1, NOW, NOW + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, acquired_at = excluded.acquired_at, \
             expires_at = excluded.expires_at \
             WHERE leases.expires_at <= NOW OR leases.holder = excluded.holder \
             RETURNING token",
        );
        macro_rules! once {
            ($ex:expr) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(name)
                    .bind(holder)
                    .bind(ttl_ms)
                    .fetch_optional($ex)
                    .await?
            };
        }
        Ok(super::returning!(&self.backend, ex => once!(ex)))
    }

    /// [`lease_acquire`](Self::lease_acquire) of each of `names` at once
    /// (one statement on PostgreSQL): their tokens in order, `None` for
    /// those another holder has.
    pub async fn lease_acquire_many(
        &self,
        names: &[String],
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Vec<Option<i64>>> {
        let Backend::Postgres(pool) = &self.backend else {
            // One replica: nobody else takes them meanwhile.
            let mut tokens = Vec::with_capacity(names.len());
            for name in names {
                tokens.push(self.lease_acquire(name, holder, ttl_ms).await?);
            }
            return Ok(tokens);
        };
        // Locked in the names' order by every replica: two taking sets that
        // overlap never wait for each other in a cycle.
        let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let sql = clocked(
            &self.backend,
            "INSERT INTO leases (name, holder, token, acquired_at, expires_at) \
             SELECT n, $2, 1, NOW, NOW + $3 FROM UNNEST($1::text[]) AS n ORDER BY n \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, acquired_at = excluded.acquired_at, \
             expires_at = excluded.expires_at \
             WHERE leases.expires_at <= NOW OR leases.holder = excluded.holder \
             RETURNING name, token",
        );
        // A renewal (which locks its rows in the order its plan takes) may
        // still deadlock with it: PostgreSQL then fails one, and this one tries
        // again.
        let mut tries = 0;
        let taken: std::collections::HashMap<String, i64> = loop {
            let once = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(sorted.as_slice())
                .bind(holder)
                .bind(ttl_ms)
                .fetch_all(pool)
                .await;
            match once {
                Err(sqlx::Error::Database(e))
                    if tries < 3 && e.code().as_deref() == Some("40P01") =>
                {
                    tries += 1;
                }
                other => {
                    break other?
                        .into_iter()
                        .collect::<Vec<(String, i64)>>()
                        .into_iter()
                        .collect();
                }
            }
        };
        Ok(names.iter().map(|n| taken.get(n).copied()).collect())
    }

    /// Extends those of `held` (name and token) that `holder` still has,
    /// unlapsed, to `ttl_ms` from now, and its replica record (with
    /// `activity`). Returns the ones it extended: one missing was taken
    /// over or had lapsed. A lease the holder no longer counts as its own
    /// is left to lapse.
    pub async fn lease_renew(
        &self,
        holder: &str,
        held: &[(String, i64)],
        ttl_ms: i64,
        activity: &ReplicaActivity,
    ) -> Result<Vec<(String, i64)>> {
        let seen = clocked(
            &self.backend,
            "UPDATE replicas SET seen_at = NOW, turns = $2, moves_out = $3, moves_in = $4, \
             last_move = CASE WHEN $6 < 0 THEN last_move ELSE $5 END, \
             moved_at = CASE WHEN $6 < 0 THEN moved_at ELSE NOW - $6 END WHERE id = $1",
        );
        let (last_move, ago) = activity
            .last_move
            .clone()
            .unwrap_or_else(|| (String::new(), -1));
        with_pool!(self, pool => sqlx::query(sqlx::AssertSqlSafe(seen.clone()))
            .bind(holder)
            .bind(activity.turns)
            .bind(activity.moves_out)
            .bind(activity.moves_in)
            .bind(last_move.as_str())
            .bind(ago)
            .execute(pool).await?.rows_affected());
        let pool = match &self.backend {
            Backend::Postgres(pool) => {
                // One statement, a join with the list: a chain of ORs over
                // 500 of 2 000 leases took 17 ms of PostgreSQL's time, four
                // times a second.
                let sql = clocked(
                    &self.backend,
                    "UPDATE leases l SET expires_at = NOW + $1 \
                     FROM UNNEST($3::text[], $4::bigint[]) AS h(name, token) \
                     WHERE l.name = h.name AND l.token = h.token AND l.holder = $2 \
                     AND l.expires_at > NOW RETURNING l.name, l.token",
                );
                let (names, tokens): (Vec<&str>, Vec<i64>) = held
                    .iter()
                    .map(|(name, token)| (name.as_str(), *token))
                    .unzip();
                return Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(ttl_ms)
                    .bind(holder)
                    .bind(names)
                    .bind(tokens)
                    .fetch_all(pool)
                    .await?);
            }
            Backend::Sqlite(pool) => pool,
        };
        let head = clocked(&self.backend, "UPDATE leases SET expires_at = NOW + ");
        let guard = clocked(&self.backend, " WHERE expires_at > NOW AND holder = ");
        let mut renewed = Vec::new();
        for chunk in held.chunks(500) {
            let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new(head.clone());
            qb.push_bind(ttl_ms);
            qb.push(guard.as_str());
            qb.push_bind(holder);
            qb.push(" AND (");
            let mut any = qb.separated(" OR ");
            for (name, token) in chunk {
                any.push("(name = ");
                any.push_bind_unseparated(name.as_str());
                any.push_unseparated(" AND token = ");
                any.push_bind_unseparated(*token);
                any.push_unseparated(")");
            }
            qb.push(") RETURNING name, token");
            let mut tx = Box::pin(pool.begin_with("BEGIN IMMEDIATE")).await?;
            let rows: Vec<(String, i64)> = qb.build_query_as().fetch_all(&mut *tx).await?;
            tx.commit().await?;
            renewed.extend(rows);
        }
        Ok(renewed)
    }

    /// Gives lease `name` up, if `holder` still has it under `token`: it
    /// lapses now (and keeps its token, which the next holder increments).
    pub async fn lease_release(&self, name: &str, holder: &str, token: i64) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2 AND token = $3")
            .bind(name).bind(holder).bind(token).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The replicas seen within `live_ms` that take sessions handed to
    /// them (id and name), each with how many sessions it owns (unlapsed
    /// `session:` leases), first joined first.
    pub async fn session_shares(&self, live_ms: i64) -> Result<Vec<(String, String, i64)>> {
        let sql = clocked(
            &self.backend,
            "SELECT r.id, r.name, (SELECT count(*) FROM leases l WHERE l.holder = r.id \
               AND l.name LIKE 'session:%' AND l.expires_at > NOW) AS owned \
             FROM replicas r WHERE r.seen_at > NOW - $1 AND r.takes_sessions \
             ORDER BY r.started_at, r.id",
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(live_ms).fetch_all(pool).await?),
        )
    }

    /// Sessions with unprocessed events or unsent answers whose lease
    /// (`session:<key>`) nobody holds: a replica that died left them, or
    /// the notice of an event for them went astray. At most `limit`.
    ///
    /// Runs every second on each replica, so its cost follows the sessions
    /// with events waiting, not the events: it steps from one such session
    /// to the next through PostgreSQL's index of unprocessed events by
    /// session (the sweep runs on PostgreSQL alone), and reads each
    /// one's oldest ([`oldest_waiting`]). Reading every unprocessed event
    /// instead took 75 ms a second of PostgreSQL's time with 2 000 sessions
    /// fifty events behind a slow model.
    pub async fn sessions_unowned(&self, limit: i64, older_than_ms: i64) -> Result<Vec<String>> {
        let sql = clocked(
            &self.backend,
            &format!(
                "WITH RECURSIVE waiting(key) AS (\
                   SELECT min(session_key) FROM inbox WHERE processed_at IS NULL \
                   UNION ALL SELECT (SELECT min(i.session_key) FROM inbox i \
                     WHERE i.processed_at IS NULL AND i.session_key > w.key) \
                   FROM waiting w WHERE w.key IS NOT NULL\
                 ) \
                 SELECT key FROM (\
                   SELECT key FROM waiting WHERE key IS NOT NULL \
                   AND ({oldest}) < NOW - $2 \
                   UNION SELECT DISTINCT session_key AS key FROM outbox WHERE status = 'pending'\
                 ) owed WHERE NOT EXISTS (SELECT 1 FROM leases \
                   WHERE leases.name = 'session:' || owed.key AND leases.expires_at > NOW) \
                 LIMIT $1",
                oldest = oldest_waiting("waiting.key"),
            ),
        );
        Ok(
            with_pool!(self, pool => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(limit).bind(older_than_ms).fetch_all(pool).await?),
        )
    }

    /// Sessions whose lease `holder` has and that have events stored more
    /// than `older_than_ms` ago and not processed: the notice of one went
    /// astray (this replica was not listening yet, or again). Read from its
    /// leases, each session's oldest waiting event ([`oldest_waiting`]):
    /// reading every unprocessed event took 110 ms a second of
    /// PostgreSQL's time with 2 000 sessions fifty events behind.
    pub async fn sessions_owned_waiting(
        &self,
        holder: &str,
        older_than_ms: i64,
    ) -> Result<Vec<String>> {
        let sql = clocked(
            &self.backend,
            &format!(
                "SELECT key FROM (SELECT substr(name, 9) AS key FROM leases \
                   WHERE holder = $1 AND name LIKE 'session:%' AND expires_at > NOW) owned \
                 WHERE ({oldest}) < NOW - $2",
                oldest = oldest_waiting("owned.key"),
            ),
        );
        Ok(
            with_pool!(self, pool => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(holder).bind(older_than_ms).fetch_all(pool).await?),
        )
    }

    /// The channel `name` is on in this database's schema: NOTIFY reaches
    /// every session of the database, so each schema's replicas use
    /// channels of their own.
    fn channel(&self, name: &str) -> String {
        scoped(name, &self.scope)
    }

    /// Whether `channel` (of a notice received) is channel `name`.
    pub fn is_channel(&self, channel: &str, name: &str) -> bool {
        channel
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|scope| scope == &*self.scope)
    }

    /// Tells every replica listening on `channel` (PostgreSQL's NOTIFY;
    /// nothing on SQLite, where there is one replica).
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        if let Backend::Postgres(pool) = &self.backend {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(self.channel(channel))
                .bind(payload)
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// [`notify`](Self::notify) without waiting: notices given together
    /// go out in one statement (a notifying commit takes PostgreSQL's
    /// notify lock, once per statement instead of once per notice). One
    /// that cannot be sent is logged and dropped: whoever it was for finds
    /// the work by sweeping.
    pub fn notify_soon(&self, channel: &'static str, payload: String) {
        let Backend::Postgres(pool) = &self.backend else {
            return;
        };
        let queue = self.notices.get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<(&'static str, String)>(4096);
            let pool = pool.clone();
            let scope = self.scope.clone();
            tokio::spawn(async move {
                let mut batch = Vec::with_capacity(NOTICES_AT_ONCE);
                while rx.recv_many(&mut batch, NOTICES_AT_ONCE).await > 0 {
                    // Each statement wakes every listening replica: the
                    // notices of the next moment go with these.
                    if batch.len() < NOTICES_AT_ONCE {
                        tokio::time::sleep(GATHER_NOTICES).await;
                    }
                    while batch.len() < NOTICES_AT_ONCE
                        && let Ok(notice) = rx.try_recv()
                    {
                        batch.push(notice);
                    }
                    let mut channels: Vec<&'static str> = batch.iter().map(|(c, _)| *c).collect();
                    channels.sort_unstable();
                    channels.dedup();
                    for channel in channels {
                        let payloads: Vec<String> = batch
                            .iter()
                            .filter(|(c, _)| *c == channel)
                            .map(|(_, p)| p.clone())
                            .collect();
                        let sent = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                            .bind(scoped(channel, &scope))
                            .bind(&payloads)
                            .execute(&pool)
                            .await;
                        if let Err(err) = sent {
                            tracing::warn!(channel, notices = payloads.len(), error = %err, "notices not sent; the sweep finds their work");
                        }
                    }
                    batch.clear();
                }
            });
            tx
        });
        if queue.try_send((channel, payload)).is_err() {
            tracing::warn!(
                channel,
                "too many notices waiting; one dropped (the sweep finds its work)"
            );
        }
    }

    /// A connection listening on `channels` (PostgreSQL only). It is a
    /// pool of its own (one connection, opened again when it breaks): a
    /// listener holds its connection for as long as it listens, and taken
    /// from the store's pool it would leave a small pool
    /// (`storage.max_connections`) nothing for the statements.
    pub async fn listen(&self, channels: &[&str]) -> Result<Option<sqlx::postgres::PgListener>> {
        let Backend::Postgres(pool) = &self.backend else {
            return Ok(None);
        };
        let options = super::pools::listener_options(&pool.connect_options());
        let own = super::pools::listener_pool().connect_with(options).await?;
        let mut listener = sqlx::postgres::PgListener::connect_with(&own).await?;
        let channels: Vec<String> = channels.iter().map(|c| self.channel(c)).collect();
        listener
            .listen_all(channels.iter().map(String::as_str))
            .await?;
        Ok(Some(listener))
    }

    /// Every lease on record, by name.
    pub async fn leases(&self) -> Result<Vec<LeaseRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT name, holder, token, acquired_at, expires_at FROM leases ORDER BY name")
            .fetch_all(pool).await?))
    }
}

/// Most notices sent in one statement.
const NOTICES_AT_ONCE: usize = 256;

/// How long notices given one after another are gathered before they go
/// out together.
const GATHER_NOTICES: std::time::Duration = std::time::Duration::from_millis(1);

/// Channel `name` in the schema whose scope is `scope`.
fn scoped(name: &str, scope: &str) -> String {
    format!("{name}_{scope}")
}
