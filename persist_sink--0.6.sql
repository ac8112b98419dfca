/* persist_sink--0.6.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION persist_sink" to load this file. \quit

-- Every function runs as its caller: none runs with its owner's rights.  The C code
-- checks that the caller has the rights of persist_sink_writer or
-- persist_sink_reader, and takes the storage tables' owner's rights only
-- around its own statements on those tables, so no code a user can define
-- (type I/O, domain checks, operators, casts) ever runs with the owner's
-- rights.

-- Roles that govern who may write and who may read shards.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'persist_sink_writer') THEN
		CREATE ROLE persist_sink_writer NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'persist_sink_reader') THEN
		CREATE ROLE persist_sink_reader NOLOGIN;
	END IF;
END
$$;

GRANT USAGE ON SCHEMA @extschema@ TO persist_sink_writer, persist_sink_reader;

-- Storage: parts, and one consensus row per shard.  Reached only through
-- the functions below.
-- A part's bytes are cut into chunks of 7864 bytes (the last one shorter),
-- one row each, numbered from 0 and kept in the row itself: a row of the
-- longest key and a whole chunk fills a heap page.  (TOAST would cut them
-- into four times as many rows of 2 kB.)  Parts are already compressed.
CREATE TABLE blob (
	key text COLLATE "C" NOT NULL,
	chunk integer NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (key, chunk)
);
ALTER TABLE blob ALTER COLUMN key SET STORAGE PLAIN,
	ALTER COLUMN data SET STORAGE PLAIN;

CREATE TABLE consensus (
	shard text PRIMARY KEY,
	seqno bigint NOT NULL,
	state bytea NOT NULL
);
-- state is the shard's last rollup: its whole state at some seqno up to the
-- row's seqno (the head).  It is rewritten only now and then, and holds
-- compressed parts: do not spend CPU compressing it again.
ALTER TABLE consensus ALTER COLUMN state SET STORAGE EXTERNAL;

-- The log of state diffs: what each compare-and-swap after the rollup
-- changed.  A CaS moves the consensus row's seqno from s to s + 1 and
-- inserts diff s + 1, in one transaction; the shard's state at its head is
-- the rollup with every later diff applied in order.
CREATE TABLE consensus_diff (
	shard text NOT NULL,
	seqno bigint NOT NULL,
	diff bytea NOT NULL,
	PRIMARY KEY (shard, seqno)
);
ALTER TABLE consensus_diff ALTER COLUMN diff SET STORAGE EXTERNAL;

-- The keys of committed appends (idempotency_key), written in the
-- transaction of the interval that committed them.
CREATE TABLE idempotency (
	shard text COLLATE "C" NOT NULL,
	key text COLLATE "C" NOT NULL,
	time bigint NOT NULL,
	digest bytea NOT NULL,
	written_at timestamptz NOT NULL,
	PRIMARY KEY (shard, key)
);
CREATE INDEX idempotency_written_at ON idempotency (written_at);

SELECT pg_catalog.pg_extension_config_dump('blob', '');
SELECT pg_catalog.pg_extension_config_dump('consensus', '');
SELECT pg_catalog.pg_extension_config_dump('consensus_diff', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency', '');
REVOKE ALL ON blob, consensus, consensus_diff, idempotency FROM PUBLIC;

-- Shards

CREATE FUNCTION create_shard(name text, row_type regtype DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_create_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION drop_shard(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_drop_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION shard_upper(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_upper'
LANGUAGE C STABLE;

CREATE FUNCTION shard_since(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_since'
LANGUAGE C STABLE;

CREATE FUNCTION downgrade_since(shard text, since bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_downgrade_since'
LANGUAGE C VOLATILE;

CREATE FUNCTION shard_info(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint, OUT debt_batches bigint,
	OUT runs bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE;

CREATE VIEW shards AS SELECT * FROM shard_info();

CREATE FUNCTION batches(shard text)
RETURNS TABLE(lower bigint, upper bigint, since bigint, parts int,
			  updates bigint, encoded_bytes bigint, inline boolean)
AS 'MODULE_PATHNAME', 'ps_batches'
LANGUAGE C STABLE;

-- Writes

CREATE FUNCTION compare_and_append(shard text, keys bytea[], vals bytea[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION compare_and_append(shard text, keys text[], vals text[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE;

-- Writes through the sink, with optional idempotency keys

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

CREATE FUNCTION wait_upper(shard text, past bigint, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_wait_upper'
LANGUAGE C VOLATILE;
-- Reads

CREATE FUNCTION snapshot(shard text, as_of bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_snapshot'
LANGUAGE C STABLE
ROWS 1000;

CREATE FUNCTION listen(shard text, as_of bigint, until bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen'
LANGUAGE C STABLE
ROWS 1000;

-- Maintenance

CREATE FUNCTION compact(shard text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_compact'
LANGUAGE C VOLATILE;

CREATE FUNCTION verify(shard text)
RETURNS TABLE(problem text)
AS 'MODULE_PATHNAME', 'ps_verify'
LANGUAGE C STABLE;

-- Observability

CREATE FUNCTION stats(
	OUT shard text, OUT appends bigint, OUT updates bigint,
	OUT shared_writes bigint, OUT own_writes bigint, OUT parts_written bigint,
	OUT blob_puts bigint, OUT blob_bytes bigint, OUT inline_batches bigint,
	OUT state_bytes bigint, OUT cas_attempts bigint, OUT cas_mismatches bigint,
	OUT compactions bigint, OUT compacted_updates bigint,
	OUT slowed_ms bigint, OUT stalled_ms bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_stats'
LANGUAGE C VOLATILE;

CREATE VIEW stats AS SELECT * FROM stats() ORDER BY shard;

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

CREATE FUNCTION sink_memory(OUT budget_bytes bigint, OUT small_bytes bigint,
							OUT part_bytes bigint, OUT intervals int,
							OUT blocked_intervals int)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_sink_memory'
LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION stats_info(OUT entries integer, OUT stats_max integer,
						   OUT uncounted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_stats_info'
LANGUAGE C VOLATILE;

CREATE FUNCTION stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'ps_stats_reset'
LANGUAGE C VOLATILE;

-- Typed rows

CREATE FUNCTION append_rows(shard text, rows anyarray, diffs bigint[] DEFAULT NULL,
							idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append_rows'
LANGUAGE C VOLATILE;

CREATE FUNCTION compare_and_append_rows(shard text, rows anyarray, times bigint[],
										diffs bigint[], expected_upper bigint,
										new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append_rows'
LANGUAGE C VOLATILE;

CREATE FUNCTION snapshot_rows(shard text, row_type anyelement, as_of bigint DEFAULT NULL)
RETURNS SETOF anyelement
AS 'MODULE_PATHNAME', 'ps_snapshot_rows'
LANGUAGE C STABLE
ROWS 1000;

CREATE FUNCTION listen_rows(shard text, row_type anyelement, as_of bigint,
							until bigint DEFAULT NULL)
RETURNS TABLE("row" anyelement, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen_rows'
LANGUAGE C STABLE
ROWS 1000;

-- Privileges: nothing for PUBLIC; writers write, readers read.

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON shards, stats, compaction_progress FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	create_shard(text, regtype), drop_shard(text), downgrade_since(text, bigint),
	compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint),
	compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint),
	append(text, bytea[], bytea[], bigint[], text), append(text, text[], text[], bigint[], text),
	compact(text), shard_upper(text), shard_since(text),
	append_rows(text, anyarray, bigint[], text),
	compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint),
	wait_upper(text, bigint, interval)
TO persist_sink_writer;

GRANT EXECUTE ON FUNCTION
	shard_upper(text), shard_since(text), shard_info(), batches(text),
	snapshot(text, bigint), listen(text, bigint, bigint), verify(text), stats(),
	snapshot_rows(text, anyelement, bigint), listen_rows(text, anyelement, bigint, bigint),
	wait_upper(text, bigint, interval), sink_memory(), stats_info(),
	compaction_progress()
TO persist_sink_reader;
GRANT SELECT ON shards, stats, compaction_progress TO persist_sink_reader;
