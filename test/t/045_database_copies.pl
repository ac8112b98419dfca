
# Copyright (c) persist_sink contributors

# A copy of a database never deletes the objects it inherited (radosgw,
# started by test/s3/objstore).  Database src keeps its shards' parts
# under t45/src; copies of it are made by CREATE DATABASE ... TEMPLATE,
# by a dump restored into another database of the same server, and by
# the same dump restored on another server sharing the bucket.  Their
# states name src's objects, whose owner marker names src.
#  (a) In every copy: compact() and an append needing objects fail with
#      55000 naming src's store and write nothing; drop_shard() of an
#      inherited shard, and src's garbage rows the copy inherited, are
#      collected (the rows go, the objects stay, a LOG line says so); the
#      collector of leaked objects leaves src's store alone.
#  (b) src still reads every shard as before, verify() is clean there,
#      and the bucket holds each of its parts.
#  (c) src writes on (compaction off: src's merges may delete the parts
#      the copies' states name, as they are src's); a copy reads what it
#      inherited as src did, and its verify() reports no problem (src's
#      new objects are not leaks of the copy), with a NOTICE that the
#      parts are another database's.
#  (d) shards.objects_owned is true in src and false for the inherited
#      shards of each copy; a shard a copy makes in the blob table is its
#      own.
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
persist_sink.inline_max_bytes = 0
persist_sink.worker_idle_timeout = '2s'
};
my $node = sink_node('copies', $store_conf . q{
persist_sink.blob_store = 's3://persist-sink/t45/src'
}, no_extension => 1);
my $other = sink_node('other_server', $store_conf . q{
persist_sink.blob_store = 's3://persist-sink/t45/other'
}, no_extension => 1);
my @shards = qw(s1 s2 s3);

# SQL of a digest of everything $shard holds, and its row count.
sub digest_sql
{
	my ($shard) = @_;
	return qq{SELECT md5(string_agg(encode(key, 'hex') || ':' || "time" || 'x' || diff, ','
	ORDER BY key, "time")) || ' ' || count(*) FROM persist_sink.snapshot('$shard')};
}

# Appends batches $first..$last of 300 rows to $shard in $db on $n.
sub load
{
	my ($n, $db, $shard, $first, $last) = @_;
	$n->safe_psql($db, qq{
DO \$\$
BEGIN
	FOR b IN $first..$last LOOP
		PERFORM persist_sink.compare_and_append('$shard',
			ARRAY(SELECT md5(b || '/' || i) FROM generate_series(1, 300) i),
			ARRAY(SELECT 'v' || i FROM generate_series(1, 300) i),
			array_fill(b::bigint, ARRAY[300]), array_fill(1::bigint, ARRAY[300]), b, b + 1);
	END LOOP;
END
\$\$;});
}

# The digests of every shard of $db on $n, as a hash.
sub digests
{
	my ($n, $db, @names) = @_;
	return { map { $_ => scalar($n->safe_psql($db, digest_sql($_))) } @names };
}

# How many part objects the bucket holds under t45/src/$shard/.
sub stored_parts
{
	my ($shard) = @_;
	return scalar(grep { m{/[0-9a-f]{32}$} } stored_object_names(\%s3, 't45/src', $shard));
}

# Sets persist_sink.compaction on both servers and waits for it.
sub set_compaction
{
	my ($value) = @_;
	for my $n ($node, $other)
	{
		$n->safe_psql('postgres', "ALTER SYSTEM SET persist_sink.compaction = $value");
		$n->reload;
		$n->poll_query_until('postgres', "SELECT current_setting('persist_sink.compaction') = '$value'")
		  or die 'compaction not reloaded';
	}
}

# src, compaction off: three shards of one batch each (compact() merged
# them: their replaced parts wait in src's garbage, which the copies
# inherit), and shard m of six batches for the copies to try to merge
set_compaction('off');
$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION persist_sink');
for my $shard (@shards, 'm')
{
	$node->safe_psql('src', "SELECT persist_sink.create_shard('$shard')");
	load($node, 'src', $shard, 0, 5);
	$node->safe_psql('src', "SELECT persist_sink.compact('$shard')") unless $shard eq 'm';
}
my %before = %{ digests($node, 'src', @shards) };
my %parts = map { $_ => scalar($node->safe_psql('src', "SELECT parts FROM persist_sink.shards WHERE name = '$_'")) } @shards;
ok(!grep({ $parts{$_} == 0 } @shards), 'src\'s shards have parts in the store');
is($node->safe_psql('src', 'SELECT count(*) > 0 FROM persist_sink.garbage'), 't',
	'src has garbage waiting');

# the copies: a template copy, a dump restored here and on another server
$node->safe_psql('postgres', 'CREATE DATABASE tcopy TEMPLATE src');
my $dump = "${PostgreSQL::Test::Utils::tmp_check}/src.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('src') ], 'src dumped');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'the dump restored on the same server');
$other->safe_psql('postgres', 'CREATE DATABASE restored');
$other->command_ok([ 'pg_restore', '-d', $other->connstr('restored'), $dump ], 'the dump restored on another server');
my @copies = ([ $node, 'tcopy' ], [ $node, 'restored' ], [ $other, 'restored' ]);

# Names copy $c ([node, database]) in a test's description.
sub copy_name
{
	my ($n, $db) = @{ $_[0] };
	return ($n == $other ? 'other server\'s ' : '') . $db;
}

# (a) what each copy does with its inherited shards: writes that need an
# object fail, with compaction still off
for my $c (@copies)
{
	my ($n, $db) = @$c;
	my $what = copy_name($c);
	is_deeply(digests($n, $db, @shards), \%before, "(a) $what reads what it inherited as src does");
	my ($ret, $out, $err) = $n->psql($db, "SELECT persist_sink.compact('m')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  55000: object store s3:\/\/persist-sink\/t45\/src belongs to another database/,
		"(a) $what: compact() of an inherited shard fails with 55000 naming src's store");
	is($n->safe_psql($db, "SELECT batches FROM persist_sink.shards WHERE name = 'm'"), '6',
		"(a) $what: ... and changes nothing");
	($ret, $out, $err) = $n->psql($db, tagged_append_sql('s2', "x$db", 2000));
	like($err, qr/object store s3:\/\/persist-sink\/t45\/src belongs to another database/,
		"(a) $what: an append needing objects fails naming src's store");
	is($n->safe_psql($db, "SELECT persist_sink.shard_upper('s2')"), '6', "(a) $what: ... and writes nothing");
}

# (a) compaction on: each copy drops an inherited shard, and its
# collectors run (the inherited garbage rows are theirs to collect too)
set_compaction('on');
for my $c (@copies)
{
	my ($n, $db) = @$c;
	my $what = copy_name($c);
	my $offset = -s $n->logfile;
	$n->safe_psql($db, "SELECT persist_sink.drop_shard('s3')");
	ok($n->poll_query_until($db, 'SELECT count(*) = 0 FROM persist_sink.garbage'),
		"(a) $what: the dropped shard's and the inherited garbage is collected");
	like(slurp_file($n->logfile, $offset),
		qr/objects listed as garbage of shard "s3" are left in their store, which is not this database's/,
		"(a) $what: ... the objects left in src's store, as the log says");
	is_deeply(digests($node, 'src', @shards), \%before, "(a) after that, src still reads every shard");
}
# a collection of leaked objects in each copy: the servers restarted
$_->restart for ($node, $other);
for my $c (@copies)
{
	my ($n, $db) = @$c;
	$n->safe_psql($db, "SELECT persist_sink.drop_shard('s2')");
	ok($n->poll_query_until($db, 'SELECT count(*) = 0 FROM persist_sink.garbage'),
		'(a) ' . copy_name($c) . ': another drop\'s garbage collected after a restart');
}
ok( $node->wait_for_log(
		qr/objects under s3:\/\/persist-sink\/t45\/src that no state names are not collected here/),
	'(a) the copies\' collectors of leaked objects leave src\'s store alone');
# src's on-demand workers start with its next append, and collect
$node->safe_psql('src', tagged_append_sql('m', 'wake', 5));
ok($node->poll_query_until('src', 'SELECT count(*) = 0 FROM persist_sink.garbage'),
	'src collects its own garbage');

# (b) src is whole
is_deeply(digests($node, 'src', @shards), \%before, '(b) src reads every shard as before');
is($node->safe_psql('src',
		'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
	'0', '(b) verify() is clean in src');
is_deeply({ map { $_ => stored_parts($_) } @shards }, \%parts,
	'(b) the bucket holds every part of src\'s shards, and nothing else under them');

# (c) src writes on; the copy reads what it inherited and finds no leak.
# src's merges would replace (and delete, as they may) the parts the
# copies' states name: compaction is off meanwhile.
set_compaction('off');
load($node, 'src', 's1', 6, 8);
for my $c ([ $node, 'tcopy' ], [ $other, 'restored' ])
{
	my ($n, $db) = @$c;
	my ($ret, $out, $err) = $n->psql($db, q{SELECT count(*) FROM persist_sink.verify('s1')});
	is($out, '0', "(c) $db: verify() of an inherited shard reports no problem");
	like($err, qr/NOTICE:  the parts of shard "s1" are in object store s3:\/\/persist-sink\/t45\/src, which belongs to another database/,
		"(c) $db: ... and says its parts are another database's");
	is($n->safe_psql($db, digest_sql('s1')), $before{s1}, "(c) $db: it reads what it inherited");
}

# (d) shards.objects_owned
is($node->safe_psql('src', q{SELECT string_agg(name || ':' || objects_owned, ',' ORDER BY name) FROM persist_sink.shards}),
	'm:true,s1:true,s2:true,s3:true', '(d) src owns its shards\' objects');
$other->append_conf('postgresql.conf', "persist_sink.blob_store = 'table'");
$other->reload;
$other->poll_query_until('restored', "SELECT current_setting('persist_sink.blob_store') = 'table'")
  or die 'blob_store not reloaded';
$other->safe_psql('restored', "SELECT persist_sink.create_shard('mine')");
load($other, 'restored', 'mine', 0, 1);
is($other->safe_psql('restored', q{SELECT string_agg(name || ':' || objects_owned, ',' ORDER BY name) FROM persist_sink.shards}),
	'm:false,mine:true,s1:false', '(d) a copy does not own the inherited objects, and owns its own shard');
is($node->safe_psql('tcopy', q{SELECT string_agg(name || ':' || objects_owned, ',' ORDER BY name) FROM persist_sink.shards}),
	'm:false,s1:false', '(d) nor does the template copy');

$other->stop;
$node->stop;
done_testing();
