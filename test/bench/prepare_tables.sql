-- Builds the tables workload's input once, on its own cluster, before
-- anything is measured (test/bench/run --only tables).  Runs after
-- prepare_sustained.sql, whose 1000 batches of 1000 rows (bench.sbatches)
-- and 1000-row COPY files it reuses.
--
-- psql variables:
--   copydir       where the server writes the binary COPY files
--   big_files     files of 100,000 rows for the COPY comparison
--                 (copydir/big/b<i>.bin; at most 10, from the 1000 batches)
--   lookup_rows   rows of the point-lookup shard and heap table
--   lookup_files  files they are loaded from (copydir/lookup/l<i>.bin),
--                 lookup_rows / lookup_files rows each
--   lookups       keys looked up (bench.lookup_keys), plus 5 for warming up
--
-- The COPY comparison writes the sustained workload's rows: a 16-byte key
-- behind 8 placeholder bytes that the COPY client overwrites with random
-- bytes per row (copy_client --prefix 8 --keys spread), an 84-byte val,
-- diff 1; its 100,000-row files are 100 of the 1000-row batches each.
--
-- The point lookups read lookup_rows rows of unique keys: row g (1 ..
-- lookup_rows) has the key int8send(hashint8extended(g, 0)) followed by g
-- in 16 hex digits (24 bytes: unique, and spread over the key space in an
-- order unrelated to g), an 84-byte val (g in hex and one of 4096 pads),
-- diff 1.  The files hold the rows in the order of g, so every file's keys
-- spread over the whole key space, as keys led by a hash or a user id do.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
-- for the DO blocks, which see settings rather than psql variables
SET bench.big_files = :'big_files';
SET bench.lookup_rows = :'lookup_rows';
SET bench.lookup_files = :'lookup_files';

-- ---- the COPY comparison ----
-- Its 100,000-row files: file i holds batches (i - 1) * 100 + 1 ..
-- i * 100, each key behind 8 zero bytes, as the 1000-row files.
DO $$
DECLARE
	n int := current_setting('bench.big_files')::int;
BEGIN
	FOR i IN 1..n LOOP
		EXECUTE format('COPY (SELECT %L::bytea || k, v, d FROM bench.sbatches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id BETWEEN %s AND %s ORDER BY id) TO %L (FORMAT binary)',
					   '\x0000000000000000', (i - 1) * 100 + 1, i * 100,
					   current_setting('bench.copydir') || '/big/b' || i || '.bin');
	END LOOP;
END
$$;

-- Its targets: the shard's foreign table (the shard itself is created
-- before every run and dropped after it), a heap table without index, and
-- one with a btree index on key.
DROP FOREIGN TABLE IF EXISTS bench.copy_sink;
DROP TABLE IF EXISTS bench.copy_heap, bench.copy_heap_btree;
CREATE FOREIGN TABLE bench.copy_sink (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'tables_copy');
CREATE TABLE bench.copy_heap (key bytea, val bytea, diff bigint);
CREATE TABLE bench.copy_heap_btree (key bytea, val bytea, diff bigint);
CREATE INDEX copy_heap_btree_key ON bench.copy_heap_btree (key);

-- ---- the point lookups ----
DROP TABLE IF EXISTS bench.lookup_pads, bench.lookup_keys, bench.lookup_heap;
DROP FOREIGN TABLE IF EXISTS bench.lookup_sink;
CREATE TABLE bench.lookup_pads (n int PRIMARY KEY, pad text);
INSERT INTO bench.lookup_pads
	SELECT g, md5('p' || g) || md5('q' || g) || md5('s' || g) FROM generate_series(0, 4095) AS g;
ANALYZE bench.lookup_pads;
CREATE FUNCTION pg_temp.lookup_key(g bigint) RETURNS bytea LANGUAGE sql IMMUTABLE
	AS $$ SELECT int8send(hashint8extended(g, 0)) || convert_to(lpad(to_hex(g), 16, '0'), 'UTF8') $$;

DO $$
DECLARE
	total bigint := current_setting('bench.lookup_rows')::bigint;
	n int := current_setting('bench.lookup_files')::int;
	per bigint := (total + n - 1) / n;
BEGIN
	FOR i IN 1..n LOOP
		EXECUTE format('COPY (SELECT pg_temp.lookup_key(g), convert_to(substr(to_hex(g) || '' '' || p.pad, 1, 84), ''UTF8''), 1::bigint FROM generate_series(%s::bigint, %s) AS g JOIN bench.lookup_pads p ON p.n = g %% 4096) TO %L (FORMAT binary)',
					   (i - 1) * per + 1, least(i * per, total),
					   current_setting('bench.copydir') || '/lookup/l' || i || '.bin');
	END LOOP;
END
$$;

-- The keys looked up: existing rows drawn at random (a fixed sequence, so
-- every run looks up the same keys), with their vals to check the answers.
CREATE TABLE bench.lookup_keys AS
SELECT x.n, pg_temp.lookup_key(g) AS key,
       convert_to(substr(to_hex(g) || ' ' || p.pad, 1, 84), 'UTF8') AS val
FROM (SELECT n, (hashint8extended(n, 42) & 9223372036854775807) % :lookup_rows + 1 AS g
      FROM generate_series(1, :lookups + 5) AS n) x
     JOIN bench.lookup_pads p ON p.n = x.g % 4096;

-- The shard's foreign table (test/bench/run creates the shard once the
-- COPY comparison, which drops every shard after each run, is done, and
-- loads it through this table) and the heap table (loaded from the same
-- files; its btree index is created after the lookups without it).
CREATE FOREIGN TABLE bench.lookup_sink (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'lookup');
CREATE TABLE bench.lookup_heap (key bytea, val bytea, diff bigint);
