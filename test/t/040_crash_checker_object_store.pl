
# Copyright (c) persist_sink contributors

# The crash checker (004_crash_checker.pl) with the shards' parts in an
# object store, read through a small disk cache of objects and a smaller
# cache per process: SIGKILLed sink workers and writers and immediate stops of
# the server during appends lose no acknowledged batch, double none, leave
# every other batch whole or absent, and, once the collector of leaked
# objects has run, leave no unreferenced or missing object (verify()).
# Skipped, with a line saying so, where the Ceph packages are missing.

use strict;
use warnings;

use FindBin;
# loaded here, not by the do below: their INIT blocks run only at compile time
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

$ENV{PS_CRASH_OBJECT_STORE} = 1;
$ENV{PS_CRASH_ROUNDS} //= 8;
do "$FindBin::Bin/004_crash_checker.pl";
die $@ if $@;
