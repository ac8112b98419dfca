/* persist_sink--0.10--0.11.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.11'" to load this file. \quit

-- Shards as tables: the foreign data wrapper persist_sink and its server.
-- A foreign table of the server, with option shard, takes INSERT and COPY
-- FROM (each statement one append) and answers SELECT from the snapshot.
CREATE FUNCTION @extschema@.fdw_handler() RETURNS pg_catalog.fdw_handler
AS 'MODULE_PATHNAME', 'ps_fdw_handler'
LANGUAGE C STRICT;

CREATE FUNCTION @extschema@.fdw_validator(text[], oid) RETURNS void
AS 'MODULE_PATHNAME', 'ps_fdw_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER persist_sink
	HANDLER @extschema@.fdw_handler VALIDATOR @extschema@.fdw_validator;
CREATE SERVER persist_sink FOREIGN DATA WRAPPER persist_sink;

REVOKE ALL ON FUNCTION @extschema@.fdw_handler(), @extschema@.fdw_validator(text[], oid) FROM PUBLIC;
GRANT USAGE ON FOREIGN SERVER persist_sink TO persist_sink_writer, persist_sink_reader;

COMMENT ON FUNCTION @extschema@.fdw_handler() IS
	'Handler of the foreign data wrapper persist_sink';
COMMENT ON FUNCTION @extschema@.fdw_validator(text[], oid) IS
	'Validator of the options of persist_sink''s foreign tables: shard (required) and as_of';
COMMENT ON FOREIGN DATA WRAPPER persist_sink IS
	'Shards as tables: INSERT and COPY FROM append (one statement, one append), SELECT reads the snapshot';
COMMENT ON SERVER persist_sink IS
	'The server of every shard''s foreign table: CREATE FOREIGN TABLE t (key bytea, val bytea, diff bigint) SERVER persist_sink OPTIONS (shard ''name'')';
