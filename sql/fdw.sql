--
-- fdw: shards as tables.  A foreign table of the server persist_sink,
-- bound to a shard, takes INSERT and COPY FROM (each statement one append:
-- all its rows at one time, or none) and answers SELECT from the snapshot,
-- conditions on the key pushed down into the merge.  Untyped and typed
-- shards, every refused statement, every error of the options and the
-- columns, as_of, idempotency keys, privileges, EXPLAIN.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql
-- the foreign tables are the test's own, not the extension's
SET search_path = public, persist_sink;

--
-- An untyped shard: INSERT of one row, of a VALUES list, INSERT ... SELECT
--
SELECT create_shard('ft');
SELECT shard_upper('ft') AS u0 \gset
CREATE FOREIGN TABLE ft (key bytea, val bytea, diff bigint, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'ft');
INSERT INTO ft (key, val) VALUES ('a', 'x');
INSERT INTO ft (key, val) VALUES ('b', 'y'), ('c', 'z'), ('b', 'y');
INSERT INTO ft (key, val, diff)
	SELECT convert_to('k' || lpad(g::text, 4, '0'), 'UTF8'), 'v', 1 FROM generate_series(1, 1000) g;
-- three statements, three appends, three times: each statement's rows at one time
SELECT count(DISTINCT "time") AS times, count(*) AS updates, sum(diff) AS rows
	FROM listen('ft', :u0 - 1);
SELECT count(DISTINCT "time") FROM listen('ft', :u0 - 1) WHERE key >= 'k' AND key < 'l';
-- SELECT: the snapshot, consolidated; time is the snapshot's
SELECT shard_upper('ft') - 1 AS latest \gset
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, diff, "time" = :latest AS at_latest
	FROM ft WHERE key < 'k' ORDER BY key;
SELECT count(*), sum(diff) FROM ft;

-- diff: left out or NULL is 1, -1 retracts, 0 writes nothing
INSERT INTO ft (key, val, diff) VALUES ('b', 'y', -1), ('c', 'z', NULL), ('d', 'w', 0);
SELECT encode(key, 'escape') AS key, diff FROM ft WHERE key < 'k' ORDER BY key;

-- RETURNING gives the rows back (their time is the sink's, not known yet)
INSERT INTO ft (key, val) VALUES ('e', 'r') RETURNING encode(key, 'escape'), diff, "time";

-- a statement with no rows appends nothing
SELECT shard_upper('ft') AS u1 \gset
INSERT INTO ft (key, val) SELECT 'n', 'n' WHERE false;
SELECT shard_upper('ft') = :u1 AS upper_unchanged;

-- a statement that fails writes none of its rows, whichever row fails
SELECT pg_temp.err($$INSERT INTO ft (key, val)
	SELECT CASE WHEN g = 500 THEN NULL ELSE convert_to('f' || g, 'UTF8') END, 'v'
	FROM generate_series(1, 1000) g$$);
SELECT pg_temp.err($$INSERT INTO ft (key, val, "time") VALUES ('t', 't', 5)$$);
SELECT count(*) FROM ft WHERE key >= 'f' AND key < 'g' OR key = 't';

-- the rows stay written whatever the transaction does afterwards, as append()'s
BEGIN;
INSERT INTO ft (key, val) VALUES ('g', 'rolled back');
ROLLBACK;
SELECT encode(val, 'escape') FROM ft WHERE key = 'g';

-- a read-only transaction writes nothing
BEGIN READ ONLY;
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('h', 'h')$$);
ROLLBACK;

--
-- COPY FROM, text and csv: one append per COPY
--
SELECT shard_upper('ft') AS u2 \gset
COPY ft (key, val) FROM STDIN;
\\x6d31	one
\\x6d32	two
\.
COPY ft (key, val, diff) FROM STDIN (FORMAT csv);
m3,three,2
m4,four,1
\.
SELECT count(DISTINCT "time") AS times, count(*) AS updates FROM listen('ft', :u2 - 1);
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, diff
	FROM ft WHERE key >= 'm' AND key < 'n' ORDER BY key;
-- a COPY that fails on a row writes none of its rows
SELECT pg_temp.err($$COPY ft (key, val, diff) FROM PROGRAM 'printf "m5,five,1\nm6,six,x\n"' (FORMAT csv)$$);
SELECT count(*) FROM ft WHERE key IN ('m5', 'm6');

--
-- A statement past persist_sink.table_write_memory: its rows sorted on
-- disk, appended a part at a time, still one append, consolidated
--
SELECT create_shard('big');
CREATE FOREIGN TABLE big (key bytea, val bytea, diff bigint) SERVER persist_sink OPTIONS (shard 'big');
SET persist_sink.table_write_memory = '1MB';
SELECT shard_upper('big') AS b0 \gset
INSERT INTO big (key, val, diff)
	SELECT convert_to(lpad((g % 100000)::text, 6, '0'), 'UTF8'), 'v', 1
	FROM generate_series(1, 200000) g;
SELECT count(DISTINCT "time") AS times, count(*) AS updates, sum(diff) AS rows,
	min(diff) AS min_diff, max(diff) AS max_diff
	FROM listen('big', :b0 - 1);
SELECT parts > 1 AS several_parts FROM shards WHERE name = 'big';
-- rows that cancel out within the statement add nothing
INSERT INTO big (key, val, diff)
	SELECT convert_to(lpad((g % 100000)::text, 6, '0'), 'UTF8'), 'v', CASE WHEN g <= 100000 THEN -1 ELSE 1 END
	FROM generate_series(1, 200000) g;
SELECT count(*), sum(diff) FROM big;
-- one idempotency key, the same content in memory and on disk: one write
SELECT shard_upper('big') AS b1 \gset
RESET persist_sink.table_write_memory;
SET persist_sink.idempotency_key = 'big-1';
INSERT INTO big (key, val) SELECT convert_to('k' || g, 'UTF8'), 'w' FROM generate_series(1, 50000) g;
SET persist_sink.table_write_memory = '1MB';
INSERT INTO big (key, val) SELECT convert_to('k' || g, 'UTF8'), 'w' FROM generate_series(1, 50000) g;
SELECT pg_temp.err($$INSERT INTO big (key, val) SELECT convert_to('k' || g, 'UTF8'), 'x' FROM generate_series(1, 50000) g$$);
RESET persist_sink.idempotency_key;
SELECT count(DISTINCT "time") AS times, sum(diff) AS rows FROM listen('big', :b1 - 1);
-- a failing row past the memory writes none of the statement's rows
SELECT pg_temp.err($$INSERT INTO big (key, val)
	SELECT CASE WHEN g = 150000 THEN NULL ELSE convert_to('f' || g, 'UTF8') END, 'v'
	FROM generate_series(1, 200000) g$$);
SELECT count(*) FROM big WHERE key >= 'f' AND key < 'g';
-- a sum past bigint found while the sorted rows are read back: 22003
SELECT pg_temp.err($$INSERT INTO big (key, val, diff)
	SELECT convert_to('o' || CASE WHEN g <= 2 THEN 0 ELSE g END, 'UTF8'), 'v',
		CASE WHEN g <= 2 THEN 9223372036854775807 ELSE 1 END
	FROM generate_series(1, 200000) g$$);
SELECT count(*) FROM big WHERE key >= 'o' AND key < 'p';
-- ... only the total counts, never the order the rows come back in (as in
-- memory): each of 100 keys gets max, max, -max, -max and 1, total 1
INSERT INTO big (key, val, diff)
	SELECT convert_to('s' || (g % 100), 'UTF8'), 'v',
		CASE WHEN g < 100 THEN 1 WHEN g < 300 THEN 9223372036854775807 WHEN g < 500 THEN -9223372036854775807 ELSE 0 END
	FROM generate_series(0, 199999) g WHERE g < 500 OR g >= 100000;
SELECT count(*) AS keys, sum(diff) AS total FROM big WHERE key >= 's' AND key < 't';
RESET persist_sink.table_write_memory;
DROP FOREIGN TABLE big;
SELECT drop_shard('big');

--
-- Refused: UPDATE, DELETE, TRUNCATE, ON CONFLICT
--
SELECT pg_temp.err($$UPDATE ft SET val = 'u'$$);
SELECT pg_temp.err($$DELETE FROM ft WHERE key = 'a'$$);
SELECT pg_temp.err($$TRUNCATE ft$$);
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('a', 'x') ON CONFLICT DO NOTHING$$);
-- the hint names the alternative
\set ON_ERROR_STOP off
UPDATE ft SET val = 'u';
\set ON_ERROR_STOP on

--
-- A statement writes to a shard once: a second write to the same shard in
-- it (a CTE, another foreign table on the shard) is refused before anything
-- is written; two shards in one statement are two appends
--
CREATE FOREIGN TABLE ft_again (key bytea, val bytea, diff bigint) SERVER persist_sink OPTIONS (shard 'ft');
SELECT seqno AS ft_seqno FROM shards WHERE name = 'ft' \gset
SELECT pg_temp.err($$WITH a AS (INSERT INTO ft (key, val) VALUES ('cte1', 'x') RETURNING key)
	INSERT INTO ft_again (key, val) SELECT key, 'y' FROM a$$);
SELECT pg_temp.err($$WITH a AS (INSERT INTO ft (key, val) VALUES ('cte2', 'x') RETURNING key)
	INSERT INTO ft (key, val) SELECT key, 'y' FROM a$$);
SELECT seqno = :ft_seqno AS ft_unchanged FROM shards WHERE name = 'ft';
SELECT create_shard('ft_other');
CREATE FOREIGN TABLE ft_other (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'ft_other');
WITH a AS (INSERT INTO ft (key, val) VALUES ('cte3', 'x') RETURNING key)
	INSERT INTO ft_other (key, val) SELECT key, 'y' FROM a;
SELECT (SELECT count(*) FROM snapshot('ft') WHERE key = 'cte3') AS in_ft,
	(SELECT count(*) FROM snapshot('ft_other') WHERE key = 'cte3') AS in_other;
INSERT INTO ft (key, val, diff) VALUES ('cte3', 'x', -1);
DROP FOREIGN TABLE ft_again, ft_other;
SELECT drop_shard('ft_other');

--
-- A table without diff: a row of diff n reads as n rows; a negative diff
-- cannot be read that way
--
CREATE FOREIGN TABLE ft_rows (key text, val text) SERVER persist_sink OPTIONS (shard 'ft');
SELECT key, val FROM ft_rows WHERE key IN ('a', 'm3') ORDER BY key;
INSERT INTO ft_rows VALUES ('neg', 'x');
INSERT INTO ft (key, val, diff) VALUES ('neg', 'x', -3);
SELECT pg_temp.err($$SELECT * FROM ft_rows$$);
INSERT INTO ft (key, val, diff) VALUES ('neg', 'x', 2);
-- text columns: the bytes of the text, checked as text when read
SELECT key, val FROM ft_rows WHERE key = 'a';
INSERT INTO ft (key, val) VALUES ('bad', '\xff');
SELECT pg_temp.err($$SELECT * FROM ft_rows WHERE key = 'bad'$$);
INSERT INTO ft (key, val, diff) VALUES ('bad', '\xff', -1);
SELECT count(*) FROM ft_rows;

--
-- Options and columns
--
SELECT pg_temp.err($$CREATE FOREIGN TABLE o1 (key bytea) SERVER persist_sink OPTIONS (shard 'a/b')$$);
SELECT pg_temp.err($$CREATE FOREIGN TABLE o2 (key bytea) SERVER persist_sink OPTIONS (shard 'ft', colour 'red')$$);
SELECT pg_temp.err($$CREATE FOREIGN TABLE o3 (key bytea) SERVER persist_sink OPTIONS (shard 'ft', as_of 'soon')$$);
SELECT pg_temp.err($$CREATE SERVER other FOREIGN DATA WRAPPER persist_sink OPTIONS (shard 'ft')$$);
CREATE FOREIGN TABLE o4 (key bytea) SERVER persist_sink;
SELECT pg_temp.err($$SELECT * FROM o4$$);
CREATE FOREIGN TABLE o5 (key bytea, extra int) SERVER persist_sink OPTIONS (shard 'ft');
SELECT pg_temp.err($$SELECT * FROM o5$$);
CREATE FOREIGN TABLE o6 (key bytea, val int) SERVER persist_sink OPTIONS (shard 'ft');
SELECT pg_temp.err($$INSERT INTO o6 VALUES ('a', 1)$$);
CREATE FOREIGN TABLE o7 (val bytea) SERVER persist_sink OPTIONS (shard 'ft');
SELECT pg_temp.err($$SELECT * FROM o7$$);
CREATE FOREIGN TABLE o8 (key bytea, diff int) SERVER persist_sink OPTIONS (shard 'ft');
SELECT pg_temp.err($$SELECT * FROM o8$$);
CREATE FOREIGN TABLE o9 (key bytea) SERVER persist_sink OPTIONS (shard 'nosuch');
SELECT pg_temp.err($$SELECT * FROM o9$$);
SELECT pg_temp.err($$INSERT INTO o9 VALUES ('a')$$);
-- a table of key alone reads each key's rows; its writes have empty vals
CREATE FOREIGN TABLE keys_only (key bytea) SERVER persist_sink OPTIONS (shard 'ft');
INSERT INTO keys_only VALUES ('z');
SELECT encode(key, 'escape') AS key, length(val) AS val_bytes, diff FROM ft WHERE key = 'z';
-- a dropped column is ignored
CREATE FOREIGN TABLE dropped (key bytea, gone int, val bytea) SERVER persist_sink OPTIONS (shard 'ft');
ALTER FOREIGN TABLE dropped DROP COLUMN gone;
INSERT INTO dropped VALUES ('y', 'after drop');
SELECT encode(val, 'escape') FROM dropped WHERE key = 'y';
DROP FOREIGN TABLE o4, o5, o6, o7, o8, o9, keys_only, dropped;

--
-- Typed shards: the row type's fields as columns, stored as append_rows
-- stores them
--
CREATE TYPE fdw_order AS (id int, item text, qty numeric);
SELECT create_shard('orders', 'fdw_order');
SELECT create_shard('orders_rows', 'fdw_order');
CREATE FOREIGN TABLE orders (qty numeric, id int, item text, diff bigint)
	SERVER persist_sink OPTIONS (shard 'orders');
INSERT INTO orders (id, item, qty) VALUES (1, 'apple', 3), (2, 'pear', NULL), (2, 'pear', NULL);
COPY orders (id, item, qty) FROM STDIN (FORMAT csv);
3,plum,1.5
\.
SELECT id, item, qty, diff FROM orders ORDER BY id;
SELECT append_rows('orders_rows', ARRAY[(1, 'apple', 3), (2, 'pear', NULL), (2, 'pear', NULL),
	(3, 'plum', 1.5)]::fdw_order[]) > 0 AS appended;
-- the same bytes as append_rows wrote
SELECT (SELECT array_agg(key ORDER BY key) FROM snapshot('orders'))
	= (SELECT array_agg(key ORDER BY key) FROM snapshot('orders_rows')) AS same_bytes;
SELECT * FROM snapshot_rows('orders', NULL::fdw_order) ORDER BY id;
-- a table of a typed shard needs every field, under its name and type
CREATE FOREIGN TABLE orders_short (id int, item text) SERVER persist_sink OPTIONS (shard 'orders');
SELECT pg_temp.err($$SELECT * FROM orders_short$$);
CREATE FOREIGN TABLE orders_type (id bigint, item text, qty numeric) SERVER persist_sink OPTIONS (shard 'orders');
SELECT pg_temp.err($$INSERT INTO orders_type VALUES (1, 'a', 1)$$);
CREATE FOREIGN TABLE orders_kv (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'orders');
SELECT pg_temp.err($$SELECT * FROM orders_kv$$);
DROP FOREIGN TABLE orders_short, orders_type, orders_kv;
-- a shard of a scalar row type: one column of that type
SELECT create_shard('numbers', 'int8');
CREATE FOREIGN TABLE numbers (n bigint, diff bigint) SERVER persist_sink OPTIONS (shard 'numbers');
INSERT INTO numbers (n) SELECT g % 3 FROM generate_series(1, 10) g;
SELECT n, diff FROM numbers ORDER BY n;
SELECT pg_temp.err($$INSERT INTO numbers (n) VALUES (NULL)$$);
CREATE FOREIGN TABLE numbers_two (n bigint, m bigint) SERVER persist_sink OPTIONS (shard 'numbers');
SELECT pg_temp.err($$SELECT * FROM numbers_two$$);
DROP FOREIGN TABLE numbers_two;

--
-- as_of: the setting, else the table's option, else upper - 1
--
SELECT create_shard('hist');
SELECT compare_and_append('hist', '{a,b}'::text[], '{1,1}'::text[], '{0,0}', '{1,1}', 0, 1);
SELECT compare_and_append('hist', '{a,c}'::text[], '{1,1}'::text[], '{1,1}', '{-1,1}', 1, 2);
CREATE FOREIGN TABLE hist (key text, val text, "time" bigint) SERVER persist_sink OPTIONS (shard 'hist');
CREATE FOREIGN TABLE hist_at0 (key text, val text, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'hist', as_of '0');
SELECT * FROM hist ORDER BY key;
SELECT * FROM hist_at0 ORDER BY key;
SET persist_sink.as_of = '0';
SELECT * FROM hist ORDER BY key;
SET persist_sink.as_of = '1';
SELECT * FROM hist_at0 ORDER BY key;
SET persist_sink.as_of = '2';
SELECT pg_temp.err($$SELECT * FROM hist$$);
SELECT pg_temp.err($$SET persist_sink.as_of = 'yesterday'$$);
RESET persist_sink.as_of;
SELECT downgrade_since('hist', 1);
SELECT pg_temp.err($$SELECT * FROM hist_at0$$);

--
-- Pushdown: conditions on a bytea key reach the merge, and are still
-- checked on each row
--
CREATE FOREIGN TABLE hist_b (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'hist');
EXPLAIN (COSTS OFF) SELECT * FROM hist_b WHERE key = 'b';
EXPLAIN (COSTS OFF) SELECT * FROM hist_b WHERE key >= 'a' AND key < 'c';
EXPLAIN (COSTS OFF) SELECT * FROM hist_b WHERE key BETWEEN 'a' AND 'b' AND val = '1';
EXPLAIN (COSTS OFF) SELECT * FROM hist_b WHERE 'b' < key;
EXPLAIN (COSTS OFF) SELECT * FROM hist_b WHERE key LIKE 'a%' OR key > 'b';
-- a text key's order is its collation's, not the bytes': not pushed
EXPLAIN (COSTS OFF) SELECT * FROM hist WHERE key = 'b';
-- a parameter is evaluated when the scan starts
PREPARE lookup(bytea) AS SELECT encode(key, 'escape') FROM hist_b WHERE key = $1;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE lookup('c');
EXECUTE lookup('c');
EXECUTE lookup(NULL);
RESET plan_cache_mode;
-- what the pushdown saved: three batches of disjoint keys
SELECT create_shard('ranges');
SELECT compare_and_append('ranges', '{a,b,c}'::text[], '{1,1,1}'::text[], '{0,0,0}', '{1,1,1}', 0, 1);
SELECT compare_and_append('ranges', '{d,e,f}'::text[], '{1,1,1}'::text[], '{1,1,1}', '{1,1,1}', 1, 2);
SELECT compare_and_append('ranges', '{g,h,i}'::text[], '{1,1,1}'::text[], '{2,2,2}', '{1,1,1}', 2, 3);
CREATE FOREIGN TABLE ranges (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'ranges');
EXPLAIN (COSTS OFF, ANALYZE, TIMING OFF, SUMMARY OFF) SELECT * FROM ranges WHERE key = 'e';
EXPLAIN (COSTS OFF, ANALYZE, TIMING OFF, SUMMARY OFF) SELECT * FROM ranges WHERE key > 'i';
EXPLAIN (COSTS OFF, ANALYZE, TIMING OFF, SUMMARY OFF) SELECT * FROM ranges WHERE key < 'b';
SELECT encode(key, 'escape') FROM ranges WHERE key BETWEEN 'c' AND 'g' ORDER BY 1;
SELECT encode(key, 'escape') FROM ranges WHERE key > 'c' AND key < 'g' ORDER BY 1;
SELECT encode(key, 'escape') FROM ranges WHERE key = 'e' AND key = 'f';
-- in a join, the key of the other side is a parameter of each rescan
SELECT encode(r.key, 'escape') FROM (VALUES ('b'::bytea), ('h')) v(k)
	CROSS JOIN LATERAL (SELECT key FROM ranges WHERE key = v.k) r ORDER BY 1;

--
-- Idempotency keys: one per statement, with append()'s outcomes
--
SELECT shard_upper('ft') AS u3 \gset
SET persist_sink.idempotency_key = 'fdw-statement-1';
INSERT INTO ft (key, val) VALUES ('idem', '1');
-- the retry of the same content is not written again
INSERT INTO ft (key, val) VALUES ('idem', '1');
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('idem', '2')$$);
RESET persist_sink.idempotency_key;
SELECT encode(val, 'escape') AS val, diff FROM ft WHERE key = 'idem';
SELECT pg_temp.err($$SET persist_sink.idempotency_key = '$$ || repeat('k', 201) || $$'$$);

--
-- Privileges: the foreign table's own, and those of append() and
-- snapshot() on the shard
--
CREATE ROLE regress_fdw_writer IN ROLE persist_sink_writer;
CREATE ROLE regress_fdw_reader IN ROLE persist_sink_reader;
CREATE ROLE regress_fdw_nobody;
GRANT INSERT, SELECT ON ft TO regress_fdw_writer, regress_fdw_reader, regress_fdw_nobody;
SET ROLE regress_fdw_nobody;
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('p', 'p')$$);
SELECT pg_temp.err($$SELECT count(*) FROM ft$$);
SET ROLE regress_fdw_reader;
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('p', 'p')$$);
SELECT pg_temp.err($$SELECT count(*) FROM hist$$);
SELECT pg_temp.err($$SELECT count(*) > 0 FROM ft$$);
SET ROLE regress_fdw_writer;
SELECT pg_temp.err($$INSERT INTO ft (key, val) VALUES ('p', 'p')$$);
RESET ROLE;
-- the shard's grants let them in
SELECT grant_shard('ft', 'regress_fdw_writer', 'append');
SELECT grant_shard('ft', 'regress_fdw_reader', 'read');
SET ROLE regress_fdw_writer;
INSERT INTO ft (key, val) VALUES ('p', 'p');
SET ROLE regress_fdw_reader;
SELECT encode(val, 'escape') FROM ft WHERE key = 'p';
RESET ROLE;
-- a shard created by another role needs its grant
GRANT CREATE ON SCHEMA public TO regress_fdw_writer;
SET ROLE regress_fdw_writer;
SELECT create_shard('owned');
CREATE FOREIGN TABLE owned (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'owned');
INSERT INTO owned VALUES ('o', 'o');
GRANT SELECT, INSERT ON owned TO regress_fdw_reader;
SET ROLE regress_fdw_reader;
SELECT pg_temp.err($$SELECT count(*) FROM owned$$);
RESET ROLE;
SET ROLE regress_fdw_writer;
SELECT grant_shard('owned', 'regress_fdw_reader', 'read');
SET ROLE regress_fdw_reader;
SELECT encode(key, 'escape') FROM owned;
RESET ROLE;
DROP FOREIGN TABLE owned;
SELECT drop_shard('owned');
REVOKE ALL ON ft FROM regress_fdw_writer, regress_fdw_reader, regress_fdw_nobody;
REVOKE CREATE ON SCHEMA public FROM regress_fdw_writer;
SELECT revoke_shard('ft', 'regress_fdw_writer', 'append');
SELECT revoke_shard('ft', 'regress_fdw_reader', 'read');
DROP ROLE regress_fdw_writer, regress_fdw_reader, regress_fdw_nobody;

DROP FOREIGN TABLE ft, ft_rows, orders, numbers, hist, hist_at0, hist_b, ranges;
SELECT drop_shard(s) FROM unnest(ARRAY['ft', 'orders', 'orders_rows', 'numbers', 'hist', 'ranges']) s;
DROP TYPE fdw_order;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
