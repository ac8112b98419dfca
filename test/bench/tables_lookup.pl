#!/usr/bin/perl
# The tables workload's point lookups (test/bench/run --only tables): one
# connection (DBD::Pg, the PG* environment, autocommit), the statement
#
#     SELECT * FROM TABLE WHERE key = $1
#
# (the table's columns key, val, diff, in this order) prepared on the
# server once (as pgbench -M prepared does; after five
# executions the server may use a generic plan), then executed for one key
# after the other of KEYFILE (lines of hex key, tab, hex val).  Every
# lookup must return exactly one row, with that key, its val and diff 1;
# anything else stops the run with an error.
#
#   tables_lookup.pl TABLE KEYFILE N MAX_SECONDS OUTFILE
#
# The last 5 keys of KEYFILE are looked up first, untimed (the plan and
# the caches warm up), then the first N, each timed from the execute to
# its last row fetched, until N are done or MAX_SECONDS have passed.
# Writes every latency (ms) to OUTFILE and prints
# "<lookups> <p50_ms> <p95_ms> <max_ms> <mean_ms>" (nearest-rank
# percentiles).
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:pg_types);
use Time::HiRes qw(time);

@ARGV == 5 or die "usage: tables_lookup.pl TABLE KEYFILE N MAX_SECONDS OUTFILE\n";
my ($table, $keyfile, $n, $max_seconds, $outfile) = @ARGV;

my @keys;
open(my $kf, '<', $keyfile) or die "$keyfile: $!";
while (<$kf>)
{
	chomp;
	my ($k, $v) = split /\t/;
	push @keys, [ pack('H*', $k), pack('H*', $v), $k ];
}
close $kf;
@keys >= $n + 5 or die "$keyfile: " . scalar(@keys) . " keys, $n + 5 needed\n";

my $dsn = 'dbi:Pg:';
$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');
my $dbh = DBI->connect($dsn, '', '',
	{ AutoCommit => 1, RaiseError => 1, PrintError => 0, pg_server_prepare => 1 });
$dbh->do("SET application_name = 'tables_lookup'");
my $sth = $dbh->prepare("SELECT * FROM $table WHERE key = \$1");

# Looks key up; returns the seconds it took.  Dies unless the answer is
# the key's one row.
sub lookup
{
	my ($key) = @_;
	my $t0 = time;
	$sth->bind_param(1, $key->[0], { pg_type => PG_BYTEA });
	$sth->execute;
	my $rows = $sth->fetchall_arrayref;
	my $t = time - $t0;
	die "$table: key \\x$key->[2] returned " . scalar(@$rows) . " rows, not 1\n"
	  unless @$rows == 1;
	my ($k, $v, $d) = @{ $rows->[0] };
	die "$table: key \\x$key->[2] returned a row with key \\x" . unpack('H*', $k) . "\n"
	  unless $k eq $key->[0];
	die "$table: key \\x$key->[2] returned val \\x" . unpack('H*', $v) . ", not \\x" . unpack('H*', $key->[1]) . "\n"
	  unless $v eq $key->[1];
	die "$table: key \\x$key->[2] returned diff $d, not 1\n" unless $d == 1;
	return $t;
}

lookup($keys[$_]) for ($#keys - 4 .. $#keys);
my @lat;
my $start = time;
for my $i (0 .. $n - 1)
{
	push @lat, lookup($keys[$i]) * 1000;
	last if time - $start >= $max_seconds;
}
$dbh->disconnect;

open(my $out, '>', $outfile) or die "$outfile: $!";
printf $out "%.3f\n", $_ for @lat;
close $out or die "$outfile: $!";

my @s = sort { $a <=> $b } @lat;
sub pct
{
	my ($p) = @_;
	my $i = int($p * @s + 0.999999) - 1;
	return $s[ $i < 0 ? 0 : $i ];
}
my $sum = 0;
$sum += $_ for @s;
printf "%d %.3f %.3f %.3f %.3f\n", scalar(@s), pct(0.50), pct(0.95), $s[-1], $sum / @s;
