-- PgQ large load: each transaction queues the next prebuilt chunk, one event per row
SELECT nextval('bench.chunk_seq') AS n \gset
SELECT count(pgq.insert_event('bench', 'u', convert_from(v, 'UTF8'), convert_from(k, 'UTF8'), d::text, NULL, NULL)) FROM bench.chunks, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = :n;
