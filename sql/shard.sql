--
-- shard: creating, naming, dropping and inspecting shards; since; the
-- shards, batches and stats views; privileges.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

-- A shard's state as one comparable line.
CREATE FUNCTION pg_temp.st(s text) RETURNS text LANGUAGE sql AS $$
	SELECT format('seqno=%s upper=%s since=%s batches=%s parts=%s updates=%s',
				  seqno, upper, since, batches, parts, updates)
	FROM persist_sink.shards WHERE name = s
$$;

-- Blob rows of a shard.
CREATE FUNCTION pg_temp.blobs(s text) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, s || '/')
$$;

-- The extension's objects
SELECT rolname, rolcanlogin FROM pg_roles
WHERE rolname IN ('persist_sink_writer', 'persist_sink_reader') ORDER BY 1;
SELECT count(*) AS blob_rows FROM blob;
SELECT count(*) AS consensus_rows FROM consensus;

--
-- create_shard
--
SELECT create_shard('s1');
SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates, debt_batches, runs,
	owner = current_user::regrole AS mine, privileges
FROM shards WHERE name = 's1';
SELECT shard_upper('s1'), shard_since('s1');
SELECT * FROM batches('s1');
SELECT count(*) AS consensus_rows FROM consensus WHERE shard = 's1';

-- a duplicate is refused (42710) and changes nothing
SELECT pg_temp.st('s1') AS before \gset
SELECT create_shard('s1');
SELECT pg_temp.err($$SELECT persist_sink.create_shard('s1')$$);
SELECT pg_temp.st('s1') = :'before' AS unchanged;

-- a duplicate in the same transaction, too
BEGIN;
SELECT create_shard('s_twice');
SELECT pg_temp.err($$SELECT persist_sink.create_shard('s_twice')$$);
ROLLBACK;
SELECT count(*) FROM shards WHERE name = 's_twice';

-- shard names: 1 to 200 bytes, no '/', no control characters
SELECT pg_temp.err($$SELECT persist_sink.create_shard('')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_shard('a/b')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_shard('/')$$);
SELECT replace(pg_temp.err($$SELECT persist_sink.create_shard(E'tab\there')$$), E'\t', '<TAB>');
SELECT replace(pg_temp.err($$SELECT persist_sink.create_shard(E'nl\n')$$), E'\n', '<LF>');
SELECT regexp_replace(pg_temp.err(format('SELECT persist_sink.create_shard(%L)', repeat('x', 201))),
					  'x{201}', '<201 x>');
SELECT regexp_replace(pg_temp.err(format('SELECT persist_sink.create_shard(%L)', repeat('é', 101))),
					  '(é){101}', '<101 e-acute>');
SELECT pg_temp.err($$SELECT persist_sink.create_shard(NULL)$$);
SELECT count(*) AS consensus_rows FROM consensus WHERE shard NOT IN ('s1');

-- the longest names are fine, in bytes
SELECT create_shard(repeat('x', 200));
SELECT create_shard(repeat('é', 100));
SELECT name = repeat('x', 200) AS x, octet_length(name), upper, since FROM shards
WHERE name IN (repeat('x', 200), repeat('é', 100)) ORDER BY 1;
SELECT drop_shard(repeat('x', 200));
SELECT drop_shard(repeat('é', 100));

-- names are case sensitive, and may hold spaces, dots and quotes
SELECT create_shard('S1');
SELECT create_shard('with space.and "quotes"');
SELECT name, seqno, upper FROM shards ORDER BY name COLLATE "C";
SELECT drop_shard('S1');
SELECT drop_shard('with space.and "quotes"');

-- a row type is accepted
SELECT create_shard('s_typed', 'int4');
SELECT name, seqno, upper, since FROM shards WHERE name = 's_typed';
SELECT drop_shard('s_typed');

--
-- unknown shards: 42704 from every function
--
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('nope')$$);
SELECT pg_temp.err($$SELECT persist_sink.shard_since('nope')$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('nope', 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.batches('nope')$$);
SELECT pg_temp.err($$SELECT persist_sink.drop_shard('nope')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('nope', '{a}'::text[], '{b}'::text[], '{0}', '{1}', 0, 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('nope', '{}'::bytea[], '{}'::bytea[], '{}', '{}', 0, 1)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('nope')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('nope', 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('nope', 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.compact('nope')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.verify('nope')$$);
SELECT count(*) AS consensus_rows FROM consensus WHERE shard = 'nope';

-- invalid names are refused before the lookup
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('a/b')$$);
SELECT pg_temp.err($$SELECT persist_sink.drop_shard('')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('x/y')$$);

-- NULL shard: 22004 from every function
SELECT pg_temp.err($$SELECT persist_sink.drop_shard(NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.shard_upper(NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.shard_since(NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since(NULL, 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.batches(NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append(NULL, '{a}'::text[], '{b}'::text[], '{0}', '{1}', 0, 1)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot(NULL)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen(NULL, 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.compact(NULL)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.verify(NULL)$$);

--
-- upper, since, downgrade_since, batches
--
SELECT compare_and_append('s1', '{a,b}'::text[], '{1,2}'::text[], '{0,1}', '{1,1}', 0, 2);
SELECT compare_and_append('s1', '{c}'::text[], '{3}'::text[], '{4}', '{1}', 2, 5);
SELECT compare_and_append('s1', '{a}'::text[], '{1}'::text[], '{9}', '{-1}', 5, 10);
SELECT shard_upper('s1'), shard_since('s1');
SELECT name, seqno, upper, since, batches, parts, updates, inline_bytes > 0 AS has_inline,
	   blob_bytes FROM shards WHERE name = 's1';
SELECT lower, upper, since, parts, updates, encoded_bytes > 0 AS has_bytes, inline
FROM batches('s1');

-- since moves forward
SELECT downgrade_since('s1', 3);
SELECT shard_upper('s1'), shard_since('s1');
SELECT pg_temp.st('s1') AS before \gset
-- the current since again is a no-op: no new seqno
SELECT downgrade_since('s1', 3);
SELECT pg_temp.st('s1') = :'before' AS unchanged;
-- since never regresses (22023)
SELECT downgrade_since('s1', 2);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', -1)$$);
SELECT pg_temp.st('s1') = :'before' AS unchanged;
-- since may not pass upper (22023)
SELECT downgrade_since('s1', 11);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', 11)$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', 9223372036854775807)$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('s1', NULL)$$);
SELECT pg_temp.st('s1') = :'before' AS unchanged;
-- downgrade_since does not rewrite batches
SELECT lower, upper, since, parts, updates, inline FROM batches('s1');
-- since may reach upper: then nothing is readable until upper moves on
SELECT downgrade_since('s1', 10);
SELECT shard_upper('s1'), shard_since('s1');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('s1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('s1', 10)$$);
SELECT compare_and_append('s1', '{d}'::text[], '{4}'::text[], '{10}', '{1}', 10, 11);
SELECT convert_from(key, 'UTF8') AS key, convert_from(val, 'UTF8') AS val, "time", diff
FROM snapshot('s1') ORDER BY 1, 2;
-- a rolled back since change is undone
BEGIN;
SELECT downgrade_since('s1', 11);
SELECT shard_since('s1');
ROLLBACK;
SELECT shard_since('s1');

--
-- drop_shard removes the state and the blob rows, and only the shard's
--
SET persist_sink.inline_max_bytes = 0;
SELECT create_shard(s) FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT s, compare_and_append(s, ARRAY['k'::bytea], ARRAY['v'::bytea], '{0}', '{1}', 0, 1)
FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT s, compare_and_append(s, ARRAY['k2'::bytea], ARRAY['v'::bytea], '{1}', '{1}', 1, 2)
FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
RESET persist_sink.inline_max_bytes;
SELECT s, pg_temp.blobs(s) AS blob_rows, (SELECT parts FROM shards WHERE name = s)
FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT s, (SELECT count(*) FROM verify(s)) AS problems
FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
-- a rolled back drop leaves everything in place
BEGIN;
SELECT drop_shard('pre');
SELECT count(*) FROM shards WHERE name = 'pre';
ROLLBACK;
SELECT name, upper FROM shards WHERE name = 'pre';
SELECT pg_temp.blobs('pre') AS blob_rows;
SELECT drop_shard('pre');
SELECT count(*) AS consensus_rows FROM consensus WHERE shard = 'pre';
SELECT count(*) AS shards_rows FROM shards WHERE name = 'pre';
SELECT pg_temp.blobs('pre') AS blob_rows;
SELECT s, pg_temp.blobs(s) AS blob_rows FROM unnest(ARRAY['pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT s, (SELECT count(*) FROM verify(s)) AS problems
FROM unnest(ARRAY['pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('pre')$$);
SELECT pg_temp.err($$SELECT persist_sink.drop_shard('pre')$$);
-- a dropped shard can be created again, empty
SELECT create_shard('pre');
SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates, debt_batches, runs,
	owner = current_user::regrole AS mine, privileges
FROM shards WHERE name = 'pre';
SELECT count(*) FROM snapshot('pre.x');
SELECT drop_shard(s) FROM unnest(ARRAY['pre', 'pre.x', 'pre0', 'pre-', 'pr', 'prf']) s;
SELECT count(DISTINCT key) AS blob_rows FROM blob WHERE key ~ '^pr';

--
-- stats: counted when the transaction commits
--
SELECT stats_reset();
SELECT count(*) FROM stats;
SELECT create_shard('s_stats');
SELECT compare_and_append('s_stats', '{a,b,c}'::text[], '{x,y,z}'::text[], '{0,0,1}', '{1,1,1}', 0, 2);
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('s_stats', '{d}'::text[], '{w}'::text[], '{2}', '{1}', 2, 3);
RESET persist_sink.inline_max_bytes;
BEGIN;
SELECT compare_and_append('s_stats', '{e}'::text[], '{v}'::text[], '{3}', '{1}', 3, 4);
ROLLBACK;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('s_stats', '{e}'::text[], '{v}'::text[], '{0}', '{1}', 0, 4)$$);
SELECT shard, appends, updates, shared_writes, own_writes, parts_written, blob_puts,
	   blob_bytes > 0 AS has_blob_bytes, inline_batches, state_bytes > 0 AS has_state_bytes,
	   cas_attempts, cas_mismatches
FROM stats WHERE shard = 's_stats';
SELECT (SELECT blob_bytes FROM stats WHERE shard = 's_stats') =
	   (SELECT sum(octet_length(data)) FROM blob WHERE key LIKE 's\_stats/%') AS blob_bytes_match;
SELECT stats_reset();
SELECT count(*) FROM stats WHERE shard = 's_stats';
SELECT compare_and_append('s_stats', '{e}'::text[], '{v}'::text[], '{3}', '{1}', 3, 4);
SELECT shard, appends, updates, parts_written, cas_attempts, cas_mismatches
FROM stats WHERE shard = 's_stats';
SELECT drop_shard('s_stats');
SELECT count(*) FROM stats WHERE shard = 's_stats';

--
-- privileges: PUBLIC may do nothing; readers read; writers write
--
CREATE ROLE regress_ps_nobody;
CREATE ROLE regress_ps_reader IN ROLE persist_sink_reader;
CREATE ROLE regress_ps_writer IN ROLE persist_sink_writer;
-- (s1's owner lets every reader read it: see shard_privileges for owners and grants)
SELECT grant_shard('s1', 'persist_sink_reader', 'read');
SET ROLE regress_ps_nobody;
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('s1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('s1')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_shard('s_priv')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.shards$$);
RESET ROLE;
SET ROLE regress_ps_reader;
SELECT shard_upper('s1');
SELECT count(*) FROM snapshot('s1');
SELECT count(*) FROM listen('s1', 10);
SELECT name, upper FROM shards WHERE name = 's1';
SELECT count(*) FROM batches('s1');
SELECT count(*) FROM verify('s1');
SELECT pg_temp.err($$SELECT persist_sink.create_shard('s_priv')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('s1', '{a}'::text[], '{b}'::text[], '{11}', '{1}', 11, 12)$$);
SELECT pg_temp.err($$SELECT persist_sink.compact('s1')$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.blob$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.consensus$$);
RESET ROLE;
SET ROLE regress_ps_writer;
SELECT create_shard('s_priv');
SELECT compare_and_append('s_priv', '{a}'::text[], '{b}'::text[], '{0}', '{1}', 0, 1);
SELECT shard_upper('s_priv');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('s_priv')$$);
SELECT pg_temp.err($$DELETE FROM persist_sink.consensus$$);
SELECT pg_temp.err($$INSERT INTO persist_sink.blob VALUES ('s_priv/x', 0, '\x00')$$);
SELECT drop_shard('s_priv');
RESET ROLE;
DROP ROLE regress_ps_nobody, regress_ps_reader, regress_ps_writer;

--
-- healthy shards verify clean
--
SELECT name, (SELECT count(*) FROM verify(name)) AS problems FROM shards ORDER BY name COLLATE "C";

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
