/* persist_sink--0.2--0.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.3'" to load this file. \quit

-- Privileges: every function runs as its caller.  The C code checks that
-- the caller has the rights of persist_sink_writer or persist_sink_reader,
-- and takes the storage tables' owner's rights only around its own
-- statements on those tables, so no code a user can define (type I/O,
-- domain checks, operators, casts) ever runs with the owner's rights.
ALTER FUNCTION create_shard(text, regtype) SECURITY INVOKER RESET search_path;
ALTER FUNCTION drop_shard(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION shard_upper(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION shard_since(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION downgrade_since(text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION shard_info() SECURITY INVOKER RESET search_path;
ALTER FUNCTION batches(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint)
	SECURITY INVOKER RESET search_path;
ALTER FUNCTION compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint)
	SECURITY INVOKER RESET search_path;
ALTER FUNCTION append(text, bytea[], bytea[], bigint[]) SECURITY INVOKER RESET search_path;
ALTER FUNCTION append(text, text[], text[], bigint[]) SECURITY INVOKER RESET search_path;
ALTER FUNCTION snapshot(text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION listen(text, bigint, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION compact(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION verify(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION append_rows(text, anyarray, bigint[]) SECURITY INVOKER RESET search_path;
ALTER FUNCTION compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint)
	SECURITY INVOKER RESET search_path;
ALTER FUNCTION snapshot_rows(text, anyelement, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION listen_rows(text, anyelement, bigint, bigint) SECURITY INVOKER RESET search_path;

-- sink_memory(): what the sink's staging arena holds now
CREATE FUNCTION sink_memory(OUT budget_bytes bigint, OUT small_bytes bigint,
							OUT part_bytes bigint, OUT intervals int,
							OUT blocked_intervals int)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_sink_memory'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION sink_memory() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sink_memory() TO persist_sink_reader;

-- stats: counters per (database, shard), the compaction counters
-- compactions and compacted_updates as the last columns of stats() and the
-- view stats, then the backpressure counters slowed_ms and stalled_ms,
-- and stats_info(): how full the counters' table is.  The view is replaced
-- in place, its new columns last, so that the user's own views over it
-- survive the update (as for shards in 0.3--0.4).
CREATE FUNCTION stats_0_3(
	OUT shard text, OUT appends bigint, OUT updates bigint,
	OUT shared_writes bigint, OUT own_writes bigint, OUT parts_written bigint,
	OUT blob_puts bigint, OUT blob_bytes bigint, OUT inline_batches bigint,
	OUT state_bytes bigint, OUT cas_attempts bigint, OUT cas_mismatches bigint,
	OUT compactions bigint, OUT compacted_updates bigint,
	OUT slowed_ms bigint, OUT stalled_ms bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_stats'
LANGUAGE C VOLATILE;

CREATE OR REPLACE VIEW stats AS SELECT * FROM stats_0_3() AS stats ORDER BY shard;
DROP FUNCTION stats();
ALTER FUNCTION stats_0_3() RENAME TO stats;

CREATE FUNCTION stats_info(OUT entries integer, OUT stats_max integer,
						   OUT uncounted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_stats_info'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION stats(), stats_info() FROM PUBLIC;
REVOKE ALL ON stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stats(), stats_info() TO persist_sink_reader;
GRANT SELECT ON stats TO persist_sink_reader;

-- Idempotency keys: append() and append_rows() take an optional
-- idempotency_key.  The keys of committed appends are kept in their own
-- table, written in the transaction of the interval that committed them,
-- and forgotten after persist_sink.idempotency_window.
CREATE TABLE idempotency (
	shard text COLLATE "C" NOT NULL,
	key text COLLATE "C" NOT NULL,
	time bigint NOT NULL,
	digest bytea NOT NULL,
	written_at timestamptz NOT NULL,
	PRIMARY KEY (shard, key)
);
CREATE INDEX idempotency_written_at ON idempotency (written_at);
SELECT pg_catalog.pg_extension_config_dump('idempotency', '');
REVOKE ALL ON idempotency FROM PUBLIC;

DROP FUNCTION append(text, bytea[], bytea[], bigint[]);
DROP FUNCTION append(text, text[], text[], bigint[]);
DROP FUNCTION append_rows(text, anyarray, bigint[]);

CREATE FUNCTION append(shard text, keys bytea[], vals bytea[], diffs bigint[],
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION append(shard text, keys text[], vals text[], diffs bigint[],
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION append_rows(shard text, rows anyarray, diffs bigint[] DEFAULT NULL,
							idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append_rows'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION
	append(text, bytea[], bytea[], bigint[], text),
	append(text, text[], text[], bigint[], text),
	append_rows(text, anyarray, bigint[], text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	append(text, bytea[], bytea[], bigint[], text),
	append(text, text[], text[], bigint[], text),
	append_rows(text, anyarray, bigint[], text)
TO persist_sink_writer;

-- wait_upper(): returns as soon as a shard's upper passes a time, woken by
-- the commit that moves it, or at a timeout: with listen(), a consumer
-- follows a shard without polling.
CREATE FUNCTION wait_upper(shard text, past bigint, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_wait_upper'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION wait_upper(text, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wait_upper(text, bigint, interval)
TO persist_sink_writer, persist_sink_reader;
