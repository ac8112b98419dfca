
# Copyright (c) persist_sink contributors

# A background merge deletes nothing while it holds its shard's state row:
# it lists the parts it replaced in the garbage table, in its own
# transaction, and a compactor deletes their blob rows once it committed.
#  (a) 8 batches of blob parts; a session holds one of their blob rows
#      (FOR UPDATE) and compaction is turned on.  The merge commits: the
#      shard is one batch, and one garbage row lists the 8 replaced parts,
#      whose blob rows are still there; verify() is clean, the content
#      unchanged, and appends go on.
#  (b) The server stops (immediate) with that garbage left.  At start a
#      compactor sweeps it: the garbage table is empty, every blob row of
#      the shard is a part of its state, verify() is clean.
#      The collector waits for the held blob row at most its lock timeout
#      (2 s), logs that it gave up, and leaves the garbage row.
#  (c) drop_shard() while the collector holds a garbage row and waits for a
#      blob row: drop_shard() waits; once the blob row is released it
#      finishes, no deadlock, and nothing of the shard is left.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('garbage',
	"persist_sink.compaction = off\npersist_sink.inline_max_bytes = 0\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# The blob keys of a shard's parts, sorted, comma-separated.
sub blob_keys
{
	my ($shard) = @_;
	return query(qq{
SELECT string_agg(DISTINCT key, ',' ORDER BY key) FROM persist_sink.blob
WHERE starts_with(key, '$shard/')});
}

# A digest of a shard's snapshot.
sub digest
{
	my ($shard) = @_;
	return query(qq{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('$shard')});
}

# Turns compaction on or off and waits until the server has read it.
sub set_compaction
{
	my ($on) = @_;
	query("ALTER SYSTEM SET persist_sink.compaction = $on");
	query('SELECT pg_reload_conf()');
	$node->poll_query_until('postgres',
		"SELECT current_setting('persist_sink.compaction') = '$on'")
	  or die "compaction not turned $on";
}

# Holds a blob row of $shard (the lowest key) in a new session; returns it.
sub hold_a_blob_row
{
	my ($shard) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(qq{
SELECT FROM persist_sink.blob
WHERE key = (SELECT min(key) FROM persist_sink.blob WHERE starts_with(key, '$shard/'))
FOR UPDATE});
	return $holder;
}

# (a) the merge commits, its replaced parts wait as garbage
query("SELECT persist_sink.create_shard('g1')");
append_batches($node, 'g1', 0, 7, 50);
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'g1'"), '8', '8 batches');
my $before_keys = blob_keys('g1');
is(scalar(split /,/, $before_keys), 8, 'one blob part per batch');
my $digest = digest('g1');

my $holder = hold_a_blob_row('g1');
my $log_offset = -s $node->logfile;
set_compaction('on');
$node->poll_query_until('postgres',
	"SELECT batches = 1 FROM persist_sink.shards WHERE name = 'g1'")
  or die 'the shard was not merged';
pass('the merge committed while a replaced part\'s blob row was held');
is( query(q{
SELECT string_agg(k, ',' ORDER BY k) FROM persist_sink.garbage, unnest(keys) k
WHERE shard = 'g1'}),
	$before_keys, 'one garbage row lists the 8 replaced parts');
my $after = blob_keys('g1');
is(scalar(grep { index(",$after,", ",$_,") >= 0 } split(/,/, $before_keys)),
	8, 'their blob rows are still there');
is(query("SELECT count(*) FROM persist_sink.verify('g1')"), '0',
	'verify() is clean: garbage is not unreferenced');
is(digest('g1'), $digest, 'the content is unchanged');
query(q{SELECT persist_sink.append('g1', '{a}'::text[], '{x}'::text[], '{1}')});
pass('appends go on meanwhile');
$node->wait_for_log(qr/ERROR:  canceling statement due to lock timeout/, $log_offset);
pass('the collector gave up on the held blob row after the lock timeout, and said so');
is(query(q{SELECT count(*) FROM persist_sink.garbage WHERE shard = 'g1'}), '1',
	'the garbage row is left for a later sweep');

# (b) an immediate stop leaves the garbage; the sweep at start deletes it
$node->stop('immediate');
$holder->{run}->kill_kill;
$node->start;
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM persist_sink.garbage")
  or die 'the garbage was not swept';
pass('a compactor swept the garbage after the restart');
is( query(q{
SELECT count(*) FROM (SELECT DISTINCT key FROM persist_sink.blob
                      WHERE starts_with(key, 'g1/')) b}),
	query("SELECT parts FROM persist_sink.shards WHERE name = 'g1'"),
	'every blob row of the shard is one of its parts');
is(query("SELECT count(*) FROM persist_sink.verify('g1')"), '0', 'verify() is clean');
is( query(q{SELECT count(*) FROM persist_sink.snapshot('g1')}),
	'401', 'the content is whole: 8 batches of 50 rows and one append');

# (c) drop_shard() while the collector waits for a blob row (at most its
# lock timeout) or has given up: either way it waits, and ends once the
# blob row is released
set_compaction('off');
query("SELECT persist_sink.create_shard('g2')");
append_batches($node, 'g2', 0, 7, 50);
$holder = hold_a_blob_row('g2');
set_compaction('on');
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'persist_sink compactor' AND wait_event_type = 'Lock'})
  or die 'no compactor waits for the blob row';
pass('the collector waits for the held blob row');
$log_offset = -s $node->logfile;
my $dropper = $node->background_psql('postgres');
$dropper->query_until(qr/started/, q{
\echo started
SELECT persist_sink.drop_shard('g2');
});
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE query LIKE '%drop_shard(%' AND wait_event_type = 'Lock'})
  or die 'drop_shard() does not wait';
pass('drop_shard() waits');
$holder->query_safe('COMMIT');
$holder->quit;
$dropper->quit;
is(query(q{SELECT count(*) FROM persist_sink.shards WHERE name = 'g2'}), '0',
	'the shard is dropped');
is(query(q{SELECT count(*) FROM persist_sink.blob WHERE starts_with(key, 'g2/')}),
	'0', 'no blob row of it is left');
is(query(q{SELECT count(*) FROM persist_sink.garbage WHERE shard = 'g2'}),
	'0', 'no garbage row of it is left');
unlike(slurp_file($node->logfile, $log_offset), qr/deadlock detected/,
	'no deadlock');
is(query("SELECT count(*) FROM persist_sink.verify('g1')"), '0',
	'the other shard is unharmed');

$node->stop;
done_testing();
