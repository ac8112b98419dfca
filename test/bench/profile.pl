#!/usr/bin/perl
# Summarizes a perf recording of the server processes (test/bench/run
# --profile): the share of CPU samples per kind of process, then the top
# symbols of each kind that took at least 5% of the samples.  Markdown on
# stdout.
#
#   profile.pl PERF_DATA PIDMAP TITLE
#
# PIDMAP has one "<pid> <kind>" line per server process.
use strict;
use warnings;

my ($data, $pidmap, $title) = @ARGV;
die "usage: profile.pl PERF_DATA PIDMAP TITLE\n" unless $data && $pidmap;

my %kind;
open(my $fh, '<', $pidmap) or die "$pidmap: $!";
while (<$fh>)
{
	my ($pid, $k) = split;
	$kind{$pid} = $k if $k;
}
close $fh;

my (%share, %pids);
for (`perf report -i '$data' --no-children --sort pid --stdio -g none 2>/dev/null`)
{
	next unless /^\s*([\d.]+)%\s+(\d+):/;
	my $k = $kind{$2} // 'other';
	$share{$k} += $1;
	push @{$pids{$k}}, $2;
}
print "### Profile: $title\n\n";
print "perf record -F 499 -g on the server processes; share of all samples by kind of process, then each large kind's top symbols (self time, share of all samples).\n\n";
print "| kind of process | processes with samples | share of samples |\n|---|---:|---:|\n";
for my $k (sort { $share{$b} <=> $share{$a} } keys %share)
{
	printf "| %s | %d | %.1f%% |\n", $k, scalar @{$pids{$k}}, $share{$k};
}
print "\n";
for my $k (sort { $share{$b} <=> $share{$a} } keys %share)
{
	last if $share{$k} < 5;
	my $list = join(',', @{$pids{$k}});
	my @top;
	for (`perf report -i '$data' --no-children --pid '$list' --sort dso,symbol --stdio -g none 2>/dev/null`)
	{
		next unless /^\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(\S+)/;
		my ($pct, $dso, $sym) = ($1, $2, $3);
		$sym = "$dso:$sym" if $sym =~ /^0x/;
		push @top, sprintf('%s %.1f%%', $sym, $pct);
		last if @top >= 10;
	}
	printf "- %s (%.1f%%): %s\n", $k, $share{$k}, join(', ', @top);
}
print "\n";
