
# Copyright (c) persist_sink contributors

# Crash test with a checker.  Four writers append batches of 50 unique keys
# through append() in a loop, small ones (joining the shared batch) and
# large ones (their own parts), and record every acknowledgment (psql
# printed the time append returned).  Meanwhile, at seeded random moments,
# the test SIGKILLs a sink worker, a writer's backend, or the whole server
# (stop -m immediate, then start), for several rounds.  Afterwards:
#
#  - every acknowledged batch is present, each key exactly once (diff 1), at
#    the time its append returned;
#  - every other batch is present entirely or not at all;
#  - nothing else is there;
#  - each writer's acknowledged times strictly increase;
#  - the uppers only moved forward, round after round, and lie past every
#    acknowledged time;
#  - verify() is clean on every shard.
#
# PS_CRASH_SEED and PS_CRASH_ROUNDS override the seed and the round count.
# With PS_CRASH_OBJECT_STORE set (test/t/040_crash_checker_object_store.pl)
# the shards keep their parts in an object store (radosgw, started by
# test/s3/objstore), and verify() is awaited until the collector of leaked
# objects has taken what the kills left (it then also checks that no
# object of a shard is missing or unreferenced).

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = $ENV{PS_CRASH_SEED} // 20241129;
my $rounds = $ENV{PS_CRASH_ROUNDS} // 12;
my $nwriters = 4;
my $batch_keys = 50;
my $script_len = 12000;  # appends per writer per round: more than fit before the kill
my @shards = ('crash_a', 'crash_b');
srand($seed);
note "seed $seed, $rounds rounds, $nwriters writers";

my $dir = PostgreSQL::Test::Utils::tempdir;

my $store_conf = '';
if ($ENV{PS_CRASH_OBJECT_STORE})
{
	my %s3 = %{ start_object_store() };
	$store_conf = qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.blob_store = 's3://persist-sink/crash'
persist_sink.object_disk_cache_size = '2MB'
persist_sink.object_cache_size = '256kB'
};
}
my $node = sink_node(
	'crash', q{
persist_sink.shared_batch_max_bytes = '16kB'
max_connections = 40
restart_after_crash = on
log_min_messages = warning
} . $store_conf);
$node->safe_psql('postgres',
	join(';', map { "SELECT persist_sink.create_shard('$_')" } @shards));
# One append of batch id: keys id-1 .. id-50, every val id (or, for a large
# batch, id 40 times); prints "ack <id> <time>" once append returned.
$node->safe_psql(
	'postgres', qq{
CREATE FUNCTION w(shard text, id text, large boolean) RETURNS text LANGUAGE sql AS \$\$
	SELECT 'ack ' || id || ' ' || persist_sink.append(shard,
		ARRAY(SELECT id || '-' || k FROM generate_series(1, $batch_keys) k),
		array_fill(CASE WHEN large THEN repeat(id, 40) ELSE id END, ARRAY[$batch_keys]),
		array_fill(1::bigint, ARRAY[$batch_keys]))
\$\$});

my %batches;    # every append sent: id => { shard, acked, time }
my %kills;
my @order;      # batch ids per writer, in the order they were sent

# Writes the script of writer $w in round $r: $script_len appends, one in
# four large (above shared_batch_max_bytes); each prints "ack <id> <time>".
sub writer_script
{
	my ($w, $r) = @_;
	my $shard = $shards[ $w % @shards ];
	my $sql = '';
	for my $n (1 .. $script_len)
	{
		$sql .= "SELECT w('$shard', 'w${w}r${r}b$n', " . ($n % 4 == 0 ? 'true' : 'false') . ");\n";
	}
	my $file = "$dir/w$w.r$r.sql";
	open my $fh, '>', $file or die "could not write $file: $!";
	print $fh $sql;
	close $fh;
	return $file;
}

# Starts writer $w of round $r; it goes on past errors until its connection dies.
sub start_writer
{
	my ($w, $r) = @_;
	my $file = writer_script($w, $r);
	my $h = IPC::Run::start(
		[
			$node->installed_command('psql'), '-X', '-At',
			'-v', 'ON_ERROR_STOP=0',
			'-d', $node->connstr('postgres') . " application_name=writer$w",
			'-f', $file
		],
		'<', \undef,
		'>', "$dir/w$w.r$r.out",
		'2>', "$dir/w$w.r$r.err",
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return $h;
}

# Pids of the processes of a kind, the active ones first.
sub pids
{
	my ($where) = @_;
	my ($ret, $out) = $node->psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE $where ORDER BY state = 'active' DESC, random()");
	return $ret == 0 ? grep { /^\d+$/ } split /\n/, $out : ();
}

# The uppers of the shards, as "a b"
sub uppers
{
	return $node->safe_psql('postgres',
		"SELECT string_agg(upper::text, ' ' ORDER BY name) FROM persist_sink.shards");
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
my @unexpected;    # errors an append should never give
my @prev_upper = split / /, uppers();
my $regressed = 0;
my $t0 = time;

for my $r (1 .. $rounds)
{
	wait_sink_workers($node);
	my @writers = map { start_writer($_, $r) } 0 .. $nwriters - 1;

	# a seeded random moment, once the writers are under way
	my $kind = next_kind();
	my $delay = 0.4 + rand(1.6);
	usleep(int($delay * 1_000_000));
	my $victim = '';
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
		die "no $kind to kill in round $r" unless @p;
		$victim = $p[0];
		kill 'KILL', $victim or die "could not kill $victim: $!";
	}
	$kills{$kind}++;

	# the writers die with their connections
	for my $h (@writers)
	{
		eval { $h->finish; };
		if ($@)
		{
			$h->kill_kill;
			die "a writer of round $r did not end: $@";
		}
	}
	wait_sink_workers($node);

	# acknowledgments and errors of this round: the appends sent are those
	# up to the last one acknowledged or refused, and the one after it
	my $acked = 0;
	my @per_writer;
	for my $w (0 .. $nwriters - 1)
	{
		my $out = slurp_file("$dir/w$w.r$r.out");
		my $err = slurp_file("$dir/w$w.r$r.err");
		my $last = 0;
		my $n = 0;
		my %ack_time;
		while ($out =~ /^ack w${w}r${r}b(\d+) (-?\d+)$/mg)
		{
			$ack_time{$1} = $2;
			$acked++;
			$n++;
			$last = $1 if $1 > $last;
		}
		die "writer $w of round $r printed something else than acknowledgments:\n$out"
		  if $n != scalar(() = $out =~ /^./mg);
		my $errors = 0;
		while ($err =~ /^psql:[^:]+:(\d+): ERROR:\s+(.*)$/mg)
		{
			my ($line, $msg) = ($1, $2);
			$errors++;
			$last = $line if $line > $last;
			# an append may fail because its interval's worker died; nothing else
			push @unexpected, "writer $w round $r line $line: $msg"
			  unless $msg =~ /worker exited before the interval committed|worker \d+ is not running/;
		}
		die "writer $w of round $r sent all its appends before the kill: make the scripts longer"
		  if $last >= $script_len;
		for my $i (1 .. $last + 1)
		{
			my $id = "w${w}r${r}b$i";
			$batches{$id} = {
				shard => $shards[ $w % @shards ],
				acked => defined $ack_time{$i} ? 1 : 0,
				time => $ack_time{$i} };
			push @{ $order[$w] }, $id;
		}
		push @per_writer, "$n" . ($errors ? "+${errors}e" : '');
		if ($n == 0 && $errors == 0 && $err !~ /server closed the connection|connection to server was lost|terminating connection/)
		{
			diag "writer $w of round $r: no acknowledgment; stderr: " . substr($err, 0, 500);
		}
	}
	my @upper = split / /, uppers();
	for my $i (0 .. $#upper)
	{
		$regressed++ if $upper[$i] < $prev_upper[$i];
	}
	note sprintf("round %d: killed %s%s after %.2fs; %d appends acknowledged (per writer %s); uppers %s",
		$r, $kind, $victim ? " (pid $victim)" : '', $delay, $acked, join(' ', @per_writer),
		join(' ', @upper));
	@prev_upper = @upper;
}

is($regressed, 0, 'no upper moved back from one round to the next');
is(scalar @unexpected, 0, 'appends failed only because of the kills')
  or diag join("\n", @unexpected[ 0 .. ($#unexpected < 9 ? $#unexpected : 9) ]);

#
# The checker
#
my @acked_ids = grep { $batches{$_}{acked} } keys %batches;
cmp_ok(scalar @acked_ids, '>', 0, 'some appends were acknowledged');

# Each writer's acknowledged times strictly increase.
my $unordered = 0;
for my $w (0 .. $nwriters - 1)
{
	my $prev;
	for my $id (grep { $batches{$_}{acked} } @{ $order[$w] })
	{
		$unordered++ if defined $prev && $batches{$id}{time} <= $prev;
		$prev = $batches{$id}{time};
	}
}
is($unordered, 0, "each writer's acknowledged times strictly increase");

# Load what was attempted and what is there into tables, and compare in SQL.
$node->safe_psql('postgres',
	'CREATE TABLE attempted (batch text PRIMARY KEY, shard text, acked boolean, ack_time bigint)');
my @rows = map {
	my $b = $batches{$_};
	"('$_', '$b->{shard}', " . ($b->{acked} ? "true, $b->{time}" : 'false, NULL') . ')'
} sort keys %batches;
while (my @chunk = splice(@rows, 0, 1000))
{
	$node->safe_psql('postgres', 'INSERT INTO attempted VALUES ' . join(', ', @chunk));
}
$node->safe_psql(
	'postgres', q{
CREATE TABLE present AS
SELECT s.name AS shard, convert_from(l.key, 'UTF8') AS key, split_part(convert_from(l.key, 'UTF8'), '-', 1) AS batch,
	   convert_from(l.val, 'UTF8') AS val, l."time", l.diff
FROM persist_sink.shards s, LATERAL persist_sink.listen(s.name, 0) l;
CREATE TABLE present_batches AS
SELECT shard, batch, count(*) AS keys, count(DISTINCT key) AS distinct_keys,
	   min("time") AS min_time, max("time") AS max_time, bool_and(diff = 1) AS all_once
FROM present GROUP BY shard, batch;
});

my $q = sub { $node->safe_psql('postgres', shift) };
is( $q->(q{SELECT count(*) FROM attempted a
		   WHERE acked AND NOT EXISTS (SELECT FROM present_batches p WHERE p.batch = a.batch)}),
	'0', 'no acknowledged batch is lost');
is($q->('SELECT count(*) FROM present WHERE diff <> 1'), '0', 'every key present has diff 1 (none doubled)');
is($q->('SELECT count(*) FROM (SELECT key FROM present GROUP BY key HAVING count(*) > 1) d'),
	'0', 'no key is present at two times');
is( $q->("SELECT count(*) FROM present_batches WHERE keys <> $batch_keys OR distinct_keys <> $batch_keys"),
	'0', 'every batch present is whole (no batch is partially present)');
is($q->('SELECT count(*) FROM present_batches WHERE min_time <> max_time'),
	'0', "every batch present is at a single time");
is( $q->(q{SELECT count(*) FROM present_batches p
		   WHERE NOT EXISTS (SELECT FROM attempted a WHERE a.batch = p.batch AND a.shard = p.shard)}),
	'0', 'nothing is present that was not written, nor in another shard');
is( $q->(q{SELECT count(*) FROM present p JOIN attempted a USING (batch)
		   WHERE p.val NOT IN (a.batch, repeat(a.batch, 40))}),
	'0', 'every value is the one written');
is( $q->(q{SELECT count(*) FROM present_batches p JOIN attempted a USING (batch)
		   WHERE a.acked AND p.min_time <> a.ack_time}),
	'0', 'every acknowledged batch is at the time its append returned');
is( $q->(q{SELECT count(*) FROM attempted a JOIN persist_sink.shards s ON s.name = a.shard
		   WHERE a.acked AND a.ack_time >= s.upper}),
	'0', 'every acknowledged time is below the upper');
is( $q->(q{SELECT count(*) FROM persist_sink.shards s
		   WHERE (SELECT count(*) FROM persist_sink.snapshot(s.name))
				 <> (SELECT count(*) FROM present p WHERE p.shard = s.name)}),
	'0', 'snapshot and listen agree');
# objects put by appends the kills cut short wait for the leak collector
$node->poll_query_until('postgres',
	'SELECT count(*) = 0 FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)')
  if $store_conf;
is( $q->(q{SELECT string_agg(s.name || ': ' || v.problem, E'\n')
		   FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name) v}),
	'', 'verify() is clean on every shard');
is($q->('SELECT count(*) FROM persist_sink.shards WHERE blob_store = \'table\''),
	$store_conf ? '0' : scalar(@shards), 'the shards keep their parts where the test says');
is($q->('SELECT bool_and(blob_bytes > 0) FROM persist_sink.shards'),
	't', 'every shard has parts out of its state (in the blob table or the store)');

my ($n_acked, $n_unacked_present, $n_unacked_absent) = split /\|/, $q->(q{
SELECT count(*) FILTER (WHERE acked),
	   count(*) FILTER (WHERE NOT acked AND EXISTS (SELECT FROM present_batches p WHERE p.batch = a.batch)),
	   count(*) FILTER (WHERE NOT acked AND NOT EXISTS (SELECT FROM present_batches p WHERE p.batch = a.batch))
FROM attempted a});
my ($n_lost, $n_doubled) = split /\|/, $q->(q{
SELECT (SELECT count(*) FROM attempted a
		WHERE acked AND NOT EXISTS (SELECT FROM present_batches p WHERE p.batch = a.batch)),
	   (SELECT count(*) FROM present WHERE diff > 1)});

ok($node->log_contains('was terminated by signal 9'),
	'the killed processes took the server through crash recovery');

# The shards go on after all that
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT persist_sink.append('$shards[0]', '{after}'::text[], '{crash}'::text[], '{1}') > 0");
is($out, 't', 'an append after the last round succeeds');

note sprintf(
	"%d rounds in %.0fs; kills: %s; %d appends of %d keys sent, "
	  . "%d acknowledged (lost %d, doubled keys %d), %d not acknowledged but whole, %d not acknowledged and absent",
	$rounds, time - $t0,
	join(', ', map { "$_ $kills{$_}" } sort keys %kills),
	$n_acked + $n_unacked_present + $n_unacked_absent, $batch_keys,
	$n_acked, $n_lost, $n_doubled, $n_unacked_present, $n_unacked_absent);

$node->stop;
done_testing();
