#!/usr/bin/perl
# The model of the history checker: reads the driver's history (every
# append() call and its outcome) and what the shards hold at the end, and
# checks each write against the outcome table of the design ("One outcome
# per write").
#
# Usage: check.pl HISTORY CONTENT VERIFY [SERVER_LOG [CONSUMERS]]
#   HISTORY  the driver's output (see driver.c)
#   CONTENT  per shard, write and time: "shard wid time rows diff_sum
#            diff_min diff_max bad_vals" (tab separated), from listen()
#            from since - 1 (what is before since comes at since)
#   VERIFY   "shard problem" lines of verify() (empty when healthy)
#   SERVER_LOG  the server's log: processes that died of a signal the run
#            did not send are counted
#   CONSUMERS  what test/history/run found at the end (tab separated):
#            "shard name since upper"; "reader hcN shard position rows
#            duplicated mismatched past_position" (the consumer's table:
#            (key, val, time) present more than once, (key, val) whose
#            summed diffs differ from snapshot() as of the position, rows
#            at times past it); "dup hcN key val time count" and "mismatch
#            hcN key val consumed snapshot" (the first few); "wid hcN shard
#            wid time rows diff_sum" (the table per write and time)
#
# A write is one logical append: its content (keys "<wid>-<row>") and, if
# keyed, its idempotency key.  Its calls are chains of attempts: a keyed
# call that ends in 40003 or with the connection lost is retried with the
# same key and content until it has a definite outcome; an equal-content
# race sends the same write from two clients (two chains).  Per chain, the
# final attempt decides:
#   a time             acked: the write is in its shard exactly once, at
#                      that time
#   an error, not 40003 (57014, PS005, ...)
#                      not written: the write is absent; but a bare 57014
#                      (no "Nothing of this append ... was written": the
#                      statement was cancelled before the call looked its
#                      key up) after an attempt of the chain ended unknown
#                      (40003, connection lost) is maybe
#   40003 (unkeyed, or retries exhausted), connection lost or FATAL
#                      maybe: absent or present once, never more
# A write sent as an INSERT into its shard's foreign table (W's via
# "table") is acked without a time: it must be present once, and the time
# it is found at stands for the acked one.
# A write whose chains disagree: any acked chain makes it "acked" (all acked
# chains must give one time); else any maybe chain makes it "maybe"; else
# it is "not written".
# Besides: no write is ever partly present or present at two times; of two
# writes sharing a key with other content at most one is present, and a
# PS005 means the other is present; a write that starts after another write
# of its shard was acked gets a greater time; PS005 appears only where two
# contents share a key; every error's SQLSTATE is one the faults explain
# (57014, 40003, PS005); verify() finds no problem.
#
# On a shard whose since moved (the consumers' shards), listen() returns
# what is before since summed at since: a write found there went in at
# since or before, and its time is taken from a consumer's table (where
# each update keeps its own time: a reader reads only times past its
# position, and since never passes it); failing that, an acked time at or
# before since is accepted and the write is left out of the time order.
#
# Consumers (the R, C, P, D and E lines of the history, and CONSUMERS):
# a step that committed (ok) applied what it read exactly once, so a
# consumer's table holds no (key, val, time) twice ("duplicated") and,
# once drained, sums per (key, val) to the shard's snapshot as of the
# reader's position ("consumed lost or doubled", or rows past the
# position); each write is in it at one time, its acked time, or the time
# the shard holds it at ("consumed at a wrong time"); a committed step
# reads only times after every position known committed before it was
# sent (the last time of an earlier committed step, a position sampled),
# and a sampled position is never below such a position ("position moved
# back"); each since sampled right after downgrade_since is at most each
# reader's position read after it, but for a reader still at since - 1
# where it was created, having seen nothing ("since past a reader"); the
# only error of a step is 57014 (timeout, cancel), of downgrade_since or
# compact() none ("wrong error"); every consumer ends drained, at upper - 1
# ("not drained").
#
# Table readers (the T lines): each check compared a foreign table's read
# shortcut with the plain scan and snapshot() in one REPEATABLE READ
# snapshot; a difference is "reads wrong", an error other than PS002,
# PS003 or PS004 raised alike on every path is "reads error" (as is a
# failed write to hr or COMMIT); a transaction lost to a fault (57014,
# 40003, a lost connection) is counted, not judged.  The EXPLAIN ANALYZE lines count how the
# wrapper computed aggregates (from the state, from a merge).
use strict;
use warnings;

my ($history, $content, $verify, $serverlog, $consumers) = @ARGV;
die "usage: check.pl HISTORY CONTENT VERIFY [SERVER_LOG [CONSUMERS]]\n" unless defined $verify;

my (%w, %stat, %faults, @unexpected);
my (%cons, @samples, @control_errors, %cons_terminates, @reads);
my %expected_err = map { $_ => 1 } qw(57014 40003 PS005);

open my $h, '<', $history or die "$history: $!\n";
while (<$h>)
{
	chomp;
	my @f = split /\t/;
	if ($f[0] eq 'W')
	{
		my (undef, $wid, $shard, $key, $nrows, $kind, $group, $gtype, $via) = @f;
		$w{$wid} = {
			wid => $wid, shard => $shard, key => $key, nrows => $nrows,
			kind => $kind, group => $group, gtype => $gtype, via => $via // 'append',
			chains => {}, found => [] };
	}
	elsif ($f[0] eq 'A')
	{
		my (undef, $wid, $client, $attempt, $send, $recv, $tmo, $cancel, $outcome, $value, $msg) = @f;
		my $wr = $w{$wid} or die "attempt of an unknown write $wid\n";
		push @{ $wr->{chains}{$client} }, {
			client => $client, attempt => $attempt, send => $send, recv => $recv,
			timeout => $tmo, cancel => $cancel, outcome => $outcome,
			value => $value, msg => $msg };
	}
	elsif ($f[0] eq 'R')
	{
		my (undef, $cid, $shard, $reader, $pos) = @f;
		$cons{$cid} = { cid => $cid, shard => $shard, reader => $reader, init => $pos, steps => [] };
	}
	elsif ($f[0] eq 'C')
	{
		my (undef, $cid, $step, $phase, $send, $recv, $tmo, $cancel, $max, $wait, $outcome, $value, $lo, $hi, $n, $msg) = @f;
		my $k = $cons{$cid} or die "step of an unknown consumer $cid\n";
		push @{ $k->{steps} }, {
			step => $step, phase => $phase, send => $send, recv => $recv, timeout => $tmo,
			cancel => $cancel, max => $max, wait => $wait, outcome => $outcome, value => $value,
			lo => $lo, hi => $hi, n => $n, msg => $msg };
	}
	elsif ($f[0] eq 'P')
	{
		my (undef, $shard, $send, $recv, $upper, $since, $positions) = @f;
		my %pos = $positions eq '-' ? () : map { split /=/, $_, 2 } split /,/, $positions;
		push @samples, { shard => $shard, send => $send, recv => $recv, upper => $upper, since => $since, pos => \%pos };
	}
	elsif ($f[0] eq 'D')
	{
		my (undef, $cid, $shard, $reader, $pos, $since, $upper) = @f;
		$cons{$cid}{final} = { pos => $pos, since => $since, upper => $upper };
	}
	elsif ($f[0] eq 'E')
	{
		my (undef, $kind, $at, $outcome, $value, $msg) = @f;
		push @control_errors, { kind => $kind, at => $at, outcome => $outcome, value => $value, msg => $msg };
	}
	elsif ($f[0] eq 'T')
	{
		my (undef, $rid, $at, $check, $shard, $as_of, $outcome, $detail) = @f;
		$detail =~ s/\s+$//;
		push @reads, { rid => $rid, at => $at, check => $check, shard => $shard, as_of => $as_of,
			outcome => $outcome, detail => $detail };
	}
	elsif ($f[0] eq 'F')
	{
		$faults{$f[1]}++;
		$cons_terminates{$1}++ if $f[1] eq 'terminate' && $f[3] =~ /^consumer (\d+)/;
	}
	elsif ($f[0] eq 'S')
	{
		$stat{$f[1]} = $f[2];
	}
}
close $h;

my (%phantom, %wrongshard);
open my $c, '<', $content or die "$content: $!\n";
while (<$c>)
{
	chomp;
	my ($shard, $wid, $time, $rows, $sum, $min, $max, $bad) = split /\t/;
	my $wr = $w{$wid};
	if (!$wr)
	{
		$phantom{"$shard/$wid"} += $rows;
		next;
	}
	push @{ $wr->{found} }, {
		shard => $shard, time => $time, rows => $rows, sum => $sum,
		min => $min, max => $max, bad => $bad };
}
close $c;

# what the run found of the consumers and the shards' since
my (%shard_since, %shard_upper, %final_table, @cons_dup, @cons_mis, %consumed);
if (defined $consumers)
{
	open my $cf, '<', $consumers or die "$consumers: $!\n";
	while (<$cf>)
	{
		chomp;
		my @f = split /\t/;
		if ($f[0] eq 'shard') { $shard_since{ $f[1] } = $f[2]; $shard_upper{ $f[1] } = $f[3] }
		elsif ($f[0] eq 'reader')
		{
			$final_table{ $f[1] } = { shard => $f[2], pos => $f[3], rows => $f[4], dup => $f[5], mis => $f[6], past => $f[7] };
		}
		elsif ($f[0] eq 'dup') { push @cons_dup, \@f }
		elsif ($f[0] eq 'mismatch') { push @cons_mis, \@f }
		elsif ($f[0] eq 'wid')
		{
			my (undef, $reader, $shard, $wid, $time, $rows, $sum) = @f;
			push @{ $consumed{$reader}{$wid} }, { time => $time, rows => $rows, sum => $sum };
		}
	}
	close $cf;
}

# a write found at its shard's since (since moved): its time from a
# consumer of that shard, if they agree on one time at or before since
my ($times_from_consumers, $times_unknown) = (0, 0);
for my $wr (values %w)
{
	for my $f (@{ $wr->{found} })
	{
		my $since = $shard_since{ $f->{shard} } // 0;
		next unless $since > 0 && $f->{time} == $since;
		my %t;
		for my $k (values %cons)
		{
			next unless $k->{shard} eq $f->{shard};
			$t{ $_->{time} } = 1 for @{ $consumed{ $k->{reader} }{ $wr->{wid} } // [] };
		}
		my @t = keys %t;
		$f->{at_since} = $since;
		if (@t == 1 && $t[0] <= $since)
		{
			$f->{time} = $t[0];
			$times_from_consumers++;
		}
		else
		{
			$f->{uncertain} = 1;
			$times_unknown++;
		}
	}
}

my @verify;
open my $v, '<', $verify or die "$verify: $!\n";
while (<$v>)
{
	chomp;
	push @verify, $_ if length;
}
close $v;

# ---------------------------------------------------------------------
# per call: outcomes by kind

my (%by, $calls, $retries);
for my $wr (values %w)
{
	for my $chain (values %{ $wr->{chains} })
	{
		for my $a (@$chain)
		{
			$calls++;
			$retries++ if $a->{attempt} > 1;
			my $k = $a->{outcome} eq 'ok' ? 'acked'
			  : $a->{outcome} eq 'lost' ? 'connection lost or FATAL'
			  : $a->{value};
			$by{$k}++;
			if ($a->{outcome} eq 'err'
				&& (!$expected_err{ $a->{value} }
					|| ($a->{value} eq 'PS005' && $wr->{gtype} ne 'd')))
			{
				push @unexpected, [ $wr, $a ];
			}
		}
	}
}

# ---------------------------------------------------------------------
# per write

my (%count, %vio, @details, $passed, $failed);
$passed = $failed = 0;

sub violation
{
	my ($kind, $text) = @_;
	$vio{$kind}++;
	push @details, "$kind: $text";
}

my %group_of;	# race group -> its writes

sub describe
{
	my ($wr, $nested) = @_;
	my @chains;
	for my $cl (sort keys %{ $wr->{chains} })
	{
		push @chains, "client $cl: " . join(', ', map {
			my $s = "#$_->{attempt} " . ($_->{outcome} eq 'ok' ? "time $_->{value}" : "$_->{outcome} $_->{value}");
			$s .= " (timeout $_->{timeout} ms)" if $_->{timeout};
			$s .= " (cancelled after $_->{cancel} ms)" if $_->{cancel} >= 0;
			$s .= " [$_->{msg}]" if $_->{outcome} ne 'ok' && $_->{msg} ne '-';
			$s } @{ $wr->{chains}{$cl} });
	}
	my $found = @{ $wr->{found} }
	  ? join(', ', map { "$_->{rows} rows (diff sum $_->{sum}) at time "
			. ($_->{uncertain} ? "$_->{time} (since: that time or before)" : $_->{time})
			. ($_->{at_since} && !$_->{uncertain} ? " (a consumer's; at since $_->{at_since} in the shard)" : '')
			. " in $_->{shard}" } @{ $wr->{found} })
	  : 'nothing';
	my $text = sprintf("write %s (%s%s, %d rows, shard %s, key %s%s): calls %s; found %s",
		$wr->{wid}, $wr->{kind}, $wr->{via} eq 'table' ? ', through the foreign table' : '',
		$wr->{nrows}, $wr->{shard}, $wr->{key},
		$wr->{group} ? ", race $wr->{group} " . ($wr->{gtype} eq 'e' ? 'equal content' : 'other content') : '',
		join('; ', @chains), $found);
	if ($wr->{gtype} eq 'd' && !$nested)
	{
		$text .= " | the key's other write: " . describe($_, 1)
		  for grep { $_ != $wr } @{ $group_of{ $wr->{group} } };
	}
	return $text;
}

push @{ $group_of{ $_->{group} } }, $_ for grep { $_->{gtype} eq 'd' } values %w;

my %acked_of;	# wid -> acked time
my %present;	# wid -> the time it was found at
my %uncertain;	# wid -> 1: found at since, its time not known
for my $wr (sort { $a->{wid} <=> $b->{wid} } values %w)
{
	my @chains = values %{ $wr->{chains} };
	next unless @chains;	# never sent (the run ended first)
	my (%acked, @definite, $maybe, $retried);
	for my $chain (@chains)
	{
		my @att = sort { $a->{attempt} <=> $b->{attempt} } @$chain;
		my $last = $att[-1];
		$retried = 1 if @att > 1;
		my $unknown_before = grep { $_->{outcome} eq 'lost' || $_->{value} eq '40003' } @att[0 .. $#att - 1];
		my $bare_cancel = $last->{outcome} eq 'err' && $last->{value} eq '57014'
		  && $last->{msg} !~ /Nothing of this append/;
		if ($last->{outcome} eq 'ok') { $acked{ $last->{value} }++ }
		elsif ($last->{outcome} eq 'err' && $last->{value} ne '40003' && !($unknown_before && $bare_cancel))
		{
			push @definite, $last->{value};
		}
		else { $maybe = 1 }
	}
	my $verdict = %acked ? 'acked' : $maybe ? 'maybe' : 'not written';
	$count{$verdict}++;

	# what is there: copies, at which times
	my ($copies, @times, $ok, $before) = (0);
	$ok = 1;
	for my $f (@{ $wr->{found} })
	{
		if ($f->{shard} ne "$wr->{shard}")
		{
			violation('wrong shard', describe($wr));
			$ok = 0;
		}
		if ($f->{rows} != $wr->{nrows} || $f->{min} != $f->{max} || $f->{min} < 1)
		{
			violation('torn', describe($wr));
			$ok = 0;
			next;
		}
		if ($f->{bad})
		{
			violation('corrupt values', describe($wr));
			$ok = 0;
		}
		$copies += $f->{min};
		push @times, $f->{time};
		$before = $f->{time} if $f->{uncertain};
	}
	$present{ $wr->{wid} } = $times[0] if $copies >= 1;
	$uncertain{ $wr->{wid} } = 1 if defined $before;
	if ($verdict eq 'acked')
	{
		# an INSERT into a foreign table is acked without its time ("-"):
		# it must be present once, at the time it is found at
		my @t = do { my %u = map { ($_ eq '-' ? $times[0] // '-' : $_) => 1 } keys %acked; keys %u };
		$acked_of{ $wr->{wid} } = $t[0];
		if (@t > 1)
		{
			violation('one write, two acked times', describe($wr));
			$ok = 0;
		}
		if ($copies == 0)
		{
			violation('lost', describe($wr));
			$ok = 0;
		}
		elsif ($copies > 1)
		{
			violation('doubled', describe($wr));
			$ok = 0;
		}
		elsif (!grep { $_ eq $t[0] } @times and !(defined $before && $t[0] <= $before))
		{
			violation('wrong time', describe($wr));
			$ok = 0;
		}
	}
	elsif ($verdict eq 'not written')
	{
		if ($copies > 0)
		{
			my %codes = map { $_ => 1 } @definite;
			my $kind = 'written though ' . join('/', sort keys %codes) .
			  ($retried ? ' (final retry)' : '');
			violation($kind, describe($wr));
			$ok = 0;
		}
	}
	else
	{
		$count{ $copies ? 'maybe, present' : 'maybe, absent' }++;
		if ($copies > 1)
		{
			violation('doubled', describe($wr));
			$ok = 0;
		}
	}
	$ok ? $passed++ : $failed++;
}

# same key, other content: at most one is present; PS005 means the other is
my %groups;
push @{ $groups{ $_->{group} } }, $_ for grep { $_->{gtype} eq 'd' } values %w;
for my $g (sort { $a <=> $b } keys %groups)
{
	my @m = @{ $groups{$g} };
	next unless @m == 2 && %{ $m[0]{chains} } && %{ $m[1]{chains} };
	my $ok = 1;
	my @here = grep { exists $present{ $_->{wid} } } @m;
	if (@here == 2)
	{
		violation('same key, both contents written', describe($m[0]) . ' / ' . describe($m[1]));
		$ok = 0;
	}
	for my $i (0, 1)
	{
		my ($me, $other) = ($m[$i], $m[1 - $i]);
		my @finals = map { (sort { $b->{attempt} <=> $a->{attempt} } @$_)[0] } values %{ $me->{chains} };
		if ((grep { $_->{outcome} eq 'err' && $_->{value} eq 'PS005' } @finals)
			&& !exists $present{ $other->{wid} })
		{
			violation('PS005, but no write of that key is present', describe($me) . ' / ' . describe($other));
			$ok = 0;
		}
	}
	$ok ? $passed++ : $failed++;
}

# time order: a write sent after another write of its shard was acked is
# found at a greater time
{
	my %by_shard;
	for my $wr (values %w)
	{
		next unless exists $present{ $wr->{wid} } || exists $acked_of{ $wr->{wid} };
		my @att = map { @$_ } values %{ $wr->{chains} };
		next unless @att;
		my ($first) = sort { $a <=> $b } map { $_->{send} } @att;
		my ($ackrecv) = sort { $a <=> $b } map { $_->{recv} } grep { $_->{outcome} eq 'ok' } @att;
		push @{ $by_shard{ $wr->{shard} } }, {
			wr => $wr, send => $first, recv => $ackrecv, acked => $acked_of{ $wr->{wid} },
			found => $uncertain{ $wr->{wid} } ? undef : $present{ $wr->{wid} } };
	}
	for my $s (sort keys %by_shard)
	{
		my @acks = sort { $a->{recv} <=> $b->{recv} } grep { defined $_->{acked} && defined $_->{recv} } @{ $by_shard{$s} };
		my @starts = sort { $a->{send} <=> $b->{send} } grep { defined $_->{found} } @{ $by_shard{$s} };
		my ($i, $max, $maxw) = (0, -1, undef);
		for my $b (@starts)
		{
			while ($i < @acks && $acks[$i]{recv} < $b->{send})
			{
				if ($acks[$i]{acked} > $max) { $max = $acks[$i]{acked}; $maxw = $acks[$i]{wr} }
				$i++;
			}
			if ($max >= 0 && $b->{found} <= $max && $b->{wr} != $maxw)
			{
				violation('time order', "found at $b->{found}, not after time $max acked before it was sent: "
					. describe($b->{wr}) . ' / earlier: ' . describe($maxw));
				$failed++;
			}
			else
			{
				$passed++;
			}
		}
	}
}

for my $u (@unexpected)
{
	my ($wr, $a) = @$u;
	violation('wrong error', "$a->{value} [$a->{msg}]: " . describe($wr));
	$failed++;
}
for my $p (sort keys %phantom)
{
	violation('phantom', "$phantom{$p} rows of an unknown write $p");
	$failed++;
}
if (@verify)
{
	violation('verify', $_) for @verify;
	$failed++;
}
else
{
	$passed++;
}

# no call waits without bound: the driver gives up on a call unanswered for
# 60 s (its statement_timeout is 30 s at most) and counts it
if ($stat{hung})
{
	violation('hung call', "$stat{hung} calls had no answer in 60 s");
	$failed++;
}

# server processes that died of a signal nobody sent (an assertion, a segfault)
my $deaths = 0;
if (defined $serverlog && open my $l, '<', $serverlog)
{
	while (<$l>)
	{
		next unless /was terminated by signal (\d+)/;
		next if $1 == 9;
		$deaths++;
		violation('server process died', $_ =~ s/\s+$//r);
	}
	close $l;
	$deaths ? $failed++ : $passed++;
}

# ---------------------------------------------------------------------
# consumers

my %expected_cons_err = map { $_ => 1 } qw(57014);
my (%cons_by, $cons_calls, $cons_ok, $cons_ok_rows, $cons_updates, $cons_timeouts, $cons_cancels, $cons_lost);
$_ = 0 for ($cons_calls, $cons_ok, $cons_ok_rows, $cons_updates, $cons_timeouts, $cons_cancels, $cons_lost);

sub bulk_violation
{
	my ($kind, $count, @texts) = @_;
	$vio{$kind} += $count;
	push @details, map { "$kind: $_" } @texts;
}

for my $cid (sort { $a <=> $b } keys %cons)
{
	my $k = $cons{$cid};
	my $r = $k->{reader};
	my $bad = 0;

	# outcomes, errors
	for my $st (@{ $k->{steps} })
	{
		$cons_calls++;
		my $kind = $st->{outcome} eq 'ok' ? 'committed' : $st->{outcome} eq 'lost' ? 'connection lost or FATAL' : $st->{value};
		$cons_by{$kind}++;
		if ($st->{outcome} eq 'ok')
		{
			$cons_ok++;
			$cons_ok_rows++ if $st->{n} > 0;
			$cons_updates += $st->{n};
		}
		$cons_lost++ if $st->{outcome} eq 'lost';
		$cons_timeouts++ if $st->{outcome} eq 'err' && $st->{value} eq '57014' && $st->{cancel} < 0;
		$cons_cancels++ if $st->{cancel} >= 0;
		if ($st->{outcome} eq 'err' && !$expected_cons_err{ $st->{value} })
		{
			violation('wrong error', "consumer $cid ($r of $k->{shard}) step $st->{step} ($st->{phase}): $st->{value} [$st->{msg}]");
			$bad = 1;
		}
	}

	# positions: what is known committed before each step and sample
	my (@contrib, @query);
	for my $st (@{ $k->{steps} })
	{
		next unless $st->{outcome} eq 'ok';
		push @contrib, [ $st->{recv}, $st->{hi}, "step $st->{step} ($st->{phase}) committed, reading up to $st->{hi}" ]
		  if $st->{hi} ne '-';
		push @query, [ $st->{send}, 'step', $st ] if $st->{n} > 0;
	}
	for my $p (grep { defined $_->{pos}{$r} } @samples)
	{
		push @contrib, [ $p->{recv}, $p->{pos}{$r}, "position $p->{pos}{$r} sampled at $p->{recv} us" ];
		push @query, [ $p->{send}, 'sample', $p ];
	}
	push @query, [ 9**20, 'final', $k->{final} ] if $k->{final};
	@contrib = sort { $a->[0] <=> $b->[0] } @contrib;
	@query = sort { $a->[0] <=> $b->[0] } @query;
	my ($i, $floor, $floor_why) = (0, $k->{init}, "created at $k->{init}");
	for my $q (@query)
	{
		while ($i < @contrib && $contrib[$i][0] < $q->[0])
		{
			($floor, $floor_why) = ($contrib[$i][1], $contrib[$i][2]) if $contrib[$i][1] > $floor;
			$i++;
		}
		my ($what, $x) = @$q[1, 2];
		if ($what eq 'step' && $x->{lo} <= $floor)
		{
			violation('position moved back', "consumer $cid ($r of $k->{shard}) step $x->{step} ($x->{phase}, sent at $x->{send} us) "
				. "read $x->{n} updates from time $x->{lo}, at or before $floor ($floor_why): read again");
			$bad = 1;
		}
		elsif ($what eq 'sample' && $x->{pos}{$r} < $floor)
		{
			violation('position moved back', "$r of $k->{shard} at $x->{pos}{$r} (sampled at $x->{recv} us), below $floor ($floor_why)");
			$bad = 1;
		}
		elsif ($what eq 'final' && $x->{pos} < $floor)
		{
			violation('position moved back', "$r of $k->{shard} ended at $x->{pos}, below $floor ($floor_why)");
			$bad = 1;
		}
	}

	# drained, and the table against the shard
	my $fin = $k->{final};
	if (!$fin)
	{
		violation('not drained', "consumer $cid ($r of $k->{shard}): no final position recorded");
		$bad = 1;
	}
	else
	{
		if ($fin->{pos} != $fin->{upper} - 1)
		{
			violation('not drained', "consumer $cid ($r of $k->{shard}) ended at $fin->{pos}, upper $fin->{upper}");
			$bad = 1;
		}
		if ($fin->{since} > $fin->{pos} && !($fin->{pos} == $fin->{since} - 1 && $fin->{pos} == $k->{init}))
		{
			violation('since past a reader', "$k->{shard} since $fin->{since} at the end, $r at $fin->{pos}");
			$bad = 1;
		}
	}
	my $t = $final_table{$r};
	if (defined $consumers && !$t)
	{
		violation('not drained', "consumer $cid ($r of $k->{shard}): its table was not checked");
		$bad = 1;
	}
	elsif ($t)
	{
		if ($t->{dup})
		{
			bulk_violation('duplicated', $t->{dup}, map { "history_consumed_$cid holds key $_->[2] val $_->[3] time $_->[4] $_->[5] times" }
				grep { $_->[1] eq $r } @cons_dup);
			$bad = 1;
		}
		if ($t->{mis} || $t->{past})
		{
			bulk_violation('consumed lost or doubled', $t->{mis} + $t->{past},
				($t->{past} ? ("history_consumed_$cid holds $t->{past} rows at times past its reader's position $t->{pos}") : ()),
				map { "history_consumed_$cid: key $_->[2] val $_->[3] sums to $_->[4], snapshot('$k->{shard}', $t->{pos}) has $_->[5]" }
				grep { $_->[1] eq $r } @cons_mis);
			$bad = 1;
		}
		if ($fin && $t->{pos} != $fin->{pos})
		{
			violation('not drained', "$r moved from $fin->{pos} to $t->{pos} after the drain");
			$bad = 1;
		}
	}

	# each write consumed at its one time
	my $wrong = 0;
	for my $wid (sort { $a <=> $b } keys %{ $consumed{$r} // {} })
	{
		my @at = @{ $consumed{$r}{$wid} };
		my $wr = $w{$wid};
		next unless $wr;	# a phantom: the snapshot comparison and the shard's check count it
		my %times = map { $_->{time} => 1 } @at;
		my @exact = map { $_->{time} } grep { !$_->{uncertain} && !$_->{at_since} } @{ $wr->{found} };
		my $why;
		if (keys %times > 1) { $why = 'at ' . join(' and ', sort keys %times) }
		elsif (exists $acked_of{$wid} && !$times{ $acked_of{$wid} }) { $why = "at $at[0]{time}, acked at $acked_of{$wid}" }
		elsif (@exact && !$times{ $exact[0] }) { $why = "at $at[0]{time}, in the shard at $exact[0]" }
		next unless $why;
		$wrong++;
		push @details, "consumed at a wrong time: $r, $why: " . describe($wr) if $wrong <= 3;
	}
	if ($wrong)
	{
		$vio{'consumed at a wrong time'} += $wrong;
		$bad = 1;
	}
	$bad ? $failed++ : $passed++;
}

# since, sampled right after downgrade_since, against the positions read after it
my (%held, $since_bad);
for my $p (@samples)
{
	for my $r (sort keys %{ $p->{pos} })
	{
		my $pos = $p->{pos}{$r};
		my ($k) = grep { $_->{reader} eq $r } values %cons;
		my $init = $k ? $k->{init} : undef;
		next if $p->{since} <= $pos;
		next if $pos == $p->{since} - 1 && defined $init && $pos == $init;
		violation('since past a reader', "$p->{shard} since $p->{since} (downgrade_since to $p->{upper}, answered at $p->{recv} us), $r at $pos read after it");
		$since_bad = 1;
	}
}
if (%cons)
{
	$since_bad ? $failed++ : $passed++;
}
for my $e (@control_errors)
{
	next unless $e->{outcome} eq 'err';
	violation('wrong error', "$e->{kind} at $e->{at} us: $e->{value} [$e->{msg}]");
	$failed++;
}

# ---------------------------------------------------------------------
# table readers: each check compared the foreign table's shortcut with the
# plain scan and snapshot() in one snapshot; "wrong" is a difference,
# "error" an error other than PS002, PS003, PS004 (read) or 57014, 40003
# (lost: not recorded as an error)

my (%reads_by, %reads_found, %paths, %alike, $reads_txn, $reads_cut, $reads_writes, $reads_checks);
$_ = 0 for ($reads_txn, $reads_cut, $reads_writes, $reads_checks);
for my $r (@reads)
{
	my $ctx = "table reader $r->{rid} at $r->{at} us, $r->{shard}"
	  . ($r->{as_of} eq 'NULL' || $r->{as_of} eq '-' ? '' : " as of $r->{as_of}");
	if ($r->{check} eq 'transaction')
	{
		$reads_txn++;
		$reads_cut++ if $r->{outcome} eq 'cut';
		if ($r->{outcome} eq 'error')
		{
			violation('reads error', "$ctx: COMMIT failed: $r->{detail}");
			$failed++;
		}
		next;
	}
	if ($r->{check} eq 'write')
	{
		$reads_writes++;
		$reads_by{"writes to hr $r->{outcome}"}++;
		if ($r->{outcome} eq 'error')
		{
			violation('reads error', "$ctx: a write to hr failed: $r->{detail}");
			$failed++;
		}
		next;
	}
	if ($r->{check} eq 'explain')
	{
		$paths{ $r->{outcome} }{ $r->{shard} eq 'hr' ? 'hr' : 'h' }++;
		next;
	}
	$reads_checks++;
	$reads_by{ $r->{check} }++;
	# a check whose answer had rows (a range's count above 0)
	$reads_found{ $r->{check} }++
	  if $r->{outcome} eq 'same' && $r->{detail} =~ /^(\d+) lines: (.*)/ && $1 > 0
	  && !($r->{check} eq 'range' && $2 =~ /^0\|/);
	$alike{ $r->{detail} }++ if $r->{outcome} eq 'alike';
	if ($r->{outcome} eq 'wrong')
	{
		violation('reads wrong', "$ctx, $r->{check}: $r->{detail}");
		$failed++;
	}
	elsif ($r->{outcome} eq 'error')
	{
		violation('reads error', "$ctx, $r->{check}: $r->{detail}");
		$failed++;
	}
	else
	{
		$passed++;
	}
}

# ---------------------------------------------------------------------
# report

my $n = sub { $_[0] // 0 };
printf "calls %d (%d writes, %d retries) in %s s; seed %s\n", $calls // 0, scalar(keys %w), $retries // 0,
  $stat{seconds} // '?', $stat{seed} // '?';
printf "faults: %d crashes, %d terminated backends, %d cancels, %d state-row holds, %d table locks, "
  . "%d equal-content and %d other-content same-key races\n",
  map { $n->($stat{$_}) } qw(crashes terminates cancels state_row_holds table_locks races_equal races_other);
print "outcomes: ", join(', ', map { "$_ $by{$_}" } sort { $by{$b} <=> $by{$a} || $a cmp $b } keys %by), "\n";
printf "writes: acked %d, not written %d, maybe %d (present %d, absent %d); %d through foreign tables\n",
  (map { $n->($count{$_}) } ('acked', 'not written', 'maybe', 'maybe, present', 'maybe, absent')),
  scalar(grep { $_->{via} eq 'table' && %{ $_->{chains} } } values %w);
if (%cons)
{
	my %on;
	push @{ $on{ $_->{shard} } }, $_->{reader} for sort { $a->{cid} <=> $b->{cid} } values %cons;
	printf "consumers: %d (%s): %d calls, %d committed (%d with updates, %d empty), %d updates consumed\n",
	  scalar(keys %cons), join(', ', map { join(' and ', @{ $on{$_} }) . " on $_" } sort keys %on),
	  $cons_calls, $cons_ok, $cons_ok_rows, $cons_ok - $cons_ok_rows, $cons_updates;
	print "consumer outcomes: ", join(', ', map { "$_ $cons_by{$_}" } sort { $cons_by{$b} <=> $cons_by{$a} || $a cmp $b } keys %cons_by), "\n";
	my $cterm = 0;
	$cterm += $_ for values %cons_terminates;
	printf "faults on consumers: %d statement timeouts, %d cancels, %d terminated backends, %d steps lost (terminated, crashes)\n",
	  $cons_timeouts, $cons_cancels, $cterm, $cons_lost;
	printf "--break-consumers: consumer 1 skipped advance_reader on %d of its steps (the checks below must fail)\n",
	  $stat{consumer_broken_steps} if $stat{consumer_broken_steps};
	my %last;
	$last{ $_->{shard} } = $_ for @samples;
	printf "since: %d downgrade_since (%d held by a reader), %d compact(); at the end %s; times of writes before since: %d from consumers, %d unknown\n",
	  $n->($stat{downgrades}), $n->($stat{downgrades_held}), $n->($stat{compacts}),
	  join(', ', map { "$_ since upper - " . ($last{$_}{upper} - $last{$_}{since}) } sort keys %last) || '-',
	  $times_from_consumers, $times_unknown;
}
if (@reads)
{
	printf "table readers: %d: %d transactions (%d cut by faults), %d checks (%s), %s; errors every path raised alike: %s\n",
	  $n->($stat{table_readers}), $reads_txn, $reads_cut, $reads_checks,
	  join(', ', map { "$_ $reads_by{$_}" . ($reads_found{$_} ? " ($reads_found{$_} with rows)" : '') }
		grep { !/^writes/ } sort keys %reads_by),
	  join(', ', map { "$_ $reads_by{$_}" } grep { /^writes/ } sort keys %reads_by) || 'no writes to hr',
	  join(', ', map { "$_ $alike{$_}" } sort keys %alike) || 'none';
	printf "aggregates computed (EXPLAIN ANALYZE): from the state %d (h shards %d, hr %d), from a merge %d (h shards %d, hr %d), neither %d; terminations sent %d\n",
	  (map { my $p = $_; ($n->($paths{$p}{h}) + $n->($paths{$p}{hr}), $n->($paths{$p}{h}), $n->($paths{$p}{hr})) } qw(state merge)),
	  $n->($paths{none}{h}) + $n->($paths{none}{hr}), $n->($stat{table_reader_terminates});
}
my @main = ('lost', 'doubled', 'wrong error');
print join(', ', map { "$_ " . $n->($vio{$_}) } @main), "\n";
my @cmain = ('duplicated', 'consumed lost or doubled', 'consumed at a wrong time', 'position moved back', 'since past a reader', 'not drained');
print "consumers: ", join(', ', map { "$_ " . $n->($vio{$_}) } @cmain), "\n" if %cons;
push @main, @cmain;
my @rmain = ('reads wrong', 'reads error');
print "table readers: ", join(', ', map { "$_ " . $n->($vio{$_}) } @rmain), "\n" if @reads;
push @main, @rmain;
my @other = grep { my $k = $_; !grep { $_ eq $k } @main } sort keys %vio;
print join(', ', map { "$_ $vio{$_}" } @other), "\n" if @other;
print "torn 0, time order 0, wrong time 0, phantom 0, verify 0, written though an error 0\n"
  unless @other;
if (@details)
{
	print "first violations:\n";
	my %shown;
	# a few of each kind
	for my $d (@details)
	{
		my ($k) = $d =~ /^([^:]+):/;
		next if ++$shown{$k} > ($ENV{HISTORY_SHOW} // 3);
		print "  $d\n";
	}
}
print "$passed passed, $failed failed\n";
exit($failed ? 1 : 0);
