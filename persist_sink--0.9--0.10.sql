/* persist_sink--0.9--0.10.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.10'" to load this file. \quit

-- 0.10 adds readers: durable consumer positions that hold a shard's since.
-- (Every name is qualified.)
-- Readers: a named position in a shard's times (the last time its
-- consumer processed), its owner and lease.  Written only in the caller's
-- transaction by create_reader, read_next, advance_reader and
-- drop_reader; a live reader (lease NULL, or last_active + lease not yet
-- past) holds the shard's since at or below its position.
CREATE TABLE @extschema@.reader (
	shard text COLLATE "C" NOT NULL,
	reader text COLLATE "C" NOT NULL,
	owner regrole NOT NULL,
	position bigint NOT NULL,
	lease interval,
	last_active timestamptz NOT NULL,
	PRIMARY KEY (shard, reader)
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.reader', '');
REVOKE ALL ON @extschema@.reader FROM PUBLIC;

CREATE FUNCTION @extschema@.create_reader(shard text, reader text,
	"position" bigint DEFAULT NULL, lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_create_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION @extschema@.drop_reader(shard text, reader text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_drop_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION @extschema@.read_next(shard text, reader text,
	max_updates bigint DEFAULT 100000, timeout interval DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_read_next'
LANGUAGE C VOLATILE
ROWS 1000;

CREATE FUNCTION @extschema@.read_next_rows(shard text, reader text, row_type anyelement,
	max_updates bigint DEFAULT 100000, timeout interval DEFAULT NULL)
RETURNS TABLE("row" anyelement, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_read_next_rows'
LANGUAGE C VOLATILE
ROWS 1000;

CREATE FUNCTION @extschema@.advance_reader(shard text, reader text, "position" bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_advance_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION @extschema@.reader_info(
	OUT shard text, OUT reader text, OUT owner regrole, OUT "position" bigint,
	OUT lag_ms bigint, OUT lag_updates bigint, OUT lease interval,
	OUT last_active timestamptz, OUT expires_at timestamptz, OUT expired boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_reader_info'
LANGUAGE C STABLE;

CREATE VIEW @extschema@.readers AS SELECT * FROM @extschema@.reader_info();

REVOKE ALL ON FUNCTION @extschema@.create_reader(text, text, bigint, interval),
	@extschema@.drop_reader(text, text),
	@extschema@.read_next(text, text, bigint, interval),
	@extschema@.read_next_rows(text, text, anyelement, bigint, interval),
	@extschema@.advance_reader(text, text, bigint),
	@extschema@.reader_info() FROM PUBLIC;
REVOKE ALL ON @extschema@.readers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.create_reader(text, text, bigint, interval),
	@extschema@.drop_reader(text, text),
	@extschema@.read_next(text, text, bigint, interval),
	@extschema@.read_next_rows(text, text, anyelement, bigint, interval),
	@extschema@.advance_reader(text, text, bigint),
	@extschema@.reader_info()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON @extschema@.readers TO persist_sink_reader;

COMMENT ON TABLE @extschema@.reader IS
	'Storage: each reader''s position in its shard, owner and lease (written only by the reader functions)';
COMMENT ON FUNCTION @extschema@.create_reader(text, text, bigint, interval) IS
	'Registers a named reader of a shard at a position (default since - 1: it reads everything); the shard''s since stays at or below its position while its lease lasts; 42710 if a live reader of that name exists';
COMMENT ON FUNCTION @extschema@.drop_reader(text, text) IS
	'Drops a reader, releasing its hold on the shard''s since; by its owner or the shard''s';
COMMENT ON FUNCTION @extschema@.read_next(text, text, bigint, interval) IS
	'The updates after the reader''s position, consolidated per (key, val, time), whole times up to about max_updates; waits up to timeout for some; locks the reader to the end of the transaction and renews its lease, but does not move it';
COMMENT ON FUNCTION @extschema@.read_next_rows(text, text, anyelement, bigint, interval) IS
	'read_next of a typed shard: its rows (the row type given as a NULL of that type), with their time and diff';
COMMENT ON FUNCTION @extschema@.advance_reader(text, text, bigint) IS
	'Moves the reader''s position forward (never back, never to or past upper) in the caller''s transaction, and renews its lease';
COMMENT ON FUNCTION @extschema@.reader_info() IS
	'One row per reader the caller owns or whose shard it owns (what the view readers shows)';
COMMENT ON VIEW @extschema@.readers IS
	'Readers the caller owns or whose shard it owns: position, lag in times (milliseconds for sink times) and in updates (an estimate from batch counts), lease, last activity, when and whether it expires';
