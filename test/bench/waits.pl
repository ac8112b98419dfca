#!/usr/bin/perl
# Samples pg_stat_activity about every 20 ms for SECONDS and prints, as
# markdown table rows, what each kind of process was doing: the share of
# its samples in each state and wait event ("CPU": no wait event).  Client
# backends of the database other than this one and the per-second sampler
# count as "client"; a sink worker that never served an interval shows as
# state "-".  Each sample is a statement of its own (autocommit), so the
# sampler holds no snapshot that would keep vacuum from the measured run's
# dead rows.
#
#   waits.pl SECONDS
#
# Run by test/bench/run --waits; connects with the PG* environment.
use strict;
use warnings;
use DBI;
use Time::HiRes qw(time sleep);

my ($seconds) = @ARGV;
die "usage: waits.pl SECONDS\n" unless $seconds && $seconds > 0;

my $dsn = 'dbi:Pg:';
$dsn .= "host=$ENV{PGHOST};" if $ENV{PGHOST};
$dsn .= "port=$ENV{PGPORT};" if $ENV{PGPORT};
$dsn .= 'dbname=' . ($ENV{PGDATABASE} || 'postgres');
my $dbh = DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
my $sth = $dbh->prepare(q{
	SELECT CASE WHEN backend_type LIKE 'persist_sink%' THEN backend_type ELSE 'client' END,
		   coalesce(state, '-') || ': ' || coalesce(wait_event_type || ' ' || wait_event, 'CPU')
	  FROM pg_stat_activity
	 WHERE pid <> pg_backend_pid()
	   AND (backend_type LIKE 'persist_sink%'
			OR (backend_type = 'client backend' AND datname = current_database()
				AND application_name <> 'sustained_sample'))
});

my (%count, %total);
my $end = time + $seconds;
while (time < $end)
{
	$sth->execute;
	while (my ($kind, $what) = $sth->fetchrow_array)
	{
		$count{$kind}{$what}++;
		$total{$kind}++;
	}
	sleep 0.02;
}
$dbh->disconnect;

for my $kind (sort keys %count)
{
	for my $what (sort { $count{$kind}{$b} <=> $count{$kind}{$a} || $a cmp $b } keys %{ $count{$kind} })
	{
		printf "| %s | %s | %d | %.1f%% |\n", $kind, $what, $count{$kind}{$what},
		  100 * $count{$kind}{$what} / $total{$kind};
	}
}
