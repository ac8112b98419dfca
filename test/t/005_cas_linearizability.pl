
# Copyright (c) persist_sink contributors

# Linearizability of compare_and_append.  Many sessions race on one shard:
# each reads shard_upper u and tries to append its own data as
# [u, u + 1 + e) for a small random e.  Some attempts win the CaS and then
# roll their transaction back.  Every outcome is recorded: winners (the new
# seqno), losers (PS001 and the current upper its DETAIL reports).  The race
# runs twice: on a shard of its own, and on a shard whose since another
# session keeps moving (CaS changes of the seqno alone, which
# compare_and_append must retry past, never report as a mismatch).  A
# checker then requires of each history and final shard:
#
#  - exactly one committed winner per interval, and the winners' intervals
#    tile [0, upper) with no gap (the shard's batches are exactly those
#    intervals: compaction is off);
#  - the winners' seqnos follow their intervals: 1, 2, 3, ... (the CaS order
#    is the interval order), or, with since moves, strictly increase, and
#    the final seqno counts winners and moves;
#  - every loser's reported current upper is past its expected upper, is an
#    upper the shard really had, and some winner took the loser's interval;
#  - the shard's content is exactly the committed winners' data, each update
#    at its time; nothing of losers or rolled-back winners.
#
# A negative control runs the checker on fabricated histories (a duplicate
# winner, a gap, a bad loser report, reordered seqnos, stray data) and
# requires that it reports each violation.
#
# PS_CAS_SEED, PS_CAS_SESSIONS and PS_CAS_ATTEMPTS override the defaults.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(time);

my $seed = $ENV{PS_CAS_SEED} // 4711;
my $nsessions = $ENV{PS_CAS_SESSIONS} // 8;
my $nattempts = $ENV{PS_CAS_ATTEMPTS} // 150;
my $genesis = 300;    # the first batch, [0, genesis), holds no data
srand($seed);
note "seed $seed, $nsessions sessions, $nattempts attempts each";

my $dir = PostgreSQL::Test::Utils::tempdir;

my $node = sink_node(
	'cas', q{
persist_sink.compaction = off
max_connections = 40
restart_after_crash = on
});
$node->safe_psql(
	'postgres', q{
-- One attempt: read the upper, try [u, u + 1 + ext) with two updates of our own.
CREATE FUNCTION try_cas(shard text, id text, ext int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	u bigint;
	nu bigint;
	s bigint;
	d text;
BEGIN
	u := persist_sink.shard_upper(shard);
	nu := u + 1 + ext;
	BEGIN
		s := persist_sink.compare_and_append(shard, ARRAY[id || '/1', id || '/2'],
											 ARRAY[id, id], ARRAY[u, nu - 1], '{1,1}', u, nu);
		RETURN format('win %s %s %s %s', id, u, nu, s);
	EXCEPTION WHEN SQLSTATE 'PS001' THEN
		GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
		RETURN format('lose %s %s %s %s', id, u, nu, d);
	END;
END
$$;
});

#
# The checker
#

# Returns the violations of linearizability in a history and final shard.
#   $h: { winners => [ { id, lower, upper, seqno } ],
#         losers => [ { id, expected, new_upper, current } ] }
#   $f: { upper, seqno, moves (seqno-only changes), batches => [ [lower, upper] ],
#         content => { key => "val time diff" } }
# Rolled-back winners are not in $h.
sub check_history
{
	my ($h, $f) = @_;
	my @v;
	my @w = sort { $a->{lower} <=> $b->{lower} || $a->{seqno} <=> $b->{seqno} } @{ $h->{winners} };

	# one winner per interval, tiling [0, upper)
	my $expect = 0;
	for my $x (@w)
	{
		if ($x->{lower} < $expect)
		{
			push @v, "two winners overlap at [$x->{lower}, $x->{upper}) ($x->{id})";
		}
		elsif ($x->{lower} > $expect)
		{
			push @v, "gap [$expect, $x->{lower}) before $x->{id}";
		}
		$expect = $x->{upper} if $x->{upper} > $expect;
	}
	push @v, "the winners end at $expect but the upper is $f->{upper}"
	  if $expect != $f->{upper};

	# seqnos in interval order: 1, 2, ... (strictly increasing when since
	# moves also took seqnos), and the final seqno counts every change
	for my $i (0 .. $#w)
	{
		if ($f->{moves} == 0 && $w[$i]{seqno} != $i + 1)
		{
			push @v, "winner $w[$i]{id} of [$w[$i]{lower}, $w[$i]{upper}) has seqno $w[$i]{seqno}, not " . ($i + 1);
		}
		elsif ($i > 0 && $w[$i]{seqno} <= $w[ $i - 1 ]{seqno})
		{
			push @v, "winner $w[$i]{id} of [$w[$i]{lower}, $w[$i]{upper}) has seqno $w[$i]{seqno}, "
			  . "not past the previous winner's $w[$i - 1]{seqno}";
		}
	}
	push @v, "the final seqno is $f->{seqno}, but there are " . scalar(@w) . " winners and $f->{moves} since moves"
	  if $f->{seqno} != @w + $f->{moves};

	# the batches are exactly the winners' intervals
	if ($f->{batches})
	{
		my $wi = join ' ', map { "[$_->{lower},$_->{upper})" } @w;
		my $bi = join ' ', map { "[$_->[0],$_->[1])" } @{ $f->{batches} };
		push @v, "the batches are not the winners' intervals" if $wi ne $bi;
	}

	# losers: a real, later upper; someone took their interval
	my %uppers = map { $_->{upper} => 1 } @w;
	my %lowers = map { $_->{lower} => 1 } @w;
	for my $l (@{ $h->{losers} })
	{
		push @v, "loser $l->{id} reports current upper $l->{current}, not past its expected $l->{expected}"
		  unless $l->{current} >= $l->{expected} + 1;
		push @v, "loser $l->{id} reports an upper $l->{current} the shard never had"
		  unless $uppers{ $l->{current} };
		push @v, "loser $l->{id} lost at $l->{expected}, which no winner took"
		  unless $lowers{ $l->{expected} };
	}

	# the content is exactly the winners' data
	my %want;
	for my $x (@w)
	{
		next if $x->{id} eq 'genesis';
		$want{"$x->{id}/1"} = "$x->{id} $x->{lower} 1";
		$want{"$x->{id}/2"} = "$x->{id} " . ($x->{upper} - 1) . " 1";
	}
	for my $k (sort keys %want)
	{
		if (!defined $f->{content}{$k})
		{
			push @v, "data of winner $k is missing";
		}
		elsif ($f->{content}{$k} ne $want{$k})
		{
			push @v, "data of winner $k is \"$f->{content}{$k}\", not \"$want{$k}\"";
		}
	}
	push @v, map { "unexpected data $_" } grep { !defined $want{$_} } sort keys %{ $f->{content} };
	return @v;
}

#
# The race
#

# Runs the race on a shard; with a mover, another session meanwhile moves the
# shard's since forward 1, 2, ... $genesis - 1: CaS changes that move only
# the seqno, which compare_and_append must retry past, never report as an
# upper mismatch.  Returns the history, the final shard and a summary.
sub race
{
	my ($shard, $moves) = @_;
	my @clients;
	my %aborted_ids;

	$node->safe_psql('postgres',
		"SELECT persist_sink.create_shard('$shard');
		 SELECT persist_sink.compare_and_append('$shard', '{}'::text[], '{}'::text[], '{}', '{}', 0, $genesis)");
	for my $s (1 .. $nsessions)
	{
		my $sql = '';
		for my $a (1 .. $nattempts)
		{
			my $ext = int(rand(3));
			if (rand() < 0.1)
			{
				# a winner that rolls back: it must leave no trace
				my $id = "s${s}a${a}x";
				$aborted_ids{$id} = 1;
				$sql .= "BEGIN;\nSELECT try_cas('$shard', '$id', $ext);\nSELECT pg_sleep(0.005);\nROLLBACK;\n";
			}
			else
			{
				$sql .= "SELECT try_cas('$shard', 's${s}a${a}', $ext);\n";
			}
		}
		push @clients, [ "session $s", start_script("$shard.s$s", $sql) ];
	}
	if ($moves)
	{
		push @clients,
		  [
			'the since mover',
			start_script("$shard.mover",
				join('', map { "SELECT persist_sink.downgrade_since('$shard', $_);\n" } 1 .. $moves))
		  ];
	}

	my $t0 = time;
	my %h = (winners => [ { id => 'genesis', lower => 0, upper => $genesis, seqno => 1 } ], losers => []);
	my ($rolled_back, $unexpected) = (0, 0);
	for my $c (@clients)
	{
		my ($what, $h, $name) = ($c->[0], @{ $c->[1] });
		my $finished = eval { $h->finish };
		ok($finished, "$shard: $what ran all its statements")
		  or diag(($@ || '') . slurp_file("$dir/$name.err"));
		next if $what eq 'the since mover';
		for my $line (split /\n/, slurp_file("$dir/$name.out"))
		{
			next if $line eq '' || $line =~ /^(BEGIN|ROLLBACK)$/;
			if ($line =~ /^win (\S+) (-?\d+) (-?\d+) (\d+)$/)
			{
				if ($aborted_ids{$1})
				{
					$rolled_back++;
					next;
				}
				push @{ $h{winners} }, { id => $1, lower => $2, upper => $3, seqno => $4 };
			}
			elsif ($line =~ /^lose (\S+) (-?\d+) (-?\d+) current upper is (-?\d+)$/)
			{
				push @{ $h{losers} }, { id => $1, expected => $2, new_upper => $3, current => $4 };
			}
			else
			{
				$unexpected++;
				diag "unexpected output of $shard $what: $line";
			}
		}
	}
	my $elapsed = time - $t0;
	is($unexpected, 0, "$shard: every attempt either won or lost with PS001 and a current upper");

	# The final shard
	my %f = (moves => $moves);
	($f{upper}, $f{seqno}, $f{since}) = split /\|/,
	  $node->safe_psql('postgres', "SELECT upper, seqno, since FROM persist_sink.shards WHERE name = '$shard'");
	is($f{since}, $moves, "$shard: since moved $moves times");
	$f{content} = {};
	for my $row (split /\n/,
		$node->safe_psql('postgres',
			"SELECT convert_from(key, 'UTF8'), convert_from(val, 'UTF8'), \"time\", diff
			 FROM persist_sink.listen('$shard', $genesis - 1)"))
	{
		my ($k, $v, $t, $d) = split /\|/, $row;
		$f{content}{$k} = defined $f{content}{$k} ? "$f{content}{$k}; $v $t $d" : "$v $t $d";
	}

	my @violations = check_history(\%h, \%f);
	is(scalar @violations, 0,
		"$shard: the history is linearizable: one winner per interval, gapless, losers told the truth, data exact")
	  or diag join("\n", @violations[ 0 .. ($#violations < 19 ? $#violations : 19) ]);
	is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.verify('$shard')"),
		'0', "$shard: verify() is clean");
	is($node->safe_psql('postgres', "SELECT count(*) FROM persist_sink.snapshot('$shard')"),
		2 * (@{ $h{winners} } - 1),
		"$shard: the snapshot holds two updates per committed winner");

	my $nwin = @{ $h{winners} } - 1;
	my $nlose = @{ $h{losers} };
	cmp_ok($nwin, '>', $nsessions, "$shard: many attempts won");
	cmp_ok($nlose, '>', 0, "$shard: some attempts lost");
	note sprintf(
		"%s: %d attempts in %.1fs: %d committed winners, %d winners rolled back, %d losers, %d since moves; upper %d, seqno %d",
		$shard, $nsessions * $nattempts, $elapsed, $nwin, $rolled_back, $nlose, $moves, $f{upper}, $f{seqno});
	return (\%h, \%f);
}

# Starts psql on a script; returns the harness and the script's name.
sub start_script
{
	my ($name, $sql) = @_;
	open my $fh, '>', "$dir/$name.sql" or die $!;
	print $fh $sql;
	close $fh;
	my $h = IPC::Run::start(
		[
			$node->installed_command('psql'), '-X', '-At', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-f', "$dir/$name.sql"
		],
		'<', \undef, '>', "$dir/$name.out", '2>', "$dir/$name.err",
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return [ $h, $name ];
}

my ($hist, $fin) = race('lin', 0);
my ($hist_moving, $fin_moving) = race('lin_moving', $genesis - 1);

my %history = %$hist;
my %final = %$fin;

#
# Negative controls: the checker must catch fabricated violations.
#
sub clone
{
	my ($x) = @_;
	return ref $x eq 'HASH' ? { map { $_ => clone($x->{$_}) } keys %$x }
	  : ref $x eq 'ARRAY' ? [ map { clone($_) } @$x ]
	  : $x;
}

sub violations_of
{
	my ($mutate) = @_;
	my $h = clone(\%history);
	my $f = clone(\%final);
	$mutate->($h, $f);
	return join "\n", check_history($h, $f);
}

my @real = sort { $a->{lower} <=> $b->{lower} } grep { $_->{id} ne 'genesis' } @{ $history{winners} };
my $mid = $real[ int(@real / 2) ];

like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			push @{ $h->{winners} }, { %$mid, id => 'impostor' };
		}),
	qr/two winners overlap at \[$mid->{lower}, $mid->{upper}\)/,
	'negative control: a duplicate winner is caught');
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			$h->{winners} = [ grep { $_->{id} ne $mid->{id} } @{ $h->{winners} } ];
			$f->{batches} = [ grep { $_->[0] != $mid->{lower} } @{ $f->{batches} } ] if $f->{batches};
			delete $f->{content}{"$mid->{id}/$_"} for 1, 2;
			$_->{seqno}-- for grep { $_->{seqno} > $mid->{seqno} } @{ $h->{winners} };
			$f->{seqno}--;
		}),
	qr/gap \[$mid->{lower}, $mid->{upper}\)/,
	'negative control: a gap is caught');
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			my ($a, $b) = @{ $h->{winners} }[ 1, 2 ];
			($a->{seqno}, $b->{seqno}) = ($b->{seqno}, $a->{seqno});
		}),
	qr/has seqno/,
	'negative control: winners committed out of interval order are caught');
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			$h->{losers}[0]{current} = $h->{losers}[0]{expected};
		}),
	qr/not past its expected/,
	'negative control: a loser told a stale current upper is caught');
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			$h->{losers}[0]{current} = $final{upper} + 5;
		}),
	qr/never had/,
	'negative control: a loser told an upper that never existed is caught');
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			my $l = $h->{losers}[0];
			$f->{content}{"$l->{id}/1"} = "$l->{id} $l->{expected} 1";
		}),
	qr/unexpected data $history{losers}[0]{id}\/1/,
	"negative control: a loser's data in the shard is caught");
like(
	violations_of(
		sub {
			my ($h, $f) = @_;
			$f->{content}{"$mid->{id}/2"} = "$mid->{id} $mid->{lower} 2";
		}),
	qr/data of winner $mid->{id}\/2 is/,
	'negative control: a doubled or moved update is caught');

# The batches of each shard are exactly its winners' intervals.  (Checked
# last: batches() of a shard with many batches has crashed the server.)
for my $r ([ 'lin', $hist, $fin ], [ 'lin_moving', $hist_moving, $fin_moving ])
{
	my ($shard, $h, $f) = @$r;
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back';
	my ($ret, $out, $err) =
	  $node->psql('postgres', "SELECT lower, upper FROM persist_sink.batches('$shard') ORDER BY lower");
	is($ret, 0, "$shard: batches() works") or diag $err;
	$f->{batches} = [ map { [ split /\|/ ] } split /\n/, $out ];
	my @violations = check_history($h, $f);
	is(scalar @violations, 0, "$shard: the batches are the committed winners' intervals")
	  or diag join("\n", @violations[ 0 .. ($#violations < 19 ? $#violations : 19) ]);
}
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back';
ok(!$node->log_contains('terminated by signal'), 'no server process crashed');
$node->stop;
done_testing();
