--
-- plans: every statement on the storage tables finds its rows through an
-- index.  A backend keeps its plans for its whole life; a plan made while
-- a table was empty (as here, in a new database) must not scan the table
-- whole once it holds many shards or keys.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

SELECT create_shard('pl_a');
SELECT create_shard('pl_b');

-- keyed appends enough for the backend to keep a generic plan of its
-- key lookup, made while the table holds a few keys
SELECT count(append('pl_a', '{k}'::text[], ARRAY[i::text], '{1}', 'pl-warm-' || i)) AS warmed
FROM generate_series(1, 8) AS i;

-- one transaction, so that its table statistics count only these calls
BEGIN;
SELECT append('pl_a', '{a,b}'::text[], '{x,y}'::text[], '{1,1}', 'pl-1') AS t1 \gset
SELECT append('pl_a', '{a,b}'::text[], '{x,y}'::text[], '{1,1}', 'pl-1') = :t1 AS retry_same_time;
SELECT append('pl_a', '{a,b}'::text[], '{x,y}'::text[], '{1,1}', 'pl-1') = :t1 AS retry_same_time;
SELECT append('pl_b', '{c}'::text[], '{z}'::text[], '{1}') > 0 AS appended;
SELECT shard_upper('pl_b') AS ub \gset
SELECT compare_and_append('pl_b', '{d}'::text[], '{w}'::text[], ARRAY[:ub]::bigint[], '{1}', :ub, :ub + 1) > 0 AS cas;
SELECT count(*) AS rows_a FROM snapshot('pl_a');
SELECT count(*) AS rows_b FROM listen('pl_b', 0);
SELECT shard_upper('pl_a') > :t1 AS upper_past;
SELECT downgrade_since('pl_b', 1);
SELECT create_reader('pl_b', 'pl_r') = 0 AS reader_at_since_minus_1;
SELECT count(*) AS read FROM read_next('pl_b', 'pl_r');
SELECT advance_reader('pl_b', 'pl_r', shard_upper('pl_b') - 1);
SELECT count(*) AS readers FROM readers WHERE shard LIKE 'pl\_%';
SELECT drop_reader('pl_b', 'pl_r');
SELECT count(*) AS shards FROM shards WHERE name LIKE 'pl\_%';
SELECT relname, seq_scan
FROM pg_stat_xact_user_tables
WHERE schemaname = 'persist_sink'
ORDER BY relname;
COMMIT;

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
