--
-- hostile: every function of the SQL contract with bad arguments.  A table of
-- cases is run one by one; each must raise a clean error with a proper
-- SQLSTATE (printed with its message and DETAIL) and leave every shard and
-- the blob table unchanged.  A second part checks inputs that are awkward but
-- valid: empty and huge arrays, zero and extreme diffs, names at the length
-- limit or full of SQL and format metacharacters, shards whose names are
-- prefixes of each other, and reads at the edges of [since, upper).
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

-- Everything a call could change: every shard's state line and the blob rows.
CREATE FUNCTION pg_temp.world() RETURNS text LANGUAGE sql AS $$
	SELECT md5(coalesce(string_agg(format('%s %s %s %s %s %s %s', name, seqno, upper, since,
										  batches, parts, updates), ';' ORDER BY name COLLATE "C"), ''))
		|| ' ' || (SELECT count(*) FROM persist_sink.blob)
		|| ' ' || (SELECT md5(coalesce(string_agg(key, ',' ORDER BY key), '')) FROM persist_sink.blob)
	FROM persist_sink.shards
$$;

\i sql/include/st.psql

\i sql/include/err.psql

--
-- The shards the cases aim at:
--   h        upper 20, since 5: an inline batch [0, 10) and a blob batch [10, 20)
--   empty    a new shard: upper 0, since 0
--   gone     created, written and dropped
--   top      upper at bigint's maximum: no later time exists
--   typed    a shard of rows of a composite type, holding one row
--
SELECT create_shard('h');
SELECT compare_and_append('h', ARRAY['k1', 'k2', 'k3'], ARRAY['a', 'b', 'c'],
						  '{0,3,9}', '{1,1,2}', 0, 10);
SELECT compare_and_append('h',
	ARRAY(SELECT 'key' || i FROM generate_series(1, 2000) i),
	ARRAY(SELECT md5(i::text) FROM generate_series(1, 2000) i),
	ARRAY(SELECT 10 + i % 10 FROM generate_series(1, 2000) i),
	array_fill(1::bigint, ARRAY[2000]), 10, 20);
SELECT downgrade_since('h', 5);
SELECT create_shard('empty');
SELECT create_shard('gone');
SELECT compare_and_append('gone', '{x}'::text[], '{y}'::text[], '{0}', '{1}', 0, 1);
SELECT drop_shard('gone');
SELECT create_shard('top');
SELECT compare_and_append('top', '{x}'::text[], '{y}'::text[], '{9223372036854775806}', '{1}',
						  0, 9223372036854775807);
CREATE TYPE public.hostile_pair AS (a int, b text);
SELECT create_shard('typed', 'hostile_pair');
SELECT compare_and_append_rows('typed', ARRAY[(1, 'one')::hostile_pair], '{0}', NULL, 0, 1);
SELECT name, seqno, upper, since, batches, parts, updates FROM shards
WHERE name IN ('empty', 'h', 'top', 'typed') ORDER BY name COLLATE "C";
SELECT lower, upper, since, parts, updates, inline FROM batches('h');

--
-- The cases.  expect is the SQLSTATE the contract asks for, or, where the
-- contract does not pin one, a regular expression of acceptable ones; such a
-- case prints only whether its error matched, since its message is not
-- pinned either.
--
CREATE TEMP TABLE cases (id serial, fn text, what text, q text, expect text, quiet boolean DEFAULT false);
INSERT INTO cases (fn, what, q, expect) VALUES
-- create_shard
('create_shard', 'NULL name', $$SELECT create_shard(NULL)$$, '22004'),
('create_shard', 'NULL name and type', $$SELECT create_shard(NULL, NULL)$$, '22004'),
('create_shard', 'empty name', $$SELECT create_shard('')$$, '42602'),
('create_shard', '201 bytes', $$SELECT create_shard(repeat('x', 201))$$, '42602'),
('create_shard', '202 bytes in 101 characters', $$SELECT create_shard(repeat('é', 101))$$, '42602'),
('create_shard', 'slash', $$SELECT create_shard('a/b')$$, '42602'),
('create_shard', 'slash alone', $$SELECT create_shard('/')$$, '42602'),
('create_shard', 'newline', $$SELECT create_shard(E'a\nb')$$, '42602'),
('create_shard', 'tab', $$SELECT create_shard(E'\t')$$, '42602'),
('create_shard', 'DEL', $$SELECT create_shard('a' || chr(127))$$, '42602'),
('create_shard', 'C1 control (NEL)', $$SELECT create_shard('a' || chr(133))$$, '42602'),
('create_shard', 'escape', $$SELECT create_shard(chr(27) || '[31m')$$, '42602'),
('create_shard', 'duplicate', $$SELECT create_shard('h')$$, '42710'),
('create_shard', 'duplicate, other row type', $$SELECT create_shard('h', 'int4')$$, '42710'),
('create_shard', 'unknown row type', $$SELECT create_shard('new', 'no_such_type')$$, '42704'),
-- drop_shard
('drop_shard', 'NULL', $$SELECT drop_shard(NULL)$$, '22004'),
('drop_shard', 'empty name', $$SELECT drop_shard('')$$, '42602'),
('drop_shard', 'slash', $$SELECT drop_shard('h/')$$, '42602'),
('drop_shard', 'unknown', $$SELECT drop_shard('nope')$$, '42704'),
('drop_shard', 'dropped', $$SELECT drop_shard('gone')$$, '42704'),
('drop_shard', 'other case', $$SELECT drop_shard('H')$$, '42704'),
('drop_shard', 'trailing space', $$SELECT drop_shard('h ')$$, '42704'),
-- shard_upper, shard_since
('shard_upper', 'NULL', $$SELECT shard_upper(NULL)$$, '22004'),
('shard_upper', 'unknown', $$SELECT shard_upper('nope')$$, '42704'),
('shard_upper', 'dropped', $$SELECT shard_upper('gone')$$, '42704'),
('shard_upper', 'invalid name', $$SELECT shard_upper('a/b')$$, '42602'),
('shard_since', 'NULL', $$SELECT shard_since(NULL)$$, '22004'),
('shard_since', 'unknown', $$SELECT shard_since('nope')$$, '42704'),
('shard_since', 'invalid name', $$SELECT shard_since('')$$, '42602'),
-- downgrade_since (h: since 5, upper 20)
('downgrade_since', 'NULL shard', $$SELECT downgrade_since(NULL, 6)$$, '22004'),
('downgrade_since', 'NULL since', $$SELECT downgrade_since('h', NULL)$$, '22004'),
('downgrade_since', 'back by one', $$SELECT downgrade_since('h', 4)$$, '22023'),
('downgrade_since', 'back to 0', $$SELECT downgrade_since('h', 0)$$, '22023'),
('downgrade_since', '-1', $$SELECT downgrade_since('h', -1)$$, '22023'),
('downgrade_since', 'bigint min', $$SELECT downgrade_since('h', -9223372036854775808)$$, '22023'),
('downgrade_since', 'upper + 1', $$SELECT downgrade_since('h', 21)$$, '22023'),
('downgrade_since', 'bigint max', $$SELECT downgrade_since('h', 9223372036854775807)$$, '22023'),
('downgrade_since', 'new shard, to 1', $$SELECT downgrade_since('empty', 1)$$, '22023'),
('downgrade_since', 'unknown', $$SELECT downgrade_since('nope', 1)$$, '42704'),
('downgrade_since', 'dropped', $$SELECT downgrade_since('gone', 0)$$, '42704'),
('downgrade_since', 'invalid name', $$SELECT downgrade_since(repeat('x', 201), 0)$$, '42602'),
('downgrade_since', 'unchanged since: no-op', $$SELECT downgrade_since('h', 5)$$, 'ok'),
-- batches
('batches', 'NULL', $$SELECT * FROM batches(NULL)$$, '22004'),
('batches', 'unknown', $$SELECT * FROM batches('nope')$$, '42704'),
('batches', 'invalid name', $$SELECT * FROM batches(E'\n')$$, '42602'),
-- compare_and_append (h: upper 20)
('compare_and_append', 'NULL shard', $$SELECT compare_and_append(NULL, '{a}'::text[], '{a}'::text[], '{20}', '{1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL keys', $$SELECT compare_and_append('h', NULL::text[], '{a}'::text[], '{20}', '{1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL vals', $$SELECT compare_and_append('h', '{a}'::text[], NULL::text[], '{20}', '{1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL times', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], NULL, '{1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL diffs', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{20}', NULL, 20, 21)$$, '22004'),
('compare_and_append', 'NULL expected_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{20}', '{1}', NULL, 21)$$, '22004'),
('compare_and_append', 'NULL new_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{20}', '{1}', 20, NULL)$$, '22004'),
('compare_and_append', 'every argument NULL', $$SELECT compare_and_append(NULL, NULL::bytea[], NULL::bytea[], NULL, NULL, NULL, NULL)$$, '22004'),
('compare_and_append', 'NULL key element', $$SELECT compare_and_append('h', '{a,NULL}'::text[], '{a,b}'::text[], '{20,20}', '{1,1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL val element', $$SELECT compare_and_append('h', '{a,b}'::bytea[], ARRAY['\x00'::bytea, NULL], '{20,20}', '{1,1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL time element', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a,b}'::text[], '{20,NULL}', '{1,1}', 20, 21)$$, '22004'),
('compare_and_append', 'NULL diff element', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a,b}'::text[], '{20,20}', '{NULL,1}', 20, 21)$$, '22004'),
('compare_and_append', 'fewer vals', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a}'::text[], '{20,20}', '{1,1}', 20, 21)$$, '2202E'),
('compare_and_append', 'more vals', $$SELECT compare_and_append('h', '{a}'::text[], '{a,b}'::text[], '{20}', '{1}', 20, 21)$$, '2202E'),
('compare_and_append', 'fewer times', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a,b}'::text[], '{20}', '{1,1}', 20, 21)$$, '2202E'),
('compare_and_append', 'more diffs', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{20}', '{1,1}', 20, 21)$$, '2202E'),
('compare_and_append', 'empty keys, one val', $$SELECT compare_and_append('h', '{}'::text[], '{a}'::text[], '{20}', '{1}', 20, 21)$$, '2202E'),
('compare_and_append', 'two-dimensional keys', $$SELECT compare_and_append('h', '{{a,b},{c,d}}'::text[], '{a,b,c,d}'::text[], '{20,20,20,20}', '{1,1,1,1}', 20, 21)$$, '2202E'),
('compare_and_append', 'two-dimensional diffs', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a,b}'::text[], '{20,20}', '{{1},{1}}', 20, 21)$$, '2202E'),
('compare_and_append', 'time below expected_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{19}', '{1}', 20, 21)$$, '22023'),
('compare_and_append', 'time at new_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{21}', '{1}', 20, 21)$$, '22023'),
('compare_and_append', 'time bigint max', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{9223372036854775807}', '{1}', 20, 21)$$, '22023'),
('compare_and_append', 'time bigint min', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{-9223372036854775808}', '{1}', 20, 21)$$, '22023'),
('compare_and_append', 'one good time, one bad', $$SELECT compare_and_append('h', '{a,b}'::text[], '{a,b}'::text[], '{20,25}', '{1,1}', 20, 25)$$, '22023'),
('compare_and_append', 'new_upper = expected_upper', $$SELECT compare_and_append('h', '{}'::text[], '{}'::text[], '{}', '{}', 20, 20)$$, '22023'),
('compare_and_append', 'new_upper < expected_upper', $$SELECT compare_and_append('h', '{}'::text[], '{}'::text[], '{}', '{}', 20, 19)$$, '22023'),
('compare_and_append', 'expected_upper bigint max', $$SELECT compare_and_append('h', '{}'::text[], '{}'::text[], '{}', '{}', 9223372036854775807, 9223372036854775807)$$, '22023'),
('compare_and_append', 'stale expected_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{19}', '{1}', 19, 20)$$, 'PS001'),
('compare_and_append', 'future expected_upper', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{21}', '{1}', 21, 22)$$, 'PS001'),
('compare_and_append', 'expected_upper 0', $$SELECT compare_and_append('h', '{a}'::text[], '{a}'::text[], '{0}', '{1}', 0, 1)$$, 'PS001'),
('compare_and_append', 'expected_upper -1', $$SELECT compare_and_append('h', '{}'::text[], '{}'::text[], '{}', '{}', -1, 0)$$, 'PS001'),
('compare_and_append', 'expected_upper bigint min', $$SELECT compare_and_append('h', '{}'::text[], '{}'::text[], '{}', '{}', -9223372036854775808, 20)$$, 'PS001'),
('compare_and_append', 'new shard, expected_upper 1', $$SELECT compare_and_append('empty', '{}'::text[], '{}'::text[], '{}', '{}', 1, 2)$$, 'PS001'),
('compare_and_append', 'same update, diffs overflow', $$SELECT compare_and_append('h', '{a,a}'::text[], '{v,v}'::text[], '{20,20}', '{9223372036854775807,1}', 20, 21)$$, '22003'),
('compare_and_append', 'same update, diffs underflow', $$SELECT compare_and_append('h', '{a,a,a}'::text[], '{v,v,v}'::text[], '{20,20,20}', '{-9223372036854775808,-1,0}', 20, 21)$$, '22003'),
('compare_and_append', 'diffs one longer than keys', $$SELECT compare_and_append('h', ARRAY(SELECT 'a' FROM generate_series(1, 1000)), ARRAY(SELECT 'v' FROM generate_series(1, 1000)), array_fill(20::bigint, ARRAY[1000]), array_fill(9223372036854775::bigint, ARRAY[1000]) || 9223372036854775807::bigint, 20, 21)$$, '2202E'),
('compare_and_append', 'overflow after 1000 updates', $$SELECT compare_and_append('h', ARRAY(SELECT 'a' FROM generate_series(1, 1001)), ARRAY(SELECT 'v' FROM generate_series(1, 1001)), array_fill(20::bigint, ARRAY[1001]), array_fill(9223372036854775::bigint, ARRAY[1000]) || 9223372036854775807::bigint, 20, 21)$$, '22003'),
('compare_and_append', 'unknown shard', $$SELECT compare_and_append('nope', '{a}'::text[], '{a}'::text[], '{0}', '{1}', 0, 1)$$, '42704'),
('compare_and_append', 'dropped shard', $$SELECT compare_and_append('gone', '{a}'::text[], '{a}'::text[], '{1}', '{1}', 1, 2)$$, '42704'),
('compare_and_append', 'invalid name', $$SELECT compare_and_append('a/b', '{a}'::text[], '{a}'::text[], '{0}', '{1}', 0, 1)$$, '42602'),
('compare_and_append', 'bytea keys, text vals', $$SELECT compare_and_append('h', '{a}'::bytea[], '{a}'::text[], '{20}', '{1}', 20, 21)$$, '42883'),
('compare_and_append', 'int keys', $$SELECT compare_and_append('h', '{1}'::int[], '{1}'::int[], '{20}', '{1}', 20, 21)$$, '42883'),
-- append (h)
('append', 'NULL shard', $$SELECT append(NULL, '{a}'::text[], '{a}'::text[], '{1}')$$, '22004'),
('append', 'NULL keys', $$SELECT append('h', NULL::text[], '{a}'::text[], '{1}')$$, '22004'),
('append', 'NULL vals', $$SELECT append('h', '{a}'::bytea[], NULL::bytea[], '{1}')$$, '22004'),
('append', 'NULL diffs', $$SELECT append('h', '{a}'::text[], '{a}'::text[], NULL)$$, '22004'),
('append', 'NULL key element', $$SELECT append('h', '{NULL}'::text[], '{a}'::text[], '{1}')$$, '22004'),
('append', 'NULL val element', $$SELECT append('h', '{a,b}'::text[], '{a,NULL}'::text[], '{1,1}')$$, '22004'),
('append', 'NULL diff element', $$SELECT append('h', '{a}'::text[], '{a}'::text[], '{NULL}')$$, '22004'),
('append', 'fewer vals', $$SELECT append('h', '{a,b}'::text[], '{a}'::text[], '{1,1}')$$, '2202E'),
('append', 'more diffs', $$SELECT append('h', '{a}'::text[], '{a}'::text[], '{1,1}')$$, '2202E'),
('append', 'no diffs', $$SELECT append('h', '{a}'::text[], '{a}'::text[], '{}')$$, '2202E'),
('append', 'two-dimensional vals', $$SELECT append('h', '{a,b}'::text[], '{{a},{b}}'::text[], '{1,1}')$$, '2202E'),
('append', 'diffs overflow', $$SELECT append('h', '{a,a}'::text[], '{v,v}'::text[], '{9223372036854775807,9223372036854775807}')$$, '22003'),
('append', 'diffs underflow', $$SELECT append('h', '{a,a}'::text[], '{v,v}'::text[], '{-9223372036854775808,-1}')$$, '22003'),
('append', 'large write, diffs overflow', $$SELECT append('h', ARRAY(SELECT 'a' FROM generate_series(1, 40000)), ARRAY(SELECT repeat('v', 30) FROM generate_series(1, 40000)), array_fill(461168601842738::bigint, ARRAY[40000]))$$, '22003'),
('append', 'unknown shard', $$SELECT append('nope', '{a}'::text[], '{a}'::text[], '{1}')$$, '42704'),
('append', 'dropped shard', $$SELECT append('gone', '{a}'::text[], '{a}'::text[], '{1}')$$, '42704'),
('append', 'unknown shard, large write', $$SELECT append('nope', ARRAY(SELECT 'k' || i FROM generate_series(1, 40000) i), ARRAY(SELECT repeat('v', 30) FROM generate_series(1, 40000)), array_fill(1::bigint, ARRAY[40000]))$$, '42704'),
('append', 'invalid name', $$SELECT append(repeat('x', 300), '{a}'::text[], '{a}'::text[], '{1}')$$, '42602'),
('append', 'bigint keys', $$SELECT append('h', '{1}'::bigint[], '{1}'::bigint[], '{1}')$$, '42883'),
-- snapshot (h: since 5, upper 20; empty: since 0, upper 0)
('snapshot', 'NULL shard', $$SELECT * FROM snapshot(NULL)$$, '22004'),
('snapshot', 'NULL shard, as_of', $$SELECT * FROM snapshot(NULL, 10)$$, '22004'),
('snapshot', 'as_of = upper', $$SELECT * FROM snapshot('h', 20)$$, 'PS002'),
('snapshot', 'as_of = upper + 1', $$SELECT * FROM snapshot('h', 21)$$, 'PS002'),
('snapshot', 'as_of bigint max', $$SELECT * FROM snapshot('h', 9223372036854775807)$$, 'PS002'),
('snapshot', 'as_of = since - 1', $$SELECT * FROM snapshot('h', 4)$$, 'PS003'),
('snapshot', 'as_of 0', $$SELECT * FROM snapshot('h', 0)$$, 'PS003'),
('snapshot', 'as_of -1', $$SELECT * FROM snapshot('h', -1)$$, 'PS003'),
('snapshot', 'as_of bigint min', $$SELECT * FROM snapshot('h', -9223372036854775808)$$, 'PS003'),
('snapshot', 'new shard, default as_of', $$SELECT * FROM snapshot('empty')$$, 'ok'),
('snapshot', 'new shard, as_of 0', $$SELECT * FROM snapshot('empty', 0)$$, 'PS002'),
('snapshot', 'new shard, as_of -1', $$SELECT * FROM snapshot('empty', -1)$$, 'PS003'),
('snapshot', 'unknown', $$SELECT * FROM snapshot('nope')$$, '42704'),
('snapshot', 'dropped', $$SELECT * FROM snapshot('gone', 0)$$, '42704'),
('snapshot', 'invalid name', $$SELECT * FROM snapshot('/')$$, '42602'),
-- listen (h)
('listen', 'NULL shard', $$SELECT * FROM listen(NULL, 5)$$, '22004'),
('listen', 'NULL as_of', $$SELECT * FROM listen('h', NULL)$$, '22004'),
('listen', 'NULL as_of and until', $$SELECT * FROM listen('h', NULL, NULL)$$, '22004'),
('listen', 'as_of = since - 1', $$SELECT * FROM listen('h', 4)$$, 'ok'),
('listen', 'as_of -1', $$SELECT * FROM listen('h', -1)$$, 'PS003'),
('listen', 'as_of bigint min', $$SELECT * FROM listen('h', -9223372036854775808)$$, 'PS003'),
('listen', 'until = upper + 1', $$SELECT * FROM listen('h', 5, 21)$$, 'PS002'),
('listen', 'until bigint max', $$SELECT * FROM listen('h', 5, 9223372036854775807)$$, 'PS002'),
('listen', 'as_of and until bigint max', $$SELECT * FROM listen('h', 9223372036854775807, 9223372036854775807)$$, 'PS002'),
('listen', 'new shard, as_of -1', $$SELECT * FROM listen('empty', -1)$$, 'ok'),
('listen', 'unknown', $$SELECT * FROM listen('nope', 0)$$, '42704'),
('listen', 'invalid name', $$SELECT * FROM listen('', 0)$$, '42602'),
-- compact, verify
('compact', 'NULL', $$SELECT compact(NULL)$$, '22004'),
('compact', 'unknown', $$SELECT compact('nope')$$, '42704'),
('compact', 'dropped', $$SELECT compact('gone')$$, '42704'),
('compact', 'invalid name', $$SELECT compact('a/')$$, '42602'),
('verify', 'NULL', $$SELECT * FROM verify(NULL)$$, '22004'),
('verify', 'unknown', $$SELECT * FROM verify('nope')$$, '42704'),
('verify', 'invalid name', $$SELECT * FROM verify(E'x\ty')$$, '42602'),
-- typed rows (typed: one row of hostile_pair; h has no row type)
('append_rows', 'NULL shard', $$SELECT append_rows(NULL, ARRAY[(1, 'x')::hostile_pair])$$, '22004'),
('append_rows', 'NULL rows', $$SELECT append_rows('typed', NULL::hostile_pair[])$$, '22004'),
('append_rows', 'NULL row element', $$SELECT append_rows('typed', ARRAY[(1, 'x')::hostile_pair, NULL])$$, '22004'),
('append_rows', 'fewer diffs', $$SELECT append_rows('typed', ARRAY[(1, 'x'), (2, 'y')]::hostile_pair[], '{1}')$$, '2202E'),
('append_rows', 'diffs overflow', $$SELECT append_rows('typed', ARRAY[(1, 'x'), (1, 'x')]::hostile_pair[], '{9223372036854775807,1}')$$, '22003'),
('append_rows', 'wrong row type', $$SELECT append_rows('typed', ARRAY[1, 2])$$, '42804'),
('append_rows', 'untyped shard', $$SELECT append_rows('h', ARRAY[(1, 'x')::hostile_pair])$$, '42804'),
('append_rows', 'unknown shard', $$SELECT append_rows('nope', ARRAY[1])$$, '42704'),
('compare_and_append_rows', 'NULL times', $$SELECT compare_and_append_rows('typed', ARRAY[(1, 'x')::hostile_pair], NULL, NULL, 1, 2)$$, '22004'),
('compare_and_append_rows', 'NULL expected_upper', $$SELECT compare_and_append_rows('typed', ARRAY[(1, 'x')::hostile_pair], '{1}', NULL, NULL, 2)$$, '22004'),
('compare_and_append_rows', 'time out of range', $$SELECT compare_and_append_rows('typed', ARRAY[(1, 'x')::hostile_pair], '{2}', NULL, 1, 2)$$, '22023'),
('compare_and_append_rows', 'stale expected_upper', $$SELECT compare_and_append_rows('typed', ARRAY[(1, 'x')::hostile_pair], '{0}', NULL, 0, 1)$$, 'PS001'),
('compare_and_append_rows', 'wrong row type', $$SELECT compare_and_append_rows('typed', ARRAY['x'::text], '{1}', NULL, 1, 2)$$, '42804'),
('snapshot_rows', 'NULL shard', $$SELECT * FROM snapshot_rows(NULL, NULL::hostile_pair)$$, '22004'),
('snapshot_rows', 'wrong row type', $$SELECT * FROM snapshot_rows('typed', NULL::int)$$, '42804'),
('snapshot_rows', 'untyped shard', $$SELECT * FROM snapshot_rows('h', NULL::hostile_pair)$$, '42804'),
('snapshot_rows', 'as_of = upper', $$SELECT * FROM snapshot_rows('typed', NULL::hostile_pair, 1)$$, 'PS002'),
('snapshot_rows', 'as_of -1', $$SELECT * FROM snapshot_rows('typed', NULL::hostile_pair, -1)$$, 'PS003'),
('listen_rows', 'NULL as_of', $$SELECT * FROM listen_rows('typed', NULL::hostile_pair, NULL)$$, '22004'),
('listen_rows', 'until past upper', $$SELECT * FROM listen_rows('typed', NULL::hostile_pair, 0, 2)$$, 'PS002'),
('listen_rows', 'unknown shard', $$SELECT * FROM listen_rows('nope', NULL::int, 0)$$, '42704');

-- Where the contract pins no SQLSTATE: appending to a shard whose upper is
-- bigint's maximum must fail (no later time exists), and leave it alone.
INSERT INTO cases (fn, what, q, expect, quiet) VALUES
('append', 'upper at bigint max', $$SELECT append('top', '{a}'::text[], '{a}'::text[], '{1}')$$, '^(22003|22008|22023|54000)$', true),
('append', 'upper at bigint max, large write', $$SELECT append('top', ARRAY(SELECT 'k' || i FROM generate_series(1, 40000) i), ARRAY(SELECT repeat('v', 30) FROM generate_series(1, 40000)), array_fill(1::bigint, ARRAY[40000]))$$, '^(22003|22008|22023|54000)$', true),
('compare_and_append', 'upper at bigint max', $$SELECT compare_and_append('top', '{a}'::text[], '{a}'::text[], '{9223372036854775807}', '{1}', 9223372036854775807, 9223372036854775807)$$, '22023', false);

-- Runs every case: its result, whether that is what was expected, and
-- whether anything changed.
CREATE FUNCTION pg_temp.run_cases() RETURNS TABLE(id int, fn text, what text, result text,
												   as_expected boolean, unchanged boolean)
LANGUAGE plpgsql AS $$
DECLARE
	c record;
	before text;
	got text;
	msg text;
	det text;
BEGIN
	FOR c IN SELECT * FROM cases ORDER BY cases.id LOOP
		before := pg_temp.world();
		BEGIN
			EXECUTE c.q;
			got := 'ok';
			msg := NULL;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS got = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
				det = PG_EXCEPTION_DETAIL;
			IF det <> '' THEN
				msg := msg || ' / ' || det;
			END IF;
		END;
		id := c.id;
		fn := c.fn;
		what := c.what;
		IF c.quiet THEN
			as_expected := got ~ c.expect;
			result := CASE WHEN as_expected THEN 'an error as expected' ELSE got || ': ' || coalesce(msg, '') END;
		ELSE
			as_expected := got = c.expect;
			result := got || coalesce(': ' || msg, '');
		END IF;
		unchanged := pg_temp.world() = before;
		RETURN NEXT;
	END LOOP;
END
$$;

CREATE TEMP TABLE results AS SELECT * FROM pg_temp.run_cases();
-- one line per case (control characters in names shown as ?)
\pset format unaligned
SELECT id, fn, what, regexp_replace(result, '[[:cntrl:]]', '?', 'g') AS result, unchanged
FROM results ORDER BY id;
\pset format aligned
-- Every case as expected and nothing changed
SELECT count(*) AS cases, count(*) FILTER (WHERE as_expected) AS as_expected,
	   count(*) FILTER (WHERE unchanged) AS unchanged,
	   count(DISTINCT fn) AS functions
FROM results;
SELECT id, fn, what, regexp_replace(result, '[[:cntrl:]]', '?', 'g') AS result
FROM results WHERE NOT as_expected OR NOT unchanged ORDER BY id;
SELECT name, seqno, upper, since, batches, parts, updates FROM shards
WHERE name IN ('empty', 'h', 'top', 'typed') ORDER BY name COLLATE "C";
SELECT name, count(v.problem) AS problems
FROM shards s LEFT JOIN LATERAL verify(s.name) v ON true
WHERE name IN ('empty', 'h', 'top', 'typed') GROUP BY name ORDER BY name COLLATE "C";

--
-- Awkward but valid input: it works, and does exactly what it should.
--

-- Empty arrays: compare_and_append widens the shard, append returns a time
-- past the upper and adds nothing.
SELECT create_shard('awk');
SELECT compare_and_append('awk', '{}'::bytea[], '{}'::bytea[], '{}', '{}', 0, 5);
SELECT upper, since, updates FROM shards WHERE name = 'awk';
SELECT append('awk', '{}'::text[], '{}'::text[], '{}') >= 5 AS appended_empty;
SELECT upper > 5 AS moved, updates FROM shards WHERE name = 'awk';
SELECT count(*) FROM snapshot('awk');

-- Zero diffs and diffs that cancel are consolidated away; extreme diffs
-- whose sum stays in range are fine, in any order.
SELECT create_shard('ovf');
SELECT compare_and_append('ovf', '{z,c,c,m,m,m,m}'::text[], '{v,v,v,v,v,v,v}'::text[],
	'{0,0,0,0,0,0,0}',
	'{0,5,-5,9223372036854775807,9223372036854775807,-9223372036854775808,-9223372036854775808}',
	0, 1);
SELECT encode(key, 'escape') AS key, "time", diff FROM snapshot('ovf');
SELECT compare_and_append('ovf', '{m,m,m}'::text[], '{v,v,v}'::text[], '{1,1,1}',
	'{9223372036854775807,9223372036854775807,-9223372036854775808}', 1, 2);
SELECT encode(key, 'escape') AS key, "time", diff FROM snapshot('ovf');
SELECT append('ovf', '{n,n,n}'::text[], '{v,v,v}'::text[],
	'{-9223372036854775808,9223372036854775807,9223372036854775807}') > 2 AS appended;
SELECT encode(key, 'escape') AS key, diff FROM snapshot('ovf') ORDER BY key;
-- A later update that takes a key's sum out of range: reads past it get a
-- clean error, reads before it still work.
SELECT shard_upper('ovf') AS u \gset
SELECT compare_and_append('ovf', '{m}'::text[], '{v}'::text[], ARRAY[:u]::bigint[], '{4}', :u, :u + 1);
SELECT replace(pg_temp.err($$SELECT * FROM persist_sink.snapshot('ovf')$$), :u::text, 'u') AS err;
SELECT encode(key, 'escape') AS key, diff FROM snapshot('ovf', :u - 1) ORDER BY key;
SELECT encode(key, 'escape') AS key, "time" = :u AS at_u, diff FROM listen('ovf', :u - 1) ORDER BY key;

-- A million updates in one call, by both write paths
SELECT shard_upper('awk') AS u \gset
SELECT compare_and_append('awk', ARRAY(SELECT 'm' || i FROM generate_series(1, 1000000) i),
	array_fill(''::text, ARRAY[1000000]), array_fill(:u::bigint, ARRAY[1000000]),
	array_fill(1::bigint, ARRAY[1000000]), :u, :u + 1) > 0 AS wrote;
SELECT append('awk', ARRAY(SELECT 'a' || i FROM generate_series(1, 1000000) i),
	array_fill('x'::text, ARRAY[1000000]), array_fill(2::bigint, ARRAY[1000000])) > :u AS appended;
SELECT count(*) AS updates, count(*) FILTER (WHERE diff = 1) AS diff_1,
	   count(*) FILTER (WHERE diff = 2) AS diff_2 FROM snapshot('awk');

-- One value of 8MB (above blob_target_size): a part of its own
SELECT shard_upper('awk') AS u \gset
SELECT compare_and_append('awk', ARRAY['big'::bytea],
	ARRAY[(SELECT string_agg(sha256(i::text::bytea), '') FROM generate_series(1, 262144) i)],
	ARRAY[:u::bigint], '{1}', :u, :u + 1) > 0 AS wrote;
SELECT append('awk', ARRAY['big2'::bytea],
	ARRAY[(SELECT string_agg(sha256(i::text::bytea), '') FROM generate_series(1, 262144) i)],
	'{1}') > :u AS appended;
SELECT encode(key, 'escape') AS key, length(val), md5(val) = (SELECT md5(string_agg(sha256(i::text::bytea), '')) FROM generate_series(1, 262144) i) AS same
FROM snapshot('awk') WHERE key IN ('big', 'big2') ORDER BY key;
SELECT problem FROM verify('awk');

-- Names at the limit and full of metacharacters: they are data, never SQL or
-- a format.  Shards whose names are prefixes of one another keep their blob
-- rows apart.
CREATE TEMP TABLE odd_names (name text);
INSERT INTO odd_names VALUES
	(repeat('n', 200)), (repeat('é', 100)), ($$'; DROP TABLE odd_names; --$$),
	('"quoted"'), ('%s%n%x%%'), ('\x00'), ('a b'), ('x'), ('x.'), ('x0'), ('x-y'),
	('ünï ☃ 東京'), ('$1'), ('NULL');
SELECT count(*) FROM odd_names, LATERAL create_shard(name);
SELECT count(*) FROM odd_names,
	LATERAL compare_and_append(name, ARRAY(SELECT name || i FROM generate_series(1, 2000) i),
							   ARRAY(SELECT md5(i::text) FROM generate_series(1, 2000) i),
							   array_fill(0::bigint, ARRAY[2000]), array_fill(1::bigint, ARRAY[2000]), 0, 1);
SELECT left(o.name, 12) AS name, length(o.name) AS chars, octet_length(o.name) AS bytes, s.upper, s.updates,
	   (SELECT count(DISTINCT b.key) FROM blob b WHERE starts_with(b.key, o.name || '/')) AS blobs,
	   (SELECT count(*) FROM verify(o.name)) AS problems
FROM odd_names o JOIN shards s ON s.name = o.name ORDER BY o.name COLLATE "C";
SELECT drop_shard('x');
SELECT o.name, (SELECT count(DISTINCT b.key) FROM blob b WHERE starts_with(b.key, o.name || '/')) AS blobs,
	   (SELECT count(*) FROM verify(o.name)) AS problems
FROM odd_names o WHERE o.name LIKE 'x%' AND o.name <> 'x' ORDER BY o.name COLLATE "C";
SELECT count(*) FROM odd_names, LATERAL drop_shard(name) WHERE name <> 'x';
SELECT count(*) AS odd_shards_left FROM shards s JOIN odd_names o ON o.name = s.name;
SELECT count(DISTINCT b.key) AS odd_blobs_left FROM blob b, odd_names o WHERE starts_with(b.key, o.name || '/');

-- Reads at the edges of [since, upper) of h (since 5, upper 20)
SELECT as_of, (SELECT count(*) FROM snapshot('h', as_of)) AS updates
FROM unnest(ARRAY[5, 9, 10, 19]) as_of;
SELECT count(*) AS default_as_of FROM snapshot('h');
SELECT count(*) AS default_as_of_null FROM snapshot('h', NULL);
SELECT as_of, until, (SELECT count(*) FROM listen('h', as_of, until)) AS updates
FROM (VALUES (5, NULL), (9, 10), (9, 11), (19, NULL), (19, 20), (20, 20),
			 (10, 5), (9223372036854775807, NULL), (5, -9223372036854775808)) v(as_of, until);
-- since at upper: nothing is readable any more, and nothing breaks
SELECT downgrade_since('h', 20);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('h')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('h', 19)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('h', 20)$$);
SELECT count(*) FROM listen('h', 20);
SELECT compact('h');
SELECT pg_temp.st('h');
SELECT problem FROM verify('h');

-- A shard of 1000 batches: batches() describes every one of them, twice
SELECT create_shard('many');
DO $$
BEGIN
	FOR i IN 0..999 LOOP
		PERFORM persist_sink.compare_and_append('many', ARRAY['k' || i], ARRAY['v'],
												ARRAY[i::bigint], '{1}', i, i + 1);
	END LOOP;
END
$$;
SELECT batches, updates FROM shards WHERE name = 'many';
SELECT count(*), min(lower), max(upper), sum(updates),
	   count(*) FILTER (WHERE upper <> lower + 1 OR since <> 0 OR updates <> 1 OR parts <> 1 OR NOT inline) AS odd
FROM batches('many');
SELECT count(*), min(lower), max(upper), sum(updates),
	   count(*) FILTER (WHERE upper <> lower + 1 OR since <> 0 OR updates <> 1 OR parts <> 1 OR NOT inline) AS odd
FROM batches('many');

-- Cancelling a read that would return a row 10^18 times: an error, not a hang.
SELECT compare_and_append_rows('typed', ARRAY[(2, 'many')::hostile_pair], '{1}',
							   '{1000000000000000000}', 1, 2);
SET statement_timeout = '1s';
SELECT count(*) FROM snapshot_rows('typed', NULL::hostile_pair);
RESET statement_timeout;

-- Cleanup
SELECT drop_shard(name) FROM shards
WHERE name IN ('awk', 'empty', 'h', 'many', 'ovf', 'top', 'typed') ORDER BY name COLLATE "C";
SELECT count(*) AS blobs_left FROM blob b
WHERE split_part(b.key, '/', 1) IN ('awk', 'empty', 'h', 'many', 'ovf', 'top', 'typed');
DROP TYPE hostile_pair;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
