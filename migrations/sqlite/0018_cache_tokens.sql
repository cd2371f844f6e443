-- Of a turn's prompt tokens, those read from and written to the
-- provider's prompt cache (priced apart by `[budgets.prices]`).
ALTER TABLE turns ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
