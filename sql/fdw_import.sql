--
-- fdw_import: what a user of postgres_fdw expects of the shards' foreign
-- tables.  IMPORT FOREIGN SCHEMA persist_sink makes a table per shard the
-- caller may read (LIMIT TO and EXCEPT name shards), whose SELECT * reads
-- as snapshot() does; ANALYZE counts a table's rows and samples them; the
-- planner expects of a table never analyzed as many rows as its shard has
-- updates, and never raises while planning for a shard it cannot read.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql
\i sql/include/as_role.psql
SET search_path = public, persist_sink;

--
-- Shards of every kind: untyped (a row of diff 2, a retraction), typed
-- (a composite type in a schema of its own, a field with a collation and
-- a typmod, a field named time), of a scalar type, names that need
-- quoting, a name too long for a table, a row type dropped since
--
SELECT create_shard('imp_kv');
SELECT compare_and_append('imp_kv', '{a,b,c,b}'::text[], '{1,2,3,2}'::text[], '{0,0,0,0}', '{1,1,1,1}', 0, 1);
SELECT compare_and_append('imp_kv', '{c}'::text[], '{3}'::text[], '{1}', '{-1}', 1, 2);
CREATE SCHEMA imp_types;
CREATE TYPE imp_types.item AS (id int, name text COLLATE "C", price numeric(10,2), "time" date);
SELECT create_shard('imp_typed', 'imp_types.item');
SELECT compare_and_append_rows('imp_typed', ARRAY[(1, 'apple', 1.5, '2024-01-01'),
	(2, 'pear', NULL, NULL), (2, 'pear', NULL, NULL)]::imp_types.item[], '{0,0,0}', NULL, 0, 1);
SELECT create_shard('imp_scalar', 'int8');
SELECT compare_and_append_rows('imp_scalar', ARRAY[7, 7, 8]::int8[], '{0,0,0}', NULL, 0, 1);
SELECT create_shard('My Shard');
SELECT compare_and_append('My Shard', '{m}'::text[], '{M}'::text[], '{0}', '{1}', 0, 1);
SELECT create_shard('.');
SELECT create_shard('it''s "quoted"');
SELECT create_shard('select');
SELECT create_shard('imp_' || repeat('x', 60));
CREATE TYPE imp_gone AS (x int);
SELECT create_shard('imp_gone', 'imp_gone');
DROP TYPE imp_gone;

--
-- The remote schema is persist_sink; the import takes no option
--
CREATE SCHEMA imp_all;
SELECT pg_temp.err($$IMPORT FOREIGN SCHEMA public FROM SERVER persist_sink INTO imp_all$$);
SELECT pg_temp.err($$IMPORT FOREIGN SCHEMA persist_sink FROM SERVER persist_sink INTO imp_all
	OPTIONS (as_of '1')$$);

--
-- LIMIT TO: the shards named, tables named as they are, whatever quoting
-- they need (a name that is no shard is no table)
--
CREATE SCHEMA imp_some;
IMPORT FOREIGN SCHEMA persist_sink LIMIT TO (imp_kv, imp_typed, imp_scalar, "My Shard", ".",
	"it's ""quoted""", "select", imp_gone, no_such_shard)
	FROM SERVER persist_sink INTO imp_some;
SELECT c.relname, t.ftoptions
	FROM pg_class c JOIN pg_foreign_table t ON t.ftrelid = c.oid
	WHERE c.relnamespace = 'imp_some'::regnamespace ORDER BY c.relname COLLATE "C";
\d imp_some.imp_kv
\d imp_some.imp_typed
\d imp_some.imp_scalar
\d imp_some."it's ""quoted"""

-- SELECT * reads as snapshot() does
SELECT * FROM imp_some.imp_kv ORDER BY key;
SELECT (SELECT count(*) FROM (SELECT * FROM imp_some.imp_kv
		EXCEPT ALL SELECT * FROM snapshot('imp_kv')) d) AS only_in_table,
	(SELECT count(*) FROM (SELECT * FROM snapshot('imp_kv')
		EXCEPT ALL SELECT * FROM imp_some.imp_kv) d) AS only_in_snapshot;
SELECT * FROM imp_some."My Shard";
SELECT count(*) FROM imp_some.".";
-- a typed shard's table: its rows' fields, each with its diff
SELECT * FROM imp_some.imp_typed ORDER BY id;
SELECT (SELECT array_agg(d ORDER BY d) FROM (SELECT (id, name, price, "time")::imp_types.item::text
			|| ' x' || diff AS d FROM imp_some.imp_typed) t)
	= (SELECT array_agg(d ORDER BY d) FROM (SELECT r::text || ' x' || count(*) AS d
			FROM snapshot_rows('imp_typed', NULL::imp_types.item) r GROUP BY r::text) s) AS same_as_snapshot_rows;
SELECT "row", diff, "time" = shard_upper('imp_scalar') - 1 AS at_latest FROM imp_some.imp_scalar ORDER BY 1;
-- the table writes too
INSERT INTO imp_some."My Shard" (key, val) VALUES ('n', 'N');
SELECT encode(key, 'escape') AS key, diff FROM snapshot('My Shard') ORDER BY key;

--
-- Every shard, and EXCEPT
--
SET client_min_messages = error;
IMPORT FOREIGN SCHEMA persist_sink FROM SERVER persist_sink INTO imp_all;
RESET client_min_messages;
-- each table is a shard's; of this test's shards, only the long name and
-- the dropped row type have none
SELECT relname FROM pg_class WHERE relnamespace = 'imp_all'::regnamespace
	EXCEPT SELECT name FROM shards;
SELECT name FROM shards WHERE name LIKE 'imp%' OR name IN ('My Shard', '.', 'it''s "quoted"', 'select')
	EXCEPT SELECT relname FROM pg_class WHERE relnamespace = 'imp_all'::regnamespace
	ORDER BY 1;
SELECT (SELECT array_agg(key ORDER BY key) FROM imp_all.imp_kv)
	= (SELECT array_agg(key ORDER BY key) FROM imp_some.imp_kv) AS same_rows;
CREATE SCHEMA imp_except;
SET client_min_messages = error;
IMPORT FOREIGN SCHEMA persist_sink EXCEPT (imp_kv, "My Shard", "select")
	FROM SERVER persist_sink INTO imp_except;
RESET client_min_messages;
SELECT relname FROM pg_class WHERE relnamespace = 'imp_except'::regnamespace
	AND relname IN ('imp_kv', 'imp_typed', 'imp_scalar', 'My Shard', '.', 'it''s "quoted"', 'select')
	ORDER BY relname COLLATE "C";
-- a table that exists already: the import fails, naming it
SELECT pg_temp.err($$IMPORT FOREIGN SCHEMA persist_sink LIMIT TO (imp_kv)
	FROM SERVER persist_sink INTO imp_some$$);

--
-- A role gets tables for the shards it may read, and no others
--
CREATE ROLE regress_imp_reader IN ROLE persist_sink_reader;
CREATE ROLE regress_imp_nobody;
CREATE SCHEMA imp_mine AUTHORIZATION regress_imp_reader;
GRANT USAGE ON SCHEMA imp_types TO regress_imp_reader;
SELECT grant_shard('imp_kv', 'regress_imp_reader', 'read');
SELECT grant_shard('imp_typed', 'regress_imp_reader', 'read');
SELECT grant_shard('imp_' || repeat('x', 60), 'regress_imp_reader', 'read');
SET ROLE regress_imp_reader;
IMPORT FOREIGN SCHEMA persist_sink FROM SERVER persist_sink INTO imp_mine;
SELECT relname FROM pg_class WHERE relnamespace = 'imp_mine'::regnamespace
	AND relname IN ('imp_kv', 'imp_typed', 'imp_scalar', 'My Shard', '.', 'it''s "quoted"', 'select')
	ORDER BY relname COLLATE "C";
SELECT count(*) FROM imp_mine.imp_kv;
RESET ROLE;
-- a role that is no reader may read no shard
CREATE SCHEMA imp_none AUTHORIZATION regress_imp_nobody;
GRANT USAGE ON FOREIGN SERVER persist_sink TO regress_imp_nobody;
SELECT pg_temp.as_role('regress_imp_nobody',
	$$IMPORT FOREIGN SCHEMA persist_sink FROM SERVER persist_sink INTO imp_none$$);
REVOKE USAGE ON FOREIGN SERVER persist_sink FROM regress_imp_nobody;

--
-- Estimates: a table never analyzed is expected to hold as many rows as
-- its shard has updates (3000 here); a table without diff reads more
-- (30 rows of diff 50: 4470 rows)
--
SELECT create_shard('imp_big');
SELECT compare_and_append('imp_big', array_agg(convert_to('k' || g, 'UTF8')),
	array_agg('v'::bytea), array_agg(0::bigint),
	array_agg(CASE WHEN g % 100 = 0 THEN 50 ELSE 1 END::bigint), 0, 1)
	FROM generate_series(1, 3000) g;
IMPORT FOREIGN SCHEMA persist_sink LIMIT TO (imp_big) FROM SERVER persist_sink INTO imp_some;
CREATE FOREIGN TABLE imp_big_rows (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'imp_big');
CREATE TABLE imp_heap (k bytea);
INSERT INTO imp_heap SELECT convert_to('k' || g, 'UTF8') FROM generate_series(1, 10) g;
ANALYZE imp_heap;
SELECT updates FROM shards WHERE name = 'imp_big';
-- a new session, which has no copy of the states yet: it reads them
\c
SET search_path = public, persist_sink;
\i sql/include/err.psql
-- The rows the planner expects of the first foreign scan of a query
CREATE FUNCTION pg_temp.scan_rows(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
	plan json;
BEGIN
	EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO plan;
	RETURN jsonb_path_query_first(plan::jsonb,
		'strict $.**?(@."Node Type" == "Foreign Scan")."Plan Rows"')::float8;
END
$$;
SELECT pg_temp.scan_rows($$SELECT * FROM imp_heap h JOIN imp_some.imp_big b ON b.key = h.k$$) AS big_rows,
	pg_temp.scan_rows($$SELECT * FROM imp_heap h JOIN imp_big_rows b ON b.key = h.k$$) AS big_rows_no_diff,
	pg_temp.scan_rows($$SELECT * FROM imp_some.imp_kv$$) AS kv_rows;
SELECT count(*) FROM imp_big_rows;
-- a shard that does not exist, or that the caller may not read: the
-- fixed estimate, and no error until the scan
CREATE FOREIGN TABLE imp_nosuch (key bytea) SERVER persist_sink OPTIONS (shard 'imp_nosuch');
SELECT pg_temp.scan_rows($$SELECT * FROM imp_nosuch$$) AS nosuch_rows;
GRANT SELECT ON imp_some.imp_big, imp_some.imp_kv TO regress_imp_reader;
GRANT USAGE ON SCHEMA imp_some TO regress_imp_reader;
SET ROLE regress_imp_reader;
SELECT pg_temp.scan_rows($$SELECT * FROM imp_some.imp_big$$) AS unreadable_rows,
	pg_temp.scan_rows($$SELECT * FROM imp_some.imp_kv$$) AS readable_rows;
SELECT pg_temp.err($$SELECT count(*) FROM imp_some.imp_big$$);
RESET ROLE;

--
-- ANALYZE: reltuples is the exact count of the rows a scan reads, from a
-- sample of them; the planner then takes it
--
SELECT reltuples, relpages FROM pg_class WHERE oid = 'imp_big_rows'::regclass;
SET default_statistics_target = 1;	-- a sample of 300 rows of 4470
ANALYZE imp_big_rows;
RESET default_statistics_target;
SELECT reltuples, relpages > 0 AS has_pages FROM pg_class WHERE oid = 'imp_big_rows'::regclass;
SELECT pg_temp.scan_rows($$SELECT * FROM imp_heap h JOIN imp_big_rows b ON b.key = h.k$$) AS big_rows_no_diff;
SELECT attname, null_frac, n_distinct, avg_width FROM pg_stats
	WHERE schemaname = 'public' AND tablename = 'imp_big_rows' AND attname = 'val';
SELECT attname, n_distinct IS NOT NULL AS has_n_distinct FROM pg_stats
	WHERE schemaname = 'public' AND tablename = 'imp_big_rows' AND attname = 'key';
-- with diff: one row per key and val, every key distinct in the sample
ANALYZE imp_some.imp_big;
SELECT reltuples FROM pg_class WHERE oid = 'imp_some.imp_big'::regclass;
SELECT attname, n_distinct FROM pg_stats WHERE schemaname = 'imp_some' AND tablename = 'imp_big'
	ORDER BY attname;
-- typed, as of the table's option, a new shard's: the rows a scan reads
ANALYZE imp_some.imp_typed;
SELECT reltuples FROM pg_class WHERE oid = 'imp_some.imp_typed'::regclass;
SELECT attname, n_distinct FROM pg_stats WHERE schemaname = 'imp_some' AND tablename = 'imp_typed'
	AND attname IN ('id', 'name') ORDER BY attname;
CREATE FOREIGN TABLE imp_kv_at0 (key bytea, val bytea) SERVER persist_sink
	OPTIONS (shard 'imp_kv', as_of '0');
ANALYZE imp_kv_at0;
SELECT reltuples, (SELECT count(*) FROM imp_kv_at0) AS scanned FROM pg_class WHERE oid = 'imp_kv_at0'::regclass;
ANALYZE imp_some.".";
SELECT reltuples FROM pg_class WHERE oid = 'imp_some."."'::regclass;
-- a negative multiplicity cannot be counted without diff, as a scan cannot read it
SELECT compare_and_append('imp_kv', '{z}'::text[], '{z}'::text[], '{2}', '{-1}', 2, 3);
CREATE FOREIGN TABLE imp_kv_rows (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'imp_kv');
SELECT pg_temp.err($$ANALYZE imp_kv_rows$$);
-- ANALYZE needs snapshot()'s rights on the shard: the caller's ...
SELECT pg_temp.err($$ANALYZE imp_nosuch$$);
GRANT CREATE ON SCHEMA public TO regress_imp_reader;
SET ROLE regress_imp_reader;
CREATE FOREIGN TABLE imp_theirs (key bytea) SERVER persist_sink OPTIONS (shard 'imp_big');
SELECT pg_temp.err($$ANALYZE imp_theirs$$);
RESET ROLE;
-- ... and its owner, as whom PostgreSQL samples it: those the owner lets
-- SELECT the table may read its statistics
SELECT pg_temp.err($$ANALYZE imp_theirs$$);
SELECT reltuples FROM pg_class WHERE oid = 'imp_theirs'::regclass;
DROP FOREIGN TABLE imp_theirs;
REVOKE CREATE ON SCHEMA public FROM regress_imp_reader;

SET client_min_messages = warning;
DROP SCHEMA imp_all, imp_some, imp_except, imp_none, imp_mine, imp_types CASCADE;
RESET client_min_messages;
DROP FOREIGN TABLE imp_big_rows, imp_nosuch, imp_kv_at0, imp_kv_rows;
DROP TABLE imp_heap;
SELECT drop_shard(s) FROM unnest(ARRAY['imp_kv', 'imp_typed', 'imp_scalar', 'My Shard', '.',
	'it''s "quoted"', 'select', 'imp_' || repeat('x', 60), 'imp_gone', 'imp_big']) s;
DROP ROLE regress_imp_reader, regress_imp_nobody;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
