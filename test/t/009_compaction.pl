
# Copyright (c) persist_sink contributors

# Compaction.
#  (a) 3000 small writes (append() from three sessions, compare_and_append
#      from a fourth, unique keys and retractions of earlier keys) with
#      background compaction on: the compactor catches up, the shard holds
#      a logarithmic number of batches, the snapshots recorded during the
#      run are unchanged, the content is exactly what was written, verify()
#      is clean and the blob table holds exactly the parts the state
#      references; then compact() merges everything into one batch.
#  (c) compact() after retracting everything and moving since to upper
#      leaves no update and no blob row.
#  (d) compact() racing the background compactor on the same shard (the
#      compactor held after its CaS, while it lists the parts it replaced
#      as garbage): compact() succeeds, nobody deadlocks.
#  (e) 30 compare_and_appends committed in one transaction, while the
#      compactor handles the requests they make before the commit: the
#      batches are compacted after the commit all the same.
#  (f) a shard dropped while the compactor merges it: the compactor stops
#      the merge once the drop commits (it logs so), leaves no blob row of
#      the shard behind, and goes on compacting other shards.
#  (g) more shards asking for compaction at once than the request queue
#      holds (64): once the queue is drained, the compactor scans every
#      shard, so the shards that did not fit are compacted too.
#  (b) a shard of 200 blob batches built with compaction off; compaction
#      turned on and the compactor SIGKILLed during the merge, several
#      rounds (held at chosen points by locks, and at random moments): each
#      crash restart leaves the shard as it was and nothing leaked; the
#      compaction pending before a crash is done after it; and once left
#      alone, compaction finishes.
#
# They run in the order a, c, d, e, f, g, b: (b) restarts the server.  Waits are
# bounded polls; the compactor is observed in pg_stat_activity.
#
# PS_COMPACTION_SEED overrides the seed of the random kill delays.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = $ENV{PS_COMPACTION_SEED} // 20241130;
srand($seed);
note "seed $seed";

my $dir = PostgreSQL::Test::Utils::tempdir;
my $t0 = time;

my $node = sink_node('compaction', "restart_after_crash = on\n");

# Helpers, in the postgres database:
#  digests        recorded md5s of snapshots (as_of) or of listen(s, 0)
#                 (as_of NULL)
#  digest         md5 of snapshot(s, as_of), ordered
#  changed        how many of a shard's recorded digests differ now
#  health         "<verify() problems> <blob rows = referenced blob parts>
#                 <blob rows of no shard>", "0 true 0" when healthy
#  w_keys         the updates of write i of writer w: keys w.i.1 and w.i.2
#                 (val vi, diff 1); every tenth write also retracts the two
#                 keys of write i - 5
#  wa, wc         write i of writer w through append() or through
#                 compare_and_append at the current upper (retried on
#                 PS001); record the digest as of the write's time if asked
#  fill           n batches of m updates (keys <shard><batch>.<row>, diff 1)
#                 by compare_and_append, each at the shard's upper
#  compactor_rested  true once a compactor, having worked since t, waits
#                 for requests again (in its main loop: idle, waiting on its
#                 latch) and no compactor is working
#  compactor_busy waits (bounded) until the compactor works on a shard
#                 (optionally waiting on a lock), then reloads the
#                 configuration if asked; the compactor's pid, or NULL
$node->safe_psql(
	'postgres', q{
CREATE TABLE digests (shard text, as_of bigint, md5 text);
CREATE FUNCTION digest(s text, as_of bigint) RETURNS text LANGUAGE sql AS $$
	SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
										  "time", diff), ',' ORDER BY key, val, "time"), ''))
	FROM persist_sink.snapshot(s, as_of)
$$;
CREATE FUNCTION listen_digest(s text) RETURNS text LANGUAGE sql AS $$
	SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
										  "time", diff), ',' ORDER BY key, val, "time"), ''))
	FROM persist_sink.listen(s, 0)
$$;
CREATE FUNCTION changed(s text) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM digests
	WHERE shard = s AND md5 IS DISTINCT FROM CASE WHEN as_of IS NULL THEN listen_digest(s)
												  ELSE digest(s, as_of) END
$$;
CREATE FUNCTION health(s text) RETURNS text LANGUAGE sql AS $$
	SELECT (SELECT count(*) FROM persist_sink.verify(s)) || ' '
		|| ((SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, s || '/')
			 AND key NOT IN (SELECT unnest(keys) FROM persist_sink.garbage WHERE shard = s))
			= (SELECT coalesce(sum(parts) FILTER (WHERE NOT inline), 0) FROM persist_sink.batches(s))) || ' '
		|| (SELECT count(*) FROM persist_sink.blob b
			WHERE NOT EXISTS (SELECT FROM persist_sink.consensus c WHERE starts_with(b.key, c.shard || '/')))
$$;
CREATE FUNCTION w_keys(w text, i int, OUT keys text[], OUT vals text[], OUT diffs bigint[])
LANGUAGE sql AS $$
	SELECT array_agg(k ORDER BY k), array_agg(v ORDER BY k), array_agg(d ORDER BY k)
	FROM (SELECT w || '.' || i || '.' || g AS k, 'v' || i AS v, 1::bigint AS d
		  FROM generate_series(1, 2) g
		  UNION ALL
		  SELECT w || '.' || (i - 5) || '.' || g, 'v' || (i - 5), -1
		  FROM generate_series(1, 2) g WHERE i % 10 = 0) x
$$;
CREATE FUNCTION wa(s text, w text, i int, rec boolean) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
	k record;
BEGIN
	k := w_keys(w, i);
	t := persist_sink.append(s, k.keys, k.vals, k.diffs);
	IF rec THEN
		INSERT INTO digests VALUES (s, t, digest(s, t));
	END IF;
	RETURN t;
END
$$;
CREATE FUNCTION wc(s text, w text, i int, rec boolean) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	u bigint;
	k record;
BEGIN
	k := w_keys(w, i);
	LOOP
		u := persist_sink.shard_upper(s);
		BEGIN
			PERFORM persist_sink.compare_and_append(s, k.keys, k.vals,
				array_fill(u, ARRAY[cardinality(k.keys)]), k.diffs, u, u + 1);
			EXIT;
		EXCEPTION WHEN SQLSTATE 'PS001' THEN
			-- an append moved the upper first: try again at the new one
		END;
	END LOOP;
	IF rec THEN
		INSERT INTO digests VALUES (s, u, digest(s, u));
	END IF;
	RETURN u;
END
$$;
CREATE FUNCTION fill(s text, n int, m int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	u bigint;
BEGIN
	FOR i IN 1 .. n LOOP
		u := persist_sink.shard_upper(s);
		PERFORM persist_sink.compare_and_append(s,
			ARRAY(SELECT s || i || '.' || g FROM generate_series(1, m) g),
			ARRAY(SELECT md5(s || i || '.' || g) FROM generate_series(1, m) g),
			array_fill(u, ARRAY[m]), array_fill(1::bigint, ARRAY[m]), u, u + 1);
	END LOOP;
END
$$;
CREATE FUNCTION compactor_rested(t timestamptz) RETURNS boolean LANGUAGE sql AS $$
	SELECT EXISTS (SELECT FROM pg_stat_activity
				   WHERE backend_type = 'persist_sink compactor' AND state = 'idle'
					 AND wait_event_type = 'Extension' AND state_change > t)
	   AND NOT EXISTS (SELECT FROM pg_stat_activity
					   WHERE backend_type = 'persist_sink compactor' AND state = 'active')
$$;
CREATE FUNCTION compactor_busy(s text, wait_type text, timeout interval, reload boolean)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + timeout;
	p int;
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO p FROM pg_stat_activity
		WHERE backend_type = 'persist_sink compactor' AND state = 'active' AND query = s
		  AND (wait_type IS NULL OR wait_event_type = wait_type);
		IF p IS NOT NULL AND reload THEN
			PERFORM pg_reload_conf();
		END IF;
		IF p IS NOT NULL OR clock_timestamp() > deadline THEN
			RETURN p;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
END
$$;
});

# Runs a query until it returns $want, for at most $secs seconds; errors
# (the server restarting) count as not yet.
sub poll_until
{
	my ($sql, $want, $secs) = @_;
	my $deadline = time + $secs;
	while (1)
	{
		my ($ret, $out) = $node->psql('postgres', $sql);
		return 1 if $ret == 0 && $out eq $want;
		return 0 if time > $deadline;
		usleep(50_000);
	}
}

# Turns background compaction on or off, and waits until the postmaster
# has reloaded (then the compactor has been signalled too: it reads the
# setting before it takes its next request).
sub set_compaction
{
	my ($on) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET persist_sink.compaction = $on");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', 'SHOW persist_sink.compaction', $on)
	  or die "timed out waiting for compaction = $on";
}

# What the compactor is doing, and a shard's batch sizes, for diagnostics.
sub compactor_diag
{
	my ($s) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', qq{
SELECT format('compactor %s: %s %s:%s on %s since %s, started %s ago', pid, state, wait_event_type,
			  wait_event, query, now() - state_change, now() - backend_start)
FROM pg_stat_activity WHERE backend_type = 'persist_sink compactor'
UNION ALL
SELECT '$s: ' || string_agg(encoded_bytes::text, ' ' ORDER BY lower) FROM persist_sink.batches('$s')});
	return "$out$err";
}

# The number of batches of a shard.
sub nbatches
{
	my ($s) = @_;
	return $node->safe_psql('postgres',
		"SELECT batches FROM persist_sink.shards WHERE name = '$s'");
}

# The server's clock, now.
sub now_ts
{
	return $node->safe_psql('postgres', 'SELECT clock_timestamp()');
}

# Waits (bounded) until the compactor has worked since $t and rests again.
# Only requests made after $t wake it up: callers take $t before a write
# through the sink, which requests compaction after its commit.
sub compactor_rested
{
	my ($t, $secs) = @_;
	return poll_until("SELECT compactor_rested('$t')", 't', $secs);
}

#
# (a) thousands of small writes, compacted in the background
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('comp')");
my %writes = (a1 => 850, a2 => 850, a3 => 850, c1 => 450);
my @clients;
for my $w (sort keys %writes)
{
	my $fn = $w =~ /^a/ ? 'wa' : 'wc';
	my $every = $w =~ /^a/ ? 150 : 90;    # 20 digests recorded in all
	my $sql = '';
	$sql .= "SELECT $fn('comp', '$w', $_, " . ($_ % $every == 0 ? 'true' : 'false') . ");\n"
	  for 1 .. $writes{$w};
	push @clients, start_psql($node, $dir, "writer_$w", $sql);
}
for my $c (@clients)
{
	my $r = finish_psql($c);
	my ($ok, $err) = ($r->{ok}, $r->{err});
	ok($ok, "$c->{name}: every write succeeded") or diag($err);
}
# One last write through the sink: it requests compaction after its commit
# (a compare_and_append requests it before; see (e)).
my $t_last = now_ts();
$node->safe_psql('postgres', "SELECT wa('comp', 'z', 1, false)");
$writes{z} = 1;
my $nwrites = 0;
$nwrites += $_ for values %writes;
note sprintf('%d writes in %.1fs', $nwrites, time - $t0);

ok(compactor_rested($t_last, 60), 'the compactor caught up with the writes')
  or diag(compactor_diag('comp'));
my $bound = int(2 * log($nwrites) / log(2) + 4);
my $nb = nbatches('comp');
note "after $nwrites writes: $nb batches (bound $bound); "
  . $node->safe_psql('postgres',
	"SELECT string_agg(encoded_bytes::text, ' ' ORDER BY lower) FROM persist_sink.batches('comp')")
  . ' bytes; stats: '
  . $node->safe_psql('postgres',
	"SELECT format('%s appends, %s CaS attempts, %s mismatches', appends, cas_attempts, cas_mismatches)
	 FROM persist_sink.stats WHERE shard = 'comp'");
cmp_ok($nb, '<=', $bound, 'the number of batches is logarithmic in the number of writes');
is($node->safe_psql('postgres', "SELECT count(*) FROM digests WHERE shard = 'comp'"),
	'20', '20 snapshots were recorded during the writes');
is($node->safe_psql('postgres', "SELECT changed('comp')"),
	'0', 'every snapshot recorded during the writes is unchanged after compaction');

# the content: every key written once, but those retracted
my $expected_sql = q{
WITH w(w, n) AS (VALUES } . join(', ', map { "('$_', $writes{$_})" } sort keys %writes) . q{),
	 expected AS (SELECT w.w || '.' || i || '.' || g AS key, 'v' || i AS val
				  FROM w, generate_series(1, w.n) i, generate_series(1, 2) g
				  WHERE NOT (i % 10 = 5 AND i + 5 <= w.n)),
	 actual AS (SELECT convert_from(key, 'UTF8') AS key, convert_from(val, 'UTF8') AS val, diff
				FROM persist_sink.snapshot('comp'))
SELECT (SELECT count(*) FROM actual) || ' ' || (SELECT count(*) FROM expected) || ' '
	|| (SELECT count(*) FROM actual WHERE diff <> 1) || ' '
	|| (SELECT count(*) FROM (SELECT key, val FROM expected EXCEPT SELECT key, val FROM actual) m) || ' '
	|| (SELECT count(*) FROM (SELECT key, val FROM actual EXCEPT SELECT key, val FROM expected) x)};
my $n_expected = 0;
for my $w (keys %writes)
{
	$n_expected += 2 * scalar(grep { !($_ % 10 == 5 && $_ + 5 <= $writes{$w}) } 1 .. $writes{$w});
}
is($node->safe_psql('postgres', $expected_sql),
	"$n_expected $n_expected 0 0 0", 'the content is exactly what was written');
is($node->safe_psql('postgres', "SELECT health('comp')"),
	'0 true 0', 'verify() is clean and the blob rows are exactly the parts referenced');

# one batch with compact(), the same content
$node->safe_psql('postgres', "SELECT persist_sink.compact('comp')");
is(nbatches('comp'), '1', 'compact() leaves one batch');
is($node->safe_psql('postgres', "SELECT changed('comp')"), '0', '... with every snapshot unchanged');
is($node->safe_psql('postgres', $expected_sql),
	"$n_expected $n_expected 0 0 0", '... and the same content');
is($node->safe_psql('postgres', "SELECT health('comp')"), '0 true 0', '... and verify() clean');

#
# (c) compact() after retracting everything and moving since to upper
#
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('gone');
SET persist_sink.inline_max_bytes = 0;
DO $$
DECLARE
	u bigint;
BEGIN
	-- 20 batches, in blob parts then inline, of 40 keys, a few of them
	-- retracted later or written twice
	FOR i IN 1 .. 20 LOOP
		IF i = 11 THEN
			SET LOCAL persist_sink.inline_max_bytes = '1MB';
		END IF;
		u := persist_sink.shard_upper('gone');
		PERFORM persist_sink.compare_and_append('gone',
			ARRAY(SELECT 'g' || i || '.' || g FROM generate_series(1, 40) g)
			  || ARRAY(SELECT 'g' || (i - 1) || '.' || g FROM generate_series(1, 5) g WHERE i > 1),
			ARRAY(SELECT md5(i || '.' || g) FROM generate_series(1, 40) g)
			  || ARRAY(SELECT md5((i - 1) || '.' || g) FROM generate_series(1, 5) g WHERE i > 1),
			array_fill(u, ARRAY[40 + CASE WHEN i > 1 THEN 5 ELSE 0 END]),
			array_fill(CASE WHEN i % 3 = 0 THEN 2 ELSE 1 END::bigint, ARRAY[40])
			  || array_fill(-1::bigint, ARRAY[CASE WHEN i > 1 THEN 5 ELSE 0 END]),
			u, u + 1);
	END LOOP;
END
$$;
});
# and 10 writes through the sink
$node->safe_psql('postgres', "SELECT wa('gone', 'sink', i, false) FROM generate_series(1, 10) i");
my $upper0 = $node->safe_psql('postgres', "SELECT persist_sink.shard_upper('gone')");
is( $node->safe_psql('postgres',
		"SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('gone')"),
	# 800 keys, less the 65 retracted keys of the 13 batches written once,
	# plus 18 keys from the sink (20, less 2 retracted); diffs: the 6
	# batches written twice count twice, the 95 retractions -1
	'753 ' . (800 + 6 * 40 - 95 + 18),
	'gone: the content before the retractions');
# retract everything there is, through the sink
$t_last = now_ts();
$node->safe_psql('postgres',
	"SELECT persist_sink.append('gone', array_agg(key), array_agg(val), array_agg(-diff))
	 FROM persist_sink.snapshot('gone')");
is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.snapshot('gone')"),
	'0', 'gone: nothing left as of the last time');
is($node->safe_psql('postgres', "SELECT count(*) > 0 FROM persist_sink.snapshot('gone', $upper0 - 1)"),
	't', '... but the history is still there');
# compact() once the compactor is done with the shard (see (d))
ok(compactor_rested($t_last, 30), 'gone: the compactor is done')
  or diag(compactor_diag('gone'));
$node->safe_psql('postgres',
	"SELECT persist_sink.downgrade_since('gone', persist_sink.shard_upper('gone'))");
$node->safe_psql('postgres', "SELECT persist_sink.compact('gone')");
is( $node->safe_psql('postgres',
		"SELECT batches <= 1, parts, updates, inline_bytes, blob_bytes, since = upper
		 FROM persist_sink.shards WHERE name = 'gone'"),
	't|0|0|0|0|t',
	'gone: compact() leaves no part and no update');
is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.blob WHERE starts_with(key, 'gone/')"),
	'0', 'gone: no blob row is left');
is($node->safe_psql('postgres', "SELECT health('gone')"), '0 true 0', 'gone: verify() is clean');
my ($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT count(*) FROM persist_sink.snapshot('gone')");
like($err, qr/PS003/, 'gone: the history before since is no longer readable (PS003)');
$node->safe_psql('postgres', "SELECT wa('gone', 'after', 1, false)");
is( $node->safe_psql('postgres',
		"SELECT string_agg(convert_from(key, 'UTF8') || '=' || diff, ' ' ORDER BY key)
		 FROM persist_sink.snapshot('gone')"),
	'after.1.1=1 after.1.2=1',
	'gone: a write afterwards is all there is');

#
# (d) compact() racing the background compactor.  A lock on the garbage
# table holds it in the middle of its merge (merged part written, CaS done,
# the shard's state row held, the replaced parts about to be listed as
# garbage); compact() then waits for the state row, merges and deletes
# the replaced parts itself.  Once the lock is released, both must finish,
# and nobody deadlocks.
#
set_compaction('off');
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('race');
SET persist_sink.inline_max_bytes = 0;
SELECT fill('race', 32, 50);
INSERT INTO digests SELECT 'race', NULL, listen_digest('race');
});
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('LOCK TABLE persist_sink.garbage IN SHARE MODE');
set_compaction('on');
is($node->safe_psql('postgres', "SELECT compactor_busy('race', 'Lock', '30s', false) IS NOT NULL"),
	't', 'race: the compactor is held in the middle of its merge')
  or diag(compactor_diag('race'));
my $logpos = -s $node->logfile;
my $compact = start_psql($node, $dir, 'race_compact', "SELECT persist_sink.compact('race');\n");
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE application_name = 'race_compact' AND wait_event_type = 'Lock'")
  or die 'timed out waiting for compact() to wait';
$t_last = now_ts();
$holder->query_safe('COMMIT');
$holder->quit;
my $race = finish_psql($compact);
my ($race_ok, $race_err) = ($race->{ok}, $race->{err});
ok($race_ok, 'race: compact() racing the compactor succeeds') or diag($race_err);
ok(compactor_rested($t_last, 30), 'race: the compactor is done') or diag(compactor_diag('race'));
ok(!$node->log_contains('deadlock detected', $logpos), 'race: no deadlock, on either side')
  or diag(slurp_file($node->logfile, $logpos));
is(nbatches('race'), '1', 'race: one batch');
is($node->safe_psql('postgres', "SELECT changed('race')"), '0', 'race: the content is unchanged');
is($node->safe_psql('postgres', "SELECT health('race')"), '0 true 0', 'race: verify() is clean');

#
# (e) compare_and_append requests compaction; the batches it appends must be
# compacted once its transaction commits, even if the compactor handled the
# request before the commit (and then saw the state without them).
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('late')");
$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
my $t_late = now_ts();
$holder->query_safe("SELECT fill('late', 30, 1)");
# if the compactor takes the requests now, let it finish with them first
# (bounded: it may as well wait for the commit)
compactor_rested($t_late, 3);
$holder->query_safe('COMMIT');
$holder->quit;
my $late_bound = int(2 * log(30) / log(2) + 4);
ok( poll_until(
		"SELECT batches <= $late_bound FROM persist_sink.shards WHERE name = 'late'", 't', 15),
	"late: the 30 batches committed together are compacted (at most $late_bound left)")
  or diag(compactor_diag('late'));
is($node->safe_psql('postgres', "SELECT count(*) || ' ' || health('late') FROM persist_sink.snapshot('late')"),
	'30 0 true 0', 'late: the content is intact, verify() is clean');

#
# (f) a shard dropped in the middle of its merge.  400 batches of 1000
# updates (each under 64kB encoded, so a merge rewrites them all rather
# than listing them), built with compaction off, make a merge of a few
# seconds; the
# compactor is held at its first part read by a lock on the blob table,
# drop_shard() queues behind that lock, and both go on together once it is
# released: the drop commits long before the merge could end.
#
set_compaction('off');
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('dropme');
SELECT fill('dropme', 400, 1000);
SELECT persist_sink.append('dropme', '{}'::text[], '{}'::text[], '{}');
});
$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('LOCK TABLE persist_sink.blob IN ACCESS EXCLUSIVE MODE');
set_compaction('on');
my $busy = $node->safe_psql('postgres', "SELECT compactor_busy('dropme', 'Lock', '30s', false)");
ok($busy =~ /^\d+$/, 'dropme: the compactor started its merge (held at its first part read)');
my $log_offset = -s $node->logfile;
my $dropper = start_psql($node, $dir, 'dropper', "SELECT persist_sink.drop_shard('dropme');");
ok( poll_until(
		"SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		 WHERE NOT l.granted AND l.relation = 'persist_sink.blob'::regclass", '2', 15),
	'dropme: the compactor and drop_shard() both wait for the blob table');
$holder->query_safe('ROLLBACK');
$holder->quit;
my $dropped = finish_psql($dropper);
ok($dropped->{ok}, 'dropme: drop_shard() succeeded') or diag($dropped->{err});
ok( $node->wait_for_log(
		qr/compaction of shard "dropme" stopped: the shard was dropped/, $log_offset),
	'dropme: the compactor stopped the merge of the dropped shard');
my $t_after = now_ts();
$node->safe_psql('postgres', "SELECT wa('late', 'after_drop', 8, false)");
ok(compactor_rested($t_after, 30), 'dropme: the compactor goes on with other shards')
  or diag(compactor_diag('late'));
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM persist_sink.blob WHERE starts_with(key, 'dropme/')"),
	'0', 'dropme: no blob row of the dropped shard is left');

#
# (g) 70 shards of 8 small batches each, written in one transaction with
# compaction off: their 70 requests overflow the queue of 64.
#
set_compaction('off');
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('many' || i) FROM generate_series(1, 70) i;
SELECT fill('many' || i, 8, 1) FROM generate_series(1, 70) i;
});
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM persist_sink.shards WHERE name LIKE 'many%' AND batches = 8"),
	'70', 'many: 70 shards of 8 batches, with compaction off');
set_compaction('on');
ok( poll_until(
		"SELECT count(*) FROM persist_sink.shards WHERE name LIKE 'many%' AND batches > 1", '0', 60),
	'many: every one of the 70 shards is compacted, those beyond the queue too')
  or diag($node->safe_psql('postgres',
	"SELECT string_agg(name || ':' || batches, ' ') FROM persist_sink.shards WHERE name LIKE 'many%' AND batches > 1"));
is($node->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.shards s, persist_sink.verify(s.name) WHERE s.name LIKE 'many%'"),
	'0', 'many: verify() is clean on every shard');

#
# (b) the compactor killed (SIGKILL) in the middle of a merge.  Each round
# queues a compaction of 'crash' while compaction is off, turns compaction
# on, catches the compactor in its merge, turns compaction off again (so
# that the restarted compactor waits for the next round) and kills it.
#
set_compaction('off');
my $nbig = 200;
$node->safe_psql(
	'postgres', qq{
SELECT persist_sink.create_shard('crash');
SELECT persist_sink.create_shard('resume');
SET persist_sink.inline_max_bytes = 0;
DO \$\$
DECLARE
	u bigint;
BEGIN
	-- 200 batches of 1500 keys, each retracting 100 keys of the one before
	-- and writing 100 of its own twice
	FOR i IN 1 .. $nbig LOOP
		u := persist_sink.shard_upper('crash');
		PERFORM persist_sink.compare_and_append('crash',
			ARRAY(SELECT 'k' || i || '.' || g FROM generate_series(1, 1500) g)
			  || ARRAY(SELECT 'k' || (i - 1) || '.' || g FROM generate_series(1, 100) g WHERE i > 1),
			ARRAY(SELECT md5(i || '.' || g) FROM generate_series(1, 1500) g)
			  || ARRAY(SELECT md5((i - 1) || '.' || g) FROM generate_series(1, 100) g WHERE i > 1),
			array_fill(u, ARRAY[1500 + CASE WHEN i > 1 THEN 100 ELSE 0 END]),
			ARRAY(SELECT CASE WHEN g <= 100 AND i > 1 THEN 2 ELSE 1 END::bigint FROM generate_series(1, 1500) g)
			  || array_fill(-1::bigint, ARRAY[CASE WHEN i > 1 THEN 100 ELSE 0 END]),
			u, u + 1);
	END LOOP;
	-- a shard of 32 small batches, queued after it
	PERFORM fill('resume', 32, 1);
END
\$\$;
INSERT INTO digests SELECT 'crash', a, digest('crash', a) FROM unnest(ARRAY[0, 49, 99, 149, $nbig - 1]) a;
INSERT INTO digests SELECT 'crash', NULL, listen_digest('crash');
INSERT INTO digests SELECT 'resume', NULL, listen_digest('resume');
});
is(nbatches('crash'), $nbig, "crash: $nbig batches with compaction off");
is($node->safe_psql('postgres', "SELECT health('crash')"), '0 true 0', 'crash: verify() is clean');
my $built = $node->safe_psql('postgres',
	"SELECT format('%s parts, %s blob bytes, %s updates', parts, blob_bytes, updates)
	 FROM persist_sink.shards WHERE name = 'crash'");
note "crash: $built";

# Queues a compaction of 'crash': an append() of nothing, which only widens
# the last batch, and requests compaction once committed.  Compaction is off
# until the round turns it on, so the request waits in the queue.
my $queue_sql = "SELECT persist_sink.append('crash', '{}'::text[], '{}'::text[], '{}')";

my @stages = ('garbage', 'cas', 'load', 'random', 'random', 'random');
my %kills;
my $mid_merge = 0;
my $round = 0;
for my $stage (@stages)
{
	$round++;
	if (nbatches('crash') != $nbig)
	{
		note "round $round skipped: a random kill came after the merge had committed";
		next;
	}
	$node->safe_psql('postgres', $queue_sql);
	my $holder;
	if ($stage eq 'garbage')
	{
		# held on the garbage table: it has written its merged parts and
		# swapped them in, and is listing the replaced ones
		$holder = $node->background_psql('postgres');
		$holder->query_safe('BEGIN');
		$holder->query_safe('LOCK TABLE persist_sink.garbage IN SHARE MODE');
	}
	elsif ($stage eq 'cas')
	{
		# held at its CaS: a row lock on the shard's consensus row
		$holder = $node->background_psql('postgres');
		$holder->query_safe('BEGIN');
		$holder->query_safe(
			"SELECT seqno FROM persist_sink.consensus WHERE shard = 'crash' FOR UPDATE");
	}
	else
	{
		# held at its first read of a part; in a random round, let go as
		# soon as it is caught there, so that the kill lands at a random
		# moment of a merge that has surely started
		$holder = $node->background_psql('postgres');
		$holder->query_safe('BEGIN');
		$holder->query_safe('LOCK TABLE persist_sink.blob IN ACCESS EXCLUSIVE MODE');
	}
	set_compaction('on');
	# Compaction goes off again as soon as the compactor is caught in its
	# merge, for the compactor that the crash restart starts (the
	# postmaster keeps its setting through the restart); the compactor
	# working now reads the setting only after its merge.
	$node->safe_psql('postgres', 'ALTER SYSTEM SET persist_sink.compaction = off');
	my $pid = $node->safe_psql('postgres', "SELECT compactor_busy('crash', 'Lock', '30s', true)");
	die "round $round: the compactor did not start on 'crash'" unless $pid =~ /^\d+$/;
	# a held compactor at once; otherwise at a random moment of the merge
	# (which takes about 0.2s here)
	my $delay = 0;
	if ($stage eq 'random')
	{
		$holder->query_safe('ROLLBACK');
		$delay = int(rand(60_000));
	}
	usleep($delay);
	kill 'KILL', $pid or die "could not kill $pid: $!";
	$kills{$stage}++;
	eval { $holder->{run}->kill_kill } if $holder;
	$node->poll_query_until('postgres',
		"SELECT count(*) = current_setting('persist_sink.compactors')::int FROM pg_stat_activity
		 WHERE backend_type = 'persist_sink compactor' AND pid <> $pid")
	  or die "round $round: the server did not come back";
	$node->poll_query_until('postgres', 'SHOW persist_sink.compaction', 'off')
	  or die 'timed out waiting for compaction = off';
	my $nb = nbatches('crash');
	$mid_merge++ if $nb == $nbig;
	note sprintf("round %d: killed the compactor (pid %d) %s%s; %d batches after the restart",
		$round, $pid, $stage eq 'random' ? 'during its merge, ' : "held at its $stage stage",
		$stage eq 'random' ? sprintf('%.0fms after it started', $delay / 1000) : '', $nb);
	is($nb, $nbig, "round $round: the merge killed at its $stage stage did not commit")
	  unless $stage eq 'random';
	is($node->safe_psql('postgres', "SELECT changed('crash')"),
		'0', "round $round: every snapshot of 'crash' is unchanged");
	is($node->safe_psql('postgres', "SELECT health('crash')"),
		'0 true 0', "round $round: verify() is clean, no blob row missing or leaked");
}
cmp_ok($mid_merge, '>=', 3, "$mid_merge of $round kills hit the compactor in the middle of its merge");
ok($node->log_contains('was terminated by signal 9'), 'the kills took the server through crash recovery');

# The compaction of 'resume' was queued before the first crash: the
# compactor must still do it once compaction is on again, although nobody
# wrote to 'resume' since.
set_compaction('on');
my $resume_bound = int(2 * log(32) / log(2) + 4);
ok( poll_until(
		"SELECT batches <= $resume_bound FROM persist_sink.shards WHERE name = 'resume'", 't', 15),
	"the compaction pending before the crashes is done after them (at most $resume_bound batches)")
  or diag('resume: ' . nbatches('resume') . ' batches');
# Left alone (queued once more), the compaction of 'crash' finishes.
$node->safe_psql('postgres', $queue_sql);
my $crash_bound = int(2 * log($nbig) / log(2) + 4);
ok( poll_until(
		"SELECT batches <= $crash_bound FROM persist_sink.shards WHERE name = 'crash'", 't', 60),
	"crash: compaction finishes once left alone (at most $crash_bound batches)")
  or diag(compactor_diag('crash'));
is($node->safe_psql('postgres', "SELECT changed('crash')"), '0', 'crash: every snapshot is unchanged');
is($node->safe_psql('postgres', "SELECT health('crash')"), '0 true 0', 'crash: verify() is clean');
is($node->safe_psql('postgres', "SELECT changed('resume') || ' ' || health('resume')"),
	'0 0 true 0', 'resume: unchanged, verify() is clean');

note sprintf('%.0fs; kills: %s', time - $t0, join(', ', map { "$_ $kills{$_}" } sort keys %kills));
$node->stop;
done_testing();
