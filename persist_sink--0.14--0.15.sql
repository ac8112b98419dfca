/* persist_sink--0.14--0.15.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.15'" to load this file. \quit

-- The figures of the disk cache of objects the server's processes share
-- (persist_sink.object_disk_cache_size), read as object_store_stats is.
CREATE FUNCTION @extschema@.object_disk_cache_stats(
	OUT size bigint, OUT windows bigint, OUT hits bigint, OUT misses bigint,
	OUT writes bigint, OUT replaced bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_object_disk_cache_stats'
LANGUAGE C VOLATILE;
CREATE VIEW @extschema@.object_disk_cache_stats AS
SELECT * FROM @extschema@.object_disk_cache_stats();
REVOKE ALL ON FUNCTION @extschema@.object_disk_cache_stats() FROM PUBLIC;
REVOKE ALL ON @extschema@.object_disk_cache_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.object_disk_cache_stats()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON @extschema@.object_disk_cache_stats TO persist_sink_reader;
COMMENT ON FUNCTION @extschema@.object_disk_cache_stats() IS
	'The disk cache of objects'' figures (what the view object_disk_cache_stats shows)';
COMMENT ON VIEW @extschema@.object_disk_cache_stats IS
	'The disk cache of objects the server''s processes share (persist_sink.object_disk_cache_size): its size in bytes, the windows of 256kB it holds, and the windows found, not found, written and replaced since the server started';
