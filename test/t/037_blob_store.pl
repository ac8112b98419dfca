
# Copyright (c) persist_sink contributors

# Shards whose parts are in an object store (persist_sink.blob_store set to
# s3://persist-sink/t37), against a real one: Ceph's RADOS Gateway, started
# by test/s3/objstore in this test's directory.
#  (a) Four clients append small writes (shared, inline parts) and large
#      ones (parts of their own, put as objects) at once: every one is
#      acknowledged and read exactly once, the blob table holds nothing,
#      the shards view names the store, verify() is clean;
#      object_store_stats counts the puts of the appends and the gets of
#      the reads, with their bytes and latency.
#      A process reads a part again from its cache of objects, with no
#      request; with persist_sink.object_cache_size 0 it gets them again.
#  (b) compact() lists the replaced objects as garbage; a REPEATABLE READ
#      transaction that read the shard before keeps reading it whole (its
#      snapshot holds them back, as it would hold back blob rows; it reads
#      without the cache of objects, so from the store); once it
#      ends they are deleted and the bucket holds exactly the state's
#      parts.
#  (c) A compare_and_append() rolled back leaves its objects behind:
#      verify() names them, and the collector of leaked objects deletes
#      them.
#  (d) The gateway killed (SIGKILL) during eight clients' appends (small
#      and large) and the merges they cause, and started again: appends fail with 58030 within persist_sink.s3_timeout while
#      it is down (none hangs), every acknowledged write is read exactly
#      once, nothing half-written, verify() clean after the collectors ran;
#      object_store_stats shows the requests that failed, their retries,
#      and each kind's last failure, from after the kill.
#  (e) A short outage (the gateway killed and started again at once, well
#      within persist_sink.s3_timeout) during two clients' appends: the
#      requests are retried until it is back, and every append succeeds,
#      exactly once.
#  (f) The server stopped in immediate mode during appends: after the
#      restart every acknowledged write is read exactly once, and what the
#      crash left in the bucket is collected.
#  (g) An object a state names, deleted behind the extension's back: a
#      read fails with XX001 naming it, through the cache of objects and
#      without it, verify() reports the part missing, and drop_shard()
#      still drops the shard (the DELETE of a missing object succeeds).
#  (h) A large write cancelled while its backend puts its parts (it puts
#      them itself, once the worker takes them): the call fails with 57014
#      and writes nothing; what it put is deleted (by the worker, or the
#      collector of leaked objects), and the bucket holds exactly the
#      state's parts.
#  (i) drop_shard(): its objects are deleted after the commit, and a shard
#      made after keeps its parts in the blob table once blob_store is
#      "table" again.
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time sleep);
use List::Util qw(sum0);
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my %s3 = %{ start_object_store() };
my ($objstore, $store_dir) = ($s3{script}, $s3{dir});

my $node = sink_node('blob_store', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.s3_timeout = '2s'
persist_sink.blob_store = 's3://persist-sink/t37'
});
my $dir = $node->basedir;

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# How many objects the bucket holds under t37/$shard/.
sub bucket_objects
{
	return scalar(stored_object_names(\%s3, 't37', $_[0]));
}

# The object store's figures: kind => { requests, failed, retries, bytes,
# failed_at (epoch seconds, 0 if none), failure }.
sub store_stats
{
	my %stats;
	for my $line (split /\n/, query(q{
SELECT kind, requests, failed, retries, bytes,
	   coalesce(extract(epoch FROM last_failure_at), 0), coalesce(last_failure, '')
FROM persist_sink.object_store_stats}))
	{
		my ($kind, @v) = split /\|/, $line, 7;
		@{ $stats{$kind} }{qw(requests failed retries bytes failed_at failure)} = @v;
	}
	return \%stats;
}

# The sum over every kind of a figure of $now minus that of $before.
sub grown
{
	my ($now, $before, $figure) = @_;
	return sum0(map { $now->{$_}{$figure} - $before->{$_}{$figure} } keys %$now);
}

# Waits until verify() of $shard finds nothing (the collectors have run).
sub wait_verify_clean
{
	my ($shard, $what) = @_;
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM persist_sink.verify('$shard')"),
		"verify() of $shard clean: $what")
	  or diag(query("SELECT string_agg(problem, E'\\n') FROM persist_sink.verify('$shard')"));
}

# SQL of client $c's appends $first..$last to $shard: every third one
# large (20,000 rows: parts of its own), the others 5 rows; each prints
# "ack <tag>|t" once acknowledged.  Keys are "<tag>-<row>".
sub client_sql
{
	my ($shard, $c, $first, $last) = @_;
	my $sql = '';
	for my $i ($first .. $last)
	{
		my $tag = "c$c-$i";
		my $n = $i % 3 == 0 ? 20000 : 5;
		$sql .= "SELECT 'ack $tag', persist_sink.append('$shard', "
		  . "ARRAY(SELECT '$tag-' || g FROM generate_series(1, $n) g), "
		  . "ARRAY(SELECT md5('$tag' || g) FROM generate_series(1, $n) g), "
		  . "array_fill(1::bigint, ARRAY[$n])) IS NOT NULL;\n";
	}
	return $sql;
}

# Runs clients 1..$n appending $first..$last to $shard; returns them.
sub start_clients
{
	my ($shard, $n, $first, $last) = @_;
	return [ map { start_psql($node, $dir, "$shard-client$_", client_sql($shard, $_, $first, $last),
				on_error_stop => 0) } 1 .. $n ];
}

# Waits for the clients; returns the tags acknowledged and the errors.
sub finish_clients
{
	my ($clients) = @_;
	my (%acked, @errors);
	for my $c (@$clients)
	{
		my $r = finish_psql($c);
		ok(!$r->{timed_out}, "$c->{name} finished");
		$acked{$_} = 1 for $r->{out} =~ /^ack (\S+)\|t$/mg;
		push @errors, grep { /ERROR/ } split /\n/, $r->{err};
	}
	return (\%acked, \@errors);
}

# Checks that every acknowledged tag is read exactly once, whole, and that
# no tag is read partly or twice.
sub check_exactly_once
{
	my ($shard, $acked, $what) = @_;
	my %read = map { split /\|/ } split /\n/, query(qq{
SELECT tag, count(*)::text || '/' || sum(diff)::text || '/' || count(DISTINCT key)::text
FROM (SELECT regexp_replace(convert_from(key, 'UTF8'), '-[0-9]+\$', '') AS tag, key, diff
	  FROM persist_sink.snapshot('$shard')) s
GROUP BY tag});
	my @missing = grep { !exists $read{$_} } sort keys %$acked;
	my @bad;
	for my $tag (sort keys %read)
	{
		my ($i) = $tag =~ /-(\d+)$/;
		my $n = $i % 3 == 0 ? 20000 : 5;
		push @bad, "$tag: $read{$tag}" if $read{$tag} ne "$n/$n/$n";
	}
	is(join(',', @missing), '', "$what: every acknowledged append is read");
	is(join(',', @bad), '', "$what: every append read is whole, and once");
	return scalar keys %read;
}

# (a) four clients, small and large appends
query("SELECT persist_sink.create_shard('obj')");
is(query("SELECT blob_store FROM persist_sink.shards WHERE name = 'obj'"),
	's3://persist-sink/t37', 'the shard records the store it was made with');
my $before = store_stats();
my ($acked, $errors) = finish_clients(start_clients('obj', 4, 1, 24));
my %all = %$acked;			# every append acknowledged so far
is(scalar(keys %$acked), 96, 'all 96 appends acknowledged');
is(join("\n", @$errors), '', 'no append failed');
my $now = store_stats();
cmp_ok($now->{put}{requests} - $before->{put}{requests}, '>=', 32,
	'object_store_stats: each of the 32 large appends put its part');
cmp_ok($now->{put}{bytes} - $before->{put}{bytes}, '>', 32 * 100_000, '... and their bytes');
is($now->{put}{failed}, 0, '... none failed');
$before = $now;
check_exactly_once('obj', $acked, '(a)');
$now = store_stats();
cmp_ok($now->{get}{requests}, '>', $before->{get}{requests}, 'object_store_stats: reading the shard gets its parts');
cmp_ok($now->{get}{bytes}, '>', $before->{get}{bytes}, '... and their bytes');
is( query(q{SELECT count(*) FROM persist_sink.object_store_stats
WHERE kind IN ('put', 'get') AND p50_ms > 0 AND p50_ms <= p99_ms AND p99_ms <= max_ms
  AND max_ms <= total_ms}),
	'2', '... with the latency of the puts and gets');
is(query('SELECT count(*) FROM persist_sink.blob'), '0', 'the blob table holds nothing');
ok(query(q{SELECT blob_bytes > 0 FROM persist_sink.shards WHERE name = 'obj'}) eq 't',
	'the shard has parts outside its state');
wait_verify_clean('obj', 'after the appends');
my $objects = bucket_objects('obj');
ok($objects > 0, "$objects objects in the bucket");

# (a) each process's cache of objects (the compactors paused, so that no
# other process reads from the store meanwhile)
my $digest_sql = "SELECT md5(string_agg(encode(key, 'hex') || '/' || encode(val, 'hex') || '/' || time || '/' || diff, ',' ORDER BY key, val, time)) FROM persist_sink.snapshot('obj')";
query('ALTER SYSTEM SET persist_sink.compaction = off');
query('SELECT pg_reload_conf()');
$node->poll_query_until('postgres', q{SELECT NOT current_setting('persist_sink.compaction')::boolean
	AND NOT EXISTS (SELECT FROM persist_sink.compaction_progress)})
  or die 'compaction did not stop';
my $cached = $node->background_psql('postgres');
$cached->query_safe(q{SET persist_sink.object_cache_size = '256MB'});
my $digest = $cached->query_safe($digest_sql);
my $gets = store_stats()->{get}{requests};
is($cached->query_safe($digest_sql), $digest, 'a second read of the shard in one process reads the same');
is(store_stats()->{get}{requests}, $gets, '... from its cache of objects: no request');
$cached->query_safe('SET persist_sink.object_cache_size = 0');
is($cached->query_safe($digest_sql), $digest, 'without the cache it reads the same');
cmp_ok(store_stats()->{get}{requests}, '>', $gets, '... getting the parts again');
$cached->quit;
query('ALTER SYSTEM RESET persist_sink.compaction');
query('SELECT pg_reload_conf()');

# (b) compact(): garbage held back by a snapshot that may still read it
my $reader = $node->background_psql('postgres');
$reader->query_safe('SET persist_sink.object_cache_size = 0');
$reader->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$reader->query_safe("SELECT count(*) FROM persist_sink.snapshot('obj')");
query("SELECT persist_sink.compact('obj')");
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'obj'"), '1', 'compact() merged the shard into one batch');
ok(query(q{SELECT count(*) > 0 FROM persist_sink.garbage, unnest(keys) k WHERE shard = 'obj' AND k LIKE 's3://%'}) eq 't',
	'the replaced objects are listed as garbage');
# two sweeps at least (every 5 s while objects are held back)
sleep 12;
ok(query(q{SELECT count(*) > 0 FROM persist_sink.garbage WHERE shard = 'obj'}) eq 't',
	'the garbage waits while an older snapshot may read it');
is($reader->query_safe($digest_sql),
	$digest, 'the older snapshot still reads the replaced parts, whole');
$reader->query_safe('COMMIT');
$reader->quit;
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM persist_sink.garbage"),
	'the garbage is deleted once that snapshot is gone');
is(query($digest_sql),
	$digest, 'the merged shard reads the same');
wait_verify_clean('obj', 'after compact()');
is(bucket_objects('obj'), query(q{SELECT parts FROM persist_sink.shards WHERE name = 'obj'}),
	'the bucket holds exactly the parts of the state');

# (c) a rolled-back compare_and_append leaves objects; they are collected
leak_objects($node, 'obj');
ok(query("SELECT count(*) > 0 FROM persist_sink.verify('obj') WHERE problem LIKE 'object % is not referenced %'") eq 't',
	'verify() names the objects the rolled-back append left');
wait_verify_clean('obj', 'the leaked objects are collected');
is(bucket_objects('obj'), query(q{SELECT parts FROM persist_sink.shards WHERE name = 'obj'}),
	'the bucket holds exactly the parts of the state again');

# (d) the gateway killed during appends, then started again
$before = store_stats();
my $clients = start_clients('obj', 8, 100, 250);
sleep 1;
system("$objstore kill-gateway $store_dir") == 0 or die 'could not kill the gateway';
my $down_at = time;
sleep 4;
system("$objstore start-gateway $store_dir") == 0 or die 'could not start the gateway';
($acked, $errors) = finish_clients($clients);
note(scalar(keys %$acked) . ' appends acknowledged, ' . scalar(@$errors) . ' failed');
ok(@$errors > 0, 'appends failed while the store was down');
# an append fails for the store, or at stop_batches as the merges cannot
# write either (and then back off: see doc/maintenance.md)
is(join("\n", grep { !/could not (PUT|GET|DELETE) object|object store|Nothing of this append|background compaction keeps failing/ } @$errors), '',
	'each failure names the object store, or the merges it failed');
%all = (%all, %$acked);
check_exactly_once('obj', \%all, '(d)');
$now = store_stats();
cmp_ok(grown($now, $before, 'failed'), '>', 0, 'object_store_stats counts the requests that failed');
cmp_ok(grown($now, $before, 'retries'), '>', 0, '... and their retries');
my @failed_kinds = grep { $now->{$_}{failed} > $before->{$_}{failed} } sort keys %$now;
note 'kinds that failed: ' . join(', ', map { "$_ ($now->{$_}{failure})" } @failed_kinds);
is( join(', ', grep { $now->{$_}{failed_at} < $down_at - 0.5 || $now->{$_}{failure} !~ /^could not (PUT|GET|DELETE|list) / }
		  @failed_kinds),
	'', '... each kind that failed with its last failure, from after the kill');
ok( $node->poll_query_until('postgres',
		"SELECT batches < current_setting('persist_sink.slowdown_batches')::int FROM persist_sink.shards WHERE name = 'obj'"),
	'the merges catch up once the store is back');
my ($after) = finish_clients(start_clients('obj', 1, 300, 302));
is(scalar(keys %$after), 3, 'appends go on once the store is back');
%all = (%all, %$after);
wait_verify_clean('obj', 'after the store came back');

# (e) a short outage, well within persist_sink.s3_timeout: retried through
$node->append_conf('postgresql.conf', "persist_sink.s3_timeout = '20s'");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('persist_sink.s3_timeout') = '20s'")
  or die 's3_timeout not reloaded';
query('SELECT persist_sink.object_store_stats_reset()');
$clients = start_clients('obj', 2, 500, 620);
sleep 1;
system("$objstore kill-gateway $store_dir") == 0 or die 'could not kill the gateway';
my $killed_at = time;
sleep 0.2;
system("$objstore start-gateway $store_dir") == 0 or die 'could not start the gateway';
note sprintf('the gateway was down for %.1f s', time - $killed_at);
ok(query(q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%persist_sink.append(%' AND state = 'active' AND pid <> pg_backend_pid()}) > 0,
	'the clients were still appending when it came back');
($acked, $errors) = finish_clients($clients);
is(join("\n", @$errors), '', 'no append failed through the short outage');
is(scalar(keys %$acked), 242, 'all 242 appends acknowledged');
$now = store_stats();
cmp_ok(sum0(map { $_->{retries} } values %$now), '>', 0, 'object_store_stats: requests were retried meanwhile');
is(sum0(map { $_->{failed} } values %$now), 0, '... and none failed');
%all = (%all, %$acked);
check_exactly_once('obj', \%all, '(e)');
$node->append_conf('postgresql.conf', "persist_sink.s3_timeout = '2s'");
$node->reload;

# (f) the server stopped in immediate mode during appends
$clients = start_clients('obj', 4, 400, 460);
sleep 2;
$node->stop('immediate');
($acked) = finish_clients($clients);
$node->start;
%all = (%all, %$acked);
check_exactly_once('obj', \%all, '(f)');
wait_verify_clean('obj', 'after the crash');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM persist_sink.garbage"),
	'no garbage is left: every object in the bucket is a part of the state');

# (g) an object deleted behind the extension's back
query("SELECT persist_sink.create_shard('lost')");
query(tagged_append_sql('lost', 'l', 20000));
my @lost = stored_object_names(\%s3, 't37', 'lost');
ok(@lost > 0, "the shard's parts are objects (@lost)");
for my $object (@lost)
{
	system("radosgw-admin -c $store_dir/ceph.conf object rm --bucket=persist-sink --object='$object' >/dev/null 2>&1") == 0
	  or die 'radosgw-admin object rm failed';
}
my $lost = qr{t37/lost/[0-9a-f]{32}};
for my $cache ('16MB', '0')
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET persist_sink.object_cache_size = '$cache'; SELECT count(*) FROM persist_sink.snapshot('lost')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  XX001: object "$lost" of bucket "persist-sink" is missing/,
		"with object_cache_size $cache, a read of the shard fails naming the missing object");
}
like(query("SELECT string_agg(problem, ' ') FROM persist_sink.verify('lost')"),
	qr/part "s3:\/\/persist-sink\/$lost" of shard "lost" is missing/,
	'verify() reports the part missing');
query("SELECT persist_sink.drop_shard('lost')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM persist_sink.garbage"),
	'the shard is dropped, its garbage collected');

# (h) a large write cancelled while its backend puts its parts
query("SELECT persist_sink.create_shard('cancelled')");
query(tagged_append_sql('cancelled', 'kept', 20000));
query('ALTER SYSTEM SET persist_sink.compaction = off');
query('SELECT pg_reload_conf()');
$node->poll_query_until('postgres', q{SELECT NOT current_setting('persist_sink.compaction')::boolean
	AND NOT EXISTS (SELECT FROM persist_sink.compaction_progress)})
  or die 'compaction did not stop';
my $puts = store_stats()->{put}{requests};
my $writer = start_psql($node, $dir, 'large_writer',
	"SET persist_sink.blob_target_size = '64kB';\n" . tagged_append_sql('cancelled', 'gone', 1_000_000) . "\n",
	on_error_stop => 0);
ok( $node->poll_query_until('postgres',
		"SELECT requests >= $puts + 8 FROM persist_sink.object_store_stats WHERE kind = 'put'"),
	'the large write puts its parts');
is( query(q{SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
WHERE application_name = 'large_writer' AND state = 'active'}),
	'1', 'and is cancelled meanwhile');
my $r = finish_psql($writer);
like($r->{err}, qr/ERROR:  canceling statement due to user request/, 'the call fails with 57014');
like($r->{err}, qr/Nothing of this append to shard "cancelled" was written/, '... writing nothing');
is(query(q{SELECT count(*) FROM persist_sink.snapshot('cancelled') WHERE convert_from(key, 'UTF8') LIKE 'gone-%'}),
	'0', 'nothing of it is read');
# the compactors collect leaked objects
query('ALTER SYSTEM RESET persist_sink.compaction');
query('SELECT pg_reload_conf()');
wait_verify_clean('cancelled', 'its objects are deleted');
is(bucket_objects('cancelled'), 1, 'the bucket holds exactly the part of the state');
is(query("SELECT count(*) FROM persist_sink.snapshot('cancelled')"), '20000', 'the shard reads what it held before');

# (i) drop_shard(): the objects go after the commit
query("SELECT persist_sink.drop_shard('obj')");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM persist_sink.garbage"),
	'the dropped shard\'s garbage is collected');
is(bucket_objects('obj'), 0, 'no object of the dropped shard is left');
$node->append_conf('postgresql.conf', "persist_sink.blob_store = 'table'");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('persist_sink.blob_store') = 'table'")
  or die 'blob_store not reloaded';
query("SELECT persist_sink.create_shard('obj')");
($acked) = finish_clients(start_clients('obj', 1, 1, 3));
is(query("SELECT blob_store FROM persist_sink.shards WHERE name = 'obj'"), 'table',
	'a shard of the same name made now keeps its parts in the blob table');
ok(query('SELECT count(*) > 0 FROM persist_sink.blob') eq 't', 'in blob rows');
check_exactly_once('obj', $acked, '(i)');
is(query("SELECT count(*) FROM persist_sink.verify('obj')"), '0', 'verify() clean');

$node->stop;
done_testing();
