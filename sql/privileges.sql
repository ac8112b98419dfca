--
-- privileges: who may call what.  persist_sink_writer writes, persist_sink_reader
-- reads, PUBLIC has neither; the storage tables are reachable only through the
-- functions; and a user's objects that shadow the names the functions use
-- (tables, functions, operators, in a schema put first in search_path or in
-- pg_temp) do not change what the functions do.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
-- No background compaction, so that batches and seqnos are deterministic;
-- a new session starts after the reload
ALTER SYSTEM SET persist_sink.compaction = off;
SELECT pg_reload_conf();
\c
SHOW persist_sink.compaction;

-- The extension's roles: NOLOGIN, and PUBLIC is not a member.
SELECT rolname, rolcanlogin, rolsuper, rolinherit FROM pg_roles
WHERE rolname LIKE 'persist\_sink\_%' ORDER BY rolname;

-- Who holds EXECUTE on every function of the extension, directly or through
-- a role: PUBLIC (tested through a role with no grant), the writer, the reader.
CREATE ROLE regress_ps_nobody;
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('regress_ps_nobody', p.oid, 'EXECUTE') AS public,
	   has_function_privilege('persist_sink_writer', p.oid, 'EXECUTE') AS writer,
	   has_function_privilege('persist_sink_reader', p.oid, 'EXECUTE') AS reader,
	   p.prosecdef AS security_definer,
	   coalesce(array_to_string(p.proconfig, ','), '') AS config
FROM pg_proc p WHERE p.pronamespace = 'persist_sink'::regnamespace
ORDER BY p.oid::regprocedure::text COLLATE "C";
-- Tables and views, and what each role may do with them
SELECT c.relname, c.relkind,
	   has_table_privilege('regress_ps_nobody', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER') AS public_any,
	   has_table_privilege('persist_sink_writer', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER') AS writer_any,
	   has_table_privilege('persist_sink_reader', c.oid, 'SELECT') AS reader_select,
	   has_table_privilege('persist_sink_reader', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER') AS reader_other
FROM pg_class c WHERE c.relnamespace = 'persist_sink'::regnamespace AND c.relkind IN ('r', 'v')
ORDER BY c.relname COLLATE "C";
SELECT has_schema_privilege('regress_ps_nobody', 'persist_sink', 'USAGE') AS public_usage,
	   has_schema_privilege('regress_ps_nobody', 'persist_sink', 'CREATE') AS public_create,
	   has_schema_privilege('persist_sink_writer', 'persist_sink', 'CREATE') AS writer_create,
	   has_schema_privilege('persist_sink_reader', 'persist_sink', 'CREATE') AS reader_create;

-- Roles under test:
--   nobody   no grant at all
--   usage    USAGE on the schema, but no role: every function must still refuse
--   writer   member of persist_sink_writer
--   reader   member of persist_sink_reader
--   both     member of both
CREATE ROLE regress_ps_usage;
GRANT USAGE ON SCHEMA persist_sink TO regress_ps_usage;
CREATE ROLE regress_ps_writer IN ROLE persist_sink_writer;
CREATE ROLE regress_ps_reader IN ROLE persist_sink_reader;
CREATE ROLE regress_ps_both IN ROLE persist_sink_writer, persist_sink_reader;

-- Shards: p (untyped), pt (of int), and pa and pat (untyped and of int) for
-- the sink, which does not roll back
SELECT persist_sink.create_shard('p');
SELECT persist_sink.compare_and_append('p', '{a,b}'::text[], '{1,2}'::text[], '{0,1}', '{1,1}', 0, 2);
SELECT persist_sink.create_shard('pt', 'int4');
SELECT persist_sink.compare_and_append_rows('pt', ARRAY[7], '{0}', NULL, 0, 1);
SELECT persist_sink.create_shard('pa');
SELECT persist_sink.create_shard('pat', 'int4');
-- whose owner lets every writer append and every reader read (shards have
-- owners and grants: see shard_privileges; here the roles are under test)
SELECT persist_sink.grant_shard(s, 'persist_sink_writer', 'append'),
	   persist_sink.grant_shard(s, 'persist_sink_reader', 'read')
FROM unnest('{p,pt,pa,pat}'::text[]) s;

-- Runs q as role r.  Whatever q did in the database is rolled back (the
-- sink's appends are not: they are not part of the transaction); the result
-- is 'ok' or the SQLSTATE.
CREATE FUNCTION pg_temp.as_role(r text, q text, OUT state text, OUT message text)
LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		EXECUTE format('SET LOCAL ROLE %I', r);
		EXECUTE q;
		RAISE EXCEPTION 'done' USING ERRCODE = 'ZZ999';
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
		IF state = 'ZZ999' THEN
			state := 'ok';
			message := NULL;
		END IF;
	END;
END
$$;

CREATE TEMP TABLE calls (id serial, what text, q text);
INSERT INTO calls (what, q) VALUES
('create_shard', $$SELECT persist_sink.create_shard('p_new')$$),
('create_shard typed', $$SELECT persist_sink.create_shard('p_new', 'int4')$$),
('drop_shard', $$SELECT persist_sink.drop_shard('p')$$),
('shard_upper', $$SELECT persist_sink.shard_upper('p')$$),
('shard_since', $$SELECT persist_sink.shard_since('p')$$),
('downgrade_since', $$SELECT persist_sink.downgrade_since('p', 1)$$),
('compare_and_append bytea', $$SELECT persist_sink.compare_and_append('p', '{c}'::bytea[], '{3}'::bytea[], '{2}', '{1}', 2, 3)$$),
('compare_and_append text', $$SELECT persist_sink.compare_and_append('p', '{c}'::text[], '{3}'::text[], '{2}', '{1}', 2, 3)$$),
('compare_and_append_rows', $$SELECT persist_sink.compare_and_append_rows('pt', ARRAY[8], '{1}', NULL, 1, 2)$$),
('append bytea', $$SELECT persist_sink.append('pa', '{c}'::bytea[], '{3}'::bytea[], '{1}')$$),
('append text', $$SELECT persist_sink.append('pa', '{c}'::text[], '{3}'::text[], '{1}')$$),
('append_rows', $$SELECT persist_sink.append_rows('pat', ARRAY[9])$$),
('compact', $$SELECT persist_sink.compact('p')$$),
('snapshot', $$SELECT count(*) FROM persist_sink.snapshot('p')$$),
('listen', $$SELECT count(*) FROM persist_sink.listen('p', 0)$$),
('snapshot_rows', $$SELECT count(*) FROM persist_sink.snapshot_rows('pt', NULL::int)$$),
('listen_rows', $$SELECT count(*) FROM persist_sink.listen_rows('pt', NULL::int, 0)$$),
('batches', $$SELECT count(*) FROM persist_sink.batches('p')$$),
('verify', $$SELECT count(*) FROM persist_sink.verify('p')$$),
('shard_info', $$SELECT count(*) FROM persist_sink.shard_info()$$),
('view shards', $$SELECT count(*) FROM persist_sink.shards$$),
('stats', $$SELECT count(*) FROM persist_sink.stats()$$),
('view stats', $$SELECT count(*) FROM persist_sink.stats$$),
('stats_reset', $$SELECT persist_sink.stats_reset()$$),
('stats_info', $$SELECT count(*) FROM persist_sink.stats_info()$$),
('compaction_progress', $$SELECT count(*) FROM persist_sink.compaction_progress()$$),
('view compaction_progress', $$SELECT count(*) FROM persist_sink.compaction_progress$$),
('SELECT blob', $$SELECT count(*) FROM persist_sink.blob$$),
('SELECT blob.key', $$SELECT key FROM persist_sink.blob LIMIT 1$$),
('SELECT consensus', $$SELECT state FROM persist_sink.consensus$$),
('INSERT blob', $$INSERT INTO persist_sink.blob VALUES ('p/evil', 0, '\x00')$$),
('UPDATE blob', $$UPDATE persist_sink.blob SET data = '\x00'$$),
('DELETE blob', $$DELETE FROM persist_sink.blob$$),
('TRUNCATE blob', $$TRUNCATE persist_sink.blob$$),
('UPDATE consensus', $$UPDATE persist_sink.consensus SET seqno = seqno + 1$$),
('DELETE consensus', $$DELETE FROM persist_sink.consensus$$),
('LOCK consensus', $$LOCK TABLE persist_sink.consensus IN ACCESS EXCLUSIVE MODE$$),
('CREATE in schema', $$CREATE TABLE persist_sink.mine (x int)$$),
('ALTER function', $$ALTER FUNCTION persist_sink.shard_upper(text) SET search_path = public$$),
('GRANT', $$GRANT persist_sink_reader TO CURRENT_USER$$);

CREATE TEMP TABLE outcome AS
SELECT c.id, c.what, r.role, o.state, o.message
FROM calls c,
	 unnest(ARRAY['nobody', 'usage', 'writer', 'reader', 'both']) WITH ORDINALITY r(role, n),
	 LATERAL pg_temp.as_role('regress_ps_' || r.role, c.q) o
ORDER BY c.id, r.n;

-- The matrix: ok, or the SQLSTATE of the refusal
SELECT what,
	   max(state) FILTER (WHERE role = 'nobody') AS nobody,
	   max(state) FILTER (WHERE role = 'usage') AS usage,
	   max(state) FILTER (WHERE role = 'writer') AS writer,
	   max(state) FILTER (WHERE role = 'reader') AS reader,
	   max(state) FILTER (WHERE role = 'both') AS both
FROM outcome GROUP BY id, what ORDER BY id;
-- The messages of the refusals
SELECT state, message, count(*) AS calls FROM outcome WHERE state <> 'ok'
GROUP BY state, message ORDER BY message COLLATE "C", state;
-- Nothing changed, but for the sink's appends to pa and pat: two appends to
-- pa and one to pat by each role allowed to append
SELECT name, seqno, upper, since, batches, updates FROM persist_sink.shards
WHERE name IN ('p', 'pt') ORDER BY name COLLATE "C";
SELECT name, updates FROM persist_sink.shards WHERE name IN ('pa', 'pat') ORDER BY name COLLATE "C";
SELECT count(*) AS evil_blobs FROM persist_sink.blob WHERE key = 'p/evil';

-- Statistics gathered on the storage tables do not show their contents
ANALYZE persist_sink.blob, persist_sink.consensus;
SET ROLE regress_ps_both;
SELECT count(*) AS visible_stats FROM pg_stats WHERE schemaname = 'persist_sink';
RESET ROLE;

--
-- search_path hijack: a member of both roles shadows every name the functions
-- could resolve through the caller's search_path with objects that would
-- change their results: tables named like the storage tables (in a schema
-- first in search_path, and in pg_temp), and =, <, >= operators on text and
-- bigint that are always true.  The functions must ignore all of it.
--
CREATE SCHEMA regress_evil AUTHORIZATION regress_ps_both;
SET ROLE regress_ps_both;
CREATE FUNCTION regress_evil.yes(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION regress_evil.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION regress_evil.yes(bytea, bytea) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.yes);
CREATE OPERATOR regress_evil.< (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.yes);
CREATE OPERATOR regress_evil.>= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.yes);
CREATE OPERATOR regress_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_evil.yes);
CREATE OPERATOR regress_evil.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = regress_evil.yes);
CREATE FUNCTION regress_evil.starts_with(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION regress_evil.md5(bytea) RETURNS text LANGUAGE sql AS $$SELECT 'evil'$$;
CREATE TABLE regress_evil.consensus (shard text, seqno bigint, state bytea);
CREATE TABLE regress_evil.blob (key text, data bytea);
INSERT INTO regress_evil.consensus SELECT 'p', 0, '\x00';
CREATE TEMP TABLE consensus (shard text, seqno bigint, state bytea);
CREATE TEMP TABLE blob (key text, data bytea);
INSERT INTO consensus SELECT 'p', 0, '\x00';
-- the evil operators work where the caller's own queries resolve names
SET search_path = pg_temp, regress_evil, pg_catalog, persist_sink, public;
SELECT 'a'::text = 'b'::text AS evil_text_eq, 1::bigint = 2::bigint AS evil_bigint_eq;
-- ... but not inside the functions: two shards whose names differ, a CaS
-- with a stale seqno and upper, reads, a drop that must keep the other
-- shard's blob rows.
SELECT persist_sink.create_shard('q1');
SELECT persist_sink.create_shard('q2');
SELECT persist_sink.compare_and_append('q1', ARRAY(SELECT 'k' || i FROM generate_series(1, 2000) i),
	ARRAY(SELECT md5(i::text) FROM generate_series(1, 2000) i), array_fill(0::bigint, ARRAY[2000]),
	array_fill(1::bigint, ARRAY[2000]), 0, 1);
SELECT persist_sink.compare_and_append('q2', ARRAY(SELECT 'k' || i FROM generate_series(1, 2000) i),
	ARRAY(SELECT md5(i::text) FROM generate_series(1, 2000) i), array_fill(0::bigint, ARRAY[2000]),
	array_fill(1::bigint, ARRAY[2000]), 0, 1);
SELECT persist_sink.compare_and_append('q2', '{z}'::text[], '{z}'::text[], '{1}', '{1}', 1, 2);
SELECT persist_sink.compare_and_append('q2', '{y}'::text[], '{y}'::text[], '{1}', '{1}', 1, 2);
SELECT persist_sink.compare_and_append('q1', '{y}'::text[], '{y}'::text[], '{5}', '{1}', 5, 6);
SELECT persist_sink.shard_upper('q1') AS q1_upper, persist_sink.shard_upper('q2') AS q2_upper;
SELECT count(*) AS q1_updates FROM persist_sink.snapshot('q1');
SELECT count(*) AS q2_updates FROM persist_sink.snapshot('q2');
SELECT count(*) AS q2_listen FROM persist_sink.listen('q2', 0);
SELECT persist_sink.downgrade_since('q1', 1);
SELECT persist_sink.compact('q1');
SELECT persist_sink.drop_shard('q1');
SELECT count(*) AS q2_problems FROM persist_sink.verify('q2');
SELECT count(*) AS q2_after_drop FROM persist_sink.snapshot('q2');
SELECT count(*) AS p_updates FROM persist_sink.snapshot('p');
SELECT count(*) AS shards FROM persist_sink.shards
WHERE name OPERATOR(pg_catalog.=) ANY (ARRAY['p', 'pa', 'pat', 'pt', 'q1', 'q2']);
RESET search_path;
RESET ROLE;
-- the storage, seen by the superuser with a clean search_path (and the temp
-- tables still there: hence the qualified names)
SET search_path = persist_sink, public;
SELECT name, seqno, CASE WHEN name IN ('pa', 'pat') THEN 'a time' ELSE upper::text END AS upper,
	   since, batches, updates
FROM persist_sink.shards WHERE name IN ('p', 'pa', 'pat', 'pt', 'q1', 'q2') ORDER BY name COLLATE "C";
SELECT count(DISTINCT key) AS q1_blobs FROM persist_sink.blob WHERE starts_with(key, 'q1/');
SELECT count(DISTINCT key) AS q2_blobs FROM persist_sink.blob WHERE starts_with(key, 'q2/');
SELECT s.name, count(v.problem) AS problems
FROM persist_sink.shards s LEFT JOIN LATERAL persist_sink.verify(s.name) v ON true
WHERE s.name IN ('p', 'pa', 'pat', 'pt', 'q1', 'q2') GROUP BY s.name ORDER BY s.name COLLATE "C";
SELECT count(*) AS evil_consensus_rows FROM regress_evil.consensus;

-- Cleanup
DROP TABLE pg_temp.consensus, pg_temp.blob;
DROP SCHEMA regress_evil CASCADE;
SELECT drop_shard(name) FROM shards WHERE name IN ('p', 'pa', 'pat', 'pt', 'q1', 'q2') ORDER BY name COLLATE "C";
REVOKE USAGE ON SCHEMA persist_sink FROM regress_ps_usage;
DROP ROLE regress_ps_nobody, regress_ps_usage, regress_ps_writer, regress_ps_reader, regress_ps_both;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
