
# Copyright (c) persist_sink contributors

# The sink under faults:
#  (a) a worker killed with SIGKILL during load from several sessions: the
#      server restarts; every acknowledged append is there exactly once,
#      every other one entirely or not at all, and verify() is clean;
#  (b) a 1MB staging arena with far more data in flight, and a single write
#      five times larger than the arena: backpressure, never an error;
#  (c) writers cancelled by statement_timeout or pg_cancel_backend, while
#      in append: they get an error, the others go on, the shard stays
#      consistent;
#  (d) a large write streaming its parts in a 1MB arena, its writer
#      cancelled or its worker terminated (SIGTERM) in the middle: the
#      writer gets an error at once, and the arena is not left holding its
#      parts (later large writes still go through);
#  (e) a persist_sink.database that does not exist: its workers cannot
#      start, and an append in another database is served by a worker
#      started for that database;
#  (f) two writes whose diffs overflow only when summed, in one interval
#      with an unrelated write: the unrelated write still succeeds;
#  (g) many writes of one interval refused for overflow (33, more than
#      the 32 an interval could once list): each of them gets 22003 and
#      nothing of it is appended, while the write they overflow with and
#      an unrelated write of the same interval are appended.
# Workers refused a slot by max_worker_processes are in 015_worker_slots.pl.

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

my $dir = PostgreSQL::Test::Utils::tempdir;

# A started node for these tests: room for many sessions, restarted after
# a crash.
sub faults_node
{
	my ($name, $extra) = @_;
	return sink_node($name, "max_connections = 50\nrestart_after_crash = on\n" . ($extra || ''));
}

# SQL of one append of keys <tag>-<row>, printing "ack <tag>" once it returned.
sub append_sql
{
	my ($shard, $tag, $nrows, $valfn) = @_;
	$valfn ||= "left(md5('$tag-' || r), 16)";
	return
	    "SELECT 'ack $tag ' || (persist_sink.append('$shard', "
	  . "ARRAY(SELECT '$tag-' || r FROM generate_series(1, $nrows) r), "
	  . "ARRAY(SELECT $valfn FROM generate_series(1, $nrows) r), "
	  . "array_fill(1::bigint, ARRAY[$nrows])) > 0);\n";
}

# The acknowledged tags in a client's output.
sub acks
{
	my ($out) = @_;
	my %acked = map { $_ => 1 } ($out =~ /^ack (\S+) true$/mg);
	return \%acked;
}

# Checks a shard against the writes attempted: each is [tag, nrows, acked].
# Acknowledged writes are present exactly once; others entirely or not at
# all; nothing else is there, no diff is other than 1; verify() is clean.
sub check_writes
{
	my ($node, $shard, $writes, $what) = @_;
	$node->safe_psql('postgres',
		'DROP TABLE IF EXISTS attempted; CREATE TABLE attempted (tag text, nrows int, acked boolean)');
	my @rows = map { "('$_->[0]', $_->[1], " . ($_->[2] ? 'true' : 'false') . ')' } @$writes;
	while (my @chunk = splice(@rows, 0, 500))
	{
		$node->safe_psql('postgres', 'INSERT INTO attempted VALUES ' . join(', ', @chunk));
	}
	my $res = $node->safe_psql(
		'postgres', qq{
WITH actual AS (
	SELECT split_part(k, '-', 1) AS tag,
		   CASE WHEN split_part(k, '-', 2) ~ '^[0-9]{1,9}\$' THEN split_part(k, '-', 2)::int END AS r,
		   diff
	FROM persist_sink.snapshot('$shard'), convert_from(key, 'UTF8') k),
per_tag AS (
	SELECT a.tag, a.nrows, a.acked, count(x.tag) AS present, count(x.tag) FILTER (WHERE x.diff <> 1) AS wrong
	FROM attempted a LEFT JOIN actual x ON x.tag = a.tag AND x.r BETWEEN 1 AND a.nrows
	GROUP BY a.tag, a.nrows, a.acked)
SELECT (SELECT count(*) FROM per_tag WHERE acked),
	   (SELECT count(*) FROM per_tag WHERE acked AND present <> nrows),
	   (SELECT count(*) FROM per_tag WHERE present NOT IN (0, nrows)),
	   (SELECT count(*) FROM per_tag WHERE NOT acked AND present = nrows),
	   (SELECT coalesce(sum(wrong), 0) FROM per_tag),
	   (SELECT count(*) FROM actual) - (SELECT coalesce(sum(present), 0) FROM per_tag),
	   (SELECT count(*) FROM persist_sink.verify('$shard'))});
	my ($acked, $lost, $partial, $unacked_present, $wrong, $extra, $problems) = split /\|/, $res;
	is($lost, 0, "$what: every acknowledged append ($acked) is present");
	is($partial, 0, "$what: no append is partly present");
	is($wrong, 0, "$what: no update is duplicated");
	is($extra, 0, "$what: nothing that was not appended");
	is($problems, 0, "$what: verify('$shard') is clean");
	note("$what: $unacked_present unacknowledged appends were committed");
	return $acked;
}

# The pids of the sink workers.
sub worker_pids
{
	my ($node) = @_;
	return split /\n/,
	  $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'persist_sink worker' ORDER BY state = 'active' DESC, pid"
	  );
}

#
# (a) SIGKILL of a worker during load
#
my $node = faults_node('faults');
$node->safe_psql('postgres',
	"SELECT persist_sink.create_shard('kill_a'), persist_sink.create_shard('kill_b')");

my @writes_a;
my @writes_b;
my @clients;
# enough writes that the load lasts well past the kill (an idle machine
# does about a thousand appends a second here)
my $writes_per_client = 400;
for my $c (1 .. 6)
{
	my $sql = "SET persist_sink.shared_batch_max_bytes = '16kB';\n";
	for my $b (1 .. $writes_per_client)
	{
		my $nrows = $b % 3 == 0 ? 2000 : 200;
		my $shard = $b % 2 ? 'kill_a' : 'kill_b';
		my $tag = "k$c.$b";
		$sql .= append_sql($shard, $tag, $nrows);
		push @{ $shard eq 'kill_a' ? \@writes_a : \@writes_b }, [ $tag, $nrows, $c ];
	}
	push @clients, start_psql($node, $dir, "kill_c$c", $sql);
}
# kill a worker once the load is well under way
$node->poll_query_until('postgres',
	"SELECT coalesce(sum(shared_writes + own_writes), 0) >= 40 FROM persist_sink.stats")
  or die 'timed out waiting for the load';
my ($victim) = worker_pids($node);
ok(defined $victim, 'found a persist_sink worker');
my $done_before_kill = $node->safe_psql('postgres',
	'SELECT coalesce(sum(shared_writes + own_writes), 0) FROM persist_sink.stats');
kill 'KILL', $victim;

my %acked;
my $failed_clients = 0;
for my $c (@clients)
{
	my $r = finish_psql($c);
	ok(!$r->{timed_out}, "$c->{name} ended");
	$failed_clients++ unless $r->{ok};
	%acked = (%acked, %{ acks($r->{out}) });
}
cmp_ok($done_before_kill, '<', 6 * $writes_per_client, 'the worker was killed during the load');
cmp_ok($failed_clients, '>', 0, 'sessions lost their connection in the crash');
wait_sink_workers($node);
ok($node->log_contains('was terminated by signal 9'), 'the server restarted after the kill');

$_->[2] = $acked{ $_->[0] } ? 1 : 0 for (@writes_a, @writes_b);
my $n_acked = check_writes($node, 'kill_a', \@writes_a, 'after SIGKILL, kill_a');
$n_acked += check_writes($node, 'kill_b', \@writes_b, 'after SIGKILL, kill_b');
is($n_acked, scalar(keys %acked), 'every acknowledgement is for an attempted append');
cmp_ok($n_acked, '>', 0, 'some appends were acknowledged before the kill');

# the sink works after the restart, for small and large writes
my $r = finish_psql(start_psql($node, $dir, 'after_kill',
	"SET persist_sink.shared_batch_max_bytes = '16kB';\n"
	  . append_sql('kill_a', 'after.1', 200)
	  . append_sql('kill_a', 'after.2', 2000)));
ok($r->{ok}, 'appends after the restart succeed') or diag($r->{err});
push @writes_a, map { [ $_->[0], $_->[1], acks($r->{out})->{ $_->[0] } ] } ([ 'after.1', 200 ], [ 'after.2', 2000 ]);
check_writes($node, 'kill_a', \@writes_a, 'after the restart, kill_a');

#
# (c) cancelled writers: statement_timeout in append, pg_cancel_backend of
# writers blocked in append
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('cancel')");
my @writes_c;
my $sql = '';
my @timeouts = (1, 2, 5, 10, 20, 50);
for my $b (1 .. 48)
{
	my $large = $b % 2;
	my $tag = "t.$b";
	$sql .= "SET statement_timeout = '$timeouts[$b % @timeouts]ms';\n";
	$sql .= "SET persist_sink.shared_batch_max_bytes = " . ($large ? "'16kB'" : "'1MB'") . ";\n";
	$sql .= append_sql('cancel', $tag, $large ? 4000 : 200);
	push @writes_c, [ $tag, $large ? 4000 : 200 ];
}
my $timeouts = start_psql($node, $dir, 'timeouts', $sql, on_error_stop => 0);
my @others;
for my $c (1 .. 3)
{
	my $s = "SET persist_sink.shared_batch_max_bytes = '16kB';\n";
	for my $b (1 .. 30)
	{
		my $tag = "o$c.$b";
		my $nrows = $b % 3 == 0 ? 2000 : 200;
		$s .= append_sql('cancel', $tag, $nrows);
		push @writes_c, [ $tag, $nrows ];
	}
	push @others, start_psql($node, $dir, "others_c$c", $s);
}
my %acked_c;
$r = finish_psql($timeouts);
ok(!$r->{timed_out}, 'the session with statement timeouts ended');
like($r->{err}, qr/canceling statement due to statement timeout/,
	'statement_timeout cancelled appends');
%acked_c = (%acked_c, %{ acks($r->{out}) });
for my $c (@others)
{
	$r = finish_psql($c);
	ok($r->{ok}, "$c->{name}: every append succeeded next to the cancelled ones")
	  or diag($r->{err});
	my $acks = acks($r->{out});
	is(scalar(keys %$acks), 30, "$c->{name}: every append acknowledged");
	%acked_c = (%acked_c, %$acks);
}

# pg_cancel_backend: hold the shard's state row in a transaction, so that
# its worker cannot commit, and cancel writers waiting in append
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(
	"SELECT persist_sink.compare_and_append('cancel', ARRAY['held-1'], ARRAY[left(md5('held-1'), 16)],
		ARRAY[u], ARRAY[1::bigint], u, u + 1) FROM persist_sink.shard_upper('cancel') u");
push @writes_c, [ 'held', 1, 1 ];
my $small = start_psql($node, $dir, 'blocked_small', append_sql('cancel', 'bs', 200));
my $large = start_psql($node, $dir, 'blocked_large',
	"SET persist_sink.shared_batch_max_bytes = 0;\n" . append_sql('cancel', 'bl', 3000));
push @writes_c, [ 'bs', 200 ], [ 'bl', 3000 ];
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity
	 WHERE application_name IN ('blocked_small', 'blocked_large') AND state = 'active'
	   AND wait_event_type = 'Extension'")
  or die 'timed out waiting for the writers to wait in append';
# a writer that keeps waiting, and is not cancelled
my $patient = start_psql($node, $dir, 'patient', append_sql('cancel', 'patient', 100));
push @writes_c, [ 'patient', 100 ];
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE application_name = 'patient' AND state = 'active' AND wait_event_type = 'Extension'")
  or die 'timed out waiting for the patient writer';
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
		 WHERE application_name IN ('blocked_small', 'blocked_large')"),
	2,
	'cancelled the writers blocked in append');
for my $c ($small, $large)
{
	$r = finish_psql($c);
	ok(!$r->{timed_out} && !$r->{ok}, "$c->{name}: the cancelled append failed");
	like($r->{err}, qr/canceling statement due to user request/, "$c->{name}: ... as cancelled");
	%acked_c = (%acked_c, %{ acks($r->{out}) });
}
$holder->query_safe('COMMIT');
$holder->quit;
$r = finish_psql($patient);
ok($r->{ok}, 'the writer that was not cancelled succeeded') or diag($r->{err});
%acked_c = (%acked_c, %{ acks($r->{out}) });

$r = finish_psql(start_psql($node, $dir, 'after_cancel',
	append_sql('cancel', 'ac.1', 200) . "SET persist_sink.shared_batch_max_bytes = 0;\n"
	  . append_sql('cancel', 'ac.2', 200)));
ok($r->{ok}, 'appends after the cancellations succeed') or diag($r->{err});
%acked_c = (%acked_c, %{ acks($r->{out}) });
push @writes_c, [ 'ac.1', 200 ], [ 'ac.2', 200 ];
$_->[2] = ($_->[2] || $acked_c{ $_->[0] }) ? 1 : 0 for @writes_c;
check_writes($node, 'cancel', \@writes_c, 'after the cancellations');

# Holds a new shard's state row in a transaction and starts one write of
# tag w0 whose interval its worker then leaves waiting, so that the writes started next
# all join one interval.  Returns the holder and that first writer.
sub hold_worker
{
	my ($shard, $name) = @_;
	$node->safe_psql('postgres', "SELECT persist_sink.create_shard('$shard')");
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(
		"SELECT persist_sink.compare_and_append('$shard', ARRAY['held-1'], ARRAY['v'], ARRAY[0::bigint], ARRAY[1::bigint], 0, 1)"
	);
	my $first = start_psql($node, $dir, $name, append_sql($shard, 'w0', 1));
	$node->poll_query_until('postgres',
		"SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()")
	  or die 'timed out waiting for the worker to block';
	return ($holder, $first);
}

#
# (f) writes whose diffs overflow only when added together must not fail an
# unrelated write of the same interval.  As above, a transaction holding the
# state row keeps the worker busy, so that the writers all join one interval.
#
($holder, my $w0) = hold_worker('overflow', 'ovf_w0');
my %ovf = (
	ovf_max => "SELECT 'ack max ' || (persist_sink.append('overflow', ARRAY['k'], ARRAY['v'], ARRAY[9223372036854775807]) > 0);\n",
	ovf_one => "SELECT 'ack one ' || (persist_sink.append('overflow', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]) > 0);\n",
	ovf_other => append_sql('overflow', 'other', 100));
my %ovf_clients = map { $_ => start_psql($node, $dir, $_, $ovf{$_}) } sort keys %ovf;
$node->poll_query_until('postgres',
	"SELECT count(*) = 4 FROM pg_stat_activity
	 WHERE application_name LIKE 'ovf_%' AND state = 'active' AND wait_event_type = 'Extension'")
  or die 'timed out waiting for the writers to wait in append';
$holder->query_safe('COMMIT');
$holder->quit;
$r = finish_psql($w0);
ok($r->{ok}, 'overflow: the write of the blocked interval succeeded') or diag($r->{err});
my %res = map { $_ => finish_psql($ovf_clients{$_}) } keys %ovf_clients;
ok($res{ovf_other}{ok}, 'overflow: an unrelated write of the same interval succeeds')
  or diag($res{ovf_other}{err});
ok(!($res{ovf_max}{ok} && $res{ovf_one}{ok}),
	'overflow: the two writes that overflow together do not both succeed')
  or diag('both acknowledged');
my $k = $res{ovf_max}{ok} ? '9223372036854775807' : $res{ovf_one}{ok} ? '1' : '';
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE convert_from(key, 'UTF8') LIKE 'other-%' AND diff = 1) || ' '
	|| count(*) FILTER (WHERE convert_from(key, 'UTF8') IN ('held-1', 'w0-1') AND diff = 1) || ' '
	|| coalesce(max(diff) FILTER (WHERE key = 'k'::bytea)::text, '')
FROM persist_sink.snapshot('overflow')}),
	($res{ovf_other}{ok} ? 100 : 0) . " 2 $k",
	'overflow: the content is that of the writes that succeeded');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.verify('overflow')"),
	0, "overflow: verify('overflow') is clean");

#
# (g) an interval with many refused writes: a write of diff max joins
# first, then 33 writes of the same key and diff 1, each of which
# overflows with it, and one unrelated write.  As in (f), a held state row
# keeps the worker busy so that they all join one interval.  Each refusal
# is its own write's outcome: no limit on how many, and no other write of
# the interval fails with them.
#
($holder, my $p0) = hold_worker('poison', 'poison_w0');
# Counts the poison_* sessions waiting in append.
my $waiting_sql = "SELECT count(*) FROM pg_stat_activity
	 WHERE application_name LIKE 'poison_%' AND state = 'active' AND wait_event_type = 'Extension'";
my %poison = (poison_max =>
	  "SELECT persist_sink.append('poison', ARRAY['k'], ARRAY['v'], ARRAY[9223372036854775807]);\n");
$poison{poison_max} = start_psql($node, $dir, 'poison_max', $poison{poison_max});
$node->poll_query_until('postgres', $waiting_sql, '2')
  or die 'timed out waiting for the first writer to wait in append';
for my $i (1 .. 33)
{
	$poison{"poison_one$i"} = start_psql($node, $dir, "poison_one$i",
		"SELECT persist_sink.append('poison', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]);\n");
}
$poison{poison_other} = start_psql($node, $dir, 'poison_other', append_sql('poison', 'other', 100));
$node->poll_query_until('postgres', $waiting_sql, '36')
  or die 'timed out waiting for the writers to wait in append';
$holder->query_safe('COMMIT');
$holder->quit;
$r = finish_psql($p0);
ok($r->{ok}, 'poison: the write of the blocked interval succeeded') or diag($r->{err});
my ($failed, $with_22003, @succeeded) = (0, 0);
for my $name (sort keys %poison)
{
	my $res = finish_psql($poison{$name});
	if ($res->{ok})
	{
		push @succeeded, $name;
		next;
	}
	$failed++;
	$with_22003++
	  if $res->{err} =~ /sum of diffs out of range for type bigint in shard "poison"/;
}
is($failed, 33, 'poison: every write of diff 1 was refused');
is($with_22003, 33, 'poison: the error is 22003, sum of diffs out of range');
is("@succeeded", 'poison_max poison_other',
	'poison: the write of diff max and the unrelated write succeeded');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(convert_from(key, 'UTF8') || ':' || diff, ' ' ORDER BY key)
FROM persist_sink.snapshot('poison') WHERE key NOT LIKE 'other-%'}),
	'held-1:1 k:9223372036854775807 w0-1:1',
	'poison: nothing of the refused writes was appended');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE diff = 1) || '/' || count(*)
FROM persist_sink.snapshot('poison') WHERE key LIKE 'other-%'}),
	'100/100', 'poison: the unrelated write was appended once');
is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.verify('poison')"),
	0, "poison: verify('poison') is clean");
$r = finish_psql(start_psql($node, $dir, 'poison_after', append_sql('poison', 'after', 10)));
ok($r->{ok}, 'poison: the shard takes appends afterwards') or diag($r->{err});
$node->stop;

#
# (b) a 1MB arena: backpressure, never an error, never a blow-up
#
$node = faults_node('arena', "persist_sink.shared_memory = '1MB'\n");
is($node->safe_psql('postgres', 'SHOW persist_sink.shared_memory'), '1MB', 'a 1MB arena');
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('arena')");
my @writes_arena;
@clients = ();
# 8 sessions x 50 appends of ~100-byte rows: ~80MB through a 1MB arena
my $valfn = "md5('v' || r) || md5('w' || r)";
for my $c (1 .. 8)
{
	my $s = '';
	for my $b (1 .. 50)
	{
		my $nrows = $b % 5 == 0 ? 200 : 2000;
		my $tag = "a$c.$b";
		$s .= append_sql('arena', $tag, $nrows, $valfn);
		push @writes_arena, [ $tag, $nrows, 1 ];
	}
	push @clients, start_psql($node, $dir, "arena_c$c", $s);
}
for my $c (@clients)
{
	$r = finish_psql($c);
	ok($r->{ok}, "$c->{name}: every append succeeded in the small arena") or diag($r->{err});
	is(scalar(keys %{ acks($r->{out}) }), 50, "$c->{name}: every append acknowledged");
}
# one write of ~5MB, five times the arena, above the threshold: it streams
$r = finish_psql(start_psql($node, $dir, 'arena_huge', append_sql('arena', 'huge', 50000, $valfn)));
ok($r->{ok}, 'a single write larger than the arena succeeds') or diag($r->{err});
ok(acks($r->{out})->{huge}, '... and is acknowledged');
push @writes_arena, [ 'huge', 50000, 1 ];
check_writes($node, 'arena', \@writes_arena, 'small arena');
is( $node->safe_psql('postgres',
		"SELECT count(*) = 8 * (40 * 2000 + 10 * 200) + 50000 AND sum(diff) = count(*)
		 FROM persist_sink.snapshot('arena')"),
	't',
	'small arena: every row once');

# one update whose part cannot fit in the arena: a clean error, nothing
# written, and the shard's seqno, upper and stats as they were
my $arena_before = $node->safe_psql('postgres', q{
SELECT s.seqno || ' ' || s.upper || ' ' || coalesce(t.appends, 0) || ' ' || coalesce(t.updates, 0)
FROM persist_sink.shards s LEFT JOIN persist_sink.stats t ON t.shard = s.name WHERE s.name = 'arena'});
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
SELECT persist_sink.append('arena', ARRAY['too big']::bytea[],
	ARRAY[(SELECT decode(string_agg(md5(i::text || random()::text), ''), 'hex')
		   FROM generate_series(1, 40000) AS i)], ARRAY[1::bigint])});
isnt($ret, 0, 'small arena: an update larger than the arena can hold is refused');
like($stderr, qr/does not fit in persist_sink\.shared_memory/,
	'... with an error naming the setting');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.snapshot('arena') WHERE key = 'too big'::bytea"),
	'0', '... and nothing of it is written');
# once the worker has finished the interval the refused write had joined
$node->poll_query_until('postgres', 'SELECT intervals = 0 FROM persist_sink.sink_memory()')
  or die 'timed out waiting for the interval to finish';
is( $node->safe_psql('postgres', q{
SELECT s.seqno || ' ' || s.upper || ' ' || coalesce(t.appends, 0) || ' ' || coalesce(t.updates, 0)
FROM persist_sink.shards s LEFT JOIN persist_sink.stats t ON t.shard = s.name WHERE s.name = 'arena'}),
	$arena_before, '... and its seqno, upper and stats are unchanged');

#
# (d) a large write streaming its parts: its writer cancelled, or its worker
# terminated (SIGTERM), in the middle.  A transaction holding a lock on the
# blob table stops the worker at the first part, so that the writer fills
# the 1MB arena and waits for room: both are then mid-stream for sure.
#
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('stream')");
my @stream_writes;

# Starts a 2MB write to 'stream' behind a lock on the blob table; returns
# the writer and the holder of the lock once both writer and worker wait.
sub start_stream
{
	my ($name, $tag) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe('LOCK TABLE persist_sink.blob IN EXCLUSIVE MODE');
	my $writer = start_psql($node, $dir, $name,
		"SET statement_timeout = '30s';\n" . append_sql('stream', $tag, 20000, $valfn));
	$node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity
		 WHERE (backend_type = 'persist_sink worker' AND query = 'stream' AND wait_event_type = 'Lock')
			OR (application_name = '$name' AND state = 'active' AND wait_event_type = 'Extension')")
	  or die "timed out waiting for $name to stream";
	return ($writer, $holder);
}

# Large writes after the fault: they must go through (the arena is not
# left holding the parts of the write that failed).
sub stream_after
{
	my ($what) = @_;
	my $sql = "SET statement_timeout = '30s';\n";
	$sql .= append_sql('stream', "$what.$_", 20000, $valfn) for 1 .. 3;
	my $r = finish_psql(start_psql($node, $dir, "after_$what", $sql));
	ok($r->{ok}, "$what: large writes afterwards succeed") or diag($r->{err});
	my $acked = acks($r->{out});
	push @stream_writes, map { [ "$what.$_", 20000, $acked->{"$what.$_"} ] } 1 .. 3;
}

# the writer cancelled in the middle of its parts
my ($writer, $holder_d) = start_stream('stream_cancel', 'cancelled');
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
		 WHERE application_name = 'stream_cancel'"),
	1,
	'cancelled the writer in the middle of its parts');
$r = finish_psql($writer);
ok(!$r->{timed_out} && !$r->{ok}, 'the cancelled streaming write failed');
like($r->{err}, qr/canceling statement due to user request/, '... as cancelled');
push @stream_writes, [ 'cancelled', 20000, 0 ];
$holder_d->query_safe('ROLLBACK');
$holder_d->quit;
stream_after('after_cancel');

# the worker terminated while the writer is in the middle of its parts,
# several times: whatever the exited worker held must return to the arena
for my $round (1 .. 12)
{
	($writer, $holder_d) = start_stream("stream_term$round", "terminated$round");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			 WHERE backend_type = 'persist_sink worker' AND query = 'stream'"),
		1,
		"round $round: terminated the worker in the middle of the parts");
	$r = finish_psql($writer);
	my $ok = ok(!$r->{timed_out} && !$r->{ok}, "round $round: the streaming write failed");
	$ok &= unlike($r->{err}, qr/statement timeout/, "round $round: ... at once, not at its statement_timeout");
	$ok &= ok(!acks($r->{out})->{"terminated$round"}, "round $round: ... and was not acknowledged");
	push @stream_writes, [ "terminated$round", 20000, 0 ];
	$holder_d->query_safe('ROLLBACK');
	$holder_d->quit;
	wait_sink_workers($node);
	# one large write after each round; all of them must go through
	my $sql = "SET statement_timeout = '30s';\n" . append_sql('stream', "after_term$round", 20000, $valfn);
	$r = finish_psql(start_psql($node, $dir, "after_term$round", $sql));
	$ok &= ok($r->{ok}, "round $round: a large write afterwards succeeds") or diag($r->{err});
	push @stream_writes, [ "after_term$round", 20000, acks($r->{out})->{"after_term$round"} ];
	last unless $ok;
}
check_writes($node, 'stream', \@stream_writes, 'streaming writes');
$node->stop;

#
# (e) persist_sink.database names a database that does not exist: its
# workers cannot start (the log says why), and every database where the
# extension is created is served by workers started for it
#
$node = sink_node('nodb', "persist_sink.database = 'nosuchdb'\n");
$node->safe_psql('postgres', "SELECT persist_sink.create_shard('nodb')");
my ($nodb_ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSET statement_timeout = '60s';\nSELECT persist_sink.append('nodb', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]);"
);
is($nodb_ret, 0, 'append in a database other than the missing persist_sink.database succeeds')
  or diag $err;
is($node->safe_psql('postgres', "SELECT upper > 0 FROM persist_sink.shards WHERE name = 'nodb'"),
	't', '... and is written');
like(slurp_file($node->logfile), qr/FATAL:  database "nosuchdb" does not exist/,
	'the log says why the workers of persist_sink.database do not start');
$node->stop;

done_testing();
