--
-- compare_and_append: argument checking, upper mismatches, consolidation,
-- payloads, inline and blob batches, parts, and transactions.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

\i sql/include/st.psql

-- Blob rows of a shard.
CREATE FUNCTION pg_temp.blobs(s text) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, s || '/')
$$;

-- A shard's content as of as_of, as text, for display.
CREATE FUNCTION pg_temp.show(s text, as_of bigint DEFAULT NULL)
RETURNS TABLE(key text, val text, "time" bigint, diff bigint) LANGUAGE sql AS $$
	SELECT encode(key, 'escape'), encode(val, 'escape'), "time", diff
	FROM persist_sink.snapshot(s, as_of) ORDER BY key, val
$$;

SELECT create_shard('c1');
SELECT compare_and_append('c1', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 1);
SELECT pg_temp.st('c1') AS before \gset
SELECT :'before';

--
-- NULL arguments and NULL elements: 22004
--
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', NULL::text[], '{x}'::text[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], NULL::text[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], NULL, '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', NULL, 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', NULL, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', 1, NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', NULL::bytea[], '{x}'::bytea[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,NULL}'::text[], '{x,y}'::text[], '{1,1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{NULL,y}'::text[], '{1,1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1,NULL}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1,1}', '{NULL,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', ARRAY[NULL::bytea], ARRAY['\x00'::bytea], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.st('c1') = :'before' AS unchanged;

--
-- lengths and dimensions: 2202E
--
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x}'::text[], '{1,1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x,y}'::text[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1,1}', '{1,1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{}'::text[], '{x}'::text[], '{1}', '{1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{}', '{}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{{x},{y}}'::text[], '{x,y}'::text[], '{1,1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{{x,y}}'::text[], '{1,1}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{{1,1}}', '{1,1}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1,1}', '{{1},{1}}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{{x}}'::bytea[], '{{x}}'::bytea[], '{{1}}', '{{1}}', 1, 2)$$);
SELECT pg_temp.st('c1') = :'before' AS unchanged;

--
-- the interval: expected_upper < new_upper, times in [expected_upper, new_upper): 22023
--
SELECT compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', 1, 1);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', 1, 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{}'::text[], '{}'::text[], '{}', '{}', 1, 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{0}', '{1}', 1, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{1,3}', '{1,1}', 1, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x,y}'::text[], '{x,y}'::text[], '{2,-9223372036854775808}', '{1,1}', 1, 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{9223372036854775807}', '{1}', 1, 3)$$);
SELECT pg_temp.st('c1') = :'before' AS unchanged;

--
-- diffs that overflow when consolidated: 22003
--
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{k,k}'::text[], '{v,v}'::text[], '{1,1}',
	'{9223372036854775807,9223372036854775807}', 1, 2)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{k,k}'::text[], '{v,v}'::text[], '{1,1}',
	'{-9223372036854775808,-1}', 1, 2)$$);
SELECT pg_temp.st('c1') = :'before' AS unchanged;
-- extreme diffs that do not add up are fine
SELECT compare_and_append('c1', '{k,k,l}'::text[], '{v,w,v}'::text[], '{1,1,1}',
	'{9223372036854775807,-9223372036854775808,9223372036854775807}', 1, 2);
SELECT * FROM pg_temp.show('c1');
SELECT pg_temp.st('c1') AS before \gset

--
-- upper mismatch: PS001, DETAIL current upper is N, nothing written
--
SELECT compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', 1, 5);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{1}', '{1}', 1, 5)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{0}', '{1}', 0, 5)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{3}', '{1}', 3, 5)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{}'::bytea[], '{}'::bytea[], '{}', '{}', 7, 8)$$);
SET persist_sink.inline_max_bytes = 0;
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{3}', '{1}', 3, 5)$$);
RESET persist_sink.inline_max_bytes;
SELECT pg_temp.st('c1') = :'before' AS unchanged;
-- an argument error is reported before a mismatch
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{9}', '{1}', 3, 5)$$);
-- the right expected_upper succeeds and returns the next seqno
SELECT compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{2}', '{1}', 2, 5) AS seqno;
SELECT shard_upper('c1');
SELECT compare_and_append('c1', '{x}'::text[], '{x}'::text[], '{2}', '{1}', 2, 5);
SELECT * FROM pg_temp.show('c1');

--
-- consolidation within a write
--
SELECT create_shard('c2');
-- equal (key, val, time) are summed; equal (key, val) at other times are not
SELECT compare_and_append('c2', '{a,a,a,b,a}'::text[], '{1,1,1,2,1}'::text[], '{0,0,0,0,1}', '{1,2,3,1,1}', 0, 2);
SELECT lower, upper, parts, updates, inline FROM batches('c2');
SELECT * FROM snapshot('c2', 0) ORDER BY key, val;
SELECT * FROM listen('c2', 0) ORDER BY key, val, "time";
SELECT * FROM pg_temp.show('c2');
-- retractions cancel to nothing: an empty batch only moves upper
SELECT compare_and_append('c2', '{z,z,y,y}'::text[], '{1,1,2,2}'::text[], '{2,2,3,3}', '{5,-5,-1,1}', 2, 4);
SELECT lower, upper, parts, updates, inline FROM batches('c2');
SELECT * FROM pg_temp.show('c2');
-- retracting earlier updates
SELECT compare_and_append('c2', '{a,b}'::text[], '{1,2}'::text[], '{4,5}', '{-7,-1}', 4, 6);
SELECT lower, upper, parts, updates, inline FROM batches('c2');
SELECT * FROM pg_temp.show('c2');
SELECT * FROM pg_temp.show('c2', 4);
SELECT * FROM pg_temp.show('c2', 3);
-- an empty write on an empty shard makes an empty batch
SELECT create_shard('c3');
SELECT compare_and_append('c3', '{}'::bytea[], '{}'::bytea[], '{}', '{}', 0, 10);
SELECT compare_and_append('c3', '{x,x}'::bytea[], '{y,y}'::bytea[], '{10,10}', '{1,-1}', 10, 20);
SELECT lower, upper, parts, updates, inline FROM batches('c3');
SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates, debt_batches, runs,
	owner = current_user::regrole AS mine, privileges
FROM shards WHERE name = 'c3';
SELECT count(*) FROM snapshot('c3');
SELECT * FROM verify('c3');
-- arrays with other lower bounds
SELECT compare_and_append('c3', '[5:6]={p,q}'::text[], '[0:1]={1,2}'::text[], '[-3:-2]={20,21}', '{1,1}', 20, 22);
SELECT * FROM pg_temp.show('c3');

--
-- payloads: text and bytea, empty, zero bytes, every byte value
--
SELECT create_shard('c4');
SELECT compare_and_append('c4',
	ARRAY['\x00'::bytea, '\x'::bytea, '\x0000'::bytea, '\xff00ff'::bytea, '\x'::bytea, '\x00'::bytea],
	ARRAY['\x'::bytea, '\x00'::bytea, '\x'::bytea, '\x000102'::bytea, '\x'::bytea, '\x0001'::bytea],
	'{0,0,0,0,0,0}', '{1,2,3,4,5,6}', 0, 1);
SELECT key, val, "time", diff FROM snapshot('c4') ORDER BY key, val;
SELECT compare_and_append('c4', '{"",k,"",é,"a b"}'::text[], '{v,"","","€","\\"}'::text[],
	'{1,1,1,1,1}', '{1,1,-4,1,1}', 1, 2);
SELECT key, val, "time", diff FROM snapshot('c4') ORDER BY key, val;
-- text and bytea are the same bytes
SELECT encode(l.key, 'escape') AS key, encode(l.val, 'escape') AS val, diff
FROM listen('c4', 0) l ORDER BY l.key, l.val;
SELECT compare_and_append('c4', '{k}'::bytea[], ARRAY[''::bytea], '{2}', '{-1}', 2, 3);
SELECT key, val, diff FROM snapshot('c4') WHERE key = 'k'::bytea;
-- all 256 byte values, and long keys and vals
SELECT compare_and_append('c4',
	ARRAY(SELECT set_byte('\x00'::bytea, 0, b) FROM generate_series(0, 255) b),
	ARRAY(SELECT decode(repeat(lpad(to_hex(b), 2, '0'), b), 'hex') FROM generate_series(0, 255) b),
	array_fill(3::bigint, ARRAY[256]), array_fill(7::bigint, ARRAY[256]), 3, 4);
SELECT count(*), min(octet_length(val)), max(octet_length(val)), sum(diff)
FROM snapshot('c4') WHERE "time" = 3 AND diff = 7;
SELECT count(*) AS mismatches
FROM generate_series(0, 255) b
WHERE NOT EXISTS (SELECT FROM listen('c4', 2, 4) l
				  WHERE l.key = set_byte('\x00'::bytea, 0, b)
					AND l.val = decode(repeat(lpad(to_hex(b), 2, '0'), b), 'hex')
					AND l."time" = 3 AND l.diff = 7);
SELECT compare_and_append('c4', ARRAY[decode(repeat('ab', 100000), 'hex')],
	ARRAY[decode(repeat('00', 300000), 'hex')], '{4}', '{1}', 4, 5);
SELECT octet_length(key), octet_length(val), diff FROM snapshot('c4')
WHERE octet_length(key) > 1000;
SELECT * FROM verify('c4');

--
-- inline and blob batches
--
SELECT create_shard('c5');
SHOW persist_sink.inline_max_bytes;
SELECT compare_and_append('c5', '{a}'::text[], '{b}'::text[], '{0}', '{1}', 0, 1);
SELECT lower, upper, parts, updates, inline FROM batches('c5');
SELECT pg_temp.blobs('c5') AS blob_rows, inline_bytes > 0 AS has_inline, blob_bytes FROM shards WHERE name = 'c5';
SET persist_sink.inline_max_bytes = 0;
SELECT compare_and_append('c5', '{a}'::text[], '{b}'::text[], '{1}', '{1}', 1, 2);
SELECT lower, upper, parts, updates, inline FROM batches('c5');
SELECT pg_temp.blobs('c5') AS blob_rows;
SELECT (SELECT blob_bytes FROM shards WHERE name = 'c5') =
	   (SELECT sum(octet_length(data)) FROM blob WHERE starts_with(key, 'c5/')) AS blob_bytes_match;
-- an empty write writes no blob row
SELECT compare_and_append('c5', '{}'::text[], '{}'::text[], '{}', '{}', 2, 3);
SELECT pg_temp.blobs('c5') AS blob_rows;
SET persist_sink.inline_max_bytes = '1MB';
-- incompressible bytes stay inline below the limit
SELECT compare_and_append('c5', ARRAY[(SELECT string_agg(sha256(int4send(i)), '') FROM generate_series(1, 1000) i)],
	'{""}'::bytea[], '{3}', '{1}', 3, 4);
SELECT lower, upper, parts, updates, inline, encoded_bytes > 32000 AS big FROM batches('c5');
SELECT pg_temp.blobs('c5') AS blob_rows;
RESET persist_sink.inline_max_bytes;
SELECT compare_and_append('c5', ARRAY[(SELECT string_agg(sha256(int4send(i)), '') FROM generate_series(1, 1000) i)],
	'{""}'::bytea[], '{4}', '{-1}', 4, 5);
SELECT lower, upper, parts, updates, inline FROM batches('c5');
SELECT pg_temp.blobs('c5') AS blob_rows;
SELECT * FROM pg_temp.show('c5');
SELECT * FROM verify('c5');
-- the settings are for superusers
CREATE ROLE regress_ps_user;
SET ROLE regress_ps_user;
SET persist_sink.inline_max_bytes = 0;
SET persist_sink.blob_target_size = '1kB';
RESET ROLE;
DROP ROLE regress_ps_user;

--
-- a write of many parts
--
SELECT create_shard('c6');
SET persist_sink.blob_target_size = '1kB';
SET persist_sink.inline_max_bytes = '2kB';
SELECT compare_and_append('c6',
	ARRAY(SELECT convert_to('key' || i, 'UTF8') FROM generate_series(1, 2000) i),
	ARRAY(SELECT convert_to('val' || (i % 7), 'UTF8') FROM generate_series(1, 2000) i),
	ARRAY(SELECT i % 10 FROM generate_series(1, 2000) i),
	array_fill(1::bigint, ARRAY[2000]), 0, 10);
RESET persist_sink.blob_target_size;
RESET persist_sink.inline_max_bytes;
SELECT lower, upper, parts > 1 AS several_parts, updates, inline FROM batches('c6');
SELECT (SELECT parts FROM shards WHERE name = 'c6') = pg_temp.blobs('c6') AS one_row_per_part,
	   pg_temp.blobs('c6') > 1 AS several_rows;
SELECT count(*), sum(diff) FROM snapshot('c6');
(SELECT 'key' || i, 'val' || (i % 7), 9::bigint, 1::bigint FROM generate_series(1, 2000) i
 EXCEPT
 SELECT convert_from(key, 'UTF8'), convert_from(val, 'UTF8'), "time", diff FROM snapshot('c6'))
UNION ALL
(SELECT convert_from(key, 'UTF8'), convert_from(val, 'UTF8'), "time", diff FROM snapshot('c6')
 EXCEPT
 SELECT 'key' || i, 'val' || (i % 7), 9::bigint, 1::bigint FROM generate_series(1, 2000) i);
-- as of 4: only the updates at times 0 to 4
SELECT count(*) FROM snapshot('c6', 4);
(SELECT 'key' || i FROM generate_series(1, 2000) i WHERE i % 10 <= 4
 EXCEPT
 SELECT convert_from(key, 'UTF8') FROM snapshot('c6', 4))
UNION ALL
(SELECT convert_from(key, 'UTF8') FROM snapshot('c6', 4)
 EXCEPT
 SELECT 'key' || i FROM generate_series(1, 2000) i WHERE i % 10 <= 4);
SELECT "time", count(*) FROM listen('c6', 6) GROUP BY 1 ORDER BY 1;
SELECT * FROM verify('c6');

--
-- compare_and_append runs in the caller's transaction
--
SELECT create_shard('c7');
CREATE TABLE c7_side (note text);
SELECT compare_and_append('c7', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 1);
SET persist_sink.inline_max_bytes = 0;
SELECT pg_temp.st('c7') AS before \gset
-- rolled back with the transaction, blob rows and all
BEGIN;
INSERT INTO c7_side VALUES ('rolled back');
SELECT compare_and_append('c7', '{b}'::text[], '{2}'::text[], '{1}', '{1}', 1, 2);
SELECT shard_upper('c7');
SELECT * FROM pg_temp.show('c7');
SELECT pg_temp.blobs('c7') AS blob_rows;
ROLLBACK;
SELECT pg_temp.st('c7') = :'before' AS unchanged;
SELECT shard_upper('c7');
SELECT count(*) FROM c7_side;
SELECT * FROM pg_temp.show('c7');
-- an error later in the transaction undoes it too
BEGIN;
SELECT compare_and_append('c7', '{b}'::text[], '{2}'::text[], '{1}', '{1}', 1, 2);
SELECT 1 / 0;
COMMIT;
SELECT pg_temp.st('c7') = :'before' AS unchanged;
-- a savepoint rolled back undoes only what followed it
BEGIN;
SELECT compare_and_append('c7', '{b}'::text[], '{2}'::text[], '{1}', '{1}', 1, 2);
INSERT INTO c7_side VALUES ('kept');
SAVEPOINT sp;
SELECT compare_and_append('c7', '{c}'::text[], '{3}'::text[], '{2}', '{1}', 2, 3);
SELECT shard_upper('c7');
ROLLBACK TO SAVEPOINT sp;
SELECT shard_upper('c7');
-- the interval is free again, for other updates
SELECT compare_and_append('c7', '{d}'::text[], '{4}'::text[], '{2}', '{1}', 2, 4);
SAVEPOINT sp2;
SELECT compare_and_append('c7', '{e}'::text[], '{5}'::text[], '{4}', '{1}', 4, 5);
RELEASE SAVEPOINT sp2;
-- a mismatch inside a savepoint leaves the transaction usable
SAVEPOINT sp3;
SELECT compare_and_append('c7', '{x}'::text[], '{x}'::text[], '{0}', '{1}', 0, 1);
ROLLBACK TO SAVEPOINT sp3;
COMMIT;
SELECT shard_upper('c7');
SELECT * FROM pg_temp.show('c7');
SELECT * FROM c7_side;
SELECT lower, upper, parts, updates, inline FROM batches('c7');
SELECT (SELECT parts FROM shards WHERE name = 'c7') - 1 = pg_temp.blobs('c7') AS blob_rows_match;
-- (in an object store the rolled-back appends left objects, under random keys)
SELECT regexp_replace(problem, '[0-9a-f]{32}', '<key>') AS problem FROM verify('c7')
ORDER BY problem;
-- two writes of one interval in one transaction: the second mismatches
BEGIN;
SELECT compare_and_append('c7', '{f}'::text[], '{6}'::text[], '{5}', '{1}', 5, 6);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c7', '{g}'::text[], '{7}'::text[], '{5}', '{1}', 5, 6)$$);
COMMIT;
SELECT shard_upper('c7');
RESET persist_sink.inline_max_bytes;
-- stats count what committed
SELECT shard, appends, updates, parts_written, blob_puts, inline_batches
FROM stats WHERE shard = 'c7';
DROP TABLE c7_side;

--
-- the largest times
--
SELECT create_shard('c8');
SELECT compare_and_append('c8', '{a,b}'::text[], '{1,2}'::text[], '{0,9223372036854775806}', '{1,1}',
	0, 9223372036854775807);
SELECT shard_upper('c8');
SELECT * FROM pg_temp.show('c8');
SELECT * FROM pg_temp.show('c8', 5);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('c8', '{}'::text[], '{}'::text[], '{}', '{}',
	9223372036854775807, 9223372036854775807)$$);
-- append() at the end of time says so (not that sums of diffs overflow),
-- and writes nothing
SELECT seqno AS c8_seqno FROM shards WHERE name = 'c8' \gset
SELECT pg_temp.err($$SELECT persist_sink.append('c8', '{c}'::text[], '{3}'::text[], '{1}')$$);
SELECT pg_temp.err($$SELECT persist_sink.append('c8', '{c}'::text[], '{3}'::text[], '{1}', 'c8-key')$$);
SELECT seqno = :c8_seqno AS c8_unchanged FROM shards WHERE name = 'c8';
SELECT * FROM verify('c8');

SELECT name, (SELECT count(*) FROM verify(name)) AS problems FROM shards
WHERE name LIKE 'c_' ORDER BY name COLLATE "C";

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
