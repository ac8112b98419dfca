-- persist_sink: one prebuilt 1000-row batch per transaction through the
-- sink, each call with an idempotency key of its own
\set b random(1, :nbatches)
\set k random(1, 9223372036854775807)
SELECT persist_sink.append(:shard, keys, vals, diffs, 'c' || :client_id || '-' || :k) FROM bench.batches WHERE id = :b;
