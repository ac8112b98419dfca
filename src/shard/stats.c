/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-shard counters in a shared hash table (pg_stat_statements style),
 *	  keyed by (database OID, shard name); the stats view over them is in
 *	  sql/stats_view.c.
 *
 * The hash table is protected by one LWLock: shared to find an entry and
 * bump its counters (under the entry's spinlock), exclusive to add or remove
 * entries.  A backend's compare_and_append and a merge count only once
 * their transaction commits: the deltas wait in backend memory until then.
 *
 * The table holds at most persist_sink.stats_max entries, counted under
 * the lock (a shared hash would otherwise grow into the shared memory
 * other subsystems need).  When it is full, the counters of shards that
 * have no entry are not kept: each such addition only bumps the shared
 * count of uncounted additions, until drop_shard, DROP EXTENSION, a
 * dropped database or stats_reset() frees entries.
 *
 * An object access hook forgets a database's entries when the extension
 * is dropped in it, or when the database is dropped; both take effect when
 * the dropping transaction commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "base/settings.h"
#include "shard/stats.h"

/* Name of the extension whose drop forgets a database's counters */
#define PS_EXTENSION_NAME	"persist_sink"

typedef struct StatsKey
{
	Oid			dbid;
	char		shard[PS_MAX_SHARD_NAME + 1];
} StatsKey;

typedef struct StatsEntry
{
	StatsKey	key;
	slock_t		mutex;
	PsCounters	counters;
	PsCompactionFailures failures;
} StatsEntry;

typedef struct StatsShared
{
	LWLock	   *lock;
	int			max;			/* most entries; the hash is sized for them */
	pg_atomic_uint64 uncounted; /* additions lost because the table was full */
} StatsShared;

/* What a transaction does to the counters when it commits */
typedef enum PendingKind
{
	PENDING_ADD,				/* add delta to key's counters */
	PENDING_FORGET_DATABASE		/* forget every entry of key.dbid */
} PendingKind;

typedef struct Pending
{
	PendingKind kind;
	SubTransactionId subid;
	StatsKey	key;
	PsCounters	delta;
} Pending;

static StatsShared *stats_shared = NULL;
static HTAB *stats_hash = NULL;
static List *pending = NIL;
static object_access_hook_type prev_object_access_hook = NULL;

/* Shared memory the counters need: the hash is sized for stats_max entries. */
Size
ps_stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(ps_stats_max, sizeof(StatsEntry)));
}

/*
 * Attaches to (or creates) the shared hash, with every entry allocated up
 * front; caller holds AddinShmemInitLock.
 */
void
ps_stats_shmem_init(void)
{
	HASHCTL		info;
	bool		found;

	stats_shared = ShmemInitStruct("persist_sink stats", sizeof(StatsShared), &found);
	if (!found)
	{
		stats_shared->lock = &(GetNamedLWLockTranche("persist_sink stats"))->lock;
		stats_shared->max = ps_stats_max;
		pg_atomic_init_u64(&stats_shared->uncounted, 0);
	}
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(StatsEntry);
	stats_hash = ShmemInitHash("persist_sink stats hash",
							   stats_shared->max, stats_shared->max,
							   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
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

/* Fills a hash key, zero padded: keys are compared as bytes. */
static void
make_key(StatsKey *key, Oid dbid, const char *shard)
{
	memset(key, 0, sizeof(StatsKey));
	key->dbid = dbid;
	strlcpy(key->shard, shard, sizeof(key->shard));
}

/* True if the table holds stats_max entries; needs the stats lock, either mode. */
static bool
table_full(void)
{
	return hash_get_num_entries(stats_hash) >= stats_shared->max;
}

/*
 * Finds key's entry, creating it with zero counters if the table is not
 * full; NULL if it is.  Needs the stats lock exclusively.
 */
static StatsEntry *
entry_enter(const StatsKey *key)
{
	StatsEntry *e;
	bool		found;

	e = hash_search(stats_hash, key, HASH_FIND, NULL);
	if (e != NULL || table_full())
		return e;
	e = hash_search(stats_hash, key, HASH_ENTER_NULL, &found);
	if (e != NULL && !found)
	{
		SpinLockInit(&e->mutex);
		memset(&e->counters, 0, sizeof(PsCounters));
		memset(&e->failures, 0, sizeof(PsCompactionFailures));
	}
	return e;
}

/*
 * Adds delta to key's counters, or counts a failed compaction with its
 * message (failure not NULL), creating its entry if there is room; with a
 * full table, counts the addition as uncounted instead.  Takes the stats
 * lock shared, and exclusively only to create an entry.
 */
static void
add_to_key(const StatsKey *key, const PsCounters *delta, const char *failure)
{
	StatsEntry *e;

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	e = hash_search(stats_hash, key, HASH_FIND, NULL);
	if (e == NULL && !table_full())
	{
		LWLockRelease(stats_shared->lock);
		LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
		e = entry_enter(key);
	}
	if (e == NULL)
		pg_atomic_fetch_add_u64(&stats_shared->uncounted, 1);
	else
	{
		SpinLockAcquire(&e->mutex);
		if (delta)
			counters_add(&e->counters, delta);
		if (failure)
		{
			e->failures.count++;
			e->failures.last_at = GetCurrentTimestamp();
			strlcpy(e->failures.last_error, failure, sizeof(e->failures.last_error));
		}
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(stats_shared->lock);
}

/* Removes every entry of database dbid; takes the stats lock exclusively. */
static void
forget_database(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *e;

	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->key.dbid == dbid)
			hash_search(stats_hash, &e->key, HASH_REMOVE, NULL);
	LWLockRelease(stats_shared->lock);
}

/* Adds delta to shard's shared counters now; takes the stats lock. */
void
ps_stats_add(const char *shard, const PsCounters *delta)
{
	StatsKey	key;

	if (stats_hash == NULL)
		return;
	make_key(&key, MyDatabaseId, shard);
	add_to_key(&key, delta, NULL);
}

/*
 * Counts a failed background compaction of a shard of this database and
 * keeps its time and message, as pg_stat_archiver keeps the last failed
 * archiving; takes the stats lock.
 */
void
ps_stats_compaction_failed(const char *shard, const char *message)
{
	StatsKey	key;

	if (stats_hash == NULL)
		return;
	make_key(&key, MyDatabaseId, shard);
	add_to_key(&key, NULL, message);
}

/* Queues what the current (sub)transaction does to the counters at commit. */
static void
add_pending(PendingKind kind, const StatsKey *key, const PsCounters *delta)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	Pending    *p = palloc0(sizeof(Pending));

	p->kind = kind;
	p->subid = GetCurrentSubTransactionId();
	p->key = *key;
	if (delta)
		p->delta = *delta;
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
}

/* Adds delta to shard's counters when the current transaction commits. */
void
ps_stats_add_at_commit(const char *shard, const PsCounters *delta)
{
	StatsKey	key;

	make_key(&key, MyDatabaseId, shard);
	add_pending(PENDING_ADD, &key, delta);
}

/* Removes a dropped shard's counters; takes the stats lock exclusively. */
void
ps_stats_forget(const char *shard)
{
	StatsKey	key;

	if (stats_hash == NULL)
		return;
	make_key(&key, MyDatabaseId, shard);
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_search(stats_hash, &key, HASH_REMOVE, NULL);
	LWLockRelease(stats_shared->lock);
}

/* Carries out one queued change of a committed transaction; takes the stats lock. */
static void
apply_pending(const Pending *p)
{
	if (stats_hash == NULL)
		return;
	if (p->kind == PENDING_ADD)
		add_to_key(&p->key, &p->delta, NULL);
	else
		forget_database(p->key.dbid);
}

/*
 * Carries out the queued changes in order when the transaction commits;
 * drops them when it aborts or is prepared (its outcome is then decided
 * elsewhere).
 */
static void
stats_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (pending == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		foreach(lc, pending)
			apply_pending(lfirst(lc));
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
			 event != XACT_EVENT_PREPARE)
		return;
	list_free_deep(pending);
	pending = NIL;
}

/* Drops the changes of an aborted subtransaction; passes a committed one's up. */
static void
stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		Pending    *p = lfirst(lc);

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

/* Forgets database dbid's counters when the current transaction commits. */
static void
forget_database_at_commit(Oid dbid)
{
	StatsKey	key;

	make_key(&key, dbid, "");
	add_pending(PENDING_FORGET_DATABASE, &key, NULL);
}

/* True if extension extoid is persist_sink; reads pg_extension. */
static bool
is_our_extension(Oid extoid)
{
	char	   *name = get_extension_name(extoid);

	return name != NULL && strcmp(name, PS_EXTENSION_NAME) == 0;
}

/*
 * Object access hook: when persist_sink is dropped, or a database is
 * dropped, forgets that database's counters once the drop commits.
 */
static void
stats_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_DROP)
		return;
	if (classId == ExtensionRelationId && is_our_extension(objectId))
		forget_database_at_commit(MyDatabaseId);
	else if (classId == DatabaseRelationId)
		forget_database_at_commit(objectId);
}

/*
 * Registers the transaction callbacks that carry out queued changes, and
 * the object access hook that forgets dropped databases' counters.
 */
void
ps_stats_register_callbacks(void)
{
	RegisterXactCallback(stats_xact_callback, NULL);
	RegisterSubXactCallback(stats_subxact_callback, NULL);
	prev_object_access_hook = object_access_hook;
	object_access_hook = stats_object_access;
}

/*
 * Calls fn with the counters of every shard of the current database (a
 * copy taken under the entry's spinlock).  Holds the stats lock shared
 * throughout.
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
		PsCompactionFailures f;

		if (e->key.dbid != MyDatabaseId)
			continue;
		SpinLockAcquire(&e->mutex);
		c = e->counters;
		f = e->failures;
		SpinLockRelease(&e->mutex);
		fn(e->key.shard, &c, &f, arg);
	}
	LWLockRelease(stats_shared->lock);
}

/* Forgets the current database's counters now; takes the stats lock exclusively. */
void
ps_stats_reset_database(void)
{
	if (stats_hash == NULL)
		return;
	forget_database(MyDatabaseId);
}

/* Reports how full the table is; takes the stats lock shared. */
void
ps_stats_get_info(PsStatsInfo *info)
{
	memset(info, 0, sizeof(PsStatsInfo));
	if (stats_hash == NULL)
		return;
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	info->entries = (int) hash_get_num_entries(stats_hash);
	info->max = stats_shared->max;
	info->uncounted = (int64) pg_atomic_read_u64(&stats_shared->uncounted);
	LWLockRelease(stats_shared->lock);
}
