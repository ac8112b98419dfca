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
