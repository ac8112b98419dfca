
# Copyright (c) persist_sink contributors

# A read replica without the bytes: the shards' parts are in an object
# store (radosgw, started by test/s3/objstore), and a subscriber replicates
# only the small tables (consensus, consensus_diff, shard_acl, garbage) by
# logical replication, reading the parts straight from the bucket.
#  (a) After sink appends, small and large, and the background compactor,
#      everything readable on the subscriber (shards, batches, snapshots
#      and listens as of several times) equals the publisher's, verify() is
#      clean there, and its blob table is empty.
#  (b) After compact() on the publisher (its replaced objects deleted once
#      the publisher's snapshots are past them) and more appends, the same.
#  (c) The subscriber's disk for the shards: the replicated tables' bytes
#      per shard, printed (kilobytes, whatever the shards hold).
#  (d) Promoting the subscriber once the publisher is gone: its merges of
#      the shards fail with 55000 while the prefix's owner marker names the
#      publisher; take_object_store() makes it the owner (returning the
#      publisher's database), after which compact(), appends and its
#      collector of leaked objects work there, and verify() is clean.
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my %s3 = %{ start_object_store() };
my $store_conf = qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
};
my $publisher = sink_node('publisher', $store_conf . q{
persist_sink.blob_store = 's3://persist-sink/replica'
persist_sink.blob_target_size = '64kB'
}, allows_streaming => 'logical');
my $subscriber = sink_node('subscriber', $store_conf . q{
persist_sink.subscriber = on
});

my @tables = map { "persist_sink.$_" } qw(consensus consensus_diff shard_acl garbage);
$publisher->safe_psql('postgres', 'CREATE PUBLICATION states FOR TABLE ' . join(', ', @tables));
my $connstr = $publisher->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres',
	"CREATE SUBSCRIPTION states CONNECTION '$connstr' PUBLICATION states");
$subscriber->wait_for_subscription_sync($publisher, 'states');

# Appends $count calls to each of the shards, every fourth one large.
sub load
{
	my ($round, $count, @shards) = @_;
	for my $shard (@shards)
	{
		$publisher->safe_psql('postgres',
			join("\n", map { tagged_append_sql($shard, "r$round-$_", $_ % 4 == 0 ? 20000 : 20) } 1 .. $count));
	}
}

# Waits for the publisher's compactors and the subscriber, then compares.
sub check_replica
{
	my ($step) = @_;
	$publisher->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM persist_sink.compaction_progress')
	  or die 'merges did not end';
	$publisher->wait_for_catchup('states');
	is_deeply(shard_contents($subscriber), shard_contents($publisher),
		"$step: shards, batches, snapshots and listens on the subscriber equal the publisher's");
	is( $subscriber->safe_psql('postgres',
			'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
		'0', "$step: verify() is clean on the subscriber");
	is($subscriber->safe_psql('postgres', 'SELECT count(*) FROM persist_sink.blob'),
		'0', "$step: the subscriber's blob table is empty");
}

# (a) appends of every size, background merges
$publisher->safe_psql('postgres',
	"SELECT persist_sink.create_shard(s) FROM unnest(ARRAY['ra', 'rb', 'rc']) s");
load(1, 24, qw(ra rb rc));
is( $publisher->safe_psql('postgres',
		"SELECT count(*) FROM persist_sink.shards WHERE blob_store = 's3://persist-sink/replica'"),
	'3', 'the three shards keep their parts in the object store');
check_replica('(a)');

# (b) compact(), then more appends
$publisher->safe_psql('postgres', "SELECT persist_sink.compact('ra')");
$publisher->poll_query_until('postgres', 'SELECT count(*) = 0 FROM persist_sink.garbage')
  or die 'the garbage was not collected';
load(2, 8, qw(ra rb));
check_replica('(b)');

# (c) the subscriber's disk for the shards
my $bytes = $subscriber->safe_psql('postgres',
	'SELECT ' . join(' + ', map { "pg_total_relation_size('$_')" } @tables));
my $updates = $subscriber->safe_psql('postgres', 'SELECT sum(updates) FROM persist_sink.shards');
note(sprintf('the subscriber holds %d bytes of tables for 3 shards of %d updates: %.1f kB per shard',
		$bytes, $updates, $bytes / 3 / 1024));
ok($bytes / 3 < 1024 * 1024, 'under a megabyte per shard on the subscriber');

# (d) the publisher gone, the subscriber promoted
my ($publisher_system, $publisher_db) = split /\|/, $publisher->safe_psql('postgres',
	q{SELECT system_identifier, d.oid FROM pg_control_system(), pg_database d
	  WHERE d.datname = 'postgres'});
$subscriber->safe_psql('postgres', 'ALTER SUBSCRIPTION states DISABLE');
$subscriber->safe_psql('postgres', 'ALTER SUBSCRIPTION states SET (slot_name = NONE)');
$subscriber->safe_psql('postgres', 'DROP SUBSCRIPTION states');
$publisher->stop;
$subscriber->append_conf('postgresql.conf', 'persist_sink.subscriber = off');
$subscriber->reload;
$subscriber->poll_query_until('postgres', q{SELECT NOT current_setting('persist_sink.subscriber')::boolean})
  or die 'the setting was not reloaded';
my ($ret, $out, $err) = $subscriber->psql('postgres', q{SELECT persist_sink.compact('rb')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: object store s3:\/\/persist-sink\/replica belongs to another database/,
	'(d) before it takes the prefix, a merge on the promoted subscriber is refused');
is( $subscriber->safe_psql('postgres',
		q{SELECT persist_sink.take_object_store('s3://persist-sink/replica')}),
	sprintf('system %020s, database %010s', $publisher_system, $publisher_db),
	'(d) take_object_store() returns the database that owned the prefix');
$subscriber->safe_psql('postgres', q{SELECT persist_sink.compact('rb')});
$subscriber->safe_psql('postgres', join("\n", map { tagged_append_sql('ra', "r3-$_", 20000) } 1 .. 2));
ok( $subscriber->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
	'(d) verify() is clean on the promoted subscriber, its collectors done');
is( $subscriber->safe_psql('postgres',
		q{SELECT count(*) FROM persist_sink.snapshot('ra') WHERE key LIKE 'r3-%'}),
	'40000', '(d) its appends are read back');

$subscriber->stop;
done_testing();
