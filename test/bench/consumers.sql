-- The consumer workload's functions (test/bench/run, --only consumers):
-- one consumer step of each system, one transaction each (the client calls
-- it in autocommit: one round trip).  Each writes what it consumes into the
-- consumer's own plain table TBL (key bytea, val bytea, diff bigint) in the
-- transaction that acknowledges it, and returns the rows it stored (n) and
-- the position it acknowledged (pos: what the driver's latency figures map
-- the producers' calls to; NULL when it stored nothing).
--
-- The per-system setup (shard and readers, queue and consumers, event table
-- and offsets) is made by run before each system's measurement.
\set ON_ERROR_STOP on
SET client_min_messages = warning;

-- persist_sink readers: every update after the reader's position (whole
-- times, up to about max_updates; waits up to timeout for some without
-- polling), stored, and the reader advanced to the last time read.
-- pos: that time (the sink's time, ms since the epoch).
CREATE OR REPLACE FUNCTION bench.consume_sink(shard text, reader text, tbl text,
											  max_updates bigint, timeout interval,
											  OUT n bigint, OUT pos bigint)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('WITH r AS (SELECT * FROM persist_sink.read_next($1, $2, $3, $4)),
	                     ins AS (INSERT INTO %s SELECT key, val, diff FROM r)
	                SELECT count(*), max("time") FROM r', tbl)
		INTO n, pos USING shard, reader, max_updates, timeout;
	IF pos IS NOT NULL THEN
		PERFORM persist_sink.advance_reader(shard, reader, pos);
	END IF;
END
$$;

-- PgQ: the consumer's next batch (the events between two ticks), its
-- events stored, the batch finished.  The key is the producer's call id
-- (ev_extra3) in front of the batch's key (ev_extra1), as the other systems
-- store it.  pos: the batch's end tick.
CREATE OR REPLACE FUNCTION bench.consume_pgq(queue text, consumer text, tbl text,
											 OUT n bigint, OUT pos bigint)
LANGUAGE plpgsql AS $$
DECLARE
	bid bigint;
BEGIN
	SELECT batch_id, cur_tick_id INTO bid, pos FROM pgq.next_batch_info(queue, consumer);
	IF bid IS NULL THEN
		n := 0;
		pos := NULL;
		RETURN;
	END IF;
	EXECUTE format('INSERT INTO %s SELECT int8send(ev_extra3::bigint) || convert_to(ev_extra1, ''UTF8''),
	                                      convert_to(ev_data, ''UTF8''), ev_extra2::bigint
	                FROM pgq.get_batch_events($1)', tbl) USING bid;
	GET DIAGNOSTICS n = ROW_COUNT;
	PERFORM pgq.finish_batch(bid);
END
$$;

-- table + LISTEN/NOTIFY: the consumer's offset is a transaction id bound,
-- not a row id: bigserial ids commit out of order (a transaction holding
-- id 100 may commit after one holding 200 was read), so "id > last" skips
-- rows.  Every row carries its transaction's id (xid, txid_current()); the
-- consumer takes xmin of a new snapshot (txid_snapshot_xmin: every
-- transaction below it has committed or aborted, so its rows are visible
-- now or never) and copies the rows with last <= xid < xmin, then stores
-- xmin as its offset.  Each transaction's rows land in exactly one range,
-- whole.  The price: a row waits until every transaction older than its
-- own has ended (the other consumers' included).  pos: the new offset.
CREATE OR REPLACE FUNCTION bench.consume_table(consumer int, tbl text,
											   OUT n bigint, OUT pos bigint)
LANGUAGE plpgsql AS $$
DECLARE
	lo bigint;
BEGIN
	-- the bound first, before this transaction has an id of its own
	pos := txid_snapshot_xmin(txid_current_snapshot());
	SELECT last_xmin INTO lo FROM bench.q_offsets o WHERE o.consumer = consume_table.consumer FOR UPDATE;
	IF pos <= lo THEN
		n := 0;
		pos := NULL;
		RETURN;
	END IF;
	-- a new snapshot (this statement's): every transaction below pos has ended
	EXECUTE format('INSERT INTO %s SELECT key, val, diff FROM bench.q_events WHERE xid >= $1 AND xid < $2', tbl)
		USING lo, pos;
	GET DIAGNOSTICS n = ROW_COUNT;
	UPDATE bench.q_offsets o SET last_xmin = pos WHERE o.consumer = consume_table.consumer;
END
$$;
