/* persist_sink--0.3--0.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.4'" to load this file. \quit

-- State diffs: a compare-and-swap writes what it changed, not the whole
-- state.  The consensus row's state becomes the shard's last rollup, and
-- every CaS after it inserts its diff here in the same transaction.  A
-- state of 0.3 is a rollup at the row's own seqno with no diffs after it,
-- so existing shards need no rewrite.
CREATE TABLE consensus_diff (
	shard text NOT NULL,
	seqno bigint NOT NULL,
	diff bytea NOT NULL,
	PRIMARY KEY (shard, seqno)
);
ALTER TABLE consensus_diff ALTER COLUMN diff SET STORAGE EXTERNAL;
SELECT pg_catalog.pg_extension_config_dump('consensus_diff', '');
REVOKE ALL ON consensus_diff FROM PUBLIC;

-- The shards view gains debt_batches, the batches the compactor would take
-- away if it caught up now.  The view is replaced in place, its new column
-- last, so that the user's own views over it survive the update: the new
-- shard_info() is made under another name, the view pointed at it, the old
-- function dropped and the new one given its name.
CREATE FUNCTION shard_info_0_4(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint, OUT debt_batches bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE;

CREATE OR REPLACE VIEW shards AS SELECT * FROM shard_info_0_4() AS shard_info;
DROP FUNCTION shard_info();
ALTER FUNCTION shard_info_0_4() RENAME TO shard_info;

-- The merges in progress, by the background compactor and by compact()
CREATE FUNCTION compaction_progress(
	OUT pid integer, OUT datid oid, OUT shard text, OUT command text,
	OUT phase text, OUT started_at timestamptz, OUT batches integer,
	OUT updates_merged bigint, OUT updates_total bigint, OUT bytes_written bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_compaction_progress'
LANGUAGE C VOLATILE;

-- One row per merge in progress, in every database, as pg_stat_progress_*
CREATE VIEW compaction_progress AS
SELECT p.pid, p.datid, d.datname, p.shard, p.command, p.phase, p.started_at,
	   p.batches, p.updates_merged, p.updates_total, p.bytes_written
FROM compaction_progress() p
	 LEFT JOIN pg_catalog.pg_database d ON d.oid = p.datid;

REVOKE ALL ON FUNCTION shard_info(), compaction_progress() FROM PUBLIC;
REVOKE ALL ON shards, compaction_progress FROM PUBLIC;
GRANT EXECUTE ON FUNCTION shard_info(), compaction_progress() TO persist_sink_reader;
GRANT SELECT ON shards, compaction_progress TO persist_sink_reader;
