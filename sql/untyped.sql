--
-- untyped: every public function called with untyped arguments, as drivers
-- that send parameters without types (node-postgres, ...) and array
-- literals do.  Each statement is prepared with parameters of type unknown
-- (what such a driver's Parse message declares) and executed with string
-- arguments; none is ambiguous (42725), and each means what the text
-- spelling says: keys and vals are text, diffs and times bigint.  The
-- typed-row functions take a typed array or row by design (their element
-- type chooses the shard's row type): they are called with typed rows, and
-- untyped ones get 42804 ("could not determine polymorphic type").
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

PREPARE create_u(unknown) AS SELECT create_shard($1);
EXECUTE create_u('ut_a');
EXECUTE create_u('ut_b');

-- append, 4 and 5 arguments, and as literals
PREPARE append4(unknown, unknown, unknown, unknown) AS SELECT append($1, $2, $3, $4) > 0 AS appended;
PREPARE append5(unknown, unknown, unknown, unknown, unknown) AS SELECT append($1, $2, $3, $4, $5) AS t;
EXECUTE append4('ut_a', '{a,b}', '{x,y}', '{1,1}');
EXECUTE append5('ut_a', '{c}', '{z}', '{2}', 'ut-key-1') \gset
EXECUTE append5('ut_a', '{c}', '{z}', '{2}', 'ut-key-1') \gset retry_
SELECT :t = :retry_t AS retry_same_time;
SELECT append('ut_a', '{d}', '{w}', '{1}') > 0 AS appended_literals;
-- typed arrays still choose their overloads
SELECT append('ut_a', ARRAY['e'::bytea], ARRAY['\x00'::bytea], ARRAY[1::bigint]) > 0 AS appended_bytea;

-- compare_and_append
PREPARE upper_u(unknown) AS SELECT shard_upper($1) AS u;
EXECUTE upper_u('ut_b') \gset
PREPARE cas_u(unknown, unknown, unknown, unknown, unknown, unknown, unknown) AS
	SELECT compare_and_append($1, $2, $3, $4, $5, $6, $7) AS seqno;
EXECUTE cas_u('ut_b', '{k1,k2}', '{v1,v2}', '{0,0}', '{1,1}', '0', '1');
SELECT compare_and_append('ut_b', '{k3}', '{v3}', '{1}', '{1}', 1, 2) > 0 AS cas_literals;

-- reads
PREPARE snapshot_u(unknown, unknown) AS
	SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, diff FROM snapshot($1, $2) ORDER BY key;
PREPARE snapshot_u1(unknown) AS SELECT count(*) AS n FROM snapshot($1);
PREPARE listen_u(unknown, unknown, unknown) AS
	SELECT encode(key, 'escape') AS key, "time", diff FROM listen($1, $2, $3) ORDER BY "time", key;
PREPARE listen_u2(unknown, unknown) AS SELECT count(*) AS n FROM listen($1, $2);
EXECUTE snapshot_u('ut_b', '1');
EXECUTE snapshot_u1('ut_a');
EXECUTE listen_u('ut_b', '-1', '2');
EXECUTE listen_u2('ut_a', '-1');
PREPARE since_u(unknown) AS SELECT shard_since($1) AS since;
EXECUTE since_u('ut_b');
PREPARE wait_u(unknown, unknown, unknown) AS SELECT wait_upper($1, $2, $3) AS upper;
EXECUTE wait_u('ut_b', '1', '1 second');
PREPARE batches_u(unknown) AS SELECT count(*) AS batches FROM batches($1);
EXECUTE batches_u('ut_b');
PREPARE verify_u(unknown) AS SELECT count(*) AS problems FROM verify($1);
EXECUTE verify_u('ut_a');

-- maintenance
PREPARE downgrade_u(unknown, unknown) AS SELECT downgrade_since($1, $2);
EXECUTE downgrade_u('ut_b', '1');
PREPARE compact_u(unknown) AS SELECT compact($1) IS NOT NULL AS compacted;
EXECUTE compact_u('ut_b');
EXECUTE snapshot_u('ut_b', NULL);

-- observability (no arguments)
SELECT count(*) >= 2 AS shards FROM shard_info() WHERE name LIKE 'ut\_%';
SELECT count(*) >= 0 AS ok FROM stats();
SELECT count(*) >= 0 AS ok FROM compaction_failures();
SELECT count(*) >= 0 AS ok FROM compaction_progress();
SELECT budget_bytes > 0 AS ok FROM sink_memory();
SELECT stats_max > 0 AS ok FROM stats_info();

-- typed rows: a typed row or array chooses the row type; untyped, 42804
PREPARE create_t(unknown, unknown) AS SELECT create_shard($1, $2);
EXECUTE create_t('ut_rows', 'int4');
SELECT append_rows('ut_rows', ARRAY[1, 2]) > 0 AS rows_appended;
SELECT pg_temp.err($$SELECT persist_sink.append_rows('ut_rows', '{3}')$$);
SELECT string_agg(r::text, ',' ORDER BY r) AS rows FROM snapshot_rows('ut_rows', NULL::int4) r;

-- grants, as the shard's owner
PREPARE grant_u(unknown, unknown, unknown) AS SELECT grant_shard($1, $2, $3);
PREPARE revoke_u(unknown, unknown, unknown) AS SELECT revoke_shard($1, $2, $3);
EXECUTE grant_u('ut_a', 'persist_sink_reader', 'read');
SELECT (SELECT string_agg(privilege_type || ' to ' || grantee::regrole, ', ')
		FROM aclexplode(privileges)) AS grants
FROM shards WHERE name = 'ut_a';
EXECUTE revoke_u('ut_a', 'persist_sink_reader', 'read');
PREPARE owner_u(unknown, unknown) AS SELECT alter_shard_owner($1, $2);
EXECUTE owner_u('ut_a', 'persist_sink_writer');
SELECT owner FROM shards WHERE name = 'ut_a';
EXECUTE owner_u('ut_a', current_user);
SELECT (SELECT string_agg(privilege_type || ' to ' || grantee::regrole, ', ')
		FROM aclexplode(privileges)) AS grants
FROM shards WHERE name = 'ut_a';

PREPARE drop_u(unknown) AS SELECT drop_shard($1);
EXECUTE drop_u('ut_a');
EXECUTE drop_u('ut_b');
EXECUTE drop_u('ut_rows');

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
