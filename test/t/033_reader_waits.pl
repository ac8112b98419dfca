
# Copyright (c) persist_sink contributors

# A read_next with a timeout waits for updates after its reader's position
# without polling, and never holds anything while it waits:
#  (a) it returns the updates of an append that commits while it waits,
#      long before its timeout;
#  (b) with nothing appended it returns no rows once its timeout passes;
#  (c) it fails with 42704 soon after its reader is dropped, and with
#      57014 at once when cancelled;
#  (d) while it waits, advance_reader and drop_reader of its reader by
#      other sessions do not wait for it (it holds no row lock yet).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time);
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('waits');
my $q = sub { $node->safe_psql('postgres', shift) };
$q->("SELECT persist_sink.create_shard('w');
	SELECT persist_sink.compare_and_append('w', ARRAY['a'], ARRAY['v'], ARRAY[0::bigint], ARRAY[1::bigint], 0, 1);
	SELECT persist_sink.create_reader('w', 'r', 0)");

# Starts a read_next of reader r waiting up to $timeout, as $name.
sub start_wait
{
	my ($name, $timeout) = @_;
	return start_psql($node, $dir, $name,
		"SELECT string_agg(convert_from(key, 'UTF8'), ',') FROM persist_sink.read_next('w', 'r', 100, '$timeout');\n",
		on_error_stop => 0);
}

# Waits until the session $name is in read_next.
sub await_waiting
{
	my ($name) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' AND query LIKE '%read_next%'"
	) or die "$name never started waiting";
}

# (a) an append while it waits wakes it
my $start = time;
my $w = start_wait('woken', '60s');
await_waiting('woken');
$q->("SELECT persist_sink.compare_and_append('w', ARRAY['b'], ARRAY['v'], ARRAY[1::bigint], ARRAY[1::bigint], 1, 2)");
my $r = finish_psql($w);
ok($r->{ok}, 'the waiting read_next returned');
is($r->{out}, "b\n", 'with the update appended while it waited');
cmp_ok(time - $start, '<', 30, 'long before its 60 s timeout');

# (b) nothing appended: no rows at the timeout
$q->("SELECT persist_sink.advance_reader('w', 'r', 1)");
$start = time;
$r = finish_psql(start_wait('idle', '300ms'));
ok($r->{ok}, 'a read_next with nothing to read returns');
is($r->{out}, "\n", 'no rows');
cmp_ok(time - $start, '>=', 0.3, 'after its timeout');

# (d) others move and (c) drop its reader while it waits
$w = start_wait('dropped', '60s');
await_waiting('dropped');
is($q->("SET lock_timeout = '5s'; SELECT 't' FROM persist_sink.advance_reader('w', 'r', 1)"),
	't', 'advance_reader does not wait for a waiting read_next');
$start = time;
is($q->("SET lock_timeout = '5s'; SELECT 't' FROM persist_sink.drop_reader('w', 'r')"),
	't', 'nor does drop_reader');
$r = finish_psql($w);
like($r->{err}, qr/reader "r" of shard "w" does not exist/, 'the waiting read_next fails once its reader is dropped');
cmp_ok(time - $start, '<', 30, 'soon, not at its timeout');

# (c) a cancel ends the wait at once
$q->("SELECT persist_sink.create_reader('w', 'r')");
$q->("SELECT persist_sink.advance_reader('w', 'r', persist_sink.shard_upper('w') - 1)");
$w = start_wait('cancelled', '60s');
await_waiting('cancelled');
$start = time;
$q->("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelled'");
$r = finish_psql($w);
like($r->{err}, qr/canceling statement due to user request/, 'a cancel ends the wait with 57014');
cmp_ok(time - $start, '<', 30, 'at once');
is($q->("SELECT position = persist_sink.shard_upper('w') - 1 FROM persist_sink.readers WHERE reader = 'r'"),
	't', 'and leaves the reader where it was');

$node->stop;
done_testing();
