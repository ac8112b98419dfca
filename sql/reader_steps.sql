--
-- reader_steps: read_next's shortcuts (the cut taken from the batches'
-- counts, a window read once, the reader cache of a window read far
-- behind) return exactly what listen() over read_next's window returns,
-- step after step: on a compacted shard, on one of many batches (of
-- several parts each), on a mix, with negative diffs, equal (key, val)
-- at several times, the cache off, the shard compacted or appended to
-- between steps, and from since - 1 once since has moved.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

-- Appends n updates at time t as the batch [t, t + 1): keys k<i % 97>,
-- vals v<i % 3>, diffs -1 for every fifth, else 1 (so equal (key, val)
-- come back at several times, some negative)
CREATE FUNCTION pg_temp.put(s text, t int, n int) RETURNS void LANGUAGE sql AS $$
	SELECT FROM (SELECT persist_sink.compare_and_append(s,
		array_agg('k' || ((i * 7 + t) % 97)::text ORDER BY i),
		array_agg('v' || (i % 3)::text ORDER BY i),
		array_fill(t::bigint, ARRAY[n]),
		array_agg(CASE WHEN i % 5 = 0 THEN -1 ELSE 1 END::bigint ORDER BY i), t, t + 1)
	FROM generate_series(1, n) i) a
$$;

-- The window read_next reads from position p with max_updates m, derived
-- from batches() and listen(): the batches' update counts bound it (the
-- first batch by which they pass m ends it), then it ends at the first
-- time by which listen() has m updates
CREATE FUNCTION pg_temp.expected_until(s text, p bigint, m bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	si bigint := persist_sink.shard_since(s);
	up bigint := persist_sink.shard_upper(s);
	sum bigint := 0;
	b record;
	u bigint;
	cut bigint;
BEGIN
	u := up;
	FOR b IN SELECT * FROM persist_sink.batches(s) ORDER BY lower LOOP
		CONTINUE WHEN p >= si AND b.upper <= p + 1;
		sum := sum + b.updates;
		IF sum > m THEN
			u := b.upper;
			IF p < si THEN
				u := least(up, greatest(u, si + 1));
			END IF;
			EXIT;
		END IF;
	END LOOP;
	SELECT min("time") INTO cut FROM (
		SELECT "time", sum(n) OVER (ORDER BY "time") AS cum
		FROM (SELECT "time", count(*) AS n FROM persist_sink.listen(s, p, u) GROUP BY "time") c) w
	WHERE cum >= m;
	RETURN coalesce(cut + 1, u);
END
$$;

-- Drains reader r of shard s in steps of m (one transaction each when
-- called from a procedure: here one statement), comparing each step with
-- listen(); returns steps, updates read and mismatched rows
CREATE FUNCTION pg_temp.drain(s text, r text, m bigint, max_steps int DEFAULT 1000,
							  OUT steps int, OUT updates bigint, OUT mismatched bigint)
LANGUAGE plpgsql AS $$
DECLARE
	p bigint;
	u bigint;
	n bigint;
	bad bigint;
	last bigint;
BEGIN
	steps := 0; updates := 0; mismatched := 0;
	LOOP
		SELECT position INTO p FROM persist_sink.readers WHERE shard = s AND reader = r;
		EXIT WHEN p >= persist_sink.shard_upper(s) - 1 OR steps >= max_steps;
		u := pg_temp.expected_until(s, p, m);
		CREATE TEMP TABLE got AS SELECT * FROM persist_sink.read_next(s, r, m);
		SELECT count(*) INTO bad FROM (
			(SELECT * FROM got EXCEPT ALL SELECT * FROM persist_sink.listen(s, p, u))
			UNION ALL
			(SELECT * FROM persist_sink.listen(s, p, u) EXCEPT ALL SELECT * FROM got)) d;
		SELECT count(*), max("time") INTO n, last FROM got;
		DROP TABLE got;
		mismatched := mismatched + bad;
		updates := updates + n;
		steps := steps + 1;
		PERFORM persist_sink.advance_reader(s, r, u - 1);
	END LOOP;
END
$$;

--
-- A compacted shard: one batch of 40 times, every part holding them all
--
SELECT create_shard('rs_c');
SELECT pg_temp.put('rs_c', t, 60) FROM generate_series(0, 39) t;
SELECT compact('rs_c');
SELECT count(*) AS batches, sum(updates) AS updates FROM batches('rs_c');
SELECT create_reader('rs_c', 'a');
SELECT * FROM pg_temp.drain('rs_c', 'a', 100);
-- again from the start, in steps that do not fall on the cache's
SELECT create_reader('rs_c', 'b');
SELECT * FROM pg_temp.drain('rs_c', 'b', 100, 3);
SELECT * FROM pg_temp.drain('rs_c', 'b', 250);
-- one update a step: every time alone
SELECT create_reader('rs_c', 'c');
SELECT * FROM pg_temp.drain('rs_c', 'c', 1);
-- a cache smaller than the window: read twice, steps kept up to its size
SET persist_sink.reader_cache = '16kB';
SELECT create_reader('rs_c', 'e');
SELECT * FROM pg_temp.drain('rs_c', 'e', 100);
RESET persist_sink.reader_cache;
-- the cache off: the window read once, kept below the cut
SET persist_sink.reader_cache = 0;
SELECT create_reader('rs_c', 'd');
SELECT * FROM pg_temp.drain('rs_c', 'd', 70);
RESET persist_sink.reader_cache;
-- the same rows as listen() in read_next_rows' typed form too
SELECT create_shard('rs_typed', 'int4');
SELECT FROM compare_and_append_rows('rs_typed', ARRAY(SELECT i % 50 FROM generate_series(1, 400) i),
	ARRAY(SELECT (i / 10)::bigint FROM generate_series(1, 400) i), NULL, 0, 41);
SELECT compact('rs_typed');
SELECT create_reader('rs_typed', 't');
SELECT count(*) AS rows, max("time") AS last FROM read_next_rows('rs_typed', 't', NULL::int4, 45);
SELECT advance_reader('rs_typed', 't', 4);
SELECT count(*) AS rows, min("time") AS first, max("time") AS last,
	count(*) = (SELECT count(*) FROM listen('rs_typed', 4, 10)) AS same_as_listen
FROM read_next_rows('rs_typed', 't', NULL::int4, 45);

-- more times than the cache keeps a segment each for: read twice
SELECT create_shard('rs_t');
SELECT FROM compare_and_append('rs_t', ARRAY(SELECT 'k' || (i % 37) FROM generate_series(1, 1500) i),
	ARRAY(SELECT 'v' || (i % 2) FROM generate_series(1, 1500) i),
	ARRAY(SELECT (i % 300)::bigint FROM generate_series(1, 1500) i),
	ARRAY(SELECT CASE WHEN i % 7 = 0 THEN -2 ELSE 1 END::bigint FROM generate_series(1, 1500) i), 0, 300);
SELECT compact('rs_t');
SELECT create_reader('rs_t', 'a');
SELECT * FROM pg_temp.drain('rs_t', 'a', 40);
-- keys and vals of 255, 256 and 70,000 bytes, and large diffs: the cache's
-- files give each length in one byte or four, each diff but 1 in full
SELECT create_shard('rs_w');
SELECT FROM compare_and_append('rs_w',
	ARRAY(SELECT repeat(chr(97 + i % 3), (ARRAY[255, 256, 70000, 1])[1 + i % 4])::bytea
		  FROM generate_series(1, 48) i),
	ARRAY(SELECT repeat(chr(98 + i % 5), (ARRAY[1, 256, 255, 70000])[1 + i % 4])::bytea
		  FROM generate_series(1, 48) i),
	ARRAY(SELECT (i % 12)::bigint FROM generate_series(1, 48) i),
	ARRAY(SELECT CASE WHEN i % 6 = 0 THEN 9223372036854775807 ELSE 1 END FROM generate_series(1, 48) i),
	0, 12);
SELECT compact('rs_w');
SELECT create_reader('rs_w', 'a');
SELECT * FROM pg_temp.drain('rs_w', 'a', 3);
SET persist_sink.reader_cache = '64kB';
SELECT create_reader('rs_w', 'b');
SELECT * FROM pg_temp.drain('rs_w', 'b', 3);
RESET persist_sink.reader_cache;

--
-- Many batches of several parts each: the cut from their counts
--
SET persist_sink.blob_target_size = 1024;
SET persist_sink.inline_max_bytes = 0;
SELECT create_shard('rs_b');
SELECT pg_temp.put('rs_b', t, 60) FROM generate_series(0, 29) t;
SELECT count(*) AS batches, sum(parts) > count(*) AS several_parts FROM batches('rs_b');
SELECT create_reader('rs_b', 'a');
SELECT * FROM pg_temp.drain('rs_b', 'a', 100);
SELECT create_reader('rs_b', 'b');
SELECT * FROM pg_temp.drain('rs_b', 'b', 60);

--
-- A mix: a compacted batch, then batches; the shard changes between steps
--
SELECT create_shard('rs_m');
SELECT pg_temp.put('rs_m', t, 50) FROM generate_series(0, 19) t;
SELECT compact('rs_m');
SELECT pg_temp.put('rs_m', t, 50) FROM generate_series(20, 29) t;
SELECT create_reader('rs_m', 'a');
SELECT * FROM pg_temp.drain('rs_m', 'a', 80, 3);
-- appended to: the cached steps still hold
SELECT pg_temp.put('rs_m', t, 50) FROM generate_series(30, 34) t;
SELECT * FROM pg_temp.drain('rs_m', 'a', 80, 2);
-- compacted: the cache is read again from the new batch
SELECT compact('rs_m');
SELECT * FROM pg_temp.drain('rs_m', 'a', 80);
-- since moved: a reader at since - 1 reads the history before it at since
SELECT downgrade_since('rs_m', 10);
SELECT compact('rs_m');
SELECT create_reader('rs_m', 'b');
SELECT * FROM pg_temp.drain('rs_m', 'b', 120);
SELECT pg_temp.put('rs_m', t, 50) FROM generate_series(35, 44) t;
SELECT downgrade_since('rs_m', 12);
SELECT create_reader('rs_m', 'c');
SELECT * FROM pg_temp.drain('rs_m', 'c', 90);

RESET persist_sink.blob_target_size;
RESET persist_sink.inline_max_bytes;
SELECT drop_shard(s) FROM unnest(ARRAY['rs_c', 'rs_typed', 'rs_t', 'rs_w', 'rs_b', 'rs_m']) s;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
