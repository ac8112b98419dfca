
# Copyright (c) persist_sink contributors

# The SQL examples of README.md run as written.  Every fenced block whose
# info string is `sql` is taken, in the order of the file, into one psql
# script, run with ON_ERROR_STOP on a fresh cluster where the extension is
# not yet created (the first example creates it), as the superuser.  The
# conventions, which README.md's Development section states:
#  - a block whose first line is `-- connected as ROLE` runs connected as
#    that role (the examples before it create the role); the next block is
#    back with the superuser;
#  - a statement on one line ending in `-- raises SQLSTATE` must fail with
#    exactly that SQLSTATE, and the script goes on;
#  - blocks with any other info string, or none, are not run.
# The runner is first shown to fail on examples that do not run, so that a
# README whose examples break cannot pass.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Spec;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use SinkSession;
use Test::More;

# README.md is at the top of the source tree (see 008_docs.pl).
my @candidates = (
	(defined $ENV{TESTDIR} ? File::Spec->catfile($ENV{TESTDIR}, 'README.md') : ()),
	File::Spec->catfile(dirname(File::Spec->rel2abs(__FILE__)), '..', '..', 'README.md'));
my ($readme_path) = grep { -f $_ } @candidates;
BAIL_OUT("README.md not found (looked at: @candidates)") unless defined $readme_path;
note "checking $readme_path";

# The ```sql blocks of a Markdown text (also those indented in a list): a
# list of { line, role, text }, line being the block's first line of SQL
# (1-based) and role the one its `-- connected as` line names, or undef.
sub sql_blocks
{
	my ($markdown) = @_;
	my (@blocks, $block, $fence);
	my $n = 0;
	for my $line (split /\n/, $markdown)
	{
		$n++;
		if (!defined $fence && $line =~ /^\s*(```+)\s*(\S*)/)
		{
			$fence = $1;
			$block = $2 eq 'sql' ? { line => $n + 1, text => '' } : undef;
			next;
		}
		if (defined $fence && $line =~ /^\s*\Q$fence\E\s*$/)
		{
			push @blocks, $block if defined $block;
			($fence, $block) = (undef, undef);
			next;
		}
		$block->{text} .= "$line\n" if defined $block;
	}
	die "unterminated code block" if defined $fence;
	for my $b (@blocks)
	{
		$b->{role} = $1 if $b->{text} =~ /\A--\s*connected as (\w+)/;
	}
	return @blocks;
}

# The psql script of some blocks.  Each block is announced with a line
# "block LINE" on stdout; each statement marked `-- raises CODE` runs with
# ON_ERROR_STOP off and is followed by a line "raised LINE CODE ERROR
# LAST_ERROR_SQLSTATE" (psql's variables after it).
sub script
{
	my @blocks = @_;
	my $s = "\\set ON_ERROR_STOP 1\nSELECT current_user AS readme_superuser \\gset\n";
	for my $b (@blocks)
	{
		my $n = $b->{line};
		$s .= "\\echo block $b->{line}\n";
		$s .= "\\connect - $b->{role}\n" if defined $b->{role};
		for my $line (split /\n/, $b->{text})
		{
			if ($line =~ /--\s*raises\s+([0-9A-Z]{5})\b/)
			{
				my $code = $1;
				die "README.md line $n: a statement marked `-- raises` must be one line ending in ;"
				  unless $line =~ /;\s*--\s*raises/;
				$s .= "\\set ON_ERROR_STOP 0\n$line\n\\set ON_ERROR_STOP 1\n";
				$s .= "\\echo raised $n $code :ERROR :LAST_ERROR_SQLSTATE\n";
			}
			else
			{
				$s .= "$line\n";
			}
			$n++;
		}
		$s .= "\\connect - :\"readme_superuser\"\n" if defined $b->{role};
	}
	return $s . "\\echo done\n";
}

# Runs the sql blocks of a Markdown text in database $db of $node; returns
# a list of problems (none if every example ran and every marked one raised
# its code).
sub run_examples
{
	my ($node, $db, $markdown) = @_;
	my @blocks = sql_blocks($markdown);
	my ($ret, $out, $err) = $node->psql($db, script(@blocks), on_error_stop => 1);
	my @problems;
	my @reached = $out =~ /^block (\d+)$/mg;
	push @problems, "psql failed ($ret) after the block at README.md line "
	  . ($reached[-1] // '?') . ": $err"
	  if $ret != 0;
	push @problems, "blocks reached: " . scalar(@reached) . " of " . scalar(@blocks)
	  if @reached != @blocks;
	push @problems, "the script did not reach its end" unless $out =~ /^done$/m;
	while ($out =~ /^raised (\d+) (\S+) (\S+) (\S+)$/mg)
	{
		push @problems, "README.md line $1: expected an error $2, got "
		  . ($3 eq 'true' ? "error $4" : "no error")
		  unless $3 eq 'true' && $4 eq $2;
	}
	return @problems;
}

# The runner fails on what must fail: a statement that errors, an error
# other than the one marked, a marked statement that succeeds, a statement
# refused to the role a block is connected as.  Each case runs in a
# database of its own.
my $node = sink_node('runner', '', no_extension => 1);
my $ok_block = "```sql\nCREATE EXTENSION persist_sink;\nSELECT 1;\n```\n";
my $case_no = 0;
for my $case (
	[ 'an error', "```sql\nSELECT persist_sink.no_such_function();\n```\n" ],
	[ 'a wrong SQLSTATE', "```sql\nSELECT 1/0;   -- raises 42501\n```\n" ],
	[ 'no error where one is marked', "```sql\nSELECT 1;   -- raises 22012\n```\n" ],
	[
		'a role without the privileges',
		"```sql\nCREATE ROLE nobody LOGIN;\n```\n\n```sql\n-- connected as nobody\n"
		  . "SELECT persist_sink.create_shard('x');\n```\n"
	])
{
	my $db = 'case' . $case_no++;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my @problems = run_examples($node, $db, $ok_block . $case->[1]);
	cmp_ok(scalar(@problems), '>', 0, "the runner reports $case->[0]")
	  and note join("\n", @problems);
}
$node->safe_psql('postgres', 'CREATE DATABASE sound');
is_deeply([ run_examples($node, 'sound', $ok_block . "```sql\nSELECT 1/0;   -- raises 22012\n```\n") ],
	[], 'the runner accepts an error that is marked');
$node->stop;

# README.md itself, on a fresh cluster, in the database persist_sink.database
# names, and on another fresh cluster in a database created for it (whose
# workers start on demand)
my $readme = slurp_file($readme_path);
my @blocks = sql_blocks($readme);
cmp_ok(scalar(@blocks), '>=', 10, 'README.md has its SQL examples');
ok((grep { defined $_->{role} } @blocks), 'README.md has an example run as an application role');
$node = sink_node('readme', '', no_extension => 1);
my @problems = run_examples($node, 'postgres', $readme);
is_deeply(\@problems, [], 'the SQL examples of README.md run as written')
  or diag join("\n", @problems);
$node->stop;
$node = sink_node('readme_second', '', no_extension => 1);
$node->safe_psql('postgres', 'CREATE DATABASE second');
@problems = run_examples($node, 'second', $readme);
is_deeply(\@problems, [], '... and so they do in a second database')
  or diag join("\n", @problems);
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE datname = 'second' AND backend_type LIKE 'persist_sink %'}),
	'2', 'served by a sink worker and a compactor of its own');
$node->stop;

done_testing();
