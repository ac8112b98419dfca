
# Copyright (c) persist_sink contributors

# One outcome per write (README, Writes; doc/architecture.md): whatever happens around an
# append(), its caller sees a time (the write is in the shard once, at that
# time), an error other than 40003 (nothing written, key not recorded),
# 40003 (a retry with the same key writes it exactly once) or PS005
# (nothing written: the key belongs to other content).  Each case holds the
# sink at a chosen step (a lock on the table of state diffs, or a transaction
# holding the shard's state row), drives the writes into it, and checks
# every outcome by SQLSTATE and by the shard's content:
#
#  (1) a keyed append cancelled after its interval was sealed gets 40003;
#      its retry with the same key and content, (a) in the same session,
#      (b) from a new connection while the first session goes on with its
#      next append, (c) from a new connection after the first one closed
#      (on a node of its own, at the end), writes it once and returns the
#      time it is at;
#  (2) two appends with one key in one interval: other content, exactly one
#      returns a time (its content written) and the other gets PS005
#      (nothing written); equal content, both return the same time and the
#      content is written once;
#  (3) a keyed append refused inside its interval for diff overflow (22003)
#      does not record its key: its retry returns a time, and its content
#      is then in the shard, at that time;
#  (4) the idempotency window counts from when the retry arrives: a retry
#      of a committed write, sent inside the window to a held shard, is
#      settled on arrival (the first time, nothing written); and a keyed
#      write in flight keeps the keys of its window from being expired;
#  (5) an error that ends a statement after an append of it was written is
#      40003 whose DETAIL says it was written, whether the statement is
#      cancelled or times out after the append returned, in the append's
#      own statement or in a second append of it; an append cancelled
#      before its write joined a commit keeps 57014, DETAIL nothing written;
#  (6) the idempotency digest is SHA-256 (32 bytes), and two contents whose
#      CRC-32C digests collide are told apart: the second gets PS005;
#  (7) a keyed call interrupted while its key is looked up, or withdrawn
#      while the call it retries is in flight, gets 40003, not 57014.
#
# Holding the sink as described is deterministic: every wait is observed
# (pg_stat_activity, pg_locks, sink_memory(), the idempotency table) before
# the test goes on, and cancellations are sent with pg_cancel_backend once
# the write is where the case needs it.  Only the timed-out statements of
# (5b) and (5e) depend on timing: they assume that an unhindered append
# returns within their statement_timeout (2s), and their checks accept
# either outcome as long as the error matches what was written.  (1c)
# relies on PostgreSQL giving a new backend the only free PGPROC.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;
use Time::HiRes qw(usleep);

my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = sink_node('one_outcome', "max_connections = 40\nlog_min_messages = warning\n");
my $q = sub { $node->safe_psql('postgres', shift) };

# D + D overflows bigint, D alone does not
my $big = '6917529027641081856';    # 2^62 + 2^61

# One append of 3 updates (tag-1 .. tag-3, each val `val`, diff 1) under
# idempotency key ikey (or none); prints "ack <label> <time>".
$q->(q{
CREATE FUNCTION w(shard text, label text, tag text, val text, ikey text) RETURNS text
LANGUAGE sql AS $$
	SELECT 'ack ' || label || ' ' || persist_sink.append(shard,
		ARRAY(SELECT tag || '-' || k FROM generate_series(1, 3) k),
		array_fill(val, ARRAY[3]), array_fill(1::bigint, ARRAY[3]), ikey)
$$});

# A call of w(), and a statement of one call
sub call
{
	my ($shard, $label, $tag, $val, $ikey) = @_;
	return sprintf("w('%s', '%s', '%s', '%s', %s)", $shard, $label, $tag, $val,
		defined $ikey ? "'$ikey'" : 'NULL');
}

sub w
{
	return 'SELECT ' . call(@_);
}

# Starts a background session (application_name $name) running statements
# [label, sql] one a line, errors shown with their SQLSTATE and not stopping
# the script.
sub start_script
{
	my ($name, @stmts) = @_;
	my $sql = "\\set VERBOSITY verbose\n" . join('', map { "$_->[1];\n" } @stmts);
	my $s = start_psql($node, $dir, $name, $sql, on_error_stop => 0);
	$s->{labels} = [ map { $_->[0] } @stmts ];
	return $s;
}

# Waits for a session started by start_script; returns label => { time }
# or { code, message, detail } for each statement that acknowledged or
# failed.
sub finish_script
{
	my ($s) = @_;
	my $r = finish_psql($s);
	die "session $s->{name} did not end" if $r->{timed_out};
	my %o;
	$o{$1} = { time => $2 } while $r->{out} =~ /^ack (\S+) (\d+)$/mg;
	for my $block (split /(?=^psql:)/m, $r->{err})
	{
		next unless $block =~ /^psql:.*?:(\d+): (?:ERROR|FATAL):\s+([0-9A-Z]{5}): ([^\n]*)/;
		my ($line, $code, $msg) = ($1, $2, $3);
		my ($detail) = $block =~ /^DETAIL:\s+(.*)$/m;
		$o{ $s->{labels}[ $line - 2 ] // "line$line" } =
		  { code => $code, message => $msg, detail => $detail // '' };
	}
	return \%o;
}

# Runs statements in a new session, to the end.
sub run_script
{
	return finish_script(start_script(@_));
}

# An outcome as text: "time", "SQLSTATE" or "none".
sub what
{
	my ($o) = @_;
	return 'none' unless $o;
	return defined $o->{time} ? 'time' : $o->{code};
}

# How the updates of keys "<tag>-..." are in the shard: "<keys> <sum of
# diffs> <times> <time>" (keys and diffs by snapshot; the distinct times and
# the first time by listen).
sub present
{
	my ($shard, $tag) = @_;
	my $match = "position(convert_to('$tag-', 'UTF8') in key) = 1";
	my $src = "persist_sink.snapshot('$shard')";
	return $q->(qq{
SELECT (SELECT count(DISTINCT key) FROM $src WHERE $match) || ' '
	|| (SELECT coalesce(sum(diff), 0) FROM $src WHERE $match) || ' '
	|| (SELECT count(DISTINCT "time") FROM persist_sink.listen('$shard', 0) WHERE $match) || ' '
	|| coalesce((SELECT min("time") FROM persist_sink.listen('$shard', 0) WHERE $match)::text, '-')});
}

# Waits until $n sessions whose application_name is LIKE $pattern wait in
# append (on the sink, wait_event_type Extension).
sub wait_appending
{
	my ($pattern, $n) = @_;
	$node->poll_query_until('postgres', qq{
SELECT count(*) FROM pg_stat_activity
WHERE application_name LIKE '$pattern' AND state = 'active' AND wait_event_type = 'Extension'}, $n)
	  or die "timed out waiting for $n sessions $pattern to wait in append";
}

# Cancels the query of the sessions named $name.
sub cancel
{
	my ($name) = @_;
	is($q->("SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
			WHERE application_name = '$name'"), 1, "cancelled $name");
}

# Holds back the shard's intervals: a transaction holds its state row (a
# compare_and_append left open) and a first write (session "<name>_w0")
# waits for it, its interval blocked; the writes started next join the
# shard's next interval together, which stays open until release().
sub hold_shard
{
	my ($shard, $name) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(
		"SELECT persist_sink.compare_and_append('$shard', ARRAY['held-1'], ARRAY['v'],
			ARRAY[u], ARRAY[1::bigint], u, u + 1) FROM persist_sink.shard_upper('$shard') u");
	my $w0 = start_script("${name}_w0", [ w0 => w($shard, 'w0', "w0$name", 'v') ]);
	$node->poll_query_until('postgres', 'SELECT blocked_intervals = 1 FROM persist_sink.sink_memory()')
	  or die "timed out waiting for the interval of $shard to block";
	wait_appending("${name}_w0", 1);
	return { holder => $holder, w0 => $w0, shard => $shard };
}

# Lets a held shard go: commits the holder; its first write must succeed.
sub release
{
	my ($h) = @_;
	$h->{holder}->query_safe('COMMIT');
	$h->{holder}->quit;
	my $o = finish_script($h->{w0});
	is(what($o->{w0}), 'time', "$h->{shard}: the first write of the held shard succeeded");
}

# Holds the sink worker in a sealed interval: a transaction locks the
# table of state diffs, which the worker writes by its compare-and-swap,
# once it has sealed the interval and settled its keys (sink_worker.c
# commit_interval: probe, take_parts, seal_writes, settle_keys, then
# ps_shard_append_now).  Writers never touch that table, so a retry still
# settles its key on arrival and joins the next interval.  The worker
# gives up after its lock_timeout (10s): the steps under the lock take far
# less.
sub lock_state_diffs
{
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe('LOCK TABLE persist_sink.consensus_diff IN ACCESS EXCLUSIVE MODE');
	return $holder;
}

# Waits until a sink worker waits for the lock on the table of state diffs.
sub wait_worker_on_diffs
{
	$node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.backend_type = 'persist_sink worker' AND NOT l.granted
  AND l.relation = 'persist_sink.consensus_diff'::regclass})
	  or die 'timed out waiting for the worker to wait for the table of state diffs';
}

# How many rows of the idempotency table record a key of a shard.
sub key_row
{
	my ($shard, $key) = @_;
	return $q->("SELECT count(*) FROM persist_sink.idempotency WHERE shard = '$shard' AND key = '$key'");
}

$q->(join(';', map { "SELECT persist_sink.create_shard('$_')" } qw(o1a o1b o2 o3 o4 o4s o4w o5 o5h o6 o6c o7a o7b)));

#
# (6) The digest is SHA-256; and two single-update writes whose CRC-32C
# digests (the 16-byte digest of keys_crc, vals_crc and size) are equal,
# with one idempotency key: the second is other content and must get PS005,
# not the first write's time.  The two keys below have the same length and
# leave CRC-32C in the same state (checked here), so keys_crc is equal.
#
{
	my $o = run_script('o6', [ first => w('o6', 'first', 'd', 'v', 'K6') ]);
	is(what($o->{first}), 'time', '(6) a keyed append returns a time');
	is($q->("SELECT octet_length(digest) FROM persist_sink.idempotency WHERE shard = 'o6' AND key = 'K6'"),
		'32', '(6) the idempotency digest is 32 bytes (SHA-256)');

	my @table = map {
		my $c = $_;
		$c = $c & 1 ? ($c >> 1) ^ 0x82F63B78 : $c >> 1 for 1 .. 8;
		$c
	} 0 .. 255;
	my $crc_state = sub {
		my $c = 0xFFFFFFFF;
		$c = $table[ ($c ^ $_) & 0xff ] ^ ($c >> 8) for unpack('C*', shift);
		return $c;
	};
	my ($k1, $k2) = ('63636bfcc7a850c3', '63634c2710c8ec8c');
	is( $crc_state->(pack('V', 8) . pack('H*', $k1)),
		$crc_state->(pack('V', 8) . pack('H*', $k2)),
		'(6) the two keys collide under CRC-32C (the precondition of the next check)');
	my $coll = sub {
		my ($label, $k) = @_;
		return [ $label =>
			  "SELECT 'ack $label ' || persist_sink.append('o6c', ARRAY[decode('$k', 'hex')], ARRAY['v'::bytea], ARRAY[1::bigint], 'K6c')"
		];
	};
	$o = run_script('o6c', $coll->('c1', $k1), $coll->('c2', $k2));
	is(what($o->{c1}), 'time', '(6) the first of two colliding writes returns a time');
	is(what($o->{c2}), 'PS005', '(6) the second, other content under the same key, gets PS005');
	is( $q->("SELECT string_agg(encode(key, 'hex') || ':' || diff, ' ') FROM persist_sink.snapshot('o6c')"),
		"$k1:1", '(6) only the first content is in the shard');
}

#
# (1) A keyed retry after 40003 writes once.  The worker is held after it
# sealed the interval of a keyed append (lock_state_diffs); the append is
# cancelled there and gets 40003; its retry (same key, same content) waits
# for the worker; then the lock goes.  The write must be in the shard
# once, at the time every retry returned.
#
# (a) the retry in the same session
{
	my $lock = lock_state_diffs();
	my $s = start_script('o1a',
		[ orig => w('o1a', 'orig', 'a', 'v', 'K1a') ],
		[ retry => w('o1a', 'retry', 'a', 'v', 'K1a') ]);
	wait_worker_on_diffs();
	wait_appending('o1a', 1);
	cancel('o1a');
	# the retry now waits behind the held worker
	$node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE application_name = 'o1a' AND state = 'active'
   AND wait_event_type = 'Extension' AND query LIKE '%''retry''%'}, 1)
	  or die 'timed out waiting for the retry to wait';
	$lock->query_safe('COMMIT');
	$lock->quit;
	my $o = finish_script($s);
	is(what($o->{orig}), '40003', '(1a) the append cancelled after its interval was sealed gets 40003');
	is(what($o->{retry}), 'time', '(1a) its retry in the same session returns a time');
	my $again = run_script('o1a_again', [ again => w('o1a', 'again', 'a', 'v', 'K1a') ]);
	is(what($again->{again}), 'time', '(1a) a later retry returns a time');
	my $p = present('o1a', 'a');
	is($p, "3 3 1 " . ($o->{retry}{time} // '?'),
		'(1a) the write is in the shard exactly once (3 keys, diff 1 each), at one time, the time the retry returned');
	is($again->{again}{time}, $o->{retry}{time}, '(1a) the later retry returned the same time');
}

# (b) the retry from a new connection, while the first session goes on
# with its next append (other key, other content), which also waits
{
	my $lock = lock_state_diffs();
	my $s = start_script('o1b',
		[ orig => w('o1b', 'orig', 'b', 'v', 'K1b') ],
		[ next => w('o1b', 'next', 'n', 'v', 'K1b-next') ]);
	wait_worker_on_diffs();
	wait_appending('o1b', 1);
	cancel('o1b');
	$node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE application_name = 'o1b' AND state = 'active'
   AND wait_event_type = 'Extension' AND query LIKE '%''next''%'}, 1)
	  or die 'timed out waiting for the next append to wait';
	my $r = start_script('o1b_retry', [ retry => w('o1b', 'retry', 'b', 'v', 'K1b') ]);
	wait_appending('o1b_retry', 1);
	$lock->query_safe('COMMIT');
	$lock->quit;
	my $o = finish_script($s);
	my $or = finish_script($r);
	is(what($o->{orig}), '40003', '(1b) the append cancelled after its interval was sealed gets 40003');
	is(what($o->{next}), 'time', '(1b) the next append of that session returns a time');
	is(what($or->{retry}), 'time', '(1b) the retry from a new connection returns a time');
	my $again = run_script('o1b_again', [ again => w('o1b', 'again', 'b', 'v', 'K1b') ]);
	is( present('o1b', 'b'),
		"3 3 1 " . ($or->{retry}{time} // '?'),
		'(1b) the write is in the shard exactly once, at one time, the time the retry returned');
	is($again->{again}{time}, $or->{retry}{time}, '(1b) a later retry returned the same time');
	is(present('o1b', 'n'), "3 3 1 " . ($o->{next}{time} // '?'), '(1b) the next append is there once, at its time');
}

ok(!$node->log_contains('interval of shard "o1[ab]" failed'),
	'(1) the held intervals did not fail (the worker did not reach its lock_timeout)');

#
# (2) One key in one interval.  The shard is held back (hold_shard) so that
# four keyed appends join one interval: x1 and x2 under key K2x with other
# content (val one / two), y1 and y2 under key K2y with equal content.
#
{
	my $h = hold_shard('o2', 'o2');
	my %s = (
		x1 => start_script('o2_x1', [ x1 => w('o2', 'x1', 'x', 'one', 'K2x') ]),
		x2 => start_script('o2_x2', [ x2 => w('o2', 'x2', 'x', 'two', 'K2x') ]),
		y1 => start_script('o2_y1', [ y1 => w('o2', 'y1', 'y', 'same', 'K2y') ]),
		y2 => start_script('o2_y2', [ y2 => w('o2', 'y2', 'y', 'same', 'K2y') ]));
	wait_appending('o2_%', 5);
	is($q->('SELECT blocked_intervals FROM persist_sink.sink_memory()'), 1,
		'(2) the shard is still held back while the four appends wait (they share its next interval)');
	release($h);
	my %o = map { %{ finish_script($s{$_}) } } sort keys %s;
	my @x = sort map { what($o{$_}) } qw(x1 x2);
	is("@x", 'PS005 time', '(2) same key, other content: one returns a time, the other gets PS005');
	my ($won) = grep { what($o{$_}) eq 'time' } qw(x1 x2);
	my $val = defined $won && $won eq 'x2' ? 'two' : 'one';
	is( $q->(qq{SELECT count(*) FILTER (WHERE convert_from(val, 'UTF8') = '$val' AND diff = 1) || ' '
		|| count(*) FILTER (WHERE convert_from(val, 'UTF8') <> '$val')
		FROM persist_sink.snapshot('o2') WHERE convert_from(key, 'UTF8') LIKE 'x-%'}),
		'3 0', "(2) ... the content of the one that returned a time ($val) is written once, the other's not at all");
	is(present('o2', 'x'), '3 3 1 ' . (defined $won ? $o{$won}{time} : '?'),
		'(2) ... at the time it returned');
	is(what($o{y1}) . ' ' . what($o{y2}), 'time time', '(2) same key, equal content: both return a time');
	is($o{y1}{time}, $o{y2}{time}, '(2) ... the same time');
	is(present('o2', 'y'), '3 3 1 ' . ($o{y1}{time} // '?'), '(2) ... and the content is written once, at that time');
}

#
# (3) A keyed write refused inside its interval for diff overflow must not
# record its key.  Held back together in one interval: p (key ovk, diff D)
# joins first, then q (key ovk diff D, and q-1, q-2 diff 1, idempotency key
# K3): the sum overflows, and the later write, q, is refused (22003).  An
# append of ovk with diff -D follows (so that the shard's sums stay in
# range), then q's retry, alone in its interval: it must return a time and
# be written.
#
{
	my $h = hold_shard('o3', 'o3');
	my $p = start_script('o3_p',
		[ p => "SELECT 'ack p ' || persist_sink.append('o3', ARRAY['ovk'], ARRAY['v'], ARRAY[$big])" ]);
	wait_appending('o3_%', 2);
	my $qsql =
	  "SELECT 'ack %s ' || persist_sink.append('o3', ARRAY['ovk', 'q-1', 'q-2'], ARRAY['v', 'v', 'v'], ARRAY[$big, 1, 1], 'K3')";
	my $qs = start_script('o3_q', [ q => sprintf($qsql, 'q') ]);
	wait_appending('o3_%', 3);
	release($h);
	my $op = finish_script($p);
	my $oq = finish_script($qs);
	is(what($op->{p}), 'time', '(3) the first write of the overflowing pair returns a time');
	is(what($oq->{q}), '22003', '(3) the second, keyed, is refused for overflow (22003)');
	is(present('o3', 'q'), '0 0 0 -', '(3) ... and nothing of it is written');
	is(key_row('o3', 'K3'), 0, '(3) ... and its idempotency key is not recorded');
	$q->("SELECT persist_sink.append('o3', ARRAY['ovk'], ARRAY['v'], ARRAY[-$big])");
	my $or = run_script('o3_retry', [ retry => sprintf($qsql, 'retry') ]);
	is(what($or->{retry}), 'time', '(3) its retry with the same key, alone, returns a time');
	is(present('o3', 'q'), '2 2 1 ' . ($or->{retry}{time} // '?'),
		'(3) ... and its content is then in the shard once, at that time');
	is( $q->(qq{SELECT count(*) FROM persist_sink.listen('o3', 0)
			 WHERE key = 'ovk'::bytea AND diff = $big AND "time" = } . ($or->{retry}{time} // 0)),
		1, '(3) ... its update of ovk too');
}

#
# (5) Errors after a write of the statement was written.
#
{
	# (a) the append returned, then the statement is cancelled (in pg_sleep)
	my $s = start_script('o5a', [ a => w('o5', 'a', 'a5', 'v') . ', pg_sleep(60)' ]);
	$node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'o5a' AND wait_event = 'PgSleep'", 1)
	  or die 'timed out waiting for o5a to sleep';
	cancel('o5a');
	my $o = finish_script($s);
	is(what($o->{a}), '40003', '(5a) cancelled after its append was written: 40003');
	like($o->{a}{detail} // '', qr/written/i, '(5a) ... with a DETAIL that says it was written');
	unlike($o->{a}{detail} // '', qr/\b(nothing|not)\b[^.]*\bwritten/i, '(5a) ... not that nothing was');
	like(present('o5', 'a5'), qr/^3 3 1 \d+$/, '(5a) the write is in the shard once');

	# (b) the same, by statement_timeout
	$o = run_script('o5b', [ set => "SET statement_timeout = '2s'" ],
		[ b => w('o5', 'b', 'b5', 'v') . ', pg_sleep(30)' ]);
	my $pb = present('o5', 'b5');
	note "(5b) the timed-out statement's write: $pb";
	is(what($o->{b}), $pb =~ /^0 / ? '57014' : '40003',
		'(5b) timed out after its append was written: 40003 (57014 only if nothing was written)');
	like($o->{b}{detail} // '', $pb =~ /^0 / ? qr/nothing/i : qr/written/i, '(5b) ... and the DETAIL says which');
	like($pb, qr/^(0 0 0 -|3 3 1 \d+)$/, '(5b) the write is there once or not at all');

	# (c)-(e): o5h held back
	my $h = hold_shard('o5h', 'o5h');
	# (c) an append cancelled while its write waits in an open interval
	my $c = start_script('o5h_c', [ c => w('o5h', 'c', 'c5', 'v') ]);
	# (d) two appends in one statement, the second cancelled after the first
	# (to the free shard o5) returned
	my $d = start_script('o5h_d', [ d => w('o5', 'd', 'd5a', 'v') . ', ' . call('o5h', 'd2', 'd5b', 'v') ]);
	# wait until c waits in the held interval and d in its second append:
	# the interval of d's first append is gone (only o5h's two remain)
	$node->poll_query_until('postgres', q{
SELECT (SELECT intervals FROM persist_sink.sink_memory()) = 2
   AND (SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('o5h_w0', 'o5h_c', 'o5h_d')
		AND state = 'active' AND wait_event_type = 'Extension') = 3})
	  or die 'timed out waiting for o5h_c and the second append of o5h_d';
	cancel('o5h_c');
	cancel('o5h_d');
	my $oc = finish_script($c);
	my $od = finish_script($d);
	# (e) the same, the second timed out
	my $oe = run_script('o5h_e', [ set => "SET statement_timeout = '2s'" ],
		[ e => w('o5', 'e', 'e5a', 'v') . ', ' . call('o5h', 'e2', 'e5b', 'v') ]);
	release($h);
	is(what($oc->{c}), '57014', '(5c) an append cancelled before its write was committed: 57014');
	like($oc->{c}{detail} // '', qr/nothing/i, '(5c) ... with a DETAIL that says nothing was written');
	is(present('o5h', 'c5'), '0 0 0 -', '(5c) ... and nothing is written');
	is(what($od->{d}), '40003', '(5d) a statement cancelled after its first append was written: 40003');
	like($od->{d}{detail} // '', qr/written/i, '(5d) ... with a DETAIL that says a write was written');
	like(present('o5', 'd5a'), qr/^3 3 1 \d+$/, '(5d) the first append is in the shard once');
	like(present('o5h', 'd5b'), qr/^(0 0 0 -|3 3 1 \d+)$/, '(5d) the second is there once or not at all');
	my $pe = present('o5', 'e5a');
	note "(5e) the first append of the timed-out statement: $pe";
	is(what($oe->{e}), $pe =~ /^0 / ? '57014' : '40003',
		'(5e) a statement timed out after its first append was written: 40003');
	like($pe, qr/^(0 0 0 -|3 3 1 \d+)$/, '(5e) the first append is there once or not at all');
}

#
# (4) The idempotency window counts from when the retry arrives.  With a
# window of 3s:
#  (4a) a keyed append commits (K4); its shard is then held back and the
#       retry sent inside the window (its query_start is checked against
#       the key's written_at): it is settled on arrival, returning the
#       first time at once, while the shard is still held, and writes
#       nothing.
#  (4b) a keyed write in flight holds the window open from its arrival: a
#       key A committed just before a keyed write W arrives on a held
#       shard is not expired while W waits, even once A is older than the
#       window (a sentinel key S, written 3.5s before A, is expired
#       meanwhile, so the compactor did run); once W has its outcome, A
#       is expired as usual.
#
{
	$q->("ALTER SYSTEM SET persist_sink.idempotency_window = 3; SELECT pg_reload_conf()");
	$node->poll_query_until('postgres', 'SHOW persist_sink.idempotency_window', '3s')
	  or die 'timed out waiting for the window to be 3s';
	my $o = run_script('o4', [ first => w('o4', 'first', 'f', 'v', 'K4') ]);
	is(what($o->{first}), 'time', '(4a) a keyed append returns a time');
	my $written_at = $q->("SELECT written_at FROM persist_sink.idempotency WHERE shard = 'o4' AND key = 'K4'");
	my $h = hold_shard('o4', 'o4');
	my $r = start_script('o4_retry', [ retry => w('o4', 'retry', 'f', 'v', 'K4') ]);
	my $or = finish_script($r);
	is( $q->("SELECT now() < '$written_at'::timestamptz + interval '3s'"),
		't', '(4a) the retry arrived and returned inside the window');
	is(what($or->{retry}), 'time', '(4a) the retry of a committed write returns a time while its shard is held');
	is($or->{retry}{time}, $o->{first}{time}, '(4a) ... the time of the first append');
	release($h);
	is(present('o4', 'f'), "3 3 1 $o->{first}{time}", '(4a) ... and writes nothing: the write is there once');

	my $so = run_script('o4s', [ sentinel => w('o4s', 'sentinel', 's', 'v', 'K4s') ]);
	is(what($so->{sentinel}), 'time', '(4b) the sentinel append returns a time');
	usleep(3_500_000);
	my $ao = run_script('o4a', [ a => w('o4s', 'a', 'a', 'v', 'K4a') ]);
	is(what($ao->{a}), 'time', '(4b) key A is committed');
	my $a_at = $q->("SELECT written_at FROM persist_sink.idempotency WHERE shard = 'o4s' AND key = 'K4a'");
	my $hw = hold_shard('o4w', 'o4w');
	my $wr = start_script('o4w_w', [ w => w('o4w', 'w', 'w', 'v', 'K4w') ]);
	wait_appending('o4w_w', 1);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM persist_sink.idempotency WHERE shard = 'o4s' AND key = 'K4s'")
	  or die 'timed out waiting for the compactor to expire the sentinel key';
	# two expiry rounds (every 3s) after A is older than the window
	$node->poll_query_until('postgres', "SELECT now() > '$a_at'::timestamptz + interval '9s'")
	  or die 'timed out waiting for A to pass the window';
	is(key_row('o4s', 'K4a'), 1, '(4b) A is kept while a keyed write that arrived within its window waits');
	release($hw);
	my $ow = finish_script($wr);
	is(what($ow->{w}), 'time', '(4b) the keyed write returns a time once its shard is let go');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM persist_sink.idempotency WHERE shard = 'o4s' AND key = 'K4a'")
	  or die 'timed out waiting for the compactor to expire A';
	pass('(4b) A is expired once no keyed write holds its window open');
	$q->("ALTER SYSTEM RESET persist_sink.idempotency_window; SELECT pg_reload_conf()");
}

#
# (7) A keyed call says "maybe" whenever a call with its key may be written:
#  (7a) interrupted while its key is looked up on arrival (the idempotency
#       table locked): 40003, and nothing of it is written;
#  (7b) withdrawn from its interval while the call it retries, sealed in
#       the interval before, is still in flight: 40003 (not 57014), and
#       the write is in the shard once when that one commits.
#
{
	my $lock = $node->background_psql('postgres');
	$lock->query_safe('BEGIN');
	$lock->query_safe('LOCK TABLE persist_sink.idempotency IN ACCESS EXCLUSIVE MODE');
	my $o = run_script('o7a', [ set => "SET statement_timeout = '500ms'" ],
		[ orig => w('o7a', 'orig', 'a', 'v', 'K7a') ]);
	$lock->query_safe('COMMIT');
	$lock->quit;
	is(what($o->{orig}), '40003', '(7a) a keyed call interrupted while its key is looked up gets 40003');
	like($o->{orig}{message}, qr/before it could tell whether its idempotency key was used/,
		'(7a) ... saying it could not tell');
	is(present('o7a', 'a'), '0 0 0 -', '(7a) ... and nothing of it is written');

	my $h = lock_state_diffs();
	my $s = start_script('o7b', [ orig => w('o7b', 'orig', 'b', 'v', 'K7b') ]);
	wait_worker_on_diffs();
	wait_appending('o7b', 1);
	cancel('o7b');
	my $first = finish_script($s);
	is(what($first->{orig}), '40003', '(7b) the sealed call, cancelled, gets 40003');
	my $r = start_script('o7b_retry', [ retry => w('o7b', 'retry', 'b', 'v', 'K7b') ]);
	wait_appending('o7b_retry', 1);
	cancel('o7b_retry');
	my $retry = finish_script($r);
	is(what($retry->{retry}), '40003', '(7b) its retry, withdrawn while the first is in flight, gets 40003');
	like($retry->{retry}{message}, qr/while a write with its idempotency key was in flight/,
		'(7b) ... saying why');
	$h->query_safe('COMMIT');
	$h->quit;
	my $again = run_script('o7b_again', [ again => w('o7b', 'again', 'b', 'v', 'K7b') ]);
	is(what($again->{again}), 'time', '(7b) a last retry returns a time');
	is(present('o7b', 'b'), "3 3 1 $again->{again}{time}", '(7b) ... and the write is there once, at that time');
}

is( $q->(q{SELECT string_agg(s.name || ': ' || v.problem, E'\n')
		   FROM persist_sink.shards s, LATERAL persist_sink.verify(s.name) v}),
	'', 'verify() is clean on every shard');

$node->stop;

#
# (1c) The retry from a new connection, once the first one has closed: the
# new backend may take the closed one's PGPROC.  To make sure it does, a
# node with room for three client connections: one holds the lock on the
# table of state diffs and runs every query of the case, one is idle, and the
# third is the writer; once it has exited, the retry's connection can only
# take its PGPROC.
#
{
	my $small = sink_node('one_outcome_c', "max_connections = 3\nsuperuser_reserved_connections = 0\n");
	$small->safe_psql('postgres', "SELECT persist_sink.create_shard('o1c')");
	my $h = $small->background_psql('postgres');
	my $idle = $small->background_psql('postgres');
	# Polls through $h, which holds the lock (the statistics snapshot is
	# cleared first: $h is inside a transaction)
	my $poll = sub {
		my ($sql, $what) = @_;
		for (1 .. 100 * $PostgreSQL::Test::Utils::timeout_default)
		{
			$h->query_safe('SELECT pg_stat_clear_snapshot()');
			return if $h->query_safe($sql) eq 't';
			usleep(10_000);
		}
		die "timed out waiting for $what";
	};
	$h->query_safe('BEGIN');
	$h->query_safe('LOCK TABLE persist_sink.consensus_diff IN ACCESS EXCLUSIVE MODE');
	my $sql = "SELECT 'ack %s ' || persist_sink.append('o1c', ARRAY['c-1', 'c-2', 'c-3'], ARRAY['v', 'v', 'v'], ARRAY[1, 1, 1]::bigint[], 'K1c')";
	my $b = start_psql($small, $dir, 'o1c', "\\set VERBOSITY verbose\n" . sprintf($sql, 'orig') . ";\n",
		on_error_stop => 0);
	$poll->(q{SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.backend_type = 'persist_sink worker' AND NOT l.granted
		  AND l.relation = 'persist_sink.consensus_diff'::regclass}, 'the worker to wait for the table of state diffs');
	$poll->(q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'o1c'
		AND state = 'active' AND wait_event_type = 'Extension'}, 'the append to wait');
	my $pid = $h->query_safe("SELECT pid FROM pg_stat_activity WHERE application_name = 'o1c'");
	is($h->query_safe("SELECT pg_cancel_backend($pid)"), 't', '(1c) cancelled the append');
	my $rb = finish_psql($b);
	like($rb->{err}, qr/ERROR:  40003:/, '(1c) the append cancelled after its interval was sealed gets 40003');
	# the first backend has exited (reaped: its PGPROC is free)
	my $waited = 0;
	usleep(10_000) while kill(0, $pid) && $waited++ < 100 * $PostgreSQL::Test::Utils::timeout_default;
	ok(!kill(0, $pid), '(1c) the first connection has closed');
	my $c = start_psql($small, $dir, 'o1c_retry', sprintf($sql, 'retry') . ";\n");
	$poll->(q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'o1c_retry'
		AND state = 'active' AND wait_event_type = 'Extension'}, 'the retry to wait');
	$h->query_safe('COMMIT');
	$h->quit;
	$idle->quit;
	my $rc = finish_psql($c);
	my ($t) = $rc->{out} =~ /^ack retry (\d+)$/m;
	ok(defined $t, '(1c) its retry from a new connection returns a time') or diag($rc->{err});
	is( $small->safe_psql('postgres', q{
SELECT count(*) || ' ' || sum(diff) || ' ' || (SELECT count(DISTINCT "time") || ' ' || min("time")
	FROM persist_sink.listen('o1c', 0)) FROM persist_sink.snapshot('o1c')}),
		'3 3 1 ' . ($t // '?'),
		'(1c) the write is in the shard exactly once, at one time, the time the retry returned');
	$small->stop;
}

done_testing();
