
# Copyright (c) persist_sink contributors

# pg_dump -Fc and pg_restore into a new database of the same cluster keep
# every shard exactly: inline batches, single- and multi-part blob batches,
# sink (single-time) batches, compacted shards, shards whose since moved
# without compaction, a typed shard and an empty one.  The storage tables
# are registered with pg_extension_config_dump, so the dump carries their
# rows and CREATE EXTENSION.  Compared after the restore: the shards view
# (seqno, upper, since, batches, parts, bytes, updates), every batch, the
# snapshots at several as_of, listen, the typed rows, verify() clean, and
# the shards' foreign tables (options, grants, rows).  The restored shards
# then take new writes, one through a restored foreign table.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node(
	'dump', q{
persist_sink.compaction = off
persist_sink.inline_max_bytes = '1kB'
persist_sink.blob_target_size = '2kB'
});

# Appends updates key<i> => val<i % 7> for i in [from, to) at times spread
# over [lower, upper), with diff d.
sub cas
{
	my ($shard, $from, $to, $d, $lower, $upper) = @_;
	my $width = $upper - $lower;
	$node->safe_psql(
		'postgres', qq{
SELECT persist_sink.compare_and_append('$shard',
	ARRAY(SELECT 'key' || i FROM generate_series($from, $to - 1) i),
	ARRAY(SELECT 'val' || (i % 7) || repeat('x', i % 40) FROM generate_series($from, $to - 1) i),
	ARRAY(SELECT $lower + i % $width FROM generate_series($from, $to - 1) i),
	array_fill(${d}::bigint, ARRAY[$to - $from]), $lower, $upper)});
}

$node->safe_psql(
	'postgres', q{
CREATE TYPE public.item AS (id int, name text, price numeric, tags text[]);
SELECT persist_sink.create_shard(s)
FROM unnest(ARRAY['inline', 'blob', 'compacted', 'since_moved', 'sink', 'empty']) s;
CREATE ROLE dump_app IN ROLE persist_sink_writer, persist_sink_reader;
SELECT persist_sink.grant_shard('sink', 'dump_app', 'append'),
	   persist_sink.grant_shard('sink', 'public', 'read');
SET ROLE dump_app;
SELECT persist_sink.create_shard('owned');
RESET ROLE;
SELECT persist_sink.create_shard('typed', 'public.item');
});

for my $i (0 .. 5)
{
	cas('inline', $i * 3, $i * 3 + 3, 1, $i * 10, $i * 10 + 10);
}
cas('blob', 0, 3000, 1, 0, 10);
cas('blob', 1000, 1500, -1, 10, 20);
cas('blob', 5000, 5020, 2, 20, 25);
for my $i (0 .. 4)
{
	cas('compacted', $i * 300, $i * 300 + 500, 1, $i * 5, $i * 5 + 5);
}
cas('compacted', 0, 200, -1, 25, 30);
cas('since_moved', 0, 400, 1, 0, 10);
cas('since_moved', 100, 300, -1, 10, 20);
cas('since_moved', 0, 10, 1, 20, 30);
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.downgrade_since('compacted', 17);
SELECT persist_sink.compact('compacted');
SELECT persist_sink.compare_and_append('compacted', '{after}'::text[], '{compaction}'::text[], '{30}', '{1}', 30, 31);
SELECT persist_sink.downgrade_since('since_moved', 15);
SELECT persist_sink.compare_and_append_rows('typed',
	ARRAY[(1, 'pear', 1.50, '{fruit}'), (2, 'plum', NULL, '{}'), (2, 'plum', NULL, '{}'),
		  (3, 'Zoë ☃', 0.000001, '{a,NULL,"b c"}')]::public.item[],
	'{0,1,2,3}', NULL, 0, 4);
});
for my $i (1 .. 5)
{
	$node->safe_psql('postgres',
		"SELECT persist_sink.append('sink', ARRAY(SELECT 's$i-' || k FROM generate_series(1, 20 * $i) k), "
		  . "ARRAY(SELECT md5('$i' || k) || repeat('v', k) FROM generate_series(1, 20 * $i) k), "
		  . "array_fill(1::bigint, ARRAY[20 * $i]))");
}

my $kinds = $node->safe_psql(
	'postgres', q{
SELECT s.name, count(*) FILTER (WHERE b.inline), count(*) FILTER (WHERE NOT b.inline AND b.parts = 1),
	   count(*) FILTER (WHERE NOT b.inline AND b.parts > 1)
FROM persist_sink.shards s, LATERAL persist_sink.batches(s.name) b
GROUP BY s.name ORDER BY s.name COLLATE "C"});
note "batches (inline, one blob part, several blob parts):\n$kinds";
like($kinds, qr/^inline\|[1-9]\d*\|0\|0$/m, 'a shard with only inline batches');
like($kinds, qr/^blob\|\d+\|\d+\|[1-9]\d*$/m, 'a shard with a multi-part batch');
ok($kinds =~ /^sink\|\d+\|(\d+)\|(\d+)$/m && $1 + $2 > 0, 'a sink shard with blob batches');
is($node->safe_psql('postgres', "SELECT batches || ' ' || since FROM persist_sink.shards WHERE name = 'compacted'"),
	'2 17', 'the compacted shard has its merged batch and one more');
is($node->safe_psql('postgres', "SELECT since FROM persist_sink.shards WHERE name = 'since_moved'"),
	'15', 'since moved without compaction');

# Everything readable of every shard in a database.
sub contents
{
	my ($db) = @_;
	my %c;
	$c{shards} = $node->safe_psql($db,
		'SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates,
				owner, privileges
		 FROM persist_sink.shards ORDER BY name COLLATE "C"');
	for my $row (split /\n/, $node->safe_psql($db,
		'SELECT name, upper, since FROM persist_sink.shards ORDER BY name COLLATE "C"'))
	{
		my ($shard, $upper, $since) = split /\|/, $row;
		$c{"$shard batches"} = $node->safe_psql($db,
			"SELECT * FROM persist_sink.batches('$shard') ORDER BY lower");
		next if $upper <= $since;
		my %as_of = map { $_ => 1 } ($since, int(($since + $upper) / 2), $upper - 1);
		$as_of{$upper - 2} = 1 if $upper - 2 >= $since;
		for my $t (sort { $a <=> $b } keys %as_of)
		{
			$c{"$shard snapshot $t"} = $node->safe_psql(
				$db, qq{
SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
									  "time", diff), ',' ORDER BY key, val, "time"), '')) || ' ' || count(*)
FROM persist_sink.snapshot('$shard', $t)});
		}
		$c{"$shard listen"} = $node->safe_psql(
			$db, qq{
SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
									  "time", diff), ',' ORDER BY key, val, "time"), '')) || ' ' || count(*)
FROM persist_sink.listen('$shard', $since)});
	}
	$c{typed} = $node->safe_psql($db,
		q{SELECT string_agg(r::text, ' ; ' ORDER BY r::text) FROM persist_sink.snapshot_rows('typed', NULL::public.item) r});
	$c{readers} = $node->safe_psql($db,
		'SELECT shard, reader, owner, position, lease, last_active FROM persist_sink.reader ORDER BY shard, reader');
	$c{blob_rows} = $node->safe_psql($db,
		'SELECT count(*), md5(string_agg(md5(key || chunk || md5(data)), \',\' ORDER BY key, chunk)) FROM persist_sink.blob');
	return \%c;
}

sub problems
{
	my ($db) = @_;
	return $node->safe_psql($db,
		'SELECT s.name || \': \' || v.problem FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name) v ORDER BY 1');
}

# readers: one in the middle of a shard, one of another role with a lease
$node->safe_psql('postgres', q{
SELECT persist_sink.create_reader('sink', 'r1', (upper + since) / 2) FROM persist_sink.shards WHERE name = 'sink';
SET ROLE dump_app;
SELECT persist_sink.create_reader('owned', 'r2', NULL, '1 day');
RESET ROLE;
});

# foreign tables of shards: one with grants of its own, one read as of a
# time of its option
my $as_of = $node->safe_psql('postgres', "SELECT since FROM persist_sink.shards WHERE name = 'sink'");
$node->safe_psql('postgres', qq{
CREATE FOREIGN TABLE public.sink_table (key bytea, val bytea, diff bigint, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'sink');
GRANT SELECT, INSERT ON public.sink_table TO dump_app;
CREATE FOREIGN TABLE public.sink_then (key bytea, val bytea, diff bigint)
	SERVER persist_sink OPTIONS (shard 'sink', as_of '$as_of');
});
my $table_def = q{SELECT c.relname || ' ' || array_to_string(ARRAY(SELECT unnest(f.ftoptions) ORDER BY 1), ',') || ' '
	|| coalesce(c.relacl::text, '') || ' ' || s.srvname
	FROM pg_foreign_table f JOIN pg_class c ON c.oid = f.ftrelid JOIN pg_foreign_server s ON s.oid = f.ftserver
	ORDER BY c.relname};
my $table_rows = q{SELECT (SELECT md5(string_agg(format('%s|%s|%s', key, val, diff), ',' ORDER BY key, val))
	|| ' ' || count(*) FROM public.sink_table) || ' ' || (SELECT count(*) FROM public.sink_then)};

is(problems('postgres'), '', 'verify() is clean before the dump');
my $before = contents('postgres');
cmp_ok(scalar(keys %$before), '>', 25, 'recorded the shards, batches and snapshots');
like($before->{typed}, qr/\(2,plum,,\{\}\) ; \(2,plum,,\{\}\)/, 'the typed shard holds a row twice');

# Dump and restore into a new database
my $dump = $node->basedir . '/persist_sink.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump -Fc');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');

is($node->safe_psql('restored', "SELECT extversion FROM pg_extension WHERE extname = 'persist_sink'"),
	$node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'persist_sink'"),
	'the restored database has the extension, at the same version');
is($node->safe_psql('restored',
		"SELECT attstorage FROM pg_attribute WHERE attrelid = 'persist_sink.blob'::regclass AND attname = 'data'"),
	'p', 'blob.data is still STORAGE PLAIN (kept in the row, in chunks)');

my $after = contents('restored');
is_deeply($after, $before, 'every shard is identical after dump and restore');
is($after->{shards}, $before->{shards}, 'the shards view (seqno, upper, since, sizes, owners, privileges) is identical');
is(problems('restored'), '', 'verify() is clean after the restore');
like($after->{readers}, qr/^owned\|r2\|dump_app\|-1\|1 day\|.*\nsink\|r1\|/s, 'the readers are restored, with their owners');
is($node->safe_psql('restored', $table_def), $node->safe_psql('postgres', $table_def),
	'the foreign tables are restored: shard, as_of, grants, server');
is($node->safe_psql('restored', $table_rows), $node->safe_psql('postgres', $table_rows),
	'and read the same rows');
my $read_r1 = q{SELECT md5(string_agg(format('%s|%s|%s|%s', key, val, "time", diff), ',' ORDER BY key, val, "time"))
	|| ' ' || count(*) FROM persist_sink.read_next('sink', 'r1')};
is($node->safe_psql('restored', $read_r1), $node->safe_psql('postgres', $read_r1),
	'a restored reader reads what it read before');

# The restored shards go on: a compare_and_append at the upper, a compaction
my $upper = $node->safe_psql('restored', "SELECT persist_sink.shard_upper('blob')");
$node->safe_psql('restored',
	"SELECT persist_sink.compare_and_append('blob', '{new}'::text[], '{row}'::text[], ARRAY[$upper]::bigint[], '{1}', $upper, $upper + 1)");
$node->safe_psql('restored', "SELECT persist_sink.compact('blob')");
is($node->safe_psql('restored',
		"SELECT count(*) FROM persist_sink.snapshot('blob') WHERE key = 'new'::bytea"),
	'1', 'a restored shard takes a new write and compacts');
is( $node->safe_psql('restored', qq{
SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
									  "time", diff), ',' ORDER BY key, val, "time"), '')) || ' ' || count(*)
FROM persist_sink.snapshot('blob', @{[ $upper - 1 ]})}),
	$before->{ "blob snapshot " . ($upper - 1) },
	'with the same content as before up to the old upper');
$node->safe_psql('restored', q{INSERT INTO public.sink_table (key, val) VALUES ('through', 'table')});
is($node->safe_psql('restored', "SELECT diff FROM public.sink_table WHERE key = 'through'"),
	'1', 'a restored foreign table takes an INSERT');
is(problems('restored'), '', 'verify() is clean after writing to the restored shards');
is(problems('postgres'), '', 'and the original shards are untouched');
is_deeply(contents('postgres'), $before, 'the original database is unchanged');

$node->stop;
done_testing();
