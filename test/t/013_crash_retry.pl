
# Copyright (c) persist_sink contributors

# Crash test with retries: every write exactly once.  Four writers append
# batches of unique keys through append(..., idempotency_key), each batch
# under its own key ("w<writer>-b<batch>"), small ones (joining the shared
# batch) and large ones (their own parts).  At a seeded random moment of
# every round the test SIGKILLs a sink worker, a writer's backend, or stops
# the whole server (stop -m immediate, then start).  After each round it
# collects the acknowledgments ("ack <id> <time>", printed once append
# returned) and the errors, and the next round's scripts carry:
#
#  - a retry, same key and same content, of every write that was sent and
#    not acknowledged (the connection died, or an error such as 40003,
#    57014, 55000, 08xxx), by its own writer: half of them at the start of
#    the script, each also sent at the same moment by another writer (two
#    calls with one key at once), the other half three times among the
#    first new writes, where the kill may interrupt them again;
#  - a retry of a sample of acknowledged writes (also among the first new
#    writes), which must return the time of their first acknowledgment.
#
# After the last round, rounds without kills retry what is still not
# acknowledged until nothing is.  Then:
#
#  - no write is left unacknowledged ("maybe");
#  - every write is present exactly once: all its keys, diff 1, at a single
#    time, the time its (first or retried) append returned; every call with
#    one key returned the same time; nothing else is there;
#  - each writer's first-attempt acknowledgments have increasing times, the
#    uppers only moved forward and lie past every acknowledged time;
#  - appends failed only with the errors a kill explains;
#  - verify() is clean on every shard;
#  - a note gives the figures (rounds, writes, kills by kind, retries, lost,
#    doubled).
#
# PS_CRASH_SEED and PS_CRASH_ROUNDS override the seed and the round count.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = $ENV{PS_CRASH_SEED} // 20261130;
my $rounds = $ENV{PS_CRASH_ROUNDS} // 24;    # each kind of kill 8 times
my $nwriters = 4;
my $batch_keys = 20;
my $new_per_round = 3000;    # new appends per writer per round: more than fit before the kill
my $reack_per_round = 8;     # acknowledged writes each writer retries per round
my $drain_rounds = 5;        # rounds without kills to retry what is left
my @shards = ('retry_a', 'retry_b');
srand($seed);
note "seed $seed, $rounds rounds, $nwriters writers";

my $dir = PostgreSQL::Test::Utils::tempdir;

# A large batch is 20 keys of 100 times its id (8 to 10 bytes): at least
# 16kB, twice shared_batch_max_bytes; a small one is under 1kB.
my $node = sink_node(
	'crash_retry', q{
persist_sink.shared_batch_max_bytes = '8kB'
max_connections = 40
restart_after_crash = on
log_min_messages = warning
});
$node->safe_psql('postgres',
	join(';', map { "SELECT persist_sink.create_shard('$_')" } @shards));
# One append of batch id under the idempotency key id: keys id:1 .. id:20,
# every val id (or, for a large batch, id 100 times); prints
# "ack <id> <time>" once append returned.
$node->safe_psql(
	'postgres', qq{
CREATE FUNCTION w(shard text, id text, large boolean) RETURNS text LANGUAGE sql AS \$\$
	SELECT 'ack ' || id || ' ' || persist_sink.append(shard,
		ARRAY(SELECT id || ':' || k FROM generate_series(1, $batch_keys) k),
		array_fill(CASE WHEN large THEN repeat(id, 100) ELSE id END, ARRAY[$batch_keys]),
		array_fill(1::bigint, ARRAY[$batch_keys]),
		id)
\$\$});

my $q = sub { $node->safe_psql('postgres', shift) };

# Every write sent: id => { shard, large, writer, acked, time, calls }
# (calls: acknowledged calls, the first included).
my %batches;
my %kills;
my @first_acks;          # per writer: ids acknowledged at their first call, in order
my @unexpected;          # errors an append should never give
my @time_mismatches;     # a call that returned another time than the first one
my %errors;             # errors the appends got, by SQLSTATE (or message)
my %count = (retries => 0, dup_retries => 0, reacks => 0, found_committed => 0, interrupted => 0);

# Before the kills: one small and one large keyed write take the two paths,
# and a retry of each returns its first time and writes nothing.
{
	for my $p ([ 'probe-s', 0 ], [ 'probe-l', 1 ])
	{
		my ($id, $large) = @$p;
		my $out = $q->("SELECT w('$shards[0]', '$id', " . ($large ? 'true' : 'false') . ')');
		$out =~ /^ack \Q$id\E (\d+)$/ or die "unexpected output of the probe $id: $out";
		$batches{$id} = { shard => $shards[0], large => $large, writer => -1,
			acked => 1, time => $1, calls => 1 };
	}
	is( $q->("SELECT shared_writes || ' ' || own_writes FROM persist_sink.stats WHERE shard = '$shards[0]'"),
		'1 1', 'a small write joins the shared batch, a large one writes its own parts');
	my $upper = $q->("SELECT persist_sink.shard_upper('$shards[0]')");
	my $again = $q->("SELECT w('$shards[0]', 'probe-s', false) || ' ' || w('$shards[0]', 'probe-l', true)");
	is( $again,
		"ack probe-s $batches{'probe-s'}{time} ack probe-l $batches{'probe-l'}{time}",
		'a retry of an acknowledged write returns its first time');
	is($q->("SELECT persist_sink.shard_upper('$shards[0]')"), $upper, '... and writes nothing');
	$batches{$_}{calls}++ for ('probe-s', 'probe-l');
}

# Pids of the processes of a kind, the active ones first.
sub pids
{
	my ($where) = @_;
	my ($ret, $out) = $node->psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE $where ORDER BY state = 'active' DESC, random()");
	return $ret == 0 ? grep { /^\d+$/ } split /\n/, $out : ();
}

# The uppers of the shards: name => upper
sub uppers
{
	return map { split /\|/ } split /\n/,
	  $q->('SELECT name, upper FROM persist_sink.shards ORDER BY name');
}

my @kinds = ('worker', 'writer backend', 'server');
my @kind_queue;

# The next kind of kill: every kind once per cycle, in a seeded random order.
sub next_kind
{
	if (!@kind_queue)
	{
		my @k = @kinds;
		while (@k)
		{
			push @kind_queue, splice(@k, int(rand(@k)), 1);
		}
	}
	return shift @kind_queue;
}

# Picks up to $n of @list, seeded.
sub sample
{
	my ($n, @list) = @_;
	my @picked;
	while (@list && @picked < $n)
	{
		push @picked, splice(@list, int(rand(@list)), 1);
	}
	return @picked;
}

my @next_batch = (1) x $nwriters;

# The entries of the scripts of a round: per writer a list of
# { id, shard, large, what } (what: new, retry, dup, reack).  Half the
# unacknowledged writes are retried at the start of their writer's script,
# each also sent at the same moment by the next writer (dup); the other
# half are retried three times among the first new writes (with $new),
# where a kill may interrupt them, and so are the acknowledged writes
# retried.
sub round_entries
{
	my ($new) = @_;
	my @pending = sort grep { !$batches{$_}{acked} } keys %batches;
	my @front = map { [] } 1 .. $nwriters;
	my @spread = map { [] } 1 .. $nwriters;
	for my $id (@pending)
	{
		my $b = $batches{$id};
		my $e = { id => $id, shard => $b->{shard}, large => $b->{large} };
		if (rand() < 0.5)
		{
			push @{ $front[ $b->{writer} ] }, { %$e, what => 'retry' };
			push @{ $front[ ($b->{writer} + 1) % $nwriters ] }, { %$e, what => 'dup' };
		}
		else
		{
			push @{ $spread[ $b->{writer} ] }, { %$e, what => 'retry' } for 1 .. 3;
		}
	}
	my @entries;
	for my $w (0 .. $nwriters - 1)
	{
		my @acked = sort grep { $batches{$_}{acked} && $batches{$_}{writer} == $w } keys %batches;
		push @{ $spread[$w] },
		  map { +{ id => $_, shard => $batches{$_}{shard}, large => $batches{$_}{large}, what => 'reack' } }
		  sample($reack_per_round, @acked);
		my @new;
		if ($new)
		{
			for (1 .. $new_per_round)
			{
				my $n = $next_batch[$w]++;
				push @new,
				  { id => "w$w-b$n", shard => $shards[ $w % @shards ], large => ($n % 4 == 0 ? 1 : 0),
					what => 'new' };
			}
		}
		splice(@new, int(rand(@new < 600 ? @new + 1 : 600)), 0, $_) for @{ $spread[$w] };
		push @entries, [ @{ $front[$w] }, @new ];
	}
	return @entries;
}

# Starts writer $w's session of round $label running @$entries: line 1
# makes errors show their SQLSTATE, line i + 1 is entry i.
sub start_writer
{
	my ($w, $label, $entries) = @_;
	my $sql = "\\set VERBOSITY verbose\n";
	$sql .= "SELECT w('$_->{shard}', '$_->{id}', " . ($_->{large} ? 'true' : 'false') . ");\n"
	  for @$entries;
	return start_psql($node, $dir, "writer$w.$label", $sql, on_error_stop => 0);
}

# Reads what a finished session of writer $w printed: records the
# acknowledgments of its entries and the writes it sent; returns
# (acknowledgments, errors).  $uppers: the shards' uppers when the round
# began (a retry returning a time below was committed by an earlier call).
sub collect
{
	my ($w, $label, $entries, $res, $uppers, $killed) = @_;
	# entry i (from 1) acknowledged at $ack_at{i}: psql runs the entries in
	# order, so each acknowledgment is of the next entry with its id
	my (%ack_at, %failed);
	my $last = 0;
	my $acks = 0;
	for my $line (split /\n/, $res->{out})
	{
		$line =~ /^ack (\S+) (\d+)$/
		  or die "writer $w of round $label printed something else than an acknowledgment: $line";
		my ($id, $t) = ($1, $2);
		$last++ while $last < @$entries && $entries->[$last]{id} ne $id;
		die "writer $w of round $label acknowledged $id out of order" if $last >= @$entries;
		$ack_at{ ++$last } = $t;
		$acks++;
	}
	my $errors = 0;
	while ($res->{err} =~ /^psql:[^:]+:(\d+): (ERROR|FATAL|error):\s+(?:([0-9A-Z]{5}): )?(.*)$/mg)
	{
		my ($entry, $level, $code, $msg) = ($1 - 1, $2, $3 // '', $4);
		$errors++;
		$failed{$entry} = 1;
		$errors{ $code ne '' ? "$level $code" : "$level: $msg" }++;
		$last = $entry if $entry > $last;
		# an append may fail because a kill interrupted it; nothing else
		push @unexpected, "writer $w round $label entry $entry: $level $code $msg"
		  unless $killed
		  && ($level ne 'ERROR' || $code =~ /^(40003|57014|55000|57P0\d|08...)$/);
	}
	die "writer $w of round $label sent all its appends before the kill: make the scripts longer"
	  if $killed && $last >= @$entries && $entries->[-1]{what} eq 'new';
	# the writes sent are those up to the last one acknowledged or refused,
	# and the one after it
	my $sent = $last + 1 < @$entries ? $last + 1 : scalar @$entries;
	for my $i (1 .. $sent)
	{
		my $e = $entries->[ $i - 1 ];
		my $id = $e->{id};
		my $t = $ack_at{$i};
		$batches{$id} //= { shard => $e->{shard}, large => $e->{large}, writer => $w,
			acked => 0, time => undef, calls => 0 };
		my $b = $batches{$id};
		$count{retries}++ if $e->{what} eq 'retry';
		$count{dup_retries}++ if $e->{what} eq 'dup';
		$count{reacks}++ if $e->{what} eq 'reack';
		$count{interrupted}++ if $e->{what} ne 'new' && $failed{$i};
		next unless defined $t;
		$b->{calls}++;
		if ($b->{acked})
		{
			push @time_mismatches, "$id: $e->{what} in round $label returned $t, first time $b->{time}"
			  if $t != $b->{time};
			next;
		}
		$b->{acked} = 1;
		$b->{time} = $t;
		push @{ $first_acks[$w] }, $id if $e->{what} eq 'new';
		$count{found_committed}++ if $e->{what} ne 'new' && $t < $uppers->{ $e->{shard} };
	}
	return ($acks, $errors);
}

# Runs the writers of one round over the entries; kills as told; collects.
sub run_round
{
	my ($label, $kill, @entries) = @_;
	wait_sink_workers($node);
	my %uppers = uppers();
	my @sessions = map { start_writer($_, $label, $entries[$_]) } 0 .. $nwriters - 1;
	my ($kind, $delay, $victim) = ('none', 0, '');
	if ($kill)
	{
		# a seeded random moment: in one round of four early, among the
		# retries that begin the scripts, else once the writers are under way
		$kind = next_kind();
		$delay = rand() < 0.25 ? 0.05 + rand(0.25) : 0.3 + rand(1.5);
		usleep(int($delay * 1_000_000));
		if ($kind eq 'server')
		{
			$node->stop('immediate');
			$node->start;
		}
		else
		{
			my $where =
			  $kind eq 'worker'
			  ? "backend_type = 'persist_sink worker'"
			  : "application_name LIKE 'writer%' AND backend_type = 'client backend'";
			# prefer a process in the middle of its work: poll briefly for one
			my @p;
			for (1 .. 20)
			{
				@p = pids($where . " AND state = 'active'");
				last if @p;
				usleep(20_000);
			}
			@p = pids($where) unless @p;
			die "no $kind to kill in round $label" unless @p;
			$victim = $p[0];
			kill 'KILL', $victim or die "could not kill $victim: $!";
		}
		$kills{$kind}++;
	}
	my @per_writer;
	my $acks = 0;
	for my $w (0 .. $nwriters - 1)
	{
		my $res = finish_psql($sessions[$w]);
		die "writer $w of round $label did not end" if $res->{timed_out};
		my ($n, $errors) = collect($w, $label, $entries[$w], $res, \%uppers, $kill);
		$acks += $n;
		push @per_writer, $n . ($errors ? "+${errors}e" : '');
	}
	note sprintf("round %s: %s%s after %.2fs; %d calls acknowledged (per writer %s); %d writes not acknowledged",
		$label, $kill ? "killed $kind" : 'no kill', $victim ? " (pid $victim)" : '', $delay,
		$acks, join(' ', @per_writer), scalar grep { !$_->{acked} } values %batches);
}

my $t0 = time;
my %prev_upper = uppers();
my $regressed = 0;
for my $r (1 .. $rounds)
{
	run_round($r, 1, round_entries(1));
	wait_sink_workers($node);
	my %upper = uppers();
	$regressed += grep { $upper{$_} < $prev_upper{$_} } keys %upper;
	%prev_upper = %upper;
}
# Retry what is left, without kills, until every write is acknowledged.
my $drained = 0;
for my $d (1 .. $drain_rounds)
{
	last unless grep { !$_->{acked} } values %batches;
	run_round("d$d", 0, round_entries(0));
	$drained++;
}
my $secs = time - $t0;

is($regressed, 0, 'no upper moved back from one round to the next');
is(scalar @unexpected, 0, 'appends failed only because of the kills')
  or diag join("\n", @unexpected[ 0 .. ($#unexpected < 9 ? $#unexpected : 9) ]);
my @maybe = sort grep { !$batches{$_}{acked} } keys %batches;
is(scalar @maybe, 0, 'every write was acknowledged in the end (no "maybe" left)')
  or diag "not acknowledged: @maybe[0 .. ($#maybe < 9 ? $#maybe : 9)]";
is(scalar @time_mismatches, 0, 'every call with one key returned the same time')
  or diag join("\n", @time_mismatches[ 0 .. ($#time_mismatches < 9 ? $#time_mismatches : 9) ]);
cmp_ok($count{retries}, '>', 0, 'some writes were retried');
cmp_ok($count{reacks}, '>', 0, 'some acknowledged writes were retried');

# Each writer's first-attempt acknowledgments have increasing times.
my $unordered = 0;
for my $w (0 .. $nwriters - 1)
{
	my $prev;
	for my $id (@{ $first_acks[$w] || [] })
	{
		$unordered++ if defined $prev && $batches{$id}{time} <= $prev;
		$prev = $batches{$id}{time};
	}
}
is($unordered, 0, "each writer's first-attempt acknowledgments have increasing times");

#
# The checker: what was written against what is there, in SQL.
#
$q->('CREATE TABLE written (batch text PRIMARY KEY, shard text, large boolean, acked boolean, ack_time bigint)');
my @rows = map {
	my $b = $batches{$_};
	"('$_', '$b->{shard}', " . ($b->{large} ? 'true' : 'false') . ', '
	  . ($b->{acked} ? "true, $b->{time}" : 'false, NULL') . ')'
} sort keys %batches;
while (my @chunk = splice(@rows, 0, 1000))
{
	$q->('INSERT INTO written VALUES ' . join(', ', @chunk));
}
$q->(q{
CREATE TABLE present AS
SELECT s.name AS shard, convert_from(l.key, 'UTF8') AS key, split_part(convert_from(l.key, 'UTF8'), ':', 1) AS batch,
	   convert_from(l.val, 'UTF8') AS val, l."time", l.diff
FROM persist_sink.shards s, LATERAL persist_sink.listen(s.name, 0) l;
CREATE TABLE present_batches AS
SELECT shard, batch, count(*) AS keys, count(DISTINCT key) AS distinct_keys,
	   min("time") AS min_time, max("time") AS max_time, bool_and(diff = 1) AS all_once
FROM present GROUP BY shard, batch;
});

my ($n_lost, $n_doubled) = split /\|/, $q->(qq{
SELECT (SELECT count(*) FROM written w
		WHERE NOT EXISTS (SELECT FROM present_batches p WHERE p.batch = w.batch)),
	   (SELECT count(*) FROM present_batches
		WHERE NOT all_once OR keys > $batch_keys OR min_time <> max_time)});
is($n_lost, 0, 'no write is lost');
is($n_doubled, 0, 'no write is doubled');
is($q->('SELECT count(*) FROM present WHERE diff <> 1'), '0', 'every key present has diff 1');
is($q->('SELECT count(*) FROM (SELECT key FROM present GROUP BY key HAVING count(*) > 1) d'),
	'0', 'no key is present at two times');
is( $q->("SELECT count(*) FROM present_batches WHERE keys <> $batch_keys OR distinct_keys <> $batch_keys"),
	'0', 'every write present is whole');
is( $q->(q{SELECT count(*) FROM present_batches p
		   WHERE NOT EXISTS (SELECT FROM written w WHERE w.batch = p.batch AND w.shard = p.shard)}),
	'0', 'nothing is present that was not written, nor in another shard');
is( $q->(q{SELECT count(*) FROM present p JOIN written w USING (batch)
		   WHERE p.val <> CASE WHEN w.large THEN repeat(w.batch, 100) ELSE w.batch END}),
	'0', 'every value is the one written');
is( $q->(q{SELECT count(*) FROM present_batches p JOIN written w USING (batch)
		   WHERE p.min_time <> w.ack_time}),
	'0', 'every write is at the time its append returned');
is( $q->(q{SELECT count(*) FROM written w JOIN persist_sink.shards s ON s.name = w.shard
		   WHERE w.ack_time >= s.upper}),
	'0', 'every acknowledged time is below the upper');
is( $q->(q{SELECT count(*) FROM persist_sink.shards s
		   WHERE (SELECT count(*) FROM persist_sink.snapshot(s.name))
				 <> (SELECT count(*) FROM present p WHERE p.shard = s.name)}),
	'0', 'snapshot and listen agree');
is( $q->(q{SELECT string_agg(s.name || ': ' || v.problem, E'\n')
		   FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name) v}),
	'', 'verify() is clean on every shard');
ok($node->log_contains('was terminated by signal 9'),
	'the killed processes took the server through crash recovery')
  if $kills{worker} || $kills{'writer backend'};

my $n_large = grep { $_->{large} } values %batches;
my $calls = 0;
$calls += $_->{calls} for values %batches;
note sprintf(
	"%d rounds (+%d without kills) in %.0fs, seed %d; kills: %s; %d writes (%d large) of %d keys, "
	  . "%d calls acknowledged; retries: %d of unacknowledged writes (%d found already committed), "
	  . "%d concurrent duplicates, %d of acknowledged writes, %d interrupted by a kill; errors: %s; "
	  . "lost %d, doubled %d",
	$rounds, $drained, $secs, $seed,
	join(', ', map { "$_ $kills{$_}" } sort keys %kills),
	scalar keys %batches, $n_large, $batch_keys,
	$calls,
	$count{retries}, $count{found_committed}, $count{dup_retries}, $count{reacks}, $count{interrupted},
	join(', ', map { "$_ x$errors{$_}" } sort keys %errors),
	$n_lost, $n_doubled);

$node->stop;
done_testing();
