
# Copyright (c) persist_sink contributors

# Replicas on other servers through logical replication: a publication of
# every storage table of the extension, a subscription on a server with the
# extension installed and persist_sink.subscriber on.  After the initial
# copy and after every kind of write on the publisher (compare_and_append
# and the sink, inline and blob batches, idempotency keys, since,
# compact() and the background compactor), the subscriber's storage tables
# and everything readable there equal the publisher's, and verify() is clean.
# Writes on the subscriber fail with 25006 and change nothing; its compactor
# neither merges nor expires keys; wait_upper there wakes up on a replicated
# commit.  With the subscription dropped and the mode off, it takes writes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

# The publisher has wal_level logical and WAL senders (allows_streaming).
# Its compaction is off until its step below, so that batches change only
# when the test asks.
my $publisher = sink_node(
	'publisher', q{
persist_sink.inline_max_bytes = '1kB'
persist_sink.blob_target_size = '16kB'
persist_sink.compaction = off
}, allows_streaming => 'logical');
# A short idempotency window: a compactor that expired keys here would
# delete them within a second.
my $subscriber = sink_node(
	'subscriber', q{
persist_sink.subscriber = on
persist_sink.idempotency_window = '1s'
});

# Digests of every storage table of the extension (the tables marked for
# pg_dump, read from pg_extension.extconfig), by name.
sub storage
{
	my ($node) = @_;
	my %s;
	my @tables = split /\n/,
	  $node->safe_psql('postgres',
		"SELECT c::regclass FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'persist_sink' ORDER BY 1"
	  );
	for my $t (@tables)
	{
		$s{$t} = $node->safe_psql('postgres',
			"SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) || ' ' || count(*) FROM $t t");
	}
	return \%s;
}

# Waits for the subscriber to apply everything the publisher committed, then
# checks that it holds and reads exactly what the publisher does.
sub check_replica
{
	my ($step) = @_;
	$publisher->wait_for_catchup('persist_sink');
	my $on_publisher = shard_contents($publisher);
	my $on_subscriber = shard_contents($subscriber);
	is_deeply(storage($subscriber), storage($publisher),
		"$step: the storage tables on the subscriber equal the publisher's");
	is_deeply($on_subscriber, $on_publisher,
		"$step: shards, batches, snapshots and listens on the subscriber equal the publisher's");
	is( $subscriber->safe_psql('postgres',
			'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
		'0',
		"$step: verify() is clean on the subscriber");
}

# Writes whose times the test gives: $n updates at time $t of shard $shard,
# the batch [$t, $t + 1).
sub cas
{
	my ($shard, $t, $n) = @_;
	$publisher->safe_psql('postgres',
		"SELECT persist_sink.compare_and_append('$shard', ARRAY(SELECT 'k' || j FROM generate_series(1, $n) j), "
		  . "ARRAY(SELECT md5(j::text || $t) FROM generate_series(1, $n) j), "
		  . "array_fill(${t}::bigint, ARRAY[$n]), array_fill(1::bigint, ARRAY[$n]), $t, $t + 1)");
}

# Shards written before the subscription exists: the initial copy
$publisher->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard(s) FROM unnest(ARRAY['cas', 'sink', 'idle']) s;
SELECT persist_sink.create_shard('typed', 'int8');
SELECT persist_sink.compare_and_append_rows('typed', ARRAY[1, 2, 2]::int8[], '{0,0,1}', NULL, 0, 2);
SELECT persist_sink.append('sink', '{early}'::text[], '{x}'::text[], '{1}', 'key-early');
});
cas('cas', 0, 3000);

# The recipe of doc/replicas.md
$publisher->safe_psql('postgres',
	'CREATE PUBLICATION persist_sink FOR TABLES IN SCHEMA persist_sink');
is( $publisher->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_extension e, unnest(e.extconfig) c
WHERE e.extname = 'persist_sink'
  AND c NOT IN (SELECT format('%I.%I', schemaname, tablename)::regclass
                FROM pg_publication_tables WHERE pubname = 'persist_sink')}),
	'0',
	'every storage table marked for pg_dump is published');
is( $publisher->safe_psql(
		'postgres', q{
SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_class c
WHERE c.relnamespace = 'persist_sink'::regnamespace AND c.relkind = 'r'
  AND (c.oid <> ALL ((SELECT extconfig FROM pg_extension WHERE extname = 'persist_sink')::oid[])
       OR c.relreplident <> 'd'
       OR NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary))}),
	'',
	'every table of the schema is marked for pg_dump and has a primary key as its replica identity');
my $connstr = $publisher->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres',
	"CREATE SUBSCRIPTION persist_sink CONNECTION '$connstr' PUBLICATION persist_sink");
$subscriber->wait_for_subscription_sync($publisher, 'persist_sink');
check_replica('initial copy');

# compare_and_append: inline batches, batches of several blob parts, a
# retraction
for my $t (1 .. 6)
{
	cas('cas', $t, $t % 3 == 0 ? 3000 : 5);
}
$publisher->safe_psql('postgres',
	"SELECT persist_sink.compare_and_append('cas', '{k1,k2}'::text[], '{x,y}'::text[], '{7,7}', '{-1,-1}', 7, 8)"
);
check_replica('compare_and_append');

# The sink: small writes in the shared batch, large ones in parts of their
# own, with idempotency keys
for my $i (1 .. 6)
{
	my $n = $i % 2 ? 10 : 5000;
	$publisher->safe_psql('postgres',
		"SELECT persist_sink.append('sink', ARRAY(SELECT 's$i-' || k FROM generate_series(1, $n) k), "
		  . "ARRAY(SELECT md5(k::text) FROM generate_series(1, $n) k), array_fill(1::bigint, ARRAY[$n]), 'key-$i')"
	);
}
$publisher->safe_psql('postgres', "SELECT persist_sink.append_rows('typed', ARRAY[3, 4]::int8[])");
check_replica('append');
my $blob_rows = q{SELECT count(*) || ' ' || md5(string_agg(key || chunk || md5(data), ',' ORDER BY key, chunk))
FROM persist_sink.blob};
like($subscriber->safe_psql('postgres', $blob_rows), qr/^[1-9]\d* /,
	'the subscriber has blob rows');
is($subscriber->safe_psql('postgres', $blob_rows), $publisher->safe_psql('postgres', $blob_rows),
	'the blob rows arrived on the subscriber, chunk by chunk');
is($subscriber->safe_psql('postgres', 'SELECT count(*) FROM persist_sink.idempotency'),
	'7', 'the idempotency keys arrived on the subscriber');

# Since and compact()
$publisher->safe_psql(
	'postgres', q{
SELECT persist_sink.downgrade_since('cas', 4);
SELECT persist_sink.compact('cas');
SELECT persist_sink.compact('sink');
});
check_replica('downgrade_since and compact()');

# wait_upper on the subscriber returns once a replicated commit moves the
# upper (no commit there broadcasts: it rereads the upper every second)
my $dir = PostgreSQL::Test::Utils::tempdir;
my $upper = $subscriber->safe_psql('postgres', "SELECT persist_sink.shard_upper('sink')");
my $waiter = start_psql($subscriber, $dir, 'waiter',
	"SELECT persist_sink.wait_upper('sink', $upper, '1h') > $upper;");
$subscriber->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event = 'Extension'"
) or die 'wait_upper did not start waiting on the subscriber';
$publisher->safe_psql('postgres', "SELECT persist_sink.append('sink', '{woken}'::text[], '{x}'::text[], '{1}')");
my $woken = finish_psql($waiter);
is($woken->{out}, "t\n", 'wait_upper on the subscriber returns the replicated upper') or diag $woken->{err};
check_replica('an append while wait_upper waits on the subscriber');

# Writes on the subscriber: refused with 25006, naming the shard, with a
# HINT naming the setting
my $before = storage($subscriber);
my $readable = shard_contents($subscriber);
$upper = $subscriber->safe_psql('postgres', "SELECT persist_sink.shard_upper('cas')");
my @writes = (
	[ 'create_shard', 'new', "SELECT persist_sink.create_shard('new')" ],
	[ 'drop_shard', 'cas', "SELECT persist_sink.drop_shard('cas')" ],
	[ 'downgrade_since', 'cas', "SELECT persist_sink.downgrade_since('cas', 5)" ],
	[ 'compact', 'sink', "SELECT persist_sink.compact('sink')" ],
	[
		'compare_and_append', 'cas',
		"SELECT persist_sink.compare_and_append('cas', '{a}'::text[], '{b}'::text[], ARRAY[$upper]::bigint[], '{1}', $upper, $upper + 1)"
	],
	[
		'compare_and_append_rows', 'typed',
		"SELECT persist_sink.compare_and_append_rows('typed', ARRAY[5]::int8[], '{2}', NULL, 2, 3)"
	],
	[ 'append, small', 'sink', "SELECT persist_sink.append('sink', '{a}'::text[], '{b}'::text[], '{1}')" ],
	[
		'append, large', 'sink',
		"SELECT persist_sink.append('sink', ARRAY(SELECT 'L' || k FROM generate_series(1, 40000) k), "
		  . "ARRAY(SELECT md5(k::text) FROM generate_series(1, 40000) k), array_fill(1::bigint, ARRAY[40000]))"
	],
	[ 'append with a key', 'sink', "SELECT persist_sink.append('sink', '{a}'::text[], '{b}'::text[], '{1}', 'key-1')" ],
	[ 'append_rows', 'typed', "SELECT persist_sink.append_rows('typed', ARRAY[5]::int8[])" ]);
for my $w (@writes)
{
	my ($what, $shard, $sql) = @$w;
	my ($ret, $out, $err) = $subscriber->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	isnt($ret, 0, "$what on the subscriber fails");
	like(
		$err,
		qr/ERROR:  25006: cannot write to shard "\Q$shard\E" on a subscriber\n(?s:.*)HINT:  .*persist_sink\.subscriber/,
		"$what on the subscriber: 25006, naming the shard, with a HINT naming the setting") or diag "got: $err";
}
is_deeply(storage($subscriber), $before, 'the refused writes changed no storage table of the subscriber');
is_deeply(shard_contents($subscriber), $readable, 'nor anything readable there');
is( $subscriber->safe_psql(
		'postgres',
		"SELECT (SELECT count(*) FROM persist_sink.stats) || ' ' || (SELECT count(*) > 0 FROM persist_sink.sink_memory())"
	),
	'0 true',
	'the stats view of the subscriber counts its own writes (none), and sink_memory() works');
$subscriber->safe_psql('postgres', 'SELECT persist_sink.stats_reset()');

# The publisher's writes go on arriving, a shard the subscriber could not
# create included
$publisher->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard('new');
SELECT persist_sink.compare_and_append('new', '{a}'::text[], '{b}'::text[], '{0}', '{1}', 0, 1);
});
check_replica('writes after the refused ones');

# The subscriber's compactor leaves the shards alone: a shard with more
# tier-0 batches than a merge needs, and keys older than the subscriber's
# window.  A restart makes the compactor look at every shard at once; once
# it waits for work, it would have merged and expired by then.
cas('idle', $_, 5) for 0 .. 11;
check_replica('twelve small batches');
$subscriber->poll_query_until('postgres',
	"SELECT max(written_at) < now() - interval '2s' FROM persist_sink.idempotency")
  or die 'the keys did not get older than the window';
$before = storage($subscriber);
$subscriber->restart;
$subscriber->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'persist_sink compactor' AND wait_event = 'Extension'"
) or die 'the compactors of the subscriber did not start';
is($subscriber->safe_psql('postgres', "SELECT batches FROM persist_sink.shards WHERE name = 'idle'"),
	'12', 'the compactor of the subscriber did not merge batches');
is_deeply(storage($subscriber), $before,
	'nor changed any storage table (keys older than its window included)');
check_replica('after the subscriber restarted');

# The publisher's background compactor: its merges replicate
$publisher->append_conf('postgresql.conf', 'persist_sink.compaction = on');
$publisher->reload;
$publisher->poll_query_until(
	'postgres', q{
SELECT (SELECT batches FROM persist_sink.shards WHERE name = 'idle') < 12
   AND (SELECT count(*) FROM pg_stat_activity
        WHERE backend_type = 'persist_sink compactor' AND wait_event IS DISTINCT FROM 'Extension') = 0})
  or die 'the compactors of the publisher did not merge';
check_replica('background compaction');
is($subscriber->safe_psql('postgres', "SELECT batches < 12 FROM persist_sink.shards WHERE name = 'idle'"),
	't', 'the merge reached the subscriber');

# Promoted by the recipe of doc/replicas.md once the publisher is gone: without
# its subscription and with the mode off, the former subscriber takes
# writes, and its compactor works again
$publisher->stop;
$subscriber->safe_psql(
	'postgres', q{
ALTER SUBSCRIPTION persist_sink DISABLE;
ALTER SUBSCRIPTION persist_sink SET (slot_name = NONE);
DROP SUBSCRIPTION persist_sink;
ALTER SYSTEM SET persist_sink.subscriber = off;
SELECT pg_reload_conf();
});
$subscriber->poll_query_until('postgres', "SELECT current_setting('persist_sink.subscriber') = 'off'")
  or die 'the setting was not reloaded';
my ($ret, $out, $err) = $subscriber->psql('postgres',
	"SELECT persist_sink.append('sink', '{promoted}'::text[], '{yes}'::text[], '{1}') > 0");
is($out, 't', 'append works once the mode is off') or diag $err;
$upper = $subscriber->safe_psql('postgres', "SELECT persist_sink.shard_upper('cas')");
is( $subscriber->safe_psql('postgres',
		"SELECT persist_sink.compare_and_append('cas', '{a}'::text[], '{b}'::text[], ARRAY[$upper]::bigint[], '{1}', $upper, $upper + 1) > 0"
	),
	't',
	'and so does compare_and_append');
$subscriber->safe_psql('postgres', "SELECT persist_sink.create_shard('after')");
for my $t (0 .. 9)
{
	$subscriber->safe_psql('postgres',
		"SELECT persist_sink.compare_and_append('after', '{a}'::text[], '{b}'::text[], '{$t}', '{1}', $t, $t + 1)");
}
ok( $subscriber->poll_query_until(
		'postgres', "SELECT batches < 10 FROM persist_sink.shards WHERE name = 'after'"),
	'the compactor merges again once the mode is off');
ok($subscriber->poll_query_until('postgres', 'SELECT count(*) = 0 FROM persist_sink.idempotency'),
	'and expires the keys older than its window');
is( $subscriber->safe_psql('postgres',
		'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
	'0',
	'verify() is clean on the former subscriber');
ok(!$subscriber->log_contains('terminated by signal'), 'no process of the subscriber crashed');

$subscriber->stop;
done_testing();
