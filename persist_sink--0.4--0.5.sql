/* persist_sink--0.4--0.5.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.5'" to load this file. \quit

-- The shards view gains runs, the sorted runs a read of the whole shard
-- merges (a batch the compactor listed together holds several).  As in
-- the update to 0.4, the view is replaced in place, its new column last,
-- so that the user's own views over it survive the update.
CREATE FUNCTION shard_info_0_5(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint, OUT debt_batches bigint,
	OUT runs bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE;

CREATE OR REPLACE VIEW shards AS SELECT * FROM shard_info_0_5() AS shard_info;
DROP FUNCTION shard_info();
ALTER FUNCTION shard_info_0_5() RENAME TO shard_info;

REVOKE ALL ON FUNCTION shard_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION shard_info() TO persist_sink_reader;
