--
-- outcomes: what the caller of append() is told is what happened to its
-- write.  An error that ends a statement after an append of that
-- statement returned a time is 40003, never an error that reads as
-- "nothing written"; idempotency keys are matched by the SHA-256 of the
-- exact content, and keys recorded with the 16-byte checksum of earlier
-- libraries are still recognized.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

SELECT create_shard('oc');
-- the sink serves the database (its worker is up) before a timeout is set
SELECT append('oc', '{warm}'::text[], '{v}'::text[], '{1}') > 0 AS served;

-- A statement timeout that fires after append() returned: 40003, and the
-- write is there once.  (Only the SQLSTATE is shown: the DETAIL names the
-- time.)
\set VERBOSITY sqlstate
SET statement_timeout = '300ms';
SELECT append('oc', '{late}'::text[], '{v}'::text[], '{1}') > 0 AS written, pg_sleep(5);
RESET statement_timeout;
-- a second append of the same statement that fails (an unknown shard):
-- 40003 too, since the first one's write stays
SELECT append('oc', '{first}'::text[], '{v}'::text[], '{1}') > 0,
	   append('oc_nope', '{second}'::text[], '{v}'::text[], '{1}') > 0;
-- any error later in the same statement is, for the same reason
SELECT append('oc', '{then}'::text[], '{v}'::text[], '{1}') > 0 AS written,
	   1 / (random() * 0)::int AS boom;
-- an error of a later statement is its own
SELECT 1 / (random() * 0)::int AS boom;
-- an append that fails alone keeps its SQLSTATE: nothing was written
SELECT append('oc_nope', '{alone}'::text[], '{v}'::text[], '{1}');
\set VERBOSITY default
SELECT encode(key, 'escape') AS key, diff FROM snapshot('oc') ORDER BY key;

-- The key's digest is the SHA-256 of the write's sorted, consolidated
-- updates, each laid out as key length (4 bytes), val length (4), diff
-- (8), key, val, in the server's byte order (little-endian here).
CREATE FUNCTION pg_temp.le(v bigint, n int) RETURNS bytea LANGUAGE sql AS $$
	SELECT string_agg(decode(lpad(to_hex((v >> (8 * i)) & 255), 2, '0'), 'hex'), ''::bytea ORDER BY i)
	FROM generate_series(0, n - 1) i
$$;
SELECT append('oc', '{b,a,a}'::text[], '{2,1,1}'::text[], '{5,1,2}', 'sha-1') AS t_sha \gset
SELECT octet_length(digest) AS digest_bytes,
	   digest = sha256(pg_temp.le(1, 4) || pg_temp.le(1, 4) || pg_temp.le(3, 8) || 'a'::bytea || '1'::bytea ||
					   pg_temp.le(1, 4) || pg_temp.le(1, 4) || pg_temp.le(5, 8) || 'b'::bytea || '2'::bytea)
		   AS sha256_of_content
FROM persist_sink.idempotency WHERE key = 'sha-1';
SELECT append('oc', '{a,b}'::text[], '{1,2}'::text[], '{3,5}', 'sha-1') = :t_sha AS same_content_same_time;
SELECT pg_temp.err($$SELECT persist_sink.append('oc', '{a,b}'::text[], '{1,2}'::text[], '{3,6}', 'sha-1')$$);

-- A key recorded by an earlier library, with its 16-byte checksum
-- (CRC-32C of every key length, key and diff; CRC-32C of every val length
-- and val; the sum of key and val lengths plus one per update, 8 bytes): a
-- retry of the same content returns its time, other content is PS005.
CREATE FUNCTION pg_temp.crc32c(b bytea) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	crc bigint := 4294967295;
BEGIN
	FOR i IN 0 .. octet_length(b) - 1 LOOP
		crc := crc # get_byte(b, i);
		FOR j IN 1 .. 8 LOOP
			crc := CASE WHEN crc & 1 = 1 THEN (crc >> 1) # 2197175160 ELSE crc >> 1 END;
		END LOOP;
	END LOOP;
	RETURN crc # 4294967295;
END
$$;
INSERT INTO persist_sink.idempotency (shard, key, time, digest, written_at)
SELECT 'oc', 'legacy-1', 42,
	   pg_temp.le(pg_temp.crc32c(pg_temp.le(1, 4) || 'k'::bytea || pg_temp.le(7, 8)), 4) ||
	   pg_temp.le(pg_temp.crc32c(pg_temp.le(2, 4) || 'vv'::bytea), 4) ||
	   pg_temp.le(1 + 2 + 1, 8),
	   now();
SELECT seqno AS seqno_before FROM shards WHERE name = 'oc' \gset
SELECT append('oc', '{k}'::text[], '{vv}'::text[], '{7}', 'legacy-1') AS legacy_time;
SELECT pg_temp.err($$SELECT persist_sink.append('oc', '{k}'::text[], '{vv}'::text[], '{8}', 'legacy-1')$$);
SELECT seqno = :seqno_before AS nothing_written FROM shards WHERE name = 'oc';

-- A keyed call cancelled before it looked its key up (here: a statement
-- timeout while it reads and sorts 300,000 updates, noticed when it checks
-- that its transaction, which wrote another shard, does not hold this
-- one) is 40003, not a bare 57014: an earlier call with its key may have
-- been written, so the caller must retry with the key.  The retry writes
-- it once.
CREATE TEMP TABLE big AS
SELECT array_agg(md5(i::text)) AS keys, array_agg(md5((i * 7)::text)) AS vals,
	   array_agg(1::bigint) AS diffs
FROM generate_series(1, 300000) AS i;
SELECT create_shard('oc_other');
BEGIN;
SELECT compare_and_append('oc_other', '{x}'::text[], '{y}'::text[], '{0}', '{1}', 0, 1) > 0 AS wrote_other;
SET LOCAL statement_timeout = '20ms';
SELECT pg_temp.err($$SELECT persist_sink.append('oc', keys, vals, diffs, 'big-1') FROM pg_temp.big$$);
ROLLBACK;
SELECT append('oc', keys, vals, diffs, 'big-1') > 0 AS retried FROM big;
SELECT count(*) AS big_rows FROM snapshot('oc') WHERE length(key) = 32;

-- A keyed call cancelled after it found its key unused and not in flight
-- (here: a statement timeout while it waits for compaction at
-- persist_sink.stop_batches) says so: its 57014 carries the DETAIL that
-- nothing was written, which a bare 57014 does not.  A new session sees
-- the reloaded setting (this one may not have had its reload signal yet).
ALTER SYSTEM SET persist_sink.stop_batches = 2;
SELECT pg_reload_conf();
\c
SET search_path = persist_sink, public;
SHOW persist_sink.stop_batches;
SELECT create_shard('oc_stall');
SELECT compare_and_append('oc_stall', '{a}'::text[], '{v}'::text[], ARRAY[b], '{1}', b, b + 1) > 0 AS batch
FROM generate_series(0, 1) AS b;
SET statement_timeout = '300ms';
SELECT append('oc_stall', '{s}'::text[], '{v}'::text[], '{1}', 'stall-1');
RESET statement_timeout;
SELECT count(*) AS stall_rows FROM snapshot('oc_stall') WHERE key = 's';
ALTER SYSTEM RESET persist_sink.stop_batches;
SELECT pg_reload_conf();
SELECT drop_shard('oc_stall');

SELECT drop_shard('oc');
SELECT drop_shard('oc_other');
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
