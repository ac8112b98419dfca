#!/usr/bin/perl
# The random sequence of operations of test/operations/run and its checks
# (see the comment at the top of run).  Started by run's inner part with
# servers A and B up and the object store started; one process, one psql
# per statement (the crashes' writers are psql processes of their own).
#
# The model: each database has shards; a shard is "owned" by its database
# when its parts are in the blob table or under the database's own prefix,
# "inherited" when a copy or a restored dump got it from an original (its
# state names the original's objects).  The writes acknowledged to a shard
# are kept per shard; a copy or a restore starts with the original's.  At
# the end every acknowledged write must read back exactly once, but from
# an inherited shard that fails with XX001 (an object missing): the
# original deletes the objects its merges and drops replace, whatever a
# copy still names, so such a shard is counted, not checked.
use strict;
use warnings;
use utf8;
use Getopt::Long;
use IPC::Run qw(run start finish timeout);
use Time::HiRes qw(time sleep);
use List::Util qw(shuffle max min sum0);
use Encode qw(encode_utf8 decode_utf8);

binmode STDOUT, ':encoding(UTF-8)';
binmode STDERR, ':encoding(UTF-8)';

my ($WORK, $OUT, $SECONDS, $SEED, $PORT_A, $PORT_B, $PORT_STANDBY, $OBJSTORE);
GetOptions('work=s' => \$WORK, 'out=s' => \$OUT, 'seconds=i' => \$SECONDS, 'seed=i' => \$SEED,
	'port-a=i' => \$PORT_A, 'port-b=i' => \$PORT_B, 'port-standby=i' => \$PORT_STANDBY, 'objstore=s' => \$OBJSTORE)
  or die "bad options\n";
srand($SEED);

my %server = (
	A => { port => $PORT_A, sock => "$WORK/A/sock", data => "$WORK/A/data", log => "$OUT/server_A.log" },
	B => { port => $PORT_B, sock => "$WORK/B/sock", data => "$WORK/B/data", log => "$OUT/server_B.log" });
my $BUCKET = 'persist-sink';

open(my $oplog, '>:encoding(UTF-8)', "$OUT/operations.log") or die "$OUT/operations.log: $!";
$oplog->autoflush(1);

sub stamp { my @t = gmtime(); return sprintf('%02d:%02d:%02d', @t[2, 1, 0]) }
sub say_ { print STDERR "[operations " . stamp() . "] @_\n" }
sub note { print $oplog sprintf('%.3f ', time()), @_, "\n" }

# ---------------------------------------------------------------------------
# psql
# ---------------------------------------------------------------------------

# Runs $sql in database $db of server $s: (ok, stdout, stderr, sqlstate).
# sqlstate is '' for a success, 'conn' where no SQLSTATE came (the
# connection failed or was lost).
sub psql
{
	my ($s, $db, $sql, %o) = @_;
	my @cmd = ('psql', '-X', '-q', '-At', '-F', "\t", '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose',
		'-h', $server{$s}{sock}, '-p', $server{$s}{port}, '-d', $db);
	my ($out, $err) = ('', '');
	my $in = encode_utf8($sql);
	my $ok = eval { run(\@cmd, '<', \$in, '>', \$out, '2>', \$err, timeout($o{timeout} // 120)) };
	$err .= "timed out\n" unless defined $ok || $@ eq '';
	$out = decode_utf8($out);
	$err = decode_utf8($err);
	my $state = '';
	if (!$ok)
	{
		$state = $err =~ /(?:ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):/ ? $1 : 'conn';
	}
	return ($ok ? 1 : 0, $out, $err, $state);
}

# Runs $sql; dies on an error.
sub psql_ok
{
	my ($s, $db, $sql, %o) = @_;
	my ($ok, $out, $err) = psql($s, $db, $sql, %o);
	die "psql on $s/$db failed: $err\n$sql\n" unless $ok;
	chomp $out;
	return $out;
}

sub lit { my ($v) = @_; $v =~ s/'/''/g; return "'$v'" }

sub first_line { my ($e) = @_; $e //= ''; $e =~ s/\n.*//s; return $e }

# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------

# Waits (at most $secs) until server $s answers in database postgres.
sub wait_up
{
	my ($s, $secs) = @_;
	my $until = time() + ($secs // 120);
	while (time() < $until)
	{
		my ($ok) = psql($s, 'postgres', 'SELECT 1', timeout => 10);
		return 1 if $ok;
		system("pg_ctl -D $server{$s}{data} status >/dev/null 2>&1") == 0
		  or system("pg_ctl -D $server{$s}{data} -l $server{$s}{log} -w start >/dev/null 2>&1");
		sleep 0.5;
	}
	die "server $s did not come up\n";
}

sub crash_server
{
	my ($s) = @_;
	system("pg_ctl -D $server{$s}{data} -m immediate stop >/dev/null 2>&1");
	system("pg_ctl -D $server{$s}{data} -l $server{$s}{log} -w start >/dev/null 2>&1");
	wait_up($s);
}

sub restart_server
{
	my ($s) = @_;
	system("pg_ctl -D $server{$s}{data} -l $server{$s}{log} -m fast -w restart >/dev/null 2>&1");
	wait_up($s);
}

# Sets persist_sink.blob_store of server $s and waits until new sessions see it.
sub set_store
{
	my ($s, $store) = @_;
	return if ($server{$s}{store} // '') eq $store;
	psql_ok($s, 'postgres', "ALTER SYSTEM SET persist_sink.blob_store = " . lit($store) . ";\nSELECT pg_reload_conf();");
	for (1 .. 100)
	{
		if (psql_ok($s, 'postgres', "SELECT current_setting('persist_sink.blob_store')") eq $store)
		{
			$server{$s}{store} = $store;
			return;
		}
		sleep 0.05;
	}
	die "server $s: persist_sink.blob_store was not reloaded\n";
}

# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

# database name => { server, kind (orig, copy, dump), from, shards => { name => shard } }
# shard: { store (table or the s3:// URL), owned (0/1), writes => [ wid... ] }
my %db;
# wid => { db, shard, n, key, outcome (acked, error), time, error }
my %write;
my $next_wid = 1;
my (%count, %errors);	# operation => count; "operation in kind: sqlstate" => count

my @hostile = ('.', '..', 'a/b', '%2F', '%2e', ' spaced name ', '~x', 'café',
	('n' . ('é' x 99) . 'z'),		# 200 bytes of UTF-8
	'plain1', 'plain2', 'plain3');

sub prefix_of { my ($d) = @_; return "s3://$BUCKET/$db{$d}{server}/$d" }

sub pick { my @l = @_; return @l ? $l[ int(rand(@l)) ] : undef }

sub dbs_of_kind { my @k = @_; return sort grep { my $d = $_; grep { $db{$d}{kind} eq $_ } @k } keys %db }

sub error_count
{
	my ($op, $d, $state, $msg) = @_;
	my $what = "$op in $db{$d}{kind}: $state";
	$errors{$what}++;
	note("ERROR $op $d: $state ", first_line($msg));
}

# Creates shard $name in database $d, under the database's prefix or in the blob table.
sub create_shard
{
	my ($d, $name, $table) = @_;
	my $s = $db{$d}{server};
	my $store = $table ? 'table' : prefix_of($d);
	set_store($s, $store);
	my ($ok, undef, $err, $state) = psql($s, $d, 'SELECT persist_sink.create_shard(' . lit($name) . ')');
	$count{create_shard}++;
	if (!$ok)
	{
		error_count('create_shard', $d, $state, $err);
		$count{'create_shard refused (42602)'}++ if $state eq '42602';
		return 0;
	}
	$db{$d}{shards}{$name} = { store => $store, owned => 1, writes => [] };
	note("create_shard $d '$name' $store");
	return 1;
}

# SQL of write $w's append
sub append_sql
{
	my ($w) = @_;
	my $tag = "w$w->{wid}";
	return 'SELECT persist_sink.append(' . lit($w->{shard})
	  . ", ARRAY(SELECT '$tag-' || g FROM generate_series(1, $w->{n}) g),"
	  . " ARRAY(SELECT md5('$tag-' || g) FROM generate_series(1, $w->{n}) g),"
	  . " array_fill(1::bigint, ARRAY[$w->{n}]), '$w->{key}')";
}

sub new_write
{
	my ($d, $shard, $n) = @_;
	my $wid = $next_wid++;
	my $w = { wid => $wid, db => $d, shard => $shard, n => $n, key => "k$wid-" . int(rand(1e9)) };
	$write{$wid} = $w;
	return $w;
}

# Records the outcome of write $w: a time, or a definite error
sub settle
{
	my ($w, $time, $state, $err) = @_;
	if (defined $time)
	{
		$w->{outcome} = 'acked';
		$w->{time} = $time;
		push @{ $db{ $w->{db} }{shards}{ $w->{shard} }{writes} }, $w->{wid};
		$count{'appends acknowledged'}++;
	}
	else
	{
		$w->{outcome} = 'error';
		$w->{error} = $state;
		error_count('append', $w->{db}, $state, $err);
	}
	note("append $w->{db} '$w->{shard}' w$w->{wid} n=$w->{n} key=$w->{key}: ",
		defined $time ? "time $time" : "error $state " . first_line($err));
}

# Appends write $w, retrying with its key while its outcome is unknown.
sub do_append
{
	my ($w) = @_;
	my $s = $db{ $w->{db} }{server};
	for my $try (1 .. 120)
	{
		my ($ok, $out, $err, $state) = psql($s, $w->{db}, append_sql($w), timeout => 90);
		if ($ok && $out =~ /^(\d+)$/m)
		{
			settle($w, $1);
			return;
		}
		if ($ok || $state =~ /^(conn|40003|57P01|57P02|57P03|08...)$/ || $err =~ /timed out/)
		{
			$count{'appends retried with their key'}++;
			sleep 0.5;
			wait_up($s) if $state ne '40003';
			next;
		}
		settle($w, undef, $state, $err);
		return;
	}
	die "write w$w->{wid} never got an outcome\n";
}

# ---------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------

sub op_append
{
	my ($d) = @_;
	my @names = sort keys %{ $db{$d}{shards} };
	return 0 unless @names;
	my $shard = pick(@names);
	my $n = rand() < 0.7 ? 1 + int(rand(20)) : 1500 + int(rand(4500));
	$count{"append to $db{$d}{kind}"}++;
	do_append(new_write($d, $shard, $n));
	return 1;
}

sub op_drop_shard
{
	my ($d, $inherited) = @_;
	my $shard = pick(sort grep { !$inherited || !$db{$d}{shards}{$_}{owned} } keys %{ $db{$d}{shards} });
	return 0 unless defined $shard;
	my ($ok, undef, $err, $state) = psql($db{$d}{server}, $d, 'SELECT persist_sink.drop_shard(' . lit($shard) . ')');
	$count{"drop_shard in $db{$d}{kind}"}++;
	if (!$ok)
	{
		error_count('drop_shard', $d, $state, $err);
		return 1;
	}
	note("drop_shard $d '$shard'");
	delete $db{$d}{shards}{$shard};
	return 1;
}

sub op_create_shard
{
	my ($d) = @_;
	my @free = grep { !exists $db{$d}{shards}{$_} && $_ ne 'a/b' } @hostile;
	return 0 unless @free;
	create_shard($d, pick(@free), rand() < 0.15);
	return 1;
}

sub op_compact
{
	my ($d) = @_;
	my $shard = pick(sort keys %{ $db{$d}{shards} });
	return 0 unless defined $shard;
	my ($ok, undef, $err, $state) = psql($db{$d}{server}, $d, 'SELECT persist_sink.compact(' . lit($shard) . ')');
	$count{"compact in $db{$d}{kind}"}++;
	if (!$ok) { error_count('compact', $d, $state, $err) }
	else { note("compact $d '$shard'") }
	return 1;
}

sub op_downgrade_since
{
	my ($d) = @_;
	my $shard = pick(sort keys %{ $db{$d}{shards} });
	return 0 unless defined $shard;
	my $l = lit($shard);
	my $back = int(rand(4000));
	my ($ok, $out, $err, $state) = psql($db{$d}{server}, $d,
		"SELECT persist_sink.downgrade_since($l, greatest(persist_sink.shard_since($l),"
		  . " persist_sink.shard_upper($l) - $back));\nSELECT persist_sink.shard_since($l)");
	$count{"downgrade_since in $db{$d}{kind}"}++;
	if (!$ok) { error_count('downgrade_since', $d, $state, $err) }
	else { my ($since) = $out =~ /(\d+)\s*$/; note("downgrade_since $d '$shard': since $since") }
	return 1;
}

# A copy's shards: what the original's hold, the object store's inherited
sub inherit
{
	my ($from, $to, $s, $kind) = @_;
	my %shards;
	for my $name (keys %{ $db{$from}{shards} })
	{
		my $sh = $db{$from}{shards}{$name};
		$shards{$name} = { store => $sh->{store}, owned => $sh->{store} eq 'table' ? 1 : 0,
			writes => [ @{ $sh->{writes} } ] };
	}
	$db{$to} = { server => $s, kind => $kind, from => $from, shards => \%shards };
}

my $copies = 0;
sub op_copy_template
{
	my $orig = pick(dbs_of_kind('orig'));
	my $copy = 'copy' . ++$copies;
	$count{'CREATE DATABASE TEMPLATE'}++;
	for my $try (1 .. 5)
	{
		# PostgreSQL refuses a template with other sessions connected
		psql('A', 'postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = " . lit($orig) . " AND backend_type = 'client backend'");
		my ($ok, undef, $err, $state) = psql('A', 'postgres', "CREATE DATABASE $copy TEMPLATE $orig");
		if ($ok)
		{
			inherit($orig, $copy, 'A', 'copy');
			note("CREATE DATABASE $copy TEMPLATE $orig");
			return 1;
		}
		note("CREATE DATABASE $copy TEMPLATE $orig failed ($state): ", first_line($err));
		sleep 1;
	}
	$errors{'CREATE DATABASE TEMPLATE failed 5 times'}++;
	return 1;
}

my $dumps = 0;
sub op_dump_restore
{
	my ($s) = @_;
	my $orig = pick(dbs_of_kind('orig'));
	my $to = ($s eq 'A' ? 'dump' : 'bdump') . ++$dumps;
	my $plain = rand() < 0.5;
	$count{"pg_dump restored on $s"}++;
	psql_ok($s, 'postgres', "CREATE DATABASE $to TEMPLATE template0");
	my $file = "$WORK/$to.dump";
	my @from = ('-h', $server{A}{sock}, '-p', $server{A}{port}, '-d', $orig);
	my @into = ('-h', $server{$s}{sock}, '-p', $server{$s}{port}, '-d', $to);
	my ($out, $err) = ('', '');
	my $ok = $plain
	  ? run([ 'pg_dump', @from, '-f', $file ], '2>', \$err)
		&& run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', @into, '-f', $file ], '>', \$out, '2>', \$err)
	  : run([ 'pg_dump', '-Fc', @from, '-f', $file ], '2>', \$err)
		&& run([ 'pg_restore', '--exit-on-error', @into, $file ], '>', \$out, '2>', \$err);
	unlink $file;
	if (!$ok)
	{
		$errors{"pg_dump restored on $s failed"}++;
		note("pg_dump $orig restored into $s/$to failed: $err");
		return 1;
	}
	inherit($orig, $to, $s, 'dump');
	note("pg_dump $orig restored into $s/$to (", $plain ? 'plain, psql' : '-Fc, pg_restore', ")");
	return 1;
}

# Writers of keyed appends to the originals on A, psql processes of their own
sub start_writers
{
	my @procs;
	for my $c (1 .. 2 + int(rand(2)))
	{
		my $d = pick(dbs_of_kind('orig'));
		my @names = sort keys %{ $db{$d}{shards} };
		next unless @names;
		my @ws = map { new_write($d, pick(@names), rand() < 0.7 ? 1 + int(rand(20)) : 1500 + int(rand(3000))) } 1 .. 8;
		my $sql = join('', map { "SELECT 'ack', $_->{wid}, (" . append_sql($_) . ");\n" } @ws);
		my $in = encode_utf8($sql);
		my ($out, $err) = ('', '');
		my $h = start([ 'psql', '-X', '-q', '-At', '-F', "\t", '-h', $server{A}{sock}, '-p', $server{A}{port}, '-d', $d ],
			'<', \$in, '>', \$out, '2>', \$err);
		push @procs, { h => $h, out => \$out, ws => \@ws };
	}
	return @procs;
}

# Waits for the writers; records what they were told, and retries the rest
# with their keys
sub settle_writers
{
	for my $p (@_)
	{
		eval { $p->{h}->finish };
		my %acked = map { (split /\t/)[1, 2] } grep { /^ack\t/ } split /\n/, ${ $p->{out} };
		for my $w (@{ $p->{ws} })
		{
			if (defined $acked{ $w->{wid} }) { settle($w, $acked{ $w->{wid} }) }
			else
			{
				# unanswered, or not sent yet: retried with its key
				$count{'appends retried after a crash or failover'}++;
				do_append($w);
			}
		}
	}
}

# Writers on the originals, and A stopped in immediate mode under them
sub op_crash
{
	my @procs = start_writers();
	sleep(0.1 + rand(1.2));
	note('crash: A stopped in immediate mode');
	$count{'crashes of A (immediate stop)'}++;
	crash_server('A');
	settle_writers(@procs);
	return 1;
}

# A synchronous physical standby of A (pg_basebackup -R), made before the
# operations begin: it follows them all (its commits wait for it)
my $standby;
sub start_standby
{
	my $st = { port => $PORT_STANDBY, sock => "$WORK/A2/sock", data => "$WORK/A2/data", log => "$OUT/server_A2.log" };
	mkdir "$WORK/A2";
	mkdir $st->{sock};
	my $err = '';
	run([ 'pg_basebackup', '-h', $server{A}{sock}, '-p', $server{A}{port}, '-D', $st->{data}, '-R', '-X', 'stream',
			'-c', 'fast' ], '2>', \$err)
	  or die "pg_basebackup failed: $err\n";
	open(my $conf, '>>', "$st->{data}/postgresql.conf") or die;
	print $conf "port = $st->{port}\nunix_socket_directories = '$st->{sock}'\n";
	close $conf;
	system("pg_ctl -D $st->{data} -l $st->{log} -w start >/dev/null 2>&1") == 0 or die "the standby did not start\n";
	psql_ok('A', 'postgres', "ALTER SYSTEM SET synchronous_standby_names = '*';\nSELECT pg_reload_conf();");
	my $sync = 0;
	for (1 .. 300)
	{
		$sync = psql_ok('A', 'postgres', "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'");
		last if $sync;
		sleep 0.1;
	}
	die "the standby is not synchronous\n" unless $sync;
	note('standby of A streaming, synchronous');
	$standby = $st;
}

# Writers on the originals, A stopped in immediate mode under them (and
# left down), the standby promoted, and every write A left unanswered
# retried with its key against the new primary, which is A from then on
sub op_promote
{
	my @procs = start_writers();
	sleep(0.2 + rand(1));
	note('failover: A stopped in immediate mode, the standby promoted');
	system("pg_ctl -D $server{A}{data} -m immediate stop >/dev/null 2>&1");
	system("pg_ctl -D $standby->{data} -w promote >/dev/null 2>&1") == 0 or die "the standby was not promoted\n";
	$server{A} = $standby;
	$standby = undef;
	wait_up('A');
	$count{'standby of A promoted (A down)'}++;
	settle_writers(@procs);
	return 1;
}

sub op_pause
{
	$count{'pauses for the collectors'}++;
	sleep(3 + rand(4));
	return 1;
}

# ---------------------------------------------------------------------------
# Set-up and the sequence
# ---------------------------------------------------------------------------

say_("seed $SEED, $SECONDS s of operations");
my @names = shuffle(@hostile);
for my $i (1 .. 3)
{
	my $d = "orig$i";
	psql_ok('A', 'postgres', "CREATE DATABASE $d");
	psql_ok('A', $d, 'CREATE EXTENSION persist_sink');
	$db{$d} = { server => 'A', kind => 'orig', shards => {} };
}
# every hostile name in some original's object store, and a table shard each
my $i = 0;
for my $name (@names)
{
	create_shard('orig' . (1 + $i++ % 3), $name, 0);
}
create_shard("orig$_", 'tbl', 1) for 1 .. 3;
# something in every shard before the first copy
for my $d (dbs_of_kind('orig'))
{
	for my $shard (sort keys %{ $db{$d}{shards} })
	{
		do_append(new_write($d, $shard, 3));
		do_append(new_write($d, $shard, 2000));
	}
}

my @ops = (
	[ 30, sub { op_append(pick(dbs_of_kind('orig'))) } ],
	[ 10, sub { my $d = pick(dbs_of_kind('copy', 'dump')); $d ? op_append($d) : 0 } ],
	[ 4,  sub { op_compact(pick(dbs_of_kind('orig'))) } ],
	[ 4,  sub { my $d = pick(dbs_of_kind('copy', 'dump')); $d ? op_compact($d) : 0 } ],
	[ 3,  sub { op_downgrade_since(pick(dbs_of_kind('orig'))) } ],
	[ 2,  sub { my $d = pick(dbs_of_kind('copy', 'dump')); $d ? op_downgrade_since($d) : 0 } ],
	[ 2,  sub { op_drop_shard(pick(dbs_of_kind('orig'))) } ],
	[ 2,  sub { my $d = pick(dbs_of_kind('copy', 'dump')); $d ? op_drop_shard($d) : 0 } ],
	[ 3,  sub { op_create_shard(pick(dbs_of_kind('orig'))) } ],
	[ 2,  sub { my $d = pick(dbs_of_kind('copy', 'dump')); $d ? op_create_shard($d) : 0 } ],
	[ 2,  sub { $copies < 6 ? op_copy_template() : 0 } ],
	[ 2,  sub { scalar(grep { $db{$_}{server} eq 'A' && $db{$_}{kind} eq 'dump' } keys %db) < 3 ? op_dump_restore('A') : 0 } ],
	[ 2,  sub { scalar(grep { $db{$_}{server} eq 'B' } keys %db) < 4 ? op_dump_restore('B') : 0 } ],
	[ 1,  sub { op_pause() } ],
);
my $total_weight = sum0(map { $_->[0] } @ops);

start_standby();
my $start = time();
my $next_crash = $start + $SECONDS * (0.2 + rand(0.3));
my $promote_at = 0.4 + rand(0.3);
# every run begins with a copy and a dump on the other server, each of
# which drops a shard it inherited
op_copy_template();
op_dump_restore('B');
op_drop_shard($_, 1) for dbs_of_kind('copy', 'dump');
while (time() - $start < $SECONDS)
{
	if ($standby && time() - $start >= $SECONDS * $promote_at)
	{
		op_promote();
		next;
	}
	if (time() >= $next_crash)
	{
		op_crash();
		$next_crash = time() + 20 + rand(40);
		next;
	}
	my $r = rand($total_weight);
	for my $op (@ops)
	{
		if (($r -= $op->[0]) < 0)
		{
			$op->[1]->();
			last;
		}
	}
}
op_dump_restore('A') unless grep { $db{$_}{server} eq 'A' && $db{$_}{kind} eq 'dump' } keys %db;
say_(sprintf('%d operations in %.0f s; %d databases on A, %d on B', sum0(values %count), time() - $start,
	scalar(grep { $db{$_}{server} eq 'A' } keys %db), scalar(grep { $db{$_}{server} eq 'B' } keys %db)));

# ---------------------------------------------------------------------------
# The collectors, then the checks
# ---------------------------------------------------------------------------

# Each database's compactor starts at its first append after the restart,
# and its first sweep collects garbage and lists the objects leaked; a
# later one (5 s on) deletes those no state names.
say_('restarting both servers; one append in each database starts its collectors');
restart_server($_) for qw(A B);
for my $d (sort keys %db)
{
	my @names = sort keys %{ $db{$d}{shards} };
	next unless @names;
	my ($owned) = grep { $db{$d}{shards}{$_}{owned} } @names;
	$count{'appends after the restart'}++;
	do_append(new_write($d, $owned // $names[0], 2));
}

# verify() of every shard of $d: [ shard, problem ]...; an error as a problem
sub verify_db
{
	my ($d) = @_;
	my @p;
	for my $shard (sort keys %{ $db{$d}{shards} })
	{
		my ($ok, $out, $err, $state) = psql($db{$d}{server}, $d,
			'SELECT problem FROM persist_sink.verify(' . lit($shard) . ')');
		if (!$ok) { push @p, [ $shard, "verify() failed: $state " . first_line($err) ] }
		else { push @p, map { [ $shard, $_ ] } grep { $_ ne '' } split /\n/, $out }
	}
	return @p;
}

sub garbage_left
{
	my $n = 0;
	for my $d (sort keys %db)
	{
		my ($ok, $out) = psql($db{$d}{server}, $d, 'SELECT count(*) FROM persist_sink.garbage');
		$n += $ok ? $out : 1;
	}
	return $n;
}

sleep 12;
my $wait_until = time() + 150;
my ($garbage, $unreferenced);
while (1)
{
	$garbage = garbage_left();
	$unreferenced = 0;
	for my $d (sort keys %db)
	{
		$unreferenced += grep { $db{$d}{shards}{ $_->[0] }{owned} && $_->[1] =~ /is not referenced/ } verify_db($d);
	}
	last if ($garbage == 0 && $unreferenced == 0) || time() > $wait_until;
	sleep 2;
}
say_("garbage rows left: $garbage; objects of the databases' own shards that no state names: $unreferenced");

# The content of every shard
my ($lost, $doubled, $wrong, $unreadable, $inherited_lost, $inherited_read, $inherited_unreadable) = (0, 0, 0, 0, 0, 0, 0);
my (@details, @verify_problems, @misplaced, @owned_wrong);
my ($inherited_missing, $owned_column, $checked) = (0, 0, 0);
sub detail { push @details, join('', @_) }

for my $d (sort keys %db)
{
	my $s = $db{$d}{server};
	for my $shard (sort keys %{ $db{$d}{shards} })
	{
		my $sh = $db{$d}{shards}{$shard};
		my $l = lit($shard);
		my ($ok, $out, $err, $state) = psql($s, $d, qq{
SELECT persist_sink.shard_since($l);
SELECT split_part(k, '-', 1), "time", count(*), sum(diff), min(diff), max(diff), count(*) FILTER (WHERE v <> md5(k))
FROM (SELECT convert_from(key, 'UTF8') AS k, convert_from(val, 'UTF8') AS v, "time", diff
	  FROM persist_sink.listen($l, persist_sink.shard_since($l) - 1)) u
GROUP BY 1, 2});
		my @wids = @{ $sh->{writes} };
		if (!$ok)
		{
			if ($sh->{owned} || $state ne 'XX001' || $err !~ /is missing/)
			{
				$unreadable++;
				$lost += @wids;
				detail("unreadable: $d '$shard' ($state ", first_line($err), "): its ", scalar(@wids), ' writes lost');
			}
			else
			{
				$inherited_unreadable++;
				$inherited_lost += @wids;
				note("inherited shard $d '$shard' unreadable: $state ", first_line($err));
			}
			next;
		}
		my ($since, @rows) = split /\n/, $out;
		my %found;
		for (@rows)
		{
			my ($wid, $time, $cnt, $sum, $mn, $mx, $bad) = split /\t/;
			$wid =~ s/^w//;
			push @{ $found{$wid} }, { time => $time, cnt => $cnt, sum => $sum, mn => $mn, mx => $mx, bad => $bad };
		}
		# an inherited shard that reads at all has every part its state
		# names: it is checked as the others are
		$inherited_read++ unless $sh->{owned};
		$checked += @wids;
		for my $wid (@wids)
		{
			my $w = $write{$wid};
			my $f = delete $found{$wid};
			my $at = max($w->{time}, $since);
			if (!$f) { $lost++; detail("lost: $d '$shard' w$wid (n=$w->{n}, acked at $w->{time})"); next }
			my $rows = sum0(map { $_->{cnt} } @$f);
			if (@$f > 1 || $rows > $w->{n})
			{
				$doubled++;
				detail("doubled: $d '$shard' w$wid (n=$w->{n}): ", join(', ', map { "$_->{cnt} rows at $_->{time}" } @$f));
			}
			elsif ($f->[0]{time} != $at || $rows != $w->{n} || $f->[0]{sum} != $w->{n} || $f->[0]{mn} != 1
				|| $f->[0]{mx} != 1 || $f->[0]{bad} != 0)
			{
				$wrong++;
				detail("wrong: $d '$shard' w$wid (n=$w->{n}, acked at $w->{time}, since $since): $rows rows at $f->[0]{time},"
					  . " sum $f->[0]{sum}, $f->[0]{bad} with other vals");
			}
		}
		for my $wid (sort keys %found)
		{
			$wrong++;
			my $w = $write{$wid};
			detail("wrong: $d '$shard' holds w$wid, which ",
				!$w ? 'was never written' : $w->{outcome} eq 'error' ? "got $w->{error}" : "went to $w->{db} '$w->{shard}'");
		}
	}
	for my $p (verify_db($d))
	{
		# an inherited shard names the original's objects, which the
		# original deletes once its merges or drops replace them
		if (!$db{$d}{shards}{ $p->[0] }{owned} && $p->[1] =~ /^part .* is missing$/)
		{
			$inherited_missing++;
			note("verify $d '$p->[0]' (inherited): $p->[1]");
		}
		else
		{
			push @verify_problems, [ $d, @$p ];
		}
	}
	# objects_owned (0.16): false for an inherited shard, true (or null,
	# with no marker yet) for the others
	next unless psql_ok($s, $d, "SELECT count(*) FROM pg_attribute
		WHERE attrelid = 'persist_sink.shards'::regclass AND attname = 'objects_owned'");
	$owned_column = 1;
	for (split /\n/, psql_ok($s, $d, "SELECT name, coalesce(objects_owned::text, 'null') FROM persist_sink.shards"))
	{
		my ($shard, $owned) = split /\t/;
		my $sh = $db{$d}{shards}{$shard};
		next if $sh && ($sh->{owned} ? $owned ne 'false' : $owned eq 'false');
		push @owned_wrong, "$d '$shard': objects_owned $owned, " . (!$sh ? 'a shard the run did not make' : $sh->{owned}
			? 'its own' : 'inherited');
	}
}

# The bucket, from the gateway
my $listing = `radosgw-admin -c $OBJSTORE/ceph.conf bucket list --bucket $BUCKET --max-entries=10000000 2>/dev/null`;
die "radosgw-admin failed\n" if $? != 0;
$listing = decode_utf8($listing);
my @objects;
while ($listing =~ /"name": "((?:[^"\\]|\\.)*)"/g)
{
	my $n = $1;
	$n =~ s/\\u([0-9a-fA-F]{4})/chr(hex($1))/ge;
	$n =~ s/\\(.)/$1/g;
	push @objects, $n;
}
# A shard's segment of its objects' keys: its name as it is (as versions
# before 0.16 put it), or escaped (every byte but A-Z, a-z, 0-9, '_' and
# '-' as ~XX)
sub segments
{
	my ($name) = @_;
	my $escaped = join('', map { /[A-Za-z0-9_-]/ ? $_ : sprintf('~%02X', ord($_)) } split(//, encode_utf8($name)));
	return ($name, decode_utf8($escaped));
}

my %by_prefix;
for my $o (@objects)
{
	if ($o =~ m{^(A|B)/([^/]+)/(?:persist_sink\.owner|([^/]+)/[0-9a-f]{32})$}
		&& exists $db{$2} && $db{$2}{server} eq $1)
	{
		my ($s, $d, $seg) = ($1, $2, $3);
		$by_prefix{"$s/$d"}++;
		my %segs = map { my $n = $_; map { $_ => $n } segments($n) } keys %{ $db{$d}{shards} };
		if (defined $seg && !exists $segs{$seg})
		{
			push @misplaced, "$o (of no shard of $d)";
		}
	}
	elsif ($o =~ m{^(A|B)/([^/]+)/} && exists $db{$2} && $db{$2}{server} eq $1)
	{
		push @misplaced, "$o (under $2's prefix, but no part of a shard)";
	}
	else
	{
		push @misplaced, "$o (outside every database's prefix)";
	}
}

# Each owner marker must name the database of its prefix: its server's
# system identifier and its oid ("%020llu %010u", store_owner.c)
my %s3env = do { open(my $f, '<', "$OBJSTORE/s3.env") or die; map { /^(\w+)=(.*)$/ ? ($1 => $2) : () } <$f> };
my @markers_wrong;
my $markers = 0;
for my $o (grep { m{/persist_sink\.owner$} } @objects)
{
	my ($s, $d) = $o =~ m{^(A|B)/([^/]+)/persist_sink\.owner$} or next;
	next unless exists $db{$d} && $db{$d}{server} eq $s;
	$markers++;
	my ($text, $err) = ('', '');
	run([ 'curl', '-sf', '--aws-sigv4', 'aws:amz:us-east-1:s3', '--user', "$s3env{S3_ACCESS_KEY}:$s3env{S3_SECRET_KEY}",
			'-H', 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
			"$s3env{S3_ENDPOINT}/$BUCKET/$o" ], '>', \$text, '2>', \$err)
	  or do { push @markers_wrong, "$o: could not be read ($err)"; next };
	my $want = sprintf("%020s %010s", psql_ok($s, 'postgres', 'SELECT system_identifier FROM pg_control_system()'),
		psql_ok($s, 'postgres', 'SELECT oid FROM pg_database WHERE datname = ' . lit($d)));
	chomp $text;
	push @markers_wrong, "$o names \"$text\", not $d (\"$want\")" if $text ne $want;
}

# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------
# the originals' problems first
@verify_problems = sort { ($db{ $a->[0] }{kind} ne 'orig') <=> ($db{ $b->[0] }{kind} ne 'orig') } @verify_problems;
my @report;
push @report, "seed $SEED, $SECONDS s of operations";
push @report, "operations:";
push @report, sprintf('  %-42s %d', $_, $count{$_}) for sort keys %count;
push @report, "errors of operations (recorded; a copy's writes that need objects fail with 55000):";
push @report, sprintf('  %-42s %d', $_, $errors{$_}) for sort keys %errors;
push @report, sprintf('databases: %s', join(', ', map { "$_ ($db{$_}{server}, $db{$_}{kind}" . ($db{$_}{from} ? " of $db{$_}{from}" : '')
	  . ', ' . scalar(keys %{ $db{$_}{shards} }) . ' shards)' } sort keys %db));
push @report, sprintf('writes checked: %d (in %d shards inherited from an original); inherited shards unreadable'
	  . ' (a part the original deleted): %d, with %d writes', $checked, $inherited_read, $inherited_unreadable, $inherited_lost);
push @report, "objects in the bucket: " . scalar(@objects) . ' (' . join(', ', map { "$_: $by_prefix{$_}" } sort keys %by_prefix) . ')';
push @report, "garbage rows left: $garbage";
push @report, "unreadable shards $unreadable";
push @report, "lost $lost";
push @report, "doubled $doubled";
push @report, "wrong $wrong";
push @report, 'verify problems ' . scalar(@verify_problems)
  . (@verify_problems ? ' (' . join(', ', map { my $d = $_; "$d: " . scalar(grep { $_->[0] eq $d } @verify_problems) }
		  grep { my $d = $_; grep { $_->[0] eq $d } @verify_problems } sort keys %db) . ')' : '');
push @report, '  ' . join(' ', @$_[0, 1]) . ': ' . $_->[2] for @verify_problems[ 0 .. min(9, $#verify_problems) ];
push @report, "parts of inherited shards the original deleted (verify() of the copy): $inherited_missing";
if ($owned_column)
{
	push @report, 'shards whose objects_owned is wrong ' . scalar(@owned_wrong);
	push @report, "  $_" for @owned_wrong[ 0 .. min(9, $#owned_wrong) ];
}
push @report, "owner markers $markers, naming another database " . scalar(@markers_wrong);
push @report, "  $_" for @markers_wrong[ 0 .. min(9, $#markers_wrong) ];
push @report, 'objects out of place ' . scalar(@misplaced);
push @report, "  $_" for @misplaced[ 0 .. min(9, $#misplaced) ];
push @report, "  $_" for @details[ 0 .. min(19, $#details) ];
push @report, '  ...' if @details > 20;

my @checks = (
	[ 'every acknowledged write read back (unreadable inherited shards aside)', $lost == 0 && $unreadable == 0 ],
	[ 'no write twice', $doubled == 0 ],
	[ 'no write torn, at another time or unexpected', $wrong == 0 ],
	[ 'verify() clean in every database', @verify_problems == 0 ],
	[ 'the garbage drained', $garbage == 0 ],
	[ 'every object under its database\'s prefix, of one of its shards', @misplaced == 0 ],
	[ 'every owner marker names the database of its prefix', !@markers_wrong ],
	[ 'every original operation succeeded', !grep { /in orig:/ && !/42602/ } keys %errors ],
);
# with version 0.16's shards column
push @checks, [ 'objects_owned says which shards own their objects', !@owned_wrong ] if $owned_column;
my ($passed, $failed) = (0, 0);
for my $c (@checks)
{
	push @report, ($c->[1] ? 'ok' : 'FAILED') . ": $c->[0]";
	$c->[1] ? $passed++ : $failed++;
}
push @report, "$passed passed, $failed failed";
open(my $rep, '>:encoding(UTF-8)', "$OUT/report.txt") or die;
print $rep "$_\n" for @report;
close $rep;
print "$_\n" for @report;
exit($failed ? 1 : 0);
