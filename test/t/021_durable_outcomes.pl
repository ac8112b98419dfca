
# Copyright (c) persist_sink contributors

# A sink worker commits an interval without waiting for the WAL flush; the
# interval's writers flush before append returns, and every read of a
# shard's state waits for the flush of the commit it saw.  The WAL writer
# is slowed (wal_writer_delay = 10s) so that it flushes nothing of its own
# accord, and a crash is a process killed with SIGKILL: the server
# restarts without writing its WAL buffers, so whatever was committed and
# not flushed is gone.
#  (a) Right after append returns, the server crashes: the append's rows
#      are there after the restart, at the time append returned (5 times).
#  (b) A writer's backend is stopped (SIGSTOP) while its interval waits
#      for the shard's state row, held by another session.  Once that
#      session lets go, the worker commits the interval; the commit is
#      visible (a plain query of the consensus row sees its seqno) and not
#      yet flushed (the flushed WAL position is behind the end of the
#      WAL).  A snapshot then reads the rows, and the server crashes
#      (the stopped writer is killed): the rows the snapshot returned are
#      there after the restart.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node(
	'durable', q{
wal_writer_delay = 10s
restart_after_crash = on
});

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Crashes the server by killing a process with SIGKILL (the checkpointer,
# unless a pid is given) and waits until it serves queries again.
sub crash
{
	my ($pid) = @_;
	my $checkpointer =
	  query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	kill 'KILL', $pid // $checkpointer;
	# connections fail until the restart; then another checkpointer runs
	ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'checkpointer' AND pid <> $checkpointer}),
		'the server restarted after the crash');
}

# The rows of key k in shard s, as "val time diff" lines; "empty shard" if
# nothing was ever appended to s.
sub rows_of
{
	my ($s, $k) = @_;
	return 'empty shard'
	  if query("SELECT upper FROM persist_sink.shards WHERE name = '$s'") eq '0';
	return query(qq{
SELECT string_agg(convert_from(val, 'UTF8') || ' ' || "time" || ' ' || diff, ',')
FROM persist_sink.snapshot('$s') WHERE key = convert_to('$k', 'UTF8')});
}

query("SELECT persist_sink.create_shard('d')");

# (a) a crash right after append returned
for my $i (1 .. 5)
{
	my $t = query(
		"SELECT persist_sink.append('d', ARRAY['a$i'], ARRAY['v$i'], ARRAY[1::bigint])");
	crash();
	is(rows_of('d', "a$i"), "v$i $t 1", "append $i returned at $t is there after a crash");
}

# (b) a read of an interval its writer has not flushed
query("SELECT persist_sink.create_shard('r')");
my $seqno = query("SELECT seqno FROM persist_sink.consensus WHERE shard = 'r'");
query("CREATE TABLE go (at timestamptz)");
my $holder = start_psql(
	$node, $dir, 'holder', q{
BEGIN;
SELECT 'held' FROM persist_sink.consensus WHERE shard = 'r' FOR UPDATE;
DO $$ BEGIN WHILE NOT EXISTS (SELECT FROM go) LOOP PERFORM pg_sleep(0.05); END LOOP; END $$;
ROLLBACK;
});
ok($node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.application_name = 'holder' AND l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock'}),
	'a session holds the state row of shard r');
my $writer = start_psql($node, $dir, 'writer', q{
SELECT persist_sink.append('r', ARRAY['b'], ARRAY['seen'], ARRAY[1::bigint]);
});
ok($node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE application_name = 'writer' AND wait_event = 'Extension'}),
	'the writer waits for its interval');
my $writer_pid = query("SELECT pid FROM pg_stat_activity WHERE application_name = 'writer'");
kill 'STOP', $writer_pid;
query("INSERT INTO go VALUES (now())");
ok(finish_psql($holder)->{ok}, 'the holder let go of the state row');
ok($node->poll_query_until('postgres',
		"SELECT seqno > $seqno FROM persist_sink.consensus WHERE shard = 'r'"),
	'the worker committed the interval');
is(query("SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()"),
	't', 'the commit is not flushed yet');
# snapshot() alone: the shards view would wait for the flush by itself
my $seen = query(q{
SELECT string_agg(convert_from(val, 'UTF8') || ' ' || "time" || ' ' || diff, ',')
FROM persist_sink.snapshot('r') WHERE key = convert_to('b', 'UTF8')});
like($seen, qr/^seen \d+ 1$/, 'a snapshot reads the interval');
crash($writer_pid);
finish_psql($writer);
is(rows_of('r', 'b'), $seen, 'what the snapshot read is there after a crash');
is(query("SELECT count(*) FROM persist_sink.verify('r')"), '0', 'verify is clean');

done_testing();
