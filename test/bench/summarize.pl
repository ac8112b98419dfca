#!/usr/bin/perl
# Turns the benchmark's measurements into the markdown report and the
# gnuplot data files.  Every figure is the median across rounds of the
# per-round values in measurements.tsv (written by test/bench/run).
#
#   summarize.pl MEASUREMENTS_TSV OUTDIR MAIN_CLIENTS
#
# Writes OUTDIR/sweep.dat (rows/s per system against concurrency) and
# OUTDIR/parts.dat (parts per append, shared and unshared, against
# concurrency) and prints the report's tables and the headline line.
use strict;
use warnings;

my ($tsv, $outdir, $main_c) = @ARGV;
die "usage: summarize.pl MEASUREMENTS_TSV OUTDIR MAIN_CLIENTS\n" unless $tsv && $outdir && $main_c;

my @systems = ('persist_sink shared', 'persist_sink keyed', 'persist_sink unshared', 'heap INSERT', 'COPY', 'PgQ');
my %sink = ('persist_sink shared' => 1, 'persist_sink keyed' => 1, 'persist_sink unshared' => 1);

open(my $fh, '<', $tsv) or die "$tsv: $!";
my $header = <$fh>;
chomp $header;
my @cols = split(/\t/, $header);
my %m;		# {workload}{clients}{system}{column} = [values per round]
while (<$fh>)
{
	chomp;
	my %r;
	@r{@cols} = split(/\t/);
	my $cell = $m{$r{workload}}{$r{clients}}{$r{system}} //= {};
	for my $c (@cols)
	{
		push @{$cell->{$c}}, $r{$c} if defined $r{$c} && $r{$c} ne '' && $r{$c} ne '-';
	}
	# derived per-round figures, so their medians are medians of ratios
	my $num = sub { defined $_[0] && $_[0] =~ /^-?\d+(?:\.\d+)?$/ };
	my $rows = $num->($r{rows}) ? $r{rows} : 0;
	push @{$cell->{wal_per_row}}, $r{wal_bytes} / $rows if $rows && $num->($r{wal_bytes});
	push @{$cell->{disk_per_row}}, $r{disk_bytes} / $rows if $rows && $num->($r{disk_bytes});
	push @{$cell->{client_cpu_per_m}}, $r{client_cpu_s} / $rows * 1e6 if $rows && $num->($r{client_cpu_s});
	if ($num->($r{mem_peak_kb}) && $r{mem_peak_kb} > 0)
	{
		push @{$cell->{mem_peak_mb}}, $r{mem_peak_kb} / 1024;
		push @{$cell->{mem_delta_mb}}, ($r{mem_peak_kb} - $r{mem_base_kb}) / 1024;
	}
	$cell->{round_secs}{$r{round}} = $r{seconds} if $num->($r{seconds});
	if ($num->($r{mem_peak_kb}) && (!defined $cell->{max_peak} || $r{mem_peak_kb} > $cell->{max_peak}))
	{
		$cell->{max_peak} = $r{mem_peak_kb};
		$cell->{max_kinds} = $r{mem_kinds} // '';
	}
	if ($sink{$r{system}} && $num->($r{appends}) && $r{appends} > 0)
	{
		push @{$cell->{parts_per_append}}, $r{parts} / $r{appends};
		push @{$cell->{state_per_append}}, $r{state_bytes} / $r{appends};
		push @{$cell->{blob_per_1000}}, $r{blob_puts} * 1000 / $r{updates} if $r{updates};
		push @{$cell->{state_per_update}}, $r{state_bytes} / $r{updates} if $r{updates};
	}
}
close $fh;

sub median
{
	my @v = sort { $a <=> $b } grep { defined && /^-?[\d.]+(?:e[-+]?\d+)?$/i } @_;
	return undef unless @v;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

sub med
{
	my ($w, $c, $s, $col) = @_;
	my $cell = $m{$w}{$c}{$s} or return undef;
	return median(@{$cell->{$col} || []});
}

sub nrounds
{
	my ($w, $c, $s) = @_;
	my $cell = $m{$w}{$c}{$s} or return 0;
	return scalar @{$cell->{rows_per_s} || []};
}

sub fmt
{
	my ($v, $digits) = @_;
	return '-' unless defined $v;
	return sprintf("%.${digits}f", $v);
}

sub int_fmt
{
	my ($v) = @_;
	return '-' unless defined $v;
	my $s = sprintf('%.0f', $v);
	1 while $s =~ s/^(\d+)(\d{3})/$1,$2/;
	return $s;
}

my @head = ('system', 'rows/s', 'p50 ms/batch', 'p99 ms/batch', 'parts/append',
			'blob rows/1000 updates', 'state bytes/append', 'WAL bytes/row',
			'disk bytes/row', 'client CPU s/M rows', 'peak server MB (+during run)', 'rounds');

sub table_rows
{
	my ($w, $c, $extra) = @_;
	my @out;
	my @h = @head;
	splice(@h, 2, 0, 'time s') if $extra;
	push @out, '| ' . join(' | ', @h) . ' |';
	push @out, '|' . join('|', map { $_ eq 'system' ? '---' : '---:' } @h) . '|';
	for my $s (@systems)
	{
		next unless $m{$w}{$c}{$s};
		my @v = ($s, int_fmt(med($w, $c, $s, 'rows_per_s')));
		push @v, fmt(med($w, $c, $s, 'seconds'), 2) if $extra;
		push @v, fmt(med($w, $c, $s, 'p50_ms'), 2), fmt(med($w, $c, $s, 'p99_ms'), 2),
			fmt(med($w, $c, $s, 'parts_per_append'), 2),
			fmt(med($w, $c, $s, 'blob_per_1000'), 2),
			int_fmt(med($w, $c, $s, 'state_per_append')),
			fmt(med($w, $c, $s, 'wal_per_row'), 1),
			fmt(med($w, $c, $s, 'disk_per_row'), 1),
			fmt(med($w, $c, $s, 'client_cpu_per_m'), 2),
			sprintf('%s (+%s)', int_fmt(med($w, $c, $s, 'mem_peak_mb')),
					int_fmt(med($w, $c, $s, 'mem_delta_mb'))),
			nrounds($w, $c, $s);
		push @out, '| ' . join(' | ', @v) . ' |';
	}
	return @out;
}

my @report;

# Workload 1 at the main concurrency
if ($m{small}{$main_c})
{
	push @report, "### Workload 1: $main_c clients x 1000-row batches (median of rounds)", '';
	push @report, table_rows('small', $main_c, 0), '';
}

# Workload 1 sweep
my @concs = sort { $a <=> $b } keys %{$m{small} || {}};
if (@concs)
{
	push @report, '### Workload 1 sweep: rows/s by clients (median of rounds)', '';
	push @report, '| system | ' . join(' | ', map { "$_ clients" } @concs) . ' |';
	push @report, '|---|' . join('|', map { '---:' } @concs) . '|';
	for my $s (@systems)
	{
		push @report, "| $s | " . join(' | ', map { int_fmt(med('small', $_, $s, 'rows_per_s')) } @concs) . ' |';
	}
	for my $s ('persist_sink shared', 'persist_sink unshared')
	{
		push @report, "| parts/append, $s | " . join(' | ', map { fmt(med('small', $_, $s, 'parts_per_append'), 2) } @concs) . ' |';
	}
	push @report, '';
	open(my $sw, '>', "$outdir/sweep.dat") or die "$outdir/sweep.dat: $!";
	print $sw 'clients' . join('', map { "\t\"$_\"" } @systems) . "\n";
	open(my $pa, '>', "$outdir/parts.dat") or die "$outdir/parts.dat: $!";
	print $pa "clients\t\"persist_sink shared\"\t\"persist_sink unshared\"\n";
	for my $c (@concs)
	{
		print $sw join("\t", $c, map { med('small', $c, $_, 'rows_per_s') // 'NaN' } @systems), "\n";
		print $pa join("\t", $c, map { med('small', $c, $_, 'parts_per_append') // 'NaN' }
					   'persist_sink shared', 'persist_sink unshared'), "\n";
	}
	close $sw;
	close $pa;
}

# Workload 2
for my $c (sort { $a <=> $b } keys %{$m{large} || {}})
{
	my $rows;
	for my $s (@systems)
	{
		$rows //= med('large', $c, $s, 'rows');
	}
	push @report, sprintf('### Workload 2: large load of %s rows, %d client%s (median of rounds)',
						  int_fmt($rows), $c, $c == 1 ? '' : 's'), '';
	push @report, table_rows('large', $c, 1), '';
}

# Workload 3
if ($m{read})
{
	my ($c) = keys %{$m{read}};
	push @report, '### Workload 3: reading back the large load (median of rounds)', '';
	push @report, '| system | rows/s (stored rows read) | time s | rows stored | rows returned | peak server MB (+during run) | rounds |';
	push @report, '|---|---:|---:|---:|---:|---:|---:|';
	for my $s ('persist_sink shared', 'heap INSERT')
	{
		next unless $m{read}{$c}{$s};
		my $label = $s eq 'heap INSERT' ? 'heap GROUP BY key, val HAVING sum(diff) <> 0' : 'persist_sink snapshot';
		push @report, join(' | ', "| $label", int_fmt(med('read', $c, $s, 'rows_per_s')),
						   fmt(med('read', $c, $s, 'seconds'), 2),
						   int_fmt(med('read', $c, $s, 'rows')),
						   int_fmt(med('read', $c, $s, 'returned')),
						   sprintf('%s (+%s)', int_fmt(med('read', $c, $s, 'mem_peak_mb')),
								   int_fmt(med('read', $c, $s, 'mem_delta_mb'))),
						   nrounds('read', $c, $s)) . ' |';
	}
	push @report, '';
}

# Where the memory is: the peak sample of the round with the highest peak
{
	my @lines;
	my @wl = (['small', $main_c, "workload 1, $main_c clients"]);
	push @wl, map { ['large', $_, "workload 2, $_ client" . ($_ == 1 ? '' : 's')] }
		sort { $a <=> $b } keys %{$m{large} || {}};
	push @wl, map { ['read', $_, 'workload 3'] } keys %{$m{read} || {}};
	for my $wl (@wl)
	{
		my ($w, $c, $label) = @$wl;
		for my $s (@systems)
		{
			my $cell = $m{$w}{$c}{$s} or next;
			next unless $cell->{max_peak} && $cell->{max_kinds};
			my @k = map { my ($n, $v) = split /=/; sprintf('%s %.0f', $n, $v / 1024) }
				grep { /=/ } split(/\s+/, $cell->{max_kinds});
			@k = @k[0 .. 3] if @k > 4;
			push @lines, sprintf('| %s | %s | %.0f | %s |', $label, $s, $cell->{max_peak} / 1024, join(', ', @k));
		}
	}
	if (@lines)
	{
		push @report, '### Peak server memory by kind of process (PSS MB at the peak sample of the highest round)', '';
		push @report, '| workload | system | total | largest kinds |', '|---|---|---:|---|', @lines, '';
	}
}

# Headline
sub ratio
{
	my ($a, $b, $digits) = @_;
	return 'n/a' unless defined $a && defined $b && $b != 0;
	return sprintf("%.${digits}fx", $a / $b);
}

sub fewer
{
	my ($a, $b) = @_;
	return 'n/a' unless defined $a && defined $b && $b != 0;
	return sprintf('%.0f%% fewer', (1 - $a / $b) * 100);
}

sub slower
{
	my ($a, $b) = @_;
	return 'n/a' unless defined $a && defined $b && $b != 0;
	return sprintf('%+.1f%%', ($a / $b - 1) * 100);
}

my ($S, $U, $H, $C) = ('persist_sink shared', 'persist_sink unshared', 'heap INSERT', 'COPY');
my $rs = med('small', $main_c, $S, 'rows_per_s');
my @h;
push @h, sprintf('sink rows/s %s heap INSERT, %s COPY, %s PgQ (%d clients)',
				 ratio($rs, med('small', $main_c, $H, 'rows_per_s'), 2),
				 ratio($rs, med('small', $main_c, $C, 'rows_per_s'), 2),
				 ratio($rs, med('small', $main_c, 'PgQ', 'rows_per_s'), 2), $main_c);
push @h, sprintf('with idempotency keys %s without (rows/s), %s disk bytes/row',
				 ratio(med('small', $main_c, 'persist_sink keyed', 'rows_per_s'), $rs, 2),
				 ratio(med('small', $main_c, 'persist_sink keyed', 'disk_per_row'),
					   med('small', $main_c, $S, 'disk_per_row'), 2));
push @h, sprintf('unshared %s heap INSERT', ratio(med('small', $main_c, $U, 'rows_per_s'),
												   med('small', $main_c, $H, 'rows_per_s'), 2));
push @h, sprintf('parts/append %s shared vs %s unshared',
				 fmt(med('small', $main_c, $S, 'parts_per_append'), 2),
				 fmt(med('small', $main_c, $U, 'parts_per_append'), 2));
push @h, sprintf('blob writes %s', fewer(med('small', $main_c, $S, 'blob_per_1000'),
										 med('small', $main_c, $U, 'blob_per_1000')));
push @h, sprintf('state bytes per append %s', fewer(med('small', $main_c, $S, 'state_per_append'),
												   med('small', $main_c, $U, 'state_per_append')));
push @h, sprintf('state bytes per update %s', fewer(med('small', $main_c, $S, 'state_per_update'),
												   med('small', $main_c, $U, 'state_per_update')));
push @h, sprintf('WAL/row %s heap', ratio(med('small', $main_c, $S, 'wal_per_row'),
										  med('small', $main_c, $H, 'wal_per_row'), 2));
push @h, sprintf('disk/row %s heap', ratio(med('small', $main_c, $S, 'disk_per_row'),
										   med('small', $main_c, $H, 'disk_per_row'), 2));
# Shared vs unshared time per round (the two run one after the other in
# each round, so drift hits both alike): the median of the per-round ratios.
sub paired
{
	my ($w, $c) = @_;
	my ($x, $y) = map { $m{$w}{$c}{$_} ? $m{$w}{$c}{$_}{round_secs} : undef } ($S, $U);
	return 'n/a' unless $x && $y;
	my @r = map { $x->{$_} / $y->{$_} - 1 } grep { exists $y->{$_} && $y->{$_} > 0 } sort { $a <=> $b } keys %$x;
	return 'n/a' unless @r;
	return sprintf('%+.1f%% (rounds %s)', median(@r) * 100, join(' ', map { sprintf('%+.1f%%', $_ * 100) } @r));
}
for my $c (sort { $a <=> $b } keys %{$m{large} || {}})
{
	push @h, sprintf('large load (%d client%s) shared vs unshared time %s by medians, %s paired by round, sink vs heap INSERT time %s, vs COPY %s',
					 $c, $c == 1 ? '' : 's',
					 slower(med('large', $c, $S, 'seconds'), med('large', $c, $U, 'seconds')),
					 paired('large', $c),
					 ratio(med('large', $c, $S, 'seconds'), med('large', $c, $H, 'seconds'), 2),
					 ratio(med('large', $c, $S, 'seconds'), med('large', $c, $C, 'seconds'), 2));
}
if ($m{read})
{
	my ($c) = keys %{$m{read}};
	push @h, sprintf('snapshot time %s heap GROUP BY',
					 ratio(med('read', $c, $S, 'seconds'), med('read', $c, $H, 'seconds'), 2));
}
push @report, 'headline: ' . join('; ', @h);
print join("\n", @report), "\n";
