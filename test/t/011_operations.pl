
# Copyright (c) persist_sink contributors

# What a DBA relies on when the sink runs for long:
#  (a) the workers report their table statistics, so autovacuum sees every
#      update of the consensus table: after thousands of appends n_tup_upd
#      follows the shard's seqno, autovacuum has vacuumed the table, and its
#      size stays bounded;
#  (b) writers terminated at every stage of an append (waiting for arena
#      space, attached and waiting for the commit, waiting for a worker to
#      take their interval, handing over the parts of a large write) leave
#      nothing behind: sink_memory() is back at zero bytes and no interval,
#      the shard verifies clean and takes new appends;
#  (c) idempotency keys: many sessions appending one write under one key
#      at the same time write it once and all get the same time; a retry
#      after a restart still gets that time; a writer cancelled after its
#      interval was sealed gets 40003, and its retry with the key returns
#      the time the write committed at; wait_upper is woken by the commit
#      that moves the upper; once the key is older than
#      persist_sink.idempotency_window it is forgotten.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep);

my $dir = PostgreSQL::Test::Utils::tempdir;

#
# (a) autovacuum follows the workers' writes
#
my $node = sink_node(
	'ops', qq{
autovacuum_naptime = 1s
max_connections = 140
persist_sink.shared_memory = '1MB'
});
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('av')");

# Four sessions append $per_session single-row writes each, as phase $phase.
sub load_phase
{
	my ($phase, $per_session) = @_;
	my @sessions;
	for my $s (1 .. 4)
	{
		# one statement, and so one transaction, per append: a long
		# transaction would keep vacuum from removing anything
		my $sql = join('',
			map {
				"SELECT FROM persist_sink.append('av', ARRAY['p$phase-s$s-$_'], "
				  . "ARRAY[repeat('v', 40)], ARRAY[1::bigint]);\n"
			} 1 .. $per_session);
		push @sessions, start_psql($node, $dir, "av${phase}_$s", $sql . "SELECT 'done';\n");
	}
	for my $c (@sessions)
	{
		my $r = finish_psql($c);
		ok($r->{ok} && $r->{out} =~ /done/, "phase $phase, $c->{name}: $per_session appends")
		  or diag($r->{err});
	}
}

# Waits until the stats of the consensus table have caught up with the
# shard's seqno; returns the table's size.
sub settled_size
{
	my ($label) = @_;
	my $seqno = $node->safe_psql('postgres',
		"SELECT seqno FROM persist_sink.shards WHERE name = 'av'");
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT n_tup_upd >= $seqno
FROM pg_stat_user_tables WHERE relid = 'persist_sink.consensus'::regclass}),
		"$label: n_tup_upd of the consensus table follows the shard's seqno ($seqno)");
	my $size = $node->safe_psql('postgres',
		"SELECT pg_total_relation_size('persist_sink.consensus')");
	note "$label: seqno $seqno, consensus table $size bytes";
	return $size;
}

my $per_session = 5000;
load_phase(1, $per_session);
my $size1 = settled_size('after 20000 appends');
load_phase(2, $per_session);
my $size2 = settled_size('after 40000 appends');
is($node->safe_psql('postgres', "SELECT sum(diff) FROM persist_sink.snapshot('av')"),
	8 * $per_session, 'all appended updates are there');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT autovacuum_count > 0
FROM pg_stat_user_tables WHERE relid = 'persist_sink.consensus'::regclass}),
	'autovacuum has vacuumed the consensus table');
# Autovacuum removes the dead versions of the state row: the table's
# dead tuples come back down, and its size stays far below the state
# bytes written (every append writes the whole state: without vacuum the
# table would hold them all: it stays under half of that even when
# autovacuum lags on a busy machine).
ok( $node->poll_query_until(
		'postgres', qq{
SELECT n_dead_tup < 500
FROM pg_stat_user_tables WHERE relid = 'persist_sink.consensus'::regclass}),
	'autovacuum brings the dead tuples of the consensus table back down');
my $written = $node->safe_psql('postgres',
	"SELECT state_bytes FROM persist_sink.stats WHERE shard = 'av'");
note "state bytes written by the appends: $written; table $size1 bytes, then $size2";
cmp_ok($size2, "<", $written / 2,
	"the consensus table ($size2 bytes) stays far below the state bytes written ($written)");

#
# (b) terminated writers leave the arena empty
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('t')");
my $empty = $node->safe_psql('postgres',
	'SELECT small_bytes, part_bytes, intervals FROM persist_sink.sink_memory()');
is($empty, '0|0|0', 'the arena is empty before the writers start');

# SQL of one append to t: rows of width bytes each, as a small write (it
# joins the shared batch) or a large one (its own parts, handed over).
sub write_sql
{
	my ($tag, $rows, $width) = @_;
	return "SELECT persist_sink.append('t', ARRAY(SELECT '$tag-' || r FROM generate_series(1, $rows) r), "
	  . "ARRAY(SELECT repeat(md5('$tag' || r), $width / 32) FROM generate_series(1, $rows) r), "
	  . "array_fill(1::bigint, ARRAY[$rows]));\n";
}

# Number of writers (application_name w*) waiting in the sink.
sub waiting_writers
{
	return $node->safe_psql('postgres', qq{
SELECT count(*) FROM pg_stat_activity
WHERE application_name LIKE 'w%' AND wait_event_type = 'Extension'});
}

# Runs one round: a blocker session holds what the worker needs, writers
# start and wait, all of them are terminated, the blocker too; then the
# arena must be empty again.
my $terminated = 0;
sub round
{
	my ($name, $block_sql, $writers) = @_;
	my $blocker = start_psql($node, $dir, "b_$name",
		"BEGIN;\n$block_sql\nSELECT pg_sleep(300);\n", on_error_stop => 0);
	$node->poll_query_until('postgres', qq{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE application_name = 'b_$name' AND state = 'active' AND query LIKE '%pg_sleep%'})
	  or die "blocker of round $name did not start";
	my @w;
	for my $i (0 .. $#$writers)
	{
		push @w, start_psql($node, $dir, "w_${name}_$i", $writers->[$i]);
	}
	my $n = scalar @w;
	$node->poll_query_until('postgres', "SELECT " . "(" . q{
SELECT count(*) FROM pg_stat_activity
WHERE application_name LIKE 'w%' AND wait_event_type = 'Extension'} . ") >= $n")
	  or diag("round $name: only " . waiting_writers() . " of $n writers wait");
	my $stages = $node->safe_psql('postgres', qq{
SELECT string_agg(wait_event || ':' || n, ', ') FROM (
  SELECT wait_event, count(*) AS n FROM pg_stat_activity
  WHERE application_name LIKE 'w%' GROUP BY 1 ORDER BY 1) s});
	note "round $name: $n writers waiting ($stages)";
	$terminated += $node->safe_psql('postgres', qq{
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE 'w%'});
	$node->safe_psql('postgres', qq{
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'b_$name'});
	finish_psql($_) for @w;
	finish_psql($blocker);
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT small_bytes = 0 AND part_bytes = 0 AND intervals = 0 FROM persist_sink.sink_memory()}),
		"round $name: the arena is empty after its writers were terminated")
	  or diag($node->safe_psql('postgres', 'SELECT * FROM persist_sink.sink_memory()'));
}

# Small writes (about 40kB each: 9 fit in the small budget of a 1MB arena,
# the others wait for space) and large writes (three parts each).
my @small = map { write_sql("s$_", 400, 96) } 1 .. 25;
my @large = map { write_sql("l$_", 3000, 96) } 1 .. 10;

# The worker blocked writing a blob row: large writers hand over parts
# until the arena is full; small writers wait for their commit or for space.
round('blob', 'LOCK TABLE persist_sink.blob IN EXCLUSIVE MODE;', [ @large, @small ]);
# The worker blocked at its CaS: the writers of its interval wait for the
# commit, those of the next interval for a worker to take it.
round('cas', "SELECT 1 FROM persist_sink.consensus WHERE shard = 't' FOR UPDATE;",
	[ @large, @small ]);
# The worker blocked at its CaS, and only small writers: most wait for
# arena space.
round('space', "SELECT 1 FROM persist_sink.consensus WHERE shard = 't' FOR UPDATE;",
	[ map { write_sql("x$_", 400, 96) } 1 .. 35 ]);
cmp_ok($terminated, '>=', 100, "$terminated writers were terminated in all");

is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.verify('t')"),
	'0', 'shard t verifies clean');
ok($node->safe_psql('postgres', "SELECT persist_sink.append('t', '{after}'::text[], '{v}'::text[], '{1}') > 0") eq 't',
	'shard t takes new appends');
is($node->safe_psql('postgres',
		"SELECT small_bytes, part_bytes, intervals FROM persist_sink.sink_memory()"),
	'0|0|0', 'and the arena is empty again');

#
# (c) idempotency keys
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('idem')");
my $keyed = "SELECT 'ack ' || persist_sink.append('idem', ARRAY['k1', 'k2'], ARRAY['v', 'v'], "
  . "ARRAY[1, 1]::bigint[], 'the-key');\n";
my @same = map { start_psql($node, $dir, "idem$_", $keyed) } 1 .. 10;
my %times;
for my $c (@same)
{
	my $r = finish_psql($c);
	ok($r->{ok}, "$c->{name}: keyed append succeeded") or diag($r->{err});
	$times{$1}++ if $r->{out} =~ /ack (\d+)/;
}
is(scalar(keys %times), 1, 'ten concurrent appends with one key returned one time');
my ($key_time) = keys %times;
is($node->safe_psql('postgres', "SELECT sum(diff) FROM persist_sink.snapshot('idem')"),
	'2', 'and wrote once');
$node->restart;
is( $node->safe_psql('postgres',
		"SELECT persist_sink.append('idem', ARRAY['k1', 'k2'], ARRAY['v', 'v'], ARRAY[1, 1]::bigint[], 'the-key')"),
	$key_time, 'a retry after a restart returns the same time');
is($node->safe_psql('postgres', "SELECT sum(diff) FROM persist_sink.snapshot('idem')"),
	'2', 'and writes nothing');

# A writer cancelled after its interval was sealed gets 40003; its write
# commits anyway, and the retry with the same key returns that commit's
# time and writes nothing.  A lock on the blob table stops the worker after
# it sealed the interval, at the blob row of the shared part (over
# inline_max_bytes).
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('LOCK TABLE persist_sink.blob IN EXCLUSIVE MODE');
my $late_sql = "SELECT persist_sink.append('idem', ARRAY(SELECT 'late' || i FROM generate_series(1, 500) i), "
  . "ARRAY(SELECT md5(i::text) FROM generate_series(1, 500) i), array_fill(1::bigint, ARRAY[500]), 'late-key')";
my $late = start_psql($node, $dir, 'idem_late', "$late_sql;\n", on_error_stop => 0);
$node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'persist_sink worker' AND wait_event_type = 'Lock'})
  or die 'timed out waiting for the worker to wait for the blob table';
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'idem_late'");
my $r = finish_psql($late);
like($r->{err}, qr/was interrupted while its interval was being committed/,
	'a writer cancelled after its interval was sealed is told the append may still commit');
like($r->{err}, qr/same idempotency key/, '... and to retry with its key');
$holder->query_safe('COMMIT');
$holder->quit;
$node->poll_query_until('postgres', 'SELECT intervals = 0 FROM persist_sink.sink_memory()')
  or die 'timed out waiting for the interval to commit';
my $late_time = $node->safe_psql('postgres',
	"SELECT time FROM persist_sink.idempotency WHERE shard = 'idem' AND key = 'late-key'");
isnt($late_time, '', 'the cancelled write committed');
is($node->safe_psql('postgres', $late_sql), $late_time,
	'its retry with the same key returns the time it committed at');
is( $node->safe_psql('postgres',
		"SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('idem') WHERE key LIKE 'late%'"),
	'500 500', 'and its updates are there once');

# wait_upper: a consumer waiting past the shard's upper is woken by the
# commit of the next append (long before its 60 s timeout)
my $upper0 = $node->safe_psql('postgres', "SELECT persist_sink.shard_upper('idem')");
my $waiter = start_psql($node, $dir, 'idem_wait',
	"SELECT 'upper ' || persist_sink.wait_upper('idem', $upper0, '60s');\n");
$node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE application_name = 'idem_wait' AND wait_event_type = 'Extension'})
  or die 'timed out waiting for wait_upper to wait';
my $t_woken = time();
my $appended_at = $node->safe_psql('postgres',
	"SELECT persist_sink.append('idem', ARRAY['woken'], ARRAY['v'], ARRAY[1::bigint])");
$r = finish_psql($waiter);
ok($r->{ok} && $r->{out} =~ /upper (\d+)/ && $1 > $appended_at,
	'wait_upper returned an upper past the append that woke it') or diag($r->{out} . $r->{err});
cmp_ok(time() - $t_woken, '<', 30, '... long before its timeout');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET persist_sink.idempotency_window = '1s'; SELECT pg_reload_conf()");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM persist_sink.idempotency WHERE shard = 'idem'"),
	'the key is forgotten once older than the window');
cmp_ok(
	$node->safe_psql('postgres',
		"SELECT persist_sink.append('idem', ARRAY['k1', 'k2'], ARRAY['v', 'v'], ARRAY[1, 1]::bigint[], 'the-key')"),
	'>', $key_time, 'and the same key then writes again');

$node->stop;
done_testing();
