-- The key of a streamed message being sent, written before the send and
-- cleared once its id is stored: a crash between the platform's answer
-- and that write leaves the key, by which the restart finds the message
-- (Slack's metadata, Discord's nonce) instead of leaving it stray.
ALTER TABLE drafts ADD COLUMN sending TEXT;
