-- persist_sink large load: each transaction appends the next prebuilt
-- chunk, with an idempotency key of its own
SELECT nextval('bench.chunk_seq') AS n \gset
SELECT persist_sink.append(:shard, keys, vals, diffs, 'chunk-' || :n) FROM bench.chunks WHERE id = :n;
