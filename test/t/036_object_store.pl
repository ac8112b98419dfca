
# Copyright (c) persist_sink contributors

# The S3 client, against a real object store (Ceph's RADOS Gateway, started
# by test/s3/objstore in this test's directory), through
# check_object_store(url): a PUT, GET, ranged GET, listing and DELETE of a
# probe object with the server's persist_sink.s3_* settings.
#  (a) The round trip works and returns the bucket, the prefix and each
#      request's time.
#  (b) Configuration errors say what is wrong: a URL that is not
#      s3://bucket[/prefix] (22023), no credentials file set, a
#      credentials file others may read, a malformed one, a bucket that
#      does not exist, a wrong secret (58030 with the store's error code).
#      The secret never appears in a message or the server log.  No PUT
#      refused is retried, and object_store_stats counts each.
#  (c) Failures are bounded: a store that does not listen, and one that
#      answers 503 SlowDown, are tried again (the retries counted in
#      object_store_stats) until persist_sink.s3_timeout is spent, then
#      fail (with the store's 503 even when the last attempt, left little
#      time, got no answer); a store that accepts connections and never answers fails
#      after persist_sink.s3_timeout; a cancel (statement_timeout) ends a
#      request within a fraction of a second.
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use IO::Socket::INET;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time);
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

# the store, and a credentials file readable by the server's user only
my %s3 = %{ start_object_store() };
my $creds = $s3{creds};

my $node = sink_node('object_store', qq{
persist_sink.s3_endpoint = '$s3{S3_ENDPOINT}'
persist_sink.s3_credentials_file = '$creds'
});

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Runs SQL; returns "SQLSTATE: message" of its error, or 'ok'.
sub error_of
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	return 'ok' if $ret == 0;
	return "$1: $2" if $err =~ /ERROR:  ([0-9A-Z]{5}): (.*)/;
	return $err;
}

# Sets a persist_sink.s3_* setting and reloads.
sub set_setting
{
	my ($name, $value) = @_;
	query("ALTER SYSTEM SET persist_sink.$name = '$value'");
	query('SELECT pg_reload_conf()');
	$node->poll_query_until('postgres',
		"SELECT current_setting('persist_sink.$name') = '$value'")
	  or die "persist_sink.$name not set";
}

my $bucket = $s3{S3_BUCKET};

# (a) the round trip
is( query(qq{
SELECT bucket, prefix, put_ms > 0, get_ms > 0, range_get_ms > 0, list_ms > 0, delete_ms > 0
FROM persist_sink.check_object_store('s3://$bucket/tenant/a/')}),
	"$bucket|tenant/a|t|t|t|t|t",
	'a PUT, GET, ranged GET, listing and DELETE of a probe object');
is(query(qq{SELECT bucket FROM persist_sink.check_object_store('s3://$bucket')}),
	$bucket, 'a bucket without a prefix');
is(query(q{SELECT has_function_privilege('pg_monitor', 'persist_sink.check_object_store(text)', 'EXECUTE')}),
	'f', 'check_object_store() is not granted to PUBLIC');

# (b) configuration errors
like(error_of(q{SELECT persist_sink.check_object_store('http://bucket/x')}),
	qr/^22023: invalid object store URL/, 'a URL that is not s3:// is refused');
like(error_of(q{SELECT persist_sink.check_object_store('s3://Bad_Bucket')}),
	qr/^22023: invalid object store URL/, 'a bucket name S3 does not allow is refused');
my ($put_retries, $put_failed) = split /\|/,
  query("SELECT retries, failed FROM persist_sink.object_store_stats WHERE kind = 'put'");
like(error_of(qq{SELECT persist_sink.check_object_store('s3://no-such-bucket-here')}),
	qr/^58030: could not PUT object .* HTTP status 404, NoSuchBucket/,
	'a bucket that does not exist: the store\'s error code');

chmod 0644, $creds;
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^F0000: the object store's credentials file .* may be read by others/,
	'a credentials file others may read is refused');
chmod 0600, $creds;

my $bad = "${PostgreSQL::Test::Utils::tmp_check}/s3_bad_credentials";
PostgreSQL::Test::Utils::append_to_file($bad, "$s3{S3_ACCESS_KEY}\n");
chmod 0600, $bad;
set_setting('s3_credentials_file', $bad);
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^F0000: the object store's credentials file .* is malformed/,
	'a credentials file without a secret is refused');
unlink $bad;
PostgreSQL::Test::Utils::append_to_file($bad, "$s3{S3_ACCESS_KEY}\nnot-the-secret-0123456789\n");
chmod 0600, $bad;
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^58030: could not PUT object .* HTTP status 403, SignatureDoesNotMatch/,
	'a wrong secret: the store refuses the signature');
is( query(qq{SELECT retries - $put_retries, failed - $put_failed,
	   last_failure ~ 'HTTP status 403, SignatureDoesNotMatch' AND strpos(last_failure, 'not-the-secret') = 0
FROM persist_sink.object_store_stats WHERE kind = 'put'}),
	'0|4|t', 'object_store_stats: each of the 4 failed puts counted, none retried (404, 403, the credentials file), the last one\'s error without the secret');
set_setting('s3_credentials_file', '');
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^F0000: the object store is not configured/, 'no credentials file set');
set_setting('s3_credentials_file', $creds);
is(query(qq{SELECT bucket FROM persist_sink.check_object_store('s3://$bucket')}),
	$bucket, 'with the right file again, it works');
unlike(slurp_file($node->logfile), qr/\Q$s3{S3_SECRET_KEY}\E/,
	'the secret is not in the server log');

# (c) bounded failures: nothing listens
my $closed = PostgreSQL::Test::Cluster::get_free_port();
set_setting('s3_endpoint', "http://127.0.0.1:$closed");
set_setting('s3_timeout', '1s');
my $retries = query("SELECT retries FROM persist_sink.object_store_stats WHERE kind = 'put'");
my $t0 = time;
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^58030: could not PUT object .*(Connection refused|Failed to connect|Couldn't connect)/i,
	'a store that does not listen: a connection error');
my $took = time - $t0;
cmp_ok($took, '>=', 0.9, '... once persist_sink.s3_timeout is spent');
cmp_ok($took, '<', 5, '... and not much later');
ok(query("SELECT retries > $retries FROM persist_sink.object_store_stats WHERE kind = 'put'") eq 't',
	'... the connection tried again meanwhile');

# Starts a store answering 503 SlowDown (a child process of this test):
# every request, or only the first if $once (later ones are taken and
# never answered).  Points persist_sink.s3_endpoint at it; returns its
# socket and pid for stop_store.
sub start_slowdown_store
{
	my ($once) = @_;
	my $sock = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
	  or die "could not listen: $!";
	my $pid = fork() // die "could not fork: $!";
	if ($pid == 0)
	{
		my $body = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
		  . '<Message>Please reduce your request rate.</Message></Error>';
		my ($answered, @held) = (0);
		while (my $c = $sock->accept)
		{
			local $/ = "\r\n\r\n";
			my $head = <$c>;
			if ($once && $answered++)
			{
				push @held, $c;
				next;
			}
			print $c "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
			  . 'Content-Length: ' . length($body) . "\r\nConnection: close\r\n\r\n$body";
			close $c;
		}
		POSIX::_exit(0);
	}
	set_setting('s3_endpoint', 'http://127.0.0.1:' . $sock->sockport);
	return ($sock, $pid);
}

# Stops a store start_slowdown_store started.
sub stop_store
{
	my ($sock, $pid) = @_;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	close $sock;
}

# a store that answers every request 503 SlowDown: tried again until
# persist_sink.s3_timeout is spent
my @busy = start_slowdown_store(0);
$retries = query("SELECT retries FROM persist_sink.object_store_stats WHERE kind = 'put'");
$t0 = time;
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^58030: could not PUT object .*: HTTP status 503, SlowDown/,
	'a store that answers 503 SlowDown: its error');
$took = time - $t0;
cmp_ok($took, '>=', 0.9, '... once persist_sink.s3_timeout is spent');
cmp_ok($took, '<', 5, '... and not much later');
ok(query("SELECT retries > $retries FROM persist_sink.object_store_stats WHERE kind = 'put'") eq 't',
	'... the request tried again meanwhile');
stop_store(@busy);

# a store that answers 503 SlowDown once, then takes requests and never
# answers: the request runs out of time in an attempt that got no
# answer, and raises the status the store gave, that attempt's error in
# its detail
my @stall = start_slowdown_store(1);
my (undef, undef, $stall_err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT persist_sink.check_object_store('s3://$bucket')");
like($stall_err, qr/ERROR:  58030: could not PUT object .*: HTTP status 503, SlowDown/,
	'a store that answers 503 SlowDown, then nothing: the status it gave');
like($stall_err, qr/DETAIL:  Please reduce your request rate\. The last attempt got no answer: .*timed out/i,
	'... and the attempt that got no answer in its detail');
stop_store(@stall);

# a store that accepts and never answers: the request times out
my $silent = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "could not listen: $!";
set_setting('s3_endpoint', 'http://127.0.0.1:' . $silent->sockport);
set_setting('s3_timeout', '1500ms');
$t0 = time;
like(error_of(qq{SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^58030: could not PUT object .*(timed out|Timeout)/i,
	'a store that never answers: the request times out');
$took = time - $t0;
cmp_ok($took, '>=', 1.4, '... after persist_sink.s3_timeout');
cmp_ok($took, '<', 6, '... and not much later');

# a cancel ends the request at once
set_setting('s3_timeout', '20s');
$t0 = time;
like(error_of(qq{SET statement_timeout = '300ms'; SELECT persist_sink.check_object_store('s3://$bucket')}),
	qr/^57014: canceling statement due to statement timeout/,
	'a cancel ends a request the store does not answer');
cmp_ok(time - $t0, '<', 3, '... within a fraction of a second past the timeout');
close $silent;

# the store back
set_setting('s3_endpoint', $s3{S3_ENDPOINT});
is(query(qq{SELECT bucket FROM persist_sink.check_object_store('s3://$bucket')}),
	$bucket, 'the store works again');

$node->stop;
done_testing();
