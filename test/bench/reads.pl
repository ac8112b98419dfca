#!/usr/bin/perl
# The reads workload (test/bench/run --only reads): the same rows read from
# a compacted shard's foreign table, from a shard of 48 batches' foreign
# table and from a heap table with a btree on key (prepare_reads.sql builds
# them).
#
#   reads.pl measure ROWS REPEATS OUTDIR
#       Runs every query on the three tables (DBD::Pg, the PG* environment,
#       autocommit; one session per table for the timed runs) and writes
#       OUTDIR/reads.tsv (query, system, runs, median_ms, min_ms, max_ms,
#       every run's ms, note), OUTDIR/reads_mem.tsv (query, system,
#       vmhwm_before_kb, vmhwm_after_kb) and, if anything failed,
#       OUTDIR/reads_failures.txt (then the exit status is 1).  Progress on
#       stderr.
#
#   reads.pl report OUTDIR REPEATS
#       Prints the markdown table of OUTDIR's measurements (the times, then
#       the peak RSS rows, with the ratios compacted / heap and 48 batches /
#       compacted) and writes OUTDIR/reads.dat, the ratios for reads.gp.
#
# What is measured (every answer checked against what the rows must give):
#   - SELECT * FROM t LIMIT 10, SELECT count(*), SELECT sum(diff), the
#     ~1000 keys WHERE key >= a AND key < b (a and b: the keys at ranks
#     ROWS / 2 and ROWS / 2 + 1000), COPY (SELECT * FROM t) TO '/dev/null',
#     and the consolidated count (count(*) of persist_sink.snapshot(shard);
#     heap: GROUP BY key, val HAVING sum(diff) <> 0): REPEATS timed runs,
#     the three tables in turn each time, timed in the client from the
#     statement sent to its last row received.  LIMIT 10, the range and
#     the COPY run once untimed first (LIMIT 10 on a shard reads all of it
#     today, so the full scans after it find the caches warm).  The first
#     timed run of count, sum and snapshot, and the untimed COPY, are made
#     in a new session whose backend's VmHWM (peak RSS, /proc/PID/status)
#     is read before and after; the untimed COPY runs in a PL/pgSQL
#     function that returns its ROW_COUNT (DBD::Pg does not report a
#     COPY's rows), so that its rows are checked too.
#   - point lookups WHERE key = k of 200 existing keys (rows spread over
#     the row numbers): one untimed pass, then each key's EXPLAIN (ANALYZE,
#     FORMAT JSON) Execution Time (server side), then each key's SELECT
#     timed in the client; medians of the 200.
#   - the reader drain (shards only): from a new session, the reader
#     "drain" at -1 (nothing seen yet; recreated before every run but the
#     first), steps of one statement each (one transaction), each row
#     counted as the heap's COPY writes each to /dev/null:
#         SELECT count(*), max("time"), persist_sink.advance_reader(shard, 'drain', max("time"))
#         FROM persist_sink.read_next(shard, 'drain', 100000) HAVING count(*) > 0
#     until the reader is at the shard's upper - 1; the updates counted
#     must be ROWS.  read_next is a materialized set-returning function:
#     every row it returns is produced, whether or not the client gets it.
#     Then the same drain in the shape of README's consumer recipe, whose
#     CTE (read twice there) PostgreSQL materializes a second time:
#         WITH r AS MATERIALIZED (SELECT * FROM persist_sink.read_next(shard, 'drain', 100000))
#         SELECT count(*), max("time"), persist_sink.advance_reader(shard, 'drain', max("time"))
#         FROM r HAVING count(*) > 0
#     REPEATS runs, but no more once one took over DRAIN_CAP seconds.  The
#     heap's figure is its COPY's.
use strict;
use warnings;
use DBI;
use Digest::MD5 qw(md5_hex);
use JSON::PP;
use POSIX qw(strftime);
use Time::HiRes qw(time);

my $DRAIN_CAP = 120;		# seconds: a drain run longer than this is not repeated
my $LOOKUPS = 200;			# keys looked up
my $RANGE_KEYS = 1000;		# keys of the range query
my $STEP_UPDATES = 100000;	# read_next's max_updates in the drain

my @SYSTEMS = (
	{ key => 'compacted', table => 'reads_compacted', shard => 'reads_compacted' },
	{ key => 'batches', table => 'reads_batches', shard => 'reads_batches' },
	{ key => 'heap', table => 'reads_heap' },
);

my $mode = shift // '';
if ($mode eq 'measure') { measure(@ARGV) }
elsif ($mode eq 'report') { report(@ARGV) }
else { die "usage: reads.pl measure ROWS REPEATS OUTDIR | report OUTDIR REPEATS\n" }

# Logs a progress line on stderr.
sub say_progress
{
	print STDERR strftime('[%H:%M:%S] ', localtime), 'reads: ', @_, "\n";
}

# A new session to the PG* environment's server.
sub connect_db
{
	my $dsn = 'dbi:Pg:';
	$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
	$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
	$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');
	my $dbh = DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$dbh->do("SET application_name = 'reads'");
	return $dbh;
}

# The peak RSS (VmHWM, kB) of the backend PID so far.
sub vmhwm
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	while (<$fh>)
	{
		return $1 if /^VmHWM:\s+(\d+)\s+kB/;
	}
	return undef;
}

sub median
{
	my @s = sort { $a <=> $b } @_;
	return undef unless @s;
	return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

# The SQL of QUERY on SYSTEM.
sub query_sql
{
	my ($q, $s, $range) = @_;
	my $t = $s->{table};
	return "SELECT * FROM $t LIMIT 10" if $q eq 'limit10';
	return "SELECT count(*) FROM $t" if $q eq 'count';
	# a shard's table without diff: each row as many times as its diff
	return "SELECT count(*) FROM " . ($s->{shard} ? "${t}_rows" : $t) if $q eq 'count_rows';
	return "SELECT sum(diff) FROM $t" if $q eq 'sum';
	return "SELECT * FROM $t WHERE key >= '\\x$range->[0]'::bytea AND key < '\\x$range->[1]'::bytea"
		if $q eq 'range';
	return "COPY (SELECT * FROM $t) TO '/dev/null'" if $q eq 'copy';
	if ($q eq 'snapshot')
	{
		return "SELECT count(*) FROM persist_sink.snapshot('$s->{shard}')" if $s->{shard};
		return "SELECT count(*) FROM (SELECT key, val, sum(diff) FROM $t GROUP BY key, val HAVING sum(diff) <> 0) s";
	}
	die "unknown query $q";
}

# Runs QUERY's SQL on DBH and returns what the check compares: the count or
# sum for one-value queries, the rows for the others.  A COPY returns
# undef: DBD::Pg does not report its rows (the untimed run counts them,
# see warm_up).
sub run_query
{
	my ($dbh, $q, $sql) = @_;
	if ($q eq 'copy')
	{
		$dbh->do($sql);
		return undef;
	}
	my $rows = $dbh->selectall_arrayref($sql);
	return scalar(@$rows) if $q eq 'limit10' || $q eq 'range';
	return $rows->[0][0];
}

# What QUERY must return.
sub expected
{
	my ($q, $rows) = @_;
	return 10 if $q eq 'limit10';
	return $RANGE_KEYS if $q eq 'range';
	return $rows;
}

my (%sessions, @failures, $tsv, $memtsv);

# The timed session of SYSTEM (a new one after a failure).
sub session
{
	my ($s) = @_;
	$sessions{ $s->{key} } //= connect_db();
	return $sessions{ $s->{key} };
}

# Records a failure of WHAT on SYSTEM and drops its session (the server may
# have restarted its backends: waits until it takes connections again).
sub failed
{
	my ($what, $s, $err) = @_;
	chomp $err;
	$err =~ s/\s+/ /g;
	push @failures, "$what on $s->{table}: $err";
	say_progress("FAILED: $what on $s->{table}: $err");
	my $old = delete $sessions{ $s->{key} };
	eval { $old->disconnect if $old };
	for (1 .. 120)
	{
		my $ok = eval { my $d = connect_db(); $d->disconnect; 1 };
		return if $ok;
		sleep 1;
	}
	die "the server does not take connections after: $err\n";
}

# Dies unless GOT is what QUERY must return (a COPY's undef passes).
sub check
{
	my ($q, $got, $rows) = @_;
	die "returned $got, not " . expected($q, $rows) . "\n" if defined $got && $got != expected($q, $rows);
}

# A new session for one run of QUERY whose backend's peak RSS is read:
# returns the session and its backend's pid and VmHWM so far.  For a COPY,
# the session gets a PL/pgSQL function that runs it and returns its
# ROW_COUNT, so that its rows are counted.
sub mem_session
{
	my ($q) = @_;
	my $dbh = connect_db();
	my ($pid) = $dbh->selectrow_array('SELECT pg_backend_pid()');
	$dbh->do(q{CREATE FUNCTION pg_temp.copy_rows(q text) RETURNS bigint LANGUAGE plpgsql AS
		$$DECLARE n bigint; BEGIN EXECUTE q; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END$$})
		if $q eq 'copy';
	return ($dbh, $pid, vmhwm($pid));
}

# Ends a mem_session: the VmHWM after the query goes to reads_mem.tsv.
sub mem_done
{
	my ($q, $s, $dbh, $pid, $before) = @_;
	my $after = vmhwm($pid);
	$dbh->disconnect;
	printf $memtsv "%s\t%s\t%s\t%s\n", $q, $s->{key}, $before // '-', $after // '-';
}

# The untimed run of QUERY on SYSTEM, in its session; the COPY's in a
# mem_session, through the function that counts its rows.
sub warm_up
{
	my ($q, $s, $sql, $rows) = @_;
	my $ok = eval {
		if ($q eq 'copy')
		{
			my ($dbh, $pid, $before) = mem_session($q);
			my ($got) = $dbh->selectrow_array('SELECT pg_temp.copy_rows(?)', undef, $sql);
			mem_done($q, $s, $dbh, $pid, $before);
			die "returned $got, not $rows\n" unless $got == $rows;
		}
		else
		{
			check($q, run_query(session($s), $q, $sql), $rows);
		}
		1;
	};
	failed("$q (untimed)", $s, $@) unless $ok;
	return $ok;
}

# Writes one line of reads.tsv: QUERY, SYSTEM, the run times (ms), a note.
sub record
{
	my ($q, $key, $ms, $note) = @_;
	my @ms = @$ms;
	if (!@ms)
	{
		printf $tsv "%s\t%s\t0\t-\t-\t-\t-\t%s\n", $q, $key, $note // '';
		return;
	}
	my @s = sort { $a <=> $b } @ms;
	printf $tsv "%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%s\t%s\n", $q, $key, scalar(@ms), median(@ms), $s[0], $s[-1],
		join(',', map { sprintf('%.3f', $_) } @ms), $note // '';
}

# QUERY on every system: an untimed run each (LIMIT 10, range, COPY), then
# REPEATS timed rounds of the systems in turn.  The first timed run of
# count, sum and snapshot is made in a mem_session (connected before the
# clock starts); they have no untimed run: they read what the LIMIT 10 and
# count before them read.  Returns the heap's times (the drain's baseline).
sub measure_query
{
	my ($q, $rows, $repeats, $range) = @_;
	my $untimed = $q =~ /^(limit10|range|copy)$/;
	my $mem_first = $q =~ /^(count|sum|snapshot)$/;
	my (%ms, %ok);
	for my $s (@SYSTEMS)
	{
		$ok{ $s->{key} } = $untimed ? warm_up($q, $s, query_sql($q, $s, $range), $rows) : 1;
		$ms{ $s->{key} } = [];
	}
	for my $r (1 .. $repeats)
	{
		for my $s (@SYSTEMS)
		{
			next unless $ok{ $s->{key} };
			my $sql = query_sql($q, $s, $range);
			my $ok = eval {
				my ($dbh, $pid, $before) = $mem_first && $r == 1 ? mem_session($q) : (session($s));
				my $t0 = time;
				my $got = run_query($dbh, $q, $sql);
				my $t1 = time;
				mem_done($q, $s, $dbh, $pid, $before) if $pid;
				check($q, $got, $rows);
				push @{ $ms{ $s->{key} } }, ($t1 - $t0) * 1000;
				1;
			};
			next if $ok;
			failed($q, $s, $@);
			$ok{ $s->{key} } = 0;
		}
	}
	for my $s (@SYSTEMS)
	{
		record($q, $s->{key}, $ms{ $s->{key} });
		say_progress(sprintf('%-9s %-16s median %.3f ms', $q, $s->{table}, median(@{ $ms{ $s->{key} } })))
			if @{ $ms{ $s->{key} } };
	}
	return $ms{heap};
}

# The keys looked up: rows spread over the row numbers, [hex key, hex val].
sub lookup_keys
{
	my ($rows) = @_;
	my @keys;
	for my $j (0 .. $LOOKUPS - 1)
	{
		my $i = int((2 * $j + 1) * $rows / (2 * $LOOKUPS));
		push @keys, [ md5_hex($i), md5_hex("v$i") ];
	}
	return @keys;
}

# Point lookups on every system: an untimed pass, the server's Execution
# Time of each key (EXPLAIN ANALYZE), then each key timed in the client.
# Every answer must be the key's one row with its val.
sub measure_lookups
{
	my ($rows) = @_;
	my @keys = lookup_keys($rows);
	my $json = JSON::PP->new;
	for my $s (@SYSTEMS)
	{
		my (@server, @client);
		my $ok = eval {
			my $dbh = session($s);
			my $lookup = sub {
				my ($k) = @_;
				my $r = $dbh->selectall_arrayref("SELECT * FROM $s->{table} WHERE key = '\\x$k->[0]'::bytea");
				die "key $k->[0]: " . scalar(@$r) . " rows, not 1\n" unless @$r == 1;
				die "key $k->[0]: val " . unpack('H*', $r->[0][1]) . ", not $k->[1]\n"
					unless unpack('H*', $r->[0][1]) eq $k->[1];
			};
			$lookup->($_) for @keys;
			for my $k (@keys)
			{
				my ($plan) = $dbh->selectrow_array(
					"EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM $s->{table} WHERE key = '\\x$k->[0]'::bytea");
				my $p = $json->decode($plan)->[0];
				die "EXPLAIN of key $k->[0]: $p->{Plan}{'Actual Rows'} rows, not 1\n"
					unless $p->{Plan}{'Actual Rows'} == 1;
				push @server, $p->{'Execution Time'};
			}
			for my $k (@keys)
			{
				my $t0 = time;
				$lookup->($k);
				push @client, (time - $t0) * 1000;
			}
			1;
		};
		failed('lookup', $s, $@) unless $ok;
		@server = @client = () unless $ok;
		record('lookup_server', $s->{key}, \@server);
		record('lookup_client', $s->{key}, \@client);
		say_progress(sprintf('lookups   %-16s median %.3f ms server, %.3f ms client', $s->{table},
			median(@server), median(@client))) if $ok;
	}
}

# The statement of a drain step: the rows counted ('drain'), or through
# the recipe's materialized CTE ('drain_cte').
sub drain_step_sql
{
	my ($shard, $form) = @_;
	my $read = "persist_sink.read_next('$shard', 'drain', $STEP_UPDATES)";
	my $select = qq{SELECT count(*), max("time"), persist_sink.advance_reader('$shard', 'drain', max("time"))};
	return $form eq 'drain' ?
		"$select FROM $read HAVING count(*) > 0" :
		"WITH r AS MATERIALIZED (SELECT * FROM $read) $select FROM r HAVING count(*) > 0";
}

# One reader drain of SYSTEM's shard from a new session, in FORM (see
# drain_step_sql); returns its ms, steps, and the backend's VmHWM before
# and after.
sub drain_once
{
	my ($s, $rows, $first, $form) = @_;
	my $dbh = connect_db();
	my $shard = $s->{shard};
	my ($upper) = $dbh->selectrow_array("SELECT persist_sink.shard_upper('$shard')");
	unless ($first)
	{
		$dbh->do("SELECT persist_sink.drop_reader('$shard', 'drain')");
		$dbh->do("SELECT persist_sink.create_reader('$shard', 'drain')");
	}
	my ($pos) = $dbh->selectrow_array(
		"SELECT position FROM persist_sink.readers WHERE shard = '$shard' AND reader = 'drain'");
	die "reader drain of $shard is at $pos, not -1\n" unless $pos == -1;
	my ($pid) = $dbh->selectrow_array('SELECT pg_backend_pid()');
	my $before = vmhwm($pid);
	my $sth = $dbh->prepare(drain_step_sql($shard, $form));
	my ($total, $steps, $last) = (0, 0, -1);
	my $t0 = time;
	while ($last < $upper - 1)
	{
		$sth->execute;
		my $row = $sth->fetchrow_arrayref;
		die "read_next returned nothing at position $last, upper $upper\n" unless $row;
		$total += $row->[0];
		$last = $row->[1];
		$steps++;
		$sth->finish;
	}
	my $ms = (time - $t0) * 1000;
	my $after = vmhwm($pid);
	$dbh->disconnect;
	die "the drain read $total updates, not $rows\n" unless $total == $rows;
	return ($ms, $steps, $before, $after);
}

# The reader drain of both shards in FORM (see drain_step_sql), REPEATS
# times each (fewer past DRAIN_CAP), the shards in turn; the heap's line
# is its COPY's times.
sub measure_drains
{
	my ($rows, $repeats, $copy_ms, $form) = @_;
	my $first_form = $form eq 'drain';
	my (%ms, %steps, %done);
	for my $r (1 .. $repeats)
	{
		for my $s (grep { $_->{shard} } @SYSTEMS)
		{
			next if $done{ $s->{key} };
			my @res;
			my $ok = eval { @res = drain_once($s, $rows, $first_form && $r == 1, $form); 1 };
			if (!$ok)
			{
				failed($form, $s, $@);
				$done{ $s->{key} } = 1;
				next;
			}
			push @{ $ms{ $s->{key} } }, $res[0];
			$steps{ $s->{key} } = $res[1];
			printf $memtsv "drain\t%s\t%s\t%s\n", $s->{key}, $res[2] // '-', $res[3] // '-' if $first_form && $r == 1;
			say_progress(sprintf('%-9s %-16s run %d: %.1f s, %d steps', $form, $s->{table}, $r, $res[0] / 1000, $res[1]));
			$done{ $s->{key} } = 1 if $res[0] > $DRAIN_CAP * 1000;
		}
	}
	for my $s (grep { $_->{shard} } @SYSTEMS)
	{
		my $note = defined $steps{ $s->{key} } ? "$steps{ $s->{key} } read_next steps a run" : '';
		$note .= "; not repeated: a run took over $DRAIN_CAP s"
			if $ms{ $s->{key} } && @{ $ms{ $s->{key} } } < $repeats;
		record($form, $s->{key}, $ms{ $s->{key} } // [], $note);
	}
	record($form, 'heap', $copy_ms // [], 'the COPY of every row');
}

sub measure
{
	my ($rows, $repeats, $outdir) = @_;
	die "usage: reads.pl measure ROWS REPEATS OUTDIR\n" unless $outdir;
	open($tsv, '>', "$outdir/reads.tsv") or die "$outdir/reads.tsv: $!";
	open($memtsv, '>', "$outdir/reads_mem.tsv") or die "$outdir/reads_mem.tsv: $!";
	$tsv->autoflush(1);
	$memtsv->autoflush(1);
	print $tsv "query\tsystem\truns\tmedian_ms\tmin_ms\tmax_ms\truns_ms\tnote\n";
	print $memtsv "query\tsystem\tvmhwm_before_kb\tvmhwm_after_kb\n";

	# the range: from the key at rank rows / 2, the next RANGE_KEYS keys
	my $heap = session($SYSTEMS[2]);
	my $from = int($rows / 2);
	my @range = map {
		unpack('H*', ($heap->selectrow_array("SELECT key FROM reads_heap ORDER BY key OFFSET $_ LIMIT 1"))[0])
	} ($from, $from + $RANGE_KEYS);

	my $copy_ms;
	for my $q (qw(limit10 count count_rows sum))
	{
		measure_query($q, $rows, $repeats, \@range);
	}
	measure_lookups($rows);
	for my $q (qw(range copy snapshot))
	{
		my $heap_ms = measure_query($q, $rows, $repeats, \@range);
		$copy_ms = $heap_ms if $q eq 'copy';
	}
	for my $form (qw(drain drain_cte))
	{
		measure_drains($rows, $repeats, $copy_ms, $form);
	}
	close $tsv;
	close $memtsv;
	if (@failures)
	{
		open(my $fh, '>', "$outdir/reads_failures.txt") or die "$outdir/reads_failures.txt: $!";
		print $fh "$_\n" for @failures;
		close $fh;
		exit 1;
	}
}

# ---- report ----

# Reads a TSV with a header line into a list of hashes.
sub read_tsv
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "$file: $!";
	my $head = <$fh>;
	chomp $head;
	my @cols = split /\t/, $head;
	my @rows;
	while (<$fh>)
	{
		chomp;
		next if $_ eq '';
		my %r;
		@r{@cols} = split /\t/, $_, -1;
		push @rows, \%r;
	}
	close $fh;
	return @rows;
}

# 1234567 -> 1,234,567
sub commas
{
	my ($s) = @_;
	1 while $s =~ s/^(-?\d+)(\d{3})/$1,$2/;
	return $s;
}

sub fmt_ms
{
	my ($v) = @_;
	return '-' unless defined $v && $v =~ /^[\d.]+$/;
	return sprintf('%.3f', $v) if $v < 10;
	return sprintf('%.1f', $v) if $v < 1000;
	return commas(sprintf('%.0f', $v));
}

sub ratio
{
	my ($a, $b) = @_;
	return undef unless defined $a && defined $b && $a =~ /^[\d.]+$/ && $b =~ /^[\d.]+$/ && $b > 0;
	return $a / $b;
}

sub fmt_ratio
{
	my ($r) = @_;
	return '-' unless defined $r;
	return sprintf('%.2gx', $r) if $r > 0 && $r < 0.1;
	return sprintf('%.2fx', $r) if $r < 100;
	return commas(sprintf('%.0f', $r)) . 'x';
}

sub report
{
	my ($dir, $repeats) = @_;
	my (%ms, %runs, %note, %mem);
	for my $r (read_tsv("$dir/reads.tsv"))
	{
		$ms{ $r->{query} }{ $r->{system} } = $r->{median_ms};
		$runs{ $r->{query} }{ $r->{system} } = $r->{runs};
		$note{ $r->{query} }{ $r->{system} } = $r->{note};
	}
	for my $r (read_tsv("$dir/reads_mem.tsv"))
	{
		$mem{ $r->{query} }{ $r->{system} } = [ $r->{vmhwm_before_kb}, $r->{vmhwm_after_kb} ];
	}
	my @times = (
		[ 'limit10', '`SELECT * FROM t LIMIT 10`', 'LIMIT 10' ],
		[ 'count', '`SELECT count(*) FROM t`', 'count(*)' ],
		[ 'count_rows', '`SELECT count(*) FROM t_rows` (a table without diff, rows counted with their diff); heap: `count(*)`', 'count(*) rows' ],
		[ 'sum', '`SELECT sum(diff) FROM t`', 'sum(diff)' ],
		[ 'lookup_server', "point lookup `WHERE key = k`, server (EXPLAIN ANALYZE Execution Time, median of $LOOKUPS keys)", 'lookup (server)' ],
		[ 'lookup_client', "point lookup `WHERE key = k`, client (median of $LOOKUPS keys)", 'lookup (client)' ],
		[ 'range', "`WHERE key >= a AND key < b` ($RANGE_KEYS keys)", 'range' ],
		[ 'copy', "`COPY (SELECT * FROM t) TO '/dev/null'`", 'COPY' ],
		[ 'snapshot', '`count(*)` of `persist_sink.snapshot(shard)`; heap: of `GROUP BY key, val HAVING sum(diff) <> 0`', 'snapshot' ],
		[ 'drain', "reader drain (`read_next(..., $STEP_UPDATES)` counted + `advance_reader`, a transaction per step, to upper - 1); heap: the COPY above", 'drain' ],
		[ 'drain_cte', "reader drain as README's recipe (`read_next` in a `MATERIALIZED` CTE); heap: the COPY above", 'drain (CTE)' ],
	);
	my @mems = (
		[ 'count', 'peak RSS, `SELECT count(*) FROM t`', 'RSS count(*)' ],
		[ 'sum', 'peak RSS, `SELECT sum(diff) FROM t`', 'RSS sum' ],
		[ 'copy', 'peak RSS, `COPY ... TO \'/dev/null\'`', 'RSS COPY' ],
		[ 'snapshot', 'peak RSS, snapshot / GROUP BY count', 'RSS snapshot' ],
		[ 'drain', 'peak RSS, reader drain', 'RSS drain' ],
	);
	print "| query | compacted | 48 batches | heap | compacted/heap | batches/compacted |\n";
	print "|---|---:|---:|---:|---:|---:|\n";
	open(my $dat, '>', "$dir/reads.dat") or die "$dir/reads.dat: $!";
	print $dat "# label\tcompacted/heap\tbatches/compacted\n";
	for my $t (@times)
	{
		my ($q, $label, $short) = @$t;
		my @cells = map {
			my $v = fmt_ms($ms{$q}{$_});
			my $n = $runs{$q}{$_} // 0;
			$v .= " ($n run" . ($n == 1 ? '' : 's') . ')' if $v ne '-' && $n != $repeats && $q !~ /^lookup/;
			$v;
		} qw(compacted batches heap);
		my $rh = ratio($ms{$q}{compacted}, $ms{$q}{heap});
		my $rb = ratio($ms{$q}{batches}, $ms{$q}{compacted});
		printf "| %s, ms | %s | %s | %s | %s | %s |\n", $label, @cells, fmt_ratio($rh), fmt_ratio($rb);
		printf $dat "\"%s\"\t%s\t%s\n", $short, $rh // '-', $rb // '-';
	}
	for my $m (@mems)
	{
		my ($q, $label, $short) = @$m;
		next unless $mem{$q};
		my %after = map { $_ => $mem{$q}{$_} ? $mem{$q}{$_}[1] : undef } qw(compacted batches heap);
		my @cells = map {
			my $x = $mem{$q}{$_};
			$x && $x->[1] =~ /^\d+$/ ? sprintf('%.1f (%.1f)', $x->[1] / 1024, $x->[0] / 1024) : '-';
		} qw(compacted batches heap);
		my $rh = ratio($after{compacted}, $after{heap});
		my $rb = ratio($after{batches}, $after{compacted});
		printf "| %s, MB after (before) | %s | %s | %s | %s | %s |\n", $label, @cells, fmt_ratio($rh), fmt_ratio($rb);
		printf $dat "\"%s\"\t%s\t%s\n", $short, $rh // '-', $rb // '-';
	}
	close $dat;
	my @notes;
	for my $q (sort keys %note)
	{
		for my $s (qw(compacted batches heap))
		{
			push @notes, "$q, $s: $note{$q}{$s}" if $note{$q}{$s};
		}
	}
	print "\nNotes: ", join('; ', @notes), ".\n" if @notes;
}
