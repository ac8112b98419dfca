--
-- overflow: sums of diffs that leave bigint across writes.  Each write is
-- in range; reads sum in 128 bits and fail (22003, naming the key and val)
-- only where a sum they return leaves bigint; compaction keeps such a sum
-- exactly, as several updates; verify() reports where sums leave bigint.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

\i sql/include/st.psql

-- A snapshot as one line of text, for display.
CREATE FUNCTION pg_temp.line(s text, as_of bigint) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s=%s@%s%s%s', encode(key, 'escape'), encode(val, 'escape'),
									  "time", CASE WHEN diff > 0 THEN '+' END, diff), ' '
							   ORDER BY key, val), '')
	FROM persist_sink.snapshot(s, as_of)
$$;

-- A listen as one line of text, for display.
CREATE FUNCTION pg_temp.heard(s text, as_of bigint, until bigint DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s=%s@%s%s%s', encode(key, 'escape'), encode(val, 'escape'),
									  "time", CASE WHEN diff > 0 THEN '+' END, diff), ' '
							   ORDER BY key, val, "time"), '')
	FROM persist_sink.listen(s, as_of, until)
$$;

--
-- two writes of one key, each in range, whose sum is not: times 1 and 2
-- (upper 1 first, so that listen from 0 sees both)
--
SELECT create_shard('o1');
SELECT compare_and_append('o1', '{}'::text[], '{}'::text[], '{}', '{}', 0, 1);
SELECT compare_and_append('o1', '{k,a}'::text[], '{v,b}'::text[], '{1,1}',
	'{9223372036854775807,5}', 1, 2);
SELECT compare_and_append('o1', '{k,z}'::text[], '{v,y}'::text[], '{2,2}', '{1,7}', 2, 3);
-- as of 1 every sum fits; as of 2 that of (k, v) does not
SELECT pg_temp.line('o1', 1);
SELECT * FROM snapshot('o1', 2);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o1')$$);
-- listen sums per time: every window works, with both updates or one
SELECT pg_temp.heard('o1', 0);
SELECT pg_temp.heard('o1', 0, 2);
SELECT pg_temp.heard('o1', 1);
-- verify() reports the (key, val) and the times as of which it fails
SELECT * FROM verify('o1');
-- a compaction that keeps every time changes nothing of that
SELECT compact('o1');
SELECT lower, upper, since, parts, updates FROM batches('o1');
SELECT pg_temp.line('o1', 1);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o1', 2)$$);
SELECT pg_temp.heard('o1', 0);
SELECT * FROM verify('o1');
-- a retraction brings the sum back in range: reads as of 3 work again
SELECT compare_and_append('o1', '{k}'::text[], '{v}'::text[], '{3}', '{-2}', 3, 4);
SELECT pg_temp.line('o1', 3);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o1', 2)$$);
SELECT * FROM verify('o1');
-- since 2: compaction advances times 1 and 2 to 2, where (k, v) sums past
-- bigint.  The merge keeps that sum exactly, as two updates of (k, v, 2)
-- in two parts, and changes no read as of 2 or later.
SELECT downgrade_since('o1', 2);
SELECT compact('o1');
SELECT lower, upper, since, parts, updates FROM batches('o1');
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o1', 2)$$);
SELECT pg_temp.line('o1', 3);
SELECT pg_temp.heard('o1', 2);
SELECT * FROM verify('o1');
-- compacting it again gives the same batch
SELECT pg_temp.st('o1') AS before \gset
SELECT compact('o1');
SELECT pg_temp.st('o1') = :'before' AS unchanged;
-- once since passes the retraction, the sum fits and is one update again
SELECT downgrade_since('o1', 3);
SELECT compact('o1');
SELECT lower, upper, since, parts, updates FROM batches('o1');
SELECT pg_temp.line('o1', 3);
SELECT * FROM verify('o1');

--
-- one key overflows (below bigint, as of 2 and 3), the others read fine
-- before and after; a long key and val are cut short in messages
--
SELECT create_shard('o2');
SELECT compare_and_append('o2', ARRAY['a', repeat('K', 40), 'c'], ARRAY['1', repeat('V', 33), '3'],
	'{0,0,0}', '{1,-9223372036854775807,3}', 0, 1);
SELECT compare_and_append('o2', ARRAY['b', repeat('K', 40)], ARRAY['2', repeat('V', 33)],
	'{1,1}', '{2,-9223372036854775807}', 1, 2);
SELECT compare_and_append('o2', ARRAY['a'], ARRAY['1'], '{2}', '{1}', 2, 3);
SELECT compare_and_append('o2', ARRAY[repeat('K', 40)], ARRAY[repeat('V', 33)],
	'{4}', '{9223372036854775807}', 3, 5);
SELECT pg_temp.line('o2', 0);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o2', 1)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o2', 3)$$);
SELECT pg_temp.line('o2', 4);
SELECT count(*) FROM listen('o2', 0);
SELECT * FROM verify('o2');
-- compaction with since 2: the run of that key at time 2 is split, the
-- other keys consolidate as usual
SELECT downgrade_since('o2', 2);
SELECT compact('o2');
SELECT lower, upper, since, parts, updates FROM batches('o2');
SELECT pg_temp.line('o2', 4);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('o2', 3)$$);
SELECT * FROM verify('o2');

--
-- a sum many times past bigint: compaction writes it as that many pieces
--
SELECT create_shard('o3');
SELECT compare_and_append('o3', '{k}'::text[], '{v}'::text[], ARRAY[t], '{9223372036854775807}', t, t + 1)
FROM generate_series(0, 4) t;
SELECT downgrade_since('o3', 4);
SELECT compact('o3');
SELECT lower, upper, since, parts, updates FROM batches('o3');
SELECT * FROM verify('o3');
SELECT compare_and_append('o3', '{k}'::text[], '{v}'::text[], '{5}', '{-9223372036854775807}', 5, 6);
SELECT compare_and_append('o3', '{k}'::text[], '{v}'::text[], '{6}', '{-9223372036854775807}', 6, 7);
SELECT compare_and_append('o3', '{k}'::text[], '{v}'::text[], '{7}', '{-9223372036854775807}', 7, 8);
SELECT compare_and_append('o3', '{k}'::text[], '{v}'::text[], '{8}', '{-9223372036854775807}', 8, 9);
SELECT pg_temp.line('o3', 8);
SELECT * FROM verify('o3');
SELECT downgrade_since('o3', 8);
SELECT compact('o3');
SELECT lower, upper, since, parts, updates FROM batches('o3');
SELECT pg_temp.line('o3', 8);

-- typed reads name the key too
SELECT create_shard('o4', 'int');
SELECT compare_and_append_rows('o4', ARRAY[7], '{0}', '{9223372036854775807}', 0, 1);
SELECT compare_and_append_rows('o4', ARRAY[7], '{1}', '{9223372036854775807}', 1, 2);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot_rows('o4', NULL::int)$$);

SELECT name, (SELECT count(*) FROM verify(name)) AS problems FROM shards
WHERE name LIKE 'o_' ORDER BY name COLLATE "C";
SELECT drop_shard(name) FROM shards WHERE name LIKE 'o_';

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
