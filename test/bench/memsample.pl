#!/usr/bin/perl
# Samples the memory of a cluster's server processes: the postmaster and all
# its children, summing Pss from /proc/PID/smaps_rollup (proportional set
# size, so shared buffers touched by many processes count once), every
# INTERVAL seconds until SIGTERM.  After every sample it writes OUT:
#
#   <peak_kB> <first_kB> <samples>
#   <kind>=<kB> ...        (the peak sample by kind of process)
#
# The first sample is the baseline taken before the load starts.  Kinds are
# the process titles without numbers and states: "postmaster",
# "client_backend", "persist_sink_worker", "checkpointer"...
#
#   memsample.pl POSTMASTER_PID OUT [INTERVAL]
#   memsample.pl --kinds POSTMASTER_PID     (prints "<pid> <kind>" lines)
use strict;
use warnings;
use Time::HiRes qw(sleep);

if (@ARGV && $ARGV[0] eq '--kinds')
{
	our $pm = $ARGV[1];
	print map { "$_ " . kind($_) . "\n" } server_pids();
	exit 0;
}
our ($pm, $out, $interval) = @ARGV;
die "usage: memsample.pl POSTMASTER_PID OUT [INTERVAL]\n" unless $pm && $out;
$interval ||= 0.5;
my $stop = 0;
$SIG{TERM} = $SIG{INT} = sub { $stop = 1 };

my ($peak, $first, $samples, $peak_kinds) = (0, undef, 0, '');
while (1)
{
	my ($sum, $kinds) = sample();
	$first //= $sum;
	if ($sum > $peak)
	{
		$peak = $sum;
		$peak_kinds = join(' ', map { "$_=$kinds->{$_}" }
						   sort { $kinds->{$b} <=> $kinds->{$a} } keys %$kinds);
	}
	$samples++;
	if (open(my $fh, '>', "$out.tmp"))
	{
		print $fh "$peak $first $samples\n$peak_kinds\n";
		close $fh;
		rename("$out.tmp", $out);
	}
	last if $stop;
	sleep($interval);
}

sub kind
{
	my ($p) = @_;
	return 'postmaster' if $p == $pm;
	open(my $fh, '<', "/proc/$p/cmdline") or return 'other';
	my $cmd = <$fh> // '';
	close $fh;
	$cmd =~ s/\0.*//s;
	$cmd =~ s/^postgres:\s*//;
	return 'client_backend' if $cmd =~ /\[local\]|\d+\.\d+\.\d+\.\d+/;
	$cmd =~ s/\s+$//;
	$cmd =~ s/\s+(waiting|idle|\d+)\b.*$//;
	$cmd =~ s/\s+/_/g;
	return $cmd || 'other';
}

sub server_pids
{
	my @pids = ($pm);
	opendir(my $dh, '/proc') or return @pids;
	for my $p (grep { /^\d+$/ } readdir($dh))
	{
		open(my $fh, '<', "/proc/$p/stat") or next;
		my $stat = <$fh>;
		close $fh;
		next unless defined $stat;
		# pid (comm) state ppid ...: comm may hold spaces and parentheses
		$stat =~ s/^.*\)\s+//s;
		my (undef, $ppid) = split(/\s+/, $stat);
		push @pids, $p if $ppid == $pm;
	}
	closedir($dh);
	return @pids;
}

sub sample
{
	my ($sum, %kinds) = (0);
	for my $p (server_pids())
	{
		open(my $fh, '<', "/proc/$p/smaps_rollup") or next;
		while (<$fh>)
		{
			if (/^Pss:\s+(\d+)/)
			{
				$sum += $1;
				$kinds{kind($p)} += $1;
				last;
			}
		}
		close $fh;
	}
	return ($sum, \%kinds);
}
