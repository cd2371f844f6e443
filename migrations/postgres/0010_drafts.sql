-- An answer streaming into a chat shows in messages that are edited as it
-- grows. Their platform ids are kept per inbox event from the first one
-- sent, so the final answer edits them instead of sending a copy, and a
-- turn run again after a crash writes into them instead of leaving half
-- an answer behind. `status` is the message that says which tool is at
-- work, deleted when the answer is in.
CREATE TABLE drafts (
    inbox_id    BIGINT PRIMARY KEY,
    messages    TEXT NOT NULL,
    status      TEXT,
    updated_at  BIGINT NOT NULL
);

-- The outbox row that ends an event's draft: the inbox event whose draft
-- messages it is written into.
ALTER TABLE outbox ADD COLUMN draft_of BIGINT;
