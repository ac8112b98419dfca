-- PgQ: one prebuilt 1000-row batch per transaction, one pgq.insert_event per
-- row (type 'u', data = val, extra1 = key, extra2 = diff; all ASCII text)
\set b random(1, :nbatches)
SELECT count(pgq.insert_event('bench', 'u', convert_from(v, 'UTF8'), convert_from(k, 'UTF8'), d::text, NULL, NULL)) FROM bench.batches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = :b;
