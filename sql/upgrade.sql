--
-- upgrade: install version 0.1, write to its shards, ALTER EXTENSION
-- persist_sink UPDATE to 0.2.  The shards read identically and still accept
-- writes, the typed functions appear and work, and the upgraded extension
-- has exactly the objects of a fresh CREATE EXTENSION.  The suite ends with
-- the extension freshly created at its default version, for the suites that
-- follow.  Sink times vary from run to run, so they are never printed.
--
-- Start from nothing: earlier suites leave the extension and shards behind
-- (quietly, so that the output is the same when this suite runs alone).
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS persist_sink;
RESET client_min_messages;
-- No background compaction, so that batches and seqnos are deterministic;
-- a new session starts after the reload
ALTER SYSTEM SET persist_sink.compaction = off;
SELECT pg_reload_conf();
\c
SHOW persist_sink.compaction;

--
-- version 0.1
--
CREATE EXTENSION persist_sink VERSION '0.1';
SELECT extversion FROM pg_extension WHERE extname = 'persist_sink';

\i sql/include/err.psql

\i sql/include/digest.psql

-- A snapshot as one line of text, without the many keys k* and big* (times
-- left out: sink times vary).
CREATE FUNCTION pg_temp.line(s text) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s=%s%s%s', encode(key, 'escape'), encode(val, 'escape'),
									  CASE WHEN diff > 0 THEN '+' END, diff), ' '
							   ORDER BY key, val), '')
	FROM persist_sink.snapshot(s) WHERE key NOT LIKE 'k%' AND key NOT LIKE 'big%'
$$;

-- The extension's member objects and how they are defined: for a function
-- its signature, arguments with names and defaults, result, volatility,
-- strictness, rows, C symbol, ACL (sorted), SECURITY DEFINER and settings;
-- for a relation its kind, columns and ACL; for the schema its ACL.  Also
-- the tables dumped by pg_dump.
-- (With a fixed search_path, so that names are always qualified alike.)
CREATE FUNCTION pg_temp.members()
RETURNS TABLE(kind text, ident text, definition text, acl text, secdef boolean, config text)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT 'function', p.oid::regprocedure::text,
		   format('args=%s result=%s volatile=%s strict=%s rows=%s symbol=%s comment=%s',
				  pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
				  p.provolatile, p.proisstrict, p.prorows, p.prosrc,
				  obj_description(p.oid, 'pg_proc')),
		   array(SELECT a::text FROM unnest(p.proacl) a ORDER BY 1)::text,
		   p.prosecdef, p.proconfig::text
	FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'persist_sink')
	UNION ALL
	SELECT 'relation', c.relname,
		   format('kind=%s columns=%s comment=%s', c.relkind,
				  (SELECT string_agg(format('%s %s %s', a.attname, format_type(a.atttypid, a.atttypmod),
											a.attstorage), ', ' ORDER BY a.attnum)
				   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
				  obj_description(c.oid, 'pg_class')),
		   array(SELECT a::text FROM unnest(c.relacl) a ORDER BY 1)::text, NULL, NULL
	FROM pg_depend d JOIN pg_class c ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'persist_sink')
	UNION ALL
	SELECT 'member', pg_describe_object(d.classid, d.objid, d.objsubid), NULL, NULL, NULL, NULL
	FROM pg_depend d
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'persist_sink')
	UNION ALL
	SELECT 'schema', n.nspname, NULL, array(SELECT a::text FROM unnest(n.nspacl) a ORDER BY 1)::text,
		   NULL, NULL
	FROM pg_namespace n WHERE n.nspname = 'persist_sink'
	UNION ALL
	SELECT 'dumped', c::regclass::text, NULL, NULL, NULL, NULL
	FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'persist_sink'
$$;

-- Who may execute each function of the extension.
CREATE FUNCTION pg_temp.grants()
RETURNS TABLE(function text, writer boolean, reader boolean, public boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT p.oid::regprocedure::text,
		   has_function_privilege('persist_sink_writer', p.oid, 'EXECUTE'),
		   has_function_privilege('persist_sink_reader', p.oid, 'EXECUTE'),
		   has_function_privilege('public', p.oid, 'EXECUTE')
	FROM pg_proc p WHERE p.pronamespace = 'persist_sink'::regnamespace
	ORDER BY p.oid::regprocedure::text COLLATE "C"
$$;

SELECT kind, ident FROM pg_temp.members() WHERE kind IN ('function', 'relation', 'dumped')
ORDER BY kind, ident COLLATE "C";
-- the typed functions do not exist yet
SELECT count(*) AS typed_functions FROM pg_proc
WHERE pronamespace = 'persist_sink'::regnamespace
  AND proname IN ('append_rows', 'compare_and_append_rows', 'snapshot_rows', 'listen_rows');
SELECT pg_temp.err($$SELECT persist_sink.append_rows('up_ints', ARRAY[1])$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('up_ints', NULL::int4)$$);

-- (types and tables are created in public, not in the extension's schema)
SET search_path = public, persist_sink;
-- compare_and_append: inline and blob batches, bytea and text
SELECT create_shard('up_cas');
SELECT compare_and_append('up_cas', '{a,b,c}'::text[], '{1,1,1}'::text[], '{0,1,2}', '{1,1,2}', 0, 3);
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('up_cas', ARRAY['\x00ff'::bytea, 'a'], ARRAY['\x'::bytea, '2'],
						  '{3,4}', '{1,1}', 3, 5);
SELECT compare_and_append('up_cas', '{a,c}'::text[], '{1,1}'::text[], '{5,5}', '{-1,-1}', 5, 7);
RESET persist_sink.inline_max_bytes;
SELECT compare_and_append('up_cas',
	ARRAY(SELECT 'k' || i FROM generate_series(1, 500) i),
	ARRAY(SELECT repeat('v', i % 50) FROM generate_series(1, 500) i),
	ARRAY(SELECT 7 + i % 3 FROM generate_series(1, 500) i)::bigint[],
	array_fill(1::bigint, ARRAY[500]), 7, 10);
SELECT lower, upper, since, parts, updates, inline FROM batches('up_cas');
SELECT downgrade_since('up_cas', 2);
SELECT pg_temp.line('up_cas');
-- append: the sink
SELECT create_shard('up_sink');
SELECT append('up_sink', '{x,y}'::text[], '{1,1}'::text[], '{1,2}') > 0 AS appended;
SELECT append('up_sink', ARRAY['z'::bytea], ARRAY['\x01'::bytea], '{1}') > 0 AS appended;
SELECT append('up_sink', ARRAY(SELECT 'big' || i FROM generate_series(1, 30000) i),
			  ARRAY(SELECT md5(i::text) FROM generate_series(1, 30000) i),
			  array_fill(1::bigint, ARRAY[30000])) > 0 AS appended;
SELECT append('up_sink', '{x}'::text[], '{1}'::text[], '{-1}') > 0 AS appended;
SELECT shard_upper('up_sink') AS sink_upper \gset
SELECT count(*), sum(diff) FROM snapshot('up_sink');
-- a shard that records a row type can be created in 0.1 already; its rows
-- are written here as their send form, with empty vals
SELECT create_shard('up_ints', 'int4');
SELECT compare_and_append('up_ints', ARRAY[int4send(1), int4send(2), int4send(-3)],
						  ARRAY['\x'::bytea, '\x', '\x'], '{0,0,1}', '{1,2,1}', 0, 2);
-- a shard of a domain whose check says which role it runs as: a domain
-- check is code a user defines, run when a typed read receives a row
CREATE FUNCTION public.up_check_role(v int4) RETURNS boolean
LANGUAGE plpgsql STRICT AS $$
BEGIN
	RAISE NOTICE 'domain check of % as %', v, current_user;
	RETURN true;
END
$$;
CREATE DOMAIN public.up_checked AS int4 CHECK (public.up_check_role(VALUE));
CREATE ROLE regress_up_reader;
GRANT persist_sink_reader TO regress_up_reader;
SELECT create_shard('up_dom', 'public.up_checked');
SELECT compare_and_append('up_dom', ARRAY[int4send(7)], ARRAY['\x'::bytea], '{0}', '{1}', 0, 1);
SELECT * FROM verify('up_cas') UNION ALL SELECT * FROM verify('up_sink')
UNION ALL SELECT * FROM verify('up_ints') UNION ALL SELECT * FROM verify('up_dom');
-- every function of 0.1 is SECURITY DEFINER; none of them handles rows
-- through their type (only 0.2's typed functions do, refused below), so a
-- reader of the domain's shard runs none of its code with the owner's
-- rights: no NOTICE
SET ROLE regress_up_reader;
SELECT encode(key, 'hex') AS key, encode(val, 'hex') AS val, diff FROM snapshot('up_dom');
SELECT upper, batches, updates FROM shards WHERE name = 'up_dom';
SELECT parts, updates FROM batches('up_dom');
SELECT * FROM verify('up_dom');
RESET ROLE;

-- everything about the shards, before the update
CREATE TEMP TABLE before AS
SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates,
	   pg_temp.digest(name) AS digest
FROM shards WHERE name LIKE 'up\_%';
CREATE TEMP TABLE before_history AS
SELECT a AS as_of, pg_temp.digest('up_cas', a) AS digest, pg_temp.listen_digest('up_cas', a) AS listen
FROM generate_series(2, 9) a;
SELECT name, seqno, upper, since, batches, parts, updates FROM before
WHERE name <> 'up_sink' ORDER BY name;

--
-- version 0.2: its typed functions are SECURITY DEFINER, so the library
-- refuses them (they would run the row type's code with the owner's
-- rights) until the update to 0.3
--
ALTER EXTENSION persist_sink UPDATE TO '0.2';
SELECT extversion FROM pg_extension WHERE extname = 'persist_sink';
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('up_ints', NULL::int4)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('up_ints', NULL::int4, 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.append_rows('up_ints', ARRAY[1])$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('up_ints', ARRAY[1], '{2}', NULL, 2, 3)$$);
-- a role granted persist_sink_reader is refused too, before the domain's
-- check could run as the owner: no NOTICE
SET ROLE regress_up_reader;
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('up_dom', NULL::public.up_checked)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen_rows('up_dom', NULL::public.up_checked, 0)$$);
RESET ROLE;

--
-- ALTER EXTENSION persist_sink UPDATE, with views of the user's over the
-- extension's views shards and stats, which the update extends in place
--
CREATE VIEW public.up_my_shards AS SELECT * FROM persist_sink.shards;
CREATE VIEW public.up_my_stats AS SELECT shard, appends FROM persist_sink.stats;
ALTER EXTENSION persist_sink UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'persist_sink';
SELECT (SELECT count(*) FROM public.up_my_shards WHERE name LIKE 'up\_%') AS my_shards,
	   (SELECT count(*) FROM public.up_my_stats) = (SELECT count(*) FROM stats) AS my_stats;
DROP VIEW public.up_my_shards, public.up_my_stats;
-- the update to 0.6 cut the blob table's parts into chunks: the sink's
-- large part is several rows, none longer than a chunk
SELECT count(*) > count(DISTINCT key) AS a_part_in_several_rows,
	   max(octet_length(data)) <= 7864 AS rows_of_a_chunk
FROM persist_sink.blob;
-- the shards read identically: state, content, time travel and listen
SELECT * FROM (SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates,
					  pg_temp.digest(name) AS digest
			   FROM shards WHERE name LIKE 'up\_%'
			   EXCEPT SELECT * FROM before) changed;
SELECT * FROM (SELECT * FROM before
			   EXCEPT SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes,
							 updates, pg_temp.digest(name)
			   FROM shards WHERE name LIKE 'up\_%') lost;
SELECT count(*) AS as_ofs,
	   count(*) FILTER (WHERE b.digest = pg_temp.digest('up_cas', b.as_of)
						AND b.listen = pg_temp.listen_digest('up_cas', b.as_of)) AS same
FROM before_history b;
SELECT * FROM verify('up_cas') UNION ALL SELECT * FROM verify('up_sink')
UNION ALL SELECT * FROM verify('up_ints');
SELECT pg_temp.line('up_cas');
-- and accept writes: compare_and_append and append
SELECT compare_and_append('up_cas', '{b,d}'::text[], '{1,1}'::text[], '{10,11}', '{-1,1}', 10, 12) > 0 AS written;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('up_cas', '{e}'::text[], '{1}'::text[], '{10}', '{1}', 10, 11)$$);
SELECT pg_temp.line('up_cas');
SELECT count(*) AS rows, sum(diff) AS diffs FROM snapshot('up_cas');
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, "time", diff
FROM listen('up_cas', 9) ORDER BY "time", key;
SELECT append('up_sink', '{y,w}'::text[], '{1,1}'::text[], '{-2,1}') > :sink_upper AS later;
SELECT count(*), sum(diff) FROM snapshot('up_sink');
SELECT pg_temp.line('up_sink');
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, diff
FROM listen('up_sink', :sink_upper - 1) ORDER BY key;
SELECT * FROM verify('up_cas') UNION ALL SELECT * FROM verify('up_sink');
-- shards made before 0.9 keep the privileges every shard had: owned by the
-- extension's owner, append granted to persist_sink_writer and read to
-- persist_sink_reader, each recorded in a row of shard_acl
SELECT s.name, s.owner = e.extowner::regrole AS owned_by_extension_owner,
	   (SELECT string_agg(a.privilege_type || ' to ' || a.grantee::regrole, ', '
						  ORDER BY a.privilege_type)
		FROM aclexplode(s.privileges) a) AS grants,
	   EXISTS (SELECT FROM persist_sink.shard_acl r WHERE r.shard = s.name) AS recorded
FROM shards s, pg_extension e
WHERE e.extname = 'persist_sink' AND s.name LIKE 'up\_%' ORDER BY s.name;
-- so a writer that owns none of them still appends and a reader reads
CREATE ROLE regress_up_writer IN ROLE persist_sink_writer;
SET ROLE regress_up_writer;
SELECT append('up_sink', '{v}'::text[], '{1}'::text[], '{1}') > 0 AS appended_as_writer;
SET ROLE regress_up_reader;
SELECT count(*) > 0 AS read_as_reader FROM snapshot('up_sink');
RESET ROLE;
DROP ROLE regress_up_writer;

-- the typed functions exist now, with their privileges
SELECT count(*) AS typed_functions FROM pg_proc
WHERE pronamespace = 'persist_sink'::regnamespace
  AND proname IN ('append_rows', 'compare_and_append_rows', 'snapshot_rows', 'listen_rows');
SELECT * FROM pg_temp.grants();
-- they read the typed shard written in 0.1
SELECT a AS as_of, (SELECT string_agg(i::text, ',' ORDER BY i) FROM snapshot_rows('up_ints', NULL::int4, a) i)
FROM generate_series(0, 1) a;
SELECT * FROM listen_rows('up_ints', NULL::int4, 0);
-- the domain's check runs as the caller
SET ROLE regress_up_reader;
SELECT * FROM persist_sink.snapshot_rows('up_dom', NULL::public.up_checked);
RESET ROLE;
SELECT compare_and_append_rows('up_ints', ARRAY[2, 5], ARRAY[2, 3]::bigint[], ARRAY[-1, 1]::bigint[], 2, 4) > 0 AS written;
SELECT string_agg(i::text, ',' ORDER BY i) FROM snapshot_rows('up_ints', NULL::int4) i;
-- and work on a new typed shard
CREATE TYPE up_row AS (id int, name text, price numeric, tags text[], at timestamptz);
CREATE TEMP TABLE up_src AS
SELECT (i, 'item ' || i, i * 1.25, ARRAY['t' || i % 3, NULL], '2024-01-01 00:00+00'::timestamptz + i * interval '1 hour')::up_row AS r
FROM generate_series(1, 50) i
UNION ALL SELECT (NULL, NULL, NULL, NULL, NULL)::up_row;
SELECT create_shard('up_rows', 'up_row');
SELECT append_rows('up_rows', ARRAY(SELECT r FROM up_src)) > 0 AS appended;
SELECT (SELECT count(*) FROM (SELECT s::text FROM snapshot_rows('up_rows', NULL::up_row) s
							  EXCEPT ALL SELECT r::text FROM up_src) d) AS extra,
	   (SELECT count(*) FROM (SELECT r::text FROM up_src
							  EXCEPT ALL SELECT s::text FROM snapshot_rows('up_rows', NULL::up_row) s) d) AS missing;
SELECT append_rows('up_rows', ARRAY[(7, 'item 7', 8.75, '{t1,NULL}', '2024-01-01 07:00+00')::up_row],
				   ARRAY[2]::bigint[]) AS t7 \gset
SELECT (s).id, count(*) FROM snapshot_rows('up_rows', NULL::up_row) s WHERE (s).id = 7 GROUP BY 1;
SELECT (l.row).id, l.diff, l.time = :t7 AS at_t7 FROM listen_rows('up_rows', NULL::up_row, :t7 - 1) l;
SELECT pg_temp.err($$SELECT persist_sink.append_rows('up_rows', ARRAY[1])$$);
SELECT * FROM verify('up_rows');

--
-- the upgraded extension has the objects of a fresh install
--
CREATE TEMP TABLE upgraded AS SELECT * FROM pg_temp.members();
CREATE TEMP TABLE upgraded_grants AS SELECT * FROM pg_temp.grants();
RESET search_path;
DROP EXTENSION persist_sink;
CREATE EXTENSION persist_sink;
SELECT extversion FROM pg_extension WHERE extname = 'persist_sink';
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.members();
SELECT kind, count(*) FROM fresh GROUP BY kind ORDER BY kind;
SELECT (SELECT count(*) FROM upgraded) = (SELECT count(*) FROM fresh) AS same_count;
SELECT * FROM upgraded EXCEPT SELECT * FROM fresh;
SELECT * FROM fresh EXCEPT SELECT * FROM upgraded;
SELECT * FROM upgraded_grants EXCEPT SELECT * FROM pg_temp.grants();
SELECT * FROM pg_temp.grants() EXCEPT SELECT * FROM upgraded_grants;
-- the functions of the fresh install
SELECT ident FROM fresh WHERE kind = 'function' ORDER BY ident COLLATE "C";
-- every function, view and table has a comment (\df+, \dv+, \dt+), after
-- the update as after a fresh install (the comparisons above include them)
SELECT ident FROM fresh
WHERE kind IN ('function', 'relation') AND definition LIKE '%comment=' ORDER BY 1;

-- the fresh extension works (the suites that follow use it)
SELECT persist_sink.create_shard('up_fresh', 'up_row');
SELECT persist_sink.append_rows('up_fresh', ARRAY(SELECT r FROM up_src)) > 0 AS appended;
SELECT count(*) FROM persist_sink.snapshot_rows('up_fresh', NULL::up_row);
SELECT persist_sink.drop_shard('up_fresh');
DROP TABLE up_src;
DROP TYPE up_row;
DROP DOMAIN public.up_checked;
DROP FUNCTION public.up_check_role(int4);
DROP ROLE regress_up_reader;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
