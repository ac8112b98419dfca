-- The reader drain benchmark's functions (test/bench/reader_drain): a
-- shard of random 16-byte keys and vals built by appends of one time
-- each, a heap table of the same rows, and a drain of the shard through
-- read_next and advance_reader, one transaction per step.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS bench;

-- Appends `appends` writes of `rows_each` random updates, write k at time
-- k, to a new shard (and the same rows to the heap table heap_tbl).
CREATE OR REPLACE PROCEDURE bench.build_drain_shard(shard text, heap_tbl text,
													appends int, rows_each int)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM persist_sink.create_shard(shard);
	EXECUTE format('DROP TABLE IF EXISTS %s', heap_tbl);
	EXECUTE format('CREATE TABLE %s (key bytea, val bytea, "time" bigint, diff bigint)',
				   heap_tbl);
	COMMIT;
	FOR k IN 0 .. appends - 1 LOOP
		EXECUTE format('WITH r AS MATERIALIZED (
							SELECT decode(md5(random()::text), ''hex'') AS key,
								   decode(md5(random()::text), ''hex'') AS val
							FROM generate_series(1, $1)),
						  h AS (INSERT INTO %s SELECT key, val, $2, 1 FROM r)
						SELECT persist_sink.compare_and_append($3, array_agg(key), array_agg(val),
							array_fill($2::bigint, ARRAY[$1]), array_fill(1::bigint, ARRAY[$1]),
							$2, $2 + 1) FROM r', heap_tbl)
			USING rows_each, k::bigint, shard;
		COMMIT;
	END LOOP;
END
$$;

-- Drains a reader in steps of max_updates, one transaction per step, and
-- raises a NOTICE per step (its updates, last time, milliseconds) and one
-- with the total.
CREATE OR REPLACE PROCEDURE bench.drain(shard text, reader text, max_updates bigint)
LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
	pos bigint;
	total bigint := 0;
	steps int := 0;
	t0 timestamptz := clock_timestamp();
	t timestamptz;
	ms numeric;
BEGIN
	LOOP
		t := clock_timestamp();
		SELECT count(*), max("time") INTO n, pos
			FROM persist_sink.read_next(shard, reader, max_updates);
		EXIT WHEN pos IS NULL;
		PERFORM persist_sink.advance_reader(shard, reader, pos);
		COMMIT;
		ms := round(extract(epoch FROM clock_timestamp() - t) * 1000, 1);
		total := total + n;
		steps := steps + 1;
		RAISE NOTICE 'step % : % updates to time % in % ms', steps, n, pos, ms;
	END LOOP;
	RAISE NOTICE 'drained % updates in % steps in % ms', total, steps,
		round(extract(epoch FROM clock_timestamp() - t0) * 1000, 1);
END
$$;
