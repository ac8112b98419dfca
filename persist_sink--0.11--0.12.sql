/* persist_sink--0.11--0.12.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.12'" to load this file. \quit

-- Garbage: the parts a background merge replaced, one row per merge (its
-- shard and the seqno its CaS made), written in the merge's transaction
-- and deleted with the parts' blob rows by a compactor once it committed.
CREATE TABLE garbage (
	shard text COLLATE "C" NOT NULL,
	seqno bigint NOT NULL,
	keys text[] COLLATE "C" NOT NULL,
	PRIMARY KEY (shard, seqno)
);
SELECT pg_catalog.pg_extension_config_dump('garbage', '');
REVOKE ALL ON garbage FROM PUBLIC;
COMMENT ON TABLE @extschema@.garbage IS
	'Storage: the blob keys of the parts each background merge replaced, deleted with their blob rows by a compactor after the merge commits';

-- An object store, checked: one PUT, GET, ranged GET, listing and DELETE of
-- a probe object with the server's persist_sink.s3_* settings.
CREATE FUNCTION @extschema@.check_object_store(url text,
	OUT bucket text, OUT prefix text, OUT put_ms float8, OUT get_ms float8,
	OUT range_get_ms float8, OUT list_ms float8, OUT delete_ms float8)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_check_object_store'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.check_object_store(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.check_object_store(text) IS
	'Checks an object store (s3://bucket[/prefix]) with the server''s persist_sink.s3_* settings: puts, reads, lists and deletes a probe object and returns each request''s milliseconds';
