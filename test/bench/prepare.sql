-- Builds the benchmark's input once, before anything is measured.
--
-- psql variables: total_rows (5000000), nbatches (1000-row batches for the
-- small-write workload), chunk_rows (rows per call of the large load) and
-- copydir (where the COPY client's binary files go; written by the server).
--
-- Rows are (key bytea, val bytea, diff bigint): a 16-byte key (hex id), an
-- 84-byte JSON-ish value padded with hex, so parts compress moderately.  In
-- every 1000-row batch but the first, the last 100 rows retract (diff -1)
-- the first 100 rows of the batch before, so reading back consolidates.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS bench;
DROP TABLE IF EXISTS bench.rows, bench.batches, bench.chunks;

CREATE TEMP TABLE refs AS
	SELECT g AS n, substr(md5('r' || g), 1, 12) AS ref FROM generate_series(0, 49999) AS g;
CREATE TEMP TABLE pads AS
	SELECT g AS n, md5('p' || g) AS pad FROM generate_series(0, 4095) AS g;
ANALYZE refs, pads;
CREATE UNLOGGED TABLE bench.rows AS
SELECT i AS id,
       convert_to(substr(md5('k' || j), 1, 16), 'UTF8') AS key,
       convert_to(rpad(format('{"uid":%s,"ev":"%s","amt":%s.%s,"ts":%s,"ref":"%s"}',
                              (j * 7919) % 1000003,
                              (ARRAY['click','view','buy','scroll','login'])[1 + j % 5],
                              j % 997, lpad((j % 100)::text, 2, '0'),
                              1700000000 + j, r.ref),
                       84, p.pad), 'UTF8') AS val,
       CASE WHEN i > 1000 AND (i - 1) % 1000 >= 900 THEN -1 ELSE 1 END::bigint AS diff
FROM generate_series(1::bigint, :total_rows) AS i
     CROSS JOIN LATERAL (SELECT CASE WHEN i > 1000 AND (i - 1) % 1000 >= 900
                                     THEN i - 1900 ELSE i END AS j) AS s
     JOIN refs r ON r.n = s.j % 50000
     JOIN pads p ON p.n = s.j % 4096;

-- The small-write workload picks batches 1..nbatches at random.  The three
-- aggregates of a group see its rows in the same order, so the arrays align.
CREATE UNLOGGED TABLE bench.batches (
	id int PRIMARY KEY,
	nrows int NOT NULL,
	keys bytea[] COMPRESSION lz4,
	vals bytea[] COMPRESSION lz4,
	diffs bigint[] COMPRESSION lz4
);
INSERT INTO bench.batches
SELECT (id - 1) / 1000 + 1, count(*), array_agg(key), array_agg(val), array_agg(diff)
FROM bench.rows WHERE id <= :nbatches * 1000 GROUP BY 1;

-- The large load: total_rows in calls of chunk_rows.
CREATE UNLOGGED TABLE bench.chunks (LIKE bench.batches INCLUDING ALL);
INSERT INTO bench.chunks
SELECT (id - 1) / :chunk_rows + 1, count(*), array_agg(key), array_agg(val), array_agg(diff)
FROM bench.rows GROUP BY 1;

-- The same batches and chunks as binary COPY files for the COPY system.
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT id FROM bench.batches LOOP
		EXECUTE format('COPY (SELECT k, v, d FROM bench.batches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = %s) TO %L (FORMAT binary)',
					   r.id, current_setting('bench.copydir') || '/b' || r.id || '.bin');
	END LOOP;
	FOR r IN SELECT id FROM bench.chunks LOOP
		EXECUTE format('COPY (SELECT k, v, d FROM bench.chunks, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = %s) TO %L (FORMAT binary)',
					   r.id, current_setting('bench.copydir') || '/c' || r.id || '.bin');
	END LOOP;
END
$$;

DROP TABLE bench.rows;
VACUUM ANALYZE bench.batches, bench.chunks;

-- Targets of the plain-table systems: same columns, no index.
DROP TABLE IF EXISTS bench.heap_target, bench.copy_target;
CREATE TABLE bench.heap_target (key bytea, val bytea, diff bigint);
CREATE TABLE bench.copy_target (key bytea, val bytea, diff bigint);
