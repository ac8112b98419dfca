#!/usr/bin/perl
# Samples a running sustained-workload measurement every INTERVAL seconds
# until SIGTERM, one line per sample appended to OUT (tab separated):
#
#   epoch  batches  state_bytes  appends  updates  cpu_writers  cpu_workers
#   cpu_compactor  cpu_other
#
# batches: persist_sink.shards.batches of SHARD; state_bytes: the size of its
# consensus row's state (octet_length, read as superuser); appends, updates:
# its persist_sink.stats counters ("-" for all four when SHARD is "-", for
# the plain-table systems).  cpu_*: CPU seconds (utime + stime from
# /proc/PID/stat) used since the first sample by the server processes of
# each kind, by pg_stat_activity.backend_type: "client backend" (the writers;
# this sampler's own connection left out), "persist_sink worker",
# "persist_sink compactor", and every other kind (checkpointer, walwriter,
# autovacuum...).  A process seen in the first sample counts from its value
# then, one born later from zero; one that exits keeps what it had used at
# its last sample (so a writer that exits loses at most its last interval).
# Samples are taken on a fixed grid (start + k x INTERVAL), not one interval
# after the previous one finished, so they do not drift.
#
#   sustained_sample.pl OUT SHARD [INTERVAL]
#
# Connects with the PG* environment (PGHOST, PGPORT, PGDATABASE).
use strict;
use warnings;
use DBI;
use IO::Handle;
use POSIX ();
use Time::HiRes qw(time sleep);

my ($out, $shard, $interval) = @ARGV;
die "usage: sustained_sample.pl OUT SHARD [INTERVAL]\n" unless $out && defined $shard;
$interval ||= 1;
my $tick = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
my $stop = 0;
$SIG{TERM} = $SIG{INT} = sub { $stop = 1 };

my $dsn = 'dbi:Pg:';
$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');
my $dbh = DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
# named, so that the wait sampler (waits.pl) leaves it out of the clients
$dbh->do("SET application_name = 'sustained_sample'");
my ($self) = $dbh->selectrow_array('SELECT pg_backend_pid()');
my $procs = $dbh->prepare(
	"SELECT pid, CASE backend_type WHEN 'client backend' THEN 'writers'
	                               WHEN 'persist_sink worker' THEN 'workers'
	                               WHEN 'persist_sink compactor' THEN 'compactor'
	                               ELSE 'other' END
	 FROM pg_stat_activity WHERE pid <> pg_backend_pid()");
my $sink = $shard eq '-' ? undef : $dbh->prepare(
	"SELECT (SELECT batches FROM persist_sink.shards WHERE name = \$1),
	        (SELECT octet_length(state) FROM persist_sink.consensus WHERE shard = \$1),
	        (SELECT appends FROM persist_sink.stats WHERE shard = \$1),
	        (SELECT updates FROM persist_sink.stats WHERE shard = \$1)");

open(my $fh, '>>', $out) or die "$out: $!";
$fh->autoflush(1);
my @kinds = qw(writers workers compactor other);
my (%base, %last, %kind_of);	# per pid: CPU ticks at its first and last sample; its kind
my $first = 1;
my $start = time();
for (my $k = 0;; $k++)
{
	my $t = time();
	$procs->execute();
	while (my ($pid, $kind) = $procs->fetchrow_array())
	{
		my $ticks = cpu_ticks($pid);
		next unless defined $ticks;
		$kind_of{$pid} = $kind;
		$base{$pid} //= $first ? $ticks : 0;
		$last{$pid} = $ticks;
	}
	$first = 0;
	my %cpu = map { $_ => 0 } @kinds;
	$cpu{$kind_of{$_}} += $last{$_} - $base{$_} for keys %last;
	my @s = ('-') x 4;
	if ($sink)
	{
		$sink->execute($shard);
		@s = map { $_ // '-' } $sink->fetchrow_array();
	}
	print $fh join("\t", sprintf('%.3f', $t), @s, map { sprintf('%.2f', $cpu{$_} / $tick) } @kinds), "\n";
	last if $stop;
	my $next = $start + ($k + 1) * $interval;
	sleep($next - time()) if $next > time();	# SIGTERM wakes it: one last sample
}
$_->finish for grep { defined } $procs, $sink;
$dbh->disconnect;

# utime + stime of a process in clock ticks, undef if it is gone.
sub cpu_ticks
{
	my ($pid) = @_;
	open(my $sf, '<', "/proc/$pid/stat") or return undef;
	my $stat = <$sf>;
	close $sf;
	return undef unless defined $stat;
	# pid (comm) state ppid ...: comm may hold spaces and parentheses
	$stat =~ s/^.*\)\s+//s;
	my @f = split(/\s+/, $stat);
	return $f[11] + $f[12];		# fields 14 and 15 of proc(5)
}
