/* persist_sink--0.6--0.7.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.7'" to load this file. \quit

-- 0.7 adds only comments: what psql's \df+, \dv+ and \dt+ show of every
-- function, view and storage table.  (Every name is qualified.)
COMMENT ON FUNCTION @extschema@.create_shard(text, regtype) IS
	'Creates an empty shard (upper 0, since 0), optionally recording the row type its typed functions use; 42710 if the name is taken';
COMMENT ON FUNCTION @extschema@.drop_shard(text) IS
	'Drops a shard: its state, its parts and its idempotency keys';
COMMENT ON FUNCTION @extschema@.shard_upper(text) IS
	'The shard''s write frontier: every time below it is complete';
COMMENT ON FUNCTION @extschema@.shard_since(text) IS
	'The shard''s read frontier: reads as of an earlier time are refused (PS003)';
COMMENT ON FUNCTION @extschema@.downgrade_since(text, bigint) IS
	'Moves the shard''s since forward (never back, never past upper), allowing history before it to be compacted';
COMMENT ON FUNCTION @extschema@.shard_info() IS
	'One row per shard of this database (what the view shards shows)';
COMMENT ON VIEW @extschema@.shards IS
	'Every shard of this database: seqno, upper, since, batches, parts, bytes, updates, batches in flight and sorted runs';
COMMENT ON FUNCTION @extschema@.batches(text) IS
	'The shard''s batches: interval, since, parts, updates, encoded bytes, whether inline';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint) IS
	'Appends updates as the batch [expected_upper, new_upper) in the caller''s transaction; PS001 if the upper is not expected_upper; returns the new seqno';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint) IS
	'compare_and_append with text keys and vals';
COMMENT ON FUNCTION @extschema@.append(text, bytea[], bytea[], bigint[], text) IS
	'Appends updates through the shared-batch sink, outside the caller''s transaction; returns the time they were written at once durable. 40003 means maybe written: retry with the same idempotency key';
COMMENT ON FUNCTION @extschema@.append(text, text[], text[], bigint[], text) IS
	'append with text keys and vals';
COMMENT ON FUNCTION @extschema@.wait_upper(text, bigint, interval) IS
	'Waits until the shard''s upper passes a time (or the timeout) and returns it';
COMMENT ON FUNCTION @extschema@.snapshot(text, bigint) IS
	'The collection as of a time (default upper - 1), consolidated, every time advanced to it';
COMMENT ON FUNCTION @extschema@.listen(text, bigint, bigint) IS
	'The updates with as_of < time < until (default upper), consolidated per (key, val, time); as_of = since - 1 reads everything';
COMMENT ON FUNCTION @extschema@.compact(text) IS
	'Merges every batch of the shard into one, now, in the caller''s transaction';
COMMENT ON FUNCTION @extschema@.verify(text) IS
	'Checks that every part the shard''s state references exists and decodes and that no blob row is unreferenced; no rows means healthy';
COMMENT ON FUNCTION @extschema@.stats() IS
	'Counters per shard, in shared memory (what the view stats shows)';
COMMENT ON VIEW @extschema@.stats IS
	'Counters per shard of this database: appends, updates, shared and own writes, parts, blob puts and bytes, CaS attempts and mismatches, compactions, time slowed and stalled';
COMMENT ON FUNCTION @extschema@.compaction_progress() IS
	'One row per merge in progress (what the view compaction_progress shows)';
COMMENT ON VIEW @extschema@.compaction_progress IS
	'Every merge in progress: the process, the shard, its phase and how far it got';
COMMENT ON FUNCTION @extschema@.sink_memory() IS
	'What the sink''s staging arena holds now: bytes of small writes and of parts, intervals in use and intervals waiting for a held state row';
COMMENT ON FUNCTION @extschema@.stats_info() IS
	'Entries of the stats table, its bound (persist_sink.stats_max) and the updates left uncounted because it was full';
COMMENT ON FUNCTION @extschema@.stats_reset() IS
	'Resets the counters of every shard of this database';
COMMENT ON FUNCTION @extschema@.append_rows(text, anyarray, bigint[], text) IS
	'append of typed rows (each stored as its binary send form); the array''s element type must be the shard''s row type';
COMMENT ON FUNCTION @extschema@.compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint) IS
	'compare_and_append of typed rows';
COMMENT ON FUNCTION @extschema@.snapshot_rows(text, anyelement, bigint) IS
	'The typed rows of the collection as of a time, each diff times; PS004 for a negative multiplicity';
COMMENT ON FUNCTION @extschema@.listen_rows(text, anyelement, bigint, bigint) IS
	'The typed rows with as_of < time < until, with their time and diff';
COMMENT ON TABLE @extschema@.blob IS
	'Storage: the parts of every shard, as rows of 7864-byte chunks (written only by the extension)';
COMMENT ON TABLE @extschema@.consensus IS
	'Storage: one row per shard, its seqno and state rollup, changed only by compare-and-swap on seqno';
COMMENT ON TABLE @extschema@.consensus_diff IS
	'Storage: the state diffs logged after each shard''s rollup';
COMMENT ON TABLE @extschema@.idempotency IS
	'Storage: the idempotency keys of committed appends, with the SHA-256 of their content and their time';
