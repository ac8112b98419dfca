
# Copyright (c) persist_sink contributors

# The stats counters' table and its hard cap, persist_sink.stats_max (100
# here, its minimum).
#  (a) The background compactor's merges count in compactions and
#      compacted_updates.
#  (b) 130 shards written: the table holds exactly 100 entries, the stats
#      view 100 rows, and the additions that found no room are counted in
#      stats_info().uncounted.
#  (c) With the table full, a shard with an entry still counts; one
#      without (compare_and_append or the sink's append()) only adds to
#      uncounted.  The cap is over every database: a second database gets
#      no entry either.
#  (d) drop_shard frees entries: shards without one are counted again,
#      from zero.  stats_reset() frees the current database's entries,
#      DROP EXTENSION and DROP DATABASE the dropped database's.
#  (e) The server stays healthy: new connections, queries, many locks in
#      one transaction, no shared memory error in the log; and the setting
#      refuses values below its minimum.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('stats_cap', "persist_sink.stats_max = 100\n");

# Runs SQL in the postgres database (or in $db); returns its output.
sub query
{
	my ($sql, $db) = @_;
	return $node->safe_psql($db || 'postgres', $sql);
}

# stats_info() as "entries uncounted".
sub info
{
	my ($db) = @_;
	return query('SELECT entries, uncounted FROM persist_sink.stats_info()', $db);
}

# Writes one update to shard $s at its upper by compare_and_append.
sub cas
{
	my ($s, $db) = @_;
	query(qq{SELECT persist_sink.compare_and_append('$s', '{k}'::text[], '{v}'::text[],
		ARRAY[persist_sink.shard_upper('$s')], '{1}',
		persist_sink.shard_upper('$s'), persist_sink.shard_upper('$s') + 1)}, $db);
}

is(query('SHOW persist_sink.stats_max'), '100', 'stats_max is set');
is(query('SELECT stats_max FROM persist_sink.stats_info()'), '100', 'stats_info() shows stats_max');

# (a) the background compactor counts its merges: 8 batches of 2 updates
# each are merged into one
query("SELECT persist_sink.create_shard('bg')");
for my $i (0 .. 7)
{
	query(qq{SELECT persist_sink.compare_and_append('bg', ARRAY['a$i', 'b$i'], '{v,v}'::text[],
		'{$i,$i}', '{1,1}', $i, $i + 1)});
}
ok( $node->poll_query_until(
		'postgres', "SELECT compactions > 0 FROM persist_sink.stats WHERE shard = 'bg'"),
	'the compactor counted its merge');
is( query("SELECT appends, compactions, compacted_updates FROM persist_sink.stats WHERE shard = 'bg'"),
	'8|1|16', 'one merge of the 16 updates of 8 batches');
is(query("SELECT count(*) FROM persist_sink.batches('bg')"), '1', 'the shard holds one batch');

# (b) 130 more shards written, one compare_and_append each
query(q{SELECT format('SELECT persist_sink.create_shard(%L)', 'cap_' || lpad(g::text, 3, '0'))
	FROM generate_series(1, 130) g \gexec});
query(q{SELECT format($$SELECT persist_sink.compare_and_append(%L, '{k}'::text[], '{v}'::text[], '{0}', '{1}', 0, 1)$$,
				 'cap_' || lpad(g::text, 3, '0'))
	FROM generate_series(1, 130) g \gexec});
my ($entries, $uncounted) = split /\|/, info();
is($entries, 100, 'the table holds stats_max entries');
cmp_ok($uncounted, '>', 0, 'the additions that found the table full are counted as uncounted');
is(query('SELECT count(*) FROM persist_sink.stats'), '100', 'the stats view has stats_max rows');
is( query(q{SELECT string_agg(DISTINCT appends::text, ',') || ' ' || min(shard) || ' ' || max(shard)
		FROM persist_sink.stats WHERE shard LIKE 'cap\_%'}),
	'1 cap_001 cap_099',
	'the shards written first got the entries, each with its append');

# (c) with the table full
cas('cap_001');
is( query("SELECT appends FROM persist_sink.stats WHERE shard = 'cap_001'"), '2',
	'a shard with an entry still counts');
is(info(), "100|$uncounted", 'and adds nothing to uncounted');
my $before = $uncounted;
cas('cap_130');
($entries, $uncounted) = split /\|/, info();
is($entries, 100, 'a shard without an entry gets none');
cmp_ok($uncounted, '>', $before, 'its compare_and_append adds to uncounted');
is(query("SELECT count(*) FROM persist_sink.stats WHERE shard = 'cap_130'"), '0', 'and has no row');
$before = $uncounted;
cmp_ok(query(q{SELECT persist_sink.append('cap_120', '{k2}'::text[], '{v}'::text[], '{1}')}),
	'>', 0, 'append() to a shard without an entry works');
($entries, $uncounted) = split /\|/, info();
is($entries, 100, 'append() makes no entry either');
cmp_ok($uncounted, '>', $before, 'the sink worker adds to uncounted');

query('CREATE DATABASE other');
query('CREATE EXTENSION persist_sink', 'other');
query("SELECT persist_sink.create_shard('o1')", 'other');
$before = $uncounted;
cas('o1', 'other');
($entries, $uncounted) = split /\|/, info('other');
is($entries, 100, 'the cap is over every database');
cmp_ok($uncounted, '>', $before, 'the second database adds to the same uncounted');
is(query('SELECT count(*) FROM persist_sink.stats', 'other'), '0', 'the second database has no row');

# (d) freeing entries
query(q{SELECT persist_sink.drop_shard('cap_' || lpad(g::text, 3, '0')) FROM generate_series(1, 10) g});
is(info() =~ s/\|.*//r, '90', 'drop_shard frees entries');
cas('cap_' . $_) for (121 .. 130);
is(info() =~ s/\|.*//r, '100', 'shards without an entry get the freed ones');
is( query(q{SELECT count(*), sum(appends) FROM persist_sink.stats
		WHERE shard BETWEEN 'cap_121' AND 'cap_130'}),
	'10|10', 'counted from zero: the appends made while the table was full are not there');
is(query('SELECT count(*) FROM persist_sink.stats'), '100', 'the view shows the new rows');

query('SELECT persist_sink.stats_reset()');
is(info() =~ s/\|.*//r, '0', "stats_reset() frees the current database's entries");
cas('o1', 'other');
is( query("SELECT shard, appends FROM persist_sink.stats", 'other'),
	'o1|1', 'the second database counts again');
query("SELECT persist_sink.create_shard('o2')", 'other');
cas('o2', 'other');
is(info() =~ s/\|.*//r, '2', 'two entries of the second database');
query('DROP EXTENSION persist_sink', 'other');
is(info() =~ s/\|.*//r, '0', 'DROP EXTENSION frees them');
query('CREATE EXTENSION persist_sink', 'other');
query("SELECT persist_sink.create_shard('o1')", 'other');
cas('o1', 'other');
cas('cap_050');
is(info() =~ s/\|.*//r, '2', 'one entry in each database');
query('DROP DATABASE other WITH (FORCE)');
is(info() =~ s/\|.*//r, '1', 'DROP DATABASE frees the entries of the dropped database');
is(query('SELECT shard FROM persist_sink.stats'), 'cap_050', 'and leaves the others');

# (e) the server is healthy
is(query('SELECT 1'), '1', 'a new connection works');
query('CREATE TABLE t AS SELECT g FROM generate_series(1, 10000) g');
is(query('SELECT sum(g) FROM t'), '50005000', 'queries work');
is( query('SELECT count(*) FROM (SELECT pg_advisory_xact_lock(g) FROM generate_series(1, 1000) g) l'),
	'1000', 'a transaction takes 1000 locks');
is( query(q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type IN ('persist_sink worker', 'persist_sink compactor')}),
	'4', 'the workers and the compactors run');
my ($ret, $stdout, $stderr) =
  $node->psql('postgres', 'ALTER SYSTEM SET persist_sink.stats_max = 50');
isnt($ret, 0, 'stats_max refuses a value below its minimum');
like($stderr, qr/outside the valid range/, 'with the valid range in the error');
my $log = slurp_file($node->logfile);
unlike($log, qr/out of shared memory/, 'no shared memory error in the log');
unlike($log, qr/TRAP|server process .* was terminated/, 'no failed assertion or crash in the log');

$node->stop;
done_testing();
