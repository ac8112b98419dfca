
# Copyright (c) persist_sink contributors

# The collector of an object store's garbage deletes objects only once the
# commit that stopped naming them is flushed: background merges commit
# without waiting for the flush, and so may a session's drop_shard(), and
# a crash before the flush brings back the state that names them.  The
# WAL writer is stopped (SIGSTOP) so that nothing flushes on its own, and
# the server crashes (the WAL writer killed) once the objects are gone:
#  (a) a background merge of 8 batches: after the crash the shard is the
#      merge's one batch, reads as before, and verify() is clean;
#  (b) drop_shard() with synchronous_commit off: after the crash the shard
#      is gone, not back with parts whose objects are deleted.
# Where the collector deleted the objects before the flush, both fail:
# the shard comes back naming missing objects.  Skipped, with a line
# saying so, where the Ceph packages are missing.

use strict;
use warnings;

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my %s3 = %{ start_object_store() };

# Nothing but the test's own steps may flush the WAL: no autovacuum, no
# background writer, no timed checkpoint.
my $node = sink_node('garbage_flush', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.blob_store = 's3://persist-sink/t43'
persist_sink.object_cache_size = 0
persist_sink.compaction = off
persist_sink.inline_max_bytes = 0
autovacuum = off
bgwriter_lru_maxpages = 0
checkpoint_timeout = '1h'
restart_after_crash = on
});

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# How many of @names the bucket still holds under t43/$shard/.
sub still_held
{
	my ($shard, @names) = @_;
	my %held = map { $_ => 1 } stored_object_names(\%s3, 't43', $shard);
	return scalar(grep { $held{$_} } @names);
}

# Waits (at most 3 minutes) until the bucket holds none of @names.
sub wait_objects_gone
{
	my ($shard, @names) = @_;
	for (1 .. 1800)
	{
		return 1 if still_held($shard, @names) == 0;
		usleep(100_000);
	}
	return 0;
}

# SQL of a digest of everything $shard holds
sub digest_sql
{
	my ($shard) = @_;
	return qq{SELECT md5(string_agg(encode(key, 'hex') || ':' || "time" || 'x' || diff, ','
	ORDER BY key, "time")) || ' ' || count(*) FROM persist_sink.snapshot('$shard')};
}

# The WAL writer's process id
sub walwriter_pid
{
	return query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
}

# Crashes the server by killing the stopped WAL writer (what it held in
# WAL buffers is lost) and waits until the server accepts connections.
sub crash
{
	my ($pid) = @_;
	kill 'KILL', $pid or die "could not kill the WAL writer $pid";
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back after the crash';
}

# (a) a background merge, its garbage collected, then a crash
query("SELECT persist_sink.create_shard('gf')");
append_batches($node, 'gf', 0, 7, 2000);
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'gf'"), '8', '(a) 8 batches');
my @replaced = stored_object_names(\%s3, 't43', 'gf');
is(scalar(@replaced), 8, '(a) one object per batch');
my $digest = query(digest_sql('gf'));

my $walwriter = walwriter_pid();
kill 'STOP', $walwriter or die "could not stop the WAL writer $walwriter";
query('ALTER SYSTEM SET persist_sink.compaction = on');
query('SELECT pg_reload_conf()');
ok(wait_objects_gone('gf', @replaced),
	'(a) the merge committed and its replaced objects were deleted');
crash($walwriter);
is(query("SELECT batches FROM persist_sink.shards WHERE name = 'gf'"), '1',
	'(a) after the crash the shard is the merge\'s one batch');
is(query(digest_sql('gf')), $digest, '(a) it reads as before');
is(query("SELECT count(*) FROM persist_sink.verify('gf')"), '0', '(a) verify() is clean');
is(still_held('gf', @replaced), 0, '(a) the replaced objects stay deleted');

# (b) drop_shard() committed without waiting for the flush, its objects
# collected, then a crash (compaction stays on: while it is off, requests
# to collect wait)
query("SELECT persist_sink.create_shard('gd')");
append_batches($node, 'gd', 0, 2, 2000);
my @dropped = stored_object_names(\%s3, 't43', 'gd');
is(scalar(@dropped), 3, '(b) three objects');
$walwriter = walwriter_pid();
kill 'STOP', $walwriter or die "could not stop the WAL writer $walwriter";
query("SET synchronous_commit = off; SELECT persist_sink.drop_shard('gd')");
ok(wait_objects_gone('gd', @dropped), '(b) the dropped shard\'s objects were deleted');
crash($walwriter);
is(query("SELECT count(*) FROM persist_sink.shards WHERE name = 'gd'"), '0',
	'(b) after the crash the shard is still dropped');
is(query("SELECT count(*) FROM persist_sink.shards s, persist_sink.verify(s.name)"), '0',
	'(b) verify() of every shard is clean');

$node->stop;
done_testing();
