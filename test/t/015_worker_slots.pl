
# Copyright (c) persist_sink contributors

# Workers refused a slot by max_worker_processes:
#  (a) the server log names each persist_sink worker refused a slot, with
#      how many the extension registers, the setting, the slots taken
#      before them (the logical replication launcher) and the setting that
#      would be enough; with that setting, nothing is refused;
#  (b) a write to a shard served by a refused sink worker fails at once
#      with 55000, naming the worker and saying it was refused a slot (the
#      refusal is known from server start), instead of waiting; shards of
#      the running worker are served;
#  (c) with the compactors refused, an append stalled by backpressure fails
#      after 30 seconds with 55000 naming them, instead of waiting for
#      compaction that never comes; nothing of either write is written.
#      So does an empty append (it opens an interval, and so waits for the
#      shard to come below its bound like any other write).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $refused_line = qr/LOG:  persist_sink background workers? refused a slot: (.*)/;

# The names the log line gives for the refused workers, or undef.
sub refused_names
{
	my ($node) = @_;
	my $log = slurp_file($node->logfile);
	return $log =~ $refused_line ? $1 : undef;
}

#
# (a) with the logical replication launcher registered first, three slots
# leave none for the two compactors; five are enough
#
my $node = sink_node(
	'launcher', q{
persist_sink.workers = 2
max_worker_processes = 3
}, no_extension => 1);
is(refused_names($node), '"persist_sink compactor 0", "persist_sink compactor 1"',
	'launcher: the log names the workers refused, the compactors');
ok( $node->log_contains(
		'DETAIL:  persist_sink registers 4 background workers \(persist_sink.workers = 2 sink workers, persist_sink.compactors = 2 compactors\); max_worker_processes is 3; background workers registered before them: 1\.'
	),
	'launcher: ... with what it registers, the setting and the slot taken before');
ok($node->log_contains('HINT:  Set max_worker_processes to at least 5 and restart the server\.'),
	'launcher: ... and the setting that would be enough');
$node->stop;

$node = sink_node(
	'enough', q{
persist_sink.workers = 2
max_worker_processes = 5
}, no_extension => 1);
is(refused_names($node), undef, 'enough: with that setting no worker is refused');
ok(!$node->log_contains('too many background workers'), 'enough: ... nor any other');
$node->stop;

#
# (b), (c) one slot for background workers, and no logical replication
# launcher to take it: only the first sink worker starts; the second and
# the compactors are refused.  Each shard is served by one worker, chosen
# by a hash of its name: 'first' by the first, 'second' by the second.
# From 2 batches, appends stall until compaction.
#
$node = sink_node(
	'noslot', q{
persist_sink.workers = 2
max_worker_processes = 1
max_logical_replication_workers = 0
persist_sink.slowdown_batches = 1
persist_sink.stop_batches = 2
});
is(refused_names($node), '"persist_sink worker 1", "persist_sink compactor 0", "persist_sink compactor 1"',
	'noslot: the log names the refused sink worker and the compactors');
ok($node->log_contains('HINT:  Set max_worker_processes to at least 4 '),
	'noslot: ... and says how many slots are needed');

$node->safe_psql('postgres',
	"SELECT persist_sink.create_shard('first'); SELECT persist_sink.create_shard('second');");
# one batch from the running worker, one from compare_and_append: 'first'
# is at its stop bound
$node->safe_psql('postgres', q{
SELECT persist_sink.append('first', ARRAY['a'], ARRAY['v'], ARRAY[1::bigint]);
SELECT persist_sink.compare_and_append('first', ARRAY['b'], ARRAY['v'],
       ARRAY[persist_sink.shard_upper('first')], ARRAY[1::bigint],
       persist_sink.shard_upper('first'), persist_sink.shard_upper('first') + 1);
});
my $first_upper =
  $node->safe_psql('postgres', "SELECT persist_sink.shard_upper('first')");
is($node->safe_psql('postgres', "SELECT batches FROM persist_sink.shards WHERE name = 'first'"),
	2, "noslot: 'first' is served, and holds 2 batches");

# both waits at once
my %session;
for my $shard (qw(first second))
{
	$session{$shard} = start_psql(
		$node, $dir, "append_$shard",
		"\\set VERBOSITY verbose\nSET statement_timeout = '90s';\n"
		  . "SELECT persist_sink.append('$shard', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]);\n");
}
$session{empty} = start_psql(
	$node, $dir, 'append_empty',
	"\\set VERBOSITY verbose\nSET statement_timeout = '90s';\n"
	  . "SELECT persist_sink.append('first', ARRAY[]::text[], ARRAY[]::text[], ARRAY[]::bigint[]);\n");
my $second = finish_psql($session{second});
ok(!$second->{ok} && !$second->{timed_out}, "noslot: the append to 'second' fails");
like(
	$second->{err},
	qr/ERROR:  55000: persist_sink worker 1 is not running\nDETAIL:  It was refused a background worker slot at server start: max_worker_processes is 1\./,
	"noslot: ... at once with 55000, naming the worker refused a slot");
unlike($second->{err}, qr/statement timeout/, 'noslot: ... not at its statement_timeout');
is($node->safe_psql('postgres', "SELECT upper FROM persist_sink.shards WHERE name = 'second'"),
	0, "noslot: 'second': nothing was written");

my $first = finish_psql($session{first});
ok(!$first->{ok} && !$first->{timed_out}, "noslot: the stalled append to 'first' fails");
like(
	$first->{err},
	qr/ERROR:  55000: shard "first" holds 2 batches, at persist_sink.stop_batches, and no persist_sink compactor is running\nDETAIL:  Every compactor was refused a background worker slot at server start \(max_worker_processes is 1\)\. The append waited 30 seconds for compaction; nothing of it was written\./,
	"noslot: ... after 30 seconds with 55000, saying every compactor was refused a slot");
my $empty = finish_psql($session{empty});
ok(!$empty->{ok} && !$empty->{timed_out}, "noslot: an empty append to 'first' fails too");
like(
	$empty->{err},
	qr/ERROR:  55000: shard "first" holds 2 batches, at persist_sink.stop_batches, and no persist_sink compactor is running\n/,
	"noslot: ... after 30 seconds with the same 55000");
unlike($empty->{err}, qr/statement timeout/, 'noslot: ... not at its statement_timeout');
is($node->safe_psql('postgres', "SELECT persist_sink.shard_upper('first')"),
	$first_upper, "noslot: 'first': nothing was written");
$node->stop;

done_testing();
