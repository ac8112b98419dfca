--
-- rows: typed rows.  append_rows, compare_and_append_rows, snapshot_rows and
-- listen_rows on a table's row type, a composite type and scalar types; every
-- error.  Sink times vary from run to run, so they are never printed: only
-- booleans and counts computed from them are.  Rows are compared with their
-- sources with EXCEPT ALL in both directions, on the values and on their
-- text form (which tells 10.5 from 10.50 and 0 from -0).
--
-- (quietly: the extension exists already when the earlier suites have run)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
-- No background compaction, so that batches and seqnos are deterministic;
-- a new session starts after the reload
ALTER SYSTEM SET persist_sink.compaction = off;
SELECT pg_reload_conf();
\c
SHOW persist_sink.compaction;
-- The row types are created in public, not in the extension's schema.
SET search_path = public, persist_sink;

-- Runs q and reports its SQLSTATE, message, DETAIL and HINT (or that it succeeded).
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	det text;
	hint text;
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	RETURN st || ': ' || msg || CASE WHEN det <> '' THEN ' / ' || det ELSE '' END
		|| CASE WHEN hint <> '' THEN ' / HINT: ' || hint ELSE '' END;
END
$$;

-- A shard's state as one comparable line.
CREATE FUNCTION pg_temp.st(s text) RETURNS text LANGUAGE sql AS $$
	SELECT format('seqno=%s upper=%s since=%s batches=%s parts=%s updates=%s',
				  seqno, upper, since, batches, parts, updates)
	FROM persist_sink.shards WHERE name = s
$$;

--
-- a table's row type: NULL fields, text, numeric, jsonb, arrays, timestamps,
-- and a dropped column
--
CREATE TABLE orders (
	id int,
	customer text,
	junk int,
	amount numeric,
	tags text[],
	meta jsonb,
	placed timestamptz,
	due timestamp,
	qty int[]
);
ALTER TABLE orders DROP COLUMN junk;
INSERT INTO orders VALUES
	(1, 'ann', 10.50, '{a,b}', '{"x": 1, "y": [true, null]}',
	 '2024-01-01 10:00:00.123456+00', '2024-01-01 10:00', '{1,2,3}'),
	-- the same row again: multiplicity 2
	(1, 'ann', 10.50, '{a,b}', '{"x": 1, "y": [true, null]}',
	 '2024-01-01 10:00:00.123456+00', '2024-01-01 10:00', '{1,2,3}'),
	-- equal in SQL to the row above, but not the same row (scale 1)
	(1, 'ann', 10.5, '{a,b}', '{"x": 1, "y": [true, null]}',
	 '2024-01-01 10:00:00.123456+00', '2024-01-01 10:00', '{1,2,3}'),
	-- NULL fields
	(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	-- NULL elements and an empty array, big precision, far timestamps
	(3, 'bob', 123456789012345678901234567890.123456789012345678901234567890,
	 '{NULL,"",x}', '[1, 2.50, {"a": null, "b": "c"}]', 'infinity', '-infinity', '{}'),
	(4, '', 'NaN', '{"with space","quo\"te",back\\slash}', '"just a string"',
	 '4713-01-01 00:00:00+00 BC', '294276-12-31 23:59:59.999999', '{{1,2},{3,4}}'),
	(5, 'line1
line2	tab', -0.000000000000000000000000000001, '{}', '{}',
	 '1970-01-01 00:00:00+00', '2000-02-29 12:34:56.789', '{NULL}'),
	(6, 'Zoë, 東京 ☃', 'Infinity', '{é,ñ}', '{"k": "Zoë ☃"}', NULL, NULL, '{-2147483648,2147483647}'),
	(7, repeat('long ', 2000), 1e-100, ARRAY['x', repeat('y', 5000)],
	 jsonb_build_object('big', repeat('z', 3000)), '2024-06-30 23:59:59+02', NULL, NULL);
-- a row whose fields are all NULL is a row, not a NULL element
INSERT INTO orders VALUES (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT count(*) AS rows, count(DISTINCT o::text) AS distinct_rows FROM orders o;

SELECT create_shard('o', 'orders');
-- through the sink, diffs default to 1
SELECT append_rows('o', ARRAY(SELECT o FROM orders o)) AS t1 \gset
SELECT :t1 < shard_upper('o') AS below_upper;
SELECT count(*) AS rows FROM snapshot_rows('o', NULL::orders);
SELECT (SELECT count(*) FROM (SELECT * FROM snapshot_rows('o', NULL::orders)
							  EXCEPT ALL SELECT * FROM orders) d) AS extra,
	   (SELECT count(*) FROM (SELECT * FROM orders
							  EXCEPT ALL SELECT * FROM snapshot_rows('o', NULL::orders)) d) AS missing;
SELECT (SELECT count(*) FROM (SELECT s::text FROM snapshot_rows('o', NULL::orders) s
							  EXCEPT ALL SELECT o::text FROM orders o) d) AS extra_text,
	   (SELECT count(*) FROM (SELECT o::text FROM orders o
							  EXCEPT ALL SELECT s::text FROM snapshot_rows('o', NULL::orders) s) d) AS missing_text;
-- the fields come back with their types and values (shown in UTC: zones
-- name far-past offsets differently from one tz database to the next)
SET TimeZone = 'UTC';
SELECT id, customer, amount::text, tags, meta, placed, due, qty
FROM snapshot_rows('o', NULL::orders)
WHERE id IS DISTINCT FROM 6 AND id IS DISTINCT FROM 7
ORDER BY id, amount::text;
RESET TimeZone;
SELECT id, octet_length(customer), tags[2] = repeat('y', 5000) AS tag, meta->>'big' = repeat('z', 3000) AS meta
FROM snapshot_rows('o', NULL::orders) WHERE id = 7;
SELECT id, customer = 'Zoë, 東京 ☃' AS customer, tags = '{é,ñ}' AS tags,
	   meta->>'k' = 'Zoë ☃' AS meta
FROM snapshot_rows('o', NULL::orders) WHERE id = 6;
SELECT count(*) AS all_null_rows FROM snapshot_rows('o', NULL::orders) s WHERE s IS NULL;
SELECT pg_typeof(s) FROM snapshot_rows('o', NULL::orders) s LIMIT 1;
-- in the select list too
SELECT count(*) FROM (SELECT snapshot_rows('o', NULL::orders)) s;
SELECT s FROM (SELECT snapshot_rows('o', NULL::orders) AS s) x WHERE (s).id = 2;
-- the listen of the write: every row at the time append_rows returned
SELECT (l.row).id, l.diff, l.time = :t1 AS at_t1
FROM listen_rows('o', NULL::orders, :t1 - 1) l
ORDER BY (l.row).id, (l.row).amount::text;
SELECT count(*) FROM listen_rows('o', NULL::orders, :t1);

-- explicit diffs: a row with diff 3 comes back 3 times
SELECT append_rows('o', ARRAY[(100, 'carl', 3.00, NULL, NULL, NULL, NULL, NULL)::orders,
							  (101, 'dora', 4, '{z}', '[]', NULL, NULL, NULL)::orders,
							  (102, 'eve', 5, NULL, NULL, NULL, NULL, NULL)::orders],
				   ARRAY[3, 1, 2]::bigint[]) AS t2 \gset
SELECT :t2 > :t1 AS later;
SELECT id, customer, amount, count(*) FROM snapshot_rows('o', NULL::orders)
WHERE id >= 100 GROUP BY id, customer, amount ORDER BY id;
SELECT (l.row).id, (l.row).customer, l.diff, l.time = :t2 AS at_t2
FROM listen_rows('o', NULL::orders, :t1) l ORDER BY (l.row).id;
-- retractions
SELECT append_rows('o', ARRAY[(100, 'carl', 3.00, NULL, NULL, NULL, NULL, NULL)::orders,
							  (101, 'dora', 4, '{z}', '[]', NULL, NULL, NULL)::orders],
				   ARRAY[-2, -1]::bigint[]) AS t3 \gset
SELECT id, customer, count(*) FROM snapshot_rows('o', NULL::orders)
WHERE id >= 100 GROUP BY id, customer ORDER BY id;
SELECT (l.row).id, l.diff, l.time = :t3 AS at_t3
FROM listen_rows('o', NULL::orders, :t2) l ORDER BY (l.row).id;
-- time travel: as of t1 only the first write, as of t2 the second too
SELECT (SELECT count(*) FROM (SELECT * FROM snapshot_rows('o', NULL::orders, :t1)
							  EXCEPT ALL SELECT * FROM orders) d) AS extra,
	   (SELECT count(*) FROM (SELECT * FROM orders
							  EXCEPT ALL SELECT * FROM snapshot_rows('o', NULL::orders, :t1)) d) AS missing;
SELECT (SELECT count(*) FROM snapshot_rows('o', NULL::orders, :t1 - 1)) AS before_t1,
	   (SELECT count(*) FROM snapshot_rows('o', NULL::orders, :t1)) AS at_t1,
	   (SELECT count(*) FROM snapshot_rows('o', NULL::orders, :t2 - 1)) AS before_t2,
	   (SELECT count(*) FROM snapshot_rows('o', NULL::orders, :t2)) AS at_t2,
	   (SELECT count(*) FROM snapshot_rows('o', NULL::orders, :t3)) AS at_t3,
	   (SELECT count(*) FROM snapshot_rows('o', NULL::orders)) AS latest;
-- the rows are the keys of the untyped snapshot, with empty vals
SELECT count(*) AS updates, sum(diff) AS diffs, bool_and(val = '') AS empty_vals
FROM snapshot('o');
-- unchanged by compaction
SELECT md5(string_agg(s::text, ',' ORDER BY s::text)) AS digest
FROM snapshot_rows('o', NULL::orders) s \gset
SELECT compact('o');
SELECT md5(string_agg(s::text, ',' ORDER BY s::text)) = :'digest' AS same_after_compact
FROM snapshot_rows('o', NULL::orders) s;
SELECT * FROM verify('o');

--
-- a composite type, through compare_and_append_rows at explicit times
--
CREATE TYPE reading AS (sensor text, at timestamp, value float8, flags int[], extra jsonb, ok boolean);
CREATE TABLE reading_src (n serial, r reading, t bigint, d bigint);
INSERT INTO reading_src (r, t, d) VALUES
	(('s1', '2024-01-01 00:00', 1.5, '{1}', '{"u": "m"}', true), 0, 1),
	(('s2', NULL, 'NaN', '{}', NULL, NULL), 0, 2),
	(('s3', '2024-01-02 00:00:00.000001', '-0', '{NULL,2}', 'null', false), 1, 1),
	(('s3', '2024-01-02 00:00:00.000001', '0', '{NULL,2}', 'null', false), 1, 1),
	(('s4', 'infinity', 'Infinity', NULL, '[{"n": 1.000}]', true), 2, 1),
	((NULL, NULL, NULL, NULL, NULL, NULL), 2, 1),
	(('s1', '2024-01-01 00:00', 1.5, '{1}', '{"u": "m"}', true), 3, -1),
	(('s2', NULL, 'NaN', '{}', NULL, NULL), 3, 1),
	(('s5', '1999-12-31 23:59:59.999999', 1e-300, '{7,8,9}', '{"a": [1, "two"]}', true), 4, 4),
	(('s2', NULL, 'NaN', '{}', NULL, NULL), 4, -3);
SELECT create_shard('readings', 'reading');
SELECT compare_and_append_rows('readings',
	ARRAY(SELECT r FROM reading_src WHERE t < 3 ORDER BY n),
	ARRAY(SELECT t FROM reading_src WHERE t < 3 ORDER BY n),
	ARRAY(SELECT d FROM reading_src WHERE t < 3 ORDER BY n), 0, 3);
SELECT compare_and_append_rows('readings',
	ARRAY(SELECT r FROM reading_src WHERE t >= 3 ORDER BY n),
	ARRAY(SELECT t FROM reading_src WHERE t >= 3 ORDER BY n),
	ARRAY(SELECT d FROM reading_src WHERE t >= 3 ORDER BY n), 3, 5);
SELECT lower, upper, updates FROM batches('readings');
-- The expected collection as of a: the source rows up to a, summed by row
-- (by its text form: -0 and 0 are different rows), each repeated sum times.
CREATE FUNCTION pg_temp.expected(a bigint) RETURNS SETOF reading LANGUAGE sql AS $$
	SELECT x.r FROM (SELECT (array_agg(r))[1] AS r, sum(d) AS s FROM reading_src
					 WHERE t <= a GROUP BY r::text HAVING sum(d) > 0) x,
				  generate_series(1, x.s)
$$;
SELECT a AS as_of,
	   (SELECT count(*) FROM snapshot_rows('readings', NULL::reading, a)) AS rows,
	   (SELECT count(*) FROM (SELECT * FROM snapshot_rows('readings', NULL::reading, a)
							  EXCEPT ALL SELECT * FROM pg_temp.expected(a)) d) AS extra,
	   (SELECT count(*) FROM (SELECT * FROM pg_temp.expected(a)
							  EXCEPT ALL SELECT * FROM snapshot_rows('readings', NULL::reading, a)) d) AS missing,
	   (SELECT count(*) FROM (SELECT s::text FROM snapshot_rows('readings', NULL::reading, a) s
							  EXCEPT ALL SELECT e::text FROM pg_temp.expected(a) e) d) AS extra_text,
	   (SELECT count(*) FROM (SELECT e::text FROM pg_temp.expected(a) e
							  EXCEPT ALL SELECT s::text FROM snapshot_rows('readings', NULL::reading, a) s) d) AS missing_text
FROM generate_series(0, 4) a;
SELECT * FROM snapshot_rows('readings', NULL::reading) s ORDER BY s::text;
SELECT sensor, value, count(*) FROM snapshot_rows('readings', NULL::reading, 2)
GROUP BY sensor, value::text, value ORDER BY sensor, value::text;
-- the default as_of is upper - 1
SELECT (SELECT string_agg(s::text, ',' ORDER BY s::text) FROM snapshot_rows('readings', NULL::reading) s) =
	   (SELECT string_agg(s::text, ',' ORDER BY s::text) FROM snapshot_rows('readings', NULL::reading, 4) s)
	   AS default_is_upper_minus_1;
-- listen_rows: (row, time, diff), as_of < time < until, times kept
SELECT (l.row).sensor, (l.row).value, l.time, l.diff
FROM listen_rows('readings', NULL::reading, 0) l ORDER BY l.time, l.row::text;
SELECT (l.row).sensor, l.time, l.diff
FROM listen_rows('readings', NULL::reading, 1, 3) l ORDER BY l.time, l.row::text;
-- (listen cannot start below since: the updates at time 0 are read with
-- snapshot_rows as of 0)
SELECT (SELECT count(*) FROM (SELECT l.row, l.time, l.diff FROM listen_rows('readings', NULL::reading, 0) l
							  EXCEPT ALL
							  SELECT (array_agg(r))[1], t, sum(d) FROM reading_src
							  WHERE t > 0 GROUP BY r::text, t) d) AS extra,
	   (SELECT count(*) FROM (SELECT (array_agg(r))[1], t, sum(d) FROM reading_src
							  WHERE t > 0 GROUP BY r::text, t
							  EXCEPT ALL
							  SELECT l.row, l.time, l.diff FROM listen_rows('readings', NULL::reading, 0) l) d) AS missing;
SELECT pg_typeof(l.row), pg_typeof(l.time), pg_typeof(l.diff)
FROM listen_rows('readings', NULL::reading, 0) l LIMIT 1;
SELECT count(*) FROM listen_rows('readings', NULL::reading, 4);
-- diffs default to 1 here too
SELECT compare_and_append_rows('readings', ARRAY[('s6', NULL, 6, NULL, NULL, NULL)::reading,
												 ('s6', NULL, 6, NULL, NULL, NULL)::reading],
							   ARRAY[5, 6]::bigint[], NULL, 5, 7);
SELECT (l.row).sensor, l.time, l.diff FROM listen_rows('readings', NULL::reading, 4) l ORDER BY l.time;
SELECT count(*) FROM snapshot_rows('readings', NULL::reading) WHERE sensor = 's6';
-- in the caller's transaction: rolled back with it
BEGIN;
SELECT compare_and_append_rows('readings', ARRAY[('s7', NULL, 7, NULL, NULL, NULL)::reading],
							   ARRAY[7]::bigint[], ARRAY[1]::bigint[], 7, 8);
SELECT count(*) FROM snapshot_rows('readings', NULL::reading) WHERE sensor = 's7';
ROLLBACK;
SELECT shard_upper('readings'), (SELECT count(*) FROM snapshot_rows('readings', NULL::reading)
								 WHERE sensor = 's7') AS s7;
SELECT * FROM verify('readings');

--
-- scalar types: int4, text, timestamptz
--
SELECT create_shard('ints', 'int4');
SELECT compare_and_append_rows('ints', ARRAY[1, 2, 2, -2147483648, 2147483647, 0],
							   ARRAY[0, 0, 1, 1, 1, 1]::bigint[], ARRAY[1, 1, 1, 1, 1, 5]::bigint[], 0, 2);
SELECT a AS as_of, (SELECT string_agg(i::text, ',' ORDER BY i) FROM snapshot_rows('ints', NULL::int4, a) i)
FROM generate_series(0, 1) a;
SELECT pg_typeof(i) FROM snapshot_rows('ints', NULL::int4) i LIMIT 1;
-- any value of the type names it, not only NULL
SELECT count(*) FROM snapshot_rows('ints', 42);
SELECT * FROM listen_rows('ints', NULL::int4, 0) ORDER BY "row";
SELECT snapshot_rows('ints', NULL::int4) AS i ORDER BY 1;

SELECT create_shard('texts', 'text');
CREATE TABLE text_src (v text);
INSERT INTO text_src VALUES (''), (' '), ('a'), ('a'), ('Zoë ☃ 東京'), (E'nul?\\0 tab\t nl\n'),
	('NULL'), (repeat('0123456789abcdef', 131072));
SELECT count(*), sum(octet_length(v)) FROM text_src;
-- 2MB: larger than persist_sink.shared_batch_max_bytes, so its own part
SELECT append_rows('texts', ARRAY(SELECT v FROM text_src)) AS t \gset
SELECT (SELECT count(*) FROM (SELECT * FROM snapshot_rows('texts', NULL::text)
							  EXCEPT ALL SELECT v FROM text_src) d) AS extra,
	   (SELECT count(*) FROM (SELECT v FROM text_src
							  EXCEPT ALL SELECT * FROM snapshot_rows('texts', NULL::text)) d) AS missing;
SELECT md5(string_agg(v, '|' ORDER BY v)) = (SELECT md5(string_agg(v, '|' ORDER BY v)) FROM text_src) AS same
FROM snapshot_rows('texts', NULL::text) v;
SELECT octet_length(v), count(*) FROM snapshot_rows('texts', NULL::text) v GROUP BY 1 ORDER BY 1;
SELECT bool_and("time" = :t) AS at_t, sum(diff) FROM listen_rows('texts', NULL::text, :t - 1);

SELECT create_shard('instants', 'timestamptz');
SET TimeZone = 'Asia/Kolkata';
SELECT compare_and_append_rows('instants',
	ARRAY['2024-03-10 02:30:00+05:30', '2000-01-01 00:00:00.000001+00', '-infinity']::timestamptz[],
	ARRAY[0, 0, 0]::bigint[], NULL, 0, 1);
SET TimeZone = 'America/New_York';
SELECT i, extract(epoch FROM i) FROM snapshot_rows('instants', NULL::timestamptz) i ORDER BY i;
RESET TimeZone;
SELECT i FROM snapshot_rows('instants', NULL::timestamptz) i ORDER BY i;

--
-- negative multiplicity: PS004, naming the row
--
SELECT create_shard('neg_ints', 'int4');
SELECT compare_and_append_rows('neg_ints', ARRAY[7, 8, 7], ARRAY[0, 0, 1]::bigint[],
							   ARRAY[1, 1, -3]::bigint[], 0, 2);
SELECT * FROM snapshot_rows('neg_ints', NULL::int4, 0) ORDER BY 1;
SELECT * FROM snapshot_rows('neg_ints', NULL::int4, 1);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('neg_ints', NULL::int4, 1)$$);
-- listen_rows reports the updates as they are
SELECT * FROM listen_rows('neg_ints', NULL::int4, 0);
-- made whole again, the row is readable
SELECT compare_and_append_rows('neg_ints', ARRAY[7], ARRAY[2]::bigint[], ARRAY[2]::bigint[], 2, 3);
SELECT * FROM snapshot_rows('neg_ints', NULL::int4) ORDER BY 1;
SELECT create_shard('neg_orders', 'orders');
SELECT compare_and_append_rows('neg_orders',
	ARRAY[(9, 'zed', 1.10, '{q}', '{"n": 1}', NULL, '2024-05-05 05:05', NULL)::orders],
	ARRAY[0]::bigint[], ARRAY[-1]::bigint[], 0, 1);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('neg_orders', NULL::orders)$$);

--
-- errors, each with its SQLSTATE; none changes the shard
--
SELECT create_shard('plain');
SELECT compare_and_append('plain', '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
SELECT pg_temp.st('o') AS o_before, pg_temp.st('readings') AS readings_before,
	   pg_temp.st('ints') AS ints_before, pg_temp.st('plain') AS plain_before \gset
-- wrong row type: 42804
SELECT pg_temp.err($$SELECT persist_sink.append_rows('o', ARRAY[('s', NULL, 1, NULL, NULL, NULL)::reading])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('o', ARRAY[ROW(1, 'x')])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1::int8])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY['1'::text])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('readings', ARRAY[1], ARRAY[7]::bigint[], NULL, 7, 8)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('o', NULL::reading)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('ints', NULL::int8)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('texts', NULL::varchar)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('readings', NULL::orders, 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('ints', NULL::text, 0)$$);
-- a shard without a row type: 42804
SELECT pg_temp.err($$SELECT persist_sink.append_rows('plain', ARRAY[1])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('plain', ARRAY[1], ARRAY[1]::bigint[], NULL, 1, 2)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('plain', NULL::int4)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('plain', NULL::bytea, 0)$$);
-- NULL rows, NULL elements and other NULL arguments: 22004
SELECT pg_temp.err($$SELECT persist_sink.append_rows('o', NULL::orders[])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('o', ARRAY[(1, 'x', 1, NULL, NULL, NULL, NULL, NULL)::orders, NULL])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1, NULL, 3])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1, 2], ARRAY[1, NULL]::bigint[])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows(NULL, ARRAY[1])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', NULL::int[], ARRAY[2]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[NULL::int], ARRAY[2]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], NULL, NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[NULL]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[2]::bigint[], NULL, NULL, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[2]::bigint[], NULL, 2, NULL)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows(NULL, NULL::int4)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('ints', NULL::int4, NULL)$$);
-- arrays of different lengths, or of more than one dimension: 2202E
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1, 2], ARRAY[1, 1, 1]::bigint[])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1, 2], ARRAY[]::bigint[])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1, 2], ARRAY[2, 2]::bigint[], ARRAY[1]::bigint[], 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1, 2], ARRAY[2]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[[1, 2], [3, 4]])$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ints', ARRAY[1, 2], ARRAY[[1], [1]]::bigint[])$$);
-- an unknown shard: 42704
SELECT pg_temp.err($$SELECT persist_sink.append_rows('nope', ARRAY[1])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('nope', ARRAY[1], ARRAY[0]::bigint[], NULL, 0, 1)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('nope', NULL::int4)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('nope', NULL::int4, 0)$$);
-- an invalid shard name: 42602
SELECT pg_temp.err($$SELECT persist_sink.append_rows('a/b', ARRAY[1])$$);
-- an upper mismatch: PS001 naming the shard, with the current upper
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[1]::bigint[], NULL, 1, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[3]::bigint[], NULL, 3, 4)$$);
-- times outside [expected_upper, new_upper), or new_upper <= expected_upper: 22023
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[3]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[1], ARRAY[1]::bigint[], NULL, 2, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('ints', ARRAY[]::int[], ARRAY[]::bigint[], NULL, 2, 2)$$);
-- as_of >= upper: PS002; as_of < since: PS003
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('readings', NULL::reading, 7)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('readings', NULL::reading, 9223372036854775807)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('readings', NULL::reading, 0, 8)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('readings', NULL::reading, -1)$$);
SELECT pg_temp.st('readings') = :'readings_before' AS unchanged;
SELECT downgrade_since('readings', 3);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('readings', NULL::reading, 2)$$);
-- since - 1 ("nothing seen yet") is accepted, below it PS003
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('readings', NULL::reading, 2)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('readings', NULL::reading, 1)$$);
SELECT count(*) FROM snapshot_rows('readings', NULL::reading, 3);
SELECT pg_temp.st('readings') AS readings_before \gset
-- a new typed shard has nothing to read yet: no rows (its default as_of is -1)
SELECT create_shard('empty_rows', 'reading');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('empty_rows', NULL::reading)$$);
SELECT count(*) FROM listen_rows('empty_rows', NULL::reading, 0);
-- nothing changed
SELECT pg_temp.st('o') = :'o_before' AS o, pg_temp.st('ints') = :'ints_before' AS ints,
	   pg_temp.st('plain') = :'plain_before' AS plain,
	   pg_temp.st('readings') = :'readings_before' AS readings;
-- a row type that no row can be read back as is refused when the shard is
-- created (an anonymous record is sent with its column types, but record_recv
-- cannot receive it; a pseudo-type has no rows at all)
SELECT t AS row_type, pg_temp.err(format('SELECT persist_sink.create_shard(%L, %L)', 'pseudo_' || t, t)) <> 'ok' AS refused
FROM unnest(ARRAY['record', 'anyelement', 'void']) t;
SELECT count(*) AS pseudo_shards FROM shards WHERE name LIKE 'pseudo\_%';

--
-- clean up
--
DO $$
BEGIN
	PERFORM persist_sink.drop_shard(name) FROM persist_sink.shards
	WHERE name IN ('o', 'readings', 'ints', 'texts', 'instants', 'neg_ints', 'neg_orders', 'plain',
				   'empty_rows') OR name LIKE 'pseudo\_%';
END
$$;
SELECT count(*) AS left_over FROM shards
WHERE name IN ('o', 'readings', 'ints', 'texts', 'instants', 'neg_ints', 'neg_orders', 'plain',
			   'empty_rows') OR name LIKE 'pseudo\_%';
DROP FUNCTION pg_temp.expected(bigint);
DROP TABLE orders, reading_src, text_src;
DROP TYPE reading;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
