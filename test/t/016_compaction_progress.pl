
# Copyright (c) persist_sink contributors

# compaction_progress shows the background compactor's merge while it runs,
# and no row is left behind when the compactor is terminated mid-merge.
#  (a) With background compaction off, a shard gets 200 batches of 1000
#      updates each (each under 64kB encoded, so a merge rewrites them
#      rather than listing them) and two small ones.  A session watches
#      compaction_progress (polling in the server, for a bounded time) and
#      compaction is turned on: a compactor merges the 202 batches, all of
#      tier 0, and the watcher sees its row (command background, phase
#      merging, the run's 202 batches and the 200,002 updates it rewrites)
#      with some but not all updates merged, then terminates the
#      compactor.
#  (b) Once the terminated process is gone from pg_stat_activity, no row
#      has its pid: its slot was cleared as it exited.
#  (c) The shard, queued again by the terminated compactor, is merged
#      again into one batch, of the same content, verify() clean, and
#      compaction_progress empty afterwards.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('compaction_progress', "persist_sink.compaction = off\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# (a) the shard: 200 batches of tier 0, then two small ones
query("SELECT persist_sink.create_shard('big')");
append_batches($node, 'big', 0, 199, 1000);
append_batches($node, 'big', 200, 201, 1, q{'small' || b});
is(query("SELECT count(*) || ' ' || sum(updates) || ' ' || bool_and(encoded_bytes < 65536) FROM persist_sink.batches('big')"),
	'202 200002 true', 'the shard holds 202 batches of tier 0');
my $digest = query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('big')});

# The watcher: polls compaction_progress for up to 3 minutes until the
# compactor's merge of the shard is seen part-way, reports the row and the
# process's backend_type, then terminates that process.
query(q{
CREATE FUNCTION watch_and_terminate() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record;
	deadline timestamptz := clock_timestamp() + interval '3 minutes';
	kind text;
BEGIN
	LOOP
		SELECT * INTO r FROM persist_sink.compaction_progress
		WHERE shard = 'big' AND datname = current_database();
		IF FOUND AND r.updates_merged > 0 AND r.updates_merged < r.updates_total THEN
			SELECT backend_type INTO kind FROM pg_stat_activity WHERE pid = r.pid;
			PERFORM pg_terminate_backend(r.pid);
			RETURN format('%s|%s|%s|%s|%s|%s|%s', r.pid, kind, r.command, r.phase, r.batches,
						  r.updates_total, r.started_at <= clock_timestamp());
		END IF;
		IF clock_timestamp() > deadline THEN
			RETURN 'not seen';
		END IF;
		PERFORM pg_sleep(0.005);
	END LOOP;
END
$$;
});
my $watcher = start_psql($node, $dir, 'watcher', "SELECT watch_and_terminate();\n");
query('ALTER SYSTEM SET persist_sink.compaction = on');
query('SELECT pg_reload_conf()');
my $seen = finish_psql($watcher);
ok($seen->{ok}, 'the watcher ran') or diag $seen->{err};
chomp(my $row = $seen->{out});
my ($pid, @fields) = split /\|/, $row;
is(join('|', @fields), 'persist_sink compactor|background|merging|202|200002|t',
	'the compactor\'s merge is shown part-way: command, phase, batches, updates')
  or diag "watcher saw: $row";

# (b) no row of the terminated compactor
SKIP:
{
	skip 'no merge was seen', 1 unless defined $pid && $pid =~ /^\d+$/;
	$node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0')
	  or die 'timed out waiting for the compactor to exit';
	is(query("SELECT count(*) FROM persist_sink.compaction_progress WHERE pid = $pid"),
		'0', 'no row is left of the terminated compactor');
}

# (c) the shard is merged again, and the row goes
$node->poll_query_until('postgres', q{
SELECT s.batches = 1 AND NOT EXISTS (SELECT FROM persist_sink.compaction_progress)
FROM persist_sink.shards s WHERE s.name = 'big'}, 't')
  or die 'timed out waiting for the merge';
is(query("SELECT string_agg(updates::text, ' ' ORDER BY lower) FROM persist_sink.batches('big')"),
	'200002', 'one batch');
is(query("SELECT debt_batches FROM persist_sink.shards WHERE name = 'big'"), '0', 'no debt');
is(query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('big')}),
	$digest, 'the content is unchanged');
is(query("SELECT count(*) FROM persist_sink.verify('big')"), '0', 'verify() is clean');

$node->stop;
done_testing();
