/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-shard counters in a shared hash table (pg_stat_statements style).
 *
 * The hash table is protected by one LWLock: shared to find an entry and
 * bump its counters (under the entry's spinlock), exclusive to add or remove
 * entries.  A backend's compare_and_append counts only once its transaction
 * commits: the deltas wait in backend memory until then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "persist_sink.h"
#include "stats.h"

/* Most shards with counters; further shards are not counted */
#define PS_STATS_MAX_SHARDS	4096

typedef struct StatsKey
{
	char		shard[PS_MAX_SHARD_NAME + 1];
} StatsKey;

typedef struct StatsEntry
{
	StatsKey	key;
	slock_t		mutex;
	PsCounters	counters;
} StatsEntry;

typedef struct StatsShared
{
	LWLock	   *lock;
} StatsShared;

/* A delta waiting for its transaction to commit */
typedef struct PendingDelta
{
	SubTransactionId subid;
	StatsKey	key;
	PsCounters	delta;
} PendingDelta;

static StatsShared *stats_shared = NULL;
static HTAB *stats_hash = NULL;
static List *pending = NIL;

PG_FUNCTION_INFO_V1(ps_stats);
PG_FUNCTION_INFO_V1(ps_stats_reset);

/* Shared memory the counters need. */
Size
ps_stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(PS_STATS_MAX_SHARDS, sizeof(StatsEntry)));
}

/* Attaches to (or creates) the shared hash; caller holds AddinShmemInitLock. */
void
ps_stats_shmem_init(void)
{
	HASHCTL		info;
	bool		found;

	stats_shared = ShmemInitStruct("persist_sink stats", sizeof(StatsShared), &found);
	if (!found)
		stats_shared->lock = &(GetNamedLWLockTranche("persist_sink stats"))->lock;
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(StatsEntry);
	stats_hash = ShmemInitHash("persist_sink stats hash",
							   PS_STATS_MAX_SHARDS, PS_STATS_MAX_SHARDS,
							   &info, HASH_ELEM | HASH_STRINGS);
}

/* Adds delta to a counter set. */
static void
counters_add(PsCounters *into, const PsCounters *delta)
{
	int64	   *a = (int64 *) into;
	const int64 *b = (const int64 *) delta;

	for (size_t i = 0; i < PS_STATS_COUNTERS; i++)
		a[i] += b[i];
}

/* Fills a hash key for shard. */
static void
make_key(StatsKey *key, const char *shard)
{
	memset(key, 0, sizeof(StatsKey));
	strlcpy(key->shard, shard, sizeof(key->shard));
}

/* Adds delta to shard's shared counters now; takes the stats lock. */
void
ps_stats_add(const char *shard, const PsCounters *delta)
{
	StatsKey	key;
	StatsEntry *e;
	bool		found;

	if (stats_hash == NULL)
		return;
	make_key(&key, shard);
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	e = hash_search(stats_hash, &key, HASH_FIND, NULL);
	if (e == NULL)
	{
		LWLockRelease(stats_shared->lock);
		LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
		e = hash_search(stats_hash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
		{
			LWLockRelease(stats_shared->lock);
			return;
		}
		if (!found)
		{
			SpinLockInit(&e->mutex);
			memset(&e->counters, 0, sizeof(PsCounters));
		}
	}
	SpinLockAcquire(&e->mutex);
	counters_add(&e->counters, delta);
	SpinLockRelease(&e->mutex);
	LWLockRelease(stats_shared->lock);
}

/* Queues delta until the current transaction commits. */
static void
add_pending(const char *shard, const PsCounters *delta)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PendingDelta *p = palloc(sizeof(PendingDelta));

	p->subid = GetCurrentSubTransactionId();
	make_key(&p->key, shard);
	p->delta = *delta;
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
}

/*
 * Counts one compare_and_append: CaS attempts now, the rest when it
 * commits (now, if committed is true).
 */
void
ps_stats_count_append(const char *shard, uint64 updates,
					  const PsWriteCounts *counts,
					  const PsAppendResult *result, bool committed)
{
	PsCounters	now = {0};
	PsCounters	later = {0};

	now.cas_attempts = result->cas_attempts;
	now.cas_mismatches = result->cas_mismatches + (result->ok ? 0 : 1);
	ps_stats_add(shard, &now);
	if (!result->ok)
		return;
	later.appends = 1;
	later.updates = updates;
	later.parts_written = counts->parts;
	later.blob_puts = counts->blob_puts;
	later.blob_bytes = counts->blob_bytes;
	later.inline_batches = counts->inline_batches;
	later.state_bytes = result->state_bytes;
	if (committed)
		ps_stats_add(shard, &later);
	else
		add_pending(shard, &later);
}

/*
 * Counts an upper mismatch found before any CaS was tried, as a CaS that
 * lost: the early check stands for it, and mismatches stay a subset of
 * attempts.
 */
void
ps_stats_count_mismatch(const char *shard)
{
	PsCounters	d = {0};

	d.cas_attempts = 1;
	d.cas_mismatches = 1;
	ps_stats_add(shard, &d);
}

/* Removes a dropped shard's counters; takes the stats lock exclusively. */
void
ps_stats_forget(const char *shard)
{
	StatsKey	key;

	if (stats_hash == NULL)
		return;
	make_key(&key, shard);
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_search(stats_hash, &key, HASH_REMOVE, NULL);
	LWLockRelease(stats_shared->lock);
}

/* Publishes or discards pending deltas at the end of a transaction. */
static void
stats_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (pending == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		foreach(lc, pending)
		{
			PendingDelta *p = lfirst(lc);

			ps_stats_add(p->key.shard, &p->delta);
		}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	list_free_deep(pending);
	pending = NIL;
}

/* Drops the deltas of an aborted subtransaction; passes a committed one's up. */
static void
stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingDelta *p = lfirst(lc);

		if (p->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			p->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
		{
			pending = foreach_delete_current(pending, lc);
			pfree(p);
		}
	}
}

/* Registers the transaction callbacks that publish pending deltas. */
void
ps_stats_register_callbacks(void)
{
	RegisterXactCallback(stats_xact_callback, NULL);
	RegisterSubXactCallback(stats_subxact_callback, NULL);
}

/* stats(): one row per shard with counters; takes the stats lock shared. */
Datum
ps_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	StatsEntry *e;

	InitMaterializedSRF(fcinfo, 0);
	if (stats_hash == NULL)
		return (Datum) 0;
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	hash_seq_init(&seq, stats_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		Datum		values[1 + PS_STATS_COUNTERS];
		bool		nulls[1 + PS_STATS_COUNTERS] = {0};
		PsCounters	c;
		int64	   *v = (int64 *) &c;

		SpinLockAcquire(&e->mutex);
		c = e->counters;
		SpinLockRelease(&e->mutex);
		values[0] = CStringGetTextDatum(e->key.shard);
		for (size_t i = 0; i < PS_STATS_COUNTERS; i++)
			values[1 + i] = Int64GetDatum(v[i]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
	return (Datum) 0;
}

/* stats_reset(): zeroes every counter; takes the stats lock exclusively. */
Datum
ps_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *e;

	if (stats_hash == NULL)
		PG_RETURN_VOID();
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		hash_search(stats_hash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(stats_shared->lock);
	PG_RETURN_VOID();
}
