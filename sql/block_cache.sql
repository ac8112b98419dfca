--
-- block_cache: what a backend's lookups learned of a shard they no longer
-- read does not keep another shard's blocks out of the block cache for
-- good.  What the cache knows of a part goes after its decoded blocks
-- (learning it again costs a walk through the part), but a part no lookup
-- asked for in a while goes first.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql
SET search_path = public, persist_sink;

\i sql/include/small_parts.psql

-- shard bca: three batches of 100,000 small rows, keys interleaved, so
-- that a lookup consults a block's key filter in each; shard bcb: one
-- batch of rows of 384-byte vals
SELECT create_shard('bca');
SELECT create_shard('bcb');
CREATE FOREIGN TABLE bca_t (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'bca');
CREATE FOREIGN TABLE bcb_t (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'bcb');
SELECT count(*) AS appended FROM (
	SELECT compare_and_append('bca',
		ARRAY(SELECT pg_temp.k(i) FROM generate_series(b, 300000, 3) i),
		ARRAY(SELECT int8send(i) FROM generate_series(b, 300000, 3) i),
		array_fill(b - 1::bigint, ARRAY[100000]),
		array_fill(1::bigint, ARRAY[100000]), b - 1, b)
	FROM generate_series(1, 3) b) a;
SELECT compare_and_append('bcb',
	ARRAY(SELECT pg_temp.k(i) FROM generate_series(1, 2000) i),
	ARRAY(SELECT convert_to(repeat(md5(i::text), 12), 'UTF8')
		  FROM generate_series(1, 2000) i),
	array_fill(0::bigint, ARRAY[2000]), array_fill(1::bigint, ARRAY[2000]), 0, 1);

-- the Blocks of EXPLAIN ANALYZE of lookups of keys, summed
CREATE FUNCTION pg_temp.blocks(tbl text, keys int[]) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	plan json;
	n int[] := '{0,0,0,0}';
	k int;
BEGIN
	FOREACH k IN ARRAY keys LOOP
		EXECUTE format('EXPLAIN (ANALYZE, FORMAT JSON, COSTS OFF, TIMING OFF) '
					   'SELECT * FROM %I WHERE key = %L', tbl, pg_temp.k(k))
			INTO plan;
		n := ARRAY(SELECT n[i] + (regexp_match(plan->0->'Plan'->>'Blocks',
									'(\d+)[^\d]+(\d+)[^\d]+(\d+)[^\d]+(\d+)'))[i]::int
				   FROM generate_series(1, 4) i);
	END LOOP;
	RETURN format('%s decoded, %s from the cache, %s passed by their bounds, %s by their key filters',
				  n[1], n[2], n[3], n[4]);
END $$;

-- lookups of n rounds of four keys of bcb, each in a block of its own
CREATE FUNCTION pg_temp.bcb_rounds(n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	k int;
	k_bytes bytea;
BEGIN
	FOR r IN 1..n LOOP
		FOREACH k IN ARRAY '{10,500,1000,1500}'::int[] LOOP
			k_bytes := pg_temp.k(k);
			PERFORM * FROM bcb_t WHERE key = k_bytes;
		END LOOP;
	END LOOP;
END $$;

-- a cache of 512kB, mostly filled by what lookups of bca's keys, in no
-- order, learned of its 27 parts
SET persist_sink.block_cache_size = '512kB';
DO $$
DECLARE
	k_bytes bytea;
	i int;
BEGIN
	FOR i IN SELECT g FROM generate_series(1, 300000, 97) g ORDER BY md5(g::text) LOOP
		k_bytes := pg_temp.k(i);
		PERFORM * FROM bca_t WHERE key = k_bytes;
	END LOOP;
END $$;
-- a repeated lookup in bca goes straight to the key's block in each
-- batch (none passed by its bounds), and two of them say by the filters
-- the cache knows that they do not hold the key; the key's block is no
-- longer kept (decoded blocks go before what is known of parts)
SELECT pg_temp.blocks('bca_t', '{49956, 149963, 200015}') AS bca_repeated;

-- then only bcb's four keys, in turn: at first their blocks do not all
-- fit beside what is known of bca, and each lookup decodes its block
-- again
SELECT pg_temp.bcb_rounds(10);
SELECT pg_temp.blocks('bcb_t', '{10,500,1000,1500}') AS bcb_at_first;
-- once no lookup has asked for bca's parts in 16 seeks per known part,
-- those go first, and bcb's blocks stay
SELECT pg_temp.bcb_rounds(300);
SELECT pg_temp.blocks('bcb_t', '{10,500,1000,1500}') AS bcb_later;
RESET persist_sink.block_cache_size;

SELECT drop_shard('bca');
SELECT drop_shard('bcb');
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
