/*-------------------------------------------------------------------------
 *
 * compaction_queue.c
 *	  The queue of shards waiting for the compactor, in its own shared
 *	  memory under its own LWLock.
 *
 * Writers ask for compaction of a shard once the append that grew it is
 * committed.  The queue holds PS_COMPACT_QUEUE names; a request that does
 * not fit sets `overflow`, which makes a compactor look at every shard.
 *
 * persist_sink.database has persist_sink.compactors compactors, from
 * server start; every other database whose shards are queued gets one,
 * started then (a dynamic background worker), which exits after
 * persist_sink.worker_idle_timeout with nothing queued, or when its
 * database is dropped.  Each compactor has a slot here.  A
 * slot records the shard its compactor is merging, so that a transaction
 * that drops that shard can tell it to stop, and the run it merges (its
 * claim, by the lower bounds of the run's first and last batches), so that
 * another compactor of the same shard picks a run disjoint from it: while
 * one compactor spends seconds on a run of large batches, another merges
 * the small ones appended meanwhile.  A claim only steers the choice; the
 * merge's CaS is what keeps concurrent merges of one shard correct.
 *
 * Locking: CompactionQueue->lock guards every field.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "base/settings.h"
#include "shard/compact.h"
#include "shard/upper_wait.h"

/* Shards waiting for the compactors */
#define PS_COMPACT_QUEUE		64

/*
 * Compactor slots: persist_sink.compactors, then one per other database
 * (persist_sink.max_databases)
 */
#define PS_COMPACTOR_SLOTS		(PS_MAX_COMPACTORS + PS_MAX_DATABASES)

/* A shard, of a database */
typedef struct QueuedShard
{
	Oid			database;
	bool		collect;		/* its garbage is to be collected */
	char		shard[PS_MAX_SHARD_NAME + 1];
} QueuedShard;

/* What one compactor is doing */
typedef struct CompactorSlot
{
	PGPROC	   *proc;			/* NULL while not running */
	PsSlotClaim claim;			/* its database (past persist_sink.compactors:
								 * the database's claim on it) */
	char		shard[PS_MAX_SHARD_NAME + 1];	/* being compacted; "" if none */
	bool		dropped;		/* that shard was dropped: stop */
	bool		claimed;		/* a run of it is being merged, the batches */
	int64		claim_first;	/* whose lower bounds are in [claim_first, */
	int64		claim_last;		/* claim_last] */
} CompactorSlot;

typedef struct CompactionQueue
{
	LWLock	   *lock;
	int			refused;		/* compactors refused a background worker
								 * slot at server start: they never run */
	int			nqueued;
	bool		overflow;		/* a request did not fit: scan every shard */
	Oid			home;			/* persist_sink.database, once known */
	uint64		incarnation;	/* when this shared memory was set up */
	QueuedShard queue[PS_COMPACT_QUEUE];
	CompactorSlot compactors[PS_COMPACTOR_SLOTS];
} CompactionQueue;

static CompactionQueue *queue = NULL;

/* A shard this transaction asked to compact, or dropped, once it commits */
typedef struct AtCommit
{
	SubTransactionId subid;		/* the subtransaction that asked */
	bool		drop;			/* stop a merge of it, rather than request one */
	bool		collect;		/* the request asks for its garbage collected */
	char		shard[FLEXIBLE_ARRAY_MEMBER];
} AtCommit;

/* AtCommit entries of the current transaction, in TopTransactionContext */
static List *at_commit = NIL;

/* This compactor's slot; NULL outside the compactors */
static CompactorSlot *my_slot = NULL;

/* Compactors the postmaster refused a slot (counted in _PG_init) */
static int	refused_at_start = 0;

/* Shared memory of the queue. */
Size
ps_compaction_shmem_size(void)
{
	return MAXALIGN(sizeof(CompactionQueue));
}

/* Creates or attaches the queue; caller holds AddinShmemInitLock. */
void
ps_compaction_shmem_init(void)
{
	bool		found;

	queue = ShmemInitStruct("persist_sink compaction queue",
							ps_compaction_shmem_size(), &found);
	if (found)
		return;
	memset(queue, 0, sizeof(CompactionQueue));
	queue->lock = &(GetNamedLWLockTranche("persist_sink compaction"))->lock;
	queue->refused = refused_at_start;
	queue->incarnation = (uint64) GetCurrentTimestamp();
	/* requests queued before a crash are gone: look at every shard */
	queue->overflow = true;
}

/* Counts a compactor refused a slot; called from _PG_init. */
void
ps_compaction_note_refused(void)
{
	refused_at_start++;
}

/* The slot claimed by a database other than persist_sink.database, or -1. */
static int
claimed_slot(Oid database)
{
	for (int i = ps_compactors; i < ps_compactors + ps_max_databases; i++)
		if (queue->compactors[i].claim.database == database)
			return i;
	return -1;
}

/*
 * True if a compactor of this database is running; sets *refused if every
 * compactor it has was refused a slot (at server start, or when started).
 * Takes the queue lock.
 */
bool
ps_compactor_running(bool *refused)
{
	bool		running = false;
	int			i;

	LWLockAcquire(queue->lock, LW_SHARED);
	if (ps_home_database())
	{
		for (i = 0; i < ps_compactors; i++)
			running |= queue->compactors[i].proc != NULL;
		*refused = queue->refused >= ps_compactors;
	}
	else
	{
		i = claimed_slot(MyDatabaseId);
		running = i >= 0 && queue->compactors[i].proc != NULL;
		*refused = i >= 0 && queue->compactors[i].claim.refused;
	}
	LWLockRelease(queue->lock);
	return running;
}

/* Starts the compactor of slot i; caller holds the queue lock exclusively. */
static void
start_compactor(int i)
{
	ps_slot_start_worker(&queue->compactors[i].claim, "ps_compactor_main",
						 "persist_sink compactor", i, queue->incarnation);
}

/*
 * Makes sure a database other than persist_sink.database has a compactor:
 * claims a free slot and starts one if it has none (or its last start was
 * refused and it is not running).  Nothing if every slot is claimed (its
 * requests wait).  Caller holds the queue lock exclusively.
 */
static void
ensure_compactor(Oid database)
{
	int			i = claimed_slot(database);

	if (i >= 0)
	{
		if (queue->compactors[i].claim.refused && queue->compactors[i].proc == NULL)
			start_compactor(i);
		return;
	}
	for (i = ps_compactors; i < ps_compactors + ps_max_databases; i++)
	{
		if (OidIsValid(queue->compactors[i].claim.database))
			continue;
		ps_slot_claim(&queue->compactors[i].claim, database);
		start_compactor(i);
		return;
	}
}

/*
 * True if a compactor takes the requests of database: those of
 * persist_sink.database, and of databases with a slot.  Caller holds the
 * queue lock.
 */
static bool
served(Oid database)
{
	return database == queue->home || claimed_slot(database) >= 0;
}

/*
 * Adds a shard of a database to the queue unless it is there (then adds
 * collect to its request), or notes the overflow if the queue is full, and
 * wakes every compactor (a busy one may be merging another run of the
 * shard).  Caller holds the queue lock exclusively.
 */
static void
enqueue(Oid database, const char *shard, bool collect)
{
	bool		queued = false;

	for (int i = 0; i < queue->nqueued && !queued; i++)
		if (queue->queue[i].database == database &&
			strcmp(queue->queue[i].shard, shard) == 0)
		{
			queued = true;
			queue->queue[i].collect |= collect;
		}
	if (!queued && queue->nqueued < PS_COMPACT_QUEUE)
	{
		queue->queue[queue->nqueued].database = database;
		queue->queue[queue->nqueued].collect = collect;
		strlcpy(queue->queue[queue->nqueued++].shard, shard, PS_MAX_SHARD_NAME + 1);
	}
	else if (!queued)
		queue->overflow = true;
	/* (a request is always of the requesting process's database) */
	Assert(database == MyDatabaseId);
	if (!ps_home_database())
		ensure_compactor(database);
	for (int i = 0; i < PS_COMPACTOR_SLOTS; i++)
		if (queue->compactors[i].proc)
			SetLatch(&queue->compactors[i].proc->procLatch);
}

/*
 * Queues a shard of this database for background compaction, and with
 * collect for the collection of its garbage; takes the queue lock.
 */
static void
request(const char *shard, bool collect)
{
	if (queue == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	enqueue(MyDatabaseId, shard, collect);
	LWLockRelease(queue->lock);
}

/* Queues a shard of this database for background compaction; takes the queue lock. */
void
ps_compaction_request(const char *shard)
{
	request(shard, false);
}

/* Tells the compactors to stop merging a dropped shard; takes the queue lock. */
static void
stop_compaction(const char *shard)
{
	if (queue == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	for (int i = 0; i < PS_COMPACTOR_SLOTS; i++)
		if (queue->compactors[i].claim.database == MyDatabaseId &&
			strcmp(queue->compactors[i].shard, shard) == 0)
			queue->compactors[i].dropped = true;
	LWLockRelease(queue->lock);
}

/*
 * Sends the requests and drops of a committed transaction; forgets an
 * aborted one's.  A transaction that has some cannot be prepared: its
 * requests would have to outlive the session that prepared it.
 */
static void
queue_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (at_commit == NIL)
		return;
	if (event == XACT_EVENT_PRE_PREPARE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has written to a persist_sink shard"),
				 errdetail("compare_and_append() and drop_shard() take effect only in a transaction that commits directly.")));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		foreach(lc, at_commit)
		{
			AtCommit   *a = lfirst(lc);

			if (a->drop)
			{
				stop_compaction(a->shard);
				ps_upper_notify(a->shard);
			}
			else
			{
				request(a->shard, a->collect);
				ps_upper_notify(a->shard);
			}
		}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	/* their memory goes with the transaction */
	at_commit = NIL;
}

/* Forgets an aborted subtransaction's entries; passes a committed one's up. */
static void
queue_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, at_commit)
	{
		AtCommit   *a = lfirst(lc);

		if (a->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			a->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			at_commit = foreach_delete_current(at_commit, lc);
	}
}

/* Registers the transaction callbacks that send requests at commit. */
void
ps_compaction_register_callbacks(void)
{
	RegisterXactCallback(queue_xact_callback, NULL);
	RegisterSubXactCallback(queue_subxact_callback, NULL);
}

/* Adds an entry that lives until the end of the transaction. */
static void
remember_until_commit(const char *shard, bool drop, bool collect)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	AtCommit   *a = palloc(offsetof(AtCommit, shard) + strlen(shard) + 1);

	a->subid = GetCurrentSubTransactionId();
	a->drop = drop;
	a->collect = collect;
	strcpy(a->shard, shard);
	at_commit = lappend(at_commit, a);
	MemoryContextSwitchTo(old);
}

/*
 * Queues a shard for compaction when the current transaction commits: before
 * that, the compactor cannot see the batches it added.  With collect, the
 * compactor also collects the shard's garbage (objects of an object-store
 * shard that compact() replaced or drop_shard() dropped).
 */
void
ps_compaction_request_at_commit(const char *shard, bool collect)
{
	/* known now: the request is sent after the commit, with no catalog access */
	(void) ps_home_database();
	remember_until_commit(shard, false, collect);
}

/*
 * Stops a merge of the shard in progress when the current transaction (which
 * dropped the shard) commits: the merge could never be swapped in.
 */
void
ps_compaction_stop_at_commit(const char *shard)
{
	remember_until_commit(shard, true, false);
}

/*
 * In the compactor, errors out of the merge of shard if the shard was dropped
 * meanwhile; elsewhere (compact()) does nothing.  Takes the queue lock.
 */
void
ps_compaction_check_dropped(const char *shard)
{
	bool		dropped;

	if (my_slot == NULL)
		return;
	LWLockAcquire(queue->lock, LW_SHARED);
	dropped = my_slot->dropped;
	LWLockRelease(queue->lock);
	if (dropped)
	{
		ereport(LOG,
				(errmsg("persist_sink: compaction of shard \"%s\" stopped: the shard was dropped",
						shard)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("shard \"%s\" was dropped during its compaction", shard)));
	}
}

/* True if this process is a compactor started for another database. */
static bool
on_demand(void)
{
	return my_slot != NULL && my_slot - queue->compactors >= ps_compactors;
}

/*
 * Frees the slot of a compactor started for another database (a later
 * request of that database starts another).  Caller holds the queue lock
 * exclusively.
 */
static void
free_claimed_slot(CompactorSlot *slot)
{
	PsSlotClaim claim = slot->claim;

	memset(slot, 0, sizeof(CompactorSlot));
	slot->claim = claim;
	ps_slot_free(&slot->claim);
}

/*
 * Forgets this process as a compactor, queueing again the shard it was
 * compacting (its request was taken, the merges it calls for may not be
 * done), unless its database is being dropped; takes the queue lock.
 */
static void
compactor_detach(int code, Datum arg)
{
	bool		requeue;
	char		shard[PS_MAX_SHARD_NAME + 1];

	if (my_slot == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	requeue = my_slot->shard[0] != '\0' && !my_slot->dropped && !my_slot->claim.stop;
	strlcpy(shard, my_slot->shard, sizeof(shard));
	if (on_demand())
		free_claimed_slot(my_slot);
	else
		memset(my_slot, 0, sizeof(CompactorSlot));
	my_slot = NULL;
	/* (whether its request asked for a collection is not kept: ask again) */
	if (requeue)
		enqueue(MyDatabaseId, shard, true);
	LWLockRelease(queue->lock);
}

/*
 * Checks that compactor slot i is still that of claim, the claim a
 * compactor started for another database was started for, bringing the
 * claim up to date (after shared memory was reset, a compactor restarted
 * claims its slot again if it is free); false if it was given up since or
 * claimed by another database.  Takes the queue lock.
 */
bool
ps_compaction_claim_slot(int i, PsWorkerClaim *claim)
{
	CompactorSlot *slot = &queue->compactors[i];
	bool		mine;

	Assert(i >= ps_compactors && i < PS_COMPACTOR_SLOTS);
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	mine = ps_slot_is_mine(&slot->claim, claim, queue->incarnation, slot->proc != NULL);
	LWLockRelease(queue->lock);
	return mine;
}

/*
 * Records this process as compactor number i, woken by requests; false
 * (for a compactor of another database) if its slot is no longer that of
 * claim.  Takes the queue lock.
 */
bool
ps_compaction_attach_compactor(int i, const PsWorkerClaim *claim)
{
	CompactorSlot *slot = &queue->compactors[i];

	Assert(i >= 0 && i < PS_COMPACTOR_SLOTS);
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	if (i < ps_compactors)
	{
		memset(slot, 0, sizeof(CompactorSlot));
		queue->home = MyDatabaseId;
	}
	else if (slot->claim.database != claim->database || slot->proc != NULL ||
			 slot->claim.generation != claim->generation)
	{
		LWLockRelease(queue->lock);
		return false;
	}
	my_slot = slot;
	my_slot->claim.database = MyDatabaseId;
	my_slot->proc = MyProc;
	my_slot->claim.refused = false;
	LWLockRelease(queue->lock);
	before_shmem_exit(compactor_detach, (Datum) 0);
	return true;
}

/*
 * In a compactor started for another database, gives up its slot if its
 * database is being dropped, or if it was idle (idle is true) and nothing
 * of its database is queued; true if it did (the compactor then exits).
 * Takes the queue lock.
 */
bool
ps_compaction_give_up(bool idle)
{
	bool		queued = false;
	bool		give_up;

	if (!on_demand())
		return false;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	for (int i = 0; i < queue->nqueued; i++)
		queued |= queue->queue[i].database == MyDatabaseId;
	give_up = my_slot->claim.stop || (idle && !queued);
	if (give_up)
	{
		free_claimed_slot(my_slot);
		my_slot = NULL;
	}
	LWLockRelease(queue->lock);
	return give_up;
}

/*
 * Tells the compactor of a database being dropped to exit, and frees its
 * slot at once if none runs.  Takes the queue lock.
 */
void
ps_compaction_stop_database(Oid database)
{
	PGPROC	   *wake = NULL;
	int			i;

	if (queue == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	i = claimed_slot(database);
	if (i >= 0 && queue->compactors[i].proc != NULL)
	{
		queue->compactors[i].claim.stop = true;
		wake = queue->compactors[i].proc;
	}
	else if (i >= 0)
		free_claimed_slot(&queue->compactors[i]);
	LWLockRelease(queue->lock);
	if (wake)
		SetLatch(&wake->procLatch);
}

/*
 * Takes the oldest queued shard of this compactor's database into shard,
 * with *collect set if a request asked for its garbage to be collected;
 * false if none, with scan_all set if the queue overflowed since the last
 * scan.  Requests of databases no compactor serves (a database dropped, or
 * one that found every slot claimed) are dropped on the way.
 * Takes the queue lock.
 */
bool
ps_compaction_take(char *shard, bool *collect, bool *scan_all)
{
	bool		found = false;

	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	for (int i = 0; !found && i < queue->nqueued;)
	{
		Oid			database = queue->queue[i].database;

		found = database == MyDatabaseId;
		if (found)
		{
			strlcpy(shard, queue->queue[i].shard, PS_MAX_SHARD_NAME + 1);
			*collect = queue->queue[i].collect;
		}
		else if (served(database))
		{
			i++;
			continue;
		}
		queue->nqueued--;
		memmove(&queue->queue[i], &queue->queue[i + 1],
				sizeof(queue->queue[0]) * (queue->nqueued - i));
	}
	if (!found)
	{
		/* a queue that overflowed is drained first, then every shard scanned */
		*scan_all = queue->overflow;
		queue->overflow = false;
	}
	LWLockRelease(queue->lock);
	return found;
}

/* Asks for a scan of every shard later (one was cut short); takes the queue lock. */
void
ps_compaction_owe_scan(void)
{
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	queue->overflow = true;
	LWLockRelease(queue->lock);
}

/*
 * Records shard as the one this compactor compacts, or none if NULL, with
 * no run claimed; takes the queue lock.
 */
void
ps_compaction_set_current(const char *shard)
{
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	my_slot->claim.database = MyDatabaseId;
	strlcpy(my_slot->shard, shard ? shard : "", PS_MAX_SHARD_NAME + 1);
	my_slot->dropped = false;
	my_slot->claimed = false;
	LWLockRelease(queue->lock);
}

/*
 * The first batch of state (of this compactor's shard) after every run the
 * other compactors claimed; 0 if they claimed none.  Caller holds the
 * queue lock.
 */
static int
first_after_claims(const PsState *state)
{
	int			first = 0;

	for (int i = 0; i < ps_compactors; i++)
	{
		CompactorSlot *slot = &queue->compactors[i];

		if (slot == my_slot || !slot->claimed || slot->claim.database != my_slot->claim.database ||
			strcmp(slot->shard, my_slot->shard) != 0)
			continue;
		for (int b = first; b < state->nbatches; b++)
			if (state->batches[b].lower >= slot->claim_first &&
				state->batches[b].lower <= slot->claim_last)
				first = b + 1;
	}
	return first;
}

/*
 * Picks the run [from, to) of state, the state of this compactor's shard,
 * that it merges next with choose (ps_compact_choose, passed in: compact.c
 * calls this file), among the batches after the runs other compactors
 * claimed, and claims it; false if there is none.  Takes the queue lock.
 */
bool
ps_compaction_claim_run(const PsState *state, PsRunChooser choose,
						int *from, int *to)
{
	bool		found;

	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	/* with other compactors, a long merge leaves them the newest batches */
	found = choose(state, first_after_claims(state),
				   !on_demand() && ps_compactors > 1, from, to);
	my_slot->claimed = found;
	if (found)
	{
		my_slot->claim_first = state->batches[*from].lower;
		my_slot->claim_last = state->batches[*to - 1].lower;
	}
	LWLockRelease(queue->lock);
	return found;
}

/* Gives up this compactor's claim (its merge ended); takes the queue lock. */
void
ps_compaction_release_claim(void)
{
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	my_slot->claimed = false;
	LWLockRelease(queue->lock);
}
