
# Copyright (c) persist_sink contributors

# Backpressure (a shard stays bounded under any load): append() is slowed past
# persist_sink.slowdown_batches and stalled at persist_sink.stop_batches
# (4 and 10 here), until compaction brings the shard's batch count down.
#  (a) With background compaction off, sequential appends past the soft
#      bound are slowed (stats.slowed_ms); at the hard bound an append
#      waits (seen in pg_stat_activity), and so does a second writer; the
#      batch count, sampled meanwhile, never passes the hard bound.
#  (b) A cancelled stalled writer gets 57014 and writes nothing.
#  (c) Turning compaction back on releases the stalled writers; their
#      writes are in the shard, and stats.stalled_ms > 0.
#  (d) With compaction off, a stalled append gives up after 30 seconds
#      with 55000 and writes nothing.
#  (e) With the default bounds, 3000 appends from four sessions keep the
#      shard at 64 batches or fewer (sampled every 100ms).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep time);

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('backpressure',
	"persist_sink.slowdown_batches = 4\npersist_sink.stop_batches = 10\n");
my $max_seen = 0;

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Sets a persist_sink setting by ALTER SYSTEM and waits for the reload.
sub set_setting
{
	my ($name, $value) = @_;
	query("ALTER SYSTEM SET persist_sink.$name = $value");
	query('SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', "SHOW persist_sink.$name", $value)
	  or die "timed out waiting for $name = $value";
}

# The number of batches of a shard; remembers the largest seen.
sub batches
{
	my ($s) = @_;
	my $n = query("SELECT batches FROM persist_sink.shards WHERE name = '$s'");
	$max_seen = $n if $n > $max_seen;
	return $n;
}

# Waits (bounded) until the session named $app waits on the extension,
# sampling the shard's batches meanwhile; true if it does.
sub wait_stalled
{
	my ($app, $s) = @_;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		batches($s);
		return 1 if query(qq{SELECT count(*) FROM pg_stat_activity
			WHERE application_name = '$app' AND state = 'active'
			  AND wait_event_type = 'Extension'}) eq '1';
		usleep(100_000);
	}
	return 0;
}

# Stats of a shard, as "slowed_ms > 0|stalled_ms > 0".
sub stats_positive
{
	my ($s) = @_;
	return query(qq{SELECT slowed_ms > 0, stalled_ms > 0 FROM persist_sink.stats
		WHERE shard = '$s'});
}

query(q{SELECT persist_sink.create_shard('bp')});
query(q{SELECT persist_sink.create_shard('sus')});
is(query('SHOW persist_sink.slowdown_batches') . ' ' . query('SHOW persist_sink.stop_batches'),
	'4 10', 'small bounds are set');

# (a) compaction off: 10 sequential appends reach the hard bound, slowed
# from the fifth on
set_setting('compaction', 'off');
query(q{SELECT count(persist_sink.append('bp', ARRAY['k' || i], '{v}'::text[], '{1}'))
	FROM generate_series(1, 10) i});
is(batches('bp'), '10', 'ten appends made ten batches');
like(stats_positive('bp'), qr/^t\|/, 'appends past the soft bound were slowed');

my $s1 = start_psql($node, $dir, 'stalled1',
	q{SELECT persist_sink.append('bp', '{s1}'::text[], '{v}'::text[], '{1}') > 0;});
ok(wait_stalled('stalled1', 'bp'), 'an append at the hard bound waits');
my $s2 = start_psql($node, $dir, 'stalled2',
	q{SELECT persist_sink.append('bp', '{s2}'::text[], '{v}'::text[], '{1}') > 0;});
ok(wait_stalled('stalled2', 'bp'), 'a second writer waits too');
for (1 .. 10)
{
	batches('bp');
	usleep(100_000);
}
is(batches('bp'), '10', 'the stalled writers added no batch');

# (b) a cancelled stalled writer: 57014, nothing written
my $c = start_psql($node, $dir, 'cancelled',
	qq{\\set VERBOSITY verbose\nSELECT persist_sink.append('bp', '{c}'::text[], '{v}'::text[], '{1}');});
ok(wait_stalled('cancelled', 'bp'), 'the writer to cancel waits');
query(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelled'});
my $r = finish_psql($c);
ok(!$r->{ok} && !$r->{timed_out}, 'the cancelled append failed');
like($r->{err}, qr/57014/, 'with 57014');

# (c) compaction on releases the stalled writers
set_setting('compaction', 'on');
for my $s ($s1, $s2)
{
	$r = finish_psql($s);
	ok($r->{ok}, "$s->{name} finished once compaction was back on") or diag $r->{err};
	is($r->{out}, "t\n", "$s->{name} got its time");
}
is(query(q{SELECT string_agg(convert_from(key, 'UTF8'), ',' ORDER BY key)
	FROM persist_sink.snapshot('bp') WHERE key IN ('s1', 's2', 'c')}),
	's1,s2', 'the released writes are in the shard, the cancelled one is not');
ok(batches('bp') < 10, 'compaction brought the count below the hard bound');
is(stats_positive('bp'), 't|t', 'stats show slowed and stalled time');
ok($max_seen <= 10, "batches never passed the hard bound (max $max_seen)");

# (d) with compaction off, a stall is bounded: 55000 after 30 seconds
set_setting('compaction', 'off');
my $have = batches('bp');
query(qq{SELECT count(persist_sink.append('bp', ARRAY['d' || i], '{v}'::text[], '{1}'))
	FROM generate_series(1, 10 - $have) i});
is(batches('bp'), '10', 'the shard is at the hard bound again');
my $t0 = time;
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT persist_sink.append('bp', '{late}'::text[], '{v}'::text[], '{1}')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
my $waited = time - $t0;
like($err, qr/55000.*background compaction is off/, 'a stall without compaction ends in 55000');
ok($waited >= 29 && $waited < 120, sprintf('after about 30 seconds (%.1f)', $waited));
is(query(q{SELECT count(*) FROM persist_sink.snapshot('bp') WHERE key = 'late'}), '0',
	'and wrote nothing');
set_setting('compaction', 'on');

# (e) default bounds: a sustained run from four sessions stays bounded
is(query(q{SELECT string_agg(boot_val, ' ' ORDER BY name) FROM pg_settings
	WHERE name IN ('persist_sink.slowdown_batches', 'persist_sink.stop_batches')}),
	'32 48', 'the default bounds are 32 and 48');
set_setting('slowdown_batches', '32');
set_setting('stop_batches', '48');
$max_seen = 0;
my @writers = map {
	start_psql($node, $dir, "sus$_",
		qq{SELECT count(persist_sink.append('sus', ARRAY['w$_.' || i], '{v}'::text[], '{1}'))
		   FROM generate_series(1, 750) i;})
} 1 .. 4;
# sample until the writers have connected and all have left (bounded)
my ($samples, $seen) = (0, 0);
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	my $active = query(q{SELECT count(*) FROM pg_stat_activity
		WHERE application_name LIKE 'sus_'});
	batches('sus');
	$samples++;
	$seen ||= $active > 0;
	last if ($seen && $active == 0) || ($samples > 50 && $active == 0);
	usleep(100_000);
}
for my $w (@writers)
{
	$r = finish_psql($w);
	ok($r->{ok}, "$w->{name} finished its 750 appends") or diag $r->{err};
}
is(query(q{SELECT count(*) FROM persist_sink.snapshot('sus')}), '3000', 'every append is in the shard');
ok($max_seen <= 64, "batches stayed at 64 or fewer (max $max_seen in $samples samples)");
note "sustained run: max $max_seen batches in $samples samples; stats: "
  . query(q{SELECT appends, slowed_ms, stalled_ms FROM persist_sink.stats WHERE shard = 'sus'});

$node->stop;
done_testing();
