/*-------------------------------------------------------------------------
 *
 * compaction_queue.c
 *	  The queue of shards waiting for the compactor, in its own shared
 *	  memory under its own LWLock.
 *
 * Writers ask for compaction of a shard once the append that grew it is
 * committed.  The queue holds PS_COMPACT_QUEUE names; a request that does
 * not fit sets `overflow`, which makes the compactor look at every shard.
 * The compactor records the shard it is merging, so that a transaction
 * that drops that shard can tell it to stop.
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

#include "base/base.h"
#include "shard/compact.h"
#include "shard/upper_wait.h"

/* Shards waiting for the compactor */
#define PS_COMPACT_QUEUE		64

typedef struct CompactionQueue
{
	LWLock	   *lock;
	PGPROC	   *compactor;		/* NULL while not running */
	bool		compactor_refused;	/* refused a background worker slot at
									 * server start: it never runs */
	int			nqueued;
	bool		overflow;		/* a request did not fit: scan every shard */
	char		queue[PS_COMPACT_QUEUE][PS_MAX_SHARD_NAME + 1];
	char		compacting[PS_MAX_SHARD_NAME + 1];	/* "" when idle */
	bool		compacting_dropped; /* that shard was dropped: stop */
} CompactionQueue;

static CompactionQueue *queue = NULL;

/* A shard this transaction asked to compact, or dropped, once it commits */
typedef struct AtCommit
{
	SubTransactionId subid;		/* the subtransaction that asked */
	bool		drop;			/* stop a merge of it, rather than request one */
	char		shard[FLEXIBLE_ARRAY_MEMBER];
} AtCommit;

/* AtCommit entries of the current transaction, in TopTransactionContext */
static List *at_commit = NIL;

/* True in the compactor process */
static bool am_compactor = false;

/* The postmaster refused the compactor a slot (set in _PG_init) */
static bool refused_at_start = false;

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
	queue->compactor_refused = refused_at_start;
	/* requests queued before a crash are gone: look at every shard */
	queue->overflow = true;
}

/* Records that the compactor was refused a slot; called from _PG_init. */
void
ps_compaction_note_refused(void)
{
	refused_at_start = true;
}

/*
 * True if the compactor is running; sets *refused if it was refused a slot
 * at server start.  Takes the queue lock.
 */
bool
ps_compactor_running(bool *refused)
{
	bool		running;

	LWLockAcquire(queue->lock, LW_SHARED);
	running = queue->compactor != NULL;
	*refused = queue->compactor_refused;
	LWLockRelease(queue->lock);
	return running;
}

/* Queues a shard for background compaction; takes the queue lock. */
void
ps_compaction_request(const char *shard)
{
	bool		queued = false;

	if (queue == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	for (int i = 0; i < queue->nqueued && !queued; i++)
		queued = strcmp(queue->queue[i], shard) == 0;
	if (!queued && queue->nqueued < PS_COMPACT_QUEUE)
		strlcpy(queue->queue[queue->nqueued++], shard, PS_MAX_SHARD_NAME + 1);
	else if (!queued)
		queue->overflow = true;
	if (queue->compactor)
		SetLatch(&queue->compactor->procLatch);
	LWLockRelease(queue->lock);
}

/* Tells the compactor to stop merging a dropped shard; takes the queue lock. */
static void
stop_compaction(const char *shard)
{
	if (queue == NULL)
		return;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	if (strcmp(queue->compacting, shard) == 0)
		queue->compacting_dropped = true;
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
				ps_compaction_request(a->shard);
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
remember_until_commit(const char *shard, bool drop)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	AtCommit   *a = palloc(offsetof(AtCommit, shard) + strlen(shard) + 1);

	a->subid = GetCurrentSubTransactionId();
	a->drop = drop;
	strcpy(a->shard, shard);
	at_commit = lappend(at_commit, a);
	MemoryContextSwitchTo(old);
}

/*
 * Queues a shard for compaction when the current transaction commits: before
 * that, the compactor cannot see the batches it added.
 */
void
ps_compaction_request_at_commit(const char *shard)
{
	remember_until_commit(shard, false);
}

/*
 * Stops a merge of the shard in progress when the current transaction (which
 * dropped the shard) commits: the merge could never be swapped in.
 */
void
ps_compaction_stop_at_commit(const char *shard)
{
	remember_until_commit(shard, true);
}

/*
 * In the compactor, errors out of the merge of shard if the shard was dropped
 * meanwhile; elsewhere (compact()) does nothing.  Takes the queue lock.
 */
void
ps_compaction_check_dropped(const char *shard)
{
	bool		dropped;

	if (!am_compactor)
		return;
	LWLockAcquire(queue->lock, LW_SHARED);
	dropped = queue->compacting_dropped;
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

/* Forgets this process as the compactor; takes the queue lock. */
static void
compactor_detach(int code, Datum arg)
{
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	queue->compactor = NULL;
	queue->compacting[0] = '\0';
	LWLockRelease(queue->lock);
}

/* Records this process as the compactor, woken by requests; takes the queue lock. */
void
ps_compaction_attach_compactor(void)
{
	am_compactor = true;
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	queue->compactor = MyProc;
	LWLockRelease(queue->lock);
	before_shmem_exit(compactor_detach, (Datum) 0);
}

/*
 * Takes the oldest queued shard into shard; false if none, with scan_all set
 * if the queue overflowed since the last scan.  Takes the queue lock.
 */
bool
ps_compaction_take(char *shard, bool *scan_all)
{
	bool		found = false;

	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	if (queue->nqueued == 0)
	{
		/* a queue that overflowed is drained first, then every shard scanned */
		*scan_all = queue->overflow;
		queue->overflow = false;
	}
	else
	{
		strlcpy(shard, queue->queue[0], PS_MAX_SHARD_NAME + 1);
		queue->nqueued--;
		memmove(queue->queue[0], queue->queue[1],
				sizeof(queue->queue[0]) * queue->nqueued);
		found = true;
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

/* Records shard as the one being compacted, or none if NULL; takes the queue lock. */
void
ps_compaction_set_current(const char *shard)
{
	LWLockAcquire(queue->lock, LW_EXCLUSIVE);
	strlcpy(queue->compacting, shard ? shard : "", PS_MAX_SHARD_NAME + 1);
	queue->compacting_dropped = false;
	LWLockRelease(queue->lock);
}
