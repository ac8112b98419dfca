--
-- transactions: how the writes meet transaction edges.  A transaction that
-- wrote to a shard (compare_and_append, create_shard, drop_shard,
-- downgrade_since, compact) cannot be prepared (0A000), and nothing of it
-- survives, unless the writes were rolled back to a savepoint; append() is refused in a
-- read-only transaction (25006) and writes nothing; writes in a
-- subtransaction that rolls back leave nothing behind, and the session
-- goes on working.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

SHOW max_prepared_transactions;
SELECT create_shard('tx_a');
SELECT create_shard('tx_b');
SELECT create_shard('tx_r', 'int4');
SELECT seqno AS a_seqno, upper AS a_upper FROM shards WHERE name = 'tx_a' \gset

-- PREPARE after compare_and_append: refused, the write is rolled back, and
-- the session works on (a second compare_and_append in it, on another shard)
BEGIN;
SELECT compare_and_append('tx_a', '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1) > 0 AS written;
PREPARE TRANSACTION 'tx_cas';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'tx_cas';
SELECT seqno = :a_seqno AS a_seqno_unchanged, upper = :a_upper AS a_upper_unchanged
FROM shards WHERE name = 'tx_a';
SELECT compare_and_append('tx_b', '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1) > 0 AS written;
SELECT count(*) AS b_rows FROM snapshot('tx_b');

-- PREPARE after drop_shard: refused, the shard is still there
BEGIN;
SELECT drop_shard('tx_b');
PREPARE TRANSACTION 'tx_drop';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'tx_drop';
SELECT count(*) AS b_rows FROM snapshot('tx_b');

-- a failed compare_and_append queues nothing: its transaction prepares
BEGIN;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('tx_a', '{k}'::text[], '{v}'::text[], '{5}', '{1}', 5, 6)$$);
PREPARE TRANSACTION 'tx_nothing';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'tx_nothing';
COMMIT PREPARED 'tx_nothing';

-- PREPARE after create_shard: refused as well (prepared, it would hold the
-- shard's name, across restarts, from every other creator), nothing left
BEGIN;
SELECT create_shard('tx_c');
PREPARE TRANSACTION 'tx_create';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'tx_create';
SELECT count(*) AS c_visible FROM shards WHERE name = 'tx_c';
-- ... and after downgrade_since and compact (of a shard of two batches)
SELECT create_shard('tx_e');
SELECT compare_and_append('tx_e', '{s}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1) > 0 AS written;
SELECT compare_and_append('tx_e', '{t}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2) > 0 AS written;
BEGIN;
SELECT downgrade_since('tx_e', 1);
PREPARE TRANSACTION 'tx_since';
BEGIN;
SELECT compact('tx_e');
PREPARE TRANSACTION 'tx_compact';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid IN ('tx_since', 'tx_compact');
SELECT since AS e_since, batches AS e_batches FROM shards WHERE name = 'tx_e';

-- a write in a subtransaction that rolls back, then one that is kept; the
-- transaction that holds both commits; a transaction whose only write was
-- rolled back to a savepoint prepares
BEGIN;
SAVEPOINT s1;
SELECT compare_and_append('tx_a', '{gone}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1) > 0 AS written;
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
SELECT compare_and_append('tx_a', '{kept}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1) > 0 AS written;
RELEASE SAVEPOINT s2;
COMMIT;
SELECT encode(key, 'escape') AS key, diff FROM snapshot('tx_a');
BEGIN;
SAVEPOINT s1;
SELECT compare_and_append('tx_a', '{gone}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2) > 0 AS written;
ROLLBACK TO SAVEPOINT s1;
PREPARE TRANSACTION 'tx_after_rollback';
COMMIT PREPARED 'tx_after_rollback';
SELECT upper AS a_upper FROM shards WHERE name = 'tx_a';

-- append() in a read-only transaction: refused, nothing written
SELECT seqno AS a_seqno, upper AS a_upper FROM shards WHERE name = 'tx_a' \gset
BEGIN READ ONLY;
SELECT append('tx_a', '{ro}'::text[], '{v}'::text[], '{1}');
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT persist_sink.append_rows('tx_r', ARRAY[1])$$);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT pg_temp.err($$SELECT persist_sink.append('tx_a', '{ro}'::text[], '{v}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('tx_a', '{ro}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.create_shard('tx_ro')$$);
SELECT pg_temp.err($$SELECT persist_sink.drop_shard('tx_a')$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('tx_a', 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.compact('tx_a')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append_rows('tx_r', ARRAY[1], '{1}', '{1}', 1, 2)$$);
RESET default_transaction_read_only;
SELECT seqno = :a_seqno AS a_seqno_unchanged, upper = :a_upper AS a_upper_unchanged,
	   (SELECT count(*) FROM snapshot('tx_a') WHERE key = 'ro') AS ro_rows,
	   (SELECT upper FROM shards WHERE name = 'tx_r') AS r_upper
FROM shards WHERE name = 'tx_a';

-- append() in a transaction that changed or locked the shard's state row:
-- refused at once (the worker would wait for this transaction), nothing
-- written
SELECT seqno AS a_seqno FROM shards WHERE name = 'tx_a' \gset
BEGIN;
SELECT compare_and_append('tx_a', '{c}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2) > 0 AS written;
SELECT pg_temp.err($$SELECT persist_sink.append('tx_a', '{ro}'::text[], '{v}'::text[], '{1}')$$);
ROLLBACK;
BEGIN;
SELECT shard FROM persist_sink.consensus WHERE shard = 'tx_a' FOR UPDATE;
SELECT pg_temp.err($$SELECT persist_sink.append('tx_a', '{ro}'::text[], '{v}'::text[], '{1}')$$);
ROLLBACK;
SELECT seqno = :a_seqno AS a_seqno_unchanged FROM shards WHERE name = 'tx_a';

-- Cleanup
SELECT drop_shard(name) FROM shards WHERE name LIKE 'tx\_%' ORDER BY name COLLATE "C";
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
