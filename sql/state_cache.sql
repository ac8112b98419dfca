--
-- state_cache: a process keeps the states it read or wrote and takes its
-- copy when the shard's row is still the version it was read or written
-- at.  Every change the copy does not hold is seen: a CaS rolled back (to
-- a savepoint or whole), a shard dropped and created again in one
-- transaction, a row changed by hand.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

-- The keys of a shard, in order, as one string.
CREATE FUNCTION pg_temp.keys(s text) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(encode(key, 'escape'), ',' ORDER BY key), '')
	FROM persist_sink.snapshot(s)
$$;

SELECT create_shard('cache1');
SELECT compare_and_append('cache1', '{a}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
SELECT pg_temp.keys('cache1');

-- a CaS rolled back: the copy this session wrote is not taken
BEGIN;
SELECT compare_and_append('cache1', '{b}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
SELECT pg_temp.keys('cache1'), shard_upper('cache1');
ROLLBACK;
SELECT pg_temp.keys('cache1'), shard_upper('cache1');

-- a CaS rolled back to a savepoint, then another one at the same seqno
BEGIN;
SAVEPOINT s;
SELECT compare_and_append('cache1', '{c}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.keys('cache1'), shard_upper('cache1');
SELECT compare_and_append('cache1', '{d}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
COMMIT;
SELECT pg_temp.keys('cache1'), shard_upper('cache1');

-- a savepoint released keeps its CaS
BEGIN;
SAVEPOINT s;
SELECT compare_and_append('cache1', '{e}'::text[], '{v}'::text[], '{2}', '{1}', 2, 3);
RELEASE SAVEPOINT s;
COMMIT;
SELECT pg_temp.keys('cache1'), shard_upper('cache1');

-- dropped and created again in one transaction, at the same seqno
BEGIN;
SELECT seqno FROM shards WHERE name = 'cache1';
SELECT drop_shard('cache1');
SELECT create_shard('cache1');
SELECT compare_and_append('cache1', '{x}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
SELECT compare_and_append('cache1', '{y}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
SELECT compare_and_append('cache1', '{z}'::text[], '{v}'::text[], '{2}', '{1}', 2, 3);
SELECT seqno FROM shards WHERE name = 'cache1';
SELECT pg_temp.keys('cache1');
COMMIT;
SELECT pg_temp.keys('cache1'), shard_upper('cache1');

-- a row changed by hand at the same seqno (here to another shard's state,
-- which names no shard) is a new row version: read again from the table
SELECT create_shard('cache2');
SELECT compare_and_append('cache2', '{p}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
SELECT compare_and_append('cache2', '{q}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
SELECT compare_and_append('cache2', '{r}'::text[], '{v}'::text[], '{2}', '{1}', 2, 3);
SELECT count(DISTINCT c.seqno) AS one_seqno, count(d.seqno) AS diffs
FROM consensus c LEFT JOIN consensus_diff d USING (shard) WHERE c.shard IN ('cache1', 'cache2');
SELECT state AS c1_state FROM consensus WHERE shard = 'cache1' \gset
SELECT pg_temp.keys('cache1');
UPDATE consensus SET state = (SELECT state FROM consensus WHERE shard = 'cache2') WHERE shard = 'cache1';
SELECT pg_temp.keys('cache1');
UPDATE consensus SET state = :'c1_state' WHERE shard = 'cache1';
SELECT pg_temp.keys('cache1'), shard_upper('cache1');
SELECT * FROM verify('cache1');

SELECT drop_shard('cache2');
SELECT drop_shard('cache1');
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
