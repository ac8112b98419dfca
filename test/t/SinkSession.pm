# Background psql sessions for the TAP tests: each runs one SQL script
# against a node while the test goes on, and is finished (or found hung)
# later.  Output goes to files in a directory the test owns.
package SinkSession;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(start_psql finish_psql);

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

1;
