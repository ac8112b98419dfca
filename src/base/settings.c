/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  Definition of the persist_sink.* configuration parameters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "base/settings.h"

int			ps_shared_batch_max_bytes = 1024 * 1024;
int			ps_batch_interval_ms = 10;
int			ps_inline_max_bytes = 4096;
int			ps_blob_target_size = 8 * 1024 * 1024;
int			ps_compression_level = 1;
int			ps_shared_memory_kb = 64 * 1024;
int			ps_workers = 2;
char	   *ps_database = NULL;
bool		ps_compaction = true;
int			ps_stats_max = 4096;
int			ps_idempotency_window_s = 600;

/* Defines every parameter and reserves the persist_sink. prefix. */
void
ps_define_settings(void)
{
	DefineCustomIntVariable("persist_sink.shared_batch_max_bytes",
							"Writes smaller than this join the shared batch of their interval.",
							"Larger writes are encoded into parts of their own by the writing backend. 0 disables sharing.",
							&ps_shared_batch_max_bytes, 1024 * 1024, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.batch_interval",
							"Longest time an interval stays open before it is sealed.",
							NULL,
							&ps_batch_interval_ms, 10, 1, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.inline_max_bytes",
							"Batches that encode smaller than this are kept inline in the shard state.",
							"0 writes every non-empty batch to the blob table.",
							&ps_inline_max_bytes, 4096, 0, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.blob_target_size",
							"Size at which a batch is split into another part.",
							"Measured on the uncompressed columns, so encoded parts are at most this large.",
							&ps_blob_target_size, 8 * 1024 * 1024, 1024, 512 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.compression_level",
							"zstd compression level of parts.",
							NULL,
							&ps_compression_level, 1, -7, 22,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.shared_memory",
							"Size of the shared staging arena of the sink.",
							"When it is full, writers wait for space.",
							&ps_shared_memory_kb, 64 * 1024, 1024, INT_MAX / 2,
							PGC_POSTMASTER, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.workers",
							"Number of background workers that commit the sink's intervals.",
							NULL,
							&ps_workers, 2, 1, 64,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.database",
							   "Database whose shards the background workers serve.",
							   NULL,
							   &ps_database, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("persist_sink.compaction",
							 "Merges shards' batches in the background.",
							 "Turn off only to diagnose; compact() still works.",
							 &ps_compaction, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.stats_max",
							"Most shards, in all databases, whose counters the stats view keeps.",
							"Counters of further shards are not kept until entries are freed.",
							&ps_stats_max, 4096, 100, 1000000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.idempotency_window",
							"How long the idempotency keys of committed appends are remembered.",
							"A retry with the same key within this time returns the first append's time and writes nothing.",
							&ps_idempotency_window_s, 600, 1, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	MarkGUCPrefixReserved("persist_sink");
}
