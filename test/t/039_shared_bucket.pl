
# Copyright (c) persist_sink contributors

# Several writing servers sharing one bucket, and a server reading all of
# their shards (radosgw, started by test/s3/objstore).
#  (a) Servers A and B each write their own shards under their own prefix
#      of one bucket (appends small and large, background merges); a third
#      server R, a subscriber of both servers' consensus tables, reads every
#      shard (shards, batches, snapshots, listens) as its writer does, and
#      verify() is clean on all three.
#  (b) A rolled-back compare_and_append() on each writer leaves objects
#      under its prefix; each writer's collector deletes its own, and
#      leaves the other's parts: verify() clean on both (it reads every
#      part of every shard and lists each shard's objects).
#  (c) B set to write under A's prefix: the prefix's owner marker names A,
#      so B's appends that need an object fail with 55000 naming the store
#      and write nothing, its collector leaves the prefix alone (and logs
#      why) while it has a shard there, and A's shards stay whole.
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
my %writer = (
	a => sink_node('writer_a', $store_conf . q{
persist_sink.blob_store = 's3://persist-sink/t39/a'
persist_sink.blob_target_size = '64kB'
}, allows_streaming => 'logical'),
	b => sink_node('writer_b', $store_conf . q{
persist_sink.blob_store = 's3://persist-sink/t39/b'
persist_sink.blob_target_size = '64kB'
}, allows_streaming => 'logical'));
my $reader = sink_node('reader', $store_conf . q{
persist_sink.subscriber = on
});

my @tables = map { "persist_sink.$_" } qw(consensus consensus_diff shard_acl garbage);
for my $w (sort keys %writer)
{
	my $node = $writer{$w};
	$node->safe_psql('postgres', 'CREATE PUBLICATION states FOR TABLE ' . join(', ', @tables));
	my $connstr = $node->connstr . ' dbname=postgres';
	$reader->safe_psql('postgres',
		"CREATE SUBSCRIPTION states_$w CONNECTION '$connstr' PUBLICATION states");
	$reader->wait_for_subscription_sync($node, "states_$w");
}

# Appends $count calls to each of the shards of writer $w, every fourth one large.
sub load
{
	my ($w, $round, $count, @shards) = @_;
	for my $shard (@shards)
	{
		$writer{$w}->safe_psql('postgres',
			join("\n", map { tagged_append_sql($shard, "r$round-$_", $_ % 4 == 0 ? 20000 : 20) } 1 .. $count));
	}
}

# Waits until verify() of every shard of writer $w finds nothing.
sub wait_verify_clean
{
	my ($w, $what) = @_;
	my $node = $writer{$w};
	ok( $node->poll_query_until('postgres',
			'SELECT count(*) = 0 FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
		"writer $w: verify() clean: $what")
	  or diag($node->safe_psql('postgres',
			"SELECT string_agg(problem, E'\\n') FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)"));
}

# Waits for both writers' merges and for the reader, then compares.
sub check_reader
{
	my ($step) = @_;
	my %expected;
	my @lines;
	for my $w (sort keys %writer)
	{
		my $node = $writer{$w};
		$node->poll_query_until('postgres',
			'SELECT count(*) = 0 FROM persist_sink.compaction_progress')
		  or die 'merges did not end';
		$node->wait_for_catchup("states_$w");
		my %c = %{ shard_contents($node) };
		push @lines, $c{shards};
		%expected = (%expected, %c);
	}
	$expected{shards} = join("\n", @lines);
	is_deeply(shard_contents($reader), \%expected,
		"$step: the reader reads every shard of both writers as they do");
	is( $reader->safe_psql('postgres',
			'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
		'0', "$step: verify() is clean on the reader");
}

# (a) two writers, two prefixes of one bucket, one reader of both
$writer{a}->safe_psql('postgres',
	"SELECT persist_sink.create_shard(s) FROM unnest(ARRAY['a1', 'a2']) s");
$writer{b}->safe_psql('postgres',
	"SELECT persist_sink.create_shard(s) FROM unnest(ARRAY['b1', 'b2']) s");
load('a', 1, 12, qw(a1 a2));
load('b', 1, 12, qw(b1 b2));
is( $writer{a}->safe_psql('postgres',
		"SELECT string_agg(DISTINCT blob_store, ',') FROM persist_sink.shards"),
	's3://persist-sink/t39/a', "writer a's shards keep their parts under its prefix");
is( $writer{b}->safe_psql('postgres',
		"SELECT string_agg(DISTINCT blob_store, ',') FROM persist_sink.shards"),
	's3://persist-sink/t39/b', "writer b's shards keep their parts under its prefix");
check_reader('(a)');
is( $reader->safe_psql('postgres',
		'SELECT string_agg(name, \',\' ORDER BY name) FROM persist_sink.shards'),
	'a1,a2,b1,b2', '(a) the reader has the shards of both writers');

# (b) a leak on each writer, collected by its own collector only
for my $w (sort keys %writer)
{
	my $node = $writer{$w};
	my $shard = "${w}1";
	leak_objects($node, $shard);
	is( $node->safe_psql('postgres',
			"SELECT count(*) > 0 FROM persist_sink.verify('$shard') WHERE problem LIKE 'object % is not referenced %'"),
		't', "(b) writer $w: verify() names the objects of its rolled-back append");
}
wait_verify_clean('a', '(b) its leaked objects collected, its parts all there');
wait_verify_clean('b', '(b) its leaked objects collected, its parts all there');
load('a', 2, 4, qw(a1));
load('b', 2, 4, qw(b2));
check_reader('(b)');

# (c) writer b set to write under writer a's prefix (verify() of its shard
# there says in a NOTICE that the store is another database's: kept off
# stderr, which poll_query_until wants empty)
$writer{b}->append_conf('postgresql.conf',
	q{persist_sink.blob_store = 's3://persist-sink/t39/a'
client_min_messages = warning});
$writer{b}->reload;
$writer{b}->poll_query_until('postgres',
	q{SELECT current_setting('persist_sink.blob_store') = 's3://persist-sink/t39/a'})
  or die 'the setting was not reloaded';
my $log_offset = -s $writer{b}->logfile;
$writer{b}->safe_psql('postgres', q{SELECT persist_sink.create_shard('bx')});
my ($ret, $out, $err) = $writer{b}->psql('postgres', tagged_append_sql('bx', 'x', 20000));
isnt($ret, 0, '(c) a sink append under another database\'s store fails');
like($err, qr/object store s3:\/\/persist-sink\/t39\/a belongs to another database/,
	'(c) ... naming the store');
($ret, $out, $err) = $writer{b}->psql('postgres', q{
SELECT persist_sink.compare_and_append('bx', ARRAY(SELECT 'c-' || g FROM generate_series(1, 20000) g),
	ARRAY(SELECT md5(g::text) FROM generate_series(1, 20000) g), array_fill(0::bigint, ARRAY[20000]),
	array_fill(1::bigint, ARRAY[20000]), 0, 1)},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: object store s3:\/\/persist-sink\/t39\/a belongs to another database/,
	'(c) compare_and_append() under it fails with 55000');
is($writer{b}->safe_psql('postgres', q{SELECT parts || ' ' || upper FROM persist_sink.shards WHERE name = 'bx'}),
	'0 0', '(c) nothing was written to the shard');
ok( $writer{b}->wait_for_log(
		qr/objects under s3:\/\/persist-sink\/t39\/a that no state names are not collected here: the store belongs to another database/,
		$log_offset),
	"(c) writer b's collector leaves writer a's store alone, and says so");
load('a', 3, 4, qw(a2));
wait_verify_clean('a', "(c) after writer b's collections, every part of a's shards is there");
wait_verify_clean('b', '(c) and of b\'s');
check_reader('(c)');

$reader->stop;
$writer{b}->stop;
$writer{a}->stop;
done_testing();
