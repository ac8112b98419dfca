-- Builds the reads workload's tables and shards once, on its own cluster,
-- before anything is measured (test/bench/run --only reads).  test/bench/run
-- runs it once per step, timing each:
--
--   psql -v rows=N -v step=STEP -f prepare_reads.sql
--
-- The rows: row i (0 .. rows - 1) has the key decode(md5(i::text), 'hex')
-- (16 bytes, unique, spread over the key space in an order unrelated to
-- i), the val decode(md5('v' || i), 'hex') (16 bytes), the time i % 100
-- and diff 1.  Times 0 .. 99: the k-th of the 100 appends holds the rows
-- of time k, rows / 100 of them, whose keys spread over the whole key
-- space.  reads.pl computes the same keys and vals for its lookups.
--
-- Steps:
--   heap       the heap table reads_heap(key, val, time, diff), loaded in
--              the order of the appends, a btree on key, VACUUM ANALYZE
--   compacted  the shard reads_compacted: a reader "drain" created first
--              (at since - 1: nothing seen yet), then 100 appends
--              (compare_and_append of the rows of time k as the batch
--              [k, k + 1)), each its own transaction; compact() follows in
--              step compact
--   compact    SELECT persist_sink.compact('reads_compacted'), repeated
--              until the shard holds one batch (at most 5 times)
--   batches    the shard reads_batches: a reader "drain" first, then 48
--              appends, batch j the rows of times [100 j / 48,
--              100 (j + 1) / 48) (2 or 3 of the appends above), so the
--              shard holds the same updates as reads_compacted in 48
--              batches (the cluster runs with persist_sink.compaction =
--              off, so none is merged)
--   tables     the foreign tables reads_compacted and reads_batches (key,
--              val, time, diff, as reads_heap), VACUUM ANALYZE of the
--              storage tables
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SELECT :'step' = 'heap' AS step_heap, :'step' = 'compacted' AS step_compacted,
	:'step' = 'compact' AS step_compact, :'step' = 'batches' AS step_batches,
	:'step' = 'tables' AS step_tables \gset

\if :step_heap
CREATE TABLE reads_heap (key bytea, val bytea, "time" bigint, diff bigint);
INSERT INTO reads_heap
	SELECT decode(md5(i::text), 'hex'), decode(md5('v' || i), 'hex'), k, 1
	FROM generate_series(0, 99) k, generate_series(k, :rows - 1, 100) i;
CREATE INDEX reads_heap_key ON reads_heap (key);
VACUUM ANALYZE reads_heap;
\endif

\if :step_compacted
SELECT persist_sink.create_shard('reads_compacted');
SELECT persist_sink.create_reader('reads_compacted', 'drain');
SELECT format($f$SELECT persist_sink.compare_and_append('reads_compacted',
		array_agg(decode(md5(i::text), 'hex')), array_agg(decode(md5('v' || i), 'hex')),
		array_agg(%s::bigint), array_agg(1::bigint), %s, %s)
	FROM generate_series(%s, %s, 100) i$f$, k, k, k + 1, k, :rows - 1)
FROM generate_series(0, 99) k \gexec
\endif

\if :step_compact
DO $$
BEGIN
	FOR attempt IN 1..5 LOOP
		PERFORM persist_sink.compact('reads_compacted');
		EXIT WHEN (SELECT batches FROM persist_sink.shards WHERE name = 'reads_compacted') = 1;
	END LOOP;
END
$$;
\endif

\if :step_batches
SELECT persist_sink.create_shard('reads_batches');
SELECT persist_sink.create_reader('reads_batches', 'drain');
SELECT format($f$SELECT persist_sink.compare_and_append('reads_batches',
		array_agg(decode(md5(i::text), 'hex')), array_agg(decode(md5('v' || i), 'hex')),
		array_agg(k::bigint), array_agg(1::bigint), %s, %s)
	FROM generate_series(%s, %s) k, generate_series(k, %s, 100) i$f$,
	lo, hi, lo, hi - 1, :rows - 1)
FROM (SELECT j * 100 / 48 AS lo, (j + 1) * 100 / 48 AS hi FROM generate_series(0, 47) j) b \gexec
\endif

\if :step_tables
CREATE FOREIGN TABLE reads_compacted (key bytea, val bytea, "time" bigint, diff bigint)
	SERVER persist_sink OPTIONS (shard 'reads_compacted');
CREATE FOREIGN TABLE reads_batches (key bytea, val bytea, "time" bigint, diff bigint)
	SERVER persist_sink OPTIONS (shard 'reads_batches');
-- without diff: a row of diff n reads as n rows
CREATE FOREIGN TABLE reads_compacted_rows (key bytea, val bytea)
	SERVER persist_sink OPTIONS (shard 'reads_compacted');
CREATE FOREIGN TABLE reads_batches_rows (key bytea, val bytea)
	SERVER persist_sink OPTIONS (shard 'reads_batches');
VACUUM ANALYZE persist_sink.blob, persist_sink.consensus;
\endif
