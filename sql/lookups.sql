--
-- lookups: key conditions on a shard's foreign table (key = x, ranges)
-- return exactly what the snapshot holds, on shards of several batches of
-- several parts of several blocks: every key (so every block's and every
-- part's first and last), keys that are missing between and around them,
-- ranges across blocks and parts, each lookup repeated (the block cache
-- and what it knows of each part's blocks serve the repeats), with a
-- cache too small for the shard, after appends, after a compaction, and
-- after the shard is dropped and created again under the same name.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql
SET search_path = public, persist_sink;

\i sql/include/small_parts.psql
SELECT create_shard('lk');
CREATE FOREIGN TABLE lk_t (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'lk');

-- val i of batch b (384 bytes)
CREATE FUNCTION pg_temp.v(i int, b int) RETURNS bytea LANGUAGE sql IMMUTABLE
	AS $$ SELECT convert_to(repeat(md5(i::text || '/' || b), 12), 'UTF8') $$;

-- three batches, their keys interleaved; the second retracts some of the
-- first's rows and gives other keys of the first a second val
SELECT compare_and_append('lk',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(3, 6000, 3) i),
	ARRAY(SELECT pg_temp.v(i, 1) FROM generate_series(3, 6000, 3) i),
	array_fill(0::bigint, ARRAY[2000]), array_fill(1::bigint, ARRAY[2000]), 0, 1);
SELECT compare_and_append('lk',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(1, 6000, 3) i) ||
		ARRAY(SELECT pg_temp.k(i) FROM generate_series(30, 6000, 30) i) ||
		ARRAY(SELECT pg_temp.k(i) FROM generate_series(51, 6000, 51) i),
	ARRAY(SELECT pg_temp.v(i, 2) FROM generate_series(1, 6000, 3) i) ||
		ARRAY(SELECT pg_temp.v(i, 1) FROM generate_series(30, 6000, 30) i) ||
		ARRAY(SELECT pg_temp.v(i, 2) FROM generate_series(51, 6000, 51) i),
	array_fill(1::bigint, ARRAY[2000 + 200 + 117]),
	ARRAY(SELECT 1::bigint FROM generate_series(1, 6000, 3) i) ||
		ARRAY(SELECT -1::bigint FROM generate_series(30, 6000, 30) i) ||
		ARRAY(SELECT 2::bigint FROM generate_series(51, 6000, 51) i),
	1, 2);
SELECT compare_and_append('lk',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(2, 6000, 3) i),
	ARRAY(SELECT pg_temp.v(i, 3) FROM generate_series(2, 6000, 3) i),
	array_fill(2::bigint, ARRAY[2000]), array_fill(1::bigint, ARRAY[2000]), 2, 3);
SELECT count(*) AS batches, bool_and(parts >= 2) AS several_parts_each FROM batches('lk');

-- what every read must return: the snapshot as of as_of
CREATE TEMP TABLE truth (key bytea, val bytea, diff bigint);
CREATE INDEX ON truth (key);
CREATE FUNCTION pg_temp.truth_as_of(as_of bigint) RETURNS bigint LANGUAGE sql AS $$
	TRUNCATE pg_temp.truth;
	INSERT INTO pg_temp.truth SELECT key, val, diff FROM persist_sink.snapshot('lk', as_of);
	ANALYZE pg_temp.truth;
	SELECT count(*) FROM pg_temp.truth;
$$;

-- keys looked up: every key written, and missing ones around some (a
-- prefix sorts just before a key, a longer key just after it)
CREATE TEMP TABLE probes AS
	SELECT p FROM generate_series(0, 6001) i, LATERAL (VALUES (pg_temp.k(i))) AS v(p)
	UNION
	SELECT p FROM generate_series(0, 6001, 7) i,
		LATERAL (VALUES (pg_temp.k(i) || '\x00'::bytea),
					 (substring(pg_temp.k(i) FROM 1 FOR 6))) AS v(p);
ANALYZE probes;
-- ranges: from a key or a missing one, of 1 to about 600 keys
CREATE TEMP TABLE ranges AS
	WITH s AS (SELECT p, row_number() OVER (ORDER BY p) AS n FROM probes)
	SELECT a.p AS lo, b.p AS hi FROM generate_series(1, 150) g
	JOIN s a ON a.n = (g * 977) % 7000 + 1
	JOIN s b ON b.n = (g * 977) % 7000 + 1 + (g * 13) % 1500;

-- probes whose lookup differs from the truth, and ranges likewise (each
-- in two forms: lo <= key < hi, lo < key <= hi)
CREATE FUNCTION pg_temp.wrong() RETURNS TABLE (lookups bigint, ranges bigint, ranges_b bigint)
LANGUAGE sql AS $$
	SELECT
	(SELECT count(*) FROM pg_temp.probes pr
	 WHERE (SELECT coalesce(string_agg(md5(val) || ':' || diff, ',' ORDER BY val), '')
			FROM lk_t WHERE key = pr.p)
		IS DISTINCT FROM
		   (SELECT coalesce(string_agg(md5(val) || ':' || diff, ',' ORDER BY val), '')
			FROM pg_temp.truth WHERE key = pr.p)),
	(SELECT count(*) FROM pg_temp.ranges r
	 WHERE (SELECT coalesce(string_agg(md5(key || val) || ':' || diff, ',' ORDER BY key, val), '')
			FROM lk_t WHERE key >= r.lo AND key < r.hi)
		IS DISTINCT FROM
		   (SELECT coalesce(string_agg(md5(key || val) || ':' || diff, ',' ORDER BY key, val), '')
			FROM pg_temp.truth WHERE key >= r.lo AND key < r.hi)),
	(SELECT count(*) FROM pg_temp.ranges r
	 WHERE (SELECT coalesce(string_agg(md5(key || val) || ':' || diff, ',' ORDER BY key, val), '')
			FROM lk_t WHERE key > r.lo AND key <= r.hi)
		IS DISTINCT FROM
		   (SELECT coalesce(string_agg(md5(key || val) || ':' || diff, ',' ORDER BY key, val), '')
			FROM pg_temp.truth WHERE key > r.lo AND key <= r.hi))
$$;

SELECT pg_temp.truth_as_of(NULL);
SELECT count(*) AS probes, (SELECT count(*) FROM ranges) AS ranges FROM probes;
-- the whole table, unconditioned, is the truth
SELECT (SELECT count(*) FROM (TABLE truth EXCEPT ALL SELECT key, val, diff FROM lk_t) d) AS missing,
	   (SELECT count(*) FROM (SELECT key, val, diff FROM lk_t EXCEPT ALL TABLE truth) d) AS extra;
-- lookups with nothing cached yet, then again (from the cache)
SELECT * FROM pg_temp.wrong();
SELECT * FROM pg_temp.wrong();
-- a lookup opens one part of each of the three batches: the key's block
-- in two of them says by its key filter that it does not hold the key
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT key FROM lk_t WHERE key = '\x6b303030333031'::bytea;
-- a missing key between two keys: no batch's block holds it, and the
-- filters the cache learned say so without a block being read
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT key FROM lk_t WHERE key = '\x6b30303330303101'::bytea;
-- a range of one key uses the filters too; a wider range cannot
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT key FROM lk_t WHERE key >= '\x6b30303330303101'::bytea
		AND key <= '\x6b30303330303101'::bytea;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT key FROM lk_t WHERE key >= '\x6b30303330303101'::bytea
		AND key < '\x6b303033303032'::bytea;
-- a cache too small for the shard: blocks evicted and read again
SET persist_sink.block_cache_size = '300kB';
SELECT * FROM pg_temp.wrong();
RESET persist_sink.block_cache_size;
-- an earlier snapshot: the same blocks, a narrower time window
SET persist_sink.as_of = '1';
SELECT pg_temp.truth_as_of(1);
SELECT * FROM pg_temp.wrong();
RESET persist_sink.as_of;

-- an append: keys of new parts among those already cached
SELECT compare_and_append('lk',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(6, 6000, 6) i),
	ARRAY(SELECT pg_temp.v(i, 4) FROM generate_series(6, 6000, 6) i),
	array_fill(3::bigint, ARRAY[1000]), array_fill(1::bigint, ARRAY[1000]), 3, 4);
SELECT pg_temp.truth_as_of(NULL);
SELECT * FROM pg_temp.wrong();

-- a compaction: new parts under new keys, the old ones gone
SELECT compact('lk');
SELECT count(*) AS batches FROM batches('lk');
SELECT pg_temp.truth_as_of(NULL);
SELECT * FROM pg_temp.wrong();

-- the shard dropped and created again, other vals under the same keys
SELECT drop_shard('lk');
SELECT create_shard('lk');
SELECT compare_and_append('lk',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(1, 6000, 2) i),
	ARRAY(SELECT pg_temp.v(i, 5) FROM generate_series(1, 6000, 2) i),
	array_fill(0::bigint, ARRAY[3000]), array_fill(1::bigint, ARRAY[3000]), 0, 1);
SELECT pg_temp.truth_as_of(NULL);
SELECT * FROM pg_temp.wrong();
-- and with the cache off
SET persist_sink.block_cache_size = 0;
SELECT * FROM pg_temp.wrong();
RESET persist_sink.block_cache_size;

-- a process that has not read the shard: a lookup of a part's last key
-- fetches and checks each block before the key's but decodes only the
-- key's (the others' bounds say they end before it); the repeat starts at
-- the key's block and takes its updates from the cache
\c
SET search_path = public, persist_sink;
CREATE FUNCTION pg_temp.blocks(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	plan json;
BEGIN
	EXECUTE 'EXPLAIN (ANALYZE, FORMAT JSON, TIMING OFF, SUMMARY OFF) ' || q INTO plan;
	RETURN plan->0->'Plan'->>'Blocks';
END
$$;
SELECT pg_temp.blocks($$SELECT * FROM lk_t WHERE key = 'k005999'$$)
	~ '^1 decoded, 0 from the cache, [1-9][0-9]* passed by their bounds, 0 by their key filters$'
	AS cold_lookup_passes_blocks;
-- a missing key inside a part's range: the blocks before its block are
-- passed by their bounds, and its block by its key filter, none decoded
SELECT pg_temp.blocks($$SELECT * FROM lk_t WHERE key = '\x6b30303330303001'::bytea$$)
	~ '^0 decoded, 0 from the cache, [1-9][0-9]* passed by their bounds, 1 by their key filters$'
	AS cold_missing_key_filtered;
SELECT count(*) AS missing_key_rows FROM lk_t WHERE key = '\x6b30303330303001'::bytea;
SELECT pg_temp.blocks($$SELECT * FROM lk_t WHERE key = 'k005999'$$) AS repeated_lookup;
SELECT (SELECT val FROM lk_t WHERE key = 'k005999') =
	(SELECT val FROM snapshot('lk') WHERE key = 'k005999') AS same_val;

DROP FOREIGN TABLE lk_t;
SELECT drop_shard('lk');

-- blocks of several times (without bounds) carry key filters too: two
-- batches of three times each, their keys interleaved; a lookup learns
-- the filter of each block it decodes, so the repeat of a lookup stops
-- at a block whose filter lacks the key without decoding it (the session
-- is a new one: key i and val i of batch b again)
CREATE FUNCTION pg_temp.k(i int) RETURNS bytea LANGUAGE sql IMMUTABLE
	AS $$ SELECT convert_to('k' || lpad(i::text, 6, '0'), 'UTF8') $$;
CREATE FUNCTION pg_temp.v(i int, b int) RETURNS bytea LANGUAGE sql IMMUTABLE
	AS $$ SELECT convert_to(repeat(md5(i::text || '/' || b), 12), 'UTF8') $$;
SELECT create_shard('lkt');
CREATE FOREIGN TABLE lkt_t (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'lkt');
SELECT compare_and_append('lkt',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(1, 6000, 2) i),
	ARRAY(SELECT pg_temp.v(i, 1) FROM generate_series(1, 6000, 2) i),
	ARRAY(SELECT (i % 3)::bigint FROM generate_series(1, 6000, 2) i),
	array_fill(1::bigint, ARRAY[3000]), 0, 3);
SELECT compare_and_append('lkt',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(2, 6000, 2) i),
	ARRAY(SELECT pg_temp.v(i, 2) FROM generate_series(2, 6000, 2) i),
	ARRAY(SELECT (3 + i % 3)::bigint FROM generate_series(2, 6000, 2) i),
	array_fill(1::bigint, ARRAY[3000]), 3, 6);
CREATE TEMP TABLE lkt_truth AS SELECT key, val, diff FROM snapshot('lkt');
CREATE TEMP TABLE lkt_probes AS
	SELECT pg_temp.k(i) AS p FROM generate_series(0, 6001) i
	UNION
	SELECT pg_temp.k(i) || '\x01'::bytea FROM generate_series(0, 6001, 7) i;
-- every key, and missing ones: a first lookup of each, then a repeat
SELECT count(*) AS keys_wrong FROM lkt_probes, generate_series(1, 2) round
WHERE (SELECT string_agg(md5(val) || ':' || diff, ',' ORDER BY val)
	   FROM lkt_t WHERE key = p)
	IS DISTINCT FROM
	  (SELECT string_agg(md5(val) || ':' || diff, ',' ORDER BY val)
	   FROM lkt_truth WHERE key = p);
-- then a key of the first batch: the second's block says by its filter
-- that it is not there; a missing key: both blocks say so
SELECT pg_temp.blocks($$SELECT * FROM lkt_t WHERE key = 'k003001'$$) AS key_of_the_first_batch;
SELECT pg_temp.blocks($$SELECT * FROM lkt_t WHERE key = '\x6b30303330303101'::bytea$$)
	AS missing_key;
DROP FOREIGN TABLE lkt_t;
SELECT drop_shard('lkt');
RESET persist_sink.inline_max_bytes;
RESET persist_sink.blob_target_size;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
