--
-- idempotency: append() and append_rows() with an idempotency key.  A call
-- whose key a committed append of the same shard used returns that append's
-- time and writes nothing; the same key with other content raises PS005;
-- keys belong to their shard, go with it, and are checked for length.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

SELECT create_shard('id_a');
SELECT create_shard('id_b');
SELECT create_shard('id_rows', 'int4');

-- a keyed append, and its retry: the same time, nothing written again
SELECT append('id_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{1,1}', 'order-1') AS t1 \gset
SELECT seqno AS seqno1, upper AS upper1 FROM shards WHERE name = 'id_a' \gset
SELECT append('id_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{1,1}', 'order-1') = :t1 AS same_time;
-- the same content in another order, or as bytea, is the same write
SELECT append('id_a', '{k2,k1}'::text[], '{v2,v1}'::text[], '{1,1}', 'order-1') = :t1 AS same_time;
SELECT append('id_a', ARRAY['k1'::bytea, 'k2'], ARRAY['v1'::bytea, 'v2'], '{1,1}', 'order-1') = :t1 AS same_time;
SELECT seqno = :seqno1 AS seqno_unchanged, upper = :upper1 AS upper_unchanged
FROM shards WHERE name = 'id_a';
SELECT encode(key, 'escape') AS key, encode(val, 'escape') AS val, diff FROM snapshot('id_a') ORDER BY key;

-- the same key with other content: PS005, nothing written
SELECT pg_temp.err($$SELECT persist_sink.append('id_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{1,2}', 'order-1')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('id_a', '{k3}'::text[], '{v3}'::text[], '{1}', 'order-1')$$);
SELECT seqno = :seqno1 AS seqno_unchanged FROM shards WHERE name = 'id_a';

-- a new key writes; no key always writes
SELECT append('id_a', '{k3}'::text[], '{v3}'::text[], '{1}', 'order-2') > :t1 AS later;
SELECT append('id_a', '{k3}'::text[], '{v3}'::text[], '{1}') > :t1 AS later;
SELECT append('id_a', '{k3}'::text[], '{v3}'::text[], '{1}') > :t1 AS later;
SELECT encode(key, 'escape') AS key, diff FROM snapshot('id_a') ORDER BY key;

-- keys belong to their shard
SELECT append('id_b', '{x}'::text[], '{y}'::text[], '{5}', 'order-1') <> :t1 AS own_time;
SELECT count(*) AS b_rows FROM snapshot('id_b');

-- a large write (its own parts) with a key, and its retry
SET persist_sink.shared_batch_max_bytes = 0;
SELECT append('id_b', ARRAY(SELECT 'big' || i FROM generate_series(1, 3000) i),
			  ARRAY(SELECT md5(i::text) FROM generate_series(1, 3000) i),
			  array_fill(1::bigint, ARRAY[3000]), 'big-1') AS tbig \gset
SELECT seqno AS seqno_b FROM shards WHERE name = 'id_b' \gset
SELECT append('id_b', ARRAY(SELECT 'big' || i FROM generate_series(1, 3000) i),
			  ARRAY(SELECT md5(i::text) FROM generate_series(1, 3000) i),
			  array_fill(1::bigint, ARRAY[3000]), 'big-1') = :tbig AS same_time;
SELECT pg_temp.err($$SELECT persist_sink.append('id_b', ARRAY['big1'], ARRAY['other'], '{1}', 'big-1')$$);
RESET persist_sink.shared_batch_max_bytes;
SELECT seqno = :seqno_b AS seqno_unchanged, (SELECT count(*) FROM snapshot('id_b')) AS b_rows
FROM shards WHERE name = 'id_b';

-- typed rows
SELECT append_rows('id_rows', ARRAY[1, 2, 2], idempotency_key => 'r-1') AS tr \gset
SELECT append_rows('id_rows', ARRAY[2, 1, 2], NULL, 'r-1') = :tr AS same_time;
SELECT pg_temp.err($$SELECT persist_sink.append_rows('id_rows', ARRAY[1, 2], NULL, 'r-1')$$);
SELECT string_agg(r::text, ',' ORDER BY r) FROM snapshot_rows('id_rows', NULL::int4) r;

-- bad keys
SELECT pg_temp.err($$SELECT persist_sink.append('id_a', '{k}'::text[], '{v}'::text[], '{1}', '')$$);
SELECT pg_temp.err(format($$SELECT persist_sink.append('id_a', '{k}'::text[], '{v}'::text[], '{1}', %L)$$, repeat('x', 201)));
SELECT append('id_a', '{k4}'::text[], '{v}'::text[], '{1}', repeat('x', 200)) > :t1 AS longest_key;

-- the keys are gone with their shard: a new shard of the same name writes again
SELECT drop_shard('id_a');
SELECT create_shard('id_a');
SELECT append('id_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{1,1}', 'order-1') > :t1 AS written_again;
SELECT count(*) AS a_rows FROM snapshot('id_a');

-- the keys are not reachable by the application's roles
CREATE ROLE regress_id_app IN ROLE persist_sink_writer, persist_sink_reader;
SELECT grant_shard('id_a', 'regress_id_app', 'append');
SET ROLE regress_id_app;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.idempotency$$);
SELECT append('id_a', '{k1,k2}'::text[], '{v1,v2}'::text[], '{1,1}', 'order-1') > 0 AS retried_as_app;
RESET ROLE;
DROP ROLE regress_id_app;

SELECT * FROM verify('id_a') UNION ALL SELECT * FROM verify('id_b') UNION ALL SELECT * FROM verify('id_rows');

-- Cleanup
SELECT drop_shard(name) FROM shards WHERE name LIKE 'id\_%' ORDER BY name COLLATE "C";
SELECT count(*) AS keys_left FROM persist_sink.idempotency WHERE shard LIKE 'id\_%';
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
