/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-shard counters in a shared hash table (pg_stat_statements style);
 *	  the stats view over them is in sql/stats_view.c.
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
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "shard/stats.h"

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

/* Adds delta to shard's counters when the current transaction commits. */
void
ps_stats_add_at_commit(const char *shard, const PsCounters *delta)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PendingDelta *p = palloc(sizeof(PendingDelta));

	p->subid = GetCurrentSubTransactionId();
	make_key(&p->key, shard);
	p->delta = *delta;
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
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

/*
 * Calls fn with every shard's counters (a copy taken under the entry's
 * spinlock).  Holds the stats lock shared throughout.
 */
void
ps_stats_foreach(PsStatsVisitor fn, void *arg)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *e;

	if (stats_hash == NULL)
		return;
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	hash_seq_init(&seq, stats_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		PsCounters	c;

		SpinLockAcquire(&e->mutex);
		c = e->counters;
		SpinLockRelease(&e->mutex);
		fn(e->key.shard, &c, arg);
	}
	LWLockRelease(stats_shared->lock);
}

/* Forgets every shard's counters; takes the stats lock exclusively. */
void
ps_stats_reset_all(void)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *e;

	if (stats_hash == NULL)
		return;
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		hash_search(stats_hash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(stats_shared->lock);
}
