#!/usr/bin/perl
# The model of the history checker: reads the driver's history (every
# append() call and its outcome) and what the shards hold at the end, and
# checks each write against the outcome table of the design ("One outcome
# per write").
#
# Usage: check.pl HISTORY CONTENT VERIFY [SERVER_LOG]
#   HISTORY  the driver's output (see driver.c)
#   CONTENT  per shard, write and time: "shard wid time rows diff_sum
#            diff_min diff_max bad_vals" (tab separated), from listen()
#   VERIFY   "shard problem" lines of verify() (empty when healthy)
#   SERVER_LOG  the server's log: processes that died of a signal the run
#            did not send are counted
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
# A write whose chains disagree: any acked chain makes it "acked" (all acked
# chains must give one time); else any maybe chain makes it "maybe"; else
# it is "not written".
# Besides: no write is ever partly present or present at two times; of two
# writes sharing a key with other content at most one is present, and a
# PS005 means the other is present; a write that starts after another write
# of its shard was acked gets a greater time; PS005 appears only where two
# contents share a key; every error's SQLSTATE is one the faults explain
# (57014, 40003, PS005); verify() finds no problem.
use strict;
use warnings;

my ($history, $content, $verify, $serverlog) = @ARGV;
die "usage: check.pl HISTORY CONTENT VERIFY [SERVER_LOG]\n" unless defined $verify;

my (%w, %stat, %faults, @unexpected);
my %expected_err = map { $_ => 1 } qw(57014 40003 PS005);

open my $h, '<', $history or die "$history: $!\n";
while (<$h>)
{
	chomp;
	my @f = split /\t/;
	if ($f[0] eq 'W')
	{
		my (undef, $wid, $shard, $key, $nrows, $kind, $group, $gtype) = @f;
		$w{$wid} = {
			wid => $wid, shard => $shard, key => $key, nrows => $nrows,
			kind => $kind, group => $group, gtype => $gtype, chains => {},
			found => [] };
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
	elsif ($f[0] eq 'F')
	{
		$faults{$f[1]}++;
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
	  ? join(', ', map { "$_->{rows} rows (diff sum $_->{sum}) at time $_->{time} in $_->{shard}" } @{ $wr->{found} })
	  : 'nothing';
	my $text = sprintf("write %s (%s, %d rows, shard %s, key %s%s): calls %s; found %s",
		$wr->{wid}, $wr->{kind}, $wr->{nrows}, $wr->{shard}, $wr->{key},
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
	my ($copies, @times, $ok) = (0);
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
	}
	$present{ $wr->{wid} } = $times[0] if $copies >= 1;
	if ($verdict eq 'acked')
	{
		my @t = keys %acked;
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
		elsif (!grep { $_ eq $t[0] } @times)
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
			wr => $wr, send => $first, recv => $ackrecv,
			acked => $acked_of{ $wr->{wid} }, found => $present{ $wr->{wid} } };
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
# report

my $n = sub { $_[0] // 0 };
printf "calls %d (%d writes, %d retries) in %s s; seed %s\n", $calls // 0, scalar(keys %w), $retries // 0,
  $stat{seconds} // '?', $stat{seed} // '?';
printf "faults: %d crashes, %d terminated backends, %d cancels, %d state-row holds, %d table locks, "
  . "%d equal-content and %d other-content same-key races\n",
  map { $n->($stat{$_}) } qw(crashes terminates cancels state_row_holds table_locks races_equal races_other);
print "outcomes: ", join(', ', map { "$_ $by{$_}" } sort { $by{$b} <=> $by{$a} || $a cmp $b } keys %by), "\n";
printf "writes: acked %d, not written %d, maybe %d (present %d, absent %d)\n",
  map { $n->($count{$_}) } ('acked', 'not written', 'maybe', 'maybe, present', 'maybe, absent');
my @main = ('lost', 'doubled', 'wrong error');
print join(', ', map { "$_ " . $n->($vio{$_}) } @main), "\n";
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
