#!/usr/bin/perl
# The sustained workload's figures (test/bench/run, --only sustained).
#
#   sustained.pl series SAMPLES ROWS_PER_CALL LOGFILE...
#       Prints SAMPLES (sustained_sample.pl's lines) with one more column
#       first after the epoch: the rows the clients had completed by that
#       sample, from their per-call logs (pgbench --log format, which the
#       COPY client writes too: the fifth and sixth fields are the epoch
#       seconds and microseconds at which the call completed).
#
#   sustained.pl report MEASUREMENTS_TSV OUTDIR
#       MEASUREMENTS_TSV: one line per system and key shape (test/bench/run
#       writes it), naming its series file (relative to OUTDIR), its start
#       and end and the CPU seconds of its client processes.  Prints the
#       report's markdown section (every run; the key shapes side by side
#       with the sink's ratios to heap INSERT and COPY per shape; the
#       sink's shard) and writes OUTDIR/sustained.dat (the plot's data:
#       rows/s of every run and its shard's batches, by second of the
#       run).
#
# Per system, a sample interval is the time between two consecutive samples;
# only the intervals wholly inside the run (from the clients' start to their
# end) count.  rows/s of an interval: rows completed in it / its length.
# CPU seconds per million rows: the CPU the processes of a kind used over
# those intervals / the rows completed over them.
use strict;
use warnings;

my $mode = shift // '';
if ($mode eq 'series')
{
	series(@ARGV);
}
elsif ($mode eq 'report')
{
	report(@ARGV);
}
else
{
	die "usage: sustained.pl series SAMPLES ROWS_PER_CALL LOGFILE... | report MEASUREMENTS_TSV OUTDIR\n";
}

sub series
{
	my ($samples, $per_call, @logs) = @_;
	my @done;		# completion times of the calls
	for my $f (@logs)
	{
		open(my $fh, '<', $f) or die "$f: $!";
		while (<$fh>)
		{
			my @f = split;
			# client, call number, latency (us; pgbench may write "failed"
			# or "skipped" instead), script, epoch, us
			next unless @f >= 6 && $f[2] =~ /^\d+$/;
			push @done, $f[4] + $f[5] / 1e6;
		}
		close $fh;
	}
	@done = sort { $a <=> $b } @done;
	open(my $fh, '<', $samples) or die "$samples: $!";
	my $i = 0;
	while (<$fh>)
	{
		chomp;
		my ($t, @rest) = split /\t/;
		$i++ while $i < @done && $done[$i] <= $t;
		print join("\t", $t, $i * $per_call, @rest), "\n";
	}
	close $fh;
}

sub median
{
	my @v = sort { $a <=> $b } grep { defined } @_;
	return undef unless @v;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

sub max
{
	my $m;
	for (@_)
	{
		$m = $_ if defined && (!defined $m || $_ > $m);
	}
	return $m;
}

sub min
{
	my $m;
	for (@_)
	{
		$m = $_ if defined && (!defined $m || $_ < $m);
	}
	return $m;
}

sub num
{
	my ($v) = @_;
	return defined $v && $v =~ /^-?\d+(?:\.\d+)?(?:e[-+]?\d+)?$/i;
}

sub fmt
{
	my ($v, $digits) = @_;
	return '-' unless num($v);
	return sprintf("%.${digits}f", $v);
}

sub int_fmt
{
	my ($v) = @_;
	return '-' unless num($v);
	my $s = sprintf('%.0f', $v);
	1 while $s =~ s/^(-?\d+)(\d{3})/$1,$2/;
	return $s;
}

sub ratio
{
	my ($x, $y, $digits) = @_;
	return 'n/a' unless num($x) && num($y) && $y != 0;
	return sprintf("%.${digits}fx", $x / $y);
}

# The name a run goes by in the report and the plot: its system, and its
# key shape when the measurements name one.
sub run_id
{
	my ($r) = @_;
	return $r->{system} unless defined $r->{keys} && $r->{keys} ne '';
	return "$r->{system}, $r->{keys} keys";
}

sub report
{
	my ($tsv, $outdir) = @_;
	open(my $fh, '<', $tsv) or die "$tsv: $!";
	my $header = <$fh>;
	chomp $header;
	my @cols = split(/\t/, $header);
	my (@ids, %m, @shapes, %seen_shape, @systems, %seen_system);
	while (<$fh>)
	{
		chomp;
		my %r;
		@r{@cols} = split(/\t/);
		$r{keys} //= '';
		my $id = run_id(\%r);
		push @ids, $id;
		$m{$id} = \%r;
		push @shapes, $r{keys} unless $seen_shape{$r{keys}}++;
		push @systems, $r{system} unless $seen_system{$r{system}}++;
		analyze(\%r, "$outdir/$r{series}");
	}
	close $fh;
	return unless @ids;

	# the run of SYSTEM with key shape SHAPE
	my $run = sub { $m{run_id({ system => $_[0], keys => $_[1] })} };

	my @out;
	my $first = $m{$ids[0]};
	push @out, sprintf('### Sustained: %d clients x 1000-row calls of unique keys, %s s per system%s, default settings',
					   $first->{clients}, $first->{seconds}, @shapes > 1 ? ' and key shape' : ''), '';
	push @out, '| system | keys | rows/s over the run | rows/s median | rows/s min | stalled s | longest stall s | rows | intervals | checkpoints | WAL bytes/row | disk bytes/row | CPU s/M rows: writers | workers | compactor | other server | total | client |';
	push @out, '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
	for my $id (@ids)
	{
		my $r = $m{$id};
		my $cpu = $r->{cpu_per_m} || {};
		push @out, '| ' . join(' | ', $r->{system}, $r->{keys} eq '' ? '-' : $r->{keys},
							   int_fmt($r->{rps_run}), int_fmt($r->{rps_median}), int_fmt($r->{rps_min}),
							   $r->{stalled} // 0, $r->{longest_stall} // 0, int_fmt($r->{rows}), $r->{intervals} // 0, $r->{checkpoints},
							   fmt(num($r->{wal_bytes}) && $r->{rows} ? $r->{wal_bytes} / $r->{rows} : undef, 1),
							   fmt(num($r->{disk_bytes}) && $r->{rows} ? $r->{disk_bytes} / $r->{rows} : undef, 1),
							   (map { fmt($cpu->{$_}, 2) } qw(writers workers compactor other total)),
							   fmt(num($r->{client_cpu_s}) && $r->{rows} ? $r->{client_cpu_s} / $r->{rows} * 1e6 : undef, 2)) . ' |';
	}
	push @out, '';

	# The key shapes side by side: rows/s of every system, and the ratios
	# of every sink to heap INSERT and COPY, per shape.
	my @sinks = grep { $_ =~ /^persist_sink/ } @systems;
	{
		my @h = map { my $k = $_ eq '' ? '' : "$_ keys: "; ("${k}rows/s over the run", "${k}median") } @shapes;
		push @out, '#### rows/s by key shape, and the sink over the baselines (over the run, and the median of the 1-second intervals)', '';
		push @out, '| system | ' . join(' | ', @h) . ' |';
		push @out, '|---|' . join('|', map { '---:' } @h) . '|';
		for my $s (@systems)
		{
			push @out, "| $s | " . join(' | ', map {
				my $r = $run->($s, $_);
				$r ? (int_fmt($r->{rps_run}), int_fmt($r->{rps_median})) : ('-', '-')
			} @shapes) . ' |';
		}
		for my $sink (@sinks)
		{
			for my $other ('heap INSERT', 'COPY')
			{
				next unless $seen_system{$other};
				push @out, "| $sink / $other | " . join(' | ', map {
					my ($x, $y) = ($run->($sink, $_), $run->($other, $_));
					$x && $y ? (ratio($x->{rps_run}, $y->{rps_run}, 2), ratio($x->{rps_median}, $y->{rps_median}, 2))
						: ('-', '-')
				} @shapes) . ' |';
			}
		}
		push @out, '';
	}

	for my $sink (@sinks)
	{
		for my $shape (@shapes)
		{
			my $r = $run->($sink, $shape) or next;
			my $id = run_id($r);
			push @out, "#### $id: the shard over the run and at its end", '';
			push @out, '| batches median | batches max | state bytes median | state bytes max | state bytes/append | rewrites/row | snapshot s at the end | compact s | snapshot s after compact | snapshot at the end / after compact |';
			push @out, '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
			push @out, '| ' . join(' | ',
								   fmt($r->{batches_median}, 1), int_fmt($r->{batches_max}),
								   int_fmt($r->{state_median}), int_fmt($r->{state_max}),
								   int_fmt(num($r->{appends}) && $r->{appends} > 0 ? $r->{state_bytes} / $r->{appends} : undef),
								   num($r->{compacted_updates}) && num($r->{updates}) && $r->{updates} > 0
									   ? fmt($r->{compacted_updates} / $r->{updates}, 2) : '-',
								   fmt($r->{snapshot_s}, 2), fmt($r->{compact_s}, 2), fmt($r->{snapshot_compacted_s}, 2),
								   ratio($r->{snapshot_s}, $r->{snapshot_compacted_s}, 2)) . ' |';
			push @out, '';
			push @out, sprintf('The snapshots returned %s rows; the shard had %s batches when the clients stopped.',
							   int_fmt($r->{snapshot_rows}), $r->{batches_end});
			push @out, '';
			my @h;
			for my $other ('heap INSERT', 'COPY')
			{
				my $o = $run->($other, $shape) or next;
				push @h, sprintf('sink/%s %s over the run (%s by medians)', $other,
								 ratio($r->{rps_run}, $o->{rps_run}, 2),
								 ratio($r->{rps_median}, $o->{rps_median}, 2));
			}
			push @h, sprintf('snapshot at the end %s the time after compact (target: within 1.20x)',
							 ratio($r->{snapshot_s}, $r->{snapshot_compacted_s}, 2));
			push @h, sprintf('batches median %s, max %s', fmt($r->{batches_median}, 1), int_fmt($r->{batches_max}));
			push @out, "sustained headline, $id: " . join('; ', @h), '';
		}
	}

	# The plot's data: rows/s of every run and the batches of every sink's
	# shard, by second of the run (the end of each interval, rounded)
	my @sink_ids = grep { $m{$_}{system} =~ /^persist_sink/ } @ids;
	my %by_t;
	for my $id (@ids)
	{
		for my $p (@{$m{$id}{points} || []})
		{
			my ($t, $rps, $batches) = @$p;
			$by_t{$t}{$id} = $rps;
			$by_t{$t}{"$id batches"} = $batches if $m{$id}{system} =~ /^persist_sink/;
		}
	}
	my @plotted = (@ids, map { "$_ batches" } @sink_ids);
	open(my $dat, '>', "$outdir/sustained.dat") or die "$outdir/sustained.dat: $!";
	print $dat join("\t", 'second', map({ "\"$_ rows/s\"" } @ids), map({ "\"$_\"" } map { "$_ batches" } @sink_ids)), "\n";
	for my $t (sort { $a <=> $b } keys %by_t)
	{
		print $dat join("\t", $t, map { num($by_t{$t}{$_}) ? $by_t{$t}{$_} : 'NaN' } @plotted), "\n";
	}
	close $dat;
	print join("\n", @out);
}

# Counts a system's stalled intervals (rows/s under a tenth of its median)
# and its longest run of them, into its measurement line.
sub stalls
{
	my ($r, @rps) = @_;
	my ($run, $stalled, $longest) = (0, 0, 0);

	return unless num($r->{rps_median});
	for my $x (@rps)
	{
		$run = $x < $r->{rps_median} / 10 ? $run + 1 : 0;
		$stalled++ if $run;
		$longest = $run if $run > $longest;
	}
	$r->{stalled} = $stalled;
	$r->{longest_stall} = $longest;
}

# Reads a system's series and adds its figures to its measurement line.
sub analyze
{
	my ($r, $series) = @_;
	my @s;
	open(my $fh, '<', $series) or die "$series: $!";
	while (<$fh>)
	{
		chomp;
		my %x;
		@x{qw(t rows batches state appends updates writers workers compactor other)} = split /\t/;
		push @s, \%x;
	}
	close $fh;
	my (@rps, @batches, @state, @points);
	my ($first, $last);
	for my $i (1 .. $#s)
	{
		my ($p, $n) = ($s[$i - 1], $s[$i]);
		next unless $p->{t} >= $r->{t_start} && $n->{t} <= $r->{t_end} && $n->{t} > $p->{t};
		$first //= $p;
		$last = $n;
		my $rps = ($n->{rows} - $p->{rows}) / ($n->{t} - $p->{t});
		push @rps, $rps;
		push @batches, $n->{batches} if num($n->{batches});
		push @state, $n->{state} if num($n->{state});
		push @points, [sprintf('%.0f', $n->{t} - $r->{t_start}), $rps, $n->{batches}, $n->{state}];
	}
	$r->{intervals} = scalar @rps;
	$r->{rps_run} = $r->{rows} / ($r->{t_end} - $r->{t_start})
	  if num($r->{rows}) && $r->{t_end} > $r->{t_start};
	$r->{rps_median} = median(@rps);
	stalls($r, @rps);
	$r->{rps_min} = min(@rps);
	$r->{batches_median} = median(@batches);
	$r->{batches_max} = max(@batches);
	$r->{state_median} = median(@state);
	$r->{state_max} = max(@state);
	$r->{points} = \@points;
	if ($first && $last && $last->{rows} > $first->{rows})
	{
		my $mrows = ($last->{rows} - $first->{rows}) / 1e6;
		my %c;
		$c{$_} = ($last->{$_} - $first->{$_}) / $mrows for qw(writers workers compactor other);
		$c{total} = $c{writers} + $c{workers} + $c{compactor} + $c{other};
		$r->{cpu_per_m} = \%c;
	}
}
