# persist_sink: PGXS build
EXTENSION = persist_sink
MODULE_big = persist_sink
DATA = persist_sink--0.1.sql persist_sink--0.1--0.2.sql

OBJS = \
	src/persist_sink.o \
	src/settings.o \
	src/update.o \
	src/part_codec.o \
	src/state_codec.o \
	src/blob.o \
	src/consensus.o \
	src/shard.o \
	src/read.o \
	src/functions.o \
	src/verify.o \
	src/stats.o \
	src/sink_shmem.o \
	src/sink_writer.o \
	src/sink_worker.o \
	src/compact.o \
	src/compactor.o \
	src/rows.o

PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK = -lzstd

REGRESS = shard compare_and_append read corruption append rows upgrade hostile privileges
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=$(srcdir)/test/regress.conf

ISOLATION = concurrent_append append_vs_cas compaction_race
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=$(srcdir)/test/isolation.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check tmp_check_iso output_iso results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# every object depends on every header: they are few and small
$(OBJS): $(wildcard $(srcdir)/src/*.h)
