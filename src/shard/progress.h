/*-------------------------------------------------------------------------
 *
 * progress.h
 *	  Progress of the merges in progress, one slot per backend in shared
 *	  memory, behind the compaction_progress view.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_PROGRESS_H
#define PS_PROGRESS_H

#include "datatype/timestamp.h"

#include "base/base.h"

/* Who runs a merge */
typedef enum PsProgressCommand
{
	PS_PROGRESS_BACKGROUND,		/* the background compactor */
	PS_PROGRESS_COMPACT			/* a compact() call */
} PsProgressCommand;

/* Where a merge is */
typedef enum PsProgressPhase
{
	PS_PROGRESS_MERGING,		/* reading the run, writing the merged parts */
	PS_PROGRESS_SWAPPING		/* swapping the merged batch in by CaS */
} PsProgressPhase;

/* One merge in progress, as a reader sees it */
typedef struct PsProgress
{
	int			pid;
	Oid			database;
	PsProgressCommand command;
	PsProgressPhase phase;
	char		shard[PS_MAX_SHARD_NAME + 1];
	int			batches;		/* batches in the run */
	int64		updates_total;	/* updates the run's batches hold */
	int64		updates_merged; /* of them, read so far */
	int64		bytes_written;	/* encoded bytes of the merged parts so far */
	TimestampTz started_at;
} PsProgress;

extern Size ps_progress_shmem_size(void);
extern void ps_progress_shmem_init(void);

/* The current backend's merge */
extern void ps_progress_begin(PsProgressCommand command, const char *shard,
							  int batches, int64 updates_total);
extern void ps_progress_update(int64 updates_merged, int64 bytes_written);
extern void ps_progress_set_phase(PsProgressPhase phase, int64 updates_merged,
								  int64 bytes_written);
extern void ps_progress_end(void);

typedef void (*PsProgressVisitor) (const PsProgress *progress, void *arg);
extern void ps_progress_foreach(PsProgressVisitor fn, void *arg);

#endif							/* PS_PROGRESS_H */
