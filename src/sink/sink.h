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
 * Each write has a ticket (SinkTicket), the one place its outcome is
 * decided and read.  sink_protocol.c makes every move of a ticket's and an
 * interval's state, and holds the tables of those moves and of the
 * outcomes; doc/architecture.md ("The outcome of a write") tells the
 * story.
 *
 * Locking: SinkShared->lock guards every field of SinkShared, of the
 * intervals and of the tickets (but a ticket's key and digest, which never
 * change once it is published), the hash, and the arena budgets.  Chunk
 * contents are written before a chunk is attached and read after it is
 * detached, so they are never touched under the lock.  The key epoch is
 * an atomic, read and moved without it (key_epoch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SINK_H
#define PS_SINK_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"

#include "base/background.h"
#include "base/base.h"
#include "base/settings.h"
#include "codec/part.h"
#include "codec/state.h"
#include "shard/shard.h"

#define PS_SINK_MAX_WORKERS		(64 + PS_MAX_DATABASES)	/* persist_sink.workers,
																 * then max_databases */
#define PS_SINK_MIN_SHARDS		1024	/* shards in the hash, at least */
#define PS_SINK_NO_WORKER		(-2)	/* ps_sink_open_interval: no worker
										 * slot is left for the database */
/*
 * A small write of at least this many payload bytes is encoded by its
 * worker while its interval is still open (sink_shared.c)
 */
#define PS_SINK_AHEAD_MIN_BYTES	(32 * 1024)

/*
 * Longest object store URL an interval tells its large writes (a longer one,
 * which S3's 1024-byte keys hardly leave room for, has them hand over
 * their parts' bytes to the worker instead)
 */
#define PS_SINK_STORE_URL_MAX	512

/* Where an interval is in the protocol (its moves: sink_protocol.c) */
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
	Oid			role;			/* whose share of the arena it takes */
	int			ticket;			/* index of the ticket of its write */
	uint64		ticket_id;		/* ... and that ticket's id */
	uint64		size;			/* payload bytes */
	PsPartInfo	info;			/* CHUNK_PART: what the part holds */
	PsPart		bounds;			/* CHUNK_PART: its lower and upper bounds
								 * (only those) */
	uint64		nupdates;		/* CHUNK_SMALL: updates in the payload */
	bool		put;			/* CHUNK_PART: its writer put it in the
								 * shard's object store; the payload is its
								 * key, not its bytes */
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
	bool		waiting_row;	/* waits for its shard's state row */
	bool		taking;			/* its worker takes parts, in the interval's
								 * transaction */
	char		parts_store[PS_SINK_STORE_URL_MAX]; /* once taking: the object
								 * store large writes put their parts in
								 * themselves ("" : hand over their bytes) */
	TransactionId blocked_by;	/* transaction that held the shard's state
								 * row when the worker last tried it */
	TimestampTz retry_at;		/* blocked: when the worker tries again */
	int			tickets_head;	/* its writes' tickets, in join order */
	int			tickets_tail;
	/* once IV_DONE (each write's outcome is in its ticket) */
	XLogRecPtr	flush_lsn;		/* WAL the outcomes rest on: its writers
								 * flush up to here before reporting them */
	char		message[256];	/* the interval's error, if it failed */
	ConditionVariable cv;		/* state changes */
} SinkInterval;

/* Bytes of the digest of a write's content (SHA-256), for idempotency keys */
#define PS_DIGEST_LEN			32

/* Where a write is in the protocol (its moves: sink_protocol.c) */
typedef enum SinkTicketState
{
	TK_FREE = 0,
	TK_JOINED,					/* in an interval not yet sealed: the writer
								 * may withdraw it */
	TK_WITHDRAWN,				/* withdrawn while its chunk was being
								 * encoded ahead: the worker frees it */
	TK_SEALED,					/* taken to commit: the worker decides */
	TK_DONE						/* the outcome is set */
} SinkTicketState;

/* What the worker made of a sealed write; final only once it is done */
typedef enum SinkVerdict
{
	VD_WRITE = 0,				/* in the interval's batch */
	VD_REPEAT_STORED,			/* its key was committed with equal content */
	VD_CONFLICT_STORED,			/* ... with other content: PS005 */
	VD_REPEAT_HERE,				/* an earlier write of the interval has its
								 * key and equal content */
	VD_CONFLICT_HERE,			/* ... and other content */
	VD_REFUSED					/* its diffs overflow the shared part: 22003 */
} SinkVerdict;

/*
 * One write's ticket: its key and digest (set before it is published,
 * never changed), its state and its outcome.  Every field but those is
 * read and written under the sink lock; the verdict is the worker's alone
 * until the ticket is done.
 */
typedef struct SinkTicket
{
	uint64		id;				/* never reused; 0 while free */
	SinkTicketState state;
	int			next;			/* next of its interval, or of the free list */
	int			interval;
	bool		large;
	bool		writer_waits;	/* the writer will read the outcome */
	bool		encoding;		/* its chunk is being encoded ahead */
	TimestampTz arrived_at;		/* when the append was called */
	SinkVerdict verdict;
	int			first;			/* VD_*_HERE: the ticket it follows */
	int64		stored_time;	/* VD_REPEAT_STORED: the time of the key */
	/* the outcome, once TK_DONE: a time, or an error */
	int64		time;
	int			sqlerrcode;
	bool		refused;		/* the error: its diffs' sums leave bigint */
	bool		has_key;
	uint64		key_epoch;		/* when its key was looked up on arrival */
	char		digest[PS_DIGEST_LEN];
	char		key[PS_MAX_IDEMPOTENCY_KEY + 1];
} SinkTicket;

/*
 * A sink worker.  The first persist_sink.workers serve the shards of
 * persist_sink.database, from server start; the others are claimed one
 * per database with appends in flight, each started then (a dynamic
 * background worker) and given up by its worker after
 * persist_sink.worker_idle_timeout without work, or when its database is
 * dropped.
 */
typedef struct SinkWorkerSlot
{
	struct PGPROC *proc;		/* NULL while not running */
	bool		refused;		/* refused a background worker slot at
								 * server start: it never runs */
	PsSlotClaim claim;			/* past the first ones: a database's claim */
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
	uint64		next_ticket_id;
	int			free_head;		/* free intervals */
	int			free_ticket;	/* free tickets */
	int			ntickets;
	int			nintervals;
	uint64		incarnation;	/* when this shared memory was set up */
	pg_atomic_uint64 key_epoch; /* counts commits that recorded keys
								 * (key_epoch.c) */
	SinkWorkerSlot workers[PS_SINK_MAX_WORKERS];
	/* the arena (a DSA area created in place) follows */
} SinkShared;

extern SinkShared *ps_sink;
extern SinkInterval *ps_sink_intervals;
extern SinkTicket *ps_sink_tickets;

/* What the sink holds, for monitoring */
typedef struct SinkUsage
{
	uint64		budget;			/* bytes of each budget */
	uint64		small_used;		/* small writes' bytes in the arena */
	uint64		parts_used;		/* large writes' parts' bytes in the arena */
	int			intervals;		/* interval slots in use */
	int			blocked;		/* of them, waiting for a held state row */
} SinkUsage;

/* How far an append() call has come, for the error it raises */
typedef enum SinkCallPhase
{
	SP_READING,					/* reading, sorting or digesting its updates */
	SP_LOOKUP,					/* keyed: its key is being looked up */
	SP_BEFORE_JOIN,				/* its key was not recorded on arrival (or it
								 * has none); it has no ticket yet */
	SP_JOINED,					/* it holds a ticket: given up, its write is
								 * withdrawn unless sealed */
	SP_RESULT,					/* its ticket is done: the outcome is the
								 * ticket's */
	SP_TOLD,					/* its outcome was decided: an error stands */
	SP_RETURNED					/* an append of the statement returned a time */
} SinkCallPhase;

/* What a call knows of its write, for its outcome (ps_sink_outcome) */
typedef struct SinkKnown
{
	bool		keyed;			/* it has an idempotency key */
	bool		rival;			/* a write with its key was in flight */
	bool		withdrawn;		/* SP_JOINED: left out of the commit */
	bool		refused;		/* SP_RESULT: the ticket's refusal */
	int			code;			/* SP_RESULT: the ticket's error, or 0 */
	const char *message;		/* SP_RESULT: the interval's error */
	const char *key;			/* its idempotency key, if keyed */
} SinkKnown;

/* What an append() call's caller gets (the table in sink_protocol.c) */
typedef enum SinkOutcome
{
	SO_TIME,					/* the ticket's time */
	SO_STANDS,					/* the error, as it is */
	SO_NOT_WRITTEN,				/* the error, its DETAIL: nothing written */
	SO_KEY_UNKNOWN,				/* 40003: interrupted before it could tell
								 * whether its key was used */
	SO_RIVAL_IN_FLIGHT,			/* 40003: withdrawn while a write with its
								 * key was in flight */
	SO_MAY_COMMIT,				/* 40003: interrupted after the seal */
	SO_KEY_CONFLICT,			/* PS005: its key was used for other content */
	SO_REFUSED,					/* 22003: its diffs' sums leave bigint */
	SO_FAILED,					/* its interval's error: nothing written */
	SO_WRITTEN_EARLIER			/* 40003: an append of the statement was
								 * written */
} SinkOutcome;

/* sink_protocol.c */
extern SinkOutcome ps_sink_outcome(SinkCallPhase phase, const SinkKnown *known,
								   int sqlerrcode);
extern void ps_sink_raise_outcome(SinkOutcome oc, const char *shard,
								  const SinkKnown *known,
								  const ErrorData *edata) pg_attribute_noreturn();
extern ErrorData *ps_sink_caught_error(MemoryContext cxt);
extern void ps_sink_rethrow(SinkCallPhase phase, const SinkKnown *known,
							const char *shard, MemoryContext cxt) pg_attribute_noreturn();
extern void ps_sink_rewrite_written(ErrorData *edata, int calls,
									const char *shard, int64 time);
extern void ps_sink_ticket_move(SinkTicket *tk, SinkTicketState from,
								SinkTicketState to);
extern void ps_sink_interval_move(SinkInterval *iv, SinkIntervalState from,
								  SinkIntervalState to);
extern void ps_sink_ticket_decide(SinkTicket *tk, bool committed, int64 time,
								  int code);

/* sink_shared.c */
extern bool ps_sink_encode_ahead(int worker);
extern void ps_sink_forget_ahead(int index);
extern uint64 ps_sink_build_shared(int index, const char *store,
								   PsBatch *shared, PsWriteCounts *counts);

/* key_epoch.c */
extern uint64 ps_sink_key_epoch(void);
extern void ps_sink_key_epoch_move(void);

/* sink_shmem.c */
extern Size ps_sink_shmem_size(void);
extern void ps_sink_shmem_init(void);
extern void ps_sink_note_refused(int worker);
extern dsa_area *ps_sink_arena(void);
extern dsa_pointer ps_sink_alloc(SinkChunkKind kind, uint64 payload, bool wait);
extern void ps_sink_free(dsa_pointer chunk);
extern void ps_sink_free_list(dsa_pointer head);
extern bool ps_sink_stopped(const char *shard);
extern int	ps_sink_open_interval(const char *shard);
extern bool ps_sink_wave_joined(const SinkInterval *iv);
extern int	ps_sink_take_ready(int worker, TimestampTz now, long *sleep_ms);
extern void ps_sink_release(SinkInterval *iv);
extern void ps_sink_finish(SinkInterval *iv);
extern void ps_sink_drop_if_abandoned(SinkInterval *iv);
extern bool ps_sink_abandoned(const SinkInterval *iv);
extern void ps_sink_usage(SinkUsage *usage);
extern void ps_sink_state_row_released(const char *shard);
extern void ps_sink_set_blocked(SinkInterval *iv, bool blocked,
								TransactionId holder, TimestampTz retry_at);
extern TimestampTz ps_sink_retry_at(const SinkInterval *iv);
extern TransactionId ps_sink_blocker(const SinkInterval *iv);
extern int	ps_sink_in_flight(const char *shard);

/* sink_slots.c */
extern int	ps_sink_worker_for(const char *shard);
extern bool ps_sink_claim_slot(int slot, PsWorkerClaim *claim, bool attach);
extern bool ps_sink_give_up_slot(int slot, bool idle);
extern void ps_sink_stop_database(Oid database);

/* sink_tickets.c */
extern int	ps_sink_ticket_take(void);
extern void ps_sink_ticket_free(int t, SinkTicketState from);
extern void ps_sink_ticket_link(SinkInterval *iv, int t);
extern bool ps_sink_ticket_unlink(SinkInterval *iv, int t);
extern bool ps_sink_ticket_live(int t, uint64 id);
extern bool ps_sink_unlink_small(SinkInterval *iv, dsa_pointer chunk);
extern dsa_pointer ps_sink_small_of(const SinkInterval *iv, int t);
extern dsa_pointer ps_sink_drop_write(SinkInterval *iv, int t, dsa_pointer small,
									  SinkTicketState from);
extern bool ps_sink_key_in_flight(const char *shard, const char *key, int except);

/* sink_writer.c */

/*
 * A write's updates, sorted and consolidated, read a slice at a time: a
 * write too large to hold in memory (ps_sink_append_stream).  next fills
 * *out with the next updates, at most max_raw raw bytes of them but at
 * least one, valid until the next call, and returns false at the end;
 * rewind goes back to the first.
 */
typedef struct PsUpdateStream PsUpdateStream;
struct PsUpdateStream
{
	bool		(*next) (PsUpdateStream *s, uint64 max_raw, PsUpdateArrays *out);
	void		(*rewind) (PsUpdateStream *s);
	uint64		n;				/* updates in all */
};

extern void ps_sink_install_hooks(void);
extern int64 ps_sink_append(const char *shard, PsUpdateArrays *w,
							const char *idempotency_key);
extern int64 ps_sink_append_stream(const char *shard, PsUpdateStream *s,
								   const char *idempotency_key);
extern void ps_sink_rethrow_before_lookup(const char *shard, const char *key,
										  MemoryContext cxt);

/* sink_worker.c */
extern void ps_sink_register_workers(void);
PGDLLEXPORT void ps_sink_worker_main(Datum arg);

#endif							/* PS_SINK_H */
