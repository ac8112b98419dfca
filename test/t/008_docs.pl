
# Copyright (c) persist_sink contributors

# Every function, setting and view of the extension is documented in
# README.md.  The lists come from the server (the extension's members in
# pg_depend, and pg_settings), not from the install scripts, so that a new
# function or setting cannot be added without its documentation.

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

# README.md is at the top of the source tree: $TESTDIR (the directory
# `make prove_installcheck` runs from) in an in-tree build, and two levels
# above this file in any case.
my @candidates = (
	(defined $ENV{TESTDIR} ? File::Spec->catfile($ENV{TESTDIR}, 'README.md') : ()),
	File::Spec->catfile(dirname(File::Spec->rel2abs(__FILE__)), '..', '..', 'README.md'));
my ($readme_path) = grep { -f $_ } @candidates;
BAIL_OUT("README.md not found (looked at: @candidates)") unless defined $readme_path;
my $readme = slurp_file($readme_path);
note "checking $readme_path";

my $node = sink_node('docs');

# The extension's members of one catalog, by name.
sub members
{
	my ($catalog, $name, $where) = @_;
	my $out = $node->safe_psql(
		'postgres', qq{
SELECT DISTINCT o.$name
FROM pg_depend d JOIN $catalog o ON d.classid = '$catalog'::regclass AND d.objid = o.oid
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'persist_sink')
  AND $where
ORDER BY 1});
	return split /\n/, $out;
}

# Functions.  shard_info(), stats(), compaction_progress(), reader_info()
# and object_store_stats() are left out: they are the helpers behind the
# views shards, stats, compaction_progress, readers and object_store_stats
# (CREATE VIEW shards AS SELECT * FROM shard_info()),
# which are what the README documents and what users query;
# the views are checked below.  Every other function must appear called or
# declared, as `name(`: a bare word such as "listen" or "snapshot" in the
# prose does not count.
my %view_helpers = (shard_info => 1, stats => 1, compaction_progress => 1, reader_info => 1,
	object_store_stats => 1, object_disk_cache_stats => 1);
my @functions = grep { !$view_helpers{$_} } members('pg_proc', 'proname', 'true');
cmp_ok(scalar(@functions), '>=', 17, 'the extension has its functions')
  or diag "functions: @functions";
my @missing_functions = grep { $readme !~ /(?<!\w)\Q$_\E\s*\(/ } @functions;
is_deeply(\@missing_functions, [], 'every function appears in README.md')
  or diag "functions missing from README.md: @missing_functions";

# Settings, as `persist_sink.name` (not as the prefix of a longer name).
my @settings = split /\n/,
  $node->safe_psql('postgres',
	"SELECT name FROM pg_settings WHERE name LIKE 'persist\\_sink.%' ORDER BY name");
cmp_ok(scalar(@settings), '>=', 8, 'the extension has its settings')
  or diag "settings: @settings";
my @missing_settings = grep { $readme !~ /\Q$_\E(?![\w.])/ } @settings;
is_deeply(\@missing_settings, [], 'every setting appears in README.md')
  or diag "settings missing from README.md: @missing_settings";

# Views, as "view `name`".
my @views = members('pg_class', 'relname', "o.relkind = 'v'");
is_deeply(\@views,
	[ 'compaction_failures', 'compaction_progress', 'object_disk_cache_stats', 'object_store_stats', 'readers', 'shards', 'stats' ],
	'the extension has the views compaction_failures, compaction_progress, object_disk_cache_stats, object_store_stats, readers, shards and stats');
my @missing_views = grep { $readme !~ /\bview\s+`\Q$_\E`/ } @views;
is_deeply(\@missing_views, [], 'every view appears in README.md')
  or diag "views missing from README.md: @missing_views";

$node->stop;
done_testing();
