
# Copyright (c) persist_sink contributors

# Objects damaged behind the extension's back, in a real object store
# (Ceph's RADOS Gateway, started by test/s3/objstore in this test's
# directory): the object store's version of the regression test
# corruption, which damages blob rows.  Each process's cache of objects
# is off, so that every read goes to the store.  For each damage, a read
# of the shard fails with XX001 naming the part and what is wrong,
# verify() reports that part and nothing else, another shard of the same
# store reads as before, and once the object is put back as it was the
# shard reads as before and verify() is clean:
#  (a) a byte of a block flipped;
#  (b) the object cut short;
#  (c) another part's bytes in its place;
#  (d) a byte added at its end (a read reads only the bytes the state
#      names, so it reads as before; verify() reports the object longer);
#  (e) a merge of the shard with a damaged part fails, the view
#      compaction_failures shows it, other shards are compacted; once the
#      object is put back the shard is compacted.
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my %s3 = %{ start_object_store() };

my $node = sink_node('damaged', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$s3{creds}'
persist_sink.s3_timeout = '2s'
persist_sink.blob_store = 's3://persist-sink/t42'
persist_sink.object_cache_size = 0
persist_sink.compaction = off
persist_sink.blob_target_size = '256kB'
});
my $dir = $node->basedir;

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Runs SQL; returns its error's "SQLSTATE: message", or 'ok'.
sub error_of
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return 'ok' if $ret == 0;
	return "$1: $2" if $err =~ /ERROR:  ([0-9A-Z]{5}): (.*)/;
	return $err;
}

# curl's arguments to sign a request with the store's credentials
sub curl_args
{
	return ('curl', '-sf', '--aws-sigv4', 'aws:amz:us-east-1:s3',
		'--user', "$s3{S3_ACCESS_KEY}:$s3{S3_SECRET_KEY}");
}

# The bytes of object $name of the bucket, got directly from the store.
sub get_object
{
	my ($name) = @_;
	my $file = "$dir/object.get";
	system(curl_args(), '-H', 'x-amz-content-sha256: ' . sha256_hex(''),
		'-o', $file, "$s3{S3_ENDPOINT}/$s3{S3_BUCKET}/$name") == 0
	  or die "could not GET $name";
	return slurp_file($file);
}

# Puts $bytes as object $name of the bucket, directly to the store.
sub put_object
{
	my ($name, $bytes) = @_;
	my $file = "$dir/object.put";
	open my $fh, '>:raw', $file or die "could not write $file: $!";
	print $fh $bytes;
	close $fh;
	system(curl_args(), '-X', 'PUT', '-H', 'x-amz-content-sha256: ' . sha256_hex($bytes),
		'--data-binary', "\@$file", '-o', '/dev/null',
		"$s3{S3_ENDPOINT}/$s3{S3_BUCKET}/$name") == 0
	  or die "could not PUT $name";
}

# SQL of a digest of everything $shard holds
sub digest_sql
{
	my ($shard) = @_;
	return qq{SELECT md5(string_agg(convert_from(key, 'UTF8') || '=' || convert_from(val, 'UTF8')
	|| '\@' || time || 'x' || diff, ',' ORDER BY key, time)) FROM persist_sink.snapshot('$shard')};
}

# Appends batches $first..$last of $rows rows to $shard.
sub append_parts
{
	my ($shard, $first, $last, $rows) = @_;
	for my $b ($first .. $last)
	{
		my $next = $b + 1;
		query(qq{SELECT persist_sink.compare_and_append('$shard',
	ARRAY(SELECT '$shard$b-' || g FROM generate_series(1, $rows) g),
	ARRAY(SELECT md5('$b' || g) FROM generate_series(1, $rows) g),
	array_fill(${b}::bigint, ARRAY[$rows]), array_fill(1::bigint, ARRAY[$rows]), $b, $next)});
	}
}

# verify()'s problems with $shard, one per line
sub problems
{
	return query("SELECT string_agg(problem, E'\\n' ORDER BY problem) FROM persist_sink.verify('$_[0]')");
}

query("SELECT persist_sink.create_shard('dmg'); SELECT persist_sink.create_shard('fine')");
append_parts('dmg', 0, 2, 20000);
append_parts('fine', 0, 0, 20000);
my %digest = (dmg => query(digest_sql('dmg')), fine => query(digest_sql('fine')));
my @parts = map { "s3://$s3{S3_BUCKET}/$_" } stored_object_names(\%s3, 't42', 'dmg');
cmp_ok(scalar(@parts), '>=', 3, 'the shard has parts in the store (' . scalar(@parts) . ')');
is(problems('dmg'), '', 'verify() is clean before');
my ($victim, $other) = @parts;
my ($victim_name) = $victim =~ m{^s3://[^/]+/(.+)$};
my ($other_name) = $other =~ m{^s3://[^/]+/(.+)$};
my $original = get_object($victim_name);
my $victim_re = quotemeta($victim);

# Damages the victim to $bytes, checks that a read fails with XX001 and
# the message $read_re, that verify() reports it ($verify_re), that the
# other shard reads; then puts it back and checks the shard reads again.
sub check_damage
{
	my ($what, $bytes, $read_re, $verify_re) = @_;
	put_object($victim_name, $bytes);
	like(error_of(digest_sql('dmg')), $read_re, "$what: a read fails naming the part");
	like(problems('dmg'), $verify_re, "$what: verify() reports the part");
	is(query(digest_sql('fine')), $digest{fine}, "$what: another shard reads as before");
	put_object($victim_name, $original);
	is(query(digest_sql('dmg')), $digest{dmg}, "$what: put back, the shard reads as before");
	is(problems('dmg'), '', "$what: put back, verify() is clean");
}

# (a) a byte of a block flipped
my $flipped = $original;
my $at = int(length($flipped) / 2);
substr($flipped, $at, 1) = chr(ord(substr($flipped, $at, 1)) ^ 0x55);
check_damage('(a) a byte flipped', $flipped,
	qr/^XX001: part "$victim_re" of shard "dmg" is corrupted: /,
	qr/^part "$victim_re" of shard "dmg" is corrupted: [^\n]+$/);

# (b) cut short
check_damage('(b) cut short', substr($original, 0, int(length($original) / 2)),
	qr/^XX001: .*"\Q$victim_name\E".* short/,
	qr/^part "$victim_re" of shard "dmg" [^\n]*short[^\n]*$/);

# (c) another part's bytes
check_damage('(c) another part in its place', get_object($other_name),
	qr/^XX001: (part "$victim_re" of shard "dmg" (is corrupted|does not match the shard state): |object "\Q$victim_name\E" of bucket "persist-sink" is shorter than expected)/,
	qr/^part "$victim_re" of shard "dmg" (is corrupted|does not match the shard state): [^\n]+$/);

# (d) a byte added
put_object($victim_name, $original . "\0");
is(query(digest_sql('dmg')), $digest{dmg}, '(d) a byte added: the shard reads as before');
like(problems('dmg'), qr/^part "$victim_re" of shard "dmg" is corrupted: [^\n]*longer[^\n]*$/,
	'(d) verify() reports the object longer than the state says');
put_object($victim_name, $original);
is(problems('dmg'), '', '(d) put back, verify() is clean');

# (e) a merge of a shard with a damaged part fails and is shown; other
# shards are compacted; put back, the shard is compacted.  Shard dmg2 has
# eight batches of one part each, so that merges take every one of them.
query(q{SELECT persist_sink.create_shard('dmg2');
ALTER SYSTEM SET persist_sink.inline_max_bytes = 0;
ALTER SYSTEM SET persist_sink.slowdown_batches = 4;
ALTER SYSTEM SET persist_sink.stop_batches = 6;
SELECT pg_reload_conf()});
append_parts('dmg2', 0, 7, 2000);
my @objects2 = stored_object_names(\%s3, 't42', 'dmg2');
is(scalar(@objects2), 8, '(e) eight batches, eight objects');
my $victim2 = $objects2[0];
my $victim2_re = quotemeta("s3://$s3{S3_BUCKET}/$victim2");
my $original2 = get_object($victim2);
my $flipped2 = $original2;
$at = int(length($flipped2) / 2);
substr($flipped2, $at, 1) = chr(ord(substr($flipped2, $at, 1)) ^ 0x55);
put_object($victim2, $flipped2);
like(error_of(q{SELECT persist_sink.compact('dmg2')}),
	qr/^XX001: part "$victim2_re" of shard "dmg2" is corrupted: /, '(e) compact() fails naming the part');
query('ALTER SYSTEM SET persist_sink.compaction = on; SELECT pg_reload_conf()');

# Appends one update to $shard at its upper, by psql: an append stalled at
# stop_batches may fail.
sub append_one
{
	my ($shard) = @_;
	$node->psql('postgres', qq{SELECT persist_sink.compare_and_append('$shard', ARRAY['x' || u], ARRAY['v'],
	ARRAY[u], ARRAY[1::bigint], u, u + 1) FROM persist_sink.shard_upper('$shard') u});
}

# appends ask for merges: dmg2's fail, fine's succeed
my $failing = 0;
for (1 .. 600)
{
	append_one('dmg2');
	append_one('fine');
	$failing = query(q{SELECT count(*) FROM persist_sink.compaction_failures
		WHERE shard = 'dmg2' AND last_error ~ '^part "s3://[^"]+" of shard "dmg2" is corrupted: '});
	last if $failing;
	usleep(100_000);
}
is($failing, 1, '(e) compaction_failures shows the shard failing, naming the part');
ok($node->poll_query_until('postgres', q{SELECT count(*) < 4 FROM persist_sink.batches('fine')}),
	'(e) another shard is compacted meanwhile');
put_object($victim2, $original2);
my $merged = 0;
for (1 .. 600)
{
	append_one('dmg2');
	$merged = query(q{SELECT count(*) FROM persist_sink.compaction_failures
		WHERE shard = 'dmg2' AND failing_in_a_row = 0});
	last if $merged;
	usleep(100_000);
}
is($merged, 1, '(e) put back, the shard is compacted (no longer failing)');
is(query(q{SELECT count(*) FROM persist_sink.snapshot('dmg2') WHERE starts_with(convert_from(key, 'UTF8'), 'dmg2')}),
	16000, '(e) and reads every update of its eight batches');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM persist_sink.verify('dmg2')}),
	'(e) verify() is clean once the replaced objects are collected');

$node->stop;
done_testing();
