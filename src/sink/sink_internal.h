/*-------------------------------------------------------------------------
 *
 * sink_internal.h
 *	  What the files of the sink share and nothing outside it uses: an
 *	  append() call's state, passed down through the writer's steps, and
 *	  the worker's interval being processed, passed down through its.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SINK_INTERNAL_H
#define PS_SINK_INTERNAL_H

#include "nodes/pg_list.h"

#include "shard/shard.h"
#include "sink/sink.h"

/* Serialized size of one update in a small chunk */
#define SMALL_UPDATE_SIZE(u)	(4 + 4 + 8 + (uint64) (u)->key_len + (u)->val_len)

/*
 * An append() call, from its arrival to its outcome: how far it has come
 * (for the error it raises: ps_sink_outcome), what it knows of its key, and
 * its hold on an interval and a ticket once it joined (for cleanup on
 * error or exit).  Made by append_through_sink and passed down to each
 * step; in the backend's memory, never shared.
 */
typedef struct SinkCall
{
	const char *shard;
	MemoryContext cxt;			/* the memory context the call runs in */
	SinkCallPhase phase;
	SinkTicket	proto;			/* its ticket-to-be: key, digest, arrival,
								 * kind */
	bool		rival_at_arrival;	/* a write with its key was in flight when
									 * it arrived: withdrawn, it cannot say
									 * "nothing written" */
	bool		digest_pending; /* keyed small write: the digest is taken
								 * from its chunk once filled, or from its
								 * updates if its key is found on arrival */
	bool		key_held;		/* it holds the keys' window open from its
								 * arrival (ps_idempotency_hold) */
	dsa_pointer unattached;		/* its small chunk, not yet in an interval */
	int64		time;			/* its time, once it has one */
	/* once SP_JOINED */
	int			interval;
	int			ticket;
	uint64		ticket_id;
	dsa_pointer small;			/* its small chunk, in the interval */
	bool		handing;		/* a large write still handing over parts */
	bool		released;		/* the hold is given up already */
	bool		withdrawn;		/* ... and the write was left out of the
								 * commit */
	bool		rival;			/* ... while a write of its key was in flight */
} SinkCall;

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

/* sink_keyed.c: digests and the key's lookup on arrival */
extern void ps_sink_serialize_small(char *p, const PsUpdate *u, int n);
extern void ps_sink_write_digest(PsUpdateStream *s, char *digest);
extern void ps_sink_chunk_digest(const char *payload, uint64 size, char *digest);
extern bool ps_sink_settled_on_arrival(SinkCall *call, PsUpdateStream *s);

/* sink_join.c: joining an interval, waiting on it, its outcome */
extern struct PGPROC *ps_sink_worker_of(const SinkInterval *iv);
extern void ps_sink_wake(struct PGPROC *worker);
extern SinkInterval *ps_sink_join(SinkCall *call);
extern void ps_sink_give_up(SinkCall *call);
extern void ps_sink_wait_for_state(SinkInterval *iv, SinkIntervalState until);
extern int64 ps_sink_take_result(SinkCall *call);
extern int64 ps_sink_append_small(SinkCall *call, const PsUpdateArrays *w);

/* sink_large.c: a large write's parts */
extern int64 ps_sink_append_large(SinkCall *call, PsUpdateStream *s);

/* sink_backpressure.c */
extern void ps_sink_wait_for_compaction(const char *shard);

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
