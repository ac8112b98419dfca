#!/usr/bin/perl
#
# Copyright (c) persist_sink contributors
#
# Sums a server log's DEBUG1 merge lines (log_min_messages = debug1; see
# Observability in the README) by the encoded bytes each merge rewrote, in
# powers of two: merges, updates rewritten, and the most common shapes as
# "listed runs/rewritten batches".  Merges that only list are counted on a
# line of their own.  Dividing the total by the rows written gives the
# rewrites per row, and the lines show at which sizes they happen.
#
#	perl test/bench/merge_log.pl server.log

use strict;
use warnings;

my (%merges, %updates, %shapes);
my ($total, $listing_only) = (0, 0);
while (<>)
{
	next
	  unless /merged batches \d+ to \d+ of \d+ of shard .*: listed runs (\d+), rewritten batches (\d+), updates (\d+), bytes (\d+)$/;
	my ($listed, $rewritten, $n, $bytes) = ($1, $2, $3, $4);
	if ($rewritten == 0)
	{
		$listing_only++;
		next;
	}
	my $class = int(log($bytes + 1) / log(2));
	$merges{$class}++;
	$updates{$class} += $n;
	$shapes{$class}{"$listed/$rewritten"}++;
	$total += $n;
}
printf "merges that only list: %d\n", $listing_only;
for my $class (sort { $a <=> $b } keys %merges)
{
	my $s = $shapes{$class};
	my @common = (sort { $s->{$b} <=> $s->{$a} || $a cmp $b } keys %$s)[0 .. 4];
	printf "rewrote 2^%d to 2^%d bytes: %5d merges, %8.1fM updates; %s\n",
	  $class, $class + 1, $merges{$class}, $updates{$class} / 1e6,
	  join(' ', map { "$_ x$s->{$_}" } grep { defined } @common);
}
printf "updates rewritten: %.1fM\n", $total / 1e6;
