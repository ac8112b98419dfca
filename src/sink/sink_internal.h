/*-------------------------------------------------------------------------
 *
 * sink_internal.h
 *	  What the files of the sink share and nothing outside it uses: the
 *	  worker's interval being processed, passed down through its steps.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SINK_INTERNAL_H
#define PS_SINK_INTERNAL_H

#include "nodes/pg_list.h"

#include "shard/shard.h"
#include "sink/sink.h"

/* A part written by the worker, with the write (ticket) it came from */
typedef struct WrittenPart
{
	int			ticket;
	uint64		ticket_id;
	PsPart		part;
} WrittenPart;

/*
 * The interval a worker is processing, and how far its commit has come:
 * set up by process_interval and passed down to each step of the commit.
 */
typedef struct SinkRun
{
	int			index;			/* the interval, or -1 while none */
	SinkInterval *iv;
	bool		committed;		/* its transaction committed */
	bool		nothing;		/* ... or it had nothing left to commit */
	int64		time;			/* committed: at this time */
	XLogRecPtr	commit_lsn;		/* committed: its commit record's end */
	dsa_pointer taken;			/* parts taken, not yet freed */
	bool		state_read;		/* its shard's state has been read in its
								 * transaction: */
	bool		state_found;	/* ... the shard exists, */
	PsState		state;			/* ... its state then (in the work context) */
	bool		keys_recorded;	/* its transaction recorded keys: move the
								 * key epoch after it */
} SinkRun;

/* A sink worker process: its slot, its blocked intervals, its run */
typedef struct SinkWorker
{
	int			index;			/* its slot in SinkShared.workers */
	List	   *blocked;		/* intervals waiting for their state row's
								 * lock (int list, in TopMemoryContext) */
	SinkRun		run;			/* the interval being processed */
} SinkWorker;

/* sink_take.c: the parts of an interval's large writes */
extern const char *ps_sink_run_store(SinkRun *run);
extern void ps_sink_start_taking(SinkRun *run);
extern List *ps_sink_take_parts(SinkRun *run, PsWriteCounts *counts);
extern List *ps_sink_drop_abandoned(List *written, PsWriteCounts *counts);

/* sink_settle.c: the idempotency keys of an interval's writes */
extern void ps_sink_settle_keys(SinkInterval *iv);
extern List *ps_sink_leave_out_settled(SinkInterval *iv, List *written,
									   PsWriteCounts *counts);
extern int	ps_sink_count_to_write(SinkInterval *iv, int *small, int *large);
extern void ps_sink_store_keys(SinkRun *run, int64 time);
extern void ps_sink_keys_commit_ended(SinkRun *run);

#endif							/* PS_SINK_INTERNAL_H */
