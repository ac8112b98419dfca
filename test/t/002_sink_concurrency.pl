
# Copyright (c) persist_sink contributors

# Many concurrent writers through the sink: 8 psql sessions append at once,
# mixing small writes (shared batch) and large writes (parts of their own),
# to two shards.  Afterwards every update is present exactly once, the stats
# count every append as shared or own, and verify() is clean.  Then the
# threshold is switched to 0 and back by ALTER SYSTEM + pg_reload_conf() in
# the same cluster, for new sessions and for a session that was already
# connected.  Finally, append from a database the workers do not serve is
# refused.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep);

my $clients = 8;
my $batches = 24;    # per client in phase 1; every 4th is large
my $small_rows = 200;
my $large_rows = 2000;

my $node = sink_node('sink_concurrency', "max_connections = 50\n");
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('conc_0'), persist_sink.create_shard('conc_1');
-- every append the test makes: key p<phase>-c<client>-b<batch>-<row>
CREATE TABLE manifest (phase int, client text, batch int, shard text, nrows int);
});

my $dir = PostgreSQL::Test::Utils::tempdir;

# SQL of one append, printing "ack <batch>" once it returned.
sub append_sql
{
	my ($phase, $client, $batch, $shard, $nrows) = @_;
	my $k = "p$phase-c$client-b$batch-";
	return
	    "SELECT 'ack $batch ' || (persist_sink.append('$shard', "
	  . "ARRAY(SELECT '$k' || r FROM generate_series(1, $nrows) r), "
	  . "ARRAY(SELECT left(md5('$k' || r), 16) FROM generate_series(1, $nrows) r), "
	  . "array_fill(1::bigint, ARRAY[$nrows])) > 0);\n";
}

# Sums of the sink counters over both shards.
sub counters
{
	my ($shared, $own, $appends, $parts) = split /\|/,
	  $node->safe_psql('postgres',
		q{SELECT coalesce(sum(shared_writes), 0), coalesce(sum(own_writes), 0),
				 coalesce(sum(appends), 0), coalesce(sum(parts_written), 0)
		  FROM persist_sink.stats WHERE shard IN ('conc_0', 'conc_1')});
	return { shared => $shared, own => $own, appends => $appends, parts => $parts };
}

# Checks that the updates of phase $phase are exactly those of the manifest,
# each once, and that nothing else of that phase is there.
sub check_phase
{
	my ($phase, $what) = @_;
	my $res = $node->safe_psql(
		'postgres', qq{
WITH expected AS (
	SELECT m.shard, format('p%s-c%s-b%s-%s', m.phase, m.client, m.batch, r) AS key
	FROM manifest m, generate_series(1, m.nrows) r WHERE m.phase = $phase),
actual AS (
	SELECT s.shard, convert_from(sn.key, 'UTF8') AS key, convert_from(sn.val, 'UTF8') AS val, sn.diff
	FROM unnest(ARRAY['conc_0', 'conc_1']) s(shard), persist_sink.snapshot(s.shard) sn
	WHERE starts_with(convert_from(sn.key, 'UTF8'), 'p$phase-'))
SELECT (SELECT count(*) FROM expected),
	   (SELECT count(*) FROM actual),
	   (SELECT count(*) FROM actual WHERE diff <> 1 OR val <> left(md5(key), 16)),
	   (SELECT count(*) FROM (SELECT shard, key FROM expected EXCEPT SELECT shard, key FROM actual) x),
	   (SELECT count(*) FROM (SELECT shard, key FROM actual EXCEPT SELECT shard, key FROM expected) y)});
	my ($expected, $actual, $wrong, $missing, $extra) = split /\|/, $res;
	ok($expected > 0, "$what: the manifest has updates");
	is($actual, $expected, "$what: as many updates as appended");
	is($wrong, 0, "$what: every update once, with its val");
	is($missing, 0, "$what: no update missing");
	is($extra, 0, "$what: no update that was not appended");
	for my $shard ('conc_0', 'conc_1')
	{
		is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.verify('$shard')"),
			0, "$what: verify('$shard') is clean");
	}
}

#
# Phase 1: 8 concurrent sessions, small and large writes, two shards.
#
my $before = counters();
my ($nsmall, $nlarge) = (0, 0);
my @manifest;
my @running;
for my $c (1 .. $clients)
{
	my $sql = "SET persist_sink.shared_batch_max_bytes = '16kB';\n";
	for my $b (1 .. $batches)
	{
		my $large = $b % 4 == 0;
		my $nrows = $large ? $large_rows : $small_rows;
		my $shard = 'conc_' . (($b + $c) % 2);
		$sql .= append_sql(1, $c, $b, $shard, $nrows);
		push @manifest, "(1, '$c', $b, '$shard', $nrows)";
		$large ? $nlarge++ : $nsmall++;
	}
	push @running, start_psql($node, $dir, "p1_c$c", $sql);
}
$node->safe_psql('postgres',
	'INSERT INTO manifest VALUES ' . join(', ', @manifest));
for my $c (@running)
{
	my $r = finish_psql($c);
	ok($r->{ok}, "phase 1: $c->{name} succeeded") or diag($r->{err});
	my $acks = () = $r->{out} =~ /^ack \d+ true$/mg;
	is($acks, $batches, "phase 1: $c->{name}: every append acknowledged");
}
check_phase(1, 'phase 1');

my $after = counters();
is($after->{shared} - $before->{shared}, $nsmall, 'phase 1: small writes counted as shared_writes');
is($after->{own} - $before->{own}, $nlarge, 'phase 1: large writes counted as own_writes');
is( $after->{shared} + $after->{own} - $before->{shared} - $before->{own},
	$clients * $batches,
	'phase 1: shared_writes + own_writes = appends made');
cmp_ok($after->{appends} - $before->{appends}, '<=', $clients * $batches,
	'phase 1: at most one commit per append');
ok($after->{parts} - $before->{parts} >= $nlarge,
	'phase 1: at least one part per large write');
diag(sprintf('phase 1: %d appends in %d commits, %.2f parts per commit',
	$clients * $batches, $after->{appends} - $before->{appends},
	($after->{parts} - $before->{parts}) / ($after->{appends} - $before->{appends} || 1)));

#
# Phase 2: the threshold switched to 0 and back by reload, same cluster.
#
my $bg = $node->background_psql('postgres');
my $append_in_bg = sub {
	my ($key) = @_;
	return $bg->query_safe(
		"SELECT persist_sink.append('conc_0', ARRAY['$key'], ARRAY[left(md5('$key'), 16)], ARRAY[1::bigint]) > 0"
	);
};
is($bg->query_safe('SHOW persist_sink.shared_batch_max_bytes'), '1MB', 'default threshold');
$before = counters();
is($append_in_bg->('p2-cbg-b1-1'), 't', 'append in a long-lived session');
$after = counters();
is($after->{shared} - $before->{shared}, 1, 'default threshold: a small write is shared');
is($after->{own} - $before->{own}, 0, 'default threshold: not own');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET persist_sink.shared_batch_max_bytes = 0; SELECT pg_reload_conf();");
$node->poll_query_until('postgres',
	"SELECT current_setting('persist_sink.shared_batch_max_bytes') = '0'")
  or die 'timed out waiting for the reload';
# the long-lived session sees the new value at its next command
my $seen = '';
for (1 .. 100)
{
	$seen = $bg->query_safe("SELECT current_setting('persist_sink.shared_batch_max_bytes')");
	last if $seen eq '0';
	usleep(100_000);
}
is($seen, '0', 'the long-lived session sees the reloaded threshold');

$before = counters();
is($append_in_bg->('p2-cbg-b2-1'), 't', 'append in the long-lived session after the reload');
$after = counters();
is($after->{own} - $before->{own}, 1, 'threshold 0: the long-lived session writes its own part');
is($after->{shared} - $before->{shared}, 0, 'threshold 0: nothing shared');

# 8 new concurrent sessions, small writes only: every one is its own part
my $p2_batches = 10;
@manifest = ("(2, 'bg', 1, 'conc_0', 1)", "(2, 'bg', 2, 'conc_0', 1)");
@running = ();
$before = counters();
for my $c (1 .. $clients)
{
	my $sql = '';
	for my $b (1 .. $p2_batches)
	{
		my $shard = 'conc_' . (($b + $c) % 2);
		$sql .= append_sql(2, $c, $b, $shard, $small_rows);
		push @manifest, "(2, '$c', $b, '$shard', $small_rows)";
	}
	push @running, start_psql($node, $dir, "p2_c$c", $sql);
}
for my $c (@running)
{
	my $r = finish_psql($c);
	ok($r->{ok}, "phase 2: $c->{name} succeeded") or diag($r->{err});
}
$after = counters();
is($after->{own} - $before->{own}, $clients * $p2_batches, 'threshold 0: every append is an own write');
is($after->{shared} - $before->{shared}, 0, 'threshold 0: no shared write');
cmp_ok($after->{parts} - $before->{parts}, '>=', $clients * $p2_batches,
	'threshold 0: at least one part per append');

# back to the default
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET persist_sink.shared_batch_max_bytes; SELECT pg_reload_conf();");
$node->poll_query_until('postgres',
	"SELECT current_setting('persist_sink.shared_batch_max_bytes') = '1MB'")
  or die 'timed out waiting for the reload';
for (1 .. 100)
{
	$seen = $bg->query_safe("SELECT current_setting('persist_sink.shared_batch_max_bytes')");
	last if $seen eq '1MB';
	usleep(100_000);
}
is($seen, '1MB', 'the long-lived session sees the default again');
$before = counters();
is($append_in_bg->('p2-cbg-b3-1'), 't', 'append after the reset');
push @manifest, "(2, 'bg', 3, 'conc_0', 1)";
$after = counters();
is($after->{shared} - $before->{shared}, 1, 'default again: a small write is shared');
is($after->{own} - $before->{own}, 0, 'default again: not own');
$bg->quit;

$node->safe_psql('postgres',
	'INSERT INTO manifest VALUES ' . join(', ', @manifest));
check_phase(2, 'phase 2');
# phase 1 is still intact
check_phase(1, 'phase 1 after phase 2');

#
# Phase 3: group commit, made deterministic.  A transaction holds the
# shard's state row (an uncommitted compare_and_append), so the worker
# leaves the interval it took (writer w0) waiting for the row; 8 writers arriving
# meanwhile all join the next interval, which commits as one
# compare_and_append with one shared part plus the large writes' own parts.
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('group')");
my $group_counters = sub {
	my ($shared, $own, $appends, $parts) = split /\|/,
	  $node->safe_psql('postgres',
		q{SELECT coalesce(sum(shared_writes), 0), coalesce(sum(own_writes), 0),
				 coalesce(sum(appends), 0), coalesce(sum(parts_written), 0)
		  FROM persist_sink.stats WHERE shard = 'group'});
	return { shared => $shared, own => $own, appends => $appends, parts => $parts };
};
$before = $group_counters->();
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(
	"SELECT persist_sink.compare_and_append('group', ARRAY['p3-held-b1-1'], ARRAY[left(md5('p3-held-b1-1'), 16)],
		ARRAY[0::bigint], ARRAY[1::bigint], 0, 1)");
my $w0 = start_psql($node, $dir, 'p3_w0', append_sql(3, 'w0', 1, 'group', 10));
$node->poll_query_until('postgres',
	"SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()")
  or die 'timed out waiting for the worker to block';
@running = ();
for my $c (1 .. $clients)
{
	my $large = $c <= 2;
	my $sql = $large ? "SET persist_sink.shared_batch_max_bytes = '16kB';\n" : '';
	$sql .= append_sql(3, $c, 1, 'group', $large ? $large_rows : $small_rows);
	push @running, start_psql($node, $dir, "p3_c$c", $sql);
}
$node->poll_query_until('postgres',
	"SELECT count(*) = $clients + 1 FROM pg_stat_activity
	 WHERE application_name LIKE 'p3_%' AND state = 'active' AND wait_event_type = 'Extension'")
  or die 'timed out waiting for the writers to wait in append';
$holder->query_safe('COMMIT');
$holder->quit;
for my $c ($w0, @running)
{
	my $r = finish_psql($c);
	ok($r->{ok}, "phase 3: $c->{name} succeeded") or diag($r->{err});
}
$after = $group_counters->();
is($after->{shared} - $before->{shared}, 1 + $clients - 2, 'group commit: small writes shared');
is($after->{own} - $before->{own}, 2, 'group commit: large writes own');
is($after->{appends} - $before->{appends}, 3,
	'group commit: one commit for w0, one for the 8 writers (and the compare_and_append)');
is($after->{parts} - $before->{parts}, 5,
	'group commit: one shared part and one part per large write (and w0, and the compare_and_append)');
is( $node->safe_psql(
		'postgres', qq{
SELECT (SELECT count(*) = 1 + 10 + 6 * $small_rows + 2 * $large_rows AND bool_and(diff = 1)
		FROM persist_sink.snapshot('group'))
   AND (SELECT count(DISTINCT "time") = 2 AND count(*) = 10 + 6 * $small_rows + 2 * $large_rows
		FROM persist_sink.listen('group', 0))}),
	't',
	'group commit: every update once; the appends at two times after the compare_and_append');
is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.verify('group')"),
	0, "group commit: verify('group') is clean");

#
# append in another database than persist_sink.database is served too, by a
# worker started for it (see 031_databases.pl)
#
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other',
	"CREATE EXTENSION persist_sink; SELECT persist_sink.create_shard('elsewhere');");
my ($ret, $out, $err) = $node->psql('other',
	"SET statement_timeout = '30s'; SELECT persist_sink.append('elsewhere', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]);"
);
is($ret, 0, 'append in another database succeeds') or diag $err;
is($node->safe_psql('other', "SELECT upper > 0 FROM persist_sink.shards WHERE name = 'elsewhere'"),
	't', '... and is written');

$node->stop;
done_testing();
