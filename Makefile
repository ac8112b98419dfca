# persist_sink: PGXS build
EXTENSION = persist_sink
MODULE_big = persist_sink
DATA = persist_sink--0.16.sql persist_sink--0.1.sql persist_sink--0.1--0.2.sql persist_sink--0.2--0.3.sql \
	persist_sink--0.3--0.4.sql persist_sink--0.4--0.5.sql persist_sink--0.5--0.6.sql \
	persist_sink--0.6--0.7.sql persist_sink--0.7--0.8.sql persist_sink--0.8--0.9.sql persist_sink--0.9--0.10.sql \
	persist_sink--0.10--0.11.sql persist_sink--0.11--0.12.sql persist_sink--0.12--0.13.sql \
	persist_sink--0.13--0.14.sql persist_sink--0.14--0.15.sql persist_sink--0.15--0.16.sql

# src/ is layered, lowest first: base, codec, objstore, store, shard, sink,
# workers, sql, fdw (test/check_layers keeps it so; see doc/architecture.md)
OBJS = \
	src/base/settings.o \
	src/base/background.o \
	src/codec/update.o \
	src/codec/part_codec.o \
	src/codec/state_codec.o \
	src/objstore/s3.o \
	src/objstore/store_stats.o \
	src/objstore/store_owner.o \
	src/objstore/object_cache.o \
	src/objstore/object_disk_cache.o \
	src/store/sql_objects.o \
	src/store/spi.o \
	src/store/blob.o \
	src/store/consensus.o \
	src/store/state_cache.o \
	src/store/idempotency.o \
	src/store/garbage.o \
	src/store/object_leaks.o \
	src/store/shard_acl.o \
	src/store/reader_table.o \
	src/shard/stats.o \
	src/shard/batch_writer.o \
	src/shard/shard.o \
	src/shard/key_splits.o \
	src/shard/read.o \
	src/shard/part_reader.o \
	src/shard/block_cache.o \
	src/shard/compact.o \
	src/shard/compaction_queue.o \
	src/shard/upper_wait.o \
	src/shard/debt.o \
	src/shard/diff_overflow.o \
	src/shard/progress.o \
	src/shard/reader_since.o \
	src/shard/reader_step.o \
	src/sink/sink_protocol.o \
	src/sink/sink_shmem.o \
	src/sink/sink_slots.o \
	src/sink/sink_tickets.o \
	src/sink/sink_writer.o \
	src/sink/sink_keyed.o \
	src/sink/sink_join.o \
	src/sink/sink_large.o \
	src/sink/sink_backpressure.o \
	src/sink/sink_worker.o \
	src/sink/sink_take.o \
	src/sink/sink_settle.o \
	src/sink/sink_shared.o \
	src/sink/key_epoch.o \
	src/workers/compactor.o \
	src/sql/args.o \
	src/sql/arrays.o \
	src/sql/functions.o \
	src/sql/writes.o \
	src/sql/rows.o \
	src/sql/verify.o \
	src/sql/object_store.o \
	src/sql/object_store_view.o \
	src/sql/stats_view.o \
	src/sql/progress_view.o \
	src/sql/shard_privileges.o \
	src/sql/reader_functions.o \
	src/sql/utility.o \
	src/fdw/fdw.o \
	src/fdw/fdw_table.o \
	src/fdw/fdw_aggregate.o \
	src/fdw/fdw_scan.o \
	src/fdw/fdw_modify.o \
	src/fdw/fdw_spill.o \
	src/fdw/fdw_import.o \
	src/fdw/fdw_analyze.o \
	src/persist_sink.o

PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK = -lzstd -lcurl

REGRESS = shard compare_and_append read overflow corruption state_diffs state_cache append rows upgrade hostile privileges \
	stats progress escalation transactions idempotency wait_upper outcomes plans untyped shard_privileges readers reader_steps fdw fdw_reads fdw_import lookups block_cache object_store
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=$(srcdir)/test/regress.conf

ISOLATION = concurrent_append append_vs_cas compaction_race compaction_isolation \
	compaction_empty_appends no_hang state_diff_snapshot compaction_progress state_cache_versions state_catch_up shard_grants shard_revoke_cache reader_holds
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=$(srcdir)/test/isolation.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check tmp_check_iso tmp_check_s3 tmp_check_iso_s3 output_iso results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# every object depends on every header: they are few and small
$(OBJS): $(wildcard $(srcdir)/src/*/*.h)
