--
-- read: snapshot and listen at many times, since, and compact.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

\i sql/include/st.psql

-- Blob rows of a shard.
CREATE FUNCTION pg_temp.blobs(s text) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, s || '/')
$$;

-- A snapshot as one line of text, for display.
CREATE FUNCTION pg_temp.line(s text, as_of bigint) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s=%s@%s%s%s', encode(key, 'escape'), encode(val, 'escape'),
									  "time", CASE WHEN diff > 0 THEN '+' END, diff), ' '
							   ORDER BY key, val), '')
	FROM persist_sink.snapshot(s, as_of)
$$;

\i sql/include/digest.psql

-- Digests of the snapshots as of lo to hi.
CREATE FUNCTION pg_temp.digests(s text, lo bigint, hi bigint) RETURNS text LANGUAGE sql AS $$
	SELECT string_agg(a || ':' || pg_temp.digest(s, a), ' ' ORDER BY a)
	FROM generate_series(lo, hi) a
$$;


--
-- a new shard has nothing to read: its snapshot has no rows
--
SELECT create_shard('r1');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', 0)$$);
SELECT count(*) FROM listen('r1', 0);

--
-- time travel
--
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('r1', '{a,b,c}'::text[], '{1,1,1}'::text[], '{0,1,2}', '{1,1,2}', 0, 3);
SELECT compare_and_append('r1', '{a,a,c}'::text[], '{1,2,1}'::text[], '{3,3,5}', '{-1,1,-1}', 3, 6);
SELECT compare_and_append('r1', '{b,d,e}'::text[], '{1,1,1}'::text[], '{6,9,7}', '{-1,1,-1}', 6, 10);
SELECT compare_and_append('r1', '{}'::text[], '{}'::text[], '{}', '{}', 10, 12);
RESET persist_sink.inline_max_bytes;
SELECT lower, upper, since, parts, updates, inline FROM batches('r1');
SELECT pg_temp.blobs('r1') AS blob_rows;
-- every as_of: consolidated, times advanced to as_of, no zero diffs
SELECT a AS as_of, pg_temp.line('r1', a) FROM generate_series(0, 11) a;
SELECT count(*) FROM generate_series(0, 11) a, snapshot('r1', a) s WHERE s."time" <> a OR s.diff = 0;
-- the default as_of is upper - 1
SELECT pg_temp.line('r1', NULL) = pg_temp.line('r1', 11) AS default_is_upper_minus_1;
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, "time", diff
FROM snapshot('r1') ORDER BY key, val;
-- as_of >= upper: PS002; as_of < since: PS003
SELECT * FROM snapshot('r1', 12);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', 12)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', 9223372036854775807)$$);
SELECT * FROM snapshot('r1', -1);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', -1)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', -9223372036854775808)$$);

--
-- listen: as_of < time < until, times kept
--
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, "time", diff
FROM listen('r1', 0) ORDER BY "time", key, val;
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, "time", diff
FROM listen('r1', 2, 6) ORDER BY "time", key, val;
SELECT encode(key, 'escape') AS key, "time", diff FROM listen('r1', 5, 7) ORDER BY "time", key;
SELECT count(*) FROM listen('r1', 3, 4);
SELECT count(*) FROM listen('r1', 3, 3);
SELECT count(*) FROM listen('r1', 5, 2);
SELECT count(*) FROM listen('r1', 9);
SELECT count(*) FROM listen('r1', 11);
SELECT count(*) FROM listen('r1', 100);
SELECT count(*) FROM listen('r1', 9223372036854775807);
SELECT (SELECT count(*) FROM listen('r1', 0, NULL)) AS until_null,
	   (SELECT count(*) FROM listen('r1', 0, 12)) AS until_upper;
-- until may not pass upper: PS002
SELECT * FROM listen('r1', 0, 13);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', 0, 13)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', 20, 9223372036854775807)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', NULL)$$);
-- as_of = since - 1 ("nothing seen yet") is everything; below it, PS003
SELECT (SELECT count(*) FROM listen('r1', -1)) = (SELECT count(*) FROM listen('r1', 0))
	   + (SELECT count(*) FROM listen('r1', -1) WHERE "time" = 0) AS from_since_is_all;
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', -2)$$);
-- a snapshot as of t plus a listen from t is the whole history
SELECT a AS as_of,
	   (SELECT sum(diff) FROM snapshot('r1', a)) + coalesce((SELECT sum(diff) FROM listen('r1', a)), 0) AS total
FROM generate_series(0, 11) a;

--
-- since
--
SELECT pg_temp.digests('r1', 4, 11) AS digests_before \gset
SELECT pg_temp.listen_digest('r1', 4) AS listen_before \gset
SELECT downgrade_since('r1', 4);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', 3)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', 2)$$);
-- listen from since - 1: the history before since shown at since, summed,
-- the rest at its times; the same before and after compaction (below)
SELECT pg_temp.listen_digest('r1', 3) AS listen_from_since \gset
SELECT (SELECT count(*) FROM listen('r1', 3) WHERE "time" < 4) AS below_since,
	   (SELECT coalesce(sum(diff), 0) FROM listen('r1', 3) WHERE "time" = 4)
	   = (SELECT coalesce(sum(diff), 0) FROM snapshot('r1', 4)) AS at_since_is_snapshot;
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('r1', 0, 5)$$);
SELECT pg_temp.digests('r1', 4, 11) = :'digests_before' AS same_snapshots;
SELECT pg_temp.listen_digest('r1', 4) = :'listen_before' AS same_listen;

--
-- compact: one batch, the same content as of every time >= since
--
SELECT pg_temp.st('r1') AS before \gset
SELECT seqno AS seqno_before FROM shards WHERE name = 'r1' \gset
-- rolled back, it changes nothing
BEGIN;
SELECT compact('r1');
SELECT lower, upper, since, parts, updates, inline FROM batches('r1');
ROLLBACK;
SELECT pg_temp.st('r1') = :'before' AS unchanged;
SELECT * FROM verify('r1');
SELECT compact('r1');
SELECT lower, upper, since, parts, updates, inline FROM batches('r1');
SELECT seqno - :seqno_before AS new_seqnos, upper, since, batches, parts, updates
FROM shards WHERE name = 'r1';
-- the old parts' blob rows are gone
SELECT pg_temp.blobs('r1') AS blob_rows;
SELECT pg_temp.digests('r1', 4, 11) = :'digests_before' AS same_snapshots;
SELECT pg_temp.listen_digest('r1', 4) = :'listen_before' AS same_listen;
SELECT pg_temp.listen_digest('r1', 3) = :'listen_from_since' AS same_listen_from_since;
SELECT a AS as_of, pg_temp.line('r1', a) FROM generate_series(4, 11) a;
SELECT * FROM verify('r1');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r1', 3)$$);
-- compacting a compact shard is a no-op
SELECT pg_temp.st('r1') AS before \gset
SELECT compact('r1');
SELECT pg_temp.st('r1') = :'before' AS unchanged;
-- writes after a compaction, then since and compaction again
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('r1', '{a,f}'::text[], '{2,1}'::text[], '{12,13}', '{-1,1}', 12, 14);
RESET persist_sink.inline_max_bytes;
SELECT pg_temp.digests('r1', 8, 13) AS digests_before \gset
SELECT downgrade_since('r1', 8);
SELECT compact('r1');
SELECT lower, upper, since, parts, updates, inline FROM batches('r1');
SELECT pg_temp.digests('r1', 8, 13) = :'digests_before' AS same_snapshots;
SELECT a AS as_of, pg_temp.line('r1', a) FROM generate_series(8, 13) a;
SELECT pg_temp.blobs('r1') AS blob_rows, parts, inline_bytes > 0 AS inline FROM shards WHERE name = 'r1';
SELECT * FROM verify('r1');

--
-- compact of many parts
--
SELECT create_shard('r2');
SET persist_sink.blob_target_size = '1kB';
SET persist_sink.inline_max_bytes = '1kB';
SELECT compare_and_append('r2',
	ARRAY(SELECT convert_to('k' || (i % 500), 'UTF8') FROM generate_series(1, 1000) i),
	ARRAY(SELECT convert_to('v' || (i % 3), 'UTF8') FROM generate_series(1, 1000) i),
	ARRAY(SELECT (i % 10)::bigint FROM generate_series(1, 1000) i),
	array_fill(1::bigint, ARRAY[1000]), 0, 10);
SELECT compare_and_append('r2',
	ARRAY(SELECT convert_to('k' || (i % 500), 'UTF8') FROM generate_series(1, 1000) i),
	ARRAY(SELECT convert_to('v' || (i % 3), 'UTF8') FROM generate_series(1, 1000) i),
	ARRAY(SELECT (10 + i % 10)::bigint FROM generate_series(1, 1000) i),
	array_fill(-1::bigint, ARRAY[1000]), 10, 20);
SELECT compare_and_append('r2',
	ARRAY(SELECT convert_to('k' || i, 'UTF8') FROM generate_series(1, 700) i),
	ARRAY(SELECT convert_to('w', 'UTF8') FROM generate_series(1, 700) i),
	ARRAY(SELECT (20 + i % 5)::bigint FROM generate_series(1, 700) i),
	array_fill(3::bigint, ARRAY[700]), 20, 25);
SELECT lower, upper, since, parts > 1 AS several_parts, updates, inline FROM batches('r2');
SELECT pg_temp.blobs('r2') = parts AS one_row_per_part FROM shards WHERE name = 'r2';
SELECT a AS as_of, count(*), sum(diff) FROM generate_series(0, 24, 3) a, snapshot('r2', a) GROUP BY a ORDER BY a;
SELECT pg_temp.digests('r2', 9, 24) AS digests_before \gset
SELECT downgrade_since('r2', 9);
SELECT compact('r2');
RESET persist_sink.blob_target_size;
RESET persist_sink.inline_max_bytes;
SELECT lower, upper, since, parts > 1 AS several_parts, updates, inline FROM batches('r2');
SELECT pg_temp.blobs('r2') = parts AS one_row_per_part FROM shards WHERE name = 'r2';
SELECT pg_temp.digests('r2', 9, 24) = :'digests_before' AS same_snapshots;
SELECT a AS as_of, count(*), sum(diff) FROM generate_series(9, 24, 3) a, snapshot('r2', a) GROUP BY a ORDER BY a;
SELECT * FROM verify('r2');

--
-- compact after retracting everything leaves nothing
--
SELECT create_shard('r3');
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('r3', ARRAY(SELECT 'k' || i FROM generate_series(1, 100) i),
	ARRAY(SELECT 'v' FROM generate_series(1, 100) i), array_fill(0::bigint, ARRAY[100]),
	array_fill(1::bigint, ARRAY[100]), 0, 1);
SELECT compare_and_append('r3', ARRAY(SELECT 'k' || i FROM generate_series(1, 100) i),
	ARRAY(SELECT 'v' FROM generate_series(1, 100) i), array_fill(1::bigint, ARRAY[100]),
	array_fill(-1::bigint, ARRAY[100]), 1, 2);
RESET persist_sink.inline_max_bytes;
SELECT pg_temp.blobs('r3') AS blob_rows;
SELECT count(*) FROM snapshot('r3', 0);
SELECT count(*) FROM snapshot('r3', 1);
-- without a since the history is kept
SELECT compact('r3');
SELECT name, since, batches, parts, updates FROM shards WHERE name = 'r3';
SELECT count(*) FROM snapshot('r3', 0);
SELECT downgrade_since('r3', 1);
SELECT compact('r3');
SELECT name, upper, since, batches, parts, updates, inline_bytes, blob_bytes FROM shards WHERE name = 'r3';
SELECT lower, upper, since, parts, updates, inline FROM batches('r3');
SELECT count(DISTINCT key) AS blob_rows FROM blob WHERE key LIKE 'r3/%';
SELECT count(*) FROM snapshot('r3');
SELECT * FROM verify('r3');
-- and the shard goes on
SELECT compare_and_append('r3', '{z}'::text[], '{z}'::text[], '{2}', '{1}', 2, 3);
SELECT pg_temp.line('r3', 2);
-- compacting an empty shard is a no-op
SELECT create_shard('r3e');
SELECT compact('r3e');
SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates, debt_batches, runs,
	owner = current_user::regrole AS mine, privileges
FROM shards WHERE name = 'r3e';

--
-- diffs that overflow when summed: reads that sum them get 22003 naming the
-- key and val (sql/overflow.sql has more)
--
SELECT create_shard('r4');
SELECT compare_and_append('r4', '{k}'::text[], '{v}'::text[], '{0}', '{9223372036854775807}', 0, 1);
SELECT compare_and_append('r4', '{k}'::text[], '{v}'::text[], '{1}', '{9223372036854775807}', 1, 2);
SELECT pg_temp.line('r4', 0);
SELECT * FROM snapshot('r4', 1);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r4', 1)$$);
SELECT "time", diff FROM listen('r4', 0);
SELECT downgrade_since('r4', 1);
-- compaction advances both to time 1, where they sum past bigint: the
-- merged batch keeps that sum as two updates of (k, v, 1), in two parts
SELECT compact('r4');
SELECT lower, upper, since, parts, updates FROM batches('r4');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r4', 1)$$);
SELECT * FROM verify('r4');
-- only the total counts, not the order of summing
SELECT create_shard('r5');
SELECT compare_and_append('r5', '{k}'::text[], '{v}'::text[], '{0}', '{9223372036854775807}', 0, 1);
SELECT compare_and_append('r5', '{k}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
SELECT compare_and_append('r5', '{k}'::text[], '{v}'::text[], '{2}', '{-1}', 2, 3);
SELECT compare_and_append('r5', '{k,k,k,k}'::text[], '{x,x,x,x}'::text[], '{3,3,3,3}',
	'{1,9223372036854775807,-1,-9223372036854775807}', 3, 4);
SELECT compare_and_append('r5', '{k,k,k}'::text[], '{x,x,x}'::text[], '{4,4,4}',
	'{1,9223372036854775807,-1}', 4, 5);
SELECT compare_and_append('r5', '{k}'::text[], '{x}'::text[], '{5}', '{-9223372036854775807}', 5, 6);
SELECT a AS as_of, pg_temp.line('r5', a) FROM generate_series(0, 5) a WHERE a <> 1;
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('r5', 1)$$);
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, "time", diff
FROM listen('r5', 0) ORDER BY "time";
SELECT lower, upper, since, parts, updates FROM batches('r5');
SELECT downgrade_since('r5', 2);
SELECT compact('r5');
SELECT a AS as_of, pg_temp.line('r5', a) FROM generate_series(2, 5) a;
SELECT lower, upper, since, parts, updates FROM batches('r5');
SELECT downgrade_since('r5', 5);
SELECT compact('r5');
SELECT pg_temp.line('r5', 5);
SELECT lower, upper, since, parts, updates FROM batches('r5');

-- Keys around 8 bytes, where a merge compares key prefixes before whole
-- keys: spread over three blob batches, they come out in bytea order.
SELECT create_shard('r6');
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('r6', ARRAY['\x'::bytea, '\x6162636465666768ff', '\x61'],
	ARRAY['\x76'::bytea, '\x76', '\x76'], '{0,0,0}', '{1,1,1}', 0, 1);
SELECT compare_and_append('r6', ARRAY['\x6162636465666768'::bytea, '\x6100', '\x616263646566676700'],
	ARRAY['\x76'::bytea, '\x76', '\x76'], '{1,1,1}', '{1,1,1}', 1, 2);
SELECT compare_and_append('r6', ARRAY['\x616263646566676800'::bytea, '\x00', '\x6162636465666769'],
	ARRAY['\x76'::bytea, '\x76', '\x76'], '{2,2,2}', '{1,1,1}', 2, 3);
RESET persist_sink.inline_max_bytes;
SELECT count(*) AS blob_batches FROM batches('r6') WHERE NOT inline;
SELECT string_agg(encode(key, 'hex'), ' ') AS keys_in_snapshot_order FROM snapshot('r6');
SELECT string_agg(encode(key, 'hex'), ' ' ORDER BY key) AS keys_in_bytea_order FROM snapshot('r6');
SELECT compact('r6');
SELECT string_agg(encode(key, 'hex'), ' ') AS keys_after_compact FROM snapshot('r6');

-- Runs of equal updates that span parts: a merge sums them while the parts
-- they came from are exhausted, and loads later parts meanwhile.  Vals are
-- above 8 kB, so each decoded part is its own malloc'd block and a read of
-- a freed part shows under valgrind.
SELECT create_shard('r7');
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('r7', ARRAY['a', 'm'], ARRAY[repeat('1', 9000), repeat('m', 9000)],
	'{0,0}', '{1,1}', 0, 1);
SELECT compare_and_append('r7', ARRAY['m'], ARRAY[repeat('m', 9000)], '{1}', '{1}', 1, 2);
SELECT compare_and_append('r7', ARRAY['m', 'n'], ARRAY[repeat('m', 9000), repeat('3', 9000)],
	'{2,2}', '{1,1}', 2, 3);
SELECT compare_and_append('r7', ARRAY['n', 'z'], ARRAY[repeat('3', 9000), repeat('4', 9000)],
	'{3,3}', '{-1,1}', 3, 4);
RESET persist_sink.inline_max_bytes;
SELECT encode(key, 'escape') AS key, left(encode(val, 'escape'), 1) AS val_char,
	   length(val) AS val_len, rtrim(encode(val, 'escape'), left(encode(val, 'escape'), 1)) = '' AS uniform,
	   "time", diff FROM snapshot('r7');
SELECT downgrade_since('r7', 3);
SELECT compact('r7');
SELECT encode(key, 'escape') AS key, left(encode(val, 'escape'), 1) AS val_char,
	   length(val) AS val_len, rtrim(encode(val, 'escape'), left(encode(val, 'escape'), 1)) = '' AS uniform,
	   "time", diff FROM snapshot('r7', 3);
SELECT lower, upper, since, parts, updates FROM batches('r7');

SELECT name, (SELECT count(*) FROM verify(name)) AS problems FROM shards
WHERE name LIKE 'r%' ORDER BY name COLLATE "C";

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
