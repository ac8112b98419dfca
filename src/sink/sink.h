/*-------------------------------------------------------------------------
 *
 * sink.h
 *	  The shared-batch sink: intervals in shared memory that backends join
 *	  and background workers commit.
 *
 * A write joins the open interval of its shard.  A small write (below
 * persist_sink.shared_batch_max_bytes) copies its sorted updates into the
 * staging arena before joining; a large one is encoded into parts by the
 * writer, which hands them over one at a time once a worker is processing
 * the interval.  The worker writes the large parts' blob rows as they come,
 * and once no writer is still handing over parts (the barrier) builds one
 * shared part from the small writes and commits everything with a single
 * compare_and_append, in one transaction.  Writers sleep on the interval's
 * condition variable until then.  The worker does not wait for its commit
 * to reach disk: each writer flushes the WAL up to the interval's
 * flush_lsn itself before it reports success, while the worker goes on
 * with the next interval.
 *
 * An open interval is found through a shared hash keyed by (database,
 * shard), which also remembers how many writes joined the shard's last
 * interval; each worker keeps its open intervals in a list, oldest first.
 *
 * Locking: SinkShared->lock guards every field of SinkShared and of the
 * intervals, the hash, and the arena budgets.  Chunk contents are written before a
 * chunk is attached and read after it is detached, so they are never
 * touched under the lock.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SINK_H
#define PS_SINK_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"

#include "base/base.h"
#include "codec/part.h"
#include "codec/state.h"
#include "shard/shard.h"

#define PS_SINK_MAX_INTERVALS	256
#define PS_SINK_MAX_WORKERS		64
#define PS_SINK_MAX_ABANDONED	32
#define PS_SINK_MAX_SHARDS		1024	/* shards in the hash */
/*
 * A small write of at least this many payload bytes is encoded by its
 * worker while its interval is still open (sink_shared.c)
 */
#define PS_SINK_AHEAD_MIN_BYTES	(32 * 1024)

typedef enum SinkIntervalState
{
	IV_FREE = 0,
	IV_OPEN,					/* writers may join */
	IV_PROCESSING,				/* a worker owns it; no new writers */
	IV_DONE						/* committed or failed; writers read the result */
} SinkIntervalState;

typedef enum SinkChunkKind
{
	CHUNK_SMALL,				/* sorted, consolidated raw updates */
	CHUNK_PART					/* one encoded part of a large write */
} SinkChunkKind;

/* Header of a chunk in the arena; its payload follows */
typedef struct SinkChunk
{
	dsa_pointer next;
	SinkChunkKind kind;
	uint64		writer;			/* id of the write it belongs to */
	int			procno;			/* pgprocno of that write's backend */
	uint64		size;			/* payload bytes */
	PsPartInfo	info;			/* CHUNK_PART: what the part holds */
	PsPart		lower;			/* CHUNK_PART: its lower bound (only that) */
	uint64		nupdates;		/* CHUNK_SMALL: updates in the payload */
} SinkChunk;

#define SINK_CHUNK_PAYLOAD(c)	((char *) (c) + MAXALIGN(sizeof(SinkChunk)))

typedef struct SinkInterval
{
	SinkIntervalState state;
	int			next;			/* next in its worker's open list or the free
								 * list; -1 at the end */
	Oid			database;
	char		shard[PS_MAX_SHARD_NAME + 1];
	int			worker;			/* index of the worker that serves the shard */
	uint64		seq;			/* order of creation, for fairness */
	TimestampTz opened_at;
	int			expected;		/* writers of the shard's previous interval */
	int			joined;			/* writes that joined */
	int			active_large;	/* large writes still handing over parts */
	int			waiters;		/* writers yet to read the result */
	dsa_pointer small_head;		/* attached small chunks */
	dsa_pointer parts_head;		/* attached parts not yet taken by the worker */
	dsa_pointer parts_tail;
	bool		poisoned;		/* too many cancelled writes: fail it */
	bool		committing;		/* the worker has taken the writes to commit:
								 * none can be withdrawn any more */
	bool		waiting_row;	/* waits for its shard's state row */
	TransactionId blocked_by;	/* transaction that held the shard's state
								 * row when the worker last tried it */
	TimestampTz retry_at;		/* blocked: when the worker tries again */
	int			nabandoned_small;	/* of them, small writes */
	int			nabandoned;
	uint64		abandoned[PS_SINK_MAX_ABANDONED];	/* writes withdrawn before
													 * the commit */
	int			nrejected;
	uint64		rejected[PS_SINK_MAX_ABANDONED];	/* small writes refused:
													 * diffs overflow */
	int			nsmall;
	int			nlarge;
	/* result, once IV_DONE */
	bool		failed;
	int64		time;
	XLogRecPtr	flush_lsn;		/* WAL the outcome rests on: its writers
								 * flush up to here before reporting it */
	int			sqlerrcode;
	char		message[256];
	ConditionVariable cv;		/* state changes */
} SinkInterval;

/* Bytes of the digest of a write's content, for idempotency keys */
#define PS_DIGEST_LEN			16

/*
 * The write a backend has in flight, indexed by its pgprocno: its
 * idempotency key, and the outcome the worker decided for it alone (a
 * retry of a committed write, or a key reused with other content).  The
 * backend fills the key before it joins an interval; the worker sets the
 * outcome under the sink lock.
 */
typedef struct SinkWriterSlot
{
	uint64		writer;			/* id of the write in flight, 0 if none */
	bool		has_key;
	char		key[PS_MAX_IDEMPOTENCY_KEY + 1];
	char		digest[PS_DIGEST_LEN];
	bool		decided;		/* the outcome below is this write's */
	int64		time;			/* decided: the time it is written at */
	int			sqlerrcode;		/* decided: 0, or PS005 */
} SinkWriterSlot;

typedef struct SinkWorkerSlot
{
	struct PGPROC *proc;		/* NULL while not running */
	bool		refused;		/* refused a background worker slot at
								 * server start: it never runs */
	int			open_head;		/* its open intervals, oldest first */
	int			open_tail;
} SinkWorkerSlot;

typedef struct SinkShared
{
	LWLock	   *lock;
	ConditionVariable space_cv; /* arena space or an interval slot freed */
	uint64		small_used;
	uint64		parts_used;
	uint64		budget;			/* per kind of chunk */
	uint64		next_seq;
	uint64		next_writer;
	int			free_head;		/* free intervals */
	SinkWorkerSlot workers[PS_SINK_MAX_WORKERS];
	SinkInterval intervals[PS_SINK_MAX_INTERVALS];
	/* the arena (a DSA area created in place) follows */
} SinkShared;

extern SinkShared *ps_sink;
extern SinkWriterSlot *ps_sink_writers;

/* What the sink holds, for monitoring */
typedef struct SinkUsage
{
	uint64		budget;			/* bytes of each budget */
	uint64		small_used;		/* small writes' bytes in the arena */
	uint64		parts_used;		/* large writes' parts' bytes in the arena */
	int			intervals;		/* interval slots in use */
	int			blocked;		/* of them, waiting for a held state row */
} SinkUsage;

/* sink_shared.c */
extern bool ps_sink_encode_ahead(int worker);
extern void ps_sink_forget_ahead(int index);
extern uint64 ps_sink_build_shared(int index, PsBatch *shared,
								   PsWriteCounts *counts);

/* sink_shmem.c */
extern Size ps_sink_shmem_size(void);
extern void ps_sink_shmem_init(void);
extern void ps_sink_note_refused(int worker);
extern dsa_area *ps_sink_arena(void);
extern dsa_pointer ps_sink_alloc(SinkChunkKind kind, uint64 payload, bool wait);
extern void ps_sink_free(dsa_pointer chunk);
extern int	ps_sink_worker_for(const char *shard);
extern bool ps_sink_stopped(const char *shard);
extern int	ps_sink_open_interval(const char *shard);
extern bool ps_sink_wave_joined(const SinkInterval *iv);
extern int	ps_sink_take_ready(int worker, TimestampTz now, long *sleep_ms);
extern void ps_sink_release(SinkInterval *iv);
extern void ps_sink_finish(SinkInterval *iv);
extern void ps_sink_usage(SinkUsage *usage);
extern void ps_sink_set_blocked(SinkInterval *iv, bool blocked,
								TransactionId holder);
extern TransactionId ps_sink_blocker(const SinkInterval *iv);
extern bool ps_sink_withdraw(SinkInterval *iv, uint64 writer);
extern bool ps_sink_is_withdrawn(const SinkInterval *iv, uint64 writer);
extern int	ps_sink_in_flight(const char *shard);

/* sink_writer.c */
extern int64 ps_sink_append(const char *shard, PsUpdateArrays *w,
							const char *idempotency_key);

/* sink_worker.c */
extern void ps_sink_register_workers(void);
PGDLLEXPORT void ps_sink_worker_main(Datum arg);

#endif							/* PS_SINK_H */
