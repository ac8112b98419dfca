
# Copyright (c) persist_sink contributors

# A merge hands on whole the blocks of a part that sort wholly before every
# other part's next update (and after the run being summed), when they are
# of 16 kB of raw columns or more: their compressed bytes go into the new
# part as they are, a one-time block (all its updates at one time, which
# follows its header) moved to its time in the merge.  A bounded block
# (a one-time block of 16 kB of columns or more, whose first and last key
# and val follow its time) is handed on without being decompressed.
# compact() rewrites every batch; it logs at DEBUG1 how many updates it
# wrote, how many of them in blocks handed on whole, and how many of those
# blocks were never decompressed.  Background compaction is off, so that
# compact() does every merge.  Writes through the sink (append) make
# batches of one time each; their blobs are saved before a merge, so that
# each write's compressed frame can be looked for in the merged part, with
# the time before it.
#  (a) Three writes of 400 updates under keys of their own (a block of
#      more than 16 kB of columns each): compact() hands on the three blocks, all
#      1200 updates; each write's frame is in the merged part at its
#      batch's time; the snapshots as of each time and the listens from
#      each time are unchanged; one batch; verify() is clean.
#  (b) Four such writes, since moved to the second one's time: the blocks
#      are handed on, the first two at since, the others at their own
#      times; reads below since are refused (PS003); listen from since
#      reports the last two writes at their times.  Since moved to
#      upper - 1 and compacted again: the four blocks of the merged part
#      are handed on again, all at since, the frames still the sink's.
#  (c) Writes whose keys interleave (even and odd numbers under one
#      prefix), the even ones written twice: nothing is handed on, the
#      content is the sum (diff 2 for the even keys).  Since moved to
#      upper - 1 and compacted again: the equal writes are summed into 800
#      updates, none handed on.
#  (d) Two writes under keys of their own and two that interleave: the
#      first two are handed on, the others merged (800 of 1600 updates).
#  (e) A compare_and_append of 440 updates at ten times (a block of
#      several times; 40 keys retracted at a later time), among sink
#      writes under keys of their own: every block is handed on.  Since
#      moved past some of its times: that block is merged, its times below
#      since raised to since (the retracted keys cancel out), the others
#      handed on.
#  (f) Four writes of 10 updates (blocks below 16 kB of columns) around
#      one of 400, all under keys of their own: only the large one is
#      handed on.
#  (g) Two writes of 400 updates whose vals are all the same (blocks of
#      more than 16 kB of columns that encode in fewer than 4096 bytes):
#      both are handed on, as blocks that compress less would be.
#  (h) Two writes that share one (key, val) at two times, the last key of
#      the first and the first of the second: the first merge hands on the
#      second write whole after the merged first.  Since moved past both
#      and compacted again, the two blocks of the merged part both move to
#      since, where that (key, val) meets itself: both are handed on, in
#      two parts (a part holds a (key, val, time) once), and every read
#      sums it to 2.
# Then the server restarts and every shard reads the same.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

my $node = sink_node('whole_blocks', "log_min_messages = debug1\npersist_sink.compaction = off\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Helpers, in the postgres database:
#  val            the val of key k: 40 hex digits, which compress little
#  wr             a sink write of n updates (keys prefix and a 6-digit
#                 number, from first by step, diff 1); returns its time
#  read_digest    md5 and count of a read (snapshot or listen) of s as
#                 of t
#  record_reads   records both digests as of since and as of every time
#                 listen(s, since) reports; returns how many
#  changed        "<digests compared> <digests changed>", of those recorded
#                 as of since or later
#  save_blobs     saves the bytes of a shard's parts (their blob rows
#                 joined); returns how many parts
#  frames         per saved blob (one block each): its version, and where
#                 its compressed frame (a bounded block's: its bounds and
#                 frame) is found in the shard's blobs now, the time
#                 before it (versions 2 and 3) or 0 (version 1, found
#                 whole), as "version:time", ordered by time
query(q{
CREATE TABLE digests (shard text, kind text, as_of bigint, md5 text);
CREATE TABLE saved (shard text, key text, data bytea);
CREATE FUNCTION val(k text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT md5(k) || left(md5(k || '.'), 8)
$$;
CREATE FUNCTION wr(s text, prefix text, n int, step int DEFAULT 1, first int DEFAULT 1)
RETURNS bigint LANGUAGE sql AS $$
	SELECT persist_sink.append(s, array_agg(k ORDER BY k), array_agg(val(k) ORDER BY k),
							   array_fill(1::bigint, ARRAY[n]))
	FROM (SELECT prefix || lpad((first + step * (i - 1))::text, 6, '0') AS k
		  FROM generate_series(1, n) i) w
$$;
CREATE FUNCTION read_digest(kind text, s text, t bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	digest text;
BEGIN
	EXECUTE format('SELECT md5(coalesce(string_agg(format(''%%s|%%s|%%s|%%s'', encode(key, ''hex''),
						encode(val, ''hex''), "time", diff), '','' ORDER BY key, val, "time"), ''''))
						|| '' '' || count(*) FROM persist_sink.%I($1, $2)', kind)
		INTO digest USING s, t;
	RETURN digest;
END
$$;
CREATE FUNCTION record_reads(s text) RETURNS bigint LANGUAGE sql AS $$
	DELETE FROM digests WHERE shard = s;
	INSERT INTO digests
	SELECT s, k, t, read_digest(k, s, t)
	FROM (SELECT persist_sink.shard_since(s)
		  UNION
		  SELECT "time" FROM persist_sink.listen(s, persist_sink.shard_since(s))) ts(t),
		 (VALUES ('listen'), ('snapshot')) kinds(k);
	SELECT count(*) FROM digests WHERE shard = s;
$$;
CREATE FUNCTION changed(s text) RETURNS text LANGUAGE sql AS $$
	SELECT count(*) || ' ' || count(*) FILTER (
		WHERE md5 IS DISTINCT FROM read_digest(kind, s, as_of))
	FROM digests WHERE shard = s AND as_of >= persist_sink.shard_since(s)
$$;
CREATE FUNCTION save_blobs(s text) RETURNS bigint LANGUAGE sql AS $$
	DELETE FROM saved WHERE shard = s;
	INSERT INTO saved SELECT s, key, string_agg(data, '\x'::bytea ORDER BY chunk)
	FROM persist_sink.blob WHERE starts_with(key, s || '/') GROUP BY key;
	SELECT count(*) FROM saved WHERE shard = s;
$$;
CREATE FUNCTION frames(s text) RETURNS text LANGUAGE sql AS $$
	SELECT string_agg(v || ':' || coalesce(t::text, 'missing'), ' ' ORDER BY t, v)
	FROM (SELECT get_byte(o.data, 4) AS v,
				 (SELECT CASE WHEN get_byte(o.data, 4) IN (2, 3) THEN
							 (SELECT sum(get_byte(b.data, f.at - 9 + i)::bigint << (8 * i))
							  FROM generate_series(0, 7) i)::bigint
						 ELSE 0 END
				  FROM (SELECT key, string_agg(data, '\x'::bytea ORDER BY chunk) AS data
						FROM persist_sink.blob GROUP BY key) b,
					   LATERAL (SELECT position(substr(o.data, CASE WHEN get_byte(o.data, 4) IN (2, 3)
																	THEN 41 ELSE 1 END) IN b.data) AS at) f
				  WHERE starts_with(b.key, s || '/') AND f.at > 0
				  LIMIT 1) AS t
		  FROM saved o WHERE o.shard = s) x
$$;
});

# compact() of shard $s; what its merge logged: "<updates written>
# <updates handed on whole> <blocks handed on whole> <of those, blocks
# never decompressed>", one line per merge.
sub compact_logged
{
	my ($s) = @_;
	my $offset = -s $node->logfile;
	query("SELECT persist_sink.compact('$s')");
	my @lines = (slurp_file($node->logfile, $offset) =~
		  /merge of shard "\Q$s\E" wrote (\d+) updates, (\d+) of them in (\d+) blocks handed on whole, (\d+) of those never decompressed$/mg);
	my @merges;
	push @merges, join(' ', splice(@lines, 0, 4)) while @lines;
	return @merges ? join("\n", @merges) : 'no merge logged';
}

# verify()'s problem count and the batch count of shard $s.
sub health
{
	my ($s) = @_;
	return query("SELECT (SELECT count(*) FROM persist_sink.verify('$s')) || ' '
		|| (SELECT count(*) FROM persist_sink.batches('$s'))");
}

# How many of shard $s's batches hold more than 16 kB of columns (keys,
# vals and about 3 bytes of lengths and diff per update), and how many
# fewer; the shard's since must be 0.
sub batch_sizes
{
	my ($s) = @_;
	return query("SELECT count(*) FILTER (WHERE raw > 16384) || ' '
		|| count(*) FILTER (WHERE raw < 16384)
		FROM (SELECT b.lower, sum(octet_length(l.key) + octet_length(l.val) + 3) AS raw
			  FROM persist_sink.batches('$s') b
			  JOIN persist_sink.listen('$s', 0) l ON l.\"time\" >= b.lower AND l.\"time\" < b.upper
			  GROUP BY b.lower) r");
}

# Writes through the sink: [$prefix, $n, $step, $first] each, in order, to
# shard $s; returns their times.
sub sink_writes
{
	my ($s, @writes) = @_;
	my @times;
	for my $w (@writes)
	{
		my ($prefix, $n, $step, $first) = @$w;
		$step //= 1;
		$first //= 1;
		push @times, query("SELECT wr('$s', '$prefix', $n, $step, $first)");
	}
	return @times;
}

# Reading shard $s below since ($sql) fails with PS003.
sub refused_below_since
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $ret != 0 && $err =~ /PS003/;
}

my %compared;

# (a) disjoint writes
query("SELECT persist_sink.create_shard('disjoint')");
my @t = sink_writes('disjoint', ['a.', 400], ['b.', 400], ['c.', 400]);
is(batch_sizes('disjoint'), '3 0', 'disjoint: three batches of more than 16 kB of columns');
is(query("SELECT record_reads('disjoint') || ' ' || save_blobs('disjoint')"), '8 3',
	'disjoint: 8 digests recorded, 3 blobs saved');
is(compact_logged('disjoint'), '1200 1200 3 3',
	'disjoint: the merge handed on the three blocks whole, never decompressed (their bounds say where they sit)');
is(query("SELECT frames('disjoint')"), join(' ', map { "3:$_" } @t),
	"disjoint: each write's frame is in the merged part, at its batch's time");
is(query("SELECT changed('disjoint')"), '8 0',
	'disjoint: the snapshots as of each time and the listens from each are unchanged');
is(query("SELECT count(*) || ' ' || sum(diff) || ' ' || bool_and(convert_from(val, 'UTF8') = val(convert_from(key, 'UTF8')))
		  FROM persist_sink.snapshot('disjoint')"),
	'1200 1200 true', 'disjoint: every update reads back');
is(health('disjoint'), '0 1', 'disjoint: verify is clean, one batch');
$compared{disjoint} = '8 0';

# (b) since: the blocks are handed on at since, or at their own times above it
query("SELECT persist_sink.create_shard('since')");
@t = sink_writes('since', ['a.', 400], ['b.', 400], ['c.', 400], ['d.', 400]);
is(query("SELECT record_reads('since') || ' ' || save_blobs('since')"), '10 4',
	'since: 10 digests recorded, 4 blobs saved');
query("SELECT persist_sink.downgrade_since('since', $t[1])");
is(compact_logged('since'), '1600 1600 4 4', 'since: the merge handed on the four blocks whole');
is(query("SELECT frames('since')"), "3:$t[1] 3:$t[1] 3:$t[2] 3:$t[3]",
	'since: the first two frames at since, the others at their own times');
is(query("SELECT changed('since')"), '6 0', 'since: the reads as of since and later are unchanged');
is(query("SELECT string_agg(t || ':' || n, ' ' ORDER BY t)
		  FROM (SELECT \"time\" AS t, count(*) AS n FROM persist_sink.listen('since', $t[1]) GROUP BY 1) l"),
	"$t[2]:400 $t[3]:400", 'since: listen from since reports the last two writes at their times');
is(query("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('since', $t[1])"),
	'800 800', 'since: the snapshot as of since holds the first two writes');
ok(refused_below_since("SELECT count(*) FROM persist_sink.listen('since', $t[1] - 2)"),
	'since: listen below since - 1 is refused (PS003)');
is(query("SELECT string_agg(t || ':' || n, ' ' ORDER BY t)
		  FROM (SELECT \"time\" AS t, count(*) AS n FROM persist_sink.listen('since', $t[1] - 1) GROUP BY 1) l"),
	"$t[1]:800 $t[2]:400 $t[3]:400", 'since: listen from since - 1 reports everything, the first two writes at since');
ok(refused_below_since("SELECT count(*) FROM persist_sink.snapshot('since', $t[0])"),
	'since: a snapshot below since is refused (PS003)');
is(health('since'), '0 1', 'since: verify is clean, one batch');
query("SELECT persist_sink.downgrade_since('since', persist_sink.shard_upper('since') - 1)");
is(query("SELECT persist_sink.shard_since('since')"), $t[3], 'since: since moved to upper - 1');
is(compact_logged('since'), '1600 1600 4 4',
	'since: compacted again, the four blocks of the merged part are handed on again');
is(query("SELECT frames('since')"), join(' ', map { "3:$t[3]" } 1 .. 4),
	"since: the sink's four frames, all at since now");
is(query("SELECT changed('since')"), '2 0', 'since: the reads as of since are unchanged');
is(health('since'), '0 1', 'since: verify is clean after the second merge');
$compared{since} = '2 0';

# (c) overlapping writes: merged
query("SELECT persist_sink.create_shard('overlap')");
@t = sink_writes('overlap', ['k.', 400, 2, 2], ['k.', 400, 2, 1], ['k.', 400, 2, 2]);
is(batch_sizes('overlap'), '3 0', 'overlap: three batches of more than 16 kB of columns');
is(query("SELECT record_reads('overlap')"), '8', 'overlap: 8 digests recorded');
is(compact_logged('overlap'), '1200 0 0 0', 'overlap: the merge handed on no block');
is(query("SELECT changed('overlap')"), '8 0', 'overlap: every read is unchanged');
my $sum_sql = q{
SELECT count(*) || ' ' || count(*) FILTER (WHERE v = val(k) AND diff = 2 - substr(k, 3)::int % 2)
FROM (SELECT convert_from(key, 'UTF8') AS k, convert_from(val, 'UTF8') AS v, diff
	  FROM persist_sink.snapshot('overlap')) s};
is(query($sum_sql), '800 800', 'overlap: the content is the sum, diff 2 for the keys written twice');
is(health('overlap'), '0 1', 'overlap: verify is clean, one batch');
query("SELECT persist_sink.downgrade_since('overlap', persist_sink.shard_upper('overlap') - 1)");
is(compact_logged('overlap'), '800 0 0 0', 'overlap: since at upper - 1, the equal writes are summed');
is(query($sum_sql), '800 800', 'overlap: the same content');
is(query("SELECT changed('overlap')"), '2 0', 'overlap: the reads as of since are unchanged');
is(health('overlap'), '0 1', 'overlap: verify is clean after the second merge');
$compared{overlap} = '2 0';

# (d) mixed: two writes handed on, two merged
query("SELECT persist_sink.create_shard('mixed')");
sink_writes('mixed', ['d1.', 400], ['d2.', 400, 2, 2], ['d2.', 400, 2, 1], ['d4.', 400]);
is(batch_sizes('mixed'), '4 0', 'mixed: four batches of more than 16 kB of columns');
is(query("SELECT record_reads('mixed')"), '10', 'mixed: 10 digests recorded');
my $mixed = compact_logged('mixed');
is($mixed, '1600 800 2 2', 'mixed: the blocks of the two disjoint writes handed on, the others merged');
my ($n, $m) = split / /, $mixed;
ok(defined $m && $m > 0 && $m < $n, 'mixed: some but not all updates handed on');
is(query("SELECT changed('mixed')"), '10 0', 'mixed: every read is unchanged');
is(query("SELECT count(*) || ' ' || sum(diff) || ' ' || bool_and(convert_from(val, 'UTF8') = val(convert_from(key, 'UTF8')))
		  FROM persist_sink.snapshot('mixed')"),
	'1600 1600 true', 'mixed: every update reads back');
is(health('mixed'), '0 1', 'mixed: verify is clean, one batch');
$compared{mixed} = '10 0';

# (e) a block of several times
query("SELECT persist_sink.create_shard('times')");
my @te = sink_writes('times', ['e1.', 400], ['e2.', 400]);
my $u = query("SELECT persist_sink.shard_upper('times')");
query(qq{
SELECT persist_sink.compare_and_append('times', array_agg(k ORDER BY k, t), array_agg(val(k) ORDER BY k, t),
									   array_agg(t ORDER BY k, t), array_agg(d ORDER BY k, t), $u, $u + 10)
FROM (SELECT 'e3.' || lpad(i::text, 6, '0') AS k, $u + i % 10 AS t, 1::bigint AS d
	  FROM generate_series(1, 400) i
	  UNION ALL
	  SELECT 'e3.' || lpad(i::text, 6, '0'), $u + 4, -1
	  FROM generate_series(10, 400, 10) i) w});
push @te, sink_writes('times', ['e4.', 400]);
is(batch_sizes('times'), '4 0', 'times: four batches of more than 16 kB of columns');
is(query("SELECT record_reads('times') || ' ' || save_blobs('times')"), '28 4',
	'times: 28 digests recorded (14 times), 4 blobs saved');
is(compact_logged('times'), '1640 1640 4 3', 'times: since below every time, the four blocks handed on');
is(query("SELECT frames('times')"), "1:0 3:$te[0] 3:$te[1] 3:$te[2]",
	"times: the block of several times is in the merged part as it was, the others at their batches' times");
is(query("SELECT changed('times')"), '28 0', 'times: every read is unchanged');
is(health('times'), '0 1', 'times: verify is clean, one batch');
my $since = $u + 5;
query("SELECT persist_sink.downgrade_since('times', $since)");
is(compact_logged('times'), '1560 1200 3 3',
	'times: since past some times of the block of several times: it is merged, the 40 retracted keys cancel out');
is(query("SELECT changed('times')"), '12 0', 'times: the reads as of since and later are unchanged');
is(query("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('times', $since)
		  WHERE starts_with(convert_from(key, 'UTF8'), 'e3.')"),
	'200 200', 'times: as of since, the 200 keys written at since or before, but the 40 retracted');
is(query("SELECT count(*) || ' ' || sum(diff) FROM persist_sink.snapshot('times', $u + 9)
		  WHERE starts_with(convert_from(key, 'UTF8'), 'e3.')"),
	'360 360', 'times: as of its last time, the 360 keys not retracted');
is(query("SELECT string_agg(t || ':' || n, ' ' ORDER BY t)
		  FROM (SELECT \"time\" - $u AS t, count(*) AS n FROM persist_sink.listen('times', $since)
				WHERE starts_with(convert_from(key, 'UTF8'), 'e3.') GROUP BY 1) l"),
	'6:40 7:40 8:40 9:40', 'times: the updates after since keep their times');
is(health('times'), '0 1', 'times: verify is clean after the second merge');
$compared{times} = '12 0';

# (f) small writes are merged
query("SELECT persist_sink.create_shard('small')");
sink_writes('small', ['a.', 10], ['b.', 10], ['m.', 400], ['x.', 10], ['y.', 10]);
is(batch_sizes('small'), '1 4', 'small: one batch of more than 16 kB of columns, four of fewer');
is(query("SELECT record_reads('small')"), '12', 'small: 12 digests recorded');
is(compact_logged('small'), '440 400 1 1', 'small: only the large block is handed on');
is(query("SELECT changed('small')"), '12 0', 'small: every read is unchanged');
is(health('small'), '0 1', 'small: verify is clean, one batch');
$compared{small} = '12 0';

# (g) blocks that compress well are handed on too
query("CREATE FUNCTION wr_same(s text, prefix text) RETURNS bigint LANGUAGE sql AS \$\$
	SELECT persist_sink.append(s, array_agg(k ORDER BY k), array_fill(repeat('v', 40), ARRAY[400]),
							   array_fill(1::bigint, ARRAY[400]))
	FROM (SELECT prefix || lpad(i::text, 6, '0') AS k FROM generate_series(1, 400) i) w
\$\$");
query("SELECT persist_sink.create_shard('same')");
query("SELECT wr_same('same', 'p.'), wr_same('same', 'q.')");
is(batch_sizes('same'), '2 0', 'same: two batches of more than 16 kB of columns');
is(query("SELECT count(*) FILTER (WHERE encoded_bytes < 4096) FROM persist_sink.batches('same')"), '2',
	'same: both encode in fewer than 4096 bytes');
is(query("SELECT record_reads('same')"), '6', 'same: 6 digests recorded');
is(compact_logged('same'), '800 800 2 2', 'same: both blocks are handed on whole');
is(query("SELECT changed('same')"), '6 0', 'same: every read is unchanged');
is(health('same'), '0 1', 'same: verify is clean, one batch');
$compared{same} = '6 0';

# (h) one (key, val) at the boundary of two blocks of one part, both moved to since
query("SELECT persist_sink.create_shard('boundary')");
sink_writes('boundary', ['b.', 400], ['b.', 400, 1, 400]);
is(compact_logged('boundary'), '800 400 1 1',
	'boundary: the second write, which starts where the first ends, is handed on whole');
query("SELECT persist_sink.downgrade_since('boundary', persist_sink.shard_upper('boundary') - 1)");
is(query("SELECT record_reads('boundary')"), '2', 'boundary: 2 digests recorded');
is(compact_logged('boundary'), '800 800 2 2', 'boundary: both blocks are handed on, moved to since');
is(query("SELECT parts FROM persist_sink.batches('boundary')"), '2',
	'boundary: in two parts, each holding the shared (key, val, time) once');
is(query("SELECT count(*) || ' ' || sum(diff) || ' ' || max(diff) FROM persist_sink.snapshot('boundary')"),
	'799 800 2', 'boundary: the shared (key, val) reads once, summed to 2');
is(query("SELECT changed('boundary')"), '2 0', 'boundary: every read is unchanged');
is(health('boundary'), '0 1', 'boundary: verify is clean, one batch');
$compared{boundary} = '2 0';

# after a restart
$node->restart;
for my $s (sort keys %compared)
{
	is(query("SELECT changed('$s')"), $compared{$s}, "$s: every read is the same after a restart");
	is(health($s), '0 1', "$s: verify is clean after a restart");
}

$node->stop;
done_testing();
