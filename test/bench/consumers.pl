#!/usr/bin/perl
# The consumer workload's clients and figures (test/bench/run, --only
# consumers).  Connects with the PG* environment (PGHOST, PGPORT,
# PGDATABASE).
#
#   consumers.pl produce SYSTEM I DIR SECONDS NBATCHES RATE LAG_MAX
#       Producer I (1..8) of SYSTEM (sink, pgq, table): connects, prepares
#       its statement, writes DIR/ready.I, waits for DIR/start (which holds
#       the common start epoch), then calls one prebuilt 1000-row batch of
#       bench.batches (at random) per transaction until SECONDS after the
#       start, and logs each call to DIR/prod.I: "call_id batch tag t_call
#       t_return" (epochs).  RATE > 0: at most RATE calls/s, on a fixed
#       schedule.  LAG_MAX > 0 (backpressure): before each call it waits
#       while the producers together have written more than LAG_MAX rows
#       that the slowest consumer has not stored yet (the producers' counts
#       in DIR/made.*, the consumers' in DIR/stored.*), and writes the
#       seconds it waited to DIR/waited.I.  call_id (I x 10^9 + its
#       sequence number) is written as 8 bytes (int8send) in front of every
#       key of the call, so that keys never repeat and every row of a
#       consumer's table names its call.  tag is what the system's
#       consumers acknowledge the call by: the sink's time (what append()
#       returned), the producer transaction's txid (PgQ, table).
#
#   consumers.pl consume SYSTEM C DIR MAX DRAIN_LIMIT
#       Consumer C (1..4): calls SYSTEM's consumer step (consumers.sql) in
#       autocommit (one round trip, one transaction), each step storing what
#       it takes into its own table bench.cons_C, and logs each step that
#       stored rows to DIR/cons.C: "t_return rows pos t_call" (pos: the
#       position it acknowledged).  When a step finds nothing it waits:
#       sink: read_next itself waits up to 100 ms without polling; table:
#       on LISTEN (up to 100 ms, then tries again: the xmin bound may hold
#       rows back after their NOTIFY); PgQ: sleeps 100 ms (PgQ has no
#       wakeup; its batches come with the ticker's ticks).  Stops once
#       DIR/produced (the rows the producers wrote, written by the driver
#       when they have all stopped) exists and it has stored that many;
#       fails when it stores more, or after DRAIN_LIMIT seconds without
#       getting there.  MAX: the sink's read_next max_updates.  Keeps the
#       rows it has stored in DIR/stored.C (for the producers' backpressure).
#
#   consumers.pl figures SYSTEM DIR T0 SECONDS [TICKS]
#       Per-system figures from the logs: prints one tab-separated line
#       (produced rows and calls, producer rows/s, consumer updates/s and
#       updates stored in the window, end-to-end latency p50 p99 max ms,
#       backlog at the end of the window, drain seconds, consumer
#       transactions and their mean rows, the share of the producers' time
#       they waited for the consumers) and writes DIR/series.tsv (by
#       second of the run: rows produced, updates stored, p50 latency of the
#       calls made in it).  Latency of a call for a consumer: the return of
#       the consumer step that stored it (its commit) minus the producer's
#       return; every call x consumer pair counts.  A step stored a call
#       when its pos reached the call's tag: sink, pos (the last time read)
#       >= the call's time; table, pos (the new xmin) > the call's txid;
#       PgQ, pos (the batch's end tick) >= the first tick whose snapshot
#       sees the call's txid (TICKS: "tick_id snapshot" of the queue).
#
#   consumers.pl report TSV OUTDIR
#       The report's markdown tables from TSV (one line per system and load:
#       the figures line plus the check), one table and headline per load
#       (column load: "max", "rate"; load_desc its title), and per load
#       OUTDIR/consumers_LOAD.dat (the plot's data).
use strict;
use warnings;
use DBI;
use IO::Handle;
use Time::HiRes qw(time sleep);

my $mode = shift // '';
if ($mode eq 'produce') { produce(@ARGV) }
elsif ($mode eq 'consume') { consume(@ARGV) }
elsif ($mode eq 'figures') { figures(@ARGV) }
elsif ($mode eq 'report') { report(@ARGV) }
else
{
	die "usage: consumers.pl produce|consume|figures|report ...\n";
}

sub connect_db
{
	my ($name) = @_;
	my $dsn = 'dbi:Pg:';
	$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
	$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
	$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');
	my $dbh = DBI->connect($dsn, '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, pg_server_prepare => 1 });
	$dbh->do("SET application_name = '$name'");
	return $dbh;
}

# Writes a count to a file at once (a rename, so readers never see half).
sub put_count
{
	my ($file, $n) = @_;
	open(my $fh, '>', "$file.tmp") or die "$file.tmp: $!";
	print $fh $n;
	close $fh or die;
	rename("$file.tmp", $file) or die "$file: $!";
}

# The sum (producers) or the minimum (consumers) of the counts in files.
sub counts
{
	my ($glob, $min) = @_;
	my $r;
	for my $f (glob($glob))
	{
		next if $f =~ /\.tmp$/;
		open(my $fh, '<', $f) or next;
		my $n = <$fh> // 0;
		close $fh;
		$r = !defined $r ? $n : $min ? ($n < $r ? $n : $r) : $r + $n;
	}
	return $r // 0;
}

sub produce
{
	my ($system, $i, $dir, $secs, $nbatches, $rate, $lag_max) = @_;
	my $dbh = connect_db("producer $i");
	my $sql = {
		# the same form as workload 1's and the sustained workload's sink
		sink => 'SELECT persist_sink.append($1::text, array(SELECT int8send($3::bigint) || k FROM unnest(keys) AS k), vals, diffs)
		         FROM bench.batches WHERE id = $2::int',
		# one event per row, one transaction per batch, as workload 1's PgQ
		pgq => 'SELECT count(pgq.insert_event($1::text, \'u\', convert_from(v, \'UTF8\'), convert_from(k, \'UTF8\'), d::text, $3::text, NULL)),
		               txid_current()
		        FROM bench.batches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = $2::int',
		# one INSERT of the batch and its NOTIFY, one transaction
		table => 'WITH ins AS (INSERT INTO bench.q_events (key, val, diff)
		                       SELECT int8send($3::bigint) || k, v, d
		                       FROM bench.batches, unnest(keys, vals, diffs) AS u(k, v, d) WHERE id = $2::int)
		          SELECT pg_notify($1::text, \'\'), txid_current()',
	}->{$system} or die "unknown system $system\n";
	my $target = { sink => 'consumers', pgq => 'bench_q', table => 'bench_q' }->{$system};
	my $sth = $dbh->prepare($sql);
	open(my $log, '>', "$dir/prod.$i") or die "$dir/prod.$i: $!";
	open(my $r, '>', "$dir/ready.$i") or die;
	close $r;
	my $t0;
	until (defined $t0)
	{
		if (open(my $s, '<', "$dir/start"))
		{
			$t0 = <$s>;
			close $s;
			chomp $t0 if defined $t0;
			undef $t0 unless $t0;
		}
		sleep 0.005 unless defined $t0;
	}
	sleep($t0 - time) if $t0 > time;
	my $end = $t0 + $secs;
	my $gap = $rate > 0 ? 1 / $rate : 0;
	my $seq = 0;
	my $next = $t0 + ($rate > 0 ? rand($gap) : 0);
	my $waited = 0;
	put_count("$dir/made.$i", 0) if $lag_max > 0;
	while (1)
	{
		if ($gap)
		{
			sleep($next - time) if $next > time;
			$next += $gap;
		}
		if ($lag_max > 0)
		{
			my $w0;
			while (counts("$dir/made.*", 0) - counts("$dir/stored.*", 1) > $lag_max && time < $end)
			{
				$w0 //= time;
				sleep 0.002;
			}
			$waited += time - $w0 if defined $w0;
		}
		my $t1 = time;
		last if $t1 >= $end;
		$seq++;
		my $id = $i * 1_000_000_000 + $seq;
		my $b = 1 + int(rand($nbatches));
		$sth->execute($target, $b, $id);
		my @row = $sth->fetchrow_array;
		$sth->finish;
		my $t2 = time;
		my $tag = $system eq 'sink' ? $row[0] : $row[1];
		printf $log "%d %d %s %.6f %.6f\n", $id, $b, $tag, $t1, $t2;
		put_count("$dir/made.$i", $seq * 1000) if $lag_max > 0;
	}
	close $log or die;
	put_count("$dir/waited.$i", sprintf('%.3f', $waited));
	$dbh->disconnect;
}

sub consume
{
	my ($system, $c, $dir, $max, $drain_limit) = @_;
	my $dbh = connect_db("consumer $c");
	my $tbl = "bench.cons_$c";
	my $sth;
	if ($system eq 'sink')
	{
		$sth = $dbh->prepare('SELECT n, pos FROM bench.consume_sink($1, $2, $3, $4, $5)');
		$sth->bind_param($_->[0], $_->[1]) for ([1, 'consumers'], [2, "c$c"], [3, $tbl], [4, $max], [5, '100ms']);
	}
	elsif ($system eq 'pgq')
	{
		$sth = $dbh->prepare('SELECT n, pos FROM bench.consume_pgq($1, $2, $3)');
		$sth->bind_param($_->[0], $_->[1]) for ([1, 'bench_q'], [2, "c$c"], [3, $tbl]);
	}
	elsif ($system eq 'table')
	{
		$sth = $dbh->prepare('SELECT n, pos FROM bench.consume_table($1, $2)');
		$sth->bind_param($_->[0], $_->[1]) for ([1, $c], [2, $tbl]);
		$dbh->do('LISTEN bench_q');
	}
	else
	{
		die "unknown system $system\n";
	}
	open(my $log, '>', "$dir/cons.$c") or die "$dir/cons.$c: $!";
	$log->autoflush(1);
	put_count("$dir/stored.$c", 0);
	open(my $r, '>', "$dir/cready.$c") or die;
	close $r;
	my ($stored, $steps, $empty, $total, $t_total) = (0, 0, 0, undef, undef);
	while (1)
	{
		my $t1 = time;
		$sth->execute;
		my ($n, $pos) = $sth->fetchrow_array;
		$sth->finish;
		my $t2 = time;
		$steps++;
		if ($n > 0)
		{
			$stored += $n;
			printf $log "%.6f %d %s %.6f\n", $t2, $n, $pos // '-', $t1;
			put_count("$dir/stored.$c", $stored);
		}
		else
		{
			$empty++;
		}
		if (!defined $total && -e "$dir/produced")
		{
			open(my $p, '<', "$dir/produced") or die;
			$total = <$p>;
			close $p;
			chomp $total;
			$t_total = time;
		}
		if (defined $total)
		{
			last if $stored == $total;
			die "consumer $c ($system) stored $stored rows, more than the $total produced\n" if $stored > $total;
			die "consumer $c ($system) stored $stored of the $total rows produced after $drain_limit s of draining\n"
				if time - $t_total > $drain_limit;
		}
		next if $n > 0;
		if ($system eq 'table')
		{
			# what came meanwhile, else wait for a NOTIFY up to 100 ms
			my $got = 0;
			$got++ while $dbh->pg_notifies;
			next if $got;
			my $rin = '';
			vec($rin, $dbh->{pg_socket}, 1) = 1;
			select(my $rout = $rin, undef, undef, 0.1);
			1 while $dbh->pg_notifies;
		}
		elsif ($system eq 'pgq')
		{
			sleep 0.1;
		}
	}
	print $log "# steps $steps empty $empty\n";
	close $log or die;
	$dbh->disconnect;
}

sub pct
{
	my ($p, $v) = @_;
	return '-' unless @$v;
	my $i = int($p * @$v + 0.999999) - 1;
	$i = 0 if $i < 0;
	return $v->[$i];
}

# txid_visible_in_snapshot, for a snapshot's text form "xmin:xmax:xip,..."
sub visible
{
	my ($x, $snap) = @_;
	return 1 if $x < $snap->{xmin};
	return 0 if $x >= $snap->{xmax};
	return !$snap->{xip}{$x};
}

sub figures
{
	my ($system, $dir, $t0, $secs, $ticks) = @_;
	my $tend = $t0 + $secs;
	# the producers' calls
	my @calls;		# [tag, t_return, rows]
	my $last_return = $t0;
	for my $f (glob("$dir/prod.*"))
	{
		open(my $fh, '<', $f) or die "$f: $!";
		while (<$fh>)
		{
			my ($id, $b, $tag, $t1, $t2) = split;
			push @calls, [$tag, $t2];
			$last_return = $t2 if $t2 > $last_return;
		}
		close $fh;
	}
	my $ncalls = @calls;
	my $rows = $ncalls * 1000;
	# PgQ: a call's tag becomes the first tick whose snapshot sees its txid
	if ($system eq 'pgq')
	{
		my @t;
		open(my $fh, '<', $ticks) or die "$ticks: $!";
		while (<$fh>)
		{
			chomp;
			my ($id, $s) = split /\t/;
			my ($xmin, $xmax, $xip) = split /:/, $s;
			push @t, [$id, { xmin => $xmin, xmax => $xmax, xip => { map { $_ => 1 } split /,/, ($xip // '') } }];
		}
		close $fh;
		@t = sort { $a->[0] <=> $b->[0] } @t;
		for my $c (@calls)
		{
			my ($lo, $hi) = (0, scalar @t);
			while ($lo < $hi)
			{
				my $mid = int(($lo + $hi) / 2);
				if (visible($c->[0], $t[$mid][1])) { $hi = $mid } else { $lo = $mid + 1 }
			}
			die "no tick sees txid $c->[0]\n" if $lo == @t;
			$c->[0] = $t[$lo][0];
		}
	}
	# the consumers' steps
	my @lat;
	my ($in_window, $backlog, $drain_end, $steps, $srows) = (0, 0, $last_return, 0, 0);
	my @cons = glob("$dir/cons.*");
	my (%prod_s, %cons_s, %lat_s);
	for my $c (@calls)
	{
		$prod_s{int($c->[1] - $t0)} += 1000;
	}
	my $produced_by_end = 1000 * grep { $_->[1] <= $tend } @calls;
	for my $f (@cons)
	{
		my @st;		# [t_return, pos]
		my $stored_by_end = 0;
		open(my $fh, '<', $f) or die "$f: $!";
		while (<$fh>)
		{
			next if /^#/;
			my ($t2, $n, $pos, $t1) = split;
			push @st, [$t2, $pos];
			$steps++;
			$srows += $n;
			if ($t2 <= $tend)
			{
				$stored_by_end += $n;
				$in_window += $n if $t2 >= $t0;
			}
			$cons_s{int($t2 - $t0)} += $n;
			$drain_end = $t2 if $t2 > $drain_end;
		}
		close $fh;
		$backlog += $produced_by_end - $stored_by_end;
		for my $c (@calls)
		{
			my ($tag, $tr) = @$c;
			my ($lo, $hi) = (0, scalar @st);
			while ($lo < $hi)
			{
				my $mid = int(($lo + $hi) / 2);
				my $p = $st[$mid][1];
				my $covers = $system eq 'table' ? $p > $tag : $p >= $tag;
				if ($covers) { $hi = $mid } else { $lo = $mid + 1 }
			}
			die "$f: no step stored the call with tag $tag\n" if $lo == @st;
			my $l = ($st[$lo][0] - $tr) * 1000;
			push @lat, $l;
			push @{ $lat_s{int($tr - $t0)} }, $l;
		}
	}
	@lat = sort { $a <=> $b } @lat;
	my $ncons = @cons || 1;
	open(my $ser, '>', "$dir/series.tsv") or die;
	my $last = int($drain_end - $t0);
	for my $s (0 .. $last)
	{
		my @l = sort { $a <=> $b } @{ $lat_s{$s} // [] };
		my $p50 = pct(0.5, \@l);
		printf $ser "%d\t%d\t%d\t%s\n", $s, $prod_s{$s} // 0, $cons_s{$s} // 0,
			$p50 eq '-' ? 'NaN' : sprintf('%.1f', $p50);
	}
	close $ser;
	# the share of the producers' time they waited for the consumers
	my ($waited, $nprod) = (0, 0);
	for my $f (glob("$dir/waited.*"))
	{
		next if $f =~ /\.tmp$/;
		open(my $fh, '<', $f) or die "$f: $!";
		$waited += <$fh> // 0;
		$nprod++;
		close $fh;
	}
	# produced rows, calls, producer rows/s, consumer updates/s, updates in
	# the window, p50, p99, max ms, mean backlog per consumer at the end of
	# the window (rows), drain s, consumer steps, mean rows per step,
	# producers' time held back (percent)
	printf "%d\t%d\t%.0f\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t%d\t%.0f\t%.1f\n",
		$rows, $ncalls, $rows / ($last_return - $t0), $in_window / $secs, $in_window,
		pct(0.5, \@lat), pct(0.99, \@lat), $lat[-1] // 0, $backlog / $ncons,
		$drain_end - $last_return, $steps, $steps ? $srows / $steps : 0,
		$nprod ? 100 * $waited / ($nprod * $secs) : 0;
}

sub fmt
{
	my ($v) = @_;
	return $v unless $v =~ /^-?\d+(\.\d+)?$/;
	my $s = sprintf('%.0f', $v);
	1 while $s =~ s/^(-?\d+)(\d{3})/$1,$2/;
	return $s;
}

sub ms
{
	my ($v) = @_;
	return $v unless $v =~ /^-?\d+(\.\d+)?$/;
	return $v >= 100 ? fmt($v) : sprintf('%.1f', $v);
}

sub report
{
	my ($tsv, $outdir) = @_;
	open(my $fh, '<', $tsv) or die "$tsv: $!";
	my $head = <$fh>;
	chomp $head;
	my @cols = split /\t/, $head;
	my (@runs, @loads, %seen);
	while (<$fh>)
	{
		chomp;
		my %r;
		@r{@cols} = split /\t/;
		push @runs, \%r;
		push @loads, $r{load} unless $seen{ $r{load} }++;
	}
	close $fh;
	for my $load (@loads)
	{
		my @in = grep { $_->{load} eq $load } @runs;
		print "#### $in[0]{load_desc}\n\n";
		my @base = grep { $_->{system} !~ /^persist_sink/ } @in;
		my ($best) = sort { $b->{consumer_per_s} <=> $a->{consumer_per_s} } @base;
		my ($b50) = sort { $a->{p50_ms} <=> $b->{p50_ms} } @base;
		print "| system | producer rows/s | consumer updates/s | p50 ms | p99 ms | consumer updates/s vs best baseline | p50 vs best baseline | max ms | producers held back | backlog rows/consumer at end | drain s | consumer txns | rows/txn | check |\n";
		print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
		for my $r (@in)
		{
			my $ratio = $best && $best->{consumer_per_s} > 0
				? sprintf('%.2fx', $r->{consumer_per_s} / $best->{consumer_per_s}) : '-';
			my $r50 = $b50 && $b50->{p50_ms} > 0 ? sprintf('%.2fx', $r->{p50_ms} / $b50->{p50_ms}) : '-';
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s%% | %s | %s | %s | %s | %s |\n",
				$r->{system}, fmt($r->{producer_per_s}), fmt($r->{consumer_per_s}),
				ms($r->{p50_ms}), ms($r->{p99_ms}), $ratio, $r50, ms($r->{max_ms}), $r->{held_back_pct},
				fmt($r->{backlog}), $r->{drain_s}, fmt($r->{steps}), fmt($r->{rows_per_step}), $r->{check};
		}
		print "\n";
		my ($sink) = grep { $_->{system} =~ /^persist_sink/ } @in;
		if ($sink && @base)
		{
			my ($bp) = sort { $b->{producer_per_s} <=> $a->{producer_per_s} } @base;
			my ($b99) = sort { $a->{p99_ms} <=> $b->{p99_ms} } @base;
			printf "consumers headline (%s), %s vs the best baseline of each figure: producer rows/s %.2fx (%s), consumer updates/s %.2fx (%s), p50 latency %.2fx (%s), p99 latency %.2fx (%s)\n\n",
				$load, $sink->{system},
				$sink->{producer_per_s} / ($bp->{producer_per_s} || 1), $bp->{system},
				$sink->{consumer_per_s} / ($best->{consumer_per_s} || 1), $best->{system},
				$sink->{p50_ms} / ($b50->{p50_ms} || 1), $b50->{system},
				$sink->{p99_ms} / ($b99->{p99_ms} || 1), $b99->{system};
		}
		# the plot's data: by second, rows produced and updates stored per
		# system, then the p50 latency of the calls made in that second
		my @series;
		my $n = 0;
		for my $r (@in)
		{
			my @s;
			open(my $sf, '<', "$outdir/$r->{series}") or die "$outdir/$r->{series}: $!";
			while (<$sf>)
			{
				chomp;
				push @s, [split /\t/];
			}
			close $sf;
			push @series, \@s;
			$n = @s if @s > $n;
		}
		open(my $dat, '>', "$outdir/consumers_$load.dat") or die;
		print $dat join("\t", 'second',
			(map { "$_->{system} produced" } @in), (map { "$_->{system} stored (sum of 4)" } @in),
			(map { "$_->{system} p50 latency" } @in)), "\n";
		for my $i (0 .. $n - 1)
		{
			my @line = ($i);
			push @line, map { $_->[$i] ? $_->[$i][1] : 'NaN' } @series;
			push @line, map { $_->[$i] ? $_->[$i][2] : 'NaN' } @series;
			push @line, map { $_->[$i] ? $_->[$i][3] : 'NaN' } @series;
			print $dat join("\t", @line), "\n";
		}
		close $dat;
	}
}
