-- Builds the sustained workload's input once, in its own cluster, before
-- anything is measured.
--
-- psql variables: nbatches (1000-row batches) and copydir (where the COPY
-- client's binary files go; written by the server).
--
-- Rows are (key bytea, val bytea, diff bigint) as in prepare.sql: a 16-byte
-- key (hex id) and the same 84-byte JSON-ish value padded with hex; every
-- diff is 1.  A call puts 8 random bytes in front of every key of its batch
-- (pgbench/*_sustained_*.sql, copy_client --prefix 8 --keys ...): the same
-- 8 bytes for all its keys (prefixed keys) or 8 bytes of each key's own
-- (spread keys), so that keys never repeat across calls: nothing
-- consolidates, the shard only grows.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS bench;
DROP TABLE IF EXISTS bench.sbatches;

CREATE TEMP TABLE refs AS
	SELECT g AS n, substr(md5('r' || g), 1, 12) AS ref FROM generate_series(0, 49999) AS g;
CREATE TEMP TABLE pads AS
	SELECT g AS n, md5('p' || g) AS pad FROM generate_series(0, 4095) AS g;
ANALYZE refs, pads;
CREATE TEMP TABLE rows AS
SELECT j AS id,
       convert_to(substr(md5('k' || j), 1, 16), 'UTF8') AS key,
       convert_to(rpad(format('{"uid":%s,"ev":"%s","amt":%s.%s,"ts":%s,"ref":"%s"}',
                              (j * 7919) % 1000003,
                              (ARRAY['click','view','buy','scroll','login'])[1 + j % 5],
                              j % 997, lpad((j % 100)::text, 2, '0'),
                              1700000000 + j, r.ref),
                       84, p.pad), 'UTF8') AS val
FROM generate_series(1::bigint, :nbatches * 1000) AS j
     JOIN refs r ON r.n = j % 50000
     JOIN pads p ON p.n = j % 4096;

-- A call picks one of batches 1..nbatches at random.  The aggregates of a
-- group see its rows in the same order, so the arrays align.
CREATE UNLOGGED TABLE bench.sbatches (
	id int PRIMARY KEY,
	keys bytea[] COMPRESSION lz4,
	vals bytea[] COMPRESSION lz4,
	diffs bigint[] COMPRESSION lz4
);
INSERT INTO bench.sbatches
SELECT (id - 1) / 1000 + 1, array_agg(key ORDER BY id), array_agg(val ORDER BY id),
       array_agg(1::bigint ORDER BY id)
FROM rows GROUP BY 1;

-- The same batches as binary COPY files, each key behind 8 zero bytes that
-- the COPY client overwrites with the call's random bytes.
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT id FROM bench.sbatches LOOP
		EXECUTE format('COPY (SELECT %L::bytea || k, v, d FROM bench.sbatches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = %s) TO %L (FORMAT binary)',
					   '\x0000000000000000', r.id, current_setting('bench.copydir') || '/b' || r.id || '.bin');
	END LOOP;
END
$$;

VACUUM ANALYZE bench.sbatches;

-- Targets of the plain-table systems: same columns, no index.
DROP TABLE IF EXISTS bench.sustained_heap, bench.sustained_copy;
CREATE TABLE bench.sustained_heap (key bytea, val bytea, diff bigint);
CREATE TABLE bench.sustained_copy (key bytea, val bytea, diff bigint);
