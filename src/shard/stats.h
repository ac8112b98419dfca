/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Per-shard counters in shared memory, behind the stats view, kept per
 *	  (database, shard) for at most persist_sink.stats_max shards.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_STATS_H
#define PS_STATS_H

#include "datatype/timestamp.h"

/* Counters of one shard; see the stats view for their meaning */
typedef struct PsCounters
{
	int64		appends;
	int64		updates;
	int64		shared_writes;
	int64		own_writes;
	int64		parts_written;
	int64		blob_puts;
	int64		blob_bytes;
	int64		inline_batches;
	int64		state_bytes;
	int64		cas_attempts;
	int64		cas_mismatches;
	int64		compactions;
	int64		compacted_updates;
	int64		slowed_ms;
	int64		stalled_ms;
} PsCounters;

#define PS_STATS_COUNTERS	(sizeof(PsCounters) / sizeof(int64))

/* Bytes kept of the last failed compaction's message */
#define PS_STATS_ERROR_LEN	160

/* A shard's failed background compactions, as pg_stat_archiver counts failed archiving */
typedef struct PsCompactionFailures
{
	int64		count;			/* since the counters were last reset */
	TimestampTz last_at;		/* the last one's time, 0 if none */
	char		last_error[PS_STATS_ERROR_LEN];
} PsCompactionFailures;

/* How full the counters' table is, for stats_info() */
typedef struct PsStatsInfo
{
	int			entries;		/* shards with counters, in every database */
	int			max;			/* persist_sink.stats_max */
	int64		uncounted;		/* additions lost to a full table */
} PsStatsInfo;

extern Size ps_stats_shmem_size(void);
extern void ps_stats_shmem_init(void);
extern void ps_stats_register_callbacks(void);

/* Counters of shards of the current database (MyDatabaseId) */
extern void ps_stats_add(const char *shard, const PsCounters *delta);
extern void ps_stats_add_at_commit(const char *shard, const PsCounters *delta);
extern void ps_stats_forget(const char *shard);
extern void ps_stats_compaction_failed(const char *shard, const char *message);

typedef void (*PsStatsVisitor) (const char *shard, const PsCounters *counters,
								const PsCompactionFailures *failures, void *arg);
extern void ps_stats_foreach(PsStatsVisitor fn, void *arg);
extern void ps_stats_reset_database(void);
extern void ps_stats_get_info(PsStatsInfo *info);

#endif							/* PS_STATS_H */
