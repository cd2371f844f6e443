-- What running turns hold against the budgets (`budgets::Meter`): per
-- session, the model calls its turn made so far and the estimate of the
-- call it is making. Counted with the finished turns, so concurrent
-- turns (on any replica) cannot spend the same remainder; removed with
-- the turn's commit, and ignored once `expires_at` is past (a turn whose
-- process died).
CREATE TABLE budget_holds (
    session_id TEXT PRIMARY KEY NOT NULL,
    platform TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    user_id TEXT,
    job_id TEXT,
    used_prompt BIGINT NOT NULL,
    used_completion BIGINT NOT NULL,
    used_micros BIGINT NOT NULL,
    reserved_tokens BIGINT NOT NULL,
    reserved_micros BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
