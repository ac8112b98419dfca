/* persist_sink--0.15--0.16.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.16'" to load this file. \quit

-- shard_info() and the view shards tell whether this database owns each
-- shard's parts: true in the blob table or in an object store whose owner
-- marker names this database, false in another database's store (parts a
-- copy of a database inherited: read here, never deleted here), null while
-- the store has no marker or cannot be asked.  As in 0.13, the view is
-- replaced in place with its new column last, so that the user's own views
-- over it survive.  (Every name is qualified.)
CREATE FUNCTION @extschema@.shard_info_0_16(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint, OUT debt_batches bigint,
	OUT runs bigint, OUT blob_store text, OUT objects_owned boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE;

CREATE OR REPLACE VIEW @extschema@.shards AS
SELECT i.name, i.seqno, i.upper, i.since, i.batches, i.parts, i.inline_bytes,
	   i.blob_bytes, i.updates, i.debt_batches, i.runs,
	   COALESCE(a.owner, d.owner) AS owner,
	   COALESCE(a.acl, d.acl) AS privileges,
	   i.blob_store, i.objects_owned
FROM @extschema@.shard_info_0_16() i
	 LEFT JOIN @extschema@.shard_acl a ON a.shard OPERATOR(pg_catalog.=) i.name
	 CROSS JOIN (SELECT relowner::regrole AS owner,
						ARRAY[pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_writer'), relowner, 'INSERT', false),
							  pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_reader'), relowner, 'SELECT', false)] AS acl
				 FROM pg_catalog.pg_class
				 WHERE oid = '@extschema@.consensus'::regclass) d;
DROP FUNCTION @extschema@.shard_info();
ALTER FUNCTION @extschema@.shard_info_0_16() RENAME TO shard_info;

REVOKE ALL ON FUNCTION @extschema@.shard_info() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.shard_info() TO persist_sink_writer, persist_sink_reader;
COMMENT ON FUNCTION @extschema@.shard_info() IS
	'One row per shard of this database (what the view shards shows)';
COMMENT ON VIEW @extschema@.shards IS
	'Every shard of this database: seqno, upper, since, batches, parts, bytes, updates, batches in flight, sorted runs, owner, privileges (a: append, r: read), where its parts are (table, or an object store''s URL) and whether this database owns them (false: another database''s store, read here and never deleted here; null: the store has no owner marker yet or could not be asked)';
