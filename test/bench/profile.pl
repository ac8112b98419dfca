#!/usr/bin/perl
# Summarizes a perf recording of the server processes (test/bench/run
# --profile): the share of CPU samples per kind of process; then, for each
# kind that took at least 5% of them, the share of its samples spent under
# the steps of the sink (inclusive: a sample counts for every step on its
# call chain) and its top symbols (self time).  Markdown on stdout.
#
#   profile.pl PERF_DATA PIDMAP TITLE
#
# PIDMAP has one "<pid> <kind>" line per server process.  The samples are
# read with perf script and assigned to processes here: perf report's --pid
# filter let other processes' samples through on this kernel.  libzstd has
# no frame pointers, so its samples are told by their library and do not
# count for the steps that called it.
use strict;
use warnings;

my ($data, $pidmap, $title) = @ARGV;
die "usage: profile.pl PERF_DATA PIDMAP TITLE\n" unless $data && $pidmap;

# The steps shown, in order: label, then the frames that mark them
my @steps = (
	['zstd (self)', 'dso:libzstd'],
	['kernel (self)', 'dso:[kernel.kallsyms]'],
	['writing blob rows (ps_blob_put_all)', 'ps_blob_put_all'],
	['  of it, TOAST (toast_save_datum)', 'toast_save_datum'],
	['  of it, extending the relation (mdextend)', 'mdextend'],
	['reading blob rows (ps_blob_get)', 'ps_blob_get'],
	['deleting blob rows (ps_blob_delete)', 'ps_blob_delete'],
	['merging (merge_step)', 'merge_step'],
	['reading states (ps_consensus_read)', 'ps_consensus_read'],
	['  of it, rebuilding from the row (read_stored)', 'read_stored'],
	['encoding (ps_part_encode, without zstd)', 'ps_part_encode'],
	['decoding (ps_part_decode, without zstd)', 'ps_part_decode'],
	['sorting (sort_updates)', 'sort_updates'],
	['appending (ps_append)', 'ps_append'],
	['detoasting (detoast_attr)', 'detoast_attr'],
	['WAL insertion (XLogInsert)', 'XLogInsert'],
	['WAL flush (XLogFlush)', 'XLogFlush'],
	['writing dirty buffers (FlushBuffer)', 'FlushBuffer'],
	['waiting (epoll_wait)', 'epoll_wait'],
);

my %kind;
open(my $fh, '<', $pidmap) or die "$pidmap: $!";
while (<$fh>)
{
	my ($pid, $k) = split;
	$kind{$pid} = $k if $k;
}
close $fh;
$kind{0} //= 'idle';

my (%total, %pids, %step_hits, %self, $all);
my ($pid, $first, %on_chain);

# Counts the sample just read, if any.
sub count_sample
{
	return unless defined $pid;
	my $k = $kind{$pid} // 'other';
	$total{$k}++;
	$all++;
	$pids{$k}{$pid} = 1;
	$self{$k}{$first}++ if defined $first;
	$step_hits{$k}{$_}++ for keys %on_chain;
	($pid, $first, %on_chain) = (undef, undef);
}

open(my $ps, '-|', 'perf', 'script', '-i', $data, '-F', 'pid,ip,sym,dso')
  or die "perf script: $!";
while (<$ps>)
{
	if (/^\s*(\d+)\s*$/)
	{
		count_sample();
		$pid = $1;
		next;
	}
	next unless defined $pid && /^\s+[0-9a-f]+\s+(\S+).*\((.*)\)\s*$/;
	my ($sym, $dso) = ($1, $2);
	my $lib = $dso =~ m{([^/]+?)(?:\.so[.\d]*)?$} ? $1 : $dso;
	if (!defined $first)
	{
		$first = $sym eq '[unknown]' ? "$lib:[unknown]" : $sym;
		$on_chain{"dso:$lib"} = 1;
	}
	$on_chain{$sym} = 1;
}
count_sample();
close $ps;
die "no samples in $data\n" unless $all;

print "### Profile: $title\n\n";
print "perf record -F 499 -g; share of all samples by kind of process, then for each large kind the share of its own samples under each step of the sink (inclusive) and its top symbols (self).\n\n";
print "| kind of process | processes with samples | share of samples |\n|---|---:|---:|\n";
my @kinds = sort { $total{$b} <=> $total{$a} } keys %total;
printf "| %s | %d | %.1f%% |\n", $_, scalar keys %{$pids{$_}}, 100 * $total{$_} / $all for @kinds;
print "\n";
for my $k (@kinds)
{
	last if $total{$k} / $all < 0.05;
	my $n = $total{$k};
	my @shown = grep { ($step_hits{$k}{$_->[1]} // 0) / $n >= 0.01 } @steps;
	printf "- %s (%.1f%% of all samples)\n", $k, 100 * $n / $all;
	for my $s (@shown)
	{
		my ($indent, $label) = $s->[0] =~ /^(\s*)(.*)$/;
		printf "  %s- %s: %.1f%%\n", $indent x 2, $label, 100 * $step_hits{$k}{$s->[1]} / $n;
	}
	my @top = (sort { $self{$k}{$b} <=> $self{$k}{$a} } keys %{$self{$k}})[0 .. 9];
	printf "  - top symbols: %s\n",
	  join(', ', map { sprintf('%s %.1f%%', $_, 100 * $self{$k}{$_} / $n) } grep { defined } @top);
}
print "\n";
