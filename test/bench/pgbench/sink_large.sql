-- persist_sink large load: each transaction appends the next prebuilt chunk
SELECT nextval('bench.chunk_seq') AS n \gset
SELECT persist_sink.append(:shard, keys, vals, diffs) FROM bench.chunks WHERE id = :n;
