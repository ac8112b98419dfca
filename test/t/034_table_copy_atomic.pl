
# Copyright (c) persist_sink contributors

# A COPY into a shard's foreign table is one append: all of its rows, or
# none, whatever interrupts it.
#
# Every COPY here writes 5,000,000 rows (key "<prefix>-<row>", val the row
# number, diff 1) into the foreign table of shard "big", each with a key
# prefix of its own, so that its rows can be counted afterwards.  The input
# is one file of row numbers and vals, written once by the server; each
# COPY reads it through sed, which puts the COPY's prefix in front.
#
# (a) An uncancelled COPY returns COPY 5000000 and writes its rows exactly
#     once, all at one time: listen() finds 5,000,000 rows, each with diff
#     1 (none written twice), at one time; the stats count one append, one
#     write with its own parts, 5,000,000 updates; the foreign table reads
#     a slice of them at that time.  Its duration, and when it had read its
#     last row (pg_stat_progress_copy), give the delays of what follows.
#
# (b) Attempts, in a seeded random order, each interrupted by one of:
#     pg_cancel_backend, a statement_timeout, pg_terminate_backend, SIGKILL
#     of the COPY's backend (a crash: the postmaster restarts every
#     process).  Each kind strikes at random points of the reading of the
#     rows and at random points after the last row was read, while the
#     append is under way (half of those in its last fifth, where the
#     worker seals the interval and commits it).  After each attempt:
#  - the attempt's rows in the shard are 0 or exactly 5,000,000 (then each
#    with diff 1, at one time), and nothing else was written;
#  - if none, the shard's upper has not moved (nothing was appended);
#  - what the client saw agrees: COPY 5000000 means all of them, an error
#    other than 40003 (57014 included) means none; 40003 and a lost
#    connection may be either;
#  - a strike while rows were still being read (well before the last one)
#    fails the COPY and writes nothing;
#  - after a SIGKILL the server went through crash recovery, comes back,
#    the shard holds exactly the rows of the complete attempts before,
#    and verify() finds no problem.
#
# (c) At the end: the shard holds exactly the rows of the complete COPYs
#     (each whole, at one time) and nothing else, verify() is clean, and
#     the table still takes an INSERT.  A note gives the figures.
#
# PS_COPY_SEED overrides the seed.

use strict;
use warnings;

use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(time);

my $seed = $ENV{PS_COPY_SEED} // 20260503;
my $nrows = 5_000_000;
srand($seed);
note "seed $seed";

my $t0 = time;
my $dir = PostgreSQL::Test::Utils::tempdir;
die "unexpected characters in the test directory $dir" unless $dir =~ m{^[\w/.-]+$};

my $node = sink_node(
	'table_copy', q{
restart_after_crash = on
max_connections = 30
log_min_messages = warning
});
my $q = sub { $node->safe_psql('postgres', shift) };

# The rows: "<row number, 7 digits>\t<row number>", written by the server.
$q->("COPY (SELECT lpad(g::text, 7, '0'), g FROM generate_series(1, $nrows) g) TO '$dir/rows.tsv'");
$q->(q{
SELECT persist_sink.create_shard('big');
CREATE FOREIGN TABLE big (key bytea, val bytea, diff bigint, "time" bigint)
	SERVER persist_sink OPTIONS (shard 'big');
});

# Strikes the COPY of session app: waits until that session runs a COPY
# (its progress is reported); then, if after_read, until it has read its
# last row (the progress counts every row) and delay seconds more, else
# until delay seconds after the COPY started; then, unless the COPY has ended, cancels (how 'cancel') or
# terminates ('terminate') its backend, or does neither ('none': the caller
# kills it, or only watches).  Returns "<pid> <rows read then, -1 if the
# COPY had ended> <seconds since the COPY started>".
$q->(qq{
CREATE FUNCTION strike(app text, after_read boolean, delay float8, how text)
RETURNS text LANGUAGE plpgsql
-- (a backend that has just ended gets no signal, and no WARNING)
SET client_min_messages = error AS \$\$
DECLARE
	p int;
	started timestamptz;
	n bigint;
	deadline timestamptz := clock_timestamp() + interval '60s';
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT a.pid, a.query_start INTO p, started
		FROM pg_stat_activity a JOIN pg_stat_progress_copy c USING (pid)
		WHERE a.application_name = app AND a.state = 'active';
		EXIT WHEN p IS NOT NULL;
		IF clock_timestamp() > deadline THEN
			RAISE EXCEPTION 'session % did not start its COPY', app;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	IF after_read THEN
		LOOP
			PERFORM pg_stat_clear_snapshot();
			SELECT tuples_processed INTO n FROM pg_stat_progress_copy WHERE pid = p;
			EXIT WHEN n IS NULL OR n >= $nrows;
			PERFORM pg_sleep(0.001);
		END LOOP;
		PERFORM pg_sleep(delay);
	ELSE
		PERFORM pg_sleep(greatest(0, delay - extract(epoch FROM clock_timestamp() - started)));
	END IF;
	PERFORM pg_stat_clear_snapshot();
	SELECT tuples_processed INTO n FROM pg_stat_progress_copy WHERE pid = p;
	IF n IS NOT NULL AND how = 'cancel' THEN
		PERFORM pg_cancel_backend(p);
	ELSIF n IS NOT NULL AND how = 'terminate' THEN
		PERFORM pg_terminate_backend(p);
	END IF;
	RETURN p || ' ' || coalesce(n, -1) || ' '
		|| round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
\$\$;
});

# Starts the COPY of prefix $prefix in session $prefix (its application
# name), with a statement_timeout if given (ms).
sub start_copy
{
	my ($prefix, $timeout_ms) = @_;
	my $sql = "\\set VERBOSITY verbose\n\\timing on\n";
	$sql .= "SET statement_timeout = $timeout_ms;\n" if $timeout_ms;
	$sql .= "COPY big (key, val) FROM PROGRAM 'sed s/^/$prefix-/ $dir/rows.tsv';\n";
	return start_psql($node, $dir, $prefix, $sql);
}

# What the client of a finished COPY session saw: 'ok' (COPY 5000000),
# 'error <SQLSTATE>' or 'lost' (terminated, or the connection lost); and
# the first line of its error DETAIL, if any.
sub outcome
{
	my ($r) = @_;
	my ($detail) = $r->{err} =~ /^DETAIL:\s+(.*)$/m;
	return ('ok', undef) if $r->{ok} && $r->{out} =~ /^COPY $nrows$/m;
	return ("error $1", $detail) if $r->{err} =~ /\bERROR:\s+([0-9A-Z]{5}):/;
	return ('lost', $detail)
	  if $r->{err} =~ /FATAL:|server closed the connection|connection to server was lost/;
	return ('unexplained: ' . substr($r->{out} . $r->{err}, 0, 300), $detail);
}

# The updates written to "big" since its upper was $upper, as "<rows>
# <rows of prefix> <their diff sum> <their largest diff> <their times: 0,
# 1, or 2 for more than one>".  listen() consolidates per (key, val, time):
# a row written twice at one time would have diff 2.
sub written_since
{
	my ($upper, $prefix) = @_;
	return $q->(qq{
SELECT count(*) || ' ' || count(*) FILTER (WHERE p) || ' ' || coalesce(sum(diff) FILTER (WHERE p), 0)
	   || ' ' || coalesce(max(diff) FILTER (WHERE p), 0) || ' '
	   || CASE WHEN count(*) FILTER (WHERE p) = 0 THEN 0
			   WHEN min("time") FILTER (WHERE p) = max("time") FILTER (WHERE p) THEN 1 ELSE 2 END
FROM (SELECT diff, "time", key >= '$prefix-'::bytea AND key < '$prefix.'::bytea AS p
	  FROM persist_sink.listen('big', $upper - 1)) l});
}

# The duration of a finished session's COPY, in seconds, if it returned.
sub copy_seconds
{
	my ($r) = @_;
	return undef unless $r->{out} =~ /^COPY \d+\nTime: ([\d.]+) ms/m;
	return $1 / 1000;
}

sub upper { return $q->("SELECT persist_sink.shard_upper('big')"); }

sub stats
{
	my $s = $q->("SELECT appends || ' ' || own_writes || ' ' || updates FROM persist_sink.stats WHERE shard = 'big'");
	return $s eq '' ? (0, 0, 0) : split / /, $s;
}

#
# (a) The uncancelled COPY.
#
my $upper0 = upper();
my @stats0 = stats();
my $watch = $node->background_psql('postgres');
my $c = start_copy('c00');
my (undef, undef, $t_read) = split / /, $watch->query_safe("SELECT strike('c00', true, 0, 'none')");
my $r = finish_psql($c);
$watch->quit;
my $t_total = copy_seconds($r);
is((outcome($r))[0], 'ok', '(a) the uncancelled COPY returns COPY 5000000') or diag($r->{err});
is( written_since($upper0, 'c00'), "$nrows $nrows $nrows 1 1",
	'(a) ... and wrote its 5,000,000 rows once, diff 1, all at one time, and nothing else');
my @stats1 = stats();
is( join(' ', map { $stats1[$_] - $stats0[$_] } 0 .. 2),
	"1 1 $nrows", '(a) ... in one append: one commit, one write with its own parts, 5,000,000 updates');
is( $q->(q{
SELECT count(*) || ' ' || count(DISTINCT "time") || ' ' || bool_and("time" = l.t)
FROM big, (SELECT min("time") AS t FROM persist_sink.listen('big', -1)) l
WHERE key >= 'c00-0000001' AND key <= 'c00-0001000'}),
	'1000 1 true', '(a) the foreign table reads a slice of them, at that time');
die "no duration of the uncancelled COPY" unless defined $t_total && $t_read > 0;
my $t_append = $t_total > $t_read ? $t_total - $t_read : 0.05;
note sprintf('uncancelled COPY: %.2fs, its last row read after %.2fs, then %.2fs until it returned',
	$t_total, $t_read, $t_append);

#
# (b) Interrupted attempts: each kind, while reading and after the last row.
#
my @plan;
for my $kind (
	[ 'cancel', 3, 4 ], [ 'timeout', 2, 3 ],
	[ 'terminate', 2, 3 ], [ 'kill', 1, 2 ])
{
	my ($how, $reading, $appending) = @$kind;
	# while reading: between 5% and 90% of the measured reading time
	push @plan, { how => $how, after_read => 0, delay => $t_read * (0.05 + 0.85 * rand()) }
	  for 1 .. $reading;
	# after the last row: within the measured time the append took, every
	# other one in its last fifth (or just past it), where the interval is
	# sealed and committed
	push @plan, {
		how => $how,
		after_read => 1,
		delay => $t_append * ($_ % 2 ? rand() : 0.8 + 0.25 * rand()) }
	  for 1 .. $appending;
}
@plan = shuffle(@plan);

my %complete = (c00 => 1);    # prefixes whose rows are all in the shard
my %tally;
my ($crashes, $bad_counts, $bad_outcomes) = (0, 0, 0);
my $i = 0;
for my $try (@plan)
{
	my $prefix = sprintf('c%02d', ++$i);
	my $label = sprintf('%s %s %s %.2fs', $prefix, $try->{how},
		$try->{after_read} ? 'after the last row +' : 'while reading, at', $try->{delay});
	my $upper_before = upper();
	my $crashes_before = $crashes;
	my ($struck, $read_then) = ('', undef);
	my $r;
	if ($try->{how} eq 'timeout')
	{
		# the timeout counts from the statement's start
		my $ms = int(1000 * ($try->{after_read} ? $t_read + $try->{delay} : $try->{delay})) || 1;
		$r = finish_psql(start_copy($prefix, $ms));
	}
	else
	{
		my $ctl = $node->background_psql('postgres');
		my $c = start_copy($prefix);
		my $how = $try->{how} eq 'kill' ? 'none' : $try->{how};
		my $res = $ctl->query_safe(
			sprintf("SELECT strike('%s', %s, %.3f, '%s')", $prefix, $try->{after_read} ? 'true' : 'false',
				$try->{delay}, $how));
		my $pid;
		($pid, $read_then, $struck) = split / /, $res;
		# (not once the COPY has ended: its backend may be gone)
		my $killed = $try->{how} eq 'kill' && $read_then != -1 && kill('KILL', $pid);
		$r = finish_psql($c);
		if ($killed)
		{
			eval { $ctl->quit; };
			$crashes++;
			wait_sink_workers($node);
		}
		else
		{
			$ctl->quit;
		}
	}
	my ($seen, $detail) = outcome($r);
	my $written = written_since($upper_before, $prefix);
	my ($all, $rows, $sum, $max_diff, $times) = split / /, $written;
	my $whole = $rows == $nrows;
	$complete{$prefix} = 1 if $whole;
	my $took = copy_seconds($r);
	my $what = sprintf('%s: struck at %s (rows read %s), client saw %s%s%s; %d rows written',
		$label, $struck eq '' ? '?' : "${struck}s",
		!defined $read_then ? '?' : $read_then == -1 ? 'all, COPY ended' : $read_then,
		$seen, defined $took ? sprintf(' after %.3fs', $took) : '',
		defined $detail ? " ($detail)" : '', $rows);
	note $what;
	$tally{"$try->{how}: " . ($whole ? 'all' : $rows == 0 ? 'none' : 'PART')}++;

	# all or nothing, and nothing else
	ok( ($rows == 0 && $all == 0)
		  || ($whole && $all == $nrows && $sum == $nrows && $max_diff == 1 && $times == 1),
		"$prefix: all 5,000,000 rows once at one time, or none, and nothing else ($try->{how})")
	  or do { $bad_counts++; diag("$what; written since: $written") };
	is(upper(), $upper_before, "$prefix: nothing written, nothing appended: the upper has not moved")
	  if $rows == 0;

	# the client's outcome agrees
	if ($seen eq 'ok')
	{
		ok($whole, "$prefix: COPY 5000000 returned, and the rows are there") or $bad_outcomes++;
	}
	elsif ($seen =~ /^error / && $seen ne 'error 40003')
	{
		is($rows, 0, "$prefix: $seen, and nothing is written") or $bad_outcomes++;
	}
	else
	{
		like($seen, qr/^(error 40003|lost)$/, "$prefix: the outcome ($seen) is one the rules explain")
		  or diag($r->{err});
	}
	# struck well before the last row was read (0.9 of them: the append
	# takes longer than reading the rest), the COPY cannot have appended
	if (defined $read_then && $read_then >= 0 && $read_then < 0.9 * $nrows)
	{
		is($rows, 0, "$prefix: struck while rows were still being read ($read_then of $nrows), nothing is written");
		is($seen, 'error 57014', "$prefix: ... and the cancel fails the COPY with 57014")
		  if $try->{how} eq 'cancel';
		is($seen, 'lost', "$prefix: ... and the terminated COPY loses its connection")
		  if $try->{how} eq 'terminate';
	}

	if ($try->{how} eq 'kill' && $crashes > $crashes_before)
	{
		my $signal9 = () = slurp_file($node->logfile) =~ /server process \(PID \d+\) was terminated by signal 9/g;
		is($signal9, $crashes, "$prefix: the SIGKILL took the server through crash recovery");
		my $expected = $nrows * scalar(keys %complete);
		is($q->("SELECT count(*) FROM persist_sink.snapshot('big')"), $expected,
			"$prefix: after the crash the shard is readable and holds the rows of every complete COPY ("
			  . join(' ', sort keys %complete) . ')');
		is($q->("SELECT count(*) FROM persist_sink.verify('big')"), '0',
			"$prefix: after the crash verify() finds no problem");
	}
}
is($bad_counts, 0, '(b) no interrupted COPY left part of its rows');
is($bad_outcomes, 0, '(b) no client was told otherwise than what the shard holds');
cmp_ok($crashes, '>=', 1, '(b) a SIGKILL of a COPY\'s backend crashed the server');

#
# (c) The whole shard at the end.
#
my %per_prefix = map { split /\|/ } split /\n/, $q->(q{
SELECT convert_from(substr(key, 1, 3), 'UTF8'),
	   count(*) || ' ' || sum(diff) || ' ' || max(diff) || ' ' || (min("time") = max("time"))
FROM persist_sink.listen('big', -1) GROUP BY 1 ORDER BY 1});
is_deeply(\%per_prefix, { map { $_ => "$nrows $nrows 1 true" } keys %complete },
	'(c) the shard holds the rows of exactly the complete COPYs, each whole at one time, and nothing else');
is($q->("SELECT count(*) FROM persist_sink.verify('big')"), '0', '(c) verify() finds no problem');
is( $node->psql('postgres', q{INSERT INTO big (key, val) VALUES ('z-after', 'crashes'), ('z-after2', 'crashes')}),
	0, '(c) the table still takes an INSERT');
is( $q->(q{SELECT count(*) || ' ' || count(DISTINCT "time") FROM big WHERE key >= 'z-' AND key < 'z.'}),
	'2 1', '(c) ... whose rows read back at one time');

note sprintf('%d attempts in %.0fs, seed %d, %d crashes; complete COPYs: %s; by kind: %s',
	scalar(@plan), time - $t0, $seed, $crashes, join(' ', sort keys %complete),
	join(', ', map { "$_ $tally{$_}" } sort keys %tally));

$node->stop;
done_testing();
