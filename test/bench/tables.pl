#!/usr/bin/perl
# The tables workload's report tables (test/bench/run --only tables).
#
#   tables.pl copy TSV
#       TSV: one line per COPY run (system, batch_rows, clients, ...; the
#       header names the columns).  Prints the markdown of the COPY
#       comparison: rows/s of every system side by side per batch size and
#       client count, with the sink's ratios to the heap tables, then every
#       run's details.
#
#   tables.pl lookup TSV
#       TSV: one line per query and system (query, system, runs, p50_ms,
#       p95_ms, max_ms, mean_ms, plan).  Prints the markdown table of the
#       point lookups and full scans.
#
#   tables.pl stats FILE
#       FILE: one latency (ms) a line.  Prints "<count> <p50> <p95> <max>
#       <mean>" (nearest-rank percentiles), as tables_lookup.pl does.
use strict;
use warnings;

my $mode = shift // '';
if ($mode eq 'copy') { copy_report(@ARGV) }
elsif ($mode eq 'lookup') { lookup_report(@ARGV) }
elsif ($mode eq 'stats') { stats(@ARGV) }
else { die "usage: tables.pl copy TSV | lookup TSV | stats FILE\n" }

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
		my @f = split /\t/, $_, -1;
		my %r;
		@r{@cols} = @f;
		push @rows, \%r;
	}
	close $fh;
	return @rows;
}

# 1234567 -> 1,234,567
sub commas
{
	my ($n) = @_;
	return $n unless defined $n && $n =~ /^-?\d+(\.\d+)?$/;
	my $s = sprintf('%.0f', $n);
	1 while $s =~ s/^(-?\d+)(\d{3})/$1,$2/;
	return $s;
}

sub ratio
{
	my ($a, $b) = @_;
	return '-' unless defined $a && defined $b && $b =~ /^[\d.]+$/ && $b > 0 && $a =~ /^[\d.]+$/;
	my $r = $a / $b;
	# two significant digits below 0.1, so that small ratios do not read 0.00x
	return $r > 0 && $r < 0.1 ? sprintf('%.2gx', $r) : sprintf('%.2fx', $r);
}

sub per_row
{
	my ($v, $rows, $scale) = @_;
	return '-' unless defined $v && $v =~ /^[\d.]+$/ && $rows > 0;
	return sprintf($scale ? '%.2f' : '%.0f', $v / $rows * ($scale || 1));
}

sub copy_report
{
	my ($file) = @_;
	my @runs = read_tsv($file);
	my (@systems, %seen, %rps, @configs, %cseen);
	for my $r (@runs)
	{
		push @systems, $r->{system} unless $seen{ $r->{system} }++;
		my $c = "$r->{batch_rows}\t$r->{clients}";
		push @configs, $c unless $cseen{$c}++;
		$rps{$c}{ $r->{system} } = $r->{rows_per_s};
	}
	my ($sink) = grep { /^persist_sink/ } @systems;
	my @base = grep { !/^persist_sink/ } @systems;
	print "| rows per COPY | clients | ", join(' | ', map { "$_ rows/s" } @systems);
	print " | ", join(' | ', map { "sink / $_" } @base) if $sink;
	print " |\n|---:|---:|", join('', map { '---:|' } @systems);
	print join('', map { '---:|' } @base) if $sink;
	print "\n";
	for my $c (@configs)
	{
		my ($rows, $clients) = split /\t/, $c;
		print "| ", commas($rows), " | $clients | ",
		  join(' | ', map { commas($rps{$c}{$_} // '-') } @systems);
		print " | ", join(' | ', map { ratio($rps{$c}{$sink}, $rps{$c}{$_}) } @base) if $sink;
		print " |\n";
	}
	print "\n";
	print "Every run:\n\n";
	print "| system | rows per COPY | clients | COPY statements | rows | s | rows/s | p50 ms | p99 ms | checkpoints | WAL bytes/row | disk bytes/row | client CPU s/M rows |\n";
	print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	for my $r (@runs)
	{
		printf "| %s | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s |\n",
		  $r->{system}, commas($r->{batch_rows}), $r->{clients}, commas($r->{copies}),
		  commas($r->{rows}), $r->{seconds}, commas($r->{rows_per_s}), $r->{p50_ms},
		  $r->{p99_ms}, $r->{checkpoints}, per_row($r->{wal_bytes}, $r->{rows}),
		  per_row($r->{disk_bytes}, $r->{rows}), per_row($r->{client_cpu_s}, $r->{rows}, 1e6);
	}
}

sub lookup_report
{
	my ($file) = @_;
	# the lookups first, then the full scans
	my @rows = read_tsv($file);
	@rows = ((grep { $_->{query} eq 'lookup' } @rows), (grep { $_->{query} ne 'lookup' } @rows));
	my ($btree) = grep { $_->{query} eq 'lookup' && $_->{system} =~ /btree/ } @rows;
	my %scan = map { ($_->{system} =~ /^persist_sink/ ? 'sink' : 'heap') => $_ }
	  grep { $_->{query} eq 'count' } @rows;
	print "| query | system | runs | median ms | p95 ms | max ms | mean ms | median vs heap + btree lookup | median vs count(*) of the same rows | plan |\n";
	print "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
	for my $r (@rows)
	{
		my $q = $r->{query} eq 'lookup' ? '`SELECT * FROM t WHERE key = $1`' : '`SELECT count(*) FROM t`';
		my $scan = $scan{ $r->{system} =~ /^persist_sink/ ? 'sink' : 'heap' };
		my $vs_scan = $r->{query} eq 'lookup' && $scan ? ratio($r->{p50_ms}, $scan->{p50_ms}) : '-';
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		  $q, $r->{system}, $r->{runs}, fmt_ms($r->{p50_ms}), fmt_ms($r->{p95_ms}),
		  fmt_ms($r->{max_ms}), fmt_ms($r->{mean_ms}),
		  $btree && $r->{query} eq 'lookup' ? ratio($r->{p50_ms}, $btree->{p50_ms}) : '-', $vs_scan, $r->{plan};
	}
}

sub fmt_ms
{
	my ($v) = @_;
	return $v unless defined $v && $v =~ /^[\d.]+$/;
	return sprintf($v >= 100 ? '%.0f' : $v >= 1 ? '%.1f' : '%.3f', $v);
}

sub stats
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "$file: $!";
	my @s = sort { $a <=> $b } grep { /^[\d.]+$/ } map { chomp; $_ } <$fh>;
	close $fh;
	die "$file: no figures\n" unless @s;
	my $pct = sub {
		my $i = int($_[0] * @s + 0.999999) - 1;
		return $s[ $i < 0 ? 0 : $i ];
	};
	my $sum = 0;
	$sum += $_ for @s;
	printf "%d %.3f %.3f %.3f %.3f\n", scalar(@s), $pct->(0.50), $pct->(0.95), $s[-1], $sum / @s;
}
