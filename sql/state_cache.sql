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

-- a scan borrows this session's copy of the state instead of copying it:
-- it reads on from the state it started with while the session appends
-- to the shard (a new copy replaces the lent one) and reads eight other
-- shards (which push both out of the cache); the next scan sees the
-- append.  A borrowing cursor rolled back with the shard dropped under
-- it frees the copy too.
SELECT create_shard('cache3');
SELECT compare_and_append('cache3', '{a,b,c,d}'::text[], '{v,v,v,v}'::text[], '{0,0,0,0}', '{1,1,1,1}', 0, 1);
CREATE FOREIGN TABLE cache3 (key bytea, val bytea) SERVER persist_sink OPTIONS (shard 'cache3');
SELECT count(*) FROM snapshot('cache3');
BEGIN;
DECLARE c CURSOR FOR SELECT encode(key, 'escape') AS key FROM cache3;
FETCH 1 FROM c;
SELECT compare_and_append('cache3', '{e}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
SELECT count(create_shard('cache_fill' || i)) AS created FROM generate_series(1, 8) i;
SELECT count(*) AS updates FROM generate_series(1, 8) i, LATERAL snapshot('cache_fill' || i);
FETCH ALL FROM c;
CLOSE c;
COMMIT;
SELECT string_agg(encode(key, 'escape'), ',' ORDER BY key) AS keys FROM cache3;
BEGIN;
DECLARE c CURSOR FOR SELECT encode(key, 'escape') AS key FROM cache3;
FETCH 1 FROM c;
SELECT drop_shard('cache3');
FETCH ALL FROM c;
ROLLBACK;
SELECT string_agg(encode(key, 'escape'), ',' ORDER BY key) AS keys FROM cache3;
DROP FOREIGN TABLE cache3;
SELECT count(drop_shard(name)) AS dropped FROM shards WHERE name LIKE 'cache_fill%' OR name = 'cache3';

SELECT drop_shard('cache2');
SELECT drop_shard('cache1');
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
