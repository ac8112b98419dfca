/* persist_sink--0.2--0.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.3'" to load this file. \quit

-- stats: counters per (database, shard), the compaction counters
-- compactions and compacted_updates as the last columns of stats() and the
-- view stats, and stats_info(): how full the counters' table is.
DROP VIEW stats;
DROP FUNCTION stats();

CREATE FUNCTION stats(
	OUT shard text, OUT appends bigint, OUT updates bigint,
	OUT shared_writes bigint, OUT own_writes bigint, OUT parts_written bigint,
	OUT blob_puts bigint, OUT blob_bytes bigint, OUT inline_batches bigint,
	OUT state_bytes bigint, OUT cas_attempts bigint, OUT cas_mismatches bigint,
	OUT compactions bigint, OUT compacted_updates bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_stats'
LANGUAGE C VOLATILE;

CREATE VIEW stats AS SELECT * FROM stats() ORDER BY shard;

CREATE FUNCTION stats_info(OUT entries integer, OUT stats_max integer,
						   OUT uncounted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_stats_info'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION stats(), stats_info() FROM PUBLIC;
REVOKE ALL ON stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stats(), stats_info() TO persist_sink_reader;
GRANT SELECT ON stats TO persist_sink_reader;
