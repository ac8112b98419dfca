--
-- fdw_reads: how a shard's foreign table reads.  Scans stream (a LIMIT,
-- an EXISTS or a cursor stops reading where the query does); count(*),
-- sum, min and max over the whole table are computed by the wrapper, from
-- the state alone when that is exact, else from a merge.  Every shortcut
-- is checked against the plain scan: the same query over the table in a
-- subquery that PostgreSQL does not flatten (OFFSET 0) aggregates the
-- scan's rows itself.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql
SET search_path = public, persist_sink;

-- The lines of a query's EXPLAIN ANALYZE that match pattern
CREATE FUNCTION pg_temp.explained(query text, pattern text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	line text;
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || query
	LOOP
		IF line ~ pattern THEN
			RETURN NEXT btrim(line);
		END IF;
	END LOOP;
END $$;

--
-- Streaming: ten appends whose keys follow one another, ten parts
--
SELECT create_shard('rd');
SELECT count(*) AS appends FROM (
	SELECT append('rd', array_agg(convert_to('k' || lpad(c::text, 2, '0') || '-' || lpad(g::text, 4, '0'), 'UTF8')),
				  array_agg(convert_to('v' || g, 'UTF8')), array_agg(1::bigint))
		FROM generate_series(1, 10) c, generate_series(1, 500) g GROUP BY c ORDER BY c) s;
CREATE FOREIGN TABLE rd (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'rd');
CREATE FOREIGN TABLE rd_diff (key bytea, val bytea, diff bigint, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'rd');
-- a LIMIT opens the first part only; a full scan all ten
SELECT * FROM pg_temp.explained('SELECT * FROM rd LIMIT 3', 'Parts');
SELECT encode(key, 'escape') FROM rd LIMIT 3;
SELECT * FROM pg_temp.explained('SELECT * FROM rd', 'Parts');
-- EXISTS stops at the first row
SELECT * FROM pg_temp.explained('SELECT EXISTS (SELECT 1 FROM rd)', 'Parts');
SELECT EXISTS (SELECT 1 FROM rd) AS any_row;
-- a cursor reads as it is fetched, in key order, the rows snapshot() has
BEGIN;
DECLARE c CURSOR FOR SELECT key, val FROM rd;
FETCH 2 FROM c;
MOVE FORWARD 2496 IN c;
FETCH 3 FROM c;
CLOSE c;
COMMIT;
SELECT (SELECT array_agg(key ORDER BY key) FROM rd) =
	(SELECT array_agg(key ORDER BY key) FROM snapshot('rd')) AS scan_is_snapshot;
-- a rescanned scan (a parameter per outer row) reads again each time
SELECT x.k, (SELECT count(*) FROM rd WHERE key = convert_to(x.k, 'UTF8')) AS n
	FROM (VALUES ('k01-0001'), ('k05-0250'), ('k99')) x(k);

-- a scan makes only the columns the query uses; whole rows, joins and
-- conditions on others still see theirs
SELECT count(*), count(val), min(encode(val, 'escape')) FROM (SELECT * FROM rd OFFSET 0) s;
SELECT (r).val = convert_to('v7', 'UTF8') AS whole_row FROM (SELECT r FROM rd r WHERE key = 'k01-0007') s;
SELECT count(*) FROM rd a JOIN (VALUES ('v7'::bytea), ('v8')) v(val) ON a.val = v.val;
SELECT count(*) FROM rd WHERE val = 'v9';

-- a parallel scan: its processes take ranges of keys in turn, and read
-- together what one scan reads
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT count(*), sum(length(val)) FROM rd WHERE val <> 'x';
SELECT count(*), sum(length(val)), count(DISTINCT key) FROM rd WHERE val <> 'x';
SELECT count(*) FROM rd WHERE key >= 'k03' AND key < 'k05-0100' AND val <> 'x';
SET max_parallel_workers_per_gather = 0;
SELECT count(*), sum(length(val)), count(DISTINCT key) FROM rd WHERE val <> 'x';
SELECT count(*) FROM rd WHERE key >= 'k03' AND key < 'k05-0100' AND val <> 'x';
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

--
-- Aggregates: positive parts, read from the state
--
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd', 'Aggregates|Computed');
SELECT count(*) FROM rd;
SELECT count(*) FROM (SELECT * FROM rd OFFSET 0) s;
SELECT * FROM pg_temp.explained('SELECT sum(diff), min("time"), max("time") FROM rd_diff',
								'Aggregates|Computed');
SELECT sum(diff) AS sum, min("time") = shard_upper('rd') - 1 AS min_is_as_of,
	max("time") = shard_upper('rd') - 1 AS max_is_as_of FROM rd_diff;
SELECT sum(diff), min("time") = shard_upper('rd') - 1 AS min_is_as_of,
	max("time") = shard_upper('rd') - 1 AS max_is_as_of
	FROM (SELECT * FROM rd_diff OFFSET 0) s;
-- count(*) of a table with a column diff counts (key, val)s: from the
-- state while no part holds one twice and no key is in two parts
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd_diff', 'Computed');
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd_diff OFFSET 0) s) AS plain FROM rd_diff;
-- a WHERE, a GROUP BY or another aggregate is the executor's
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd WHERE key < ''k02''', 'Aggregates');
SELECT count(*) FROM rd WHERE key < 'k02';
SELECT * FROM pg_temp.explained('SELECT count(DISTINCT val) FROM rd', 'Aggregates');
SELECT * FROM pg_temp.explained('SELECT val, count(*) FROM rd GROUP BY val', 'Aggregates');

-- a multiplicity above 1 counts as that many rows
SELECT append('rd', ARRAY['k01-0001']::text[], ARRAY['v1'], ARRAY[41]::bigint[]) IS NOT NULL AS appended;
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd OFFSET 0) s) AS plain FROM rd;
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd', 'Computed');
-- ... and is one (key, val) in two parts: count(*) of rows from a merge
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd_diff', 'Computed');
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd_diff OFFSET 0) s) AS plain FROM rd_diff;

-- a part of several times: from the state if it holds each (key, val)
-- once, else from a merge
SELECT create_shard('rd_kv');
CREATE FOREIGN TABLE rd_kv (key text, val text, diff bigint) SERVER persist_sink OPTIONS (shard 'rd_kv');
SELECT compare_and_append('rd_kv', ARRAY['a', 'b', 'c'], ARRAY['x', 'x', 'x'], ARRAY[0, 1, 1]::bigint[],
						  ARRAY[1, 2, 1]::bigint[], 0, 2) IS NOT NULL AS appended;
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd_kv', 'Computed');
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd_kv OFFSET 0) s) AS plain FROM rd_kv;
SELECT compare_and_append('rd_kv', ARRAY['d', 'd', 'e'], ARRAY['x', 'x', 'x'], ARRAY[2, 3, 3]::bigint[],
						  ARRAY[1, 1, 1]::bigint[], 2, 4) IS NOT NULL AS appended;
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd_kv', 'Computed');
SELECT count(*), sum(diff), (SELECT count(*) FROM (SELECT * FROM rd_kv OFFSET 0) s) AS plain,
	(SELECT sum(diff) FROM (SELECT * FROM rd_kv OFFSET 0) s) AS plain_sum FROM rd_kv;
DROP FOREIGN TABLE rd_kv;
SELECT drop_shard('rd_kv');

-- as of a time before the last append: a merge of what that time holds
SELECT shard_upper('rd') - 2 AS before_last \gset
SET persist_sink.as_of = :'before_last';
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd', 'Computed');
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd OFFSET 0) s) AS plain FROM rd;
SELECT max("time") = :before_last AS at_as_of FROM rd_diff;
RESET persist_sink.as_of;

-- a retraction: parts that are not positive, so a merge
SELECT append('rd', ARRAY['k02-0001', 'k02-0002']::text[], ARRAY['v1', 'v2'], ARRAY[-1, -1]::bigint[])
	IS NOT NULL AS appended;
SELECT * FROM pg_temp.explained('SELECT count(*) FROM rd', 'Computed');
SELECT count(*), (SELECT count(*) FROM (SELECT * FROM rd OFFSET 0) s) AS plain FROM rd;
SELECT sum(diff), (SELECT sum(diff) FROM (SELECT * FROM rd_diff OFFSET 0) s) AS plain FROM rd_diff;
-- a negative multiplicity fails both ways with PS004
SELECT append('rd', ARRAY['k03-0001']::text[], ARRAY['v1'], ARRAY[-2]::bigint[]) IS NOT NULL AS appended;
SELECT pg_temp.err($$SELECT count(*) FROM rd$$);
SELECT pg_temp.err($$SELECT count(*) FROM (SELECT * FROM rd OFFSET 0) s$$);
SELECT count(*), sum(diff) FROM rd_diff;
SELECT count(*), sum(diff) FROM (SELECT * FROM rd_diff OFFSET 0) s;
-- in parallel too, the retractions summed with what they retract
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SELECT count(*), sum(diff) FROM rd_diff WHERE val <> 'x';
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

-- sums past bigint: numeric, as the executor's
SELECT create_shard('rd_big');
SELECT append('rd_big', ARRAY['a', 'b', 'c']::text[], ARRAY['x', 'x', 'x'],
			  ARRAY[9223372036854775807, 9223372036854775807, 5]::bigint[]) IS NOT NULL AS appended;
CREATE FOREIGN TABLE rd_big (key text, val text, diff bigint) SERVER persist_sink OPTIONS (shard 'rd_big');
SELECT * FROM pg_temp.explained('SELECT sum(diff) FROM rd_big', 'Computed');
SELECT sum(diff), (SELECT sum(diff) FROM (SELECT * FROM rd_big OFFSET 0) s) AS plain FROM rd_big;

-- an empty shard: count 0, the others NULL
SELECT create_shard('rd_empty');
CREATE FOREIGN TABLE rd_empty (key bytea, val bytea, diff bigint, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'rd_empty');
SELECT count(*), sum(diff), min("time"), max("time") FROM rd_empty;
SELECT count(*), sum(diff), min("time"), max("time") FROM (SELECT * FROM rd_empty OFFSET 0) s;

-- a typed shard whose rows have a field diff: that field, not the diff
CREATE TYPE rd_row AS (id int, diff bigint);
SELECT create_shard('rd_typed', 'rd_row');
SELECT append_rows('rd_typed', ARRAY[(1, 10), (2, 20), (3, -5)]::rd_row[], ARRAY[1, 3, 2]::bigint[])
	IS NOT NULL AS appended;
CREATE FOREIGN TABLE rd_typed (id int, diff bigint) SERVER persist_sink OPTIONS (shard 'rd_typed');
SELECT * FROM pg_temp.explained('SELECT count(*), sum(diff), min(diff), max(diff) FROM rd_typed',
								'Aggregates|Computed');
SELECT count(*), sum(diff), min(diff), max(diff) FROM rd_typed;
SELECT count(*), sum(diff), min(diff), max(diff) FROM (SELECT * FROM rd_typed OFFSET 0) s;
SELECT id FROM rd_typed ORDER BY id;
SELECT diff FROM rd_typed WHERE id = 2;
SELECT r FROM rd_typed r ORDER BY id;

-- the caller's right to read the shard is checked as for a scan
CREATE ROLE rd_nobody;
GRANT USAGE ON SCHEMA persist_sink TO rd_nobody;
GRANT SELECT ON rd TO rd_nobody;
SET ROLE rd_nobody;
SELECT pg_temp.err($$SELECT count(*) FROM rd$$);
RESET ROLE;
GRANT persist_sink_reader TO rd_nobody;
SET ROLE rd_nobody;
SELECT pg_temp.err($$SELECT count(*) FROM rd$$);
RESET ROLE;
DROP OWNED BY rd_nobody;
DROP ROLE rd_nobody;

DROP FOREIGN TABLE rd, rd_diff, rd_big, rd_empty, rd_typed;
SELECT drop_shard(s) FROM unnest(ARRAY['rd', 'rd_big', 'rd_empty', 'rd_typed']) s;
DROP TYPE rd_row;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
