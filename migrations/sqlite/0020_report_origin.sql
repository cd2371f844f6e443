-- A background process's reports are addressed as the event whose turn
-- started it (its chat, thread and sender), kept with its watch, not as
-- its session's latest event, whoever sent that. The index that found the
-- latest event goes: every delivery wrote a page of it.
ALTER TABLE process_watches ADD COLUMN origin TEXT NOT NULL DEFAULT '';
UPDATE process_watches SET origin = COALESCE((
    SELECT payload FROM inbox
    WHERE inbox.session_key = process_watches.session_key
      AND (inbox.outcome IS NULL OR inbox.outcome <> 'command')
    ORDER BY inbox.id DESC LIMIT 1), '');
DROP INDEX inbox_by_session;
