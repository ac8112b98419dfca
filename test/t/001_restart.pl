
# Copyright (c) persist_sink contributors

# Shards survive a clean restart and a crash unchanged: every committed
# compare_and_append is kept, nothing uncommitted appears, and no part is
# lost, damaged or left unreferenced.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('restart');

# Small inline and part limits, so that batches are inline, single blob
# parts, or several blob parts.
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET persist_sink.inline_max_bytes = '1kB';
ALTER SYSTEM SET persist_sink.blob_target_size = '2kB';
SELECT pg_reload_conf();
});
$node->poll_query_until('postgres',
	"SELECT current_setting('persist_sink.blob_target_size') = '2kB'")
  or die "timed out waiting for the settings to be reloaded";

# Appends updates key<i> => val<i % 7> for i in [from, to) at times
# i % (new_upper - expected_upper) + expected_upper, with diff d.
sub append_rows
{
	my ($shard, $from, $to, $d, $expected_upper, $new_upper) = @_;
	my $width = $new_upper - $expected_upper;
	return $node->safe_psql(
		'postgres', qq{
SELECT persist_sink.compare_and_append('$shard',
	ARRAY(SELECT 'key' || i FROM generate_series($from, $to - 1) i),
	ARRAY(SELECT 'val' || (i % 7) FROM generate_series($from, $to - 1) i),
	ARRAY(SELECT $expected_upper + i % $width FROM generate_series($from, $to - 1) i),
	array_fill(${d}::bigint, ARRAY[$to - $from]), $expected_upper, $new_upper)});
}

# md5 of a shard's snapshot as of as_of (default: upper - 1).
sub digest
{
	my ($shard, $as_of) = @_;
	$as_of = 'NULL' unless defined $as_of;
	return $node->safe_psql(
		'postgres', qq{
SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
									  "time", diff), ',' ORDER BY key, val, "time"), ''))
	|| ' ' || count(*)
FROM persist_sink.snapshot('$shard', $as_of)});
}

# Everything readable of every shard: upper, since, and the snapshots as
# of since, upper - 1 and a few times between.  Background compaction may
# rewrite batches, so seqnos and batch lists are not compared.
sub contents
{
	my %c;
	my @shards = split /\n/,
	  $node->safe_psql('postgres',
		'SELECT name FROM persist_sink.shards ORDER BY name COLLATE "C"');
	for my $shard (@shards)
	{
		my ($upper, $since) = split /\|/,
		  $node->safe_psql('postgres',
			"SELECT upper, since FROM persist_sink.shards WHERE name = '$shard'"
		  );
		$c{$shard}{upper} = $upper;
		$c{$shard}{since} = $since;
		next if $upper <= $since;
		for my $as_of ($since, int(($since + $upper) / 2), $upper - 1)
		{
			$c{$shard}{"snapshot $as_of"} = digest($shard, $as_of);
		}
		$c{$shard}{listen} = $node->safe_psql(
			'postgres', qq{
SELECT md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'), encode(val, 'hex'),
									  "time", diff), ',' ORDER BY key, val, "time"), ''))
FROM persist_sink.listen('$shard', $since)});
	}
	return \%c;
}

# Reports every problem verify() finds in any shard.
sub problems
{
	return $node->safe_psql(
		'postgres', q{
SELECT s.name || ': ' || v.problem
FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name) v
ORDER BY 1});
}

# Counts blob rows that belong to no shard.
sub stray_blob_rows
{
	return $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM persist_sink.blob b
WHERE NOT EXISTS (SELECT FROM persist_sink.consensus c
				  WHERE starts_with(b.key, c.shard || '/'))});
}

#
# Shards with inline batches, single-part and multi-part blob batches, a
# compacted shard and an empty one.
#
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.create_shard(s)
FROM unnest(ARRAY['inline', 'blob', 'compacted', 'empty', 'cas']) s;
});

for my $i (0 .. 4)
{
	append_rows('inline', $i * 3, $i * 3 + 3, 1, $i * 10, $i * 10 + 10);
}
append_rows('blob', 0, 2000, 1, 0, 10);
append_rows('blob', 1000, 1100, -1, 10, 20);
append_rows('blob', 5000, 5050, 2, 20, 25);
for my $i (0 .. 3)
{
	append_rows('compacted', $i * 400, $i * 400 + 600, 1, $i * 5, $i * 5 + 5);
}
append_rows('compacted', 0, 300, -1, 20, 30);
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.downgrade_since('compacted', 12);
SELECT persist_sink.compact('compacted');
});
$node->safe_psql('postgres',
	"SELECT persist_sink.compare_and_append('empty', '{}'::text[], '{}'::text[], '{}', '{}', 0, 7)"
);

my $kinds = $node->safe_psql(
	'postgres', q{
SELECT s.name, count(*) FILTER (WHERE b.inline), count(*) FILTER (WHERE NOT b.inline AND b.parts = 1),
	   count(*) FILTER (WHERE b.parts > 1)
FROM persist_sink.shards s, LATERAL persist_sink.batches(s.name) b
GROUP BY s.name ORDER BY s.name COLLATE "C"});
note "batches (inline, one blob part, several parts):\n$kinds";
like($kinds, qr/^inline\|[1-9]\d*\|0\|0$/m, 'inline shard has only inline batches');
like($kinds, qr/^blob\|\d+\|\d+\|[1-9]\d*$/m,
	'blob shard has a batch of several parts');
cmp_ok(
	$node->safe_psql(
		'postgres',
		"SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, 'blob/')"),
	'>', 2,
	'blob shard has several parts in the blob table');
is( $node->safe_psql(
		'postgres',
		"SELECT batches || ' ' || since FROM persist_sink.shards WHERE name = 'compacted'"
	),
	'1 12',
	'compacted shard has one batch');
is(problems(), '', 'verify finds no problem before restarting');

my $before = contents();
ok(keys %$before == 5, 'five shards recorded');

#
# A clean restart
#
$node->restart;

is_deeply(contents(), $before, 'every shard is unchanged after a restart');
is(problems(), '', 'verify finds no problem after a restart');
is(stray_blob_rows(), '0', 'no blob row without a shard after a restart');

#
# More writes, one transaction left open, then a crash
#
append_rows('inline', 100, 103, 1, 50, 60);
append_rows('blob', 0, 2000, -1, 25, 40);
append_rows('compacted', 2000, 2100, 3, 30, 31);
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.downgrade_since('blob', 20);
});

# A committed compare_and_append, with other writes of its transaction
$node->safe_psql(
	'postgres', q{
CREATE TABLE side (note text);
BEGIN;
INSERT INTO side VALUES ('committed with the append');
SELECT persist_sink.compare_and_append('cas', ARRAY['committed', 'also'], ARRAY['yes', 'yes'],
	'{0,1}', '{1,2}', 0, 2);
SELECT persist_sink.compare_and_append('cas',
	ARRAY(SELECT 'big' || i FROM generate_series(1, 1000) i),
	ARRAY(SELECT repeat('x', i % 50) FROM generate_series(1, 1000) i),
	array_fill(2::bigint, ARRAY[1000]), array_fill(1::bigint, ARRAY[1000]), 2, 3);
COMMIT;
});

my $committed = contents();

# A transaction that wrote parts and swapped the state, but never commits
my $open = $node->background_psql('postgres', on_error_stop => 1);
$open->query_safe('BEGIN');
$open->query_safe(q{INSERT INTO side VALUES ('never committed')});
$open->query_safe(
	q{
SELECT persist_sink.compare_and_append('cas',
	ARRAY(SELECT 'lost' || i FROM generate_series(1, 1000) i),
	ARRAY(SELECT repeat('y', i % 50) FROM generate_series(1, 1000) i),
	array_fill(3::bigint, ARRAY[1000]), array_fill(1::bigint, ARRAY[1000]), 3, 4)});
$open->query_safe(
	q{
SELECT persist_sink.compare_and_append('inline', '{uncommitted}'::text[], '{x}'::text[],
	'{60}', '{1}', 60, 61)});
is($open->query_safe(q{SELECT persist_sink.shard_upper('cas')}),
	'4', 'the open transaction sees its own append');

$node->stop('immediate');
eval { $open->quit; };
$node->start;

is_deeply(contents(), $committed,
	'every shard is unchanged after a crash');
is(problems(), '', 'verify finds no problem after a crash');
is(stray_blob_rows(), '0', 'no blob row without a shard after a crash');

is($node->safe_psql('postgres', q{SELECT persist_sink.shard_upper('cas')}),
	'3', 'the committed compare_and_append survived, the open one did not');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8')
				  || '@' || "time" || 'x' || diff, ' ' ORDER BY key)
FROM persist_sink.snapshot('cas', 1)}),
	'also=yes@1x2 committed=yes@1x1',
	'the committed updates are there');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*), min("time"), max("time"), sum(diff)
FROM persist_sink.listen('cas', 1)}),
	'1000|2|2|1000',
	'the committed multi-part batch is whole');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM persist_sink.snapshot('cas') WHERE convert_from(key, 'UTF8') LIKE 'lost%'}),
	'0',
	'nothing of the uncommitted append is visible');
is($node->safe_psql('postgres', q{SELECT string_agg(note, ',') FROM side}),
	'committed with the append',
	'the other writes of the transactions went the same way');
is($node->safe_psql('postgres', q{SELECT persist_sink.shard_upper('inline')}),
	'60', 'the uncommitted inline append is gone');

# The shards go on where they were
$node->safe_psql(
	'postgres', q{
SELECT persist_sink.compare_and_append('cas', '{after}'::text[], '{crash}'::text[],
	'{3}', '{1}', 3, 4)});
is( $node->safe_psql(
		'postgres', q{
SELECT persist_sink.shard_upper('cas') || ' ' || count(*)
FROM persist_sink.snapshot('cas') WHERE key = 'after'::bytea}),
	'4 1',
	'a compare_and_append after the crash succeeds');
my ($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
\set VERBOSITY verbose
SELECT persist_sink.compare_and_append('cas', '{x}'::text[], '{x}'::text[], '{3}', '{1}', 3, 4)});
like($stderr, qr/PS001.*\n.*current upper is 4/,
	'and the next one at the old upper mismatches');
is($node->safe_psql('postgres', q{SELECT persist_sink.compact('blob')}),
	'', 'the crashed shard compacts');
is(digest('blob', 39), $committed->{blob}{'snapshot 39'},
	'with the same content');
is(problems(), '', 'verify finds no problem at the end');

$node->stop;

done_testing();
