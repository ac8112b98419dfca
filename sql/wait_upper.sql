--
-- wait_upper: returns the shard's upper as soon as it passes a time, or
-- the current upper at the timeout; errors for bad arguments.  (Being
-- woken by another session's commit is tested in test/t/011_operations.pl.)
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

SELECT create_shard('wu');
SELECT compare_and_append('wu', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 3) > 0 AS written;
-- already past: at once
SELECT wait_upper('wu', 2) AS upper;
SELECT wait_upper('wu', -1, '0s') AS upper;
-- not yet: the current upper once the timeout has gone by
SELECT clock_timestamp() AS t0 \gset
SELECT wait_upper('wu', 3, '200ms') AS upper;
SELECT clock_timestamp() - :'t0'::timestamptz >= interval '200ms' AS waited;
-- a transaction's own earlier write counts
BEGIN;
SELECT compare_and_append('wu', '{b}'::text[], '{1}'::text[], '{3}', '{1}', 3, 4) > 0 AS written;
SELECT wait_upper('wu', 3, '10s') AS upper_seen_later;
ROLLBACK;
-- a timeout longer than timestamps reach waits as long as it takes, here
-- until the statement times out (it once overflowed and returned at once)
\set VERBOSITY sqlstate
SET statement_timeout = '300ms';
SELECT wait_upper('wu', 3, '300000 years');
SELECT wait_upper('wu', 3, '178000000 years');
RESET statement_timeout;
\set VERBOSITY default
-- bad arguments
SELECT pg_temp.err($$SELECT persist_sink.wait_upper(NULL, 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.wait_upper('wu', NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.wait_upper('nope', 1, '1s')$$);
SELECT pg_temp.err($$SELECT persist_sink.wait_upper('wu', 1, '-1s')$$);
SELECT pg_temp.err($$SELECT persist_sink.wait_upper('wu', 1, '-178000000 years')$$);
SELECT pg_temp.err($$SELECT persist_sink.wait_upper('a/b', 1)$$);

SELECT drop_shard('wu');
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
