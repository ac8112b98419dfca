
# Copyright (c) persist_sink contributors

# A sink worker encodes the small writes of an open interval as they join
# (those of 32 kB or more), and at the seal, when no two writes overlap in
# (key, val, time), puts their blocks one after the other instead of
# merging them.  Each case below keeps an interval open: a session holds
# the shard's state row, so the interval before it waits for the row and
# the next one gathers writes until the holder lets go.
#  (a) Four writes of 1000 updates under keys of their own and one write of
#      5 updates (too small to encode ahead) join one interval.  The worker
#      encodes the four ahead; the seal assembles the shared part from the
#      5 runs, 4 of them encoded ahead, as one part; every update reads
#      back, verify() is clean, and so after a restart.
#  (b) Four writes of 1000 updates whose keys interleave, two of them the
#      same updates: the runs overlap, so they are merged (no assembly):
#      the shared part is sorted and consolidated, the two equal writes
#      summed.
#  (c) Four writes of 1000 updates join; one of them is cancelled after it
#      was encoded ahead and before the seal.  The shared part is
#      assembled from the 3 others; the cancelled write's updates are not
#      in the shard.
#  (d) With blob_target_size = 64kB, three writes of 1000 updates (about
#      53 kB of columns each) are assembled into three parts, a part being
#      cut before a run that would take it past the target.  A write of
#      2000 updates (past the target on its own) is left to the merge when
#      its turn to be encoded ahead comes, and its interval is merged, not
#      assembled, into parts of at most the target.
#  (f) A write of 1000 updates, encoded ahead, and two writes of 400 (too
#      small to encode ahead, but of more than 16 kB of columns each) that
#      sort next to each other: the seal encodes each of the two into a
#      block of its own, so that a later merge can hand each on whole.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('ahead', "log_min_messages = debug2\n");
my $dir = PostgreSQL::Test::Utils::tempdir;

sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

query("CREATE TABLE go (n int)");

# A write of $n updates (key prefix.i, val of 40 bytes, diff $diff) to
# shard $s, as a statement.
sub write_sql
{
	my ($s, $prefix, $n, $diff) = @_;
	$diff //= 1;
	return qq{SELECT persist_sink.append('$s',
	ARRAY(SELECT convert_to('$prefix' || lpad(i::text, 6, '0'), 'UTF8') FROM generate_series(1, $n) i),
	ARRAY(SELECT convert_to(rpad('v' || i, 40, 'x'), 'UTF8') FROM generate_series(1, $n) i),
	array_fill(${diff}::bigint, ARRAY[$n]));
};
}

# Holds shard $s's state row until a row $round is in go, then appends
# one update to it, so that the next interval stays open; returns the
# holder and the first writer, whose interval waits for the row.
sub hold_shard
{
	my ($s, $round) = @_;
	my $holder = start_psql(
		$node, $dir, "holder_$s", qq{
BEGIN;
SELECT 'held' FROM persist_sink.consensus WHERE shard = '$s' FOR UPDATE;
DO \$\$ BEGIN WHILE NOT EXISTS (SELECT FROM go WHERE n = $round) LOOP PERFORM pg_sleep(0.05); END LOOP; END \$\$;
ROLLBACK;
});
	ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.application_name = 'holder_$s' AND l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock'}),
		"$s: a session holds the state row");
	my $first = start_psql($node, $dir, "first_$s", write_sql($s, 'first.', 1));
	ok( $node->poll_query_until('postgres', q{
SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()}),
		"$s: the first interval waits for the state row");
	return ($holder, $first);
}

# Starts one session per write of @writes ([name, sql]); waits until all
# wait for their interval.
sub start_writes
{
	my ($s, @writes) = @_;
	my @sessions = map { start_psql($node, $dir, "$s$_->[0]", $_->[1]) } @writes;
	my $names = join(',', map { "'$s$_->[0]'" } @writes);
	ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = ${\ scalar @writes} FROM pg_stat_activity
WHERE application_name IN ($names) AND wait_event = 'Extension'}),
		"$s: the writes wait for their interval");
	return @sessions;
}

# Lets shard $s's held interval go (row $round into go): the holder, the
# first write and each of @writes finish without an error.
sub let_go
{
	my ($s, $round, $holder, $first, @writes) = @_;
	query("INSERT INTO go VALUES ($round)");
	ok(finish_psql($holder)->{ok}, "$s: the holder let go");
	ok(finish_psql($first)->{ok}, "$s: the first write committed");
	ok(finish_psql($_)->{ok}, "$s: write $_->{name} committed") for @writes;
	return;
}

# Waits until the server log from $offset says that $n writes to $s were
# encoded ahead ($left: that many were looked at and left to the merge).
sub wait_encoded_ahead
{
	my ($s, $offset, $n, $left) = @_;
	my $tail = $left ? ': left to the merge' : '';
	for (1 .. $PostgreSQL::Test::Utils::timeout_default * 10)
	{
		my @lines = (slurp_file($node->logfile, $offset) =~
			  /encoded ahead a write of \d+ updates to shard "$s"\Q$tail\E$/mg);
		return 1 if @lines >= $n;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# The shard's content as "key val diff" lines, in order.
sub content
{
	my ($s) = @_;
	return query(qq{
SELECT string_agg(convert_from(key, 'UTF8') || ' ' || convert_from(val, 'UTF8') || ' ' || diff, E'\\n'
				  ORDER BY key, val)
FROM persist_sink.snapshot('$s')});
}

# The same content built in SQL: writes of ($prefix, $n, $diff).
sub expected
{
	my (@writes) = @_;
	my $rows = join(' UNION ALL ', map {
		"SELECT convert_to('$_->[0]' || lpad(i::text, 6, '0'), 'UTF8') AS key,
				convert_to(rpad('v' || i, 40, 'x'), 'UTF8') AS val, CAST($_->[2] AS bigint) AS diff
		 FROM generate_series(1, $_->[1]) i"
	} @writes);
	return query(qq{
SELECT string_agg(convert_from(key, 'UTF8') || ' ' || convert_from(val, 'UTF8') || ' ' || d, E'\\n'
				  ORDER BY key, val)
FROM (SELECT key, val, sum(diff) AS d FROM ($rows) r GROUP BY key, val) s WHERE d <> 0});
}

# (a) disjoint writes: assembled
query("SELECT persist_sink.create_shard('a')");
my ($holder, $first) = hold_shard('a', 1);
my $offset = -s $node->logfile;
my @w = start_writes('a',
	map({ ["w$_", write_sql('a', "w$_.", 1000)] } 1 .. 4),
	['tiny', write_sql('a', 'tiny.', 5)]);
ok(wait_encoded_ahead('a', $offset, 4), 'a: the four large writes were encoded ahead');
let_go('a', 1, $holder, $first, @w);
like(slurp_file($node->logfile, $offset),
	qr/shared part of shard "a" assembled from 5 runs, 4 of them encoded ahead/,
	'a: the shared part was assembled from the 5 runs');
my $want = expected(['first.', 1, 1], map({ ["w$_.", 1000, 1] } 1 .. 4), ['tiny.', 5, 1]);
is(content('a'), $want, 'a: every update reads back');
is(query(q{SELECT parts FROM persist_sink.batches('a') ORDER BY lower DESC LIMIT 1}),
	'1', 'a: the interval wrote one part');
is(query("SELECT count(*) FROM persist_sink.verify('a')"), '0', 'a: verify is clean');
$node->restart;
is(content('a'), $want, 'a: the same after a restart');
is(query("SELECT count(*) FROM persist_sink.verify('a')"), '0', 'a: verify is clean after a restart');

# (b) overlapping writes: merged
query("SELECT persist_sink.create_shard('b')");
($holder, $first) = hold_shard('b', 2);
$offset = -s $node->logfile;
@w = start_writes('b',
	['w1', write_sql('b', 'k', 1000)],
	['w2', write_sql('b', 'k', 1000)],
	['w3', write_sql('b', 'k', 1000, -1)],
	['w4', write_sql('b', 'k0', 1000, 3)]);
ok(wait_encoded_ahead('b', $offset, 4), 'b: the four writes were encoded ahead');
let_go('b', 2, $holder, $first, @w);
unlike(slurp_file($node->logfile, $offset), qr/shard "b" assembled/,
	'b: overlapping runs are merged, not assembled');
is(content('b'),
	expected(['first.', 1, 1], ['k', 1000, 1], ['k', 1000, 1], ['k', 1000, -1], ['k0', 1000, 3]),
	'b: the shard holds the consolidated sum of the writes');
is(query("SELECT count(*) FROM persist_sink.verify('b')"), '0', 'b: verify is clean');

# (c) a write cancelled after it was encoded ahead
query("SELECT persist_sink.create_shard('c')");
($holder, $first) = hold_shard('c', 3);
$offset = -s $node->logfile;
@w = start_writes('c', map({ ["w$_", write_sql('c', "w$_.", 1000)] } 1 .. 4));
ok(wait_encoded_ahead('c', $offset, 4), 'c: the four writes were encoded ahead');
query("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cw2'");
my $cancelled = finish_psql($w[1]);
like($cancelled->{err}, qr/canceling statement due to user request/, 'c: write 2 was cancelled');
let_go('c', 3, $holder, $first, @w[0, 2, 3]);
like(slurp_file($node->logfile, $offset),
	qr/shared part of shard "c" assembled from 3 runs, 3 of them encoded ahead/,
	'c: the shared part was assembled from the 3 writes left');
is(content('c'), expected(['first.', 1, 1], map({ ["w$_.", 1000, 1] } 1, 3, 4)),
	'c: the cancelled write is not in the shard');
is(query("SELECT count(*) FROM persist_sink.verify('c')"), '0', 'c: verify is clean');

# (d) parts cut at blob_target_size; a write past it left to the merge
query("ALTER SYSTEM SET persist_sink.blob_target_size = '64kB'");
query("SELECT pg_reload_conf()");
query("SELECT persist_sink.create_shard('d')");
($holder, $first) = hold_shard('d', 4);
$offset = -s $node->logfile;
@w = start_writes('d', map({ ["w$_", write_sql('d', "w$_.", 1000)] } 1 .. 3));
ok(wait_encoded_ahead('d', $offset, 3), 'd: the three writes were encoded ahead');
let_go('d', 4, $holder, $first, @w);
like(slurp_file($node->logfile, $offset),
	qr/shared part of shard "d" assembled from 3 runs, 3 of them encoded ahead/,
	'd: the shared part was assembled from the 3 runs');
is(query(q{SELECT parts FROM persist_sink.batches('d') ORDER BY lower DESC LIMIT 1}),
	'3', 'd: cut into three parts, one per run, by blob_target_size');
is(content('d'), expected(['first.', 1, 1], map({ ["w$_.", 1000, 1] } 1 .. 3)),
	'd: every update reads back');
is(query("SELECT count(*) FROM persist_sink.verify('d')"), '0', 'd: verify is clean');

query("SELECT persist_sink.create_shard('e')");
($holder, $first) = hold_shard('e', 5);
$offset = -s $node->logfile;
@w = start_writes('e', ['w1', write_sql('e', 'w1.', 2000)], ['w2', write_sql('e', 'w2.', 1000)]);
ok(wait_encoded_ahead('e', $offset, 1, 1), 'e: the write past blob_target_size was left to the merge');
ok(wait_encoded_ahead('e', $offset, 1), 'e: the other write was encoded ahead');
let_go('e', 5, $holder, $first, @w);
unlike(slurp_file($node->logfile, $offset), qr/shard "e" assembled/,
	'e: an interval with a write past blob_target_size is merged');
cmp_ok(query(q{SELECT parts FROM persist_sink.batches('e') ORDER BY lower DESC LIMIT 1}),
	'>=', 3, 'e: the merged interval is cut into parts of at most the target');
is(content('e'), expected(['first.', 1, 1], ['w1.', 2000, 1], ['w2.', 1000, 1]),
	'e: every update reads back');
is(query("SELECT count(*) FROM persist_sink.verify('e')"), '0', 'e: verify is clean');

# (f) runs left for the seal each get blocks of their own (the part out
# of line whatever its size, so that its blocks can be read in SQL)
query("ALTER SYSTEM RESET persist_sink.blob_target_size");
query("ALTER SYSTEM SET persist_sink.inline_max_bytes = 0");
query("SELECT pg_reload_conf()");
query("SELECT persist_sink.create_shard('f')");
($holder, $first) = hold_shard('f', 6);
$offset = -s $node->logfile;
@w = start_writes('f',
	['w1', write_sql('f', 'w1.', 1000)],
	['m1', write_sql('f', 'm1.', 400)],
	['m2', write_sql('f', 'm2.', 400)]);
ok(wait_encoded_ahead('f', $offset, 1), 'f: the write of 1000 updates was encoded ahead');
let_go('f', 6, $holder, $first, @w);
like(slurp_file($node->logfile, $offset),
	qr/shared part of shard "f" assembled from 3 runs, 1 of them encoded ahead/,
	'f: the shared part was assembled from the 3 runs');
is(query(q{SELECT count(DISTINCT key) FROM persist_sink.blob WHERE starts_with(key, 'f/')}),
	'2', 'f: two blob parts: the first write\'s, and the shared part');
# the shared part's blocks (the larger part's) in order, as
# "version:updates", found by the regression tests' block walker
is( query(slurp_file("$FindBin::Bin/../../sql/include/block_offsets.psql") . q{
SELECT string_agg(get_byte(d, off + 4) || ':' || (get_byte(d, off + 8) + 256 * get_byte(d, off + 9)),
				  ' ' ORDER BY off)
FROM (SELECT string_agg(data, '\x'::bytea ORDER BY chunk) AS d
	  FROM persist_sink.blob WHERE starts_with(key, 'f/')
	  GROUP BY key ORDER BY sum(octet_length(data)) DESC LIMIT 1) p,
	 pg_temp.block_offsets(d) off}),
	'3:400 3:400 3:618 3:382',
	'f: the two writes encoded at the seal (about 21 kB of columns each) have a bounded block each, as the one encoded ahead has (two: 53 kB of columns)');
query("ALTER SYSTEM RESET persist_sink.inline_max_bytes");
query("SELECT pg_reload_conf()");
is(content('f'), expected(['first.', 1, 1], ['w1.', 1000, 1], ['m1.', 400, 1], ['m2.', 400, 1]),
	'f: every update reads back');
is(query("SELECT count(*) FROM persist_sink.verify('f')"), '0', 'f: verify is clean');

done_testing();
