
# Copyright (c) persist_sink contributors

# Years in an hour: what a long-lived database does to the extension, in
# one run, checked against what was written.
#  (a) 100,000 shards are created, written (compare_and_append, and
#      append() for 10,000 of them) and dropped, in churn: the server's free
#      shared memory and persist_sink's allocations are as before, and an
#      unrelated transaction still takes 3,000 locks;
#  (b) a shard's compaction fails (a damaged part) while appends to busy
#      shards, and to a held shard that time out, go on: every busy append
#      succeeds, busy shards stay compacted, compaction_failures shows the
#      failing shard, and the timed-out writes keep no interval slot;
#  (c) the transaction ID counter goes around (two hops of 1.5 billion,
#      every database frozen, the old commit log removed): every shard
#      written before reads as before, and takes writes and compaction
#      after.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('years', "autovacuum = off\nmax_connections = 20\n");
my $q = sub { $node->safe_psql('postgres', shift) };

# SQL of the whole content of a shard, one line
sub content_sql
{
	my ($shard) = @_;
	return "SELECT coalesce(string_agg(encode(key, 'escape') || '=' || encode(val, 'escape') || ':' || diff, ' '
		ORDER BY key, val), '') FROM persist_sink.snapshot('$shard')";
}

$q->("SELECT persist_sink.create_shard('old')");
$q->("SELECT persist_sink.create_shard('busy' || i) FROM generate_series(1, 4) i");
append_batches($node, 'old', 0, 2, 3);
$q->("SELECT persist_sink.append('busy' || i, ARRAY['first'], ARRAY['v'], ARRAY[1::bigint]) FROM generate_series(1, 4) i");
my $old_before = $q->(content_sql('old'));

# (a) churn
my $free_sql = 'SELECT size FROM pg_shmem_allocations WHERE name IS NULL';
my $ours_sql = q{SELECT string_agg(name || '=' || allocated_size, ' ' ORDER BY name)
	FROM pg_shmem_allocations WHERE name LIKE 'persist_sink%'};
my $free_before = $q->($free_sql);
my $ours_before = $q->($ours_sql);
for my $round (0 .. 9)
{
	my ($from, $to) = (1 + 10_000 * $round, 10_000 * ($round + 1));
	$q->(qq{
DO \$\$
BEGIN
	FOR i IN $from..$to LOOP
		PERFORM persist_sink.create_shard('churn' || i);
		PERFORM persist_sink.compare_and_append('churn' || i, ARRAY['k'], ARRAY['v'],
			ARRAY[0]::bigint[], ARRAY[1]::bigint[], 0, 1);
	END LOOP;
END
\$\$});
	# append() commits outside the caller's transaction: a statement each
	$q->(join(";\n",
			map { "SELECT persist_sink.append('churn$_', ARRAY['s'], ARRAY['v'], ARRAY[1]::bigint[])" }
			  $from .. $from + 999));
	is($q->("SELECT count(*) FROM persist_sink.snapshot('churn$from')"), 2, "(a) round $round: shards written")
	  if $round == 0 || $round == 9;
	$q->(qq{
DO \$\$
BEGIN
	FOR i IN $from..$to LOOP
		PERFORM persist_sink.drop_shard('churn' || i);
	END LOOP;
END
\$\$});
}
is($q->("SELECT count(*) FROM persist_sink.shards WHERE name LIKE 'churn%'"), 0, '(a) 100,000 shards created, written and dropped');
my $free_after = $q->($free_sql);
note "free shared memory: $free_before bytes before 100,000 shards, $free_after after";
cmp_ok($free_before - $free_after, '<=', 0, "(a) the server's free shared memory did not shrink");
is($q->($ours_sql), $ours_before, "(a) persist_sink's allocations kept their sizes");
is($q->(q{SELECT count(pg_advisory_xact_lock(i)) FROM generate_series(1, 3000) i}),
	3000, '(a) an unrelated transaction still takes 3,000 locks');

# (b) a shard whose compaction fails: 8 batches written while background
# compaction is off, the first part damaged, then compaction on again
$q->("ALTER SYSTEM SET persist_sink.compaction = off; SELECT pg_reload_conf()");
$q->("SELECT persist_sink.create_shard('failing')");
append_batches($node, 'failing', 0, 7, 2000);
$q->(q{CREATE TABLE saved AS SELECT * FROM persist_sink.blob
	WHERE key = (SELECT min(key) FROM persist_sink.blob WHERE key LIKE 'failing/%') AND chunk = 0});
$q->(q{UPDATE persist_sink.blob SET data = set_byte(data, 40, get_byte(data, 40) # 255)
	WHERE (key, chunk) IN (SELECT key, chunk FROM saved)});
$q->("ALTER SYSTEM RESET persist_sink.compaction; SELECT pg_reload_conf()");

# ... a held shard
$q->("SELECT persist_sink.create_shard('held')");
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT persist_sink.compare_and_append('held', ARRAY['h'], ARRAY['v'], ARRAY[0]::bigint[],
	ARRAY[1::bigint], 0, 1)});

# ... busy shards: 4 sessions of 150 appends, while the failing shard
# asks for merges (each compare_and_append does) and the held shard's
# appends time out
my @busy;
for my $b (1 .. 4)
{
	push @busy, start_psql($node, $dir, "busy$b",
		join('', map { "SELECT persist_sink.append('busy$b', ARRAY['k$_'], ARRAY['v'], ARRAY[1::bigint]);\n" } 1 .. 150));
}
my $timed = start_psql($node, $dir, 'timed',
	"SET statement_timeout = '100ms';\n"
	  . join('', map { "SELECT persist_sink.append('held', ARRAY['t$_'], ARRAY['v'], ARRAY[1::bigint]);\n" } 1 .. 20),
	on_error_stop => 0);
append_batches($node, 'failing', $_, $_, 1) for 8 .. 20;
my $busy_ok = 0;
$busy_ok += finish_psql($_)->{ok} for @busy;
is($busy_ok, 4, '(b) every append to the busy shards succeeded');
my $r_timed = finish_psql($timed);
my $n_timed = () = $r_timed->{err} =~ /canceling statement due to statement timeout/g;
is($n_timed, 20, '(b) the appends to the held shard timed out');
$node->poll_query_until('postgres', q{SELECT failing_in_a_row >= 1 FROM persist_sink.compaction_failures WHERE shard = 'failing'})
  or diag('no failure shown');
like($q->(q{SELECT failures || ' ' || last_error FROM persist_sink.compaction_failures WHERE shard = 'failing'}),
	qr/^[1-9]\d* .*checksum/, '(b) compaction_failures shows the failing shard and why');
$node->poll_query_until('postgres', q{SELECT bool_and(debt_batches = 0) FROM persist_sink.shards WHERE name LIKE 'busy%'})
  or diag($q->(q{SELECT string_agg(name || ' ' || batches || ' ' || debt_batches, ', ') FROM persist_sink.shards WHERE name LIKE 'busy%'}));
is($q->(q{SELECT count(*) FROM persist_sink.shards WHERE name LIKE 'busy%' AND debt_batches = 0}),
	4, '(b) the busy shards are compacted meanwhile (no compaction debt)');
is($q->('SELECT intervals FROM persist_sink.sink_memory()'), 0, '(b) the timed-out writes keep no interval slot');
$holder->query_safe('COMMIT');
$holder->quit;
# repaired, the failing shard compacts again
$q->(q{UPDATE persist_sink.blob b SET data = s.data FROM saved s WHERE (b.key, b.chunk) = (s.key, s.chunk)});
$q->("SELECT persist_sink.compact('failing')");
is($q->(q{SELECT failing_in_a_row FROM persist_sink.compaction_failures WHERE shard = 'failing'}),
	0, '(b) repaired, it compacts again');
my %before = map { ($_ => $q->(content_sql($_))) } qw(old busy1 busy2 busy3 busy4 failing held);
is($q->("SELECT count(*) FROM persist_sink.snapshot('held')"), 1, '(b) nothing of the timed-out writes was written');

# (c) the counter goes around
$q->('CHECKPOINT');
my $xmin = $q->("SELECT xmin FROM persist_sink.consensus WHERE shard = 'old'");
my ($first, $second) = go_around($node);
note "xmin of the old shard's row: $xmin; next xid after the hops: $first, then $second";
ok(!-e sprintf('%s/pg_xact/%04X', $node->data_dir, int($xmin / (32768 * 32))),
	'(c) the commit log segment of the old rows is gone');
my $same = 0;
$same += $q->(content_sql($_)) eq $before{$_} for keys %before;
is($same, scalar(keys %before), '(c) every shard reads as before the wraparound');
is($before{old}, $old_before, '(c) the old shard as written years ago');
$q->("SELECT persist_sink.append(s, ARRAY['after'], ARRAY['v'], ARRAY[1::bigint]) FROM unnest(ARRAY['old', 'busy1', 'failing', 'held']) s");
$q->("SELECT persist_sink.compact(s) FROM unnest(ARRAY['old', 'busy1', 'failing', 'held']) s");
is( $q->(q{SELECT count(*) FROM unnest(ARRAY['old', 'busy1', 'failing', 'held']) s
	WHERE (SELECT count(*) FROM persist_sink.snapshot(s) WHERE key = 'after') = 1
	  AND (SELECT batches FROM persist_sink.shards WHERE name = s) = 1}),
	4, '(c) written and compacted after it');
is($q->("SELECT count(*) FROM persist_sink.shards, persist_sink.verify(name)"), 0, '(c) verify() is clean on every shard');

$node->stop;
done_testing();
