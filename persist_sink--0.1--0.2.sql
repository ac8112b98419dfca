/* persist_sink--0.1--0.2.sql: typed rows */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.2'" to load this file. \quit

CREATE FUNCTION append_rows(shard text, rows anyarray, diffs bigint[] DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append_rows'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION compare_and_append_rows(shard text, rows anyarray, times bigint[],
										diffs bigint[], expected_upper bigint,
										new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append_rows'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION snapshot_rows(shard text, row_type anyelement, as_of bigint DEFAULT NULL)
RETURNS SETOF anyelement
AS 'MODULE_PATHNAME', 'ps_snapshot_rows'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
ROWS 1000;

CREATE FUNCTION listen_rows(shard text, row_type anyelement, as_of bigint,
							until bigint DEFAULT NULL)
RETURNS TABLE("row" anyelement, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen_rows'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
ROWS 1000;

REVOKE ALL ON FUNCTION
	append_rows(text, anyarray, bigint[]),
	compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint),
	snapshot_rows(text, anyelement, bigint),
	listen_rows(text, anyelement, bigint, bigint)
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	append_rows(text, anyarray, bigint[]),
	compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint)
TO persist_sink_writer;

GRANT EXECUTE ON FUNCTION
	snapshot_rows(text, anyelement, bigint),
	listen_rows(text, anyelement, bigint, bigint)
TO persist_sink_reader;
