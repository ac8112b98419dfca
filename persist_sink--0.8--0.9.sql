/* persist_sink--0.8--0.9.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.9'" to load this file. \quit

-- 0.9 gives shards owners and grants: the role that creates a shard owns
-- it, and others need grant_shard() to append to it or read it.  Shards
-- made before keep what they had: owned by the extension's owner, append
-- granted to persist_sink_writer and read to persist_sink_reader.  Both
-- roles may now call every function (each still checks its role), so that
-- a reader calling append() is told which role it lacks.  (Every name is
-- qualified.)
CREATE TABLE @extschema@.shard_acl (
	shard text PRIMARY KEY,
	owner regrole NOT NULL,
	acl aclitem[] NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.shard_acl', '');
REVOKE ALL ON @extschema@.shard_acl FROM PUBLIC;

INSERT INTO @extschema@.shard_acl (shard, owner, acl)
SELECT c.shard, o.owner,
	   ARRAY[pg_catalog.makeaclitem('persist_sink_writer'::regrole, o.owner, 'INSERT', false),
			 pg_catalog.makeaclitem('persist_sink_reader'::regrole, o.owner, 'SELECT', false)]
FROM @extschema@.consensus c,
	 (SELECT relowner::regrole AS owner FROM pg_catalog.pg_class
	  WHERE oid = '@extschema@.consensus'::regclass) o;

CREATE FUNCTION @extschema@.grant_shard(shard text, role text, privilege text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_grant_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION @extschema@.revoke_shard(shard text, role text, privilege text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_revoke_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION @extschema@.alter_shard_owner(shard text, new_owner text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_alter_shard_owner'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION @extschema@.grant_shard(text, text, text),
	@extschema@.revoke_shard(text, text, text),
	@extschema@.alter_shard_owner(text, text) FROM PUBLIC;

-- the new columns come last, so views of users built on shards keep working
CREATE OR REPLACE VIEW @extschema@.shards AS
SELECT i.*,
	   COALESCE(a.owner, d.owner) AS owner,
	   COALESCE(a.acl, d.acl) AS privileges
FROM @extschema@.shard_info() i
	 LEFT JOIN @extschema@.shard_acl a ON a.shard OPERATOR(pg_catalog.=) i.name
	 CROSS JOIN (SELECT relowner::regrole AS owner,
						ARRAY[pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_writer'), relowner, 'INSERT', false),
							  pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_reader'), relowner, 'SELECT', false)] AS acl
				 FROM pg_catalog.pg_class
				 WHERE oid = '@extschema@.consensus'::regclass) d;

GRANT EXECUTE ON FUNCTION
	@extschema@.create_shard(text, regtype), @extschema@.drop_shard(text),
	@extschema@.downgrade_since(text, bigint),
	@extschema@.compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint),
	@extschema@.compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint),
	@extschema@.compare_and_append(text, text, text, text, text, bigint, bigint),
	@extschema@.append(text, bytea[], bytea[], bigint[], text),
	@extschema@.append(text, text[], text[], bigint[], text),
	@extschema@.append(text, text, text, text, text),
	@extschema@.compact(text), @extschema@.shard_upper(text), @extschema@.shard_since(text),
	@extschema@.append_rows(text, anyarray, bigint[], text),
	@extschema@.compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint),
	@extschema@.wait_upper(text, bigint, interval),
	@extschema@.shard_info(), @extschema@.batches(text),
	@extschema@.snapshot(text, bigint), @extschema@.listen(text, bigint, bigint),
	@extschema@.verify(text), @extschema@.stats(),
	@extschema@.snapshot_rows(text, anyelement, bigint),
	@extschema@.listen_rows(text, anyelement, bigint, bigint),
	@extschema@.sink_memory(), @extschema@.stats_info(),
	@extschema@.compaction_progress(), @extschema@.compaction_failures(),
	@extschema@.grant_shard(text, text, text), @extschema@.revoke_shard(text, text, text),
	@extschema@.alter_shard_owner(text, text)
TO persist_sink_writer, persist_sink_reader;

COMMENT ON TABLE @extschema@.shard_acl IS
	'Storage: each shard''s owner and the privileges granted on it (a: append, r: read); a shard without a row has those of shards made before 0.9';
COMMENT ON FUNCTION @extschema@.grant_shard(text, text, text) IS
	'Grants append, read or all on a shard to a role (or PUBLIC); only its owner or a member of that role may';
COMMENT ON FUNCTION @extschema@.revoke_shard(text, text, text) IS
	'Revokes append, read or all on a shard from a role (or PUBLIC); only its owner or a member of that role may';
COMMENT ON FUNCTION @extschema@.alter_shard_owner(text, text) IS
	'Gives a shard, and its grants, to another role; only a member of both the owner''s and the new owner''s roles may';
COMMENT ON VIEW @extschema@.shards IS
	'Every shard of this database: seqno, upper, since, batches, parts, bytes, updates, batches in flight, sorted runs, owner and privileges (a: append, r: read)';
