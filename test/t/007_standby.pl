
# Copyright (c) persist_sink contributors

# Read replicas: a streaming hot standby serves snapshots, listens, the
# views, batches and verify() with exactly the primary's results, and every
# write there fails promptly with a clean ERROR (SQLSTATE 25006,
# read_only_sql_transaction), never a hang or a crash.  Once promoted, the
# former standby takes writes, the sink's included.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(time);

# Longest a refused write may take on the standby before its error
my $prompt = 10;

my $primary = sink_node(
	'primary', q{
persist_sink.inline_max_bytes = '1kB'
persist_sink.blob_target_size = '4kB'
persist_sink.compaction = off
}, allows_streaming => 1);
$primary->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard(s) FROM unnest(ARRAY['cas', 'sink', 'early']) s;
SELECT persist_sink.create_shard('typed', 'int8');
SELECT persist_sink.compare_and_append('early', ARRAY(SELECT 'e' || i FROM generate_series(1, 500) i),
	ARRAY(SELECT md5(i::text) FROM generate_series(1, 500) i), array_fill(0::bigint, ARRAY[500]),
	array_fill(1::bigint, ARRAY[500]), 0, 1);
});

# A standby made before most of the writes
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

# Writes on the primary: compare_and_append (inline and blob batches, a
# retraction), append (small and large), since, compaction, typed rows
for my $i (0 .. 9)
{
	my $n = $i % 3 == 0 ? 800 : 5;
	$primary->safe_psql(
		'postgres', qq{
SELECT persist_sink.compare_and_append('cas', ARRAY(SELECT 'k' || j FROM generate_series(1, $n) j),
	ARRAY(SELECT md5(j::text || $i) FROM generate_series(1, $n) j),
	array_fill(${i}::bigint, ARRAY[$n]), array_fill(1::bigint, ARRAY[$n]), $i, $i + 1)});
}
$primary->safe_psql(
	'postgres', q{
SELECT persist_sink.compare_and_append('cas', '{k1,k2}'::text[], '{x,y}'::text[], '{10,10}', '{-1,-1}', 10, 11);
SELECT persist_sink.downgrade_since('cas', 4);
SELECT persist_sink.compact('cas');
SELECT persist_sink.compare_and_append_rows('typed', ARRAY[1, 2, 2, 9223372036854775807]::int8[], '{0,0,1,2}', NULL, 0, 3);
});
for my $i (1 .. 6)
{
	my $n = $i % 2 ? 10 : 5000;
	$primary->safe_psql('postgres',
		"SELECT persist_sink.append('sink', ARRAY(SELECT 's$i-' || k FROM generate_series(1, $n) k), "
		  . "ARRAY(SELECT md5(k::text) FROM generate_series(1, $n) k), array_fill(1::bigint, ARRAY[$n]))");
}
$primary->safe_psql('postgres', "SELECT persist_sink.append('early', '{late}'::text[], '{x}'::text[], '{1}')");

$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));

# Everything readable of every shard, on a node, typed rows included.
sub contents
{
	my ($node) = @_;
	my $c = shard_contents($node);
	$c->{typed} = $node->safe_psql('postgres',
		"SELECT string_agg(r::text, ' ' ORDER BY r) FROM persist_sink.snapshot_rows('typed', NULL::int8) r");
	$c->{typed_listen} = $node->safe_psql('postgres',
		"SELECT string_agg(format('%s@%s*%s', \"row\", \"time\", diff), ' ' ORDER BY \"time\", \"row\")
		 FROM persist_sink.listen_rows('typed', NULL::int8, 0)");
	return $c;
}

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
my $on_primary = contents($primary);
my $on_standby = contents($standby);
like($on_primary->{shards}, qr/^sink\|/m, 'the primary has the sink shard');
is($on_standby->{shards}, $on_primary->{shards},
	'the shards view on the standby is the primary\'s (seqno, upper, since, sizes)');
is_deeply($on_standby, $on_primary,
	'snapshots, listens, batches, typed rows and verify() on the standby equal the primary\'s');
is($on_standby->{"sink verify"} . $on_standby->{"cas verify"}, '00', 'verify() is clean on the standby');

# Writes on the standby: a prompt, clean ERROR each
my $upper = $standby->safe_psql('postgres', "SELECT persist_sink.shard_upper('cas')");
my @writes = (
	[ 'create_shard', "SELECT persist_sink.create_shard('new')" ],
	[ 'drop_shard', "SELECT persist_sink.drop_shard('cas')" ],
	[ 'downgrade_since', "SELECT persist_sink.downgrade_since('cas', 5)" ],
	[ 'compact', "SELECT persist_sink.compact('sink')" ],
	[
		'compare_and_append',
		"SELECT persist_sink.compare_and_append('cas', '{a}'::text[], '{b}'::text[], ARRAY[$upper]::bigint[], '{1}', $upper, $upper + 1)"
	],
	[
		'compare_and_append_rows',
		"SELECT persist_sink.compare_and_append_rows('typed', ARRAY[5]::int8[], '{3}', NULL, 3, 4)"
	],
	[ 'append, small', "SELECT persist_sink.append('sink', '{a}'::text[], '{b}'::text[], '{1}')" ],
	[
		'append, large',
		"SELECT persist_sink.append('sink', ARRAY(SELECT 'L' || k FROM generate_series(1, 40000) k), "
		  . "ARRAY(SELECT md5(k::text) FROM generate_series(1, 40000) k), array_fill(1::bigint, ARRAY[40000]))"
	],
	[ 'append_rows', "SELECT persist_sink.append_rows('typed', ARRAY[5]::int8[])" ],
	[ 'stats_reset', "SELECT persist_sink.stats_reset()", 'any' ]);
for my $w (@writes)
{
	my ($what, $sql, $any) = @$w;
	my $t0 = time;
	my ($ret, $out, $err) = $standby->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		timeout => 120);
	my $took = time - $t0;
	if ($any)
	{
		# not a write to the database: allowed, but must not crash or hang
		cmp_ok($took, '<', $prompt, "$what on the standby returns promptly");
		next;
	}
	isnt($ret, 0, "$what on the standby fails");
	like($err, qr/ERROR:  25006: /, "$what on the standby: SQLSTATE 25006 (read_only_sql_transaction)")
	  or diag "got: $err";
	cmp_ok($took, '<', $prompt, "$what on the standby fails promptly (took " . sprintf('%.1f', $took) . 's)');
}
ok(!$standby->log_contains('terminated by signal'), 'no standby process crashed');
is_deeply(contents($standby), $on_standby, 'the refused writes changed nothing on the standby');
is_deeply(contents($primary), $on_primary, 'nor on the primary');

# More writes on the primary reach the standby
$primary->safe_psql('postgres',
	"SELECT persist_sink.append('sink', ARRAY(SELECT 'more' || k FROM generate_series(1, 100) k), "
	  . "array_fill('m'::text, ARRAY[100]), array_fill(1::bigint, ARRAY[100]))");
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is_deeply(contents($standby), contents($primary), 'later writes on the primary reach the standby');

# With the standby synchronous, an append returns only once the standby
# has its commit: the sink's worker commits waiting for it (the writers'
# own flush is local only)
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'standby'; SELECT pg_reload_conf()");
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not become synchronous';
$standby->stop;
my $sync_dir = PostgreSQL::Test::Utils::tempdir;
my $sync_writer = start_psql($primary, $sync_dir, 'sync_writer', q{
SELECT persist_sink.append('sink', '{sync}'::text[], '{s}'::text[], '{1}') > 0;
});
ok( $primary->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'persist_sink worker' AND wait_event = 'SyncRep'}),
	'with the synchronous standby down, the worker waits for it');
is(-s "$sync_dir/sync_writer.out", 0, 'and the append has not returned');
$standby->start;
my $sync_result = finish_psql($sync_writer);
is($sync_result->{out}, "t\n", 'the append returns once the standby is back')
  or diag $sync_result->{err};
$primary->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.snapshot('sink') WHERE key = 'sync'"),
	'1', 'the standby has it');

# Promoted, the standby takes writes, the sink's included
$primary->stop;
$standby->promote;
$standby->poll_query_until('postgres',
	"SELECT count(*) >= 1 FROM pg_stat_activity WHERE backend_type = 'persist_sink worker'")
  or die 'the sink workers did not start after the promotion';
my ($ret, $out, $err) = $standby->psql('postgres',
	"SELECT persist_sink.append('sink', '{promoted}'::text[], '{yes}'::text[], '{1}') > 0",
	timeout => 120);
is($out, 't', 'append works once the standby is promoted') or diag $err;
$upper = $standby->safe_psql('postgres', "SELECT persist_sink.shard_upper('cas')");
is( $standby->safe_psql('postgres',
		"SELECT persist_sink.compare_and_append('cas', '{a}'::text[], '{b}'::text[], ARRAY[$upper]::bigint[], '{1}', $upper, $upper + 1) > 0"
	),
	't',
	'and so does compare_and_append');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)"),
	'0', 'verify() is clean on the promoted standby');

$standby->stop;
done_testing();
