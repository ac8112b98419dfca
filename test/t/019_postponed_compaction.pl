
# Copyright (c) persist_sink contributors

# A merge that waits longer than the compactor's lock timeout (2 seconds)
# is postponed, not given up: the compactor logs it with the reason and
# queues the shard again within 10 seconds, so that a shard at rest is
# compacted once the lock is released, with no append asking for it.
#  (a) With compaction off, a shard gets 8 small batches; a session holds
#      the shard's consensus row (SELECT ... FOR UPDATE) and compaction is
#      turned on: the merge's compare-and-swap waits for the row, and the
#      log says the compaction was postponed, with the detail.  The shard
#      still holds its 8 batches.
#  (b) The session commits: with no further append, the shard is merged
#      into one batch, its content unchanged and verify() clean; the log
#      never reports the compaction as failed.
#  (c) A compactor that exits while it holds a postponed merge queues the
#      shard on its way out: with 8 new batches postponed the same way, the
#      compactor that logged it is terminated and the row released; with
#      no append, the shard is merged.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('postponed', "persist_sink.compaction = off\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# (a) 8 batches, the consensus row held, compaction turned on
query("SELECT persist_sink.create_shard('held')");
append_batches($node, 'held', 0, 7, 10);
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'held'"), '8', '8 batches');
my $digest = query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('held')});

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT FROM persist_sink.consensus WHERE shard = 'held' FOR UPDATE});
my $log_offset = -s $node->logfile;
query('ALTER SYSTEM SET persist_sink.compaction = on');
query('SELECT pg_reload_conf()');
$node->wait_for_log(
	qr/LOG:  persist_sink: compaction of shard "held" postponed: canceling statement due to lock timeout\n.*DETAIL:  A lock the merge needs was held by another transaction for longer than 2s; the shard is tried again within 10 seconds\./,
	$log_offset);
pass('the compactor postponed the merge, and said why');
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'held'"), '8',
	'the shard still holds its 8 batches');

# (b) the row released: merged with no append asking for it
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres',
		"SELECT batches FROM persist_sink.shards WHERE name = 'held'", '1'),
	'once the row is released, the shard is merged into one batch');
is(query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('held')}), $digest, 'with the same content');
is(query("SELECT count(*) FROM persist_sink.verify('held')"), '0', 'verify() is clean');
unlike(slurp_file($node->logfile, $log_offset), qr/compaction of shard "held" failed/,
	'the compaction was never reported as failed');

# (c) the compactor holding a postponed merge exits: the shard is merged
query('ALTER SYSTEM SET persist_sink.compaction = off');
query('SELECT pg_reload_conf()');
query("SELECT persist_sink.create_shard('orphan')");
append_batches($node, 'orphan', 0, 7, 10);
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'orphan'"), '8',
	'another shard with 8 batches');
$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT FROM persist_sink.consensus WHERE shard = 'orphan' FOR UPDATE});
$log_offset = -s $node->logfile;
query('ALTER SYSTEM SET persist_sink.compaction = on');
query('SELECT pg_reload_conf()');
$node->wait_for_log(qr/LOG:  persist_sink: compaction of shard "orphan" postponed/, $log_offset);
my ($pid) = slurp_file($node->logfile, $log_offset) =~
  /\[(\d+)\] LOG:  persist_sink: compaction of shard "orphan" postponed/;
ok(defined $pid, 'its merge is postponed too');
query("SELECT pg_terminate_backend($pid)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0'),
	'the compactor that postponed it exits');
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres',
		"SELECT batches FROM persist_sink.shards WHERE name = 'orphan'", '1'),
	'the shard is merged all the same, with no append asking for it');
is(query("SELECT count(*) FROM persist_sink.verify('orphan')"), '0', 'verify() is clean');

$node->stop;
done_testing();
