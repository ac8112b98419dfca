--
-- progress: the view compaction_progress and the column debt_batches of
-- the view shards.  compaction_progress: its columns, who may read it, and
-- that it has no row while no merge runs (background compaction is off),
-- after a compact() and after a compact() whose merge failed.  A row while
-- a merge runs, and none after it was cancelled, is shown by the isolation
-- spec compaction_progress.  debt_batches: the batches the compactor would
-- take away if it caught up now, by the size tiers and, past
-- persist_sink.slowdown_batches, by merging the cheapest adjacent batches.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql
\i sql/include/err.psql

-- n compare_and_appends of one update each to shard s, at its upper (not
-- in pg_temp: it outlives the \c below)
CREATE FUNCTION public.progress_appends(s text, n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	u bigint;
BEGIN
	FOR i IN 1..n LOOP
		u := persist_sink.shard_upper(s);
		PERFORM persist_sink.compare_and_append(s, ARRAY['k' || u], ARRAY['v'], ARRAY[u],
												'{1}', u, u + 1);
	END LOOP;
END
$$;

--
-- compaction_progress
--
SELECT attname, format_type(atttypid, atttypmod) AS type
FROM pg_attribute WHERE attrelid = 'compaction_progress'::regclass AND attnum > 0
ORDER BY attnum;
SELECT count(*) AS merges FROM compaction_progress;

-- readable by persist_sink_reader only, as stats: a role without it is
-- refused, even with USAGE on the schema
CREATE ROLE regress_ps_progress_nobody;
GRANT USAGE ON SCHEMA persist_sink TO regress_ps_progress_nobody;
CREATE ROLE regress_ps_progress_reader IN ROLE persist_sink_reader;
SET ROLE regress_ps_progress_nobody;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.compaction_progress$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.compaction_progress()$$);
RESET ROLE;
-- and EXECUTE granted directly does not make it a reader
GRANT EXECUTE ON FUNCTION compaction_progress() TO regress_ps_progress_nobody;
SET ROLE regress_ps_progress_nobody;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.compaction_progress()$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION compaction_progress() FROM regress_ps_progress_nobody;
SET ROLE regress_ps_progress_reader;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.compaction_progress$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.compaction_progress()$$);
RESET ROLE;
REVOKE USAGE ON SCHEMA persist_sink FROM regress_ps_progress_nobody;
DROP ROLE regress_ps_progress_nobody, regress_ps_progress_reader;

-- no row once a compact() returned
SELECT create_shard('pg_merged');
SELECT progress_appends('pg_merged', 3);
SELECT compact('pg_merged');
SELECT count(*) AS merges FROM compaction_progress;

-- nor once a compact() whose merge meets a damaged part failed (here in a
-- subtransaction, so the session goes on)
SELECT create_shard('pg_damaged');
SET persist_sink.inline_max_bytes = 0;
SELECT progress_appends('pg_damaged', 3);
RESET persist_sink.inline_max_bytes;
UPDATE blob SET data = set_byte(data, 40, get_byte(data, 40) # 255)
WHERE key = (SELECT min(key) FROM blob WHERE starts_with(key, 'pg_damaged/'));
SELECT left(pg_temp.err($$SELECT persist_sink.compact('pg_damaged')$$), 5) AS compact;
SELECT count(*) AS merges FROM compaction_progress;
SELECT drop_shard('pg_damaged');

--
-- debt_batches and runs, the last columns of shards
--
SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute
WHERE attrelid = 'shards'::regclass AND attnum > 9;
SELECT create_shard('pg_debt');
-- 5 small batches: fewer than 8 of one tier, and fewer than slowdown_batches
SELECT progress_appends('pg_debt', 5);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
-- 10: their 8 or more of tier 0 would be merged into one
SELECT progress_appends('pg_debt', 5);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
SELECT compact('pg_debt');
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
-- a batch of a higher tier (64kB or more) stays out of the merge of the 8
-- small batches after it
SELECT compare_and_append('pg_debt',
	ARRAY(SELECT md5(i::text) FROM generate_series(1, 20000) i),
	ARRAY(SELECT md5((-i)::text) FROM generate_series(1, 20000) i),
	array_fill(shard_upper('pg_debt'), ARRAY[20000]), array_fill(1::bigint, ARRAY[20000]),
	shard_upper('pg_debt'), shard_upper('pg_debt') + 1) > 0 AS appended;
SELECT encoded_bytes >= 65536 AS tier_1_or_more FROM batches('pg_debt') ORDER BY lower DESC LIMIT 1;
SELECT progress_appends('pg_debt', 7);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
SELECT progress_appends('pg_debt', 1);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
SELECT compact('pg_debt');
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';

-- from persist_sink.slowdown_batches on, the compactor merges the cheapest
-- adjacent batches (8 at most) even with the tiers in order: the debt is
-- what brings the shard back below it
ALTER SYSTEM SET persist_sink.slowdown_batches = 4;
SELECT pg_reload_conf();
\c
SET search_path = persist_sink, public;
SHOW persist_sink.slowdown_batches;
SELECT progress_appends('pg_debt', 2);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
SELECT progress_appends('pg_debt', 2);
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
SELECT compact('pg_debt');
SELECT batches, debt_batches FROM shards WHERE name = 'pg_debt';
ALTER SYSTEM RESET persist_sink.slowdown_batches;

SELECT drop_shard('pg_debt');
SELECT drop_shard('pg_merged');
DROP FUNCTION public.progress_appends(text, int);
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
