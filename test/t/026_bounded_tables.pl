
# Copyright (c) persist_sink contributors

# The extension's shared tables are bounded by their own counts, never by
# the server's spare shared memory (which PostgreSQL's lock table grows
# into): 3,000 shards each written once by compare_and_append (the debt
# table, at most 1,024 entries) and 1,500 of them by append() (the sink's
# table of shards, at most 1,024), and one statement creating a reader on
# each and one moving each one's since (their holds are row locks), leave
# the server's free shared memory as it was, and an unrelated transaction
# can then still take 3,000 locks.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('bounded', "persist_sink.compaction = off\nmax_connections = 20\n");
my $q = sub { $node->safe_psql('postgres', shift) };

# The server's free shared memory, and the sizes of our allocations.
my $free_sql = 'SELECT size FROM pg_shmem_allocations WHERE name IS NULL';
my $ours_sql = q{SELECT string_agg(name || '=' || allocated_size, ' ' ORDER BY name)
	FROM pg_shmem_allocations WHERE name LIKE 'persist_sink%'};
# warm up: one shard written both ways, so that nothing allocated once
# counts as growth
$q->("SELECT persist_sink.create_shard('warm')");
$q->("SELECT persist_sink.compare_and_append('warm', ARRAY['k'], ARRAY['v'], ARRAY[0]::bigint[], ARRAY[1]::bigint[], 0, 1)");
$q->("SELECT persist_sink.append('warm', ARRAY['k'], ARRAY['v'], ARRAY[1]::bigint[])");
my $free_before = $q->($free_sql);
my $ours_before = $q->($ours_sql);

$q->(q{
DO $$
BEGIN
	FOR i IN 1..3000 LOOP
		PERFORM persist_sink.create_shard('t' || i);
	END LOOP;
END
$$});
for my $chunk (0 .. 5)
{
	my ($from, $to) = (1 + 500 * $chunk, 500 * ($chunk + 1));
	$q->(qq{
DO \$\$
BEGIN
	FOR i IN $from..$to LOOP
		PERFORM persist_sink.compare_and_append('t' || i, ARRAY['k'], ARRAY['v'],
			ARRAY[0]::bigint[], ARRAY[1]::bigint[], 0, 1);
	END LOOP;
END
\$\$});
}
# append() runs outside the caller's transaction: one statement per call
$q->(join(";\n", map { "SELECT persist_sink.append('t$_', ARRAY['s'], ARRAY['v'], ARRAY[1]::bigint[])" } 1 .. 1500));
is($q->("SELECT count(*) FROM persist_sink.snapshot('t1500')"), 2, 'the shards were written');
# a reader on every shard, and every shard's since moved, each in one
# statement: the holds they take are row locks, not heavyweight locks
is($q->(q{SELECT count(persist_sink.create_reader('t' || i, 'r', 0)) FROM generate_series(1, 3000) i}),
	3000, 'one statement creates a reader on each of 3,000 shards');
is($q->(q{SET client_min_messages = warning;
	SELECT count(persist_sink.downgrade_since('t' || i, 1)) FROM generate_series(1, 3000) i}),
	3000, 'one statement moves the since of 3,000 shards with readers');
is($q->(q{SELECT count(*) FROM persist_sink.shards WHERE name LIKE 't%' AND since = 0}),
	3000, 'each held at its reader\'s position');

my $free_after = $q->($free_sql);
note "free shared memory: $free_before bytes before, $free_after after";
cmp_ok($free_before - $free_after, '<=', 0,
	"the server's free shared memory did not shrink ($free_before -> $free_after)");
is($q->($ours_sql), $ours_before, "persist_sink's allocations kept their sizes");
is( $q->(q{SELECT count(pg_advisory_xact_lock(i)) FROM generate_series(1, 3000) i}),
	3000, 'an unrelated transaction still takes 3,000 locks');

$node->stop;
done_testing();
