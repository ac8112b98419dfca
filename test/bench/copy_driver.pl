#!/usr/bin/perl
# COPY clients for the benchmark: N processes, each with its own connection,
# stream prebuilt binary COPY files into a table with COPY ... FROM STDIN, one
# file per transaction (autocommit), like pgbench runs one batch per
# transaction.
#
#   copy_driver.pl --clients N --table T --log PREFIX [--prefix NB] \
#       (--seconds S --dir D --batches NB | --files F1,F2,...)
#
# --seconds: each client copies random files D/b<1..NB>.bin until S seconds
# have passed (the batch in flight then completes).  --files: the files are
# dealt round robin to the clients, each copying its share in turn.
# --prefix NB: before sending a file, overwrite the first NB bytes of every
# row's first column (the key) with NB random bytes drawn for this file
# (/dev/urandom), so that keys never repeat across calls (the sustained
# workload; its files hold NB placeholder bytes there).
#
# Connects with the PG* environment (PGHOST, PGPORT, PGDATABASE).  Clients
# connect first and start together.  Writes per-file latencies to
# PREFIX.<client> in pgbench's --log format (client, number, latency in us,
# script, epoch, us) and prints "files=<n> seconds=<wall>" on stdout.
use strict;
use warnings;
use DBI;
use Getopt::Long;
use IO::Handle;
use POSIX ();
use Time::HiRes qw(time);

my ($clients, $table, $log, $seconds, $dir, $batches, $files, $prefix) = (1);
GetOptions('clients=i' => \$clients, 'table=s' => \$table, 'log=s' => \$log,
		   'seconds=f' => \$seconds, 'dir=s' => \$dir, 'batches=i' => \$batches,
		   'files=s' => \$files, 'prefix=i' => \$prefix) or die "bad arguments\n";
die "need --table and --log\n" unless $table && $log;
die "need --seconds with --dir and --batches, or --files\n"
	unless ($seconds && $dir && $batches) || $files;
my @files = $files ? split(/,/, $files) : ();

my $dsn = 'dbi:Pg:';
$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');

pipe(my $ready_r, my $ready_w) or die "pipe: $!";
pipe(my $go_r, my $go_w) or die "pipe: $!";
pipe(my $count_r, my $count_w) or die "pipe: $!";
my @pids;
for my $c (0 .. $clients - 1)
{
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		close $ready_r;
		close $go_w;
		close $count_r;
		my $rc = eval { client($c); 1 } ? 0 : 1;
		warn "copy client $c: $@" if $rc;
		POSIX::_exit($rc);
	}
	push @pids, $pid;
}
close $ready_w;
close $go_r;
close $count_w;

# Wait until every client is connected, then start them together.
for (1 .. $clients)
{
	defined(my $line = <$ready_r>) or last;
}
my $t0 = time();
close $go_w;
my $failed = 0;
for my $pid (@pids)
{
	waitpid($pid, 0);
	$failed++ if $?;
}
my $elapsed = time() - $t0;
my $n = 0;
while (my $line = <$count_r>)
{
	$n += $line;
}
die "$failed copy client(s) failed\n" if $failed;
printf "files=%d seconds=%.3f\n", $n, $elapsed;

sub client
{
	my ($c) = @_;
	my $dbh = DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	open(my $out, '>', "$log.$c") or die "$log.$c: $!";
	srand($$ ^ time());
	my $urandom;
	open($urandom, '<:raw', '/dev/urandom') or die "/dev/urandom: $!" if $prefix;
	my @mine = @files ? @files[grep { $_ % $clients == $c } 0 .. $#files] : ();
	print $ready_w "1\n";
	$ready_w->flush;
	close $ready_w;
	my $ignored = <$go_r>;		# EOF: go
	my $start = time();
	my $done = 0;
	while (1)
	{
		my $file;
		if (@files)
		{
			last if $done >= @mine;
			$file = $mine[$done];
		}
		else
		{
			last if time() - $start >= $seconds;
			$file = "$dir/b" . (1 + int(rand($batches))) . '.bin';
		}
		my $t = time();
		open(my $in, '<:raw', $file) or die "$file: $!";
		$dbh->do("COPY $table FROM STDIN (FORMAT binary)");
		my $buf;
		if ($prefix)
		{
			# the whole file, its keys behind this call's random prefix
			local $/;
			$buf = <$in>;
			my $p;
			read($urandom, $p, $prefix) == $prefix or die "/dev/urandom: short read\n";
			substr($buf, $_, $prefix) = $p for unpack('N*', key_offsets($file, $buf));
			$dbh->pg_putcopydata($buf);
		}
		else
		{
			while (read($in, $buf, 1 << 20))
			{
				$dbh->pg_putcopydata($buf);
			}
		}
		$dbh->pg_putcopyend();
		close $in;
		my $end = time();
		my $us = int(($end - $t) * 1e6);
		printf $out "%d %d %d 0 %d %d\n", $c, $done, $us, int($end), int(($end - int($end)) * 1e6);
		$done++;
	}
	close $out;
	$dbh->disconnect;
	print $count_w "$done\n";
	close $count_w;
}

# The offsets of every row's first field in a binary COPY file (packed, one
# 32-bit number each), parsed on first use and kept per file.  Dies unless
# every row's first field is at least --prefix bytes long.
my %offsets;
sub key_offsets
{
	my ($file, $data) = @_;
	return $offsets{$file} if exists $offsets{$file};
	die "$file: not a binary COPY file\n" unless substr($data, 0, 11) eq "PGCOPY\n\377\r\n\0";
	my $pos = 15;
	my $ext = unpack('N', substr($data, $pos, 4));
	$pos += 4 + $ext;
	my @off;
	while (1)
	{
		my $nf = unpack('s>', substr($data, $pos, 2));
		$pos += 2;
		last if $nf == -1;		# trailer
		for my $f (0 .. $nf - 1)
		{
			my $len = unpack('l>', substr($data, $pos, 4));
			$pos += 4;
			if ($f == 0)
			{
				die "$file: a key is shorter than $prefix bytes\n" if $len < $prefix;
				push @off, $pos;
			}
			$pos += $len if $len > 0;
		}
		die "$file: truncated\n" if $pos > length($data);
	}
	return $offsets{$file} = pack('N*', @off);
}
