-- Webhook deliveries are remembered for `webhook.replay_window_days`: a
-- body seen on a route within the window is a duplicate, and processed
-- deliveries older than it are forgotten (`Store::inbox_forget_deliveries`). The
-- index serves that sweep; only webhook rows are in it.
CREATE INDEX inbox_webhook_age ON inbox (received_at) WHERE platform = 'webhook';
