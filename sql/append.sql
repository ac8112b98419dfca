--
-- append: the sink's SQL surface.  Times, sizes and blob keys vary from run
-- to run, so they are never printed: only booleans and counts computed from
-- them are.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
SET search_path = persist_sink, public;

\i sql/include/err.psql

-- Runs q and reports only its SQLSTATE ('ok' if it succeeded).
CREATE FUNCTION pg_temp.code(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;

-- Milliseconds since the Unix epoch, now.
CREATE FUNCTION pg_temp.now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

\i sql/include/st.psql

-- A shard's content, without its (varying) time.
CREATE FUNCTION pg_temp.show(s text)
RETURNS TABLE(key text, val text, diff bigint) LANGUAGE sql AS $$
	SELECT encode(key, 'escape'), encode(val, 'escape'), diff
	FROM persist_sink.snapshot(s) ORDER BY key, val
$$;

-- Rows and total diff of a shard's content.
CREATE FUNCTION pg_temp.total(s text) RETURNS text LANGUAGE sql AS $$
	SELECT format('rows=%s diffs=%s', count(*), coalesce(sum(diff), 0))
	FROM persist_sink.snapshot(s)
$$;

-- A shard's sink counters.
CREATE FUNCTION pg_temp.counters(s text,
	OUT appends bigint, OUT updates bigint, OUT shared_writes bigint,
	OUT own_writes bigint, OUT parts_written bigint, OUT inline_batches bigint)
LANGUAGE sql AS $$
	SELECT coalesce(max(appends), 0), coalesce(max(updates), 0),
		   coalesce(max(shared_writes), 0), coalesce(max(own_writes), 0),
		   coalesce(max(parts_written), 0), coalesce(max(inline_batches), 0)
	FROM persist_sink.stats WHERE shard = s
$$;

--
-- the text and bytea overloads; the time is epoch milliseconds
--
SELECT create_shard('ap1');
SELECT pg_temp.now_ms() AS before_ms \gset
SELECT append('ap1', '{a,b}'::text[], '{1,2}'::text[], '{1,2}') AS t1 \gset
SELECT pg_temp.now_ms() AS after_ms \gset
-- within a second of the wall clock around the call
SELECT :t1 >= :before_ms - 1000 AND :t1 <= :after_ms + 1000 AS epoch_ms;
SELECT shard_upper('ap1') = :t1 + 1 AS upper_is_time_plus_1;
SELECT append('ap1', ARRAY['\x63'::bytea, '\x00ff'::bytea], ARRAY['\x33'::bytea, '\x'::bytea], '{3,4}') AS t2 \gset
SELECT :t2 > :t1 AS increasing;
SELECT shard_upper('ap1') = :t2 + 1 AS upper_is_time_plus_1;
SELECT append('ap1', '{a}'::text[], '{1}'::text[], '{5}') AS t3 \gset
SELECT :t3 > :t2 AS increasing;
SELECT shard_upper('ap1') = :t3 + 1 AS upper_is_time_plus_1;
-- the snapshot sees every row, at time upper - 1; text and bytea are the same bytes
SELECT * FROM pg_temp.show('ap1');
SELECT bool_and("time" = :t3) AS advanced_to_last_time FROM snapshot('ap1');
SELECT key, val, diff FROM snapshot('ap1') WHERE key = '\x00ff'::bytea;
-- the updates were written at the times append returned
SELECT array_agg(DISTINCT "time" ORDER BY "time") = ARRAY[:t1, :t2, :t3]::bigint[] AS listen_times
FROM listen('ap1', 0);
SELECT count(*) FILTER (WHERE "time" = :t1) AS at_t1, count(*) FILTER (WHERE "time" = :t2) AS at_t2,
	   count(*) FILTER (WHERE "time" = :t3) AS at_t3
FROM listen('ap1', 0);
-- the text overload and the bytea one consolidate with each other
SELECT append('ap1', ARRAY['\x62'::bytea], ARRAY['\x32'::bytea], '{-2}') > :t3 AS increasing;
SELECT * FROM pg_temp.show('ap1');
-- updates of one write with equal (key, val) are summed; zeros are dropped
SELECT append('ap1', '{d,d,e,e,a}'::text[], '{4,4,5,5,1}'::text[], '{2,3,1,-1,-5}') > 0 AS ok;
SELECT * FROM pg_temp.show('ap1');
-- extreme diffs are fine as long as each total fits
SELECT append('ap1', '{m,m,m}'::text[], '{x,x,x}'::text[],
	'{9223372036854775807,-9223372036854775808,9223372036854775807}') > 0 AS ok;
SELECT key, val, diff FROM pg_temp.show('ap1') WHERE key = 'm';
SELECT append('ap1', '{m}'::text[], '{x}'::text[], '{-9223372036854775807}') > 0 AS ok;
SELECT * FROM pg_temp.show('ap1');
SELECT * FROM verify('ap1');

--
-- append is not part of the caller's transaction
--
SELECT create_shard('ap_tx');
BEGIN;
SELECT append('ap_tx', '{r1}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
ROLLBACK;
SELECT * FROM pg_temp.show('ap_tx');
BEGIN;
SELECT append('ap_tx', '{r2}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
SELECT 1 / 0;
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT append('ap_tx', '{r3}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
ROLLBACK TO SAVEPOINT s;
SELECT append('ap_tx', '{r4}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
COMMIT;
-- a function whose error is caught: the append stays
DO $$
BEGIN
	PERFORM persist_sink.append('ap_tx', '{r5}'::text[], '{v}'::text[], '{1}');
	RAISE EXCEPTION 'boom';
EXCEPTION WHEN raise_exception THEN
	NULL;
END
$$;
SELECT * FROM pg_temp.show('ap_tx');
-- several appends in one transaction each get their own, increasing time
BEGIN;
SELECT append('ap_tx', '{r6}'::text[], '{v}'::text[], '{1}') AS ta \gset
SELECT append('ap_tx', '{r7}'::text[], '{v}'::text[], '{1}') AS tb \gset
SELECT :tb > :ta AS increasing;
COMMIT;
SELECT shard_upper('ap_tx') = :tb + 1 AS upper_is_time_plus_1;
SELECT pg_temp.total('ap_tx');

--
-- errors, each with its SQLSTATE; none changes the shard
--
SELECT pg_temp.st('ap1') AS before \gset
SELECT pg_temp.total('ap1') AS before_content \gset
-- NULL arguments and NULL elements: 22004
SELECT pg_temp.err($$SELECT persist_sink.append(NULL, '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', NULL::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::text[], NULL::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::text[], '{x}'::text[], NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', NULL::bytea[], '{x}'::bytea[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::bytea[], NULL::bytea[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,NULL}'::text[], '{x,y}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{NULL,y}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{x,y}'::text[], '{1,NULL}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', ARRAY[NULL::bytea], ARRAY['\x00'::bytea], '{1}')$$);
SELECT pg_temp.st('ap1') = :'before' AS unchanged;
-- lengths and dimensions: 2202E
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{x}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::text[], '{x,y}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{x,y}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::text[], '{x}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x}'::text[], '{x}'::text[], '{}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{{x},{y}}'::text[], '{x,y}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{{x,y}}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{x,y}'::text[], '{{1},{1}}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{{x}}'::bytea[], '{{x}}'::bytea[], '{{1}}')$$);
SELECT pg_temp.st('ap1') = :'before' AS unchanged;
-- keys and vals of different types: no such function, 42883
SELECT pg_temp.code($$SELECT persist_sink.append('ap1', '{x}'::text[], '{x}'::bytea[], '{1}')$$);
-- shard names: 42602; an unknown shard: 42704
SELECT pg_temp.err($$SELECT persist_sink.append('', '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1/x', '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append(E'ap\t1', '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.code($$SELECT persist_sink.append(repeat('x', 201), '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap_nope', '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.code($$SELECT persist_sink.append(repeat('y', 200), '{x}'::text[], '{x}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap_nope', '{}'::text[], '{}'::text[], '{}')$$);
SELECT count(*) AS unknown_shards FROM shards WHERE name IN ('ap_nope', repeat('y', 200));
-- diffs whose sum overflows: 22003
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{k,k}'::text[], '{v,v}'::text[],
	'{9223372036854775807,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{k,k,k}'::bytea[], '{v,v,v}'::bytea[],
	'{-9223372036854775808,-1,0}')$$);
SELECT pg_temp.st('ap1') = :'before' AS unchanged;
SELECT pg_temp.total('ap1') = :'before_content' AS content_unchanged;
-- the same errors on the own-part path (sharing disabled)
SET persist_sink.shared_batch_max_bytes = 0;
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{x,y}'::text[], '{x}'::text[], '{1,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap1', '{k,k}'::text[], '{v,v}'::text[],
	'{9223372036854775807,1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('ap_nope', '{x}'::text[], '{x}'::text[], '{1}')$$);
RESET persist_sink.shared_batch_max_bytes;
SELECT pg_temp.st('ap1') = :'before' AS unchanged;
-- after all these errors the sink still works
SELECT append('ap1', '{after}'::text[], '{errors}'::text[], '{1}') > :t3 AS ok;
SELECT key, val, diff FROM pg_temp.show('ap1') WHERE key = 'after';
SELECT * FROM verify('ap1');

--
-- empty writes still return a time and move upper
--
SELECT create_shard('ap_empty');
SELECT append('ap_empty', '{}'::text[], '{}'::text[], '{}') AS e1 \gset
SELECT :e1 > 0 AS has_time, shard_upper('ap_empty') = :e1 + 1 AS upper_is_time_plus_1;
SELECT append('ap_empty', '{}'::bytea[], '{}'::bytea[], '{}') AS e2 \gset
SELECT :e2 > :e1 AS increasing, shard_upper('ap_empty') = :e2 + 1 AS upper_is_time_plus_1;
-- a write that consolidates to nothing
SELECT append('ap_empty', '{z,z}'::text[], '{1,1}'::text[], '{3,-3}') AS e3 \gset
SELECT :e3 > :e2 AS increasing, shard_upper('ap_empty') = :e3 + 1 AS upper_is_time_plus_1;
-- and the same with sharing disabled
SET persist_sink.shared_batch_max_bytes = 0;
SELECT append('ap_empty', '{}'::text[], '{}'::text[], '{}') AS e4 \gset
SELECT :e4 > :e3 AS increasing, shard_upper('ap_empty') = :e4 + 1 AS upper_is_time_plus_1;
RESET persist_sink.shared_batch_max_bytes;
SELECT count(*) AS rows FROM snapshot('ap_empty');
SELECT sum(updates) AS updates FROM batches('ap_empty');
SELECT count(DISTINCT key) AS blobs FROM blob WHERE starts_with(key, 'ap_empty/');
SELECT * FROM verify('ap_empty');

--
-- shared batch vs own part: persist_sink.shared_batch_max_bytes and the stats
--
SELECT create_shard('ap_stats');
SHOW persist_sink.shared_batch_max_bytes;
SELECT * FROM pg_temp.counters('ap_stats') \gset b_
-- default: a small write joins the shared batch, which stays inline
SELECT append('ap_stats', '{s1,s2,s3}'::text[], '{v,v,v}'::text[], '{1,1,1}') > 0 AS ok;
SELECT * FROM pg_temp.counters('ap_stats') \gset a_
SELECT :a_appends - :b_appends = 1 AS one_append,
	   :a_updates - :b_updates = 3 AS three_updates,
	   :a_shared_writes - :b_shared_writes = 1 AS shared,
	   :a_own_writes - :b_own_writes = 0 AS not_own,
	   :a_parts_written - :b_parts_written = 1 AS one_part,
	   :a_inline_batches - :b_inline_batches = 1 AS inline;
-- 0 disables sharing: every write is its own part (a blob, never inline)
SET persist_sink.shared_batch_max_bytes = 0;
SELECT append('ap_stats', '{o1,o2,o3}'::text[], '{v,v,v}'::text[], '{1,1,1}') > 0 AS ok;
SELECT * FROM pg_temp.counters('ap_stats') \gset b_
SELECT :b_appends - :a_appends = 1 AS one_append,
	   :b_updates - :a_updates = 3 AS three_updates,
	   :b_shared_writes - :a_shared_writes = 0 AS not_shared,
	   :b_own_writes - :a_own_writes = 1 AS own,
	   :b_parts_written - :a_parts_written = 1 AS one_part,
	   :b_inline_batches - :a_inline_batches = 0 AS not_inline;
-- back to the default: shared again, without reconnecting
RESET persist_sink.shared_batch_max_bytes;
SELECT append('ap_stats', '{s4}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
SELECT * FROM pg_temp.counters('ap_stats') \gset a_
SELECT :a_appends - :b_appends = 1 AS one_append,
	   :a_shared_writes - :b_shared_writes = 1 AS shared,
	   :a_own_writes - :b_own_writes = 0 AS not_own;
-- a write above the threshold is its own part; one below joins the shared batch
SET persist_sink.shared_batch_max_bytes = '1kB';
SELECT append('ap_stats', ARRAY(SELECT 'big' || g FROM generate_series(1, 200) g),
	ARRAY(SELECT md5(g::text) FROM generate_series(1, 200) g),
	array_fill(1::bigint, ARRAY[200])) > 0 AS ok;
SELECT * FROM pg_temp.counters('ap_stats') \gset b_
SELECT :b_appends - :a_appends = 1 AS one_append,
	   :b_updates - :a_updates = 200 AS updates_200,
	   :b_shared_writes - :a_shared_writes = 0 AS not_shared,
	   :b_own_writes - :a_own_writes = 1 AS own,
	   :b_parts_written - :a_parts_written = 1 AS one_part;
SELECT append('ap_stats', '{tiny}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
SELECT * FROM pg_temp.counters('ap_stats') \gset a_
SELECT :a_shared_writes - :b_shared_writes = 1 AS shared,
	   :a_own_writes - :b_own_writes = 0 AS not_own;
RESET persist_sink.shared_batch_max_bytes;
-- a stats row per shard; appends counts committed intervals
SELECT shard, appends, updates, shared_writes, own_writes, parts_written
FROM stats WHERE shard = 'ap_stats';
SELECT cas_mismatches <= cas_attempts AS mismatches_subset,
	   cas_attempts >= appends AS attempts_cover_appends,
	   state_bytes > 0 AS state_written
FROM stats WHERE shard = 'ap_stats';
SELECT pg_temp.total('ap_stats');
SELECT * FROM verify('ap_stats');

--
-- large writes: blob parts, and several parts with a small blob_target_size
--
SELECT create_shard('ap_big');
SET persist_sink.shared_batch_max_bytes = '1kB';
SELECT append('ap_big', ARRAY(SELECT 'k' || g FROM generate_series(1, 500) g),
	ARRAY(SELECT md5(g::text) FROM generate_series(1, 500) g),
	ARRAY(SELECT g::bigint FROM generate_series(1, 500) g)) AS tb \gset
SELECT count(*) AS batches, sum(parts) AS parts, sum(updates) AS updates,
	   bool_and(NOT inline) AS in_blobs, bool_and(encoded_bytes > 0) AS encoded
FROM batches('ap_big');
SELECT count(DISTINCT key) AS blobs FROM blob WHERE starts_with(key, 'ap_big/');
SELECT count(*) AS rows, sum(diff) AS diffs, bool_and("time" = :tb) AS at_time,
	   count(*) FILTER (WHERE encode(key, 'escape') = 'k' || diff
						AND encode(val, 'escape') = md5(diff::text)) AS exact
FROM snapshot('ap_big');
SELECT * FROM verify('ap_big');
-- several parts: one write, one interval, one batch of many blob parts
-- (checked while the shard has one batch: background compaction merges only
-- two or more)
SELECT create_shard('ap_multi');
SET persist_sink.blob_target_size = '1kB';
SELECT * FROM pg_temp.counters('ap_multi') \gset b_
SELECT append('ap_multi', ARRAY(SELECT 'k' || g FROM generate_series(1, 500) g),
	ARRAY(SELECT md5(g::text) FROM generate_series(1, 500) g),
	ARRAY(SELECT g::bigint FROM generate_series(1, 500) g)) AS tm \gset
SELECT * FROM pg_temp.counters('ap_multi') \gset a_
SELECT count(*) AS batches, sum(parts) > 1 AS several_parts, sum(updates) AS updates,
	   bool_and(NOT inline) AS in_blobs
FROM batches('ap_multi');
SELECT sum(parts) = (SELECT count(DISTINCT key) FROM blob WHERE starts_with(key, 'ap_multi/')) AS a_blob_per_part
FROM batches('ap_multi');
SELECT sum(parts) = :a_parts_written - :b_parts_written AS parts_counted,
	   :a_own_writes - :b_own_writes = 1 AS one_own_write,
	   :a_appends - :b_appends = 1 AS one_append
FROM batches('ap_multi');
SELECT shard_upper('ap_multi') = :tm + 1 AS upper_is_time_plus_1;
SELECT count(*) AS rows, sum(diff) AS diffs, bool_and("time" = :tm) AS at_time,
	   count(*) FILTER (WHERE encode(key, 'escape') = 'k' || diff
						AND encode(val, 'escape') = md5(diff::text)) AS exact
FROM snapshot('ap_multi');
SELECT * FROM verify('ap_multi');
RESET persist_sink.blob_target_size;
RESET persist_sink.shared_batch_max_bytes;
-- a large write with duplicates is consolidated before it is encoded
SET persist_sink.shared_batch_max_bytes = '1kB';
SELECT append('ap_big', ARRAY(SELECT 'k' || (g % 10) FROM generate_series(1, 300) g),
	ARRAY(SELECT md5((g % 10)::text) FROM generate_series(1, 300) g),
	array_fill(-1::bigint, ARRAY[300])) > :tb AS increasing;
RESET persist_sink.shared_batch_max_bytes;
SELECT count(*) AS rows, sum(diff) AS diffs FROM snapshot('ap_big');
SELECT key, diff FROM pg_temp.show('ap_big') WHERE key IN ('k1', 'k9', 'k10', 'k30', 'k31');
SELECT * FROM verify('ap_big');

--
-- append and compare_and_append on one shard
--
SELECT create_shard('ap_mix');
SELECT append('ap_mix', '{a}'::text[], '{1}'::text[], '{1}') AS m1 \gset
-- compare_and_append at the current upper, then append: the sink continues after it
SELECT shard_upper('ap_mix') AS u \gset
SELECT compare_and_append('ap_mix', '{b}'::text[], '{2}'::text[], ARRAY[:u]::bigint[], '{1}', :u, :u + 1) > 0 AS ok;
SELECT append('ap_mix', '{c}'::text[], '{3}'::text[], '{1}') AS m2 \gset
SELECT :m2 >= :u + 1 AS at_or_above_upper, shard_upper('ap_mix') = :m2 + 1 AS upper_is_time_plus_1;
-- compare_and_append at an upper made stale by append: PS001, nothing written
SELECT pg_temp.code(format($$SELECT persist_sink.compare_and_append('ap_mix', '{x}'::text[], '{x}'::text[], '{%s}', '{1}', %s, %s)$$,
	:u + 1, :u + 1, :u + 2));
-- compare_and_append at the upper after the append succeeds
SELECT shard_upper('ap_mix') AS u \gset
SELECT compare_and_append('ap_mix', '{d}'::text[], '{4}'::text[], ARRAY[:u]::bigint[], '{1}', :u, :u + 5) > 0 AS ok;
SELECT append('ap_mix', '{e}'::text[], '{5}'::text[], '{1}') AS m3 \gset
SELECT :m3 >= :u + 5 AS at_or_above_upper, shard_upper('ap_mix') = :m3 + 1 AS upper_is_time_plus_1;
SELECT * FROM pg_temp.show('ap_mix');
SELECT count(*) AS updates, count(DISTINCT "time") AS times FROM listen('ap_mix', 0);
SELECT * FROM verify('ap_mix');
-- an upper in the future: append writes exactly at the upper
SELECT create_shard('ap_future');
SELECT compare_and_append('ap_future', '{f}'::text[], '{0}'::text[], '{0}', '{1}', 0, 4000000000000);
SELECT append('ap_future', '{g}'::text[], '{1}'::text[], '{1}');
SELECT append('ap_future', '{h}'::bytea[], '{2}'::bytea[], '{1}');
SELECT shard_upper('ap_future');
SELECT key, val, "time", diff FROM snapshot('ap_future', 0);
SELECT key, val, "time", diff FROM listen('ap_future', 0) ORDER BY "time", key;
SELECT * FROM verify('ap_future');

--
-- several shards: each has its own times and content
--
SELECT create_shard('ap_s1');
SELECT create_shard('ap_s2');
SELECT append('ap_s1', '{x}'::text[], '{1}'::text[], '{1}') AS x1 \gset
SELECT append('ap_s2', '{y}'::text[], '{1}'::text[], '{1}') AS y1 \gset
SELECT append('ap_s1', '{x}'::text[], '{2}'::text[], '{1}') AS x2 \gset
SELECT append('ap_s2', '{y}'::text[], '{2}'::text[], '{1}') AS y2 \gset
SELECT :x2 > :x1 AND :y2 > :y1 AS increasing,
	   shard_upper('ap_s1') = :x2 + 1 AND shard_upper('ap_s2') = :y2 + 1 AS uppers;
SELECT * FROM pg_temp.show('ap_s1');
SELECT * FROM pg_temp.show('ap_s2');

--
-- privileges: persist_sink_writer may append, PUBLIC may not
--
CREATE ROLE regress_ap_writer;
CREATE ROLE regress_ap_nobody;
GRANT persist_sink_writer TO regress_ap_writer;
SELECT grant_shard('ap_s1', 'persist_sink_writer', 'append');
SET ROLE regress_ap_writer;
SELECT persist_sink.append('ap_s1', '{w}'::text[], '{1}'::text[], '{1}') > 0 AS ok;
SET ROLE regress_ap_nobody;
SELECT pg_temp.code($$SELECT persist_sink.append('ap_s1', '{n}'::text[], '{1}'::text[], '{1}')$$);
RESET ROLE;
SELECT * FROM pg_temp.show('ap_s1');
DROP ROLE regress_ap_writer;
DROP ROLE regress_ap_nobody;

--
-- a transaction that holds the shard's state row (an uncommitted
-- compare_and_append) cannot wait for append: it must get an error rather
-- than wait forever (statement_timeout only bounds this test), and the shard
-- stays as it was
--
SELECT create_shard('ap_held');
SELECT append('ap_held', '{before}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
SET statement_timeout = '5s';
BEGIN;
SELECT shard_upper('ap_held') AS u \gset
SELECT compare_and_append('ap_held', '{cas}'::text[], '{v}'::text[], ARRAY[:u]::bigint[], '{1}', :u, :u + 1) > 0 AS ok;
SELECT pg_temp.code($$SELECT persist_sink.append('ap_held', '{held}'::text[], '{v}'::text[], '{1}')$$)
	NOT IN ('ok', '57014') AS refused;
ROLLBACK;
RESET statement_timeout;
SELECT append('ap_held', '{after}'::text[], '{v}'::text[], '{1}') > 0 AS ok;
SELECT * FROM pg_temp.show('ap_held');
SELECT * FROM verify('ap_held');
