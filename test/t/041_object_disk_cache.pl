
# Copyright (c) persist_sink contributors

# The disk cache of objects the server's processes share
# (persist_sink.object_disk_cache_size), against a real object store
# (Ceph's RADOS Gateway, started by test/s3/objstore in this test's
# directory), with each process's own cache off (object_cache_size 0), so
# that every read of a part goes through the disk cache.
#  (a) A read fetches windows of objects with GETs and caches them; a
#      read in another session makes no GET and reads the same rows from
#      the cache (object_disk_cache_stats counts its hits).
#  (b) With the gateway killed, the cached shard still reads whole.
#  (c) The cache's file overwritten behind the server's back: a read warns
#      that a window does not match its checksum, gets the windows again
#      and returns the same rows.
#  (d) More windows than the cache holds, read by four sessions at once,
#      over and over: every read returns the right rows, the cache never
#      holds more windows than its size, and replaces some.
#  (e) A base backup leaves the file out; a restart removes it and starts
#      the cache empty.
#  (f) A role holding half of the cache replaces only its own windows
#      once another role holds some: a role reading twice as many windows
#      as the cache holds, twice, does not replace the windows another
#      role read (that role reads them again with no GET).
#  (g) A cache file that cannot be opened (a directory in its place): a
#      read warns once, and reads the shard from the store.
#  (h) Windows that cannot be written (the server's processes limited to
#      files of 1MB, as a full disk would refuse them): a read warns once,
#      reads the right rows, and the cache holds only what fits.
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my %s3 = %{ start_object_store() };
my ($objstore, $store_dir) = ($s3{script}, $s3{dir});

# 4MB: 16 windows of 256kB
my $node = sink_node('disk_cache', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.s3_timeout = '2s'
persist_sink.blob_store = 's3://persist-sink/t41'
persist_sink.object_disk_cache_size = '4MB'
persist_sink.object_cache_size = 0
persist_sink.compaction = off
}, allows_streaming => 1);
my $dir = $node->basedir;
my $cache_file = $node->data_dir . '/base/pgsql_tmp/pgsql_tmp_persist_sink_object_cache';

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# SQL of a digest of everything shard t41 holds
my $digest_sql = q{SELECT md5(string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8')
	|| '@' || time || 'x' || diff, ',' ORDER BY key, time))
FROM persist_sink.snapshot('t41')};

# GET requests made so far
sub gets
{
	return query("SELECT requests FROM persist_sink.object_store_stats WHERE kind = 'get'");
}

# The disk cache's figures: windows, hits, misses, writes, replaced
sub cache_stats
{
	my %s;
	@s{qw(size windows hits misses writes replaced)} = split /\|/,
	  query('SELECT size, windows, hits, misses, writes, replaced FROM persist_sink.object_disk_cache_stats');
	return \%s;
}

# Appends batches $first..$last of 40,000 rows (one part of about 1.6MB each).
sub append_parts
{
	my ($first, $last) = @_;
	for my $b ($first .. $last)
	{
		my $next = $b + 1;
		query(qq{SELECT persist_sink.compare_and_append('t41',
	ARRAY(SELECT 'k$b-' || g FROM generate_series(1, 40000) g),
	ARRAY(SELECT md5('$b' || g) FROM generate_series(1, 40000) g),
	array_fill(${b}::bigint, ARRAY[40000]), array_fill(1::bigint, ARRAY[40000]), $b, $next)});
	}
}

# (a) a read caches the windows it gets; another session's read gets none
query("SELECT persist_sink.create_shard('t41')");
append_parts(0, 2);
my $stats = cache_stats();
is($stats->{size}, 4 * 1024 * 1024, 'the cache holds 4MB');
is($stats->{windows}, 0, 'it starts empty');
my $gets0 = gets();
my $digest = query($digest_sql);
my $gets1 = gets();
cmp_ok($gets1, '>', $gets0, 'the first read gets objects from the store');
$stats = cache_stats();
cmp_ok($stats->{windows}, '>=', 6, "it caches the windows it read ($stats->{windows})");
is($stats->{writes}, $stats->{windows}, 'each written once');
is(query($digest_sql), $digest, 'another session reads the same rows');
is(gets(), $gets1, '... with no GET');
cmp_ok(cache_stats()->{hits}, '>=', $stats->{windows}, '... all from the cache');
is(query(q{SELECT count(*) FROM persist_sink.snapshot('t41')}), 120000, 'the shard holds three batches');

# (b) the gateway down: the cached shard still reads
system("$objstore kill-gateway $store_dir") == 0 or die 'could not kill the gateway';
is(query($digest_sql), $digest, 'with the gateway down the shard reads from the cache');
system("$objstore start-gateway $store_dir >/dev/null") == 0 or die 'could not start the gateway';

# (c) the file overwritten: checksums catch it, the windows are read again
ok(-f $cache_file, 'the cache is a file of base/pgsql_tmp');
my $size = -s $cache_file;
open my $fh, '+<', $cache_file or die "could not open $cache_file: $!";
binmode $fh;
print $fh 'x' x $size;
close $fh;
my ($ret, $out, $err) = $node->psql('postgres', $digest_sql);
is($out, $digest, 'the damaged cache still reads the same rows');
like($err, qr/WARNING:  window \d+ of object "s3:\/\/persist-sink\/t41\/[^"]+" in the object cache file does not match its checksum/,
	'a warning names the damaged window');
cmp_ok(gets(), '>', $gets1, '... and it is got from the store again');
($ret, $out, $err) = $node->psql('postgres', $digest_sql);
is("$out/$err", "$digest/", 'the next read is clean: the damaged windows were replaced');

# (d) more windows than the cache holds, read by four sessions at once
append_parts(3, 9);
my $all = query($digest_sql);
my $check = "SELECT ($digest_sql) = '$all';\n" x 6;
my @readers = map { start_psql($node, $dir, "reader$_", $check) } 1 .. 4;
my @answers;
for my $r (@readers)
{
	my $res = finish_psql($r);
	ok($res->{ok}, "$r->{name} finished") or diag($res->{err});
	push @answers, split /\n/, $res->{out};
}
is(join(',', @answers), join(',', ('t') x 24), 'every read of the four sessions returns the right rows');
$stats = cache_stats();
cmp_ok($stats->{windows}, '<=', 16, "the cache holds at most 16 windows ($stats->{windows})");
cmp_ok($stats->{replaced}, '>', 0, "it replaced some ($stats->{replaced})");

# (e) a base backup leaves it out; a restart starts it empty
ok(-f $cache_file, 'the cache file is there before the backup');
$node->backup('b41');
ok(!-e $node->backup_dir . '/b41/base/pgsql_tmp/pgsql_tmp_persist_sink_object_cache',
	'the base backup leaves the cache file out');
$node->restart;
ok(!-e $cache_file, 'the restart removed the file');
$stats = cache_stats();
is("$stats->{windows}/$stats->{hits}/$stats->{writes}", '0/0/0', 'the cache starts empty');
# (f) one role reading much leaves the other half of the cache to others
# (the cache is empty: the light role's windows are its only ones)
query(q{CREATE ROLE regress_heavy SUPERUSER LOGIN; CREATE ROLE regress_light SUPERUSER LOGIN;
SELECT persist_sink.create_shard('t41_small')});
query(qq{SELECT persist_sink.compare_and_append('t41_small',
	ARRAY(SELECT 's-' || g FROM generate_series(1, 40000) g),
	ARRAY(SELECT md5('s' || g) FROM generate_series(1, 40000) g),
	array_fill(0::bigint, ARRAY[40000]), array_fill(1::bigint, ARRAY[40000]), 0, 1)});
my $small_sql = q{SELECT md5(string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8'), ',' ORDER BY key))
FROM persist_sink.snapshot('t41_small')};
my $small = $node->safe_psql('postgres', $small_sql, extra_params => [ '-U', 'regress_light' ]);
my $light_windows = cache_stats()->{windows};
cmp_ok($light_windows, '>=', 2, "the light role's read cached $light_windows windows");
for my $round (1 .. 2)
{
	is($node->safe_psql('postgres', $digest_sql, extra_params => [ '-U', 'regress_heavy' ]),
		$all, "the heavy role reads 30 windows (round $round)");
}
$stats = cache_stats();
is($stats->{windows}, $light_windows + 8, 'the heavy role holds half of the cache, 8 windows, and no more');
my $gets_before = gets();
is($node->safe_psql('postgres', $small_sql, extra_params => [ '-U', 'regress_light' ]),
	$small, 'the light role reads its shard again');
is(gets(), $gets_before, "... from the cache: the heavy role's reads did not replace its windows");

is(query($digest_sql), $all, 'the shard reads the same after the restart');

# (g) the file cannot be opened: the process reads without the cache
$node->restart;
mkdir $cache_file or die "could not make $cache_file: $!";
my $gets_g = gets();
($ret, $out, $err) = $node->psql('postgres', "$digest_sql; $digest_sql");
is($out, "$all\n$all", '(g) with the file unusable, the shard reads the same, twice');
my @warnings = $err =~ /WARNING:  could not open the object cache file "base\/pgsql_tmp\/pgsql_tmp_persist_sink_object_cache": Is a directory/g;
is(scalar(@warnings), 1, '(g) the process warns once that it reads without the disk cache');
cmp_ok(gets(), '>', $gets_g, '(g) its reads get the windows from the store');
rmdir $cache_file;

# (h) writes fail beyond 1MB (4 windows): the postmaster's file size limit,
# inherited by the session started next (PostgreSQL ignores SIGXFSZ, so a
# write past the limit fails with EFBIG, as one fails on a full disk)
$node->restart;
my $postmaster = $node->{_pid};
system('prlimit', "--pid=$postmaster", '--fsize=1048576:') == 0
  or die 'could not limit the postmaster\'s file size';
# (work_mem large enough that the digest's sort writes no temporary file)
($ret, $out, $err) = $node->psql('postgres', "SET work_mem = '512MB'; $digest_sql; $digest_sql");
system('prlimit', "--pid=$postmaster", '--fsize=unlimited:') == 0
  or die 'could not lift the postmaster\'s file size limit';
is($out, "$all\n$all", '(h) with writes failing, the shard reads the same, twice');
@warnings = $err =~ /WARNING:  could not write to the object cache file "base\/pgsql_tmp\/pgsql_tmp_persist_sink_object_cache": File too large/g;
is(scalar(@warnings), 1, '(h) the process warns once that it could not cache windows');
$stats = cache_stats();
cmp_ok($stats->{windows}, '<=', 4, "(h) the cache holds only the windows that fit ($stats->{windows})");
cmp_ok($stats->{writes}, '>=', 1, "(h) ... and it wrote those ($stats->{writes} writes)");
is(query($digest_sql), $all, '(h) with the limit lifted, the shard reads the same');

$node->stop;
done_testing();
