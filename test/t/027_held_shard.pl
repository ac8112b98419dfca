
# Copyright (c) persist_sink contributors

# A shard whose state row another transaction holds may only delay itself:
#  (a) appends to it that time out while they wait give back their memory
#      and their tickets at once: the small-write memory is back to what
#      it was before, while the shard is still held;
#  (b) a large write that is the first of a held shard's interval (so the
#      worker has taken the interval, and waits for the row) does not hand
#      its parts over meanwhile: a large write to another shard of the same
#      worker (one worker here) goes through, in an arena whose room for
#      parts (3 MB) is less than either write's parts;
#  (c) once the holder commits, the held large write commits too, once;
#  (d) a row two transactions lock FOR SHARE (a multixact) is held as well:
#      the interval waits, reported with no single holder, and commits once
#      both let go.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('held', "persist_sink.workers = 1\npersist_sink.shared_memory = '8MB'\nmax_connections = 30\n");
my $q = sub { $node->safe_psql('postgres', shift) };
$q->("SELECT persist_sink.create_shard('held'); SELECT persist_sink.create_shard('held2');
	SELECT persist_sink.create_shard('free')");

my $used_sql = 'SELECT small_bytes || \' \' || part_bytes FROM persist_sink.sink_memory()';
is($q->($used_sql), '0 0', 'the arena is empty');

# Holds a shard's state row: a session's compare_and_append left open.
sub hold_row
{
	my ($shard) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(
		"SELECT persist_sink.compare_and_append('$shard', ARRAY['h'], ARRAY['v'], ARRAY[u], ARRAY[1::bigint], u, u + 1)
		 FROM persist_sink.shard_upper('$shard') u");
	return $holder;
}

# hold the shard, and a first write blocked
my $holder = hold_row('held');
my $w0 = start_psql($node, $dir, 'w0', wide_append_sql('held', 'w0', 10));
$node->poll_query_until('postgres', 'SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()')
  or die 'timed out waiting for the held interval';

# (a) eight writes of ~100 kB time out while they wait
my @timed;
push @timed, start_psql($node, $dir, "t$_", "SET statement_timeout = '1s';\n" . wide_append_sql('held', "t$_", 800),
	on_error_stop => 0) for 1 .. 8;
my $n_timed = 0;
for my $t (@timed)
{
	my $r = finish_psql($t);
	$n_timed++ if $r->{err} =~ /canceling statement due to statement timeout/;
}
is($n_timed, 8, '(a) the eight appends to the held shard timed out');
my ($small_now) = split / /, $q->($used_sql);
cmp_ok($small_now, '<', 100_000, "(a) their memory is given back at once ($small_now bytes of small writes left)");

# (b) a large write (8 MB of updates, about 4 MB of parts) to another held
# shard, the first of its interval
my $holder2 = hold_row('held2');
my $big = start_psql($node, $dir, 'big', wide_append_sql('held2', 'big', 80000));
$node->poll_query_until('postgres', 'SELECT blocked_intervals = 2 FROM persist_sink.sink_memory()')
  or die 'timed out waiting for the large write\'s interval to block';
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE application_name = 'big' AND wait_event_type = 'Extension'})
  or die 'timed out waiting for the large write to wait';
my $other = finish_psql(start_psql($node, $dir, 'other',
	"SET statement_timeout = '30s';\n" . wide_append_sql('free', 'other', 80000)));
ok($other->{ok}, '(b) a large write to another shard of the worker goes through while one waits on a held shard')
  or diag($other->{err});
is($q->("SELECT count(*) FROM persist_sink.snapshot('free')"), 80000, '(b) ... and is written');
# a part is cut at a quarter of the parts' room (768 kB of updates)
my (undef, $parts_now) = split / /, $q->($used_sql);
cmp_ok($parts_now, '<=', 800_000,
	"(b) the held large write has handed over at most the part under way ($parts_now bytes)");

# (c) let go
$holder->query_safe('COMMIT');
$holder->quit;
ok(finish_psql($w0)->{ok}, '(c) the first write of the held shard commits');
$holder2->query_safe('COMMIT');
$holder2->quit;
my $rb = finish_psql($big);
ok($rb->{ok}, '(c) the held large write commits') or diag($rb->{err});
is( $q->("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('held2') WHERE key LIKE 'big-%'"),
	'80000 80000', '(c) ... once');
is( $q->("SELECT count(*) FROM persist_sink.snapshot('held') WHERE key LIKE 't%-%'"),
	0, '(a) nothing of the timed-out writes was written');
is($q->($used_sql), '0 0', 'the arena is empty again');

# (d) two sessions share-lock the row of shard 'free'
my @sharers = map { $node->background_psql('postgres') } 1 .. 2;
for my $s (@sharers)
{
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT 1 FROM persist_sink.consensus WHERE shard = 'free' FOR SHARE");
}
my $shared = start_psql($node, $dir, 'shared', wide_append_sql('free', 'shared', 10));
$node->poll_query_until('postgres', 'SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()')
  or die 'timed out waiting for the share-locked interval';
$sharers[0]->query_safe('COMMIT');
# still held by the other one: the write keeps waiting
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE application_name = 'shared' AND wait_event_type = 'Extension'})
  or die 'timed out waiting for the write to wait';
is($q->("SELECT count(*) FROM persist_sink.snapshot('free') WHERE key LIKE 'shared-%'"),
	0, '(d) nothing is written while one of two share locks is held');
$sharers[1]->query_safe('COMMIT');
$_->quit for @sharers;
ok(finish_psql($shared)->{ok}, '(d) the write to the share-locked row commits once both let go');
is($q->("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('free') WHERE key LIKE 'shared-%'"),
	'10 10', '(d) ... once');

$node->stop;
done_testing();
