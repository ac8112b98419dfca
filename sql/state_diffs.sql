--
-- state_diffs: a compare-and-swap writes the diff of the state it changes
-- (consensus_diff), and now and then the whole state as the consensus
-- row's rollup.  The state rebuilt from a rollup and its diffs is the
-- state itself: its content, its history and verify() are as they would
-- be; a damaged or missing diff is data_corrupted (XX001); drop_shard
-- removes the diffs; stats.state_bytes counts what was written.
--
CREATE EXTENSION IF NOT EXISTS persist_sink;
\i sql/include/no_compaction.psql
\i sql/include/err.psql
\i sql/include/digest.psql

-- The seqno of a shard's rollup: bytes 8..15 of the encoded state.  (In
-- public, not pg_temp: they outlive the \c below.)
CREATE FUNCTION public.sd_rollup_seqno(s text) RETURNS bigint LANGUAGE sql AS $$
	SELECT sum(get_byte(c.state, 8 + i)::bigint << (8 * i))::bigint
	FROM persist_sink.consensus c, generate_series(0, 6) i WHERE c.shard = s
$$;
-- Appends n updates to a new shard s at [0, 1) in parts of about 1 kB.
CREATE FUNCTION public.sd_append_many(s text, n int) RETURNS bigint LANGUAGE sql
SET persist_sink.blob_target_size = '1kB' AS $$
	SELECT persist_sink.compare_and_append(s,
		ARRAY(SELECT convert_to('key' || i, 'UTF8') FROM generate_series(1, n) i),
		ARRAY(SELECT convert_to(repeat('v', i % 13), 'UTF8') FROM generate_series(1, n) i),
		array_fill(0::bigint, ARRAY[n]), array_fill(1::bigint, ARRAY[n]), 0, 1)
$$;
-- The diffs a shard's log holds: how many, first and last seqno.
CREATE FUNCTION public.sd_diffs(s text, OUT n bigint, OUT first bigint, OUT last bigint)
LANGUAGE sql AS $$
	SELECT count(*), min(seqno), max(seqno) FROM persist_sink.consensus_diff WHERE shard = s
$$;

--
-- a small state is written whole: no diff
--
SELECT create_shard('d_small');
SELECT compare_and_append('d_small', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 1);
SELECT compare_and_append('d_small', '{b}'::text[], '{1}'::text[], '{1}', '{1}', 1, 2);
SELECT seqno, sd_rollup_seqno('d_small') AS rollup FROM shards WHERE name = 'd_small';
SELECT * FROM sd_diffs('d_small');
-- a row whose seqno falls behind its rollup's is corrupted (XX001), for
-- reads and writes alike; put back, the shard is whole
UPDATE consensus SET seqno = seqno - 1 WHERE shard = 'd_small';
SELECT pg_temp.err($$SELECT persist_sink.shard_upper('d_small')$$);
SELECT pg_temp.err($$SELECT persist_sink.compare_and_append('d_small', '{c}'::text[], '{1}'::text[], '{2}', '{1}', 2, 3)$$);
UPDATE consensus SET seqno = seqno + 1 WHERE shard = 'd_small';
SELECT shard_upper('d_small'), count(*) FROM snapshot('d_small');

--
-- a state of many parts: each further CaS writes its diff
--
SELECT create_shard('d_big');
SET persist_sink.inline_max_bytes = 0;
SELECT sd_append_many('d_big', 2000);
SELECT parts > 20 AS many_parts, octet_length(c.state) > 1024 AS state_over_1kb,
	   sd_rollup_seqno('d_big') = s.seqno AS written_whole
FROM shards s JOIN consensus c ON c.shard = s.name WHERE s.name = 'd_big';
SELECT stats_reset();
-- 20 small appends, a since move and an empty append
SELECT count(*) FROM generate_series(1, 20) t,
	LATERAL (SELECT compare_and_append('d_big', ARRAY['x' || t], '{v}'::text[], ARRAY[t::bigint],
									   '{1}', t, t + 1)) c;
SELECT downgrade_since('d_big', 5);
SELECT compare_and_append('d_big', '{}'::text[], '{}'::text[], '{}', '{}', 21, 25) AS seqno \gset
SELECT :seqno AS seqno, sd_rollup_seqno('d_big') AS rollup, d.*
FROM sd_diffs('d_big') d;
-- the head row kept its rollup; diffs are small, whatever the state's size
SELECT appends, state_bytes / appends < 400 AS small_diffs,
	   (SELECT max(octet_length(diff)) FROM consensus_diff WHERE shard = 'd_big') < 400 AS each_small
FROM stats WHERE shard = 'd_big';
SELECT upper, since, batches, updates FROM shards WHERE name = 'd_big';
SELECT count(*), sum(diff) FROM snapshot('d_big');
SELECT encode(key, 'escape') AS key, "time", diff FROM listen('d_big', 18) ORDER BY "time";
SELECT * FROM verify('d_big');

-- compaction swaps a merge in by a diff too, and the content is unchanged
SELECT pg_temp.digest('d_big') AS before_compact \gset
SELECT pg_temp.digest('d_big', 10) AS before_compact10 \gset
SELECT compact('d_big');
SELECT batches, since FROM shards WHERE name = 'd_big';
SELECT pg_temp.digest('d_big') = :'before_compact' AS same,
	   pg_temp.digest('d_big', 10) = :'before_compact10' AS same10;
SELECT * FROM verify('d_big');

--
-- the log stays short: a rollup at least every 1024 diffs, and before the
-- diffs since the last one outweigh the state; it drops the diffs before it
--
SELECT shard_upper('d_big') AS u, seqno AS s0 FROM shards WHERE name = 'd_big' \gset
SELECT count(*) FROM generate_series(0, 299) t,
	LATERAL (SELECT compare_and_append('d_big', ARRAY['y' || t], '{v}'::text[],
									   ARRAY[:u + t], '{1}', :u + t, :u + t + 1)) c;
-- 300 diffs are fewer than 1024: a rollup among them came from their weight
SELECT d.n <= 1024 AS short_log, d.n = s.seqno - sd_rollup_seqno('d_big') AS log_is_tail,
	   coalesce(d.first, s.seqno + 1) = sd_rollup_seqno('d_big') + 1 AS log_follows_rollup,
	   sd_rollup_seqno('d_big') > :s0 AS rolled_up_by_weight
FROM shards s JOIN consensus c ON c.shard = s.name, sd_diffs('d_big') d
WHERE s.name = 'd_big';
SELECT count(*), sum(diff) FROM snapshot('d_big');
SELECT * FROM verify('d_big');

-- a state of 300 parts takes more than 128 small diffs before a rollup
SELECT create_shard('d_wide');
SELECT sd_append_many('d_wide', 30000);
SELECT count(*) FROM generate_series(1, 200) t,
	LATERAL (SELECT compare_and_append('d_wide', ARRAY['x' || t], '{v}'::text[], ARRAY[t::bigint],
									   '{1}', t, t + 1)) c;
SELECT parts > 300 AS many_parts, d.n = 200 AS all_diffs, s.seqno - sd_rollup_seqno('d_wide') AS since_rollup
FROM shards s, sd_diffs('d_wide') d WHERE s.name = 'd_wide';
SELECT count(*), sum(diff) FROM snapshot('d_wide');
SELECT * FROM verify('d_wide');
SELECT drop_shard('d_wide');

--
-- a damaged diff, a missing one: XX001, for reads and for writes, in every
-- session that rebuilds the state from its rows.  The session that wrote
-- the last CaS holds the state in memory and reads on without the diff;
-- verify() reads the stored rows and reports the damage there too.
--
SELECT shard_upper('d_big') AS u \gset
SELECT compare_and_append('d_big', '{z1}'::text[], '{v}'::text[], ARRAY[:u], '{1}', :u, :u + 1)
	AS last_seqno \gset
SELECT sd_rollup_seqno('d_big') < :last_seqno AS has_diff;
CREATE TABLE public.sd_saved_diff AS SELECT * FROM consensus_diff WHERE shard = 'd_big' AND seqno = :last_seqno;
UPDATE consensus_diff SET diff = set_byte(diff, 30, get_byte(diff, 30) # 1)
WHERE shard = 'd_big' AND seqno = :last_seqno;
SELECT shard_upper('d_big') = :u + 1 AS read_from_memory;
SELECT count(*) AS problems FROM pg_temp.err($$SELECT * FROM persist_sink.verify('d_big')$$) e
WHERE e LIKE 'XX001%';
\c
SET search_path = persist_sink, public;
\i sql/include/err.psql
SELECT regexp_replace(pg_temp.err($$SELECT persist_sink.shard_upper('d_big')$$), '\m[0-9]+\M', 'N', 'g');
SELECT regexp_replace(pg_temp.err(format($$SELECT persist_sink.compare_and_append('d_big', '{z2}'::text[],
	'{v}'::text[], ARRAY[%s + 1], '{1}', %s + 1, %s + 2)$$, :u, :u, :u)), '\m[0-9]+\M', 'N', 'g');
DELETE FROM consensus_diff WHERE shard = 'd_big' AND seqno = :last_seqno;
SELECT regexp_replace(pg_temp.err($$SELECT persist_sink.shard_upper('d_big')$$), '\m[0-9]+\M', 'N', 'g');
SELECT regexp_replace(pg_temp.err($$SELECT count(*) FROM persist_sink.shards$$), '\m[0-9]+\M', 'N', 'g');
-- a diff that is another seqno's
INSERT INTO consensus_diff SELECT shard, seqno, (SELECT diff FROM consensus_diff
	WHERE shard = 'd_big' AND seqno = :last_seqno - 1) FROM public.sd_saved_diff;
SELECT regexp_replace(pg_temp.err($$SELECT persist_sink.shard_upper('d_big')$$), '\m[0-9]+\M', 'N', 'g');
DELETE FROM consensus_diff WHERE shard = 'd_big' AND seqno = :last_seqno;
INSERT INTO consensus_diff SELECT * FROM public.sd_saved_diff;
DROP TABLE public.sd_saved_diff;
SELECT shard_upper('d_big') = :u + 1 AS healthy;
SELECT * FROM verify('d_big');

--
-- drop_shard removes the shard's diffs; a new shard of that name starts
-- with none
--
SELECT drop_shard('d_big');
SELECT * FROM sd_diffs('d_big');
SELECT create_shard('d_big');
SELECT compare_and_append('d_big', '{a}'::text[], '{1}'::text[], '{0}', '{1}', 0, 1);
SELECT count(*) FROM snapshot('d_big');
SELECT drop_shard('d_big');
SELECT drop_shard('d_small');
SELECT count(*) AS diff_rows FROM consensus_diff WHERE shard IN ('d_big', 'd_small');

RESET persist_sink.inline_max_bytes;
DROP FUNCTION public.sd_rollup_seqno(text), public.sd_diffs(text),
	public.sd_append_many(text, int);
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
