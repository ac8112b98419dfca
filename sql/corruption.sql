--
-- corruption: damaged blob rows and consensus state are reported as
-- SQLSTATE XX001 (data_corrupted) by reads and as problem rows by verify,
-- never a crash.  Blob keys are random: messages are scrubbed of them.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql

-- Removes what varies between runs from a message: blob keys, checksums,
-- update counts.
CREATE FUNCTION pg_temp.scrub(m text) RETURNS text LANGUAGE sql AS $$
	SELECT regexp_replace(regexp_replace(regexp_replace(m,
		'"([^"/]+)/[0-9a-z]+"', '"\1/<key>"', 'g'),
		'checksum [0-9a-f]{8}', 'checksum <crc>', 'g'),
		'[0-9]+ (updates|bytes)', '<n> \1', 'g')
$$;

-- Runs q and reports its SQLSTATE, message and DETAIL (or that it succeeded).
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	det text;
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL;
	RETURN pg_temp.scrub(st || ': ' || msg || CASE WHEN det <> '' THEN ' / ' || det ELSE '' END);
END
$$;

-- verify's problems, scrubbed and ordered.
CREATE FUNCTION pg_temp.problems(s text) RETURNS SETOF text LANGUAGE sql AS $$
	SELECT pg_temp.scrub(problem) FROM persist_sink.verify(s) ORDER BY pg_temp.scrub(problem) COLLATE "C"
$$;

\i sql/include/digest.psql

--
-- k1: a batch of several blob parts, then a batch of one blob part
--
SELECT create_shard('k1');
SET persist_sink.inline_max_bytes = 0;
SET persist_sink.blob_target_size = '1kB';
SELECT compare_and_append('k1',
	ARRAY(SELECT convert_to('key' || i, 'UTF8') FROM generate_series(1, 200) i),
	ARRAY(SELECT convert_to(repeat('v', i % 13), 'UTF8') FROM generate_series(1, 200) i),
	ARRAY(SELECT (i % 10)::bigint FROM generate_series(1, 200) i),
	array_fill(1::bigint, ARRAY[200]), 0, 10);
CREATE TEMP TABLE first_batch AS SELECT key FROM blob WHERE starts_with(key, 'k1/');
SELECT compare_and_append('k1', '{a,b,c,d,e}'::text[], '{1,2,3,4,5}'::text[], '{10,11,12,13,14}',
	'{1,1,1,1,1}', 10, 20);
RESET persist_sink.inline_max_bytes;
RESET persist_sink.blob_target_size;
SELECT lower, upper, parts > 1 AS several_parts, updates, inline FROM batches('k1');
SELECT count(*) > 2 AS several_rows FROM blob WHERE starts_with(key, 'k1/');
-- a healthy neighbour, inline
SELECT create_shard('k2');
SELECT compare_and_append('k2', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 1);

-- k1's parts are small: each is one blob row (chunk 0), so damaging a row
-- damages a part
SELECT bool_and(chunk = 0) AS one_row_per_part FROM blob WHERE starts_with(key, 'k1/');
-- the healthy originals, to restore after each damage
CREATE TEMP TABLE saved_blob AS SELECT key, chunk, data FROM blob WHERE starts_with(key, 'k1/');
CREATE TEMP TABLE saved_state AS SELECT shard, seqno, state FROM consensus WHERE shard = 'k1';
-- the part of the second batch, and the largest part of the first
CREATE TEMP TABLE victim AS
SELECT (SELECT key FROM saved_blob WHERE key NOT IN (SELECT key FROM first_batch)) AS late,
	   (SELECT key FROM saved_blob WHERE key IN (SELECT key FROM first_batch)
		ORDER BY octet_length(data) DESC, key LIMIT 1) AS early,
	   (SELECT key FROM saved_blob WHERE key IN (SELECT key FROM first_batch)
		ORDER BY octet_length(data) DESC, key OFFSET 1 LIMIT 1) AS early2;
SELECT late IS NOT NULL AND early IS NOT NULL AND early2 IS NOT NULL AS found FROM victim;

CREATE FUNCTION pg_temp.restore() RETURNS void LANGUAGE sql AS $$
	DELETE FROM persist_sink.blob WHERE starts_with(key, 'k1/');
	INSERT INTO persist_sink.blob SELECT key, chunk, data FROM saved_blob;
	UPDATE persist_sink.consensus c SET seqno = s.seqno, state = s.state
	FROM saved_state s WHERE c.shard = s.shard;
$$;

SELECT pg_temp.digest('k1') AS healthy \gset
SELECT pg_temp.digest('k1', 5) AS healthy5 \gset
SELECT * FROM verify('k1');

--
-- a flipped byte in a part's compressed frame
--
UPDATE blob SET data = set_byte(data, 40, get_byte(data, 40) # 255)
WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1', 5)$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.listen('k1', 0)$$);
SELECT pg_temp.err($$SELECT persist_sink.compact('k1')$$);
SELECT * FROM pg_temp.problems('k1');
-- the state is readable, and the neighbour is fine
SELECT shard_upper('k1'), shard_since('k1');
SELECT name, upper, batches FROM shards WHERE name IN ('k1', 'k2') ORDER BY name COLLATE "C";
SELECT count(*) FROM snapshot('k2');
SELECT * FROM verify('k2');
-- the same damage through psql: SQLSTATE XX001
\set VERBOSITY sqlstate
SELECT count(*) FROM snapshot('k1');
\set VERBOSITY default
SELECT pg_temp.restore();
SELECT pg_temp.digest('k1') = :'healthy' AS healthy;

-- a damaged part of a later batch does not stop reads of earlier times
UPDATE blob SET data = set_byte(data, 40, get_byte(data, 40) # 1)
WHERE key = (SELECT late FROM victim);
SELECT pg_temp.digest('k1', 5) = :'healthy5' AS readable_before;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1', 10)$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.listen('k1', 5, 10)$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.listen('k1', 5)$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();

--
-- damaged headers
--
-- magic
UPDATE blob SET data = set_byte(data, 0, get_byte(data, 0) # 16) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- version
UPDATE blob SET data = set_byte(data, 4, 99) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- update count (covered by the checksum)
UPDATE blob SET data = set_byte(data, 8, get_byte(data, 8) # 4) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- the checksum itself
UPDATE blob SET data = set_byte(data, 28, get_byte(data, 28) # 128) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- every byte of the header, one at a time: always an error, never a crash
SELECT count(*) AS errors, count(DISTINCT substr(e, 1, 5)) AS sqlstates, min(substr(e, 1, 5)) AS sqlstate
FROM generate_series(0, 31) i,
	 LATERAL (SELECT pg_temp.err(format($q$
		UPDATE persist_sink.blob SET data = set_byte(data, %s, get_byte(data, %s) # 85)
		WHERE key = %L;
		SELECT count(*) FROM persist_sink.snapshot('k1');
		DO $d$ BEGIN RAISE EXCEPTION 'not reached'; END $d$;
	 $q$, i, i, (SELECT early FROM victim)))) AS r(e)
WHERE e LIKE 'XX001:%';
SELECT pg_temp.digest('k1') = :'healthy' AS healthy;

--
-- truncated and lengthened parts
--
UPDATE blob SET data = substring(data FROM 1 FOR 10) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
UPDATE blob SET data = substring(data FROM 1 FOR 32) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
UPDATE blob SET data = substring(data FROM 1 FOR octet_length(data) - 1) WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
UPDATE blob SET data = data || '\x00'::bytea WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
UPDATE blob SET data = '\x' WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- every truncation: always an error
SELECT count(*) > 32 AS many, count(*) = count(*) FILTER (WHERE e LIKE 'XX001:%') AS all_errors
FROM (SELECT octet_length(data) AS len FROM saved_blob WHERE key = (SELECT early FROM victim)) l,
	 generate_series(0, l.len - 1) n,
	 LATERAL (SELECT pg_temp.err(format($q$
		UPDATE persist_sink.blob SET data = substring(data FROM 1 FOR %s) WHERE key = %L;
		SELECT count(*) FROM persist_sink.snapshot('k1');
	 $q$, n, (SELECT early FROM victim)))) AS r(e);
SELECT pg_temp.digest('k1') = :'healthy' AS healthy;

--
-- parts that decode but are not the parts the state describes
--
-- two parts' data swapped
UPDATE blob b SET data = s.data
FROM saved_blob s, victim v
WHERE (b.key = v.early AND s.key = v.late) OR (b.key = v.late AND s.key = v.early);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1', 5)$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- two parts of one batch swapped
UPDATE blob b SET data = s.data
FROM saved_blob s, victim v
WHERE (b.key = v.early AND s.key = v.early2) OR (b.key = v.early2 AND s.key = v.early);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
-- one part copied over another
UPDATE blob SET data = (SELECT data FROM saved_blob WHERE key = (SELECT late FROM victim))
WHERE key = (SELECT early FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();

--
-- missing and unreferenced blob rows
--
DELETE FROM blob WHERE key = (SELECT late FROM victim);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k1')$$);
SELECT pg_temp.digest('k1', 5) = :'healthy5' AS readable_before;
SELECT * FROM pg_temp.problems('k1');
SELECT pg_temp.restore();
INSERT INTO blob VALUES ('k1/0123456789abcdef0123456789abcdef', 0, '\x00'),
						('k1/stray', 0, (SELECT data FROM saved_blob WHERE key = (SELECT late FROM victim)));
SELECT pg_temp.digest('k1') = :'healthy' AS readable;
SELECT * FROM pg_temp.problems('k1');
-- rows of other shards with a similar prefix are not k1's
INSERT INTO blob VALUES ('k1.x/0123', 0, '\x00'), ('k10/0123', 0, '\x00'), ('k/0123', 0, '\x00');
SELECT * FROM pg_temp.problems('k1');
DELETE FROM blob WHERE key IN ('k1.x/0123', 'k10/0123', 'k/0123');
SELECT pg_temp.restore();
SELECT * FROM verify('k1');

--
-- damaged consensus state
--
-- a flipped byte
UPDATE consensus SET state = set_byte(state, 20, get_byte(state, 20) # 1) WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.err($$SELECT persist_sink.shard_since('k1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.snapshot('k1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.listen('k1', 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.batches('k1')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.verify('k1')$$);
SELECT pg_temp.err($$SELECT persist_sink.compact('k1')$$);
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('k1', 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('k1', '{x}'::text[], '{x}'::text[], '{20}', '{1}', 20, 21)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.shards$$);
-- the neighbour is fine
SELECT shard_upper('k2');
SELECT count(*) FROM snapshot('k2');
\set VERBOSITY sqlstate
SELECT shard_upper('k1');
\set VERBOSITY default
SELECT pg_temp.restore();
SELECT pg_temp.digest('k1') = :'healthy' AS healthy;
-- magic, version, a byte of every part of the state
UPDATE consensus SET state = set_byte(state, 1, get_byte(state, 1) # 1) WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
UPDATE consensus SET state = set_byte(state, 4, 7) WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
SELECT count(*) > 100 AS many, count(*) = count(*) FILTER (WHERE e LIKE 'XX001:%') AS all_errors
FROM (SELECT octet_length(state) AS len FROM saved_state) l,
	 generate_series(0, l.len - 1) i,
	 LATERAL (SELECT pg_temp.err(format($q$
		UPDATE persist_sink.consensus SET state = set_byte(state, %s, get_byte(state, %s) # 36)
		WHERE shard = 'k1';
		SELECT count(*) FROM persist_sink.snapshot('k1');
	 $q$, i, i))) AS r(e);
-- truncated, lengthened, emptied
UPDATE consensus SET state = substring(state FROM 1 FOR 10) WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
UPDATE consensus SET state = substring(state FROM 1 FOR octet_length(state) - 1) WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
UPDATE consensus SET state = state || '\x00'::bytea WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
UPDATE consensus SET state = '\x' WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.restore();
SELECT count(*) > 100 AS many, count(*) = count(*) FILTER (WHERE e LIKE 'XX001:%') AS all_errors
FROM (SELECT octet_length(state) AS len FROM saved_state) l,
	 generate_series(0, l.len - 1) n,
	 LATERAL (SELECT pg_temp.err(format($q$
		UPDATE persist_sink.consensus SET state = substring(state FROM 1 FOR %s) WHERE shard = 'k1';
		SELECT count(*) FROM persist_sink.snapshot('k1');
	 $q$, n))) AS r(e);
-- the seqno column disagrees with the state
UPDATE consensus SET seqno = seqno + 1 WHERE shard = 'k1';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('k1')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('k1', '{x}'::text[], '{x}'::text[], '{20}', '{1}', 20, 21)$$);
SELECT pg_temp.restore();
-- another shard's (valid) state: verify finds k1's rows unreferenced
UPDATE consensus c SET state = o.state, seqno = o.seqno
FROM consensus o WHERE c.shard = 'k1' AND o.shard = 'k2';
SELECT shard_upper('k1');
SELECT count(*) = (SELECT count(*) FROM saved_blob) AS every_row, min(p) = max(p) AS all_alike, min(p)
FROM pg_temp.problems('k1') p;
SELECT pg_temp.restore();

--
-- k3: a part of several blocks, stored out of line: reads fetch and check
-- it a block at a time, verify decodes it whole
--
SELECT create_shard('k3');
CREATE TEMP TABLE k3_rows AS
SELECT convert_to(lpad(i::text, 8, '0'), 'UTF8') AS key,
	   convert_to(md5(i::text) || md5((i * 7)::text) || md5((i * 13)::text), 'UTF8') AS val
FROM generate_series(1, 3000) i;
SELECT compare_and_append('k3', ARRAY(SELECT key FROM k3_rows ORDER BY key),
	ARRAY(SELECT val FROM k3_rows ORDER BY key), array_fill(1::bigint, ARRAY[3000]),
	array_fill(1::bigint, ARRAY[3000]), 0, 2);
SELECT parts, updates, inline FROM batches('k3');
-- the offsets of the part's blocks (these are bounded blocks)
\i sql/include/block_offsets.psql
-- A part's bytes, whole (the blob table holds them in rows of 7864-byte
-- chunks), and a function that stores a part's bytes cut the same way.
CREATE TEMP VIEW whole_parts AS
SELECT key, string_agg(data, '\x'::bytea ORDER BY chunk) AS data, count(*) AS chunks
FROM blob GROUP BY key;
CREATE FUNCTION pg_temp.put_part(k text, d bytea) RETURNS boolean LANGUAGE sql AS $$
	DELETE FROM persist_sink.blob WHERE key = k;
	INSERT INTO persist_sink.blob (key, chunk, data)
	SELECT k, c, substr(d, c * 7864 + 1, 7864)
	FROM generate_series(0, greatest(octet_length(d) - 1, 0) / 7864) c;
	SELECT true;
$$;
CREATE TEMP TABLE k3_saved AS SELECT key, data FROM whole_parts WHERE starts_with(key, 'k3/');
SELECT chunks > 3 AS several_chunks,
	   octet_length(data) = (SELECT blob_bytes FROM shards WHERE name = 'k3') AS whole
FROM whole_parts WHERE starts_with(key, 'k3/');
CREATE TEMP TABLE k3_blocks AS
SELECT off, lead(off, 1, octet_length(data)) OVER (ORDER BY off) AS next
FROM k3_saved, pg_temp.block_offsets(data) off;
SELECT count(*) >= 3 AS several_blocks,
	   bool_and(substring(data FROM off + 1 FOR 4) = '\x50535054'::bytea) AS each_starts_with_magic
FROM k3_blocks, k3_saved;
SELECT md5(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'), 1, 1), ','
					  ORDER BY key, val)) AS k3_written FROM k3_rows \gset
SELECT pg_temp.digest('k3') = :'k3_written' AS reads_back;
SELECT count(*) FROM listen('k3', 0);
CREATE FUNCTION pg_temp.restore_k3() RETURNS void LANGUAGE sql AS $$
	SELECT pg_temp.put_part(key, data) FROM k3_saved;
$$;
-- a flipped byte in the last block's frame (its last byte)
SELECT pg_temp.put_part(key, set_byte(data, (SELECT max(next) - 1 FROM k3_blocks),
		get_byte(data, (SELECT max(next) - 1 FROM k3_blocks)) # 255)) AS damaged
FROM k3_saved;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- the last block cut off
SELECT pg_temp.put_part(key, substring(data FROM 1 FOR (SELECT max(off) FROM k3_blocks))) AS damaged
FROM k3_saved;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- the first two blocks swapped: each is sound, their order is not
CREATE FUNCTION pg_temp.swap_first_blocks() RETURNS boolean LANGUAGE sql AS $$
	SELECT pg_temp.put_part(key,
		substring(data FROM (SELECT next FROM k3_blocks WHERE off = 0) + 1
				  FOR (SELECT next - off FROM k3_blocks ORDER BY off OFFSET 1 LIMIT 1)) ||
		substring(data FROM 1 FOR (SELECT next FROM k3_blocks WHERE off = 0)) ||
		substring(data FROM (SELECT next FROM k3_blocks ORDER BY off OFFSET 1 LIMIT 1) + 1))
	FROM k3_saved;
$$;
SELECT pg_temp.swap_first_blocks() AS damaged;
SELECT octet_length(data) = (SELECT octet_length(data) FROM k3_saved) AS same_length
FROM whole_parts WHERE starts_with(key, 'k3/');
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- whole again
SELECT pg_temp.digest('k3') = :'k3_written' AS reads_back;

-- damaged chunks: each is an error naming the chunk, for reads (which
-- fetch the chunks a block is in) and verify (which fetches them all)
CREATE TEMP TABLE k3_chunks AS
SELECT chunk, octet_length(data) AS len FROM blob WHERE starts_with(key, 'k3/');
-- a chunk missing in the middle
DELETE FROM blob WHERE starts_with(key, 'k3/') AND chunk = 1;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- the last chunk missing: the part is shorter than the state says
DELETE FROM blob WHERE starts_with(key, 'k3/') AND chunk = (SELECT max(chunk) FROM k3_chunks);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- a chunk in the middle one byte short, and one byte long
UPDATE blob SET data = substring(data FROM 2) WHERE starts_with(key, 'k3/') AND chunk = 1;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
UPDATE blob SET data = data || '\x00'::bytea WHERE starts_with(key, 'k3/') AND chunk = 1;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- a chunk past the last: the part is longer than the state says
INSERT INTO blob SELECT key, chunks, '\x00' FROM whole_parts WHERE starts_with(key, 'k3/');
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- two chunks swapped: each of the right size, the bytes not the part's
UPDATE blob b SET data = o.data FROM blob o
WHERE starts_with(b.key, 'k3/') AND o.key = b.key AND b.chunk IN (0, 1) AND o.chunk = 1 - b.chunk;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- the last of the chunks a read of the first block needs is missing, and
-- chunks after it are there: reads name it (they fetch only the block's
-- chunks), and so does verify
SELECT ((SELECT next FROM k3_blocks WHERE off = 0) + 32 - 1) / 7864 AS block_end_chunk \gset
SELECT :block_end_chunk > 0 AND :block_end_chunk < (SELECT max(chunk) FROM k3_chunks) AS inside;
DELETE FROM blob WHERE starts_with(key, 'k3/') AND chunk = :block_end_chunk;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- the last chunk longer than a chunk: verify names it, reads find the part
-- longer than the state says
UPDATE blob SET data = data || repeat('x', 7865 - octet_length(data))::bytea
WHERE starts_with(key, 'k3/') AND chunk = (SELECT max(chunk) FROM k3_chunks);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k3')$$);
SELECT * FROM pg_temp.problems('k3');
SELECT pg_temp.restore_k3();
-- a merge reads it a block at a time beside a later batch
SELECT pg_temp.digest('k3') = :'k3_written' AS reads_back;
SELECT compare_and_append('k3', '{00000001,zzz}'::text[], '{x,y}'::text[], '{2,2}', '{1,1}', 2, 3);
-- with the first two blocks swapped: a merge that may hand blocks on whole
-- leaves them undecoded, and their bounds give them away
SELECT pg_temp.swap_first_blocks() AS damaged;
SELECT pg_temp.err($$SELECT persist_sink.compact('k3')$$);
SELECT pg_temp.restore_k3();
SELECT compact('k3');
SELECT batches, parts FROM shards WHERE name = 'k3';
SELECT count(*) AS updates, count(*) FILTER (WHERE "time" = 2) AS at_2 FROM snapshot('k3');
SELECT * FROM verify('k3');
SELECT drop_shard('k3');

--
-- k4: a sound part of the same length copied over another: read to its
-- end, it is found not to be the part the state describes
--
SET persist_sink.inline_max_bytes = 0;
SELECT create_shard('k4');
SELECT compare_and_append('k4', '{a,b,c}'::text[], '{1,2,3}'::text[], '{0,0,0}', '{1,1,1}', 0, 1);
SELECT compare_and_append('k4', '{d,e,f}'::text[], '{4,5,6}'::text[], '{1,1,1}', '{1,1,1}', 1, 2);
RESET persist_sink.inline_max_bytes;
SELECT count(*) AS parts, count(DISTINCT octet_length(data)) AS lengths
FROM blob WHERE starts_with(key, 'k4/');
UPDATE blob SET data = (SELECT data FROM blob WHERE starts_with(key, 'k4/') ORDER BY key LIMIT 1)
WHERE starts_with(key, 'k4/');
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k4')$$);
SELECT * FROM pg_temp.problems('k4');
SELECT drop_shard('k4');

--
-- k5: a part whose state says it holds each (key, val) once (distinct),
-- its bytes replaced by those of a part of k6 that holds one at two
-- times: a read raises XX001 at the block that shows it
--
SET persist_sink.inline_max_bytes = 0;
SELECT create_shard('k5');
SELECT create_shard('k6');
SELECT compare_and_append('k5', '{a,b}'::text[], '{x,x}'::text[], '{0,1}', '{1,1}', 0, 2) IS NOT NULL AS appended;
SELECT compare_and_append('k6', '{a,a}'::text[], '{x,x}'::text[], '{0,1}', '{1,1}', 0, 2) IS NOT NULL AS appended;
RESET persist_sink.inline_max_bytes;
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k5')$$) AS k5_sound;
UPDATE blob SET data = (SELECT data FROM blob WHERE starts_with(key, 'k6/'))
WHERE starts_with(key, 'k5/');
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k5')$$);
SELECT pg_temp.err($$SELECT count(*) FROM persist_sink.snapshot('k6')$$) AS k6_sound;
SELECT drop_shard('k5');
SELECT drop_shard('k6');

--
-- garbage: a blob row a garbage row lists (a part a merge replaced, not yet
-- deleted) is not unreferenced; a listed part the state still references
-- is reported.  Compaction is off, so no compactor collects them.
--
SELECT key AS live_key FROM first_batch ORDER BY key LIMIT 1 \gset
INSERT INTO blob VALUES ('k1/0000000000000000000000000000dead', 0, '\x00');
SELECT * FROM pg_temp.problems('k1');
INSERT INTO garbage VALUES ('k1', 1000, '{k1/0000000000000000000000000000dead}');
SELECT * FROM verify('k1');
INSERT INTO garbage VALUES ('k1', 1001, ARRAY[:'live_key']);
SELECT * FROM pg_temp.problems('k1');
DELETE FROM garbage WHERE shard = 'k1' AND seqno = 1001;

--
-- after all that, k1 is whole
--
SELECT pg_temp.digest('k1') = :'healthy' AS healthy;
SELECT pg_temp.digest('k1', 5) = :'healthy5' AS healthy5;
SELECT * FROM verify('k1');
SELECT name, upper, since, batches FROM shards WHERE name IN ('k1', 'k2') ORDER BY name COLLATE "C";

-- a damaged shard can still be dropped, with its blob rows
UPDATE consensus SET state = '\x00' WHERE shard = 'k1';
UPDATE blob SET data = '\x' WHERE key = (SELECT early FROM victim);
SELECT drop_shard('k1');
SELECT count(DISTINCT key) AS blob_rows FROM blob WHERE starts_with(key, 'k1/');
SELECT count(*) AS garbage_rows FROM garbage WHERE shard = 'k1';
SELECT name FROM shards WHERE name LIKE 'k%' ORDER BY name COLLATE "C";
SELECT * FROM verify('k2');

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
