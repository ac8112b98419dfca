
# Copyright (c) persist_sink contributors

# One writer role misbehaving may only delay itself.  Role "good" makes 1000
# one-row appends to its own shard, first alone, then while role "bad":
#  - holds the state rows of 150 of its shards in one open transaction
#    (compare_and_append, never committed);
#  - makes two appends to each held shard that time out (300 withdrawn
#    writes: more than two interval slots for each of 150 shards);
#  - keeps five 680 kB appends waiting on held shards, with no timeout
#    (more than the arena's room for small writes);
#  - keeps a 20 MB append waiting on a held shard;
#  - creates, writes and drops 1,500 shards;
#  - tries to keep a shard across a restart with a prepared transaction.
# Every append of "good" succeeds, well within its statement timeout; the
# interval slots in use are those of the waiting writes only; "bad" holds at
# most half of the small writes' room (plus one write); its prepared
# transaction is refused; and once its holder commits, its waiting writes
# are written once and the arena is empty.  The p50 and p99 latency of
# "good" alone and beside "bad" are printed (not asserted: tests check
# behaviour; test/bench measures).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('tenants',
	"persist_sink.workers = 1\npersist_sink.shared_memory = '8MB'\nmax_connections = 40\n"
	  . "max_prepared_transactions = 2\n");
my $q = sub { $node->safe_psql('postgres', shift) };
$q->(q{
CREATE ROLE good LOGIN IN ROLE persist_sink_writer, persist_sink_reader;
CREATE ROLE bad LOGIN IN ROLE persist_sink_writer, persist_sink_reader;
SET ROLE good;
SELECT persist_sink.create_shard('good');
SET ROLE bad;
SELECT persist_sink.create_shard('bad_' || i) FROM generate_series(1, 150) i;
SELECT persist_sink.create_shard('bad_free');
SELECT persist_sink.append('bad_free', ARRAY['k'], ARRAY['v'], ARRAY[1::bigint]);
RESET ROLE;
});
my $budget = $q->('SELECT budget_bytes FROM persist_sink.sink_memory()');

# SQL of "good"'s run $tag: 1000 one-row appends, each timed; prints
# "<ok appends> <p50 ms> <p99 ms>".
sub good_run
{
	my ($tag) = @_;
	return qq{SET ROLE good;
SET statement_timeout = '20s';
CREATE TEMP TABLE lat (ms float8);
DO \$\$
DECLARE
	t0 timestamptz;
BEGIN
	FOR i IN 1..1000 LOOP
		t0 := clock_timestamp();
		PERFORM persist_sink.append('good', ARRAY['$tag-' || i], ARRAY['v'], ARRAY[1::bigint]);
		INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
	END LOOP;
END
\$\$;
SELECT count(*) || ' ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2)
	|| ' ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM lat;
};
}

my $alone = finish_psql(start_psql($node, $dir, 'good_alone', good_run('alone')));
ok($alone->{ok}, '"good" alone: its appends succeed') or diag($alone->{err});
my ($n_alone, $p50_alone, $p99_alone) = split / /, (split /\n/, $alone->{out})[-1];
is($n_alone, 1000, '"good" alone: 1000 appends');

# "bad" holds 150 shards' state rows
my $holder = $node->background_psql('postgres');
$holder->query_safe('SET ROLE bad');
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT count(persist_sink.compare_and_append('bad_' || i, ARRAY['h'], ARRAY['v'],
	ARRAY[persist_sink.shard_upper('bad_' || i)], ARRAY[1::bigint],
	persist_sink.shard_upper('bad_' || i), persist_sink.shard_upper('bad_' || i) + 1))
	FROM generate_series(1, 150) i});

# ... makes two appends to each that time out, from three sessions
my @timed;
for my $s (0 .. 2)
{
	my $sql = "SET ROLE bad;\nSET statement_timeout = '50ms';\n";
	for my $i (50 * $s + 1 .. 50 * $s + 50)
	{
		$sql .= wide_append_sql("bad_$i", "t$i-$_", 1) for 1 .. 2;
	}
	push @timed, start_psql($node, $dir, "timed$s", $sql, on_error_stop => 0);
}
my $n_timed = 0;
for my $t (@timed)
{
	my $r = finish_psql($t);
	$n_timed += () = $r->{err} =~ /canceling statement due to statement timeout/g;
}
is($n_timed, 300, '"bad": its 300 appends to held shards timed out');
$node->poll_query_until('postgres', 'SELECT intervals = 0 FROM persist_sink.sink_memory()')
  or diag('interval slots still in use: ' . $q->('SELECT intervals FROM persist_sink.sink_memory()'));
is($q->('SELECT intervals || \' \' || small_bytes FROM persist_sink.sink_memory()'),
	'0 0', '"bad": the timed-out writes keep no interval slot and no memory');

# ... keeps five 700 kB writes and a 20 MB one waiting, with no timeout
my @waiting;
push @waiting, start_psql($node, $dir, "wait$_", "SET ROLE bad;\n" . wide_append_sql("bad_$_", "w$_", 5500))
  for 1 .. 5;
push @waiting, start_psql($node, $dir, 'huge', "SET ROLE bad;\n" . wide_append_sql('bad_6', 'huge', 200000));
$node->poll_query_until('postgres', q{SELECT count(*) = 6 FROM pg_stat_activity
	WHERE application_name ~ '^(wait|huge)' AND wait_event_type = 'Extension'})
  or die 'timed out waiting for the waiting writes of "bad"';

# ... churns through 1,500 shards of its own, beside "good"'s second run
my $churn = start_psql($node, $dir, 'churn', q{SET ROLE bad;
SELECT count(persist_sink.create_shard('churn_' || i)) FROM generate_series(1, 1500) i;
SELECT count(persist_sink.append('churn_' || i, ARRAY['k'], ARRAY['v'], ARRAY[1::bigint])) FROM generate_series(1, 1500) i;
SELECT count(persist_sink.drop_shard('churn_' || i)) FROM generate_series(1, 1500) i;
});
my $beside = finish_psql(start_psql($node, $dir, 'good_beside', good_run('beside')));
ok($beside->{ok}, '"good" beside "bad": its appends succeed') or diag($beside->{err});
my ($n_beside, $p50_beside, $p99_beside) = split / /, (split /\n/, $beside->{out})[-1];
is($n_beside, 1000, '"good" beside "bad": 1000 appends');
my $r_churn = finish_psql($churn);
ok($r_churn->{ok}, '"bad": 1,500 shards created, written and dropped') or diag($r_churn->{err});

my ($intervals, $small) = split / /,
  $q->('SELECT intervals || \' \' || small_bytes FROM persist_sink.sink_memory()');
cmp_ok($intervals, '<=', 6, "the interval slots in use are the waiting writes' ($intervals)");
cmp_ok($small, '<=', $budget / 2 + 700_000,
	"\"bad\" holds at most half of the small writes' room and one write ($small of $budget bytes)");

# ... cannot keep a shard across a restart
my ($rc, $out, $err) = $node->psql('postgres', q{SET ROLE bad;
BEGIN;
SELECT persist_sink.downgrade_since('bad_free', 1);
PREPARE TRANSACTION 'keep';});
like($err, qr/cannot PREPARE a transaction that has written to a persist_sink shard/,
	'"bad": a prepared transaction after a storage write is refused');
is($q->('SELECT count(*) FROM pg_prepared_xacts'), 0, '"bad": nothing is prepared');

diag(sprintf('append latency of "good" (1000 one-row appends): alone p50 %.2f ms p99 %.2f ms; '
	  . 'beside "bad" p50 %.2f ms p99 %.2f ms', $p50_alone, $p99_alone, $p50_beside, $p99_beside));

# let go: "bad"'s waiting writes are written once
$holder->query_safe('COMMIT');
$holder->quit;
my $acked = 0;
for my $w (@waiting)
{
	my $r = finish_psql($w);
	$acked++ if $r->{ok} && $r->{out} =~ /^ack \d+$/m;
}
is($acked, 6, '"bad": its waiting writes commit once the holder does');
my $rows = 0;
$rows += $q->("SELECT count(*) FROM persist_sink.snapshot('bad_$_') WHERE key LIKE 'w$_-%'") for 1 .. 5;
is($rows, 5 * 5500, '"bad": the five waiting writes, once each');
is( $q->("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('bad_6') WHERE key LIKE 'huge-%'"),
	'200000 200000', '"bad": the huge write, once');
is( $q->(q{SELECT count(*) FROM persist_sink.shards WHERE name LIKE 'bad\_%'
	AND (SELECT count(*) FROM persist_sink.snapshot(name) WHERE encode(key, 'escape') ~ '^t[0-9]') > 0}),
	0, '"bad": nothing of the timed-out writes was written');
is($q->('SELECT small_bytes || \' \' || part_bytes || \' \' || intervals FROM persist_sink.sink_memory()'),
	'0 0 0', 'the arena and the interval slots are empty again');

$node->stop;
done_testing();
