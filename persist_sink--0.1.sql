/* persist_sink--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION persist_sink" to load this file. \quit

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
CREATE TABLE blob (
	key text COLLATE "C" PRIMARY KEY,
	data bytea NOT NULL
);
ALTER TABLE blob ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE consensus (
	shard text PRIMARY KEY,
	seqno bigint NOT NULL,
	state bytea NOT NULL
);
-- states are rewritten on every append and hold compressed parts: do not
-- spend CPU compressing them again
ALTER TABLE consensus ALTER COLUMN state SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('blob', '');
SELECT pg_catalog.pg_extension_config_dump('consensus', '');
REVOKE ALL ON blob, consensus FROM PUBLIC;

-- Shards

CREATE FUNCTION create_shard(name text, row_type regtype DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_create_shard'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION drop_shard(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_drop_shard'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION shard_upper(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_upper'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION shard_since(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_since'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION downgrade_since(shard text, since bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_downgrade_since'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION shard_info(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE VIEW shards AS SELECT * FROM shard_info();

CREATE FUNCTION batches(shard text)
RETURNS TABLE(lower bigint, upper bigint, since bigint, parts int,
			  updates bigint, encoded_bytes bigint, inline boolean)
AS 'MODULE_PATHNAME', 'ps_batches'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Writes

CREATE FUNCTION compare_and_append(shard text, keys bytea[], vals bytea[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION compare_and_append(shard text, keys text[], vals text[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION append(shard text, keys bytea[], vals bytea[], diffs bigint[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION append(shard text, keys text[], vals text[], diffs bigint[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Reads

CREATE FUNCTION snapshot(shard text, as_of bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_snapshot'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
ROWS 1000;

CREATE FUNCTION listen(shard text, as_of bigint, until bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
ROWS 1000;

-- Maintenance

CREATE FUNCTION compact(shard text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_compact'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION verify(shard text)
RETURNS TABLE(problem text)
AS 'MODULE_PATHNAME', 'ps_verify'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Observability

CREATE FUNCTION stats(
	OUT shard text, OUT appends bigint, OUT updates bigint,
	OUT shared_writes bigint, OUT own_writes bigint, OUT parts_written bigint,
	OUT blob_puts bigint, OUT blob_bytes bigint, OUT inline_batches bigint,
	OUT state_bytes bigint, OUT cas_attempts bigint, OUT cas_mismatches bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_stats'
LANGUAGE C VOLATILE;

CREATE VIEW stats AS SELECT * FROM stats() ORDER BY shard;

CREATE FUNCTION stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'ps_stats_reset'
LANGUAGE C VOLATILE;

-- Privileges: nothing for PUBLIC; writers write, readers read.

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON shards, stats FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	create_shard(text, regtype), drop_shard(text), downgrade_since(text, bigint),
	compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint),
	compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint),
	append(text, bytea[], bytea[], bigint[]), append(text, text[], text[], bigint[]),
	compact(text), shard_upper(text), shard_since(text)
TO persist_sink_writer;

GRANT EXECUTE ON FUNCTION
	shard_upper(text), shard_since(text), shard_info(), batches(text),
	snapshot(text, bigint), listen(text, bigint, bigint), verify(text), stats()
TO persist_sink_reader;
GRANT SELECT ON shards, stats TO persist_sink_reader;
