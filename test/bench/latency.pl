#!/usr/bin/perl
# Percentiles of per-batch latency from pgbench --log files (or the COPY
# driver's, same format: the third field is the latency in microseconds).
# Prints "<p50_ms> <p99_ms> <count>" (nearest-rank percentiles).
#
#   latency.pl LOGFILE...
use strict;
use warnings;

my @lat;
for my $f (@ARGV)
{
	open(my $fh, '<', $f) or die "$f: $!";
	while (<$fh>)
	{
		my @f = split;
		push @lat, $f[2] if @f >= 3 && $f[2] =~ /^\d+$/;
	}
	close $fh;
}
if (!@lat)
{
	print "- - 0\n";
	exit 0;
}
@lat = sort { $a <=> $b } @lat;
sub pct
{
	my ($p) = @_;
	my $i = int($p * @lat + 0.999999) - 1;
	$i = 0 if $i < 0;
	return $lat[$i] / 1000.0;
}
printf "%.2f %.2f %d\n", pct(0.50), pct(0.99), scalar(@lat);
