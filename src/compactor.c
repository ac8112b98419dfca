/*-------------------------------------------------------------------------
 *
 * compactor.c
 *	  The compactor: a background worker that keeps every shard's batches
 *	  size-tiered, so a shard holds O(log n) batches after n appends.
 *
 * Writers ask for compaction of a shard after each append (a small queue
 * in the sink's shared memory, guarded by the sink lock).  The compactor
 * works outside the append path: appends never wait for a merge, and a
 * merge waits for appends only at its CaS.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "compact.h"
#include "settings.h"
#include "sink.h"
#include "storage.h"

/* Most merges of one shard in a row before the compactor moves on */
#define MAX_ROUNDS_PER_SHARD	16

/* Queues a shard for background compaction; takes the sink lock. */
void
ps_compaction_request(const char *shard)
{
	bool		queued = false;

	if (ps_sink == NULL)
		return;
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (int i = 0; i < ps_sink->ncompact && !queued; i++)
		queued = strcmp(ps_sink->compact_queue[i], shard) == 0;
	if (!queued && ps_sink->ncompact < PS_COMPACT_QUEUE)
		strlcpy(ps_sink->compact_queue[ps_sink->ncompact++], shard,
				PS_MAX_SHARD_NAME + 1);
	else if (!queued)
		ps_sink->compact_overflow = true;
	if (ps_sink->compactor)
		SetLatch(&ps_sink->compactor->procLatch);
	LWLockRelease(ps_sink->lock);
}

/* Shards this transaction asked to compact, or dropped, once it commits */
static List *requests_at_commit = NIL;
static List *drops_at_commit = NIL;

/* True in the compactor process */
static bool am_compactor = false;

/* Tells the compactor to stop merging a dropped shard; takes the sink lock. */
static void
stop_compaction(const char *shard)
{
	if (ps_sink == NULL)
		return;
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (strcmp(ps_sink->compacting, shard) == 0)
		ps_sink->compacting_dropped = true;
	LWLockRelease(ps_sink->lock);
}

/* Sends the requests and drops of a committed transaction; forgets an aborted one's. */
static void
request_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (requests_at_commit == NIL && drops_at_commit == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		foreach(lc, requests_at_commit)
			ps_compaction_request(lfirst(lc));
		foreach(lc, drops_at_commit)
			stop_compaction(lfirst(lc));
	}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	/* their memory goes with the transaction */
	requests_at_commit = NIL;
	drops_at_commit = NIL;
}

/* Adds a shard name to a list that lives until the end of the transaction. */
static List *
remember_until_commit(List *list, const char *shard)
{
	static bool registered = false;
	MemoryContext old;

	if (!registered)
	{
		RegisterXactCallback(request_xact_callback, NULL);
		registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	list = lappend(list, pstrdup(shard));
	MemoryContextSwitchTo(old);
	return list;
}

/*
 * Queues a shard for compaction when the current transaction commits: before
 * that, the compactor cannot see the batches it added.
 */
void
ps_compaction_request_at_commit(const char *shard)
{
	requests_at_commit = remember_until_commit(requests_at_commit, shard);
}

/*
 * Stops a merge of the shard in progress when the current transaction (which
 * dropped the shard) commits: the merge could never be swapped in.
 */
void
ps_compaction_stop_at_commit(const char *shard)
{
	drops_at_commit = remember_until_commit(drops_at_commit, shard);
}

/*
 * In the compactor, errors out of the merge of shard if the shard was dropped
 * meanwhile; elsewhere (compact()) does nothing.  Takes the sink lock.
 */
void
ps_compaction_check_dropped(const char *shard)
{
	bool		dropped;

	if (!am_compactor)
		return;
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	dropped = ps_sink->compacting_dropped;
	LWLockRelease(ps_sink->lock);
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

/* Registers the compactor; called from _PG_init. */
void
ps_register_compactor(void)
{
	ps_register_worker("ps_compactor_main", "persist_sink compactor",
					   "persist_sink compactor", 0);
}

/*
 * Takes the oldest queued shard into shard; false if none, with scan_all set
 * if the queue overflowed since the last scan.  Takes the sink lock.
 */
static bool
take_request(char *shard, bool *scan_all)
{
	bool		found = false;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (ps_sink->ncompact == 0)
	{
		/* a queue that overflowed is drained first, then every shard scanned */
		*scan_all = ps_sink->compact_overflow;
		ps_sink->compact_overflow = false;
	}
	else
	{
		strlcpy(shard, ps_sink->compact_queue[0], PS_MAX_SHARD_NAME + 1);
		ps_sink->ncompact--;
		memmove(ps_sink->compact_queue[0], ps_sink->compact_queue[1],
				sizeof(ps_sink->compact_queue[0]) * ps_sink->ncompact);
		found = true;
	}
	LWLockRelease(ps_sink->lock);
	return found;
}

/*
 * Does one merge of a shard, if its tiers call for one.  True if it merged,
 * or if its run changed meanwhile (worth another look).
 */
static bool
compact_once(const char *shard)
{
	PsState		state;
	int			from;
	int			to;
	bool		again = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, shard);
	if (ps_consensus_read(shard, &state, CurrentMemoryContext, true) &&
		ps_compact_choose(&state, &from, &to))
	{
		(void) ps_compact_range(shard, &state, from, to);
		again = true;
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return again;
}

/* Merges a shard until its tiers are in order; errors are logged, not fatal. */
static void
compact_shard(const char *shard, MemoryContext cxt)
{
	for (int round = 0; round < MAX_ROUNDS_PER_SHARD; round++)
	{
		bool		merged = false;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			merged = compact_once(shard);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			pgstat_report_activity(STATE_IDLE, NULL);
			/* a lost race is retried; a dropped shard is done with */
			merged = edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
				edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED;
			if (!merged && edata->sqlerrcode != ERRCODE_UNDEFINED_OBJECT)
				ereport(LOG,
						(errmsg("persist_sink: compaction of shard \"%s\" failed: %s",
								shard, edata->message)));
		}
		PG_END_TRY();
		MemoryContextSwitchTo(cxt);
		MemoryContextReset(cxt);
		if (!merged)
			break;
	}
}

/* Records shard as the one being compacted, or none if NULL; takes the sink lock. */
static void
set_compacting(const char *shard)
{
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	strlcpy(ps_sink->compacting, shard ? shard : "", PS_MAX_SHARD_NAME + 1);
	ps_sink->compacting_dropped = false;
	LWLockRelease(ps_sink->lock);
}

/* Compacts one shard, recorded as the one being compacted meanwhile. */
static void
compact_named(const char *shard, MemoryContext cxt)
{
	set_compacting(shard);
	compact_shard(shard, cxt);
	set_compacting(NULL);
}

/* The names of every shard, allocated in cxt; NIL without the extension. */
static List *
all_shards(MemoryContext cxt)
{
	static SPIPlanPtr plan = NULL;
	List	   *names = NIL;
	MemoryContext old;

	StartTransactionCommand();
	if (!OidIsValid(get_extension_oid("persist_sink", true)))
	{
		CommitTransactionCommand();
		return NIL;
	}
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	ps_spi_run(&plan, "SELECT shard FROM persist_sink.consensus", 0, NULL, NULL, true);
	old = MemoryContextSwitchTo(cxt);
	for (uint64 i = 0; i < SPI_processed; i++)
		names = lappend(names, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	MemoryContextSwitchTo(old);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	return names;
}

/*
 * Compacts every shard in turn (after the request queue overflowed, and at
 * start): the requests that did not fit in the queue are not known, so
 * every shard is looked at.  If compaction is turned off meanwhile, it stops
 * and is owed again.  Takes the sink lock.
 */
static void
compact_all_shards(MemoryContext cxt)
{
	MemoryContext scan_cxt = AllocSetContextCreate(TopMemoryContext,
												   "persist_sink compactor scan",
												   ALLOCSET_SMALL_SIZES);
	List	   *names = NIL;
	ListCell   *lc;

	PG_TRY();
	{
		names = all_shards(scan_cxt);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	foreach(lc, names)
	{
		ps_worker_check_signals();
		if (!ps_compaction)
		{
			/* the scan is owed: start it again once compaction is back on */
			LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
			ps_sink->compact_overflow = true;
			LWLockRelease(ps_sink->lock);
			break;
		}
		compact_named(lfirst(lc), cxt);
	}
	MemoryContextDelete(scan_cxt);
}

/* Forgets this process as the compactor. */
static void
compactor_exit(int code, Datum arg)
{
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->compactor = NULL;
	ps_sink->compacting[0] = '\0';
	LWLockRelease(ps_sink->lock);
}

/* Entry point of the compactor. */
void
ps_compactor_main(Datum arg)
{
	MemoryContext cxt;
	char		shard[PS_MAX_SHARD_NAME + 1];

	am_compactor = true;
	ps_keep_large_allocations();
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(ps_database, NULL, 0);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->compactor = MyProc;
	LWLockRelease(ps_sink->lock);
	before_shmem_exit(compactor_exit, (Datum) 0);
	cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink compactor",
								ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		bool		scan_all = false;

		ps_worker_check_signals();
		if (ps_compaction && take_request(shard, &scan_all))
		{
			compact_named(shard, cxt);
			continue;
		}
		if (ps_compaction && scan_all)
		{
			compact_all_shards(cxt);
			continue;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10 * 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
