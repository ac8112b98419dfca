
# Copyright (c) persist_sink contributors

# Every database where the extension is created is served, with no restart
# and no setting to list it.  persist_sink.database ("postgres" here) has
# its workers from server start; another database gets a sink worker and a
# compactor when it has work, which exit after
# persist_sink.worker_idle_timeout (2s here) with nothing to do.
#  (a) Three databases append to shards of the same name at once: each
#      shard holds its own database's rows only, compaction merges each,
#      and each database's stats count its own appends.
#  (b) The on-demand workers show up in pg_stat_activity under their
#      database, exit once idle, and the next append starts them again.
#  (c) CREATE DATABASE ... TEMPLATE and DROP DATABASE succeed while that
#      database's workers run, and nothing tries to start them again.
#  (d) After a crash, a database's next append is served by one worker.
#  (e) With no background worker slot free, an append in another database
#      fails at once with 53400, naming max_worker_processes, writes
#      nothing, and the server log says what to raise.
#  (f) With persist_sink.max_databases other databases served, an append
#      in one more fails at once with 53400 and writes nothing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('databases', "persist_sink.worker_idle_timeout = '2s'\nrestart_after_crash = on\n");
my $dir = PostgreSQL::Test::Utils::tempdir;
my ($rc, $out, $err);
my @dbs = ('postgres', 'db_a', 'db_b');

for my $db (@dbs[1 .. 2])
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION persist_sink');
}
$node->safe_psql($_, "SELECT persist_sink.create_shard('s')") for @dbs;

# The on-demand workers of database $db, as "sink compactor" counts.
sub workers_of
{
	my ($db) = @_;
	return $node->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE backend_type = 'persist_sink worker') || ' ' ||
	   count(*) FILTER (WHERE backend_type = 'persist_sink compactor')
FROM pg_stat_activity WHERE datname = '$db'});
}

# (a) 300 one-row appends in each database at once, keys naming the database
my @sessions;
for my $db (@dbs)
{
	push @sessions, start_psql($node, $dir, "append_$db", qq{
SELECT count(persist_sink.append('s', ARRAY['$db/' || i], ARRAY['v'], ARRAY[1::bigint]))
FROM generate_series(1, 300) i;
}, db => $db);
}
for my $s (@sessions)
{
	my $r = finish_psql($s);
	ok($r->{ok}, "$s->{name}: 300 appends") or diag $r->{err};
	is($r->{out}, "300\n", "$s->{name}: every append returned a time");
}
for my $db (@dbs)
{
	is( $node->safe_psql($db, qq{
SELECT count(*) || ' ' || count(*) FILTER (WHERE convert_from(key, 'UTF8') LIKE '$db/%') || ' ' || sum(diff)
FROM persist_sink.snapshot('s')}),
		'300 300 300', "$db: its shard holds its 300 rows and no other database's");
	ok( $node->poll_query_until($db, qq{
SELECT batches < 20 FROM persist_sink.shards WHERE name = 's'}),
		"$db: compaction merged the shard's batches");
	is( $node->safe_psql($db, q{
SELECT count(*) || ' ' || sum(updates) FROM persist_sink.stats WHERE shard = 's'}),
		'1 300', "$db: stats count this database's 300 updates");
	is($node->safe_psql($db, "SELECT count(*) FROM persist_sink.verify('s')"),
		'0', "$db: verify() is clean");
}

# (b) on-demand workers: present while busy, gone once idle, back on demand
is(workers_of('postgres'), '2 2', 'persist_sink.database keeps its 2 workers and 2 compactors');
ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 0 FROM pg_stat_activity
WHERE datname IN ('db_a', 'db_b') AND backend_type LIKE 'persist_sink %'}),
	'the other databases\' workers exit once idle');
$node->safe_psql('db_a',
	"SELECT persist_sink.append('s', ARRAY['db_a/again'], ARRAY['v'], ARRAY[1::bigint])");
is(workers_of('db_a'), '1 1', 'the next append starts a worker (and its request a compactor)');
is( $node->safe_psql('db_a', q{
SELECT application_name FROM pg_stat_activity
WHERE datname = 'db_a' AND backend_type = 'persist_sink worker'}),
	'persist_sink worker of database db_a', 'named after its database');
is($node->safe_psql('db_a', "SELECT count(*) FROM persist_sink.snapshot('s')"),
	'301', 'and the append is there');

# (c) CREATE DATABASE ... TEMPLATE and DROP DATABASE while the workers of
# the database run (both need it left by every other process)
$node->safe_psql('db_a',
	"SELECT persist_sink.append('s', ARRAY['db_a/template'], ARRAY['v'], ARRAY[1::bigint])");
is(workers_of('db_a'), '1 1', 'db_a has its workers');
($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE db_copy TEMPLATE db_a');
is($rc, 0, 'CREATE DATABASE ... TEMPLATE succeeds while its workers run') or diag $err;
is($node->safe_psql('db_copy', "SELECT count(*) FROM persist_sink.snapshot('s')"),
	'302', 'and the copy holds its shards');
$node->safe_psql('postgres', 'DROP DATABASE db_copy');
$node->safe_psql('db_b',
	"SELECT persist_sink.append('s', ARRAY['db_b/last'], ARRAY['v'], ARRAY[1::bigint])");
is(workers_of('db_b'), '1 1', 'db_b has its workers');
my $log_offset = -s $node->logfile;
($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE db_b');
is($rc, 0, 'DROP DATABASE succeeds while its workers run') or diag $err;
sleep 3;
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'persist_sink %' AND datname IS DISTINCT FROM 'postgres' AND datname IS DISTINCT FROM 'db_a'}),
	'0', 'no worker is left for the dropped database');
unlike(slurp_file($node->logfile, $log_offset), qr/FATAL/,
	'and none tried to start again');

# (d) a crash: the next append of db_a is served by one worker
$node->safe_psql('db_a',
	"SELECT persist_sink.append('s', ARRAY['db_a/before crash'], ARRAY['v'], ARRAY[1::bigint])");
my $pid = $node->safe_psql('postgres', q{
SELECT pid FROM pg_stat_activity WHERE datname = 'db_a' AND backend_type = 'persist_sink worker'});
kill 'KILL', $pid;
$node->poll_query_until('postgres', 'SELECT true', 't');
$node->poll_query_until('db_a', 'SELECT true', 't');
is( $node->safe_psql('db_a', q{
SELECT persist_sink.append('s', ARRAY['db_a/after crash'], ARRAY['v'], ARRAY[1::bigint]) > 0}),
	't', 'db_a appends after the crash');
is($node->safe_psql('db_a', "SELECT count(*) FROM persist_sink.snapshot('s')"),
	'304', 'with every acknowledged append');
is(workers_of('db_a') =~ /^1 /, 1, 'served by one worker');

# (e) no background worker slot free: 4 workers of postgres and the
# logical replication launcher take all 5
$node->append_conf('postgresql.conf', "max_worker_processes = 5\n");
$node->restart;
$log_offset = -s $node->logfile;
($rc, $out, $err) = $node->psql('db_a',
	"SELECT persist_sink.append('s', ARRAY['db_a/refused'], ARRAY['v'], ARRAY[1::bigint])",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  53400: could not start a persist_sink worker for database "db_a"/,
	'an append finds no slot: 53400');
like($err, qr/max_worker_processes is 5/, 'naming max_worker_processes');
is($node->safe_psql('db_a', "SELECT count(*) FROM persist_sink.snapshot('s')"),
	'304', 'nothing was written');
like(slurp_file($node->logfile, $log_offset),
	qr/could not start a persist_sink worker for database "db_a": no background worker slot is free\n.*HINT:  Raise max_worker_processes/,
	'the server log says what to raise');
is( $node->safe_psql('postgres', "SELECT persist_sink.append('s', ARRAY['p'], ARRAY['v'], ARRAY[1::bigint]) > 0"),
	't', 'persist_sink.database is served as always');

# (f) persist_sink.max_databases other databases already served (0 here):
# an append in another fails at once with 53400 and writes nothing
$node->append_conf('postgresql.conf', "max_worker_processes = 16\npersist_sink.max_databases = 0\n");
$node->restart;
($rc, $out, $err) = $node->psql('db_a',
	"SELECT persist_sink.append('s', ARRAY['db_a/no slot'], ARRAY['v'], ARRAY[1::bigint])",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  53400: no persist_sink worker is free for database "db_a"/,
	'no worker slot left for another database: 53400');
is($node->safe_psql('db_a', "SELECT count(*) FROM persist_sink.snapshot('s')"),
	'304', 'nothing was written');

$node->stop;
done_testing();
