
# Copyright (c) persist_sink contributors

# Several compactors (persist_sink.compactors, 2 by default) merge disjoint
# runs of one shard at the same time: the batches appended while one
# compactor is in a long merge are merged by another.
#  (a) With the defaults, two "persist_sink compactor" processes run.
#  (b) With compaction off, a shard gets 100 batches of 1000 updates (in
#      the blob table, each under 64kB encoded: a merge rewrites them,
#      reading their parts, rather than listing them).  A session locks the
#      blob table, and compaction is turned on: one compactor claims the 100
#      batches and waits for the lock at its first part read.  Then 8 small
#      batches (inline in the state, so merging them needs no blob row) are
#      appended: the other compactor merges them into one while the first
#      still waits, and compaction_progress shows only the first one's
#      merge of 100 batches.
#  (c) The first compactor is terminated while it waits: its claim goes
#      with it, the shard is queued again, and once the lock is released a
#      compactor merges the 100 batches and the small ones' merged batch,
#      all of tier 0, into one (no append asks for it), of the same content,
#      verify() clean.
#  (d) With persist_sink.compactors = 1 one compactor runs; the server log
#      of a refused compactor names the setting (see 015_worker_slots.pl).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('compactors', "persist_sink.compaction = off\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# The shard's batches, as "count: sizes" (for diagnostics).
sub layout
{
	return query(q{
SELECT count(*) || ': ' || string_agg(encoded_bytes::text, ' ' ORDER BY lower)
FROM persist_sink.batches('two')});
}

# (a) two compactors by default
is(query("SHOW persist_sink.compactors"), '2', 'two compactors by default');
ok( $node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'persist_sink compactor'}, '2'),
	'two compactor processes run');
# each worker is named in pg_stat_activity (application_name) and in ps
is(query(q{
SELECT string_agg(application_name, ', ' ORDER BY application_name)
FROM pg_stat_activity WHERE backend_type LIKE 'persist_sink %'}),
	'persist_sink compactor 0, persist_sink compactor 1, persist_sink worker 0, persist_sink worker 1',
	'each worker has its own name');

# (b) 100 batches, then a long merge held at its first part read
query("SELECT persist_sink.create_shard('two')");
append_batches($node, 'two', 0, 99, 1000);
is(query(q{
SELECT count(*) || ' ' || bool_and(NOT inline) || ' ' || bool_and(encoded_bytes < 65536)
FROM persist_sink.batches('two')}),
	'100 true true', '100 batches under 64kB, in the blob table');
# (the blob table is locked below: read the large batches' content now)
my $digest = query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('two')});

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('LOCK TABLE persist_sink.blob IN ACCESS EXCLUSIVE MODE');
query('ALTER SYSTEM SET persist_sink.compaction = on');
query('SELECT pg_reload_conf()');
ok( $node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'persist_sink compactor' AND state = 'active' AND query = 'two'
  AND wait_event_type = 'Lock'}, '1'),
	'one compactor merges the 100 batches, held at its first part read');
my $first = query(q{
SELECT pid FROM pg_stat_activity
WHERE backend_type = 'persist_sink compactor' AND state = 'active' AND query = 'two'
  AND wait_event_type = 'Lock'});

append_batches($node, 'two', 100, 107, 1, q{'small' || b});
ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 101 AND count(*) FILTER (WHERE inline) = 1
FROM persist_sink.batches('two')}, 't'),
	'the other compactor merged the 8 small batches meanwhile')
  or diag(layout());
is(query(q{
SELECT string_agg(pid || ' ' || command || ' ' || batches, ', ')
FROM persist_sink.compaction_progress WHERE shard = 'two'}),
	"$first background 100", 'the long merge is still the one in progress');
is(query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $first"),
	'Lock', 'and still waits for the blob table');

# (c) the first compactor terminated mid-merge; the 100 batches merged later
query("SELECT pg_terminate_backend($first)");
$node->poll_query_until('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE pid = $first", '0')
  or die 'timed out waiting for the compactor to exit';
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 1 AND NOT EXISTS (SELECT FROM persist_sink.compaction_progress)
FROM persist_sink.batches('two')}, 't'),
	'the 101 batches are merged once the lock is gone: 1 batch')
  or diag(layout());
is(query(q{
SELECT string_agg(updates::text, ' ' ORDER BY lower) FROM persist_sink.batches('two')}),
	'100008', 'one batch of the 100 and the small ones');
is(query(q{
SELECT md5(string_agg(encode(key, 'hex') || ':' || diff, ',' ORDER BY key))
FROM persist_sink.snapshot('two') WHERE NOT starts_with(convert_from(key, 'UTF8'), 'small')}),
	$digest, 'the content of the 100 batches is unchanged');
is(query(q{
SELECT string_agg(convert_from(key, 'UTF8') || ':' || diff, ' ' ORDER BY key)
FROM persist_sink.snapshot('two') WHERE starts_with(convert_from(key, 'UTF8'), 'small')}),
	join(' ', map { "small$_:1" } sort(100 .. 107)), 'and of the small ones');
is(query("SELECT count(*) FROM persist_sink.verify('two')"), '0', 'verify() is clean');
is(query(q{
SELECT (SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, 'two/')) =
       (SELECT sum(parts) FROM persist_sink.batches('two') WHERE NOT inline)}),
	't', 'the blob rows left are the merged batch\'s parts');

# (d) one compactor when asked for
$node->append_conf('postgresql.conf', "persist_sink.compactors = 1\n");
$node->restart;
ok( $node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'persist_sink compactor'}, '1'),
	'persist_sink.compactors = 1: one compactor process');

$node->stop;
done_testing();
