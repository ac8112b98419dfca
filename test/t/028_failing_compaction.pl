
# Copyright (c) persist_sink contributors

# A shard whose background compaction cannot succeed (a damaged part):
#  (a) the compactor backs off, doubling its wait after each failure in a
#      row: 60 compare_and_appends over several seconds, each asking for
#      a merge, make a handful of log lines, not one per request; each
#      line says how many failed in a row and when the next try is;
#  (b) an append() stalled at persist_sink.stop_batches fails at once
#      (55000) once three merges failed in a row, naming the cause,
#      instead of waiting for a compaction that cannot come;
#  (c) once the damage is repaired, compaction succeeds again and the
#      shard takes appends;
#  (d) the view compaction_failures shows it throughout, as
#      pg_stat_archiver shows failed archiving: how many failed, the last
#      one's time and error, and how many in a row (0 once one succeeded);
#  (e) ... also for a shard the stats table had no room for (more shards
#      than persist_sink.stats_max): a health signal does not depend on
#      the counters.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep);

my $node = sink_node('failing',
	"persist_sink.compaction = off\npersist_sink.slowdown_batches = 4\npersist_sink.stop_batches = 6\n");
my $q = sub { $node->safe_psql('postgres', shift) };

# 8 batches of 2000 rows (parts in the blob table, not inline)
$q->("SELECT persist_sink.create_shard('bad')");
append_batches($node, 'bad', 0, 7, 2000);
is($q->("SELECT batches FROM persist_sink.shards WHERE name = 'bad'"), 8, 'the shard holds 8 batches');

# damage the first part: one byte of its compressed frame
$q->(q{CREATE TABLE saved AS SELECT * FROM persist_sink.blob
	WHERE key = (SELECT min(key) FROM persist_sink.blob) AND chunk = 0});
$q->(q{UPDATE persist_sink.blob SET data = set_byte(data, 40, get_byte(data, 40) # 255)
	WHERE (key, chunk) IN (SELECT key, chunk FROM saved)});
ok($q->("SELECT count(*) FROM persist_sink.verify('bad')") > 0, 'verify() reports the damage');

my $log_start = -s $node->logfile;
$q->("ALTER SYSTEM SET persist_sink.compaction = on; SELECT pg_reload_conf()");

# (a) requests keep coming: 60 compare_and_appends, 100 ms apart
for my $b (8 .. 67)
{
	append_batches($node, 'bad', $b, $b, 1);
	usleep(100_000);
}
my $log = slurp_file($node->logfile, $log_start);
my @failed = $log =~ /compaction of shard "bad" failed: [^\n]*checksum/g;
note scalar(@failed) . ' failures logged while 60 merges were asked for';
cmp_ok(scalar(@failed), '>=', 2, '(a) the failing merge is logged');
cmp_ok(scalar(@failed), '<=', 8, '(a) ... a handful of times, not once per request');
like($log, qr/It failed \d+ times in a row; the shard is tried again in \d+ seconds at the earliest\./,
	'(a) the log says how many failed in a row and when the next try is');

# (d) what a DBA sees
my $seen = $q->(q{SELECT failures || ' ' || failing_in_a_row || ' '
	|| (last_failed_at > now() - interval '1 minute') || ' ' || last_error
	FROM persist_sink.compaction_failures WHERE shard = 'bad'});
note "compaction_failures: $seen";
like($seen, qr/^(\d+) (\d+) true .*checksum/, '(d) compaction_failures shows the failing shard, its last error and when');
my ($n_failures, $in_a_row) = $seen =~ /^(\d+) (\d+)/;
is($n_failures, scalar(@failed), '(d) ... as many failures as were logged');
is($in_a_row, scalar(@failed), '(d) ... all of them in a row');

# (b) an append stalled at the bound fails at once, naming the cause
my ($rc, $out, $err) = $node->psql('postgres', q{SET statement_timeout = '60s';
	SELECT persist_sink.append('bad', ARRAY['x'], ARRAY['y'], ARRAY[1::bigint])}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, '(b) the stalled append fails');
like($err, qr/ERROR:  55000: shard "bad" holds \d+ batches, at persist_sink.stop_batches, and its background compaction keeps failing/,
	'(b) ... with 55000, saying its compaction keeps failing');
like($err, qr/DETAIL:  \d+ compactions of it failed in a row, the last at [^:]+:[^:]+:[^:]+: [^\n]*checksum/,
	'(b) ... naming the cause');
unlike($err, qr/statement timeout/, '(b) ... not at its statement timeout');

# (c) repair: the part's bytes back; the next try succeeds
$q->(q{UPDATE persist_sink.blob b SET data = s.data FROM saved s WHERE (b.key, b.chunk) = (s.key, s.chunk)});
is($q->("SELECT count(*) FROM persist_sink.verify('bad')"), 0, '(c) repaired: verify() is clean');
$q->("SELECT persist_sink.compact('bad')");
($rc, $out, $err) = $node->psql('postgres',
	q{SELECT persist_sink.append('bad', ARRAY['x'], ARRAY['y'], ARRAY[1::bigint]) > 0});
is($out, 't', '(c) the shard takes appends again') or diag($err);
like($q->(q{SELECT failures || ' ' || failing_in_a_row FROM persist_sink.compaction_failures WHERE shard = 'bad'}),
	qr/^[1-9]\d* 0$/, '(d) once a merge succeeded: the failures are counted, none in a row');
$q->('SELECT persist_sink.stats_reset()');
is($q->('SELECT count(*) FROM persist_sink.compaction_failures'), 0, '(d) stats_reset() forgets them');

# (e) the stats table full (stats_max at its least, 100): a shard with no
# counters whose compaction fails is in compaction_failures all the same
$node->append_conf('postgresql.conf', "persist_sink.stats_max = 100\npersist_sink.compaction = off\n");
$q->('ALTER SYSTEM RESET persist_sink.compaction');
$node->restart;
$q->(q{SELECT persist_sink.create_shard('filler_' || i) FROM generate_series(1, 100) i});
$q->(q{SELECT persist_sink.compare_and_append('filler_' || i, ARRAY['k'], ARRAY['v'], ARRAY[0::bigint],
	ARRAY[1::bigint], 0, 1) FROM generate_series(1, 100) i});
$q->("SELECT persist_sink.create_shard('uncounted')");
append_batches($node, 'uncounted', 0, 7, 2000);
is($q->(q{SELECT count(*) FROM persist_sink.stats WHERE shard = 'uncounted'}), 0,
	'(e) the stats table has no room for the last shard');
cmp_ok($q->('SELECT uncounted FROM persist_sink.stats_info()'), '>', 0, '(e) ... stats_info() counts its additions as uncounted');
$q->(q{UPDATE persist_sink.blob SET data = set_byte(data, 40, get_byte(data, 40) # 255)
	WHERE (key, chunk) = (SELECT key, 0 FROM persist_sink.blob WHERE key LIKE 'uncounted/%' ORDER BY key LIMIT 1)});
$log_start = -s $node->logfile;
$q->("ALTER SYSTEM SET persist_sink.compaction = on; SELECT pg_reload_conf()");
append_batches($node, 'uncounted', 8, 8, 1);
ok($node->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM persist_sink.compaction_failures WHERE shard = 'uncounted'}),
	'(e) compaction_failures shows the uncounted shard whose compaction fails');
like($q->(q{SELECT failures || ' ' || failing_in_a_row || ' ' || last_error
	FROM persist_sink.compaction_failures WHERE shard = 'uncounted'}),
	qr/^([1-9]\d*) \1 .*checksum/, '(e) ... its failures (those in a row) and its last error');
like(slurp_file($node->logfile, $log_start), qr/compaction of shard "uncounted" failed/, '(e) ... as the log does');

$node->stop;
done_testing();
