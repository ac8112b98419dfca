/* persist_sink--0.7--0.8.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.8'" to load this file. \quit

-- 0.8 adds the view compaction_failures: the shards whose background
-- compaction failed, as pg_stat_archiver shows failed archiving; and
-- append and compare_and_append for untyped arguments.  (Every name is
-- qualified.)
CREATE FUNCTION @extschema@.compaction_failures(
	OUT shard text, OUT failures bigint, OUT last_failed_at timestamptz,
	OUT last_error text, OUT failing_in_a_row integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_compaction_failures'
LANGUAGE C VOLATILE;

CREATE VIEW @extschema@.compaction_failures AS
SELECT * FROM @extschema@.compaction_failures() ORDER BY shard;

REVOKE ALL ON FUNCTION @extschema@.compaction_failures() FROM PUBLIC;
REVOKE ALL ON @extschema@.compaction_failures FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.compaction_failures() TO persist_sink_reader;
GRANT SELECT ON @extschema@.compaction_failures TO persist_sink_reader;

COMMENT ON FUNCTION @extschema@.compaction_failures() IS
	'One row per shard whose background compaction failed (what the view compaction_failures shows)';
COMMENT ON VIEW @extschema@.compaction_failures IS
	'Shards of this database whose background compaction failed since stats_reset(): how many times, the last one''s time and error, and how many in a row until now (0 once a merge succeeded)';

-- Untyped arguments (a literal '{a,b}', a driver's unknown-typed $1):
-- PostgreSQL resolves an unknown argument to the string category when a
-- candidate takes one there, so these take them, as text arrays, where
-- the text[] and bytea[] overloads alone would be ambiguous (42725).
CREATE FUNCTION @extschema@.compare_and_append(shard text, keys text, vals text,
								   times text, diffs text,
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$SELECT @extschema@.compare_and_append($1, $2::pg_catalog.text[], $3::pg_catalog.text[],
	$4::pg_catalog.int8[], $5::pg_catalog.int8[], $6, $7)$$;

CREATE FUNCTION @extschema@.append(shard text, keys text, vals text, diffs text,
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$SELECT @extschema@.append($1, $2::pg_catalog.text[], $3::pg_catalog.text[],
	$4::pg_catalog.int8[], $5)$$;

REVOKE ALL ON FUNCTION @extschema@.compare_and_append(text, text, text, text, text, bigint, bigint),
	@extschema@.append(text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.compare_and_append(text, text, text, text, text, bigint, bigint),
	@extschema@.append(text, text, text, text, text) TO persist_sink_writer;

COMMENT ON FUNCTION @extschema@.append(text, text, text, text, text) IS
	'append with untyped arguments (array literals, a driver''s unknown-typed parameters), read as text keys and vals';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, text, text, text, text, bigint, bigint) IS
	'compare_and_append with untyped arguments (array literals, a driver''s unknown-typed parameters), read as text keys and vals';
