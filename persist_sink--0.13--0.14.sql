/* persist_sink--0.13--0.14.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.14'" to load this file. \quit

-- The object store's requests, failures and latency, one row per kind of
-- request, as pg_stat_archiver shows archiving: read as the stats view is
-- (members of persist_sink_reader), reset by superusers unless granted.
CREATE FUNCTION @extschema@.object_store_stats(
	OUT kind text, OUT requests bigint, OUT failed bigint, OUT retries bigint,
	OUT bytes bigint, OUT total_ms float8, OUT max_ms float8,
	OUT p50_ms float8, OUT p99_ms float8, OUT last_failure_at timestamptz,
	OUT last_failure text, OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_object_store_stats'
LANGUAGE C VOLATILE;
CREATE VIEW @extschema@.object_store_stats AS
SELECT * FROM @extschema@.object_store_stats();
CREATE FUNCTION @extschema@.object_store_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'ps_object_store_stats_reset'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION @extschema@.object_store_stats(),
	@extschema@.object_store_stats_reset() FROM PUBLIC;
REVOKE ALL ON @extschema@.object_store_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.object_store_stats()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON @extschema@.object_store_stats TO persist_sink_reader;
COMMENT ON FUNCTION @extschema@.object_store_stats() IS
	'One row per kind of object store request (what the view object_store_stats shows)';
COMMENT ON VIEW @extschema@.object_store_stats IS
	'The object store requests of the whole server since it started or object_store_stats_reset(), per kind (put, get, delete, list): requests, failed, retries, bytes, total, longest, median and 99th percentile milliseconds, the last failure''s time and message';
COMMENT ON FUNCTION @extschema@.object_store_stats_reset() IS
	'Resets the object store''s figures (object_store_stats), for the whole server';

-- Makes this database the owner of an object store's prefix (its owner
-- marker), to write and collect under it after the database that owned it
-- is gone: a promoted logical replica, a restored dump.
CREATE FUNCTION @extschema@.take_object_store(url text)
RETURNS text
AS 'MODULE_PATHNAME', 'ps_take_object_store'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.take_object_store(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.take_object_store(text) IS
	'Makes this database the owner of an object store (s3://bucket[/prefix]), to write and collect under it once its owner is gone; returns the database that owned it, or NULL';
