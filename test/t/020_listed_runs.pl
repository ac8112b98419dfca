
# Copyright (c) persist_sink contributors

# A background merge of large batches lists them as sorted runs of the
# merged batch (their parts and blob rows kept) instead of rewriting them;
# compact() and a merge of more runs than it lists rewrite.
#  (a) With compaction off, a shard gets 8 batches of 50,000 updates, each
#      of one size tier and large enough to be listed (512 kB to 4 MB
#      encoded), each retracting 100 updates of the one before (so reads
#      must sum across runs).  Compaction is turned on: one merge leaves one
#      batch whose parts are the 8 batches' parts, in the same blob rows;
#      the shards view counts 8 runs; the stats count one compaction and
#      no update read; snapshots as of
#      since, halfway and upper - 1 and listen from since read what they
#      read before; verify() is clean; the merge is logged at DEBUG1.
#  (b) After a restart the shard reads the same.
#  (c) compact() rewrites the batch into one run: new blob rows, every
#      update read, the same content.
#  (d) 9 batches of 10,000 updates (64 kB to 512 kB each, under 4 MB in
#      all) are more runs than a merge lists: the merge lists the 7 largest
#      and rewrites the 2 smallest into a run of their own, so the merged
#      batch holds 8 runs, as many as a merge above can list.  9 batches of
#      50,000 updates (4 MB or more in all) are listed, all 9: a merged
#      batch of 4 MB or more may hold 64 runs.
#  (e) 8 batches of 10,000 updates with a small one between the first two:
#      the merge lists the 7 largest and rewrites the smallest of the 8 and
#      the small one into a run of their own (8 runs).
#  (f) Under 4 MB in all, a batch of 8 runs (from a merge as in (a) of
#      batches of 10,000 updates) and 7 single-run batches
#      that hold more bytes than it, merged together (slowdown_batches = 8
#      makes the compactor take the 8 batches however their tiers lie): the
#      batch of 8 runs does not fit beside a rewritten run, the 7 do and
#      hold most of the bytes, so the merge lists the 7 and rewrites the
#      batch of 8 runs into one (8 runs).  With slowdown_batches = 8 again,
#      a batch of 8 runs and 7 smaller single-run ones: the 7 that fit hold
#      fewer bytes than the batch left out, so all 8 are rewritten into one
#      run.
#  (g) 8 appends through the sink make 8 single-time batches (one interval
#      each, of 64 kB to 512 kB encoded), each retracting 100 updates of the
#      one before.  One merge lists them all: one batch of their parts, in
#      the same blob rows, 8 runs, no update read; each part keeps its
#      interval's time, so snapshots as of every append's time, listen and
#      verify() read what they read before, also after a restart; compact()
#      then rewrites them into one run of the same content.
#  (h) 8 inline batches of 64 kB or more (inline_max_bytes = 1MB) are
#      rewritten into one run, not listed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

# Parts of at most 64kB of raw columns: every batch below is several parts,
# so that a batch's runs, which the state tells apart by the parts' lower
# bounds, are counted exactly however its keys fall.
my $node = sink_node('listed',
	"persist_sink.compaction = off\nlog_min_messages = debug1\n"
	  . "persist_sink.blob_target_size = '64kB'\n");

# Runs SQL in the postgres database; returns its output.
sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# put(shard, b, n): batch b (times [b, b + 1)) of n updates (md5 keys,
# diff 1), retracting the first 100 keys of batch b - 1.
query(q{
CREATE FUNCTION put(s text, b int, n int) RETURNS void LANGUAGE sql AS $$
	SELECT persist_sink.compare_and_append(s,
		ARRAY(SELECT md5(b || '/' || i) FROM generate_series(1, n) i)
		  || ARRAY(SELECT md5((b - 1) || '/' || i) FROM generate_series(1, 100) i WHERE b > 0),
		array_fill(''::text, ARRAY[n + CASE WHEN b > 0 THEN 100 ELSE 0 END]),
		array_fill(b::bigint, ARRAY[n + CASE WHEN b > 0 THEN 100 ELSE 0 END]),
		array_fill(1::bigint, ARRAY[n]) || array_fill(-1::bigint, ARRAY[CASE WHEN b > 0 THEN 100 ELSE 0 END]),
		b, b + 1)
$$;
CREATE FUNCTION blob_keys(s text) RETURNS text LANGUAGE sql AS $$
	SELECT count(DISTINCT key) || ' ' || md5(coalesce(string_agg(DISTINCT key, ',' ORDER BY key), ''))
	FROM persist_sink.blob WHERE starts_with(key, s || '/')
$$;
CREATE FUNCTION layout(s text) RETURNS text LANGUAGE sql AS $$
	SELECT count(*) || ': ' || string_agg(parts || '/' || encoded_bytes, ' ' ORDER BY lower)
	FROM persist_sink.batches(s)
$$;
});

# Sets persist_sink.compaction and waits until the server has reloaded.
sub set_compaction
{
	my ($on) = @_;
	query("ALTER SYSTEM SET persist_sink.compaction = $on");
	query('SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', 'SHOW persist_sink.compaction', $on)
	  or die "timed out waiting for compaction = $on";
}

# Everything a shard reads as (shard_contents without the layout).
sub reads_of
{
	my ($shard) = @_;
	my $c = shard_contents($node);
	return join("\n", map { "$_: $c->{$_}" }
		  grep { /^\Q$shard\E (snapshot|listen|verify|upper|since)/ } sort keys %$c);
}

# Waits until shard holds n batches and no merge runs.
sub wait_batches
{
	my ($shard, $n) = @_;
	return $node->poll_query_until('postgres', qq{
SELECT count(*) = $n AND NOT EXISTS (SELECT FROM persist_sink.compaction_progress)
FROM persist_sink.batches('$shard')}, 't');
}

# Checks that shard ends as one batch of `runs` runs once no merge runs.
sub one_batch_of
{
	my ($shard, $runs, $what) = @_;
	ok(wait_batches($shard, 1), "$what: one merge leaves one batch")
	  or diag(query("SELECT layout('$shard')"));
	is(query("SELECT runs FROM persist_sink.shards WHERE name = '$shard'"), $runs,
		"$what: a batch of $runs runs");
}

# (a) 8 large batches, listed by one merge
query("SELECT persist_sink.create_shard('l')");
query("SELECT put('l', b, 50000) FROM generate_series(0, 7) b");
is(query(q{
SELECT count(*) || ' ' || bool_and(encoded_bytes BETWEEN 512 * 1024 AND 4 * 1024 * 1024 - 1)
FROM persist_sink.batches('l')}),
	'8 true', '8 batches, each of the tier from 512 kB to 4 MB')
  or diag(query("SELECT layout('l')"));
my $parts = query("SELECT sum(parts) FROM persist_sink.batches('l')");
my $blobs = query("SELECT blob_keys('l')");
my $reads = reads_of('l');
like($reads, qr/l verify: 0/, 'verify() is clean before');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
ok(wait_batches('l', 1), 'one merge leaves one batch') or diag(query("SELECT layout('l')"));
is(query("SELECT parts FROM persist_sink.batches('l')"), $parts,
	'its parts are the 8 batches\' parts');
is(query("SELECT blob_keys('l')"), $blobs, 'in the same blob rows');
is(query("SELECT runs FROM persist_sink.shards WHERE name = 'l'"), '8', 'as 8 runs');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'l'"),
	'1 0', 'one compaction, which read no update');
is(reads_of('l'), $reads, 'every read gives what it gave before');
ok($node->log_contains(
		qr/persist_sink: merged batches 0 to 7 of 8 of shard "l": listed runs 8, rewritten batches 0, updates 0, bytes 0$/m),
	'the merge is logged at DEBUG1');

# (b) the same after a restart
$node->restart;
is(reads_of('l'), $reads, 'and after a restart');
is(query("SELECT blob_keys('l')"), $blobs, 'the blob rows are still the listed ones');

# (c) compact() rewrites the listed runs into one
query('SELECT persist_sink.stats_reset()');
query("SELECT persist_sink.compact('l')");
is(query("SELECT batches || ' ' || runs FROM persist_sink.shards WHERE name = 'l'"), '1 1',
	'compact(): one batch of one run');
isnt(query("SELECT blob_keys('l')"), $blobs, 'compact() wrote new blob rows');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'l'"),
	'1 ' . (8 * 50000 + 7 * 100), 'compact() read every update');
is(reads_of('l'), $reads, 'the content is unchanged');

# (d) 9 batches under 4 MB in all: more runs than a merge lists, so it
# lists the 7 largest and rewrites the 2 smallest into one run
set_compaction('off');
query("SELECT persist_sink.create_shard('r')");
query("SELECT put('r', b, 10000) FROM generate_series(0, 8) b");
is(query(q{
SELECT bool_and(encoded_bytes >= 64 * 1024) AND sum(encoded_bytes) < 4 * 1024 * 1024
FROM persist_sink.batches('r')}),
	't', '9 batches that may be listed, under 4 MB in all')
  or diag(query("SELECT layout('r')"));
query("CREATE TABLE r_blobs AS SELECT DISTINCT key FROM persist_sink.blob WHERE starts_with(key, 'r/')");
$parts = query("SELECT sum(parts) FROM persist_sink.batches('r')");
my $smallest = query(q{
SELECT sum(updates) || ' ' || sum(parts) FROM (
	SELECT updates, parts FROM persist_sink.batches('r') ORDER BY encoded_bytes, lower LIMIT 2) s});
my ($small_updates, $small_parts) = split / /, $smallest;
$reads = reads_of('r');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('r', 8, '9 batches (the 7 listed and one rewritten run)');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'r'"),
	"1 $small_updates", 'the merge read only the 2 smallest batches');
ok($node->log_contains(
		qr/merged batches 0 to 8 of 9 of shard "r": listed runs 7, rewritten batches 2, updates $small_updates,/),
	'and is logged so');
is(query(q{
SELECT (SELECT count(*) FROM r_blobs r WHERE EXISTS (SELECT FROM persist_sink.blob b WHERE b.key = r.key))
       || ' ' || (SELECT count(*) FROM r_blobs)}),
	($parts - $small_parts) . " $parts",
	'the 7 largest batches\' blob rows are kept, the 2 smallest ones\' deleted');
is(reads_of('r'), $reads, 'the content is unchanged');

# ... and 9 batches of 4 MB or more in all: listed, all 9
set_compaction('off');
query("SELECT persist_sink.create_shard('w')");
query("SELECT put('w', b, 50000) FROM generate_series(0, 8) b");
is(query("SELECT sum(encoded_bytes) >= 4 * 1024 * 1024 FROM persist_sink.batches('w')"),
	't', '9 batches of 4 MB or more in all');
$parts = query("SELECT sum(parts) FROM persist_sink.batches('w')");
$blobs = query("SELECT blob_keys('w')");
$reads = reads_of('w');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('w', 9, '9 batches of 4 MB or more (all listed)');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'w'"),
	'1 0', 'the merge read no update');
is(query("SELECT parts FROM persist_sink.batches('w')") . ' ' . query("SELECT blob_keys('w')"),
	"$parts $blobs", 'the merged batch holds the 9 batches\' parts, in the same blob rows');
is(reads_of('w'), $reads, 'the content is unchanged');

# (e) a small batch between large ones: the 7 largest are listed, the small
# one and the smallest large one rewritten into one run
set_compaction('off');
query("SELECT persist_sink.create_shard('m')");
query(q{
SELECT put('m', 0, 10000);
SELECT put('m', 1, 10);
SELECT put('m', b, 10000) FROM generate_series(2, 8) b;
});
query("CREATE TABLE m_blobs AS SELECT DISTINCT key FROM persist_sink.blob WHERE starts_with(key, 'm/')");
my $rewritten = query(q{
SELECT sum(updates) || ' ' || coalesce(sum(parts) FILTER (WHERE NOT inline), 0) FROM (
	SELECT updates, parts, inline FROM persist_sink.batches('m') ORDER BY encoded_bytes, lower LIMIT 2) s});
my ($m_updates, $m_parts) = split / /, $rewritten;
$reads = reads_of('m');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('m', 8, 'a small batch among 8 (the 7 listed and one rewritten run)');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'm'"),
	"1 $m_updates", 'the merge read only the small batch and the smallest large one');
is($m_updates, 10000 + 110, 'which are the first large batch and the small one');
is(query(q{
SELECT (SELECT count(*) FROM m_blobs m WHERE EXISTS (SELECT FROM persist_sink.blob b WHERE b.key = m.key))
     = (SELECT count(*) FROM m_blobs) - }
		  . $m_parts),
	't', 'the 7 listed batches\' blob rows are kept, the 2 others\' deleted');
is(reads_of('m'), $reads, 'the content is unchanged');

# Makes shard one batch of 8 runs (8 batches of 10,000 updates listed by
# a merge), then 7 single-run batches of n updates after it, compaction off.
sub eight_runs_then_seven
{
	my ($shard, $n) = @_;
	set_compaction('off');
	query("SELECT persist_sink.create_shard('$shard')");
	query("SELECT put('$shard', b, 10000) FROM generate_series(0, 7) b");
	set_compaction('on');
	one_batch_of($shard, 8, "$shard: the first 8 batches");
	set_compaction('off');
	query("SELECT put('$shard', b, $n) FROM generate_series(8, 14) b");
}

# (f) a batch of 8 runs and 7 larger single-run batches: the 7 are listed
# and the batch of 8 runs rewritten; then a batch of 8 runs and 7 smaller
# ones: the 7 that fit hold fewer bytes than it, so all are rewritten
eight_runs_then_seven('f', 14000);
is(query(q{
SELECT (SELECT encoded_bytes FROM persist_sink.batches('f') ORDER BY lower LIMIT 1)
     < (SELECT sum(encoded_bytes) FROM persist_sink.batches('f') WHERE lower >= 8)
   AND (SELECT sum(encoded_bytes) FROM persist_sink.batches('f')) < 4 * 1024 * 1024}),
	't', 'the 7 new batches hold more bytes than the one of 8 runs, under 4 MB in all')
  or diag(query("SELECT layout('f')"));
$reads = reads_of('f');
my $eight_runs = query("SELECT updates FROM persist_sink.batches('f') ORDER BY lower LIMIT 1");
query("CREATE TABLE f_blobs AS SELECT DISTINCT key FROM persist_sink.blob WHERE starts_with(key, 'f/')");
my $new_parts = query("SELECT sum(parts) FROM persist_sink.batches('f') WHERE lower >= 8");
query('ALTER SYSTEM SET persist_sink.slowdown_batches = 8');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('f', 8, 'a batch of 8 runs and 7 larger ones (the 7 listed, one rewritten run)');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'f'"),
	"1 $eight_runs", 'the merge read only the batch of 8 runs');
is(query("SELECT count(*) FROM f_blobs f WHERE EXISTS (SELECT FROM persist_sink.blob b WHERE b.key = f.key)"),
	$new_parts,
	'the 7 listed batches\' blob rows are kept');
is(reads_of('f'), $reads, 'the content is unchanged');

query('ALTER SYSTEM RESET persist_sink.slowdown_batches');
eight_runs_then_seven('s', 4000);
is(query(q{
SELECT (SELECT encoded_bytes FROM persist_sink.batches('s') ORDER BY lower LIMIT 1)
     > (SELECT sum(encoded_bytes) FROM persist_sink.batches('s') WHERE lower >= 8)
   AND (SELECT bool_and(encoded_bytes >= 64 * 1024) FROM persist_sink.batches('s'))}),
	't', 'the 7 new batches may be listed and hold fewer bytes than the one of 8 runs');
$reads = reads_of('s');
$blobs = query("SELECT blob_keys('s')");
my $updates = query("SELECT sum(updates) FROM persist_sink.batches('s')");
query('ALTER SYSTEM SET persist_sink.slowdown_batches = 8');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('s', 1, 'a batch of 8 runs and 7 smaller ones');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 's'"),
	"1 $updates", 'the merge read every update');
isnt(query("SELECT blob_keys('s')"), $blobs, 'in new blob rows');
is(reads_of('s'), $reads, 'the content is unchanged');
query('ALTER SYSTEM RESET persist_sink.slowdown_batches');
query('SELECT pg_reload_conf()');

# (g) the sink's single-time batches are listed, each part at its time
set_compaction('off');
query("SELECT persist_sink.create_shard('i')");
my @times;
for my $b (0 .. 7)
{
	push @times, query(qq{
SELECT persist_sink.append('i',
	ARRAY(SELECT md5('i$b/' || n) FROM generate_series(1, 8000) n)
	  || ARRAY(SELECT md5('i' || ($b - 1) || '/' || n) FROM generate_series(1, 100) n WHERE $b > 0),
	array_fill('v'::text, ARRAY[8000 + CASE WHEN $b > 0 THEN 100 ELSE 0 END]),
	array_fill(1::bigint, ARRAY[8000]) || array_fill(-1::bigint, ARRAY[CASE WHEN $b > 0 THEN 100 ELSE 0 END]))});
}
is(query(q{
SELECT count(*) || ' ' || bool_and(encoded_bytes BETWEEN 64 * 1024 AND 512 * 1024 - 1)
FROM persist_sink.batches('i')}),
	'8 true', '8 single-time batches of the tier from 64 kB to 512 kB')
  or diag(query("SELECT layout('i')"));
# Digest of the shard as of each append's time.
my $as_of_each = sub {
	return join("\n", map {
		query(qq{
SELECT count(*) || ' ' || sum(diff) || ' ' || md5(string_agg(encode(key, 'hex') || '/' || "time",
	',' ORDER BY key, "time")) FROM persist_sink.snapshot('i', $_)})
	} @times);
};
my $each = $as_of_each->();
$parts = query("SELECT sum(parts) FROM persist_sink.batches('i')");
$blobs = query("SELECT blob_keys('i')");
$reads = reads_of('i');
like($reads, qr/i verify: 0/, 'verify() is clean before');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('i', 8, '8 single-time batches (all listed)');
is(query("SELECT parts FROM persist_sink.batches('i')"), $parts,
	'its parts are the 8 batches\' parts');
is(query("SELECT blob_keys('i')"), $blobs, 'in the same blob rows');
is(query("SELECT compactions || ' ' || compacted_updates FROM persist_sink.stats WHERE shard = 'i'"),
	'1 0', 'one compaction, which read no update');
ok($node->log_contains(
		qr/merged batches 0 to 7 of 8 of shard "i": listed runs 8, rewritten batches 0, updates 0, bytes 0$/m),
	'the merge is logged as listing 8 runs');
is($as_of_each->(), $each, 'a snapshot as of each append\'s time reads what it read before');
is(reads_of('i'), $reads, 'every read gives what it gave before');
$node->restart;
is($as_of_each->(), $each, 'and after a restart');
is(reads_of('i'), $reads, 'every read, after a restart');
query('SELECT persist_sink.stats_reset()');
query("SELECT persist_sink.compact('i')");
is(query("SELECT batches || ' ' || runs FROM persist_sink.shards WHERE name = 'i'"), '1 1',
	'compact(): one batch of one run');
is(query("SELECT compacted_updates FROM persist_sink.stats WHERE shard = 'i'"),
	8 * 8000 + 7 * 100, 'compact() read every update');
is($as_of_each->(), $each, 'each append\'s time reads the same after compact()');

# (h) inline batches are rewritten however large: listing would keep their
# bytes in the state
query("ALTER SYSTEM SET persist_sink.inline_max_bytes = '1MB'");
set_compaction('off');
query("SELECT persist_sink.create_shard('n')");
query("SELECT put('n', b, 5000) FROM generate_series(0, 7) b");
is(query(q{
SELECT count(*) || ' ' || bool_and(inline AND encoded_bytes >= 64 * 1024)
FROM persist_sink.batches('n')}),
	'8 true', '8 inline batches of 64 kB or more');
$reads = reads_of('n');
query('SELECT persist_sink.stats_reset()');
set_compaction('on');
one_batch_of('n', 1, '8 inline batches (all rewritten)');
is(query("SELECT compacted_updates FROM persist_sink.stats WHERE shard = 'n'"),
	8 * 5000 + 7 * 100, 'the merge read every update');
is(reads_of('n'), $reads, 'the content is unchanged');
query('ALTER SYSTEM RESET persist_sink.inline_max_bytes');
query('SELECT pg_reload_conf()');

$node->stop;
done_testing();
