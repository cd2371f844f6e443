\set k random(1, 2000000000)
INSERT INTO naive_inbox (platform, dedupe_key, session_key, payload, received_at)
VALUES ('github', 'github:naive-' || :k, 'github:octo-org/hello-world#' || (:k % 50),
        repeat('x', 640), (extract(epoch FROM now()) * 1000)::bigint)
ON CONFLICT (dedupe_key) DO NOTHING;
