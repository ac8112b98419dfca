--
-- readers: named positions in a shard's times.  read_next returns the
-- updates after a reader's position, consolidated per (key, val, time),
-- whole times only; advance_reader moves the position in the caller's
-- transaction; a live reader holds the shard's since at or below its
-- position; an expired one holds nothing and refuses every call.  Every
-- error of the contract, and the edges: an empty shard, a reader at upper
-- - 1, since against readers, leases, privileges, dropping the shard.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

-- Updates of a read as one line: key=val+diff@time
CREATE FUNCTION pg_temp.line(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	result text;
BEGIN
	EXECUTE format($f$SELECT coalesce(string_agg(format('%%s=%%s%%s%%s@%%s', encode(key, 'escape'),
		encode(val, 'escape'), CASE WHEN diff > 0 THEN '+' END, diff, "time"), ' '
		ORDER BY "time", key, val), '(none)') FROM (%s) r$f$, q) INTO result;
	RETURN result;
END
$$;

-- Appends keys (values v, diff 1) as the batch [t, t + 1) at time t
CREATE FUNCTION pg_temp.put(s text, t bigint, keys text[], diffs bigint[] DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
	SELECT FROM persist_sink.compare_and_append(s, keys, array_fill('v'::text, ARRAY[cardinality(keys)]),
		array_fill(t, ARRAY[cardinality(keys)]),
		coalesce(diffs, array_fill(1::bigint, ARRAY[cardinality(keys)])), t, t + 1)
$$;

--
-- An empty shard: a reader starts at since - 1 and reads nothing
--
SELECT create_shard('rd');
SELECT create_reader('rd', 'c1') AS position;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1')$$);
SELECT reader, position, lag_ms, lag_updates, lease, expires_at, expired FROM readers;

--
-- read_next: whole times, up to about max_updates
--
SELECT pg_temp.put('rd', 0, '{a,b,c}');
SELECT pg_temp.put('rd', 1, '{d,e}');
SELECT pg_temp.put('rd', 2, '{f,g,h,i}');
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1')$$) AS everything;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 1)$$) AS first_time;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 3)$$) AS still_first_time;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 4)$$) AS two_times;
-- it does not move the position
SELECT position, lag_ms, lag_updates FROM readers WHERE reader = 'c1';
SELECT advance_reader('rd', 'c1', 0);
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 1)$$) AS after_0;
SELECT position, lag_ms, lag_updates FROM readers WHERE reader = 'c1';
-- several times in one batch are cut at a time boundary too
SELECT compare_and_append('rd', '{j,k,l,m,n}'::text[], '{v,v,v,v,v}'::text[],
						  '{3,4,4,5,6}', '{1,1,1,1,1}', 3, 7) AS seqno;
SELECT advance_reader('rd', 'c1', 2);
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 1)$$) AS one_time;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 2)$$) AS two_times;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 3)$$) AS whole_time_4;
-- updates of one (key, val, time) are consolidated; those that sum to 0 vanish
SELECT pg_temp.put('rd', 7, '{o}', '{2}');
SELECT pg_temp.put('rd', 8, '{p,p,q,q}', '{1,-1,1,1}');
SELECT advance_reader('rd', 'c1', 6);
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1')$$) AS consolidated;
-- a reader at upper - 1 reads nothing, and waits up to its timeout
SELECT advance_reader('rd', 'c1', shard_upper('rd') - 1);
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c1', 10, '20ms')$$) AS at_upper;
SELECT lag_ms, lag_updates FROM readers WHERE reader = 'c1';

-- a batch of many times: the cut is found among them (counting at most
-- 2 x max_updates times at once)
SELECT create_shard('rd_many');
SELECT compare_and_append('rd_many', ARRAY(SELECT 'k' || t FROM generate_series(19, 0, -1) t),
						  array_fill('v'::text, ARRAY[20]), ARRAY(SELECT t FROM generate_series(19, 0, -1) t),
						  array_fill(1::bigint, ARRAY[20]), 0, 20) AS seqno;
SELECT create_reader('rd_many', 'm') AS position;
SELECT pg_temp.line($$SELECT * FROM read_next('rd_many', 'm', 3)$$) AS first_three;
SELECT advance_reader('rd_many', 'm', 16);
SELECT pg_temp.line($$SELECT * FROM read_next('rd_many', 'm', 2)$$) AS two_more;
SELECT drop_shard('rd_many');

-- a reader inside a merged batch (of sink-like times, from 0) still sees
-- its lag, and a waiting read_next returns at once with what is there
SELECT create_shard('rd_merged');
SELECT pg_temp.put('rd_merged', t, ARRAY['m' || t]) FROM generate_series(0, 2) t;
SELECT compare_and_append('rd_merged', '{x,y,z}'::text[], '{v,v,v}'::text[], '{1000000,1000001,1000002}',
						  '{1,1,1}', 3, 1000003) AS seqno;
SELECT create_reader('rd_merged', 'in', 1000000) AS position;
SELECT compact('rd_merged');
SELECT count(*) AS batches FROM batches('rd_merged');
SELECT lag_updates > 0 AS lag_seen FROM readers WHERE reader = 'in';
SET statement_timeout = '3s';
SELECT pg_temp.line($$SELECT * FROM read_next('rd_merged', 'in', 10, '30s')$$) AS without_waiting;
RESET statement_timeout;
SELECT drop_shard('rd_merged');

--
-- advance_reader: never back, never to or past upper; in the caller's
-- transaction
--
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'c1', 3)$$);
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'c1', persist_sink.shard_upper('rd'))$$);
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'c1', NULL)$$);
SELECT advance_reader('rd', 'c1', shard_upper('rd') - 1) AS same_position_again;
SELECT create_reader('rd', 'c2', 4) AS position;
BEGIN;
SELECT advance_reader('rd', 'c2', 6);
SELECT position FROM readers WHERE reader = 'c2';
ROLLBACK;
SELECT position FROM readers WHERE reader = 'c2';
BEGIN;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c2', 2)$$);
SELECT advance_reader('rd', 'c2', 6);
COMMIT;
SELECT position FROM readers WHERE reader = 'c2';
-- and refuse to write in a read-only transaction
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'c2', 7)$$);
ROLLBACK;

--
-- create_reader's and read_next's errors
--
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'c1')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'c3', persist_sink.shard_upper('rd'))$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('nope', 'c1')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', '')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'a/b')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'c3', NULL, '-1 s')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next('rd', 'nope')$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next('rd', 'c1', 0)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next('rd', 'c1', NULL)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next('rd', 'c1', 10, '-1 s')$$);
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'nope', 1)$$);
SELECT pg_temp.err($$SELECT persist_sink.drop_reader('rd', 'nope')$$);

--
-- since against readers: downgrade_since stops at the lowest live
-- reader's position (a NOTICE says which), compaction keeps what comes
-- after it, and a dropped reader holds nothing
--
SELECT reader, position FROM readers WHERE shard = 'rd' ORDER BY reader;
SELECT downgrade_since('rd', 8);
SELECT shard_since('rd');
SELECT compact('rd');
SELECT count(*) AS batches FROM batches('rd');
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c2')$$) AS c2_after_compaction;
SELECT pg_temp.line($$SELECT * FROM listen('rd', 6)$$) AS listen_from_6;
-- a new reader may start no lower than since - 1
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'c3', 4)$$);
SELECT create_reader('rd', 'c3', 5) AS position;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c3')$$) AS from_since;
SELECT pg_temp.line($$SELECT * FROM read_next('rd', 'c3', 1)$$) AS since_is_one_time;
SELECT drop_reader('rd', 'c3');
-- a shard whose since passed whole batches: a reader at since - 1 reads
-- them at since, as one time, however few updates it asks for
SELECT create_shard('rd_old');
SELECT pg_temp.put('rd_old', 0, '{a}'), pg_temp.put('rd_old', 1, '{b}'), pg_temp.put('rd_old', 2, '{c}');
SELECT downgrade_since('rd_old', 2);
SELECT create_reader('rd_old', 'fresh') AS position;
SELECT lag_updates FROM readers WHERE reader = 'fresh';
SELECT pg_temp.line($$SELECT * FROM read_next('rd_old', 'fresh', 1)$$) AS at_since;
SELECT drop_shard('rd_old');
SELECT advance_reader('rd', 'c2', 7);
SELECT downgrade_since('rd', 8);
SELECT shard_since('rd');
SELECT drop_reader('rd', 'c2');
SELECT downgrade_since('rd', 8);
SELECT shard_since('rd');
-- since never moves back, whatever the readers
SELECT pg_temp.err($$SELECT persist_sink.downgrade_since('rd', 7)$$);

--
-- leases: an expired reader holds nothing, refuses every call but
-- drop_reader, and may be created again
--
SELECT create_reader('rd', 'short', 8, '1 s') AS position;
SELECT create_reader('rd', 'gone', 8, '1 s') AS position;
SELECT lease, expires_at - last_active AS lasts, expired FROM readers WHERE reader = 'short';
SELECT pg_sleep(1.2);
SELECT expired FROM readers WHERE reader = 'short';
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next('rd', 'short')$$);
SELECT pg_temp.err($$SELECT persist_sink.advance_reader('rd', 'short', 8)$$);
SELECT drop_reader('rd', 'gone') AS expired_dropped;
SELECT pg_temp.put('rd', 9, '{r}');
SELECT advance_reader('rd', 'c1', 9);
SELECT downgrade_since('rd', 9);
SELECT shard_since('rd');
SELECT create_reader('rd', 'short') AS recreated_at;
SELECT lease, expired FROM readers WHERE reader = 'short';
SELECT drop_reader('rd', 'short');
-- persist_sink.reader_lease is the default lease; '0' never expires
SET persist_sink.reader_lease = '1h';
SELECT create_reader('rd', 'hour') AS position;
SELECT create_reader('rd', 'never', NULL, '0') AS position;
RESET persist_sink.reader_lease;
SELECT create_reader('rd', 'default') AS position;
SELECT reader, lease, expires_at - last_active AS lasts FROM readers WHERE shard = 'rd' ORDER BY reader;
-- read_next and advance_reader renew the lease
SELECT last_active AS before FROM readers WHERE reader = 'hour' \gset
SELECT pg_sleep(0.01);
SELECT count(*) FROM read_next('rd', 'hour');
SELECT last_active > :'before' AS renewed FROM readers WHERE reader = 'hour';
-- leases are bounded by reader_lease's range (2147483647 s, 24855 days;
-- a month counts as 30 days), compared without overflow
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'aeons', NULL, interval '178000000 years')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'aeons', NULL, interval '2147483648 seconds')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'aeons', NULL, interval '70 years')$$);
SELECT pg_temp.err($$SELECT persist_sink.create_reader('rd', 'aeons', NULL, interval '24856 days')$$);
SELECT create_reader('rd', 'longest', NULL, interval '2147483647 seconds') AS position;
SELECT lease, expires_at > now() + interval '60 years' AS far, expired FROM readers WHERE reader = 'longest';
-- a lease past the bound written before leases were bounded breaks no
-- call of anyone: it never expires, and expires_at is infinity
UPDATE persist_sink.reader SET lease = interval '178000000 years' WHERE reader = 'longest';
SELECT lease, expires_at, expired FROM readers WHERE reader = 'longest';
SELECT count(*) FROM read_next('rd', 'longest', 1);
SELECT downgrade_since('rd', shard_since('rd'));
SELECT drop_reader('rd', 'longest');
-- a transaction that locked a reader cannot be prepared (it would hold the
-- reader across restarts); after a refused PREPARE the reader is free
BEGIN;
SELECT count(*) >= 0 AS read FROM read_next('rd', 'hour', 1);
PREPARE TRANSACTION 'rd_read_next';
BEGIN;
SELECT advance_reader('rd', 'hour', 8);
PREPARE TRANSACTION 'rd_advance';
BEGIN;
SELECT create_reader('rd', 'prepared') AS position;
PREPARE TRANSACTION 'rd_create';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'rd\_%';
SELECT count(*) AS created FROM readers WHERE reader = 'prepared';
-- ... also when a savepoint that locked it was released, not when it was
-- rolled back
BEGIN;
SAVEPOINT s;
SELECT count(*) >= 0 AS read FROM read_next('rd', 'hour', 1);
RELEASE SAVEPOINT s;
PREPARE TRANSACTION 'rd_released';
BEGIN;
SAVEPOINT s;
SELECT count(*) >= 0 AS read FROM read_next('rd', 'hour', 1);
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'rd_rolled_back';
COMMIT PREPARED 'rd_rolled_back';
SELECT advance_reader('rd', 'hour', 8);

--
-- privileges: creating a reader needs the read privilege on the shard; a
-- reader is its owner's; the shard's owner may drop it and sees it
--
CREATE ROLE regress_rd_owner IN ROLE persist_sink_writer, persist_sink_reader;
CREATE ROLE regress_rd_consumer IN ROLE persist_sink_reader;
CREATE ROLE regress_rd_other IN ROLE persist_sink_reader;
CREATE ROLE regress_rd_writer IN ROLE persist_sink_writer;
\i sql/include/as_role.psql
SELECT pg_temp.as_role('regress_rd_owner', $$SELECT persist_sink.create_shard('rd_priv')$$);
SELECT pg_temp.as_role('regress_rd_consumer', $$SELECT persist_sink.create_reader('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_owner', $$SELECT persist_sink.grant_shard('rd_priv', 'regress_rd_consumer', 'read')$$);
SELECT pg_temp.as_role('regress_rd_consumer', $$SELECT persist_sink.create_reader('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_writer', $$SELECT * FROM persist_sink.read_next('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_owner', $$SELECT persist_sink.grant_shard('rd_priv', 'regress_rd_other', 'read')$$);
SELECT pg_temp.as_role('regress_rd_other', $$SELECT * FROM persist_sink.read_next('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_other', $$SELECT persist_sink.advance_reader('rd_priv', 'mine', -1)$$);
SELECT pg_temp.as_role('regress_rd_other', $$SELECT persist_sink.drop_reader('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_consumer', $$SELECT * FROM persist_sink.read_next('rd_priv', 'mine')$$);
SET ROLE regress_rd_other;
SELECT count(*) AS others_see FROM persist_sink.readers WHERE shard = 'rd_priv';
SET ROLE regress_rd_consumer;
SELECT reader, owner FROM persist_sink.readers WHERE shard = 'rd_priv';
SET ROLE regress_rd_owner;
SELECT reader, owner FROM persist_sink.readers WHERE shard = 'rd_priv';
RESET ROLE;
-- a revoked read privilege stops the reader's owner
SELECT pg_temp.as_role('regress_rd_owner', $$SELECT persist_sink.revoke_shard('rd_priv', 'regress_rd_consumer', 'read')$$);
SELECT pg_temp.as_role('regress_rd_consumer', $$SELECT * FROM persist_sink.read_next('rd_priv', 'mine')$$);
SELECT pg_temp.as_role('regress_rd_owner', $$SELECT persist_sink.drop_reader('rd_priv', 'mine')$$);

--
-- typed shards: read_next_rows returns rows
--
CREATE TYPE public.rd_item AS (id int, name text);
SELECT create_shard('rd_typed', 'public.rd_item');
SELECT create_reader('rd_typed', 'items') AS position;
SELECT compare_and_append_rows('rd_typed', ARRAY[(1, 'one'), (2, 'two')]::public.rd_item[], '{0,0}', '{1,1}', 0, 1) AS seqno;
SELECT compare_and_append_rows('rd_typed', ARRAY[(1, 'one'), (3, 'three')]::public.rd_item[], '{1,1}', '{-1,1}', 1, 2) AS seqno;
SELECT "row", "time", diff FROM read_next_rows('rd_typed', 'items', NULL::public.rd_item, 1) ORDER BY "time", "row";
SELECT advance_reader('rd_typed', 'items', 0);
SELECT "row", "time", diff FROM read_next_rows('rd_typed', 'items', NULL::public.rd_item) ORDER BY "time", "row";
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next_rows('rd_typed', 'items', NULL::int4)$$);
SELECT pg_temp.err($$SELECT * FROM persist_sink.read_next_rows('rd_typed', 'nope', NULL::public.rd_item)$$);
SELECT drop_shard('rd_typed');
DROP TYPE public.rd_item;

--
-- dropping a shard drops its readers
--
SELECT count(*) AS readers_of_rd FROM readers WHERE shard = 'rd';
SELECT drop_shard('rd');
SELECT count(*) AS readers_left FROM persist_sink.reader WHERE shard = 'rd';
SELECT drop_shard('rd_priv');
DROP ROLE regress_rd_owner, regress_rd_consumer, regress_rd_other, regress_rd_writer;

ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
