
# Copyright (c) persist_sink contributors

# Readers make an exactly-once pipeline, through crashes.
#
# (a) A reader holds the since, deterministically.  A shard with updates at
#     times 0 to 9 and two readers: "lag" reads the times 0 to 3 (read_next
#     returns whole times) and advances to 3, "lead" starts at 8.
#     downgrade_since(9) stops at 3 with a NOTICE naming "lag"; after more
#     appends (times 10 to 14) and compact() (one batch left, the times
#     before 3 advanced to 3), read_next of "lag" returns exactly the updates
#     of the times 4 to 14, at their times, and nothing once it advanced.
#     The hold then follows the lowest reader ("lead", at 8); once "lead" is
#     dropped the since reaches "lag"'s position (14) without a NOTICE, and
#     after another compact() "lag" reads only what comes next.
#
# (b) The pipeline.  Four producers append batches of unique keys
#     ("p<producer>-<batch>-<row>", val md5 of the key) to one shard with
#     append(..., idempotency_key "p<producer>-<batch>"), retrying a batch
#     with the same key, over a new connection, after any error, until it
#     returns a time.  Three consumers, each with its own reader, loop over
#     one transaction each: read_next (up to 500 updates, waiting up to
#     200ms), insert what it returned into the consumer's table, record the
#     transaction (positions from and to, updates, transaction id) and
#     advance_reader to the highest time read; they retry after any error.
#     Meanwhile the test SIGKILLs consumer and producer backends (each a
#     crash of the server: the postmaster restarts every process), stops the
#     server once (stop -m immediate, then start), and moves the since as far
#     as the readers let it (downgrade_since to upper - 1) and compacts, at
#     seeded random moments.  Once the producers are done the consumers drain
#     until every reader is past the last time a producer got back.  Then:
#
#  - every batch was acknowledged, and the appends and the consumer
#    transactions failed only with the errors a crash explains;
#  - the since never passed a reader's position, and a last
#    downgrade_since takes it to the lowest reader's position;
#  - the shard holds every row the producers meant to write once (diff 1),
#    and nothing else; verify() is clean;
#  - for each consumer: its table holds every such row exactly once, diff 1,
#    at the time its batch's append returned; no key twice; its sums per
#    (key, val) equal the snapshot's; its transactions' positions follow one
#    another with no gap and no overlap, and each row lies after the
#    position its transaction read from and at or before the one it moved
#    to; read_next returns nothing more after a last downgrade_since and
#    compact(); the readers view shows it with lag_ms >= 0;
#  - a note gives the figures (kills, crashes, transactions, retries, errors).
#
# PS_READER_SEED overrides the seed.

use strict;
use warnings;

use IPC::Run;
use List::Util qw(shuffle);
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = $ENV{PS_READER_SEED} // 20260314;
my $nproducers = 4;
my @consumers = ('c1', 'c2', 'c3');
my $produce_secs = 20;    # how long the producers take, about, without crashes
srand($seed);
note "seed $seed";

my $dir = PostgreSQL::Test::Utils::tempdir;

# An append of over 4kB of encoded updates writes its own parts, a smaller
# one joins the shared batch: the producers' appends go both ways.
my $node = sink_node(
	'reader_pipeline', q{
persist_sink.shared_batch_max_bytes = '4kB'
max_connections = 40
restart_after_crash = on
});
my $q = sub { $node->safe_psql('postgres', shift) };

#
# (a) A reader holds the since.
#
$q->("SELECT persist_sink.create_shard('held')");
# times 0 .. 9, 5 updates each: (md5(b/i), '', b, 1)
append_batches($node, 'held', 0, 9, 5);
is( $q->("SELECT persist_sink.create_reader('held', 'lag') || ' ' || persist_sink.create_reader('held', 'lead', 8)"),
	'-1 8', 'a reader created without a position starts at since - 1');

# The updates of times $from .. $to as append_batches wrote them, less those
# of a query's result (given as SQL): the count of rows in one and not the
# other, or of a diff other than 1.
sub differs
{
	my ($got, $from, $to) = @_;
	return qq{
SELECT count(*) FROM ($got) g
FULL JOIN (SELECT md5(b || '/' || i) AS k, b::bigint AS t
		   FROM generate_series($from, $to) b, generate_series(1, 5) i) e
	ON convert_from(g.key, 'UTF8') = e.k AND g."time" = e.t AND g.val = '' AND g.diff = 1
WHERE g.key IS NULL OR e.k IS NULL};
}

# Reads the next updates of reader "lag" (up to $max) into held_got, and
# advances it to the highest time read, in one transaction.
sub read_lag
{
	my ($max) = @_;
	$q->(qq{
BEGIN;
DROP TABLE IF EXISTS held_got;
CREATE TABLE held_got AS SELECT * FROM persist_sink.read_next('held', 'lag', $max);
SELECT persist_sink.advance_reader('held', 'lag', max("time")) FROM held_got HAVING count(*) > 0;
COMMIT;
});
}

read_lag(20);
is($q->(differs('SELECT * FROM held_got', 0, 3)), '0',
	'read_next of 20 updates returns the whole times 0 to 3');

my ($ret, $out, $err) = $node->psql('postgres', "SELECT persist_sink.downgrade_since('held', 9)");
like($err, qr/NOTICE:  since of shard "held" held at 3 by reader "lag"/,
	'downgrade_since while a reader lags tells it stops at its position');
is($q->("SELECT persist_sink.shard_since('held')"), '3', '... and the since is there');

append_batches($node, 'held', 10, 14, 5);
$q->("SELECT persist_sink.compact('held')");
is($q->("SELECT batches FROM persist_sink.shards WHERE name = 'held'"),
	'1', 'compact() merged the shard into one batch');
read_lag(1000);
is($q->(differs('SELECT * FROM held_got', 4, 14)), '0',
	'after compaction the lagging reader reads exactly the updates after its position, at their times');
is($q->("SELECT count(*) FROM persist_sink.read_next('held', 'lag')"), '0',
	'... and nothing once it advanced');

($ret, $out, $err) = $node->psql('postgres', "SELECT persist_sink.downgrade_since('held', 14)");
like($err, qr/held at 8 by reader "lead"/, 'the since is then held by the lowest reader');
$q->("SELECT persist_sink.drop_reader('held', 'lead')");
($ret, $out, $err) = $node->psql('postgres', "SELECT persist_sink.downgrade_since('held', 14)");
is( 'notice: ' . ($err || 'none') . ', since ' . $q->("SELECT persist_sink.shard_since('held')"),
	'notice: none, since 14', 'once that reader is dropped, the since reaches the next one without a NOTICE');
append_batches($node, 'held', 15, 15, 5);
$q->("SELECT persist_sink.compact('held')");
read_lag(1000);
is($q->(differs('SELECT * FROM held_got', 15, 15)), '0',
	'a reader at the since reads, after another compaction, only the updates that came next');

#
# (b) The pipeline.
#
$q->(q{
SELECT persist_sink.create_shard('events');
CREATE TABLE plan (producer int, batch int, nrows int, PRIMARY KEY (producer, batch));
CREATE TABLE expected (key text PRIMARY KEY, val text);
CREATE TABLE acks (batch text PRIMARY KEY, t bigint);
CREATE TABLE commits (consumer text, xid bigint, from_pos bigint, to_pos bigint, n bigint, min_t bigint);
});

# Each producer's batches: 40 to 80 of 20 to 200 rows.
my %plan;
for my $p (1 .. $nproducers)
{
	$plan{$p} = [ map { 20 + int(rand(181)) } 1 .. 40 + int(rand(41)) ];
	$q->('INSERT INTO plan VALUES '
		  . join(', ', map { "($p, $_, $plan{$p}[$_ - 1])" } 1 .. @{ $plan{$p} }));
}
$q->(q{
INSERT INTO expected
SELECT 'p' || producer || '-' || batch || '-' || g, md5('p' || producer || '-' || batch || '-' || g)
FROM plan, generate_series(1, nrows) g;
});
my $nexpected = $q->('SELECT count(*) FROM expected');

# One consumer transaction of reader c: read_next, insert into out_<c>,
# record it in commits and advance the reader to the highest time read.
# Returns "from to n", or "empty" (nothing changed then).
$q->(q{
CREATE FUNCTION consume(c text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	pos bigint;
	lo bigint;
	hi bigint;
	n bigint;
BEGIN
	EXECUTE format($q$
		WITH r AS MATERIALIZED (SELECT * FROM persist_sink.read_next('events', $1, 500, '200ms')),
			 ins AS (INSERT INTO %I (key, val, t, diff)
					 SELECT convert_from(key, 'UTF8'), convert_from(val, 'UTF8'), "time", diff FROM r)
		SELECT min("time"), max("time"), count(*) FROM r$q$, 'out_' || c)
	  INTO lo, hi, n USING c;
	IF n = 0 THEN
		RETURN 'empty';
	END IF;
	SELECT "position" INTO pos FROM persist_sink.readers WHERE shard = 'events' AND reader = c;
	PERFORM persist_sink.advance_reader('events', c, hi);
	INSERT INTO commits VALUES (c, txid_current(), pos, hi, n, lo);
	RETURN pos || ' ' || hi || ' ' || n;
END
$$;
});
for my $c (@consumers)
{
	$q->(qq{
CREATE TABLE out_$c (key text, val text, t bigint, diff bigint, xid bigint DEFAULT txid_current());
SELECT persist_sink.create_reader('events', '$c');
});
}

my $psql = $node->installed_command('psql');
my $parent = $$;
my $child_deadline = time + 300;

# Runs the script in file $file in a new psql as application_name $name:
# (ok, out, err).
sub run_sql
{
	my ($name, $file) = @_;
	my ($o, $e) = ('', '');
	my $ok = eval {
		IPC::Run::run(
			[
				$psql, '-X', '-At', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres') . " application_name=$name connect_timeout=10",
				'-f', $file
			],
			'<', \undef, '>', \$o, '2>', \$e,
			IPC::Run::timeout(60));
	};
	$e .= "\nIPC::Run: $@" if $@;
	chomp $o;
	return ($ok ? 1 : 0, $o, $e);
}

# The kind of a failed psql run's error: "<level> <SQLSTATE>", or how the
# connection failed, or else its text.
sub error_kind
{
	my ($e) = @_;
	return 'timeout' if $e =~ /IPC::Run: .*timeout/;
	return "$1 $2" if $e =~ /\b(ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):/;
	return 'connection lost'
	  if $e =~ /server closed the connection unexpectedly|connection to server was lost/;
	return 'no connection' if $e =~ /connection to server .* failed/;
	return 'other: ' . ($e =~ s/\s+/ /gr);
}

# Errors a crash or a stop of the server explains.
sub expected_error
{
	return $_[0] =~ /^(connection lost|no connection|ERROR 40003|ERROR 57014|FATAL 57P0\d|FATAL 08...|ERROR 08...)$/;
}

# A child process running $code; it leaves with _exit (no END blocks: the
# node is the parent's).
sub spawn
{
	my ($n, $code) = @_;
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	return $pid if $pid;
	srand($seed * 7 + $n);
	my $rc = eval { $code->(); 1 } ? 0 : 1;
	POSIX::_exit($rc);
}

# In a child: leave if the test is gone or it has run too long.
sub child_guard
{
	POSIX::_exit(2) if getppid() != $parent || time > $child_deadline;
}

# Producer $p: its batches in order, each retried until acknowledged; logs
# "ack <id> <time> <attempts>" and "err <id> <kind>" lines.
sub producer
{
	my ($p) = @_;
	open my $log, '>>', "$dir/prod$p.log" or die;
	$log->autoflush(1);
	my @rows = @{ $plan{$p} };
	my $pace = $produce_secs / @rows;
	for my $b (1 .. @rows)
	{
		my ($id, $n) = ("p$p-$b", $rows[ $b - 1 ]);
		my $sql = "$dir/prod$p.sql";
		open my $fh, '>', $sql or die;
		print $fh "\\set VERBOSITY verbose\n"
		  . "SELECT persist_sink.append('events', "
		  . "ARRAY(SELECT '$id-' || g FROM generate_series(1, $n) g)::text[], "
		  . "ARRAY(SELECT md5('$id-' || g) FROM generate_series(1, $n) g)::text[], "
		  . "array_fill(1::bigint, ARRAY[$n]), '$id');\n";
		close $fh;
		for (my $attempt = 1;; $attempt++)
		{
			child_guard();
			my ($ok, $o, $e) = run_sql("prod$p", $sql);
			if ($ok && $o =~ /^(\d+)$/)
			{
				print $log "ack $id $1 $attempt\n";
				last;
			}
			print $log "err $id " . ($ok ? "other: output $o" =~ s/\s+/ /gr : error_kind($e)) . "\n";
			usleep(50_000 + int(rand(150_000)));
		}
		usleep(int($pace * (0.5 + rand()) * 1_000_000));
	}
	print $log "done\n";
}

# Consumer $c: consume() until the stop file is there; logs "commit <from>
# <to> <n>", "empty" and "err <kind>" lines.
sub consumer
{
	my ($c) = @_;
	open my $log, '>>', "$dir/$c.log" or die;
	$log->autoflush(1);
	my $sql = "$dir/$c.sql";
	open my $fh, '>', $sql or die;
	print $fh "\\set VERBOSITY verbose\nSELECT consume('$c');\n";
	close $fh;
	until (-e "$dir/stop")
	{
		child_guard();
		my ($ok, $o, $e) = run_sql($c, $sql);
		if ($ok && $o =~ /^(empty|-?\d+ \d+ \d+)$/)
		{
			print $log ($o eq 'empty' ? "empty\n" : "commit $o\n");
			next;
		}
		print $log 'err ' . ($ok ? "other: output $o" =~ s/\s+/ /gr : error_kind($e)) . "\n";
		usleep(50_000 + int(rand(150_000)));
	}
	print $log "done\n";
}

# The lines of a child's log.
sub log_lines
{
	my ($name) = @_;
	return -e "$dir/$name.log" ? split /\n/, slurp_file("$dir/$name.log") : ();
}

# Runs a query; its output, or undef if it failed (the server may be down).
sub try_query
{
	my ($sql) = @_;
	my ($r, $o) = $node->psql('postgres', $sql);
	return $r == 0 ? $o : undef;
}

# Waits until the server answers again.
sub wait_up
{
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back';
}

# Waits until the server went through the crash a process killed with
# SIGKILL causes and answers again: the process's entry in pg_stat_activity
# stays until the crash resets shared memory.
sub wait_restarted
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "the server did not come back after $pid was killed";
}

# The pid of an active client backend of a producer or a consumer, if one
# shows up within 3s (producers connect for each append only, so the
# server looks, every 2ms).
$q->(q{
CREATE FUNCTION active_backend(app text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	p int;
	deadline timestamptz := clock_timestamp() + interval '3s';
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO p FROM pg_stat_activity
		WHERE application_name ~ app AND backend_type = 'client backend' AND state = 'active'
		ORDER BY random() LIMIT 1;
		IF p IS NOT NULL OR clock_timestamp() > deadline THEN
			RETURN p;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
END
$$;
});

sub victim
{
	my ($kind) = @_;
	my $re = $kind eq 'producer' ? '^prod[0-9]+$' : '^c[0-9]+$';
	my $o = try_query("SELECT active_backend('$re')");
	return defined $o && $o =~ /^\d+$/ ? $o : undef;
}

my %kills = (consumer => 0, producer => 0, server => 0, missed => 0, gone => 0);
my %hold = (downgrades => 0, compactions => 0, violations => 0, since => 0);
my @violations;

# Moves the since as far as the readers let it, and sometimes compacts;
# checks that the since is at or before every reader's position.
sub move_since
{
	my ($compact) = @_;
	my $o = try_query(q{
SELECT persist_sink.downgrade_since('events',
	greatest(persist_sink.shard_upper('events') - 1, persist_sink.shard_since('events')));
SELECT persist_sink.shard_since('events') || ' ' || min("position")
FROM persist_sink.readers WHERE shard = 'events';
});
	return unless defined $o;
	$hold{downgrades}++;
	my ($since, $min) = split / /, (split /\n/, $o)[-1];
	if ($since > ($min < 0 ? 0 : $min))
	{
		$hold{violations}++;
		push @violations, "since $since, lowest reader at $min";
	}
	$hold{since} = $since;
	$hold{compactions}++ if $compact && defined try_query("SELECT persist_sink.compact('events')");
	return ($since, $min);
}

my $t0 = time;
my %producers = map { my $p = $_; (spawn($p, sub { producer($p) }) => $p) } 1 .. $nproducers;
my %consumer_pids = map { my $c = $_; (spawn(10 + substr($c, 1), sub { consumer($c) }) => $c) } @consumers;

# The crashes: a kill every 1 to 3 seconds, of a consumer's or a
# producer's backend by turns (in a seeded random order), and a stop of the server at a
# random moment, while the producers run; the since moved now and then.
my @kind_queue;
my $stop_at = $t0 + 3 + rand(12);
my $next_kill = $t0 + 1 + rand(2);
my $next_hold = $t0 + 0.5;
my %failed_children;
while (%producers)
{
	for my $pid (keys %producers)
	{
		next unless waitpid($pid, WNOHANG) == $pid;
		$failed_children{"producer $producers{$pid}"} = $? if $?;
		delete $producers{$pid};
	}
	last unless %producers;
	die 'the producers did not finish within 150s' if time - $t0 > 150;
	if (!$kills{server} && time >= $stop_at)
	{
		$node->stop('immediate');
		$node->start;
		$kills{server}++;
		note sprintf('%.1fs: stopped and started the server', time - $t0);
		next;
	}
	if (time >= $next_kill)
	{
		@kind_queue = shuffle('consumer', 'producer') unless @kind_queue;
		my $kind = shift @kind_queue;
		# a backend found may have ended before the kill: look again
		my ($pid, $killed);
		for (1 .. 5)
		{
			$pid = victim($kind);
			last unless defined $pid;
			$killed = kill('KILL', $pid);
			last if $killed;
			$kills{gone}++;
		}
		if ($killed)
		{
			$kills{$kind}++;
			note sprintf('%.1fs: killed %s backend %d', time - $t0, $kind, $pid);
			wait_restarted($pid);
		}
		else
		{
			$kills{missed}++;
			note sprintf('%.1fs: no %s backend to kill', time - $t0, $kind);
		}
		$next_kill = time + 1 + rand(2);
	}
	if (time >= $next_hold)
	{
		move_since(rand() < 0.3);
		$next_hold = time + 0.5 + rand(1);
	}
	usleep(50_000);
}
my $produced_secs = time - $t0;
my $chaos_since = $hold{since};
# the stop of the server, if the producers were done before its moment
if (!$kills{server})
{
	$node->stop('immediate');
	$node->start;
	$kills{server}++;
}
wait_up();

# The acknowledgments and the producers' errors.
my (%acked, %perrors, @unexpected);
my ($attempts, $tmax) = (0, -1);
for my $p (1 .. $nproducers)
{
	for (log_lines("prod$p"))
	{
		if (/^ack (\S+) (\d+) (\d+)$/)
		{
			$acked{$1} = $2;
			$attempts += $3;
			$tmax = $2 if $2 > $tmax;
		}
		elsif (/^err (\S+) (.*)$/)
		{
			$perrors{$2}++;
			push @unexpected, "producer $p, $1: $2" unless expected_error($2);
		}
	}
}
my $nbatches = 0;
$nbatches += @{ $plan{$_} } for 1 .. $nproducers;
is(scalar keys %acked, $nbatches, 'every batch of every producer was acknowledged');
$q->('INSERT INTO acks VALUES ' . join(', ', map { "('$_', $acked{$_})" } sort keys %acked))
  if %acked;

# Drain: until every reader is past the last acknowledged time.
my $drained = 0;
my $drain_deadline = time + 60;
while (time < $drain_deadline)
{
	my $o = try_query(
		"SELECT count(*) FROM persist_sink.readers WHERE shard = 'events' AND \"position\" >= $tmax");
	if (defined $o && $o eq scalar @consumers)
	{
		$drained = 1;
		last;
	}
	usleep(100_000);
}
ok($drained, 'the consumers drained the shard: every reader is past the last acknowledged time');
open my $stop, '>', "$dir/stop" or die;
close $stop;
for my $pid (keys %consumer_pids)
{
	waitpid($pid, 0);
	$failed_children{"consumer $consumer_pids{$pid}"} = $? if $?;
}
my $total_secs = time - $t0;
is(join(', ', map { "$_: $failed_children{$_}" } sort keys %failed_children),
	'', 'every client ran to its end');

my (%cerrors, %clog);
for my $c (@consumers)
{
	$clog{$c} = { commit => 0, empty => 0, err => 0 };
	for (log_lines($c))
	{
		if (/^(commit|empty)/)
		{
			$clog{$c}{$1}++;
		}
		elsif (/^err (.*)$/)
		{
			$clog{$c}{err}++;
			$cerrors{$1}++;
			push @unexpected, "consumer $c: $1" unless expected_error($1);
		}
	}
}
is(scalar @unexpected, 0, 'appends and consumer transactions failed only with the errors a crash explains')
  or diag join("\n", @unexpected[ 0 .. ($#unexpected < 9 ? $#unexpected : 9) ]);
is($hold{violations}, 0, "the since never passed a reader's position")
  or diag join("\n", @violations);
cmp_ok($kills{consumer}, '>=', 2, 'consumer backends were killed');
cmp_ok($kills{producer}, '>=', 1, 'producer backends were killed');

# The shard: every row meant, once; nothing else.
$q->(q{
CREATE TABLE snap AS
SELECT convert_from(key, 'UTF8') AS key, convert_from(val, 'UTF8') AS val, sum(diff) AS diff
FROM persist_sink.snapshot('events') GROUP BY 1, 2;
});
is( $q->(q{SELECT count(*) FROM snap s FULL JOIN expected e USING (key, val)
		   WHERE s.key IS NULL OR e.key IS NULL OR s.diff <> 1}),
	'0', "the shard holds every producer's rows once and nothing else");
is($q->("SELECT count(*) FROM persist_sink.verify('events')"), '0', 'verify() is clean');

# Each consumer's table.
for my $c (@consumers)
{
	my $t = "out_$c";
	my ($missing, $extra) = split /\|/, $q->(qq{
SELECT count(*) FILTER (WHERE o.key IS NULL), count(*) FILTER (WHERE e.key IS NULL OR o.diff <> 1)
FROM $t o FULL JOIN expected e USING (key, val)});
	is("$missing missing, $extra extra", '0 missing, 0 extra',
		"$c: every row produced is in its table, with diff 1, and nothing else");
	is($q->("SELECT count(*) FROM (SELECT key FROM $t GROUP BY key HAVING count(*) > 1) d"),
		'0', "$c: no key twice");
	is( $q->(qq{SELECT count(*) FROM (SELECT key, val, sum(diff) AS diff FROM $t GROUP BY 1, 2) o
			   FULL JOIN snap s USING (key, val) WHERE o.diff IS DISTINCT FROM s.diff}),
		'0', "$c: its sums equal the snapshot's");
	is( $q->(qq{SELECT count(*) FROM $t o JOIN acks a ON a.batch = regexp_replace(o.key, '-[0-9]+\$', '')
			   WHERE o.t <> a.t}),
		'0', "$c: every row is at the time its append returned");
	is( $q->(qq{
SELECT (SELECT count(*) FROM (
			SELECT from_pos, to_pos, min_t, lag(to_pos) OVER (ORDER BY to_pos) AS prev
			FROM commits WHERE consumer = '$c') x
		WHERE from_pos IS DISTINCT FROM coalesce(prev, -1) OR min_t <= from_pos OR to_pos <= from_pos)
	 + (SELECT count(*) FROM $t o
		WHERE NOT EXISTS (SELECT FROM commits m
						  WHERE m.consumer = '$c' AND m.xid = o.xid AND o.t > m.from_pos AND o.t <= m.to_pos))
	 + (SELECT count(*) FROM commits m
		WHERE m.consumer = '$c' AND m.n <> (SELECT count(*) FROM $t o WHERE o.xid = m.xid))}),
		'0', "$c: its transactions follow one another, each with the rows after its position up to the next");
}

# A last move of the since and a compaction: the since reaches the lowest
# reader, and nothing comes back.
my ($since, $lowest) = move_since(1);
is($since // 'none', $lowest // 'none', "the since followed the readers to the lowest one's position");
is( $q->('SELECT '
		  . join(' + ', map { "(SELECT count(*) FROM persist_sink.read_next('events', '$_'))" } @consumers)),
	'0', 'after the since moved to the readers and a compaction, read_next returns nothing more');
is( $q->(q{SELECT count(*) FROM persist_sink.readers WHERE shard = 'events' AND lag_ms >= 0}),
	scalar @consumers, 'the readers view shows every reader with lag_ms >= 0');

# The figures.
my $crashes = () = slurp_file($node->logfile) =~ /was terminated by signal 9/g;
my $committed = $q->('SELECT count(*) FROM commits');
my $writes = $q->("SELECT shared_writes || ' shared, ' || own_writes || ' own' FROM persist_sink.stats WHERE shard = 'events'");
my $seen = 0;
$seen += $clog{$_}{commit} for @consumers;
note sprintf(
	"seed %d; %d producers wrote %d batches (%d rows) in %.0fs, %d append calls (%d retries); "
	  . "kills: %s; %d crashes in the log; since moved %d times (to %d while the producers ran), %d compactions; "
	  . "%d consumer transactions committed (%d acknowledged to their client), per consumer: %s; "
	  . "producer errors: %s; consumer errors: %s; %.0fs in all with the drain; "
	  . "writes since the last restart: %s",
	$seed, $nproducers, $nbatches, $nexpected, $produced_secs, $attempts, $attempts - $nbatches,
	join(', ', map { "$_ $kills{$_}" } sort keys %kills), $crashes,
	$hold{downgrades}, $chaos_since, $hold{compactions},
	$committed, $seen,
	join(', ', map { "$_ $clog{$_}{commit} commits/$clog{$_}{empty} empty/$clog{$_}{err} errors" } @consumers),
	join(', ', map { "$_ x$perrors{$_}" } sort keys %perrors) || 'none',
	join(', ', map { "$_ x$cerrors{$_}" } sort keys %cerrors) || 'none',
	$total_secs, $writes || 'none');
cmp_ok($crashes, '>=', 3, 'the kills took the server through crash recovery');

$node->stop;
done_testing();
