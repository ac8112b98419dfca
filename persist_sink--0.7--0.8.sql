/* persist_sink--0.7--0.8.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.8'" to load this file. \quit

-- 0.8 adds the view compaction_failures: the shards whose background
-- compaction failed, as pg_stat_archiver shows failed archiving.  (Every
-- name is qualified.)
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
