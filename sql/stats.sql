--
-- stats: the counters of the stats view are kept per (database, shard).
-- Shards of the same name in two databases count apart and each database
-- sees only its own; stats_reset() resets only the current database;
-- drop_shard, DROP EXTENSION (once it commits) and DROP DATABASE remove
-- the counters; compact() counts in compactions and compacted_updates once
-- it commits.  stats_info() counts the entries of every database, so only
-- its changes are printed.  The cap, persist_sink.stats_max, is tested in
-- test/t/010_stats_cap.pl.  The sink's workers serve only this database:
-- the second one is written with compare_and_append.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

-- The current database's counters, a line per shard (the byte counts vary
-- with zstd: only whether there are any); a psql variable, so that it
-- survives \c.
\set counters 'SELECT shard, format(''appends=%s updates=%s parts=%s blob_puts=%s inline=%s state=%s cas=%s/%s compactions=%s compacted=%s'', appends, updates, parts_written, blob_puts, inline_batches, state_bytes > 0, cas_attempts, cas_mismatches, compactions, compacted_updates) AS counters FROM persist_sink.stats'

SELECT stats_reset();
SELECT count(*) AS rows FROM stats;
SELECT entries AS e0 FROM stats_info() \gset

--
-- a shard named "same" in this database
--
SELECT create_shard('same');
SELECT compare_and_append('same', '{a,b,c}'::text[], '{x,y,z}'::text[], '{0,0,1}', '{1,1,1}', 0, 2);
SELECT compare_and_append('same', '{d}'::text[], '{w}'::text[], '{2}', '{1}', 2, 3);
SELECT create_shard('only_here');
SELECT compare_and_append('only_here', '{a}'::text[], '{x}'::text[], '{0}', '{1}', 0, 1);
:counters;
SELECT entries - :e0 AS new_entries FROM stats_info();

--
-- and one of the same name in a second database, with counters of its own
--
CREATE DATABASE regress_ps_stats;
\c regress_ps_stats
SET client_min_messages = warning;
CREATE EXTENSION persist_sink;
RESET client_min_messages;
SET search_path = persist_sink, public;
-- the first database's shards are not seen here
SELECT count(*) AS rows FROM stats;
SELECT create_shard('same');
SELECT compare_and_append('same', '{k}'::text[], '{v}'::text[], '{0}', '{5}', 0, 1);
-- an upper mismatch counts in this database's "same" only
SELECT compare_and_append('same', '{k}'::text[], '{v}'::text[], '{0}', '{5}', 0, 1);
SELECT create_shard('there');
SELECT compare_and_append('there', '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
:counters;
SELECT entries - :e0 AS new_entries FROM stats_info();

-- back in the first database: its "same" is unchanged
\c contrib_regression
SET search_path = persist_sink, public;
:counters;

--
-- stats_reset() resets only the current database
--
\c regress_ps_stats
SET search_path = persist_sink, public;
SELECT stats_reset();
SELECT count(*) AS rows FROM stats;
SELECT entries - :e0 AS new_entries FROM stats_info();
\c contrib_regression
SET search_path = persist_sink, public;
:counters;

--
-- drop_shard removes the shard's row, in its database only
--
\c regress_ps_stats
SET search_path = persist_sink, public;
SELECT compare_and_append('same', '{k}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
:counters;
SELECT drop_shard('same');
:counters;
\c contrib_regression
SET search_path = persist_sink, public;
:counters;
SELECT drop_shard('only_here');
:counters;
SELECT entries - :e0 AS new_entries FROM stats_info();

--
-- DROP EXTENSION forgets the database's counters once it commits
--
\c regress_ps_stats
SET search_path = persist_sink, public;
SELECT compare_and_append('there', '{k}'::text[], '{v}'::text[], '{1}', '{1}', 1, 2);
-- rolled back, or rolled back to a savepoint: the counters stay
BEGIN;
DROP EXTENSION persist_sink;
ROLLBACK;
BEGIN;
SAVEPOINT s;
DROP EXTENSION persist_sink;
ROLLBACK TO SAVEPOINT s;
COMMIT;
:counters;
SELECT entries - :e0 AS new_entries FROM stats_info();
-- counted and dropped in one transaction: nothing stays
BEGIN;
SELECT compare_and_append('there', '{k}'::text[], '{v}'::text[], '{2}', '{1}', 2, 3);
DROP EXTENSION persist_sink;
COMMIT;
-- a new CREATE EXTENSION starts with no rows, and counts again
CREATE EXTENSION persist_sink;
SELECT count(*) AS rows FROM stats;
SELECT entries - :e0 AS new_entries FROM stats_info();
SELECT create_shard('there');
SELECT compare_and_append('there', '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1);
:counters;
SELECT count(*) AS db2_rows FROM stats \gset
-- the first database's counters were not touched
\c contrib_regression
SET search_path = persist_sink, public;
:counters;

--
-- DROP DATABASE forgets that database's counters
--
SELECT entries AS e1 FROM stats_info() \gset
-- (FORCE: the session that just left it may not have exited yet)
DROP DATABASE regress_ps_stats WITH (FORCE);
SELECT :e1 - entries AS forgotten, :db2_rows AS db2_rows FROM stats_info();
SELECT entries - :e0 AS new_entries FROM stats_info();

--
-- compactions and compacted_updates: a merge counts when it commits
--
SELECT create_shard('comp');
SELECT compare_and_append('comp', '{a,b}'::text[], '{x,x}'::text[], '{0,0}', '{1,1}', 0, 1);
SELECT compare_and_append('comp', '{c,d}'::text[], '{x,x}'::text[], '{1,1}', '{1,1}', 1, 2);
SELECT compare_and_append('comp', '{e}'::text[], '{x}'::text[], '{2}', '{1}', 2, 3);
SELECT compact('comp');
:counters WHERE shard = 'comp';
SELECT compare_and_append('comp', '{f}'::text[], '{x}'::text[], '{3}', '{1}', 3, 4);
-- rolled back: not counted
BEGIN;
SELECT compact('comp');
ROLLBACK;
:counters WHERE shard = 'comp';
-- the merged batch (5 updates) and the new one (1)
SELECT compact('comp');
:counters WHERE shard = 'comp';
-- an already compact shard: no merge
SELECT compact('comp');
SELECT compactions, compacted_updates FROM stats WHERE shard = 'comp';
SELECT count(*) AS batches FROM batches('comp');

--
-- DROP EXTENSION and CREATE EXTENSION here: no rows
--
DROP EXTENSION persist_sink;
CREATE EXTENSION persist_sink;
SELECT count(*) AS rows FROM stats;
SELECT entries - :e0 AS new_entries FROM stats_info();
SELECT stats_max = current_setting('persist_sink.stats_max')::int AS max_is_setting,
	   uncounted AS uncounted
FROM stats_info();

-- no background compaction failed: compaction_failures has no row (TAP
-- 028 makes one fail)
SELECT count(*) AS failed_shards FROM compaction_failures;

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
