
# Copyright (c) persist_sink contributors

# A shard untouched while the transaction ID counter goes around: its
# consensus row is frozen by VACUUM and the commit log of the transaction
# that wrote it is truncated.  The row's raw xmin then names a transaction
# whose status is gone (and, past half the xid space, reads as one in the
# future); reads must not ask the commit log about it.
#
# The counter is moved on with pg_resetwal -x in two hops of 1.5 billion,
# each followed by VACUUM FREEZE of every database (template0 included), so
# that datfrozenxid follows and the old pg_xact segments are removed, as
# years of operation would.  Then the shard written before is read
# (shard_upper, snapshot, verify), written (compare_and_append, append),
# compacted and read again.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('wraparound', "autovacuum = off\n");
my $q = sub { $node->safe_psql('postgres', shift) };

$q->("SELECT persist_sink.create_shard('old')");
$q->(
	"SELECT persist_sink.compare_and_append('old', ARRAY['a', 'b'], ARRAY['1', '2'],
		ARRAY[0, 0]::bigint[], ARRAY[1, 1]::bigint[], 0, 1)");
my $before = $q->(
	"SELECT string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8') || ':' || diff, ' ' ORDER BY key)
	 FROM persist_sink.snapshot('old')");
is($before, 'a=1:1 b=2:1', 'the shard before');
my $xmin = $q->("SELECT xmin FROM persist_sink.consensus WHERE shard = 'old'");

my ($first, $second) = go_around($node);
note "xmin of the shard's row: $xmin; next xid after the hops: $first, then $second";
is($q->("SELECT xmin FROM persist_sink.consensus WHERE shard = 'old'"),
	$xmin, "the shard's row keeps its raw xmin (frozen)");
is( $q->("SELECT datfrozenxid::text::bigint <> $xmin FROM pg_database WHERE datname = 'postgres'"),
	't', 'datfrozenxid has moved past it');
ok(!-e sprintf('%s/pg_xact/%04X', $node->data_dir, int($xmin / (32768 * 32))),
	'the commit log segment of its xmin is gone');

# reads of the frozen row
my ($rc, $out, $err) = $node->psql('postgres', "SELECT persist_sink.shard_upper('old')");
is($rc, 0, 'shard_upper of the frozen shard succeeds') or diag($err);
is($out, '1', '... and is its upper');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8') || ':' || diff, ' ' ORDER BY key)
	 FROM persist_sink.snapshot('old')");
is($rc, 0, 'snapshot of the frozen shard succeeds') or diag($err);
is($out, $before, '... with the content written before');
is($q->("SELECT count(*) FROM persist_sink.verify('old')"), 0, 'verify() is clean');

# writes after the wraparound, and a compaction
$q->(
	"SELECT persist_sink.compare_and_append('old', ARRAY['c'], ARRAY['3'],
		ARRAY[1]::bigint[], ARRAY[1]::bigint[], 1, 2)");
my $t = $q->("SELECT persist_sink.append('old', ARRAY['d'], ARRAY['4'], ARRAY[1]::bigint[])");
ok($t > 2, 'append to the shard after the wraparound returns a time');
$q->("SELECT persist_sink.compact('old')");
is( $q->(
		"SELECT string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8') || ':' || diff, ' ' ORDER BY key)
	 FROM persist_sink.snapshot('old')"),
	'a=1:1 b=2:1 c=3:1 d=4:1', 'the shard after writes and a compaction');
is($q->("SELECT batches FROM persist_sink.shards WHERE name = 'old'"), 1, 'compacted to one batch');
is($q->("SELECT count(*) FROM persist_sink.verify('old')"), 0, 'verify() is clean after');

# a fresh shard and its reads, in the new epoch
$q->("SELECT persist_sink.create_shard('new')");
$q->("SELECT persist_sink.append('new', ARRAY['x'], ARRAY['y'], ARRAY[1]::bigint[])");
is($q->("SELECT count(*) FROM persist_sink.snapshot('new')"), 1, 'a new shard is written and read');

$node->stop;
done_testing();
