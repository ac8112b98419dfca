--
-- escalation: an application role that holds both persist_sink_writer and
-- persist_sink_reader tries to get the rights of the role that owns the
-- extension's storage (a superuser).  Every trap below is code the role can
-- define: when it runs, it records the user it runs as and tries to make the
-- role a superuser.  Each attempt must fail or run with the caller's rights
-- only: afterwards the role is no superuser, every trap that ran recorded
-- the role itself, and the storage tables are untouched.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql
RESET search_path;

\i sql/include/err.psql

CREATE ROLE regress_esc_app IN ROLE persist_sink_writer, persist_sink_reader;
CREATE SCHEMA regress_esc AUTHORIZATION regress_esc_app;
-- a role with EXECUTE granted directly, but in neither role
CREATE ROLE regress_esc_granted;
GRANT USAGE ON SCHEMA persist_sink TO regress_esc_granted;
GRANT EXECUTE ON FUNCTION persist_sink.shard_upper(text) TO regress_esc_granted;
GRANT EXECUTE ON FUNCTION
	persist_sink.compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint)
TO regress_esc_granted;

-- The storage before any attack
SELECT count(*) AS blob_rows, (SELECT count(*) FROM persist_sink.consensus) AS consensus_rows
FROM persist_sink.blob \gset before_

SET ROLE regress_esc_app;

-- Every trap writes here who ran it, and where
CREATE TABLE regress_esc.ran (trap text, current_role_name text);

-- The trap: records the current user, then tries to become superuser,
-- quietly, so that a call it runs in goes on.
CREATE FUNCTION regress_esc.trap(what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO regress_esc.ran VALUES (what, current_user);
	BEGIN
		EXECUTE 'ALTER ROLE regress_esc_app SUPERUSER';
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	RETURN true;
END
$$;

--
-- 1. A domain whose CHECK is the trap, in the row type of a typed shard:
--    every typed read receives rows, and so checks the domain.
--
CREATE DOMAIN regress_esc.sneaky AS int CHECK (regress_esc.trap('domain check'));
CREATE TYPE regress_esc.row_t AS (id regress_esc.sneaky, name text);
SELECT persist_sink.create_shard('esc_rows', 'regress_esc.row_t');
SELECT persist_sink.compare_and_append_rows('esc_rows',
	ARRAY[ROW(1, 'a')::regress_esc.row_t, ROW(2, 'b')::regress_esc.row_t],
	'{0,0}', NULL, 0, 1) > 0 AS written;
SELECT persist_sink.append_rows('esc_rows', ARRAY[ROW(3, 'c')::regress_esc.row_t]) > 0 AS appended;
TRUNCATE regress_esc.ran;
SELECT count(*) AS rows FROM persist_sink.snapshot_rows('esc_rows', NULL::regress_esc.row_t);
SELECT count(*) AS rows FROM persist_sink.snapshot_rows('esc_rows', NULL::regress_esc.row_t, 0);
SELECT count(*) AS updates FROM persist_sink.listen_rows('esc_rows', NULL::regress_esc.row_t, 0);
-- the traps ran, as the role itself
SELECT trap, current_role_name, count(*) FROM regress_esc.ran GROUP BY 1, 2 ORDER BY 1, 2;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'regress_esc_app';

-- A domain over the whole row, as the shard's row type
CREATE DOMAIN regress_esc.row_d AS regress_esc.row_t CHECK (regress_esc.trap('row domain check'));
SELECT persist_sink.create_shard('esc_rowd', 'regress_esc.row_d');
SELECT persist_sink.compare_and_append_rows('esc_rowd',
	ARRAY[ROW(1, 'a')::regress_esc.row_d], '{0}', NULL, 0, 1) > 0 AS written;
SELECT persist_sink.append_rows('esc_rowd', ARRAY[ROW(2, 'b')::regress_esc.row_d]) > 0 AS appended;
TRUNCATE regress_esc.ran;
SELECT count(*) AS rows FROM persist_sink.snapshot_rows('esc_rowd', NULL::regress_esc.row_d);
SELECT count(*) AS updates FROM persist_sink.listen_rows('esc_rowd', NULL::regress_esc.row_d, 0);
SELECT trap, current_role_name, count(*) FROM regress_esc.ran GROUP BY 1, 2 ORDER BY 1, 2;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'regress_esc_app';

-- A domain over int as a typed shard of a scalar row type
CREATE DOMAIN regress_esc.sneaky_int AS int CHECK (regress_esc.trap('scalar domain check'));
SELECT persist_sink.create_shard('esc_int', 'regress_esc.sneaky_int');
SELECT persist_sink.append_rows('esc_int', ARRAY[5::regress_esc.sneaky_int]) > 0 AS appended;
TRUNCATE regress_esc.ran;
SELECT sum(x) AS total FROM persist_sink.snapshot_rows('esc_int', NULL::regress_esc.sneaky_int) x;
SELECT trap, current_role_name, count(*) FROM regress_esc.ran GROUP BY 1, 2 ORDER BY 1, 2;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'regress_esc_app';

--
-- 2. Names the functions use, shadowed by traps in a schema first on the
--    search_path and in pg_temp: operators on text, bigint and bytea that
--    run the trap, functions named like built-ins, tables named like the
--    storage tables.  Every function of the extension is called with that
--    search_path; none may run a trap, or change its result.
--
CREATE FUNCTION regress_esc.eq_trap(text, text) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('text =') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE FUNCTION regress_esc.eq_trap(bigint, bigint) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('bigint =') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE FUNCTION regress_esc.eq_trap(bytea, bytea) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('bytea =') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE FUNCTION regress_esc.lt_trap(text, text) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('text <') AND $1 OPERATOR(pg_catalog.<) $2$$;
CREATE FUNCTION regress_esc.ge_trap(text, text) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('text >=') AND $1 OPERATOR(pg_catalog.>=) $2$$;
CREATE OPERATOR regress_esc.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_esc.eq_trap);
CREATE OPERATOR regress_esc.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_esc.eq_trap);
CREATE OPERATOR regress_esc.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = regress_esc.eq_trap);
CREATE OPERATOR regress_esc.< (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_esc.lt_trap);
CREATE OPERATOR regress_esc.>= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_esc.ge_trap);
CREATE FUNCTION regress_esc.md5(text) RETURNS text
LANGUAGE sql AS $$SELECT regress_esc.trap('md5')::text$$;
CREATE FUNCTION regress_esc.starts_with(text, text) RETURNS boolean
LANGUAGE sql AS $$SELECT regress_esc.trap('starts_with')$$;
CREATE FUNCTION regress_esc.format_type(oid, integer) RETURNS text
LANGUAGE sql AS $$SELECT regress_esc.trap('format_type')::text$$;
CREATE FUNCTION regress_esc.textlen(text) RETURNS integer
LANGUAGE sql AS $$SELECT regress_esc.trap('textlen')::int$$;
CREATE TABLE regress_esc.consensus (shard text, seqno bigint, state bytea);
CREATE TABLE regress_esc.blob (key text, data bytea);
CREATE TEMP TABLE consensus (shard text, seqno bigint, state bytea);
CREATE TEMP TABLE blob (key text, data bytea);
CREATE FUNCTION pg_temp.md5(text) RETURNS text
LANGUAGE sql AS $$SELECT regress_esc.trap('pg_temp md5')::text$$;

SET search_path = pg_temp, regress_esc, pg_catalog;
-- the traps do fire where the role's own queries resolve names
SELECT 'a'::text = 'a'::text AS own_query_uses_trap;
SELECT count(*) AS traps_in_own_query FROM regress_esc.ran WHERE trap = 'text =';
TRUNCATE regress_esc.ran;

SELECT persist_sink.create_shard('esc_a');
SELECT persist_sink.create_shard('esc_ab');
SELECT persist_sink.compare_and_append('esc_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{0,1}', '{1,1}', 0, 2) > 0 AS written;
SELECT persist_sink.compare_and_append('esc_ab', ARRAY(SELECT 'k' || i FROM generate_series(1, 3000) i),
	ARRAY(SELECT repeat('v', i % 40) FROM generate_series(1, 3000) i), array_fill(0::bigint, ARRAY[3000]),
	array_fill(1::bigint, ARRAY[3000]), 0, 1) > 0 AS written;
SELECT persist_sink.compare_and_append('esc_ab', '{k1}'::text[], '{w}'::text[], '{1}', '{1}', 1, 2) > 0 AS written;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('esc_a', '{x}'::text[], '{y}'::text[], '{0}', '{1}', 0, 1)$$) AS stale_cas;
SELECT persist_sink.append('esc_a', '{k3}'::text[], '{v3}'::text[], '{1}') > 2 AS appended;
SELECT persist_sink.append('esc_a', ARRAY['k4'::bytea], ARRAY['v4'::bytea], '{1}') > 2 AS appended;
SELECT persist_sink.shard_upper('esc_ab') AS ab_upper, persist_sink.shard_since('esc_ab') AS ab_since;
SELECT persist_sink.downgrade_since('esc_ab', 1);
SELECT count(*) AS a_rows FROM persist_sink.snapshot('esc_a');
SELECT count(*) AS ab_rows FROM persist_sink.snapshot('esc_ab');
SELECT count(*) AS a_listen FROM persist_sink.listen('esc_a', 0);
SELECT count(*) AS ab_batches FROM persist_sink.batches('esc_ab');
SELECT persist_sink.compact('esc_a');
SELECT count(*) AS a_problems FROM persist_sink.verify('esc_a');
SELECT count(*) AS ab_problems FROM persist_sink.verify('esc_ab');
SELECT count(*) > 0 AS shards_listed FROM persist_sink.shards;
SELECT count(*) > 0 AS stats_listed FROM persist_sink.stats WHERE shard OPERATOR(pg_catalog.=) 'esc_a';
SELECT budget_bytes > 0 AS sink_memory FROM persist_sink.sink_memory();
SELECT persist_sink.drop_shard('esc_a');
SELECT count(*) AS ab_rows_after_drop FROM persist_sink.snapshot('esc_ab');
-- no trap ran inside any of them, and the role is no superuser
SELECT count(*) AS traps_run FROM regress_esc.ran;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'regress_esc_app';
RESET search_path;

--
-- 3. The storage tables directly, as the role: refused.
--
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.blob$$) AS select_blob;
SELECT pg_temp.err($$SELECT state FROM persist_sink.consensus$$) AS select_consensus;
SELECT pg_temp.err($$INSERT INTO persist_sink.blob VALUES ('esc_ab/x', 0, '\x00')$$) AS insert_blob;
SELECT pg_temp.err($$UPDATE persist_sink.consensus SET seqno = seqno + 1$$) AS update_consensus;
SELECT pg_temp.err($$DELETE FROM persist_sink.blob$$) AS delete_blob;
SELECT pg_temp.err($$TRUNCATE persist_sink.consensus$$) AS truncate_consensus;
-- nor may the role's own functions be made to run with the owner's rights:
-- a SECURITY DEFINER function of the role runs as the role
CREATE FUNCTION regress_esc.definer() RETURNS bigint SECURITY DEFINER
LANGUAGE sql AS $$SELECT count(*) FROM persist_sink.consensus$$;
SELECT pg_temp.err($$SELECT regress_esc.definer()$$) AS definer_reads_consensus;
RESET ROLE;

--
-- 4. EXECUTE granted directly to a role in neither persist_sink role: the
--    functions still refuse it.
--
SET ROLE regress_esc_granted;
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('esc_ab')$$) AS granted_upper;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('esc_ab', '{x}'::text[], '{y}'::text[], '{1}', '{1}', 1, 2)$$) AS granted_cas;
RESET ROLE;

--
-- After every attack: the role is no superuser, the functions are no
-- SECURITY DEFINER, and the storage holds what the calls wrote and nothing
-- else.
--
SELECT rolsuper AS app_is_superuser, rolcreaterole, rolcreatedb, rolbypassrls
FROM pg_roles WHERE rolname = 'regress_esc_app';
SELECT count(*) AS security_definer_functions FROM pg_proc
WHERE pronamespace = 'persist_sink'::regnamespace AND prosecdef;
SELECT count(*) AS functions_with_settings FROM pg_proc
WHERE pronamespace = 'persist_sink'::regnamespace AND proconfig IS NOT NULL;
SELECT name, upper > 0 AS written, batches > 0 AS has_batches FROM persist_sink.shards
WHERE name LIKE 'esc\_%' ORDER BY name COLLATE "C";
SELECT s.name, count(v.problem) AS problems
FROM persist_sink.shards s LEFT JOIN LATERAL persist_sink.verify(s.name) v ON true
WHERE s.name LIKE 'esc\_%' GROUP BY s.name ORDER BY s.name COLLATE "C";

-- Cleanup
SELECT persist_sink.drop_shard(name) FROM persist_sink.shards
WHERE name LIKE 'esc\_%' ORDER BY name COLLATE "C";
SELECT count(*) - :before_blob_rows AS blob_rows_left,
	   (SELECT count(*) FROM persist_sink.consensus) - :before_consensus_rows AS consensus_rows_left
FROM persist_sink.blob;
DROP TABLE pg_temp.consensus, pg_temp.blob;
DROP FUNCTION pg_temp.md5(text);
DROP SCHEMA regress_esc CASCADE;
REVOKE ALL ON FUNCTION persist_sink.shard_upper(text) FROM regress_esc_granted;
REVOKE ALL ON FUNCTION
	persist_sink.compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint)
FROM regress_esc_granted;
REVOKE USAGE ON SCHEMA persist_sink FROM regress_esc_granted;
DROP ROLE regress_esc_app, regress_esc_granted;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
