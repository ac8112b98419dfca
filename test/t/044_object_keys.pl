
# Copyright (c) persist_sink contributors

# Shard names that an HTTP client, a proxy or a store may rewrite in a
# path ('.', '..', '%2F', '%2e', spaces, '~', bytes past ASCII, names of
# 200 bytes) each map to one object key under the database's prefix, and
# the objects a shard's state names are exactly those stored (radosgw,
# started by test/s3/objstore):
#  (a) every shard of a hostile list is made, appended to (sink appends
#      and compare_and_append()) and read back; verify() is clean;
#  (b) the bucket, listed by the gateway itself, holds under the shard's
#      escaped segment (every byte but A-Z, a-z, 0-9, '_' and '-' as '~'
#      and two upper-case hex digits) exactly as many parts as the shard
#      has, nothing outside the database's prefix, nothing else under it
#      but its owner marker;
#  (c) the collector of leaked objects runs (a server restart starts one;
#      a rolled-back append's objects are its evidence) and deletes only
#      those: every shard still reads everything, verify() stays clean,
#      the bucket holds the same objects;
#  (d) persist_sink.blob_store refuses a prefix with an empty, "." or
#      ".." segment, or a byte outside letters, digits, '.', '_', '-'.
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
my $node = sink_node('object_keys', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.blob_store = 's3://persist-sink/t44/db'
persist_sink.inline_max_bytes = 0
});

# Names (byte strings) valid as shard names that a path may not keep as they are
my @names = (
	'.', '..', '...', '.hidden', 'a.b', 'a..b', '%2F', '%2f', '%2e', '%2E',
	'%2e%2e', '%', '%%', 'a b', ' ', ' lead', 'trail ', '~', '~41', 'a~20b',
	'~7E', 'A', 'a', '?x', '#x', '&x=1', '+', 'a+b', ';', '\\', '..\\..',
	"'q", '"dq', '*', '[x]', '{x}', '<x>', '|', '^', '`', '=', '@', '$',
	"caf\xc3\xa9", "\xe2\x80\x8b", "\xef\xbc\x8e", 'x' x 200, '~' x 200,
	'.' x 200, "\xc3\xa9" x 100, 'plain');

# A SQL literal of $s.
sub lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# The segment the keys of $name's parts are under.
sub segment
{
	my ($name) = @_;
	return join '', map { /[A-Za-z0-9_-]/ ? $_ : sprintf('~%02X', ord) } split //, $name;
}

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# SQL of a digest of everything shard $name holds, and its row count.
sub digest_sql
{
	my ($name) = @_;
	return "SELECT md5(string_agg(encode(key, 'hex') || ':' || \"time\" || 'x' || diff, ',' ORDER BY key, \"time\")) || ' ' || count(*) FROM persist_sink.snapshot("
	  . lit($name) . ')';
}

# Waits until no merge runs and no garbage waits.
sub wait_settled
{
	$node->poll_query_until('postgres',
		'SELECT (SELECT count(*) FROM persist_sink.compaction_progress) = 0 AND (SELECT count(*) FROM persist_sink.garbage) = 0'
	) or die 'merges or garbage did not settle';
}

# Checks the bucket against the shards: per shard, its parts under its
# segment; nothing outside t44/db/ and nothing else under it.
sub check_bucket
{
	my ($step) = @_;
	my @all = bucket_object_names(\%s3);
	my %parts;
	for my $line (split /\n/, query(
			"SELECT encode(convert_to(name, 'UTF8'), 'hex'), parts FROM persist_sink.shards"))
	{
		my ($hex, $parts) = split /\|/, $line;
		$parts{ pack('H*', $hex) } = $parts;
	}
	my @outside = grep { !m{^t44/db/} } @all;
	is_deeply(\@outside, [], "$step: no object outside the database's prefix");
	my %under;
	my @other;
	for my $o (@all)
	{
		next unless $o =~ m{^t44/db/(.*)$};
		my $rest = $1;
		if ($rest =~ m{^([A-Za-z0-9_~-]+)/[0-9a-f]{32}$})
		{
			$under{$1}++;
		}
		elsif ($rest ne 'persist_sink.owner')
		{
			push @other, $o;
		}
	}
	is_deeply(\@other, [], "$step: nothing under the prefix but parts and the owner marker");
	my %expected = map { segment($_) => $parts{$_} } grep { $parts{$_} > 0 } keys %parts;
	is_deeply(\%under, \%expected,
		"$step: under each shard's escaped segment, as many objects as it has parts");
}

# (a) make, append to and read every shard
is(scalar(keys %{ { map { segment($_) => 1 } @names } }), scalar(@names),
	'the segments of the names are distinct');
for my $name (@names)
{
	my $l = lit($name);
	query("SELECT persist_sink.create_shard($l)");
	query("SELECT persist_sink.append($l, ARRAY['k1', 'k2', 'k3'], ARRAY['v', 'v', 'v'], ARRAY[1, 1, 1]::bigint[])");
	query("SELECT persist_sink.append($l, ARRAY(SELECT 'r' || g FROM generate_series(1, 500) g), "
		  . "ARRAY(SELECT md5(g::text) FROM generate_series(1, 500) g), array_fill(1::bigint, ARRAY[500]))");
	my $upper = query("SELECT persist_sink.shard_upper($l)");
	my $next = $upper + 1;
	query("SELECT persist_sink.compare_and_append($l, ARRAY['c1', 'c2'], ARRAY['w', 'w'], "
		  . "ARRAY[$upper, $upper]::bigint[], ARRAY[1, 1]::bigint[], $upper, $next)");
}
wait_settled();
my %digest;
my $all_read = 1;
for my $name (@names)
{
	$digest{$name} = query(digest_sql($name));
	$all_read = 0 unless $digest{$name} =~ / 505$/;
}
ok($all_read, '(a) every shard reads its 505 rows');
is( query(
		'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
	'0', '(a) verify() is clean for every shard')
  or diag(query(
	"SELECT string_agg(problem, E'\\n') FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)"));

# (b) the bucket as the gateway lists it
check_bucket('(b)');

# (c) a collection of leaked objects, with a leak of its own to find
leak_objects($node, 'plain');
my $log_offset = -s $node->logfile;
$node->restart;
ok( $node->wait_for_log(qr/deleted \d+ objects that no shard state names/, $log_offset),
	'(c) the collector of leaked objects deleted the rolled-back append\'s objects');
wait_settled();
my $same = 1;
for my $name (@names)
{
	$node->psql('postgres', digest_sql($name), stdout => \my $out, stderr => \my $err);
	if ($out ne $digest{$name})
	{
		diag("shard " . lit($name) . ": $err");
		$same = 0;
	}
}
ok($same, '(c) after the collection every shard reads as before');
is( query(
		'SELECT count(*) FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)'),
	'0', '(c) verify() is still clean for every shard')
  or diag(query(
	"SELECT string_agg(problem, E'\\n') FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name)"));
check_bucket('(c)');

# (d) prefixes a path may not keep as they are
for my $bad ('s3://persist-sink/t44/./x', 's3://persist-sink/t44/../x', 's3://persist-sink/t44//x',
	's3://persist-sink/a b', 's3://persist-sink/%2e', 's3://persist-sink/t44/~x', 's3://persist-sink/..')
{
	my ($ret, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET persist_sink.blob_store = " . lit($bad));
	like($err, qr/invalid value for parameter "persist_sink.blob_store"/, "(d) $bad is refused");
}
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT * FROM persist_sink.check_object_store('s3://persist-sink/t44/../x')");
like($err, qr/invalid object store URL/, '(d) check_object_store() refuses such a prefix too');

$node->stop;
done_testing();
