# Shared pieces of the TAP tests: a started node with persist_sink, and
# background psql sessions, each running one SQL script against a node while
# the test goes on, finished (or found hung) later.  Session output goes to
# files in a directory the test owns.
package SinkSession;

use strict;
use warnings;

use Exporter 'import';
use FindBin;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(sink_node wait_sink_workers start_psql finish_psql shard_contents append_batches freeze_all advance_xids go_around wide_append_sql start_object_store stored_object_names bucket_object_names tagged_append_sql leak_objects);

# A started node with persist_sink preloaded, serving the postgres
# database, and (unless $opts{no_extension}) the extension created there.
# $extra is appended to postgresql.conf: a setting in it overrides these.
# Other options go to init (e.g. allows_streaming => 1).
sub sink_node
{
	my ($name, $extra, %opts) = @_;
	my $no_extension = delete $opts{no_extension};
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%opts);
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'persist_sink'
persist_sink.database = 'postgres'
max_worker_processes = 16
} . ($extra || ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION persist_sink') unless $no_extension;
	return $node;
}

# Waits until $node answers and both sink workers run.  While the server
# restarts, a psql may exit before it reads its query (IPC::Run then dies
# of a broken pipe): that is tried again, a few times.
sub wait_sink_workers
{
	my ($node) = @_;
	for my $try (1 .. 10)
	{
		my $ready = eval {
			$node->poll_query_until('postgres',
				"SELECT count(*) >= 2 FROM pg_stat_activity WHERE backend_type = 'persist_sink worker'");
		};
		return if $ready;
		last if defined $ready || $@ !~ /Broken pipe/;
	}
	die "the server or its sink workers did not come back";
}

# Appends batches $first..$last of $rows updates each to $shard of the
# postgres database on $node by compare_and_append, batch b at time b (from
# upper b to b + 1), each update (key, '', b, 1) with key the SQL expression
# $key of b and the row number i (default: md5 of 'b/i', unique).
sub append_batches
{
	my ($node, $shard, $first, $last, $rows, $key) = @_;
	$key ||= q{md5(b || '/' || i)};
	$node->safe_psql('postgres', qq{
DO \$\$
BEGIN
	FOR b IN $first..$last LOOP
		PERFORM persist_sink.compare_and_append('$shard',
			ARRAY(SELECT $key FROM generate_series(1, $rows) i),
			array_fill(''::text, ARRAY[$rows]), array_fill(b::bigint, ARRAY[$rows]),
			array_fill(1::bigint, ARRAY[$rows]), b, b + 1);
	END LOOP;
END
\$\$;
});
}

# Everything readable of every shard of the postgres database on $node, as
# a hash: the shards view, and per shard its batches, verify()'s problem
# count, upper and since, digests of snapshots as of since, halfway and
# upper - 1, and a digest of listen from since.
sub shard_contents
{
	my ($node) = @_;
	my %c;
	my $digest = q{md5(coalesce(string_agg(format('%s|%s|%s|%s', encode(key, 'hex'),
		encode(val, 'hex'), "time", diff), ',' ORDER BY key, val, "time"), '')) || ' ' || count(*)};
	$c{shards} = $node->safe_psql('postgres',
		'SELECT name, seqno, upper, since, batches, parts, inline_bytes, blob_bytes, updates
		 FROM persist_sink.shards ORDER BY name COLLATE "C"');
	for my $row (split /\n/, $c{shards})
	{
		my ($shard, undef, $upper, $since) = split /\|/, $row;
		$c{"$shard batches"} = $node->safe_psql('postgres',
			"SELECT * FROM persist_sink.batches('$shard') ORDER BY lower");
		$c{"$shard verify"} = $node->safe_psql('postgres',
			"SELECT count(*) FROM persist_sink.verify('$shard')");
		$c{"$shard upper"} = $node->safe_psql('postgres',
			"SELECT persist_sink.shard_upper('$shard') || ' ' || persist_sink.shard_since('$shard')");
		next if $upper <= $since;
		for my $t ($since, int(($since + $upper) / 2), $upper - 1)
		{
			$c{"$shard snapshot $t"} = $node->safe_psql('postgres',
				"SELECT $digest FROM persist_sink.snapshot('$shard', $t)");
		}
		$c{"$shard listen"} = $node->safe_psql('postgres',
			"SELECT $digest FROM persist_sink.listen('$shard', $since)");
	}
	return \%c;
}

# Starts psql on $node running $sql, as application_name $name; options:
# db (default postgres), on_error_stop (default 1).
sub start_psql
{
	my ($node, $dir, $name, $sql, %opts) = @_;
	my $db = $opts{db} || 'postgres';
	my $on_error_stop = defined $opts{on_error_stop} ? $opts{on_error_stop} : 1;
	open my $fh, '>', "$dir/$name.sql" or die "could not write $dir/$name.sql: $!";
	print $fh $sql;
	close $fh;
	my $h = IPC::Run::start(
		[
			$node->installed_command('psql'), '-X', '-At',
			'-v', "ON_ERROR_STOP=$on_error_stop",
			'-d', $node->connstr($db) . " application_name=$name",
			'-f', "$dir/$name.sql"
		],
		'<', \undef,
		'>', "$dir/$name.out",
		'2>', "$dir/$name.err",
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return { name => $name, dir => $dir, h => $h };
}

# Waits for a session; returns ok, timed_out, out and err.
sub finish_psql
{
	my ($c) = @_;
	eval { $c->{h}->finish; };
	my $timed_out = $@ ? 1 : 0;
	$c->{h}->kill_kill if $timed_out;
	return {
		ok => (!$timed_out && $c->{h}->result == 0) ? 1 : 0,
		timed_out => $timed_out,
		out => slurp_file("$c->{dir}/$c->{name}.out"),
		err => slurp_file("$c->{dir}/$c->{name}.err")
	};
}

# Freezes every database of $node, template0 too, so that datfrozenxid and
# the commit log's oldest kept transaction follow the counter; a
# checkpoint then truncates the commit log up to the new datfrozenxid.
sub freeze_all
{
	my ($node) = @_;
	$node->safe_psql('postgres', "UPDATE pg_database SET datallowconn = true WHERE datname = 'template0'");
	for my $db (split /\n/, $node->safe_psql('postgres', 'SELECT datname FROM pg_database ORDER BY 1'))
	{
		$node->safe_psql($db, 'VACUUM (FREEZE)');
	}
	$node->safe_psql('postgres', "UPDATE pg_database SET datallowconn = false WHERE datname = 'template0'");
	$node->safe_psql('postgres', 'CHECKPOINT');
}

# Moves the next transaction ID of $node on by $by (modulo 2^32, past the
# reserved IDs) with pg_resetwal, giving it the commit log segment it
# needs; the node is restarted.  Returns the new next xid.
sub advance_xids
{
	my ($node, $by) = @_;
	my $next = $node->safe_psql('postgres', 'SELECT pg_current_xact_id()::text::bigint % 4294967296');
	$node->stop;
	my $xid = ($next + $by) % 4294967296;
	$xid += 3 if $xid < 3;
	# pg_xact: 32 pages of 32768 transactions a segment, zero-filled
	my $seg = sprintf('%s/pg_xact/%04X', $node->data_dir, int($xid / (32768 * 32)));
	unless (-e $seg)
	{
		open(my $fh, '>', $seg) or die "could not create $seg: $!";
		binmode $fh;
		print $fh "\0" x (32 * 8192);
		close $fh;
	}
	PostgreSQL::Test::Utils::system_or_bail('pg_resetwal', '-x', $xid, $node->data_dir);
	$node->start;
	return $xid;
}

# Takes the transaction ID counter of $node around, as years would: two
# hops of 1.5 billion, every database frozen before, between and after, so
# that the commit log of the old transactions is removed.  Returns the next
# xid after each hop.
sub go_around
{
	my ($node) = @_;
	freeze_all($node);
	my $first = advance_xids($node, 1_500_000_000);
	freeze_all($node);
	my $second = advance_xids($node, 1_500_000_000);
	freeze_all($node);
	return ($first, $second);
}

# SQL of an append() of $n rows tagged $tag to $shard, keys "$tag-<row>"
# and 100-byte vals of hex digests (which compress to about half); it
# prints "ack <time>".
sub wide_append_sql
{
	my ($shard, $tag, $n) = @_;
	return "SELECT 'ack ' || persist_sink.append('$shard', "
	  . "ARRAY(SELECT '$tag-' || g FROM generate_series(1, $n) g), "
	  . "ARRAY(SELECT md5('$tag' || g) || md5('x$tag' || g) || md5('y$tag' || g) || '----' FROM generate_series(1, $n) g), "
	  . "array_fill(1::bigint, ARRAY[$n]));\n";
}

# The object store start_object_store started, stopped when the test ends
my $started_store;
END { system("$started_store->{script} stop $started_store->{dir}") if $started_store && -d "$started_store->{dir}/run"; }

# Starts an object store for the test (test/s3/objstore, in a directory of
# its own under tmp_check, with the bucket persist-sink) and writes a credentials file for it that
# only its owner may read.  Returns a hash: S3_ENDPOINT, S3_ACCESS_KEY,
# S3_SECRET_KEY and S3_BUCKET, the store's directory (dir), the script
# (script, for kill-gateway and start-gateway) and the file (creds).
# Skips the whole test, saying so, where the Ceph packages are missing.
sub start_object_store
{
	my $script = "$FindBin::Bin/../s3/objstore";
	if (system("$script check") != 0)
	{
		Test::More::plan(skip_all =>
			  'no object store: the Debian packages ceph-mon ceph-osd radosgw ceph-common are not installed');
	}
	my ($test) = $0 =~ m{([^/]+)\.pl$};
	my $dir = "${PostgreSQL::Test::Utils::tmp_check}/objstore_$test";
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $env = `$script start $dir $port`;
	die "the object store did not start" if $? != 0;
	my %s3 = $env =~ /^(\w+)=(.*)$/mg;
	$started_store = { script => $script, dir => $dir };
	my $creds = "${PostgreSQL::Test::Utils::tmp_check}/s3_credentials_$test";
	PostgreSQL::Test::Utils::append_to_file($creds, "$s3{S3_ACCESS_KEY}\n$s3{S3_SECRET_KEY}\n");
	chmod 0600, $creds;
	return { %s3, dir => $dir, script => $script, creds => $creds };
}

# The names of the objects the bucket of the object store $s3 (from
# start_object_store) holds under $prefix/$shard/, sorted (their count in
# scalar context), from the gateway's own listing (radosgw-admin), not
# through the extension.
sub stored_object_names
{
	my ($s3, $prefix, $shard) = @_;
	my $out = `radosgw-admin -c $s3->{dir}/ceph.conf bucket list --bucket $s3->{S3_BUCKET} 2>/dev/null`;
	die "radosgw-admin failed" if $? != 0;
	my @names = sort grep { m{^\Q$prefix/$shard/\E} } ($out =~ /"name": "([^"]+)"/g);
	return @names;
}

# The names of every object the bucket of the object store $s3 (from
# start_object_store) holds, sorted, from the gateway's own listing
# (radosgw-admin, its JSON decoded: names are byte strings as stored).
sub bucket_object_names
{
	my ($s3) = @_;
	my $out = `radosgw-admin -c $s3->{dir}/ceph.conf bucket list --bucket $s3->{S3_BUCKET} 2>/dev/null`;
	die "radosgw-admin failed" if $? != 0;
	my $list = JSON::PP->new->utf8(0)->decode($out);
	return sort map { $_->{name} } @$list;
}

# SQL of one sink append of $n rows to $shard, keys "$tag-<i>" and vals
# md5("$tag<i>"), diff 1.
sub tagged_append_sql
{
	my ($shard, $tag, $n) = @_;
	return "SELECT persist_sink.append('$shard', ARRAY(SELECT '$tag-' || g FROM generate_series(1, $n) g), "
	  . "ARRAY(SELECT md5('$tag' || g) FROM generate_series(1, $n) g), array_fill(1::bigint, ARRAY[$n]));";
}

# Leaves objects behind in $shard's object store on $node: a
# compare_and_append() of 30,000 rows at its upper, rolled back (its parts
# were put before the CaS that would have named them).
sub leak_objects
{
	my ($node, $shard) = @_;
	my $upper = $node->safe_psql('postgres', "SELECT persist_sink.shard_upper('$shard')");
	my $next = $upper + 1;
	$node->safe_psql('postgres', qq{
BEGIN;
SELECT persist_sink.compare_and_append('$shard', ARRAY(SELECT 'rb-' || g FROM generate_series(1, 30000) g),
	ARRAY(SELECT md5(g::text) FROM generate_series(1, 30000) g), array_fill(${upper}::bigint, ARRAY[30000]),
	array_fill(1::bigint, ARRAY[30000]), $upper, $next);
ROLLBACK;});
}

1;
