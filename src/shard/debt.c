/*-------------------------------------------------------------------------
 *
 * debt.c
 *	  Compaction debt: each shard's batch count as of its last committed
 *	  CaS, keyed by (database OID, shard name) in a shared hash, so that
 *	  append() writers can be slowed and stalled before a shard grows past
 *	  its bound (the sink's side is in sink/sink_backpressure.c).
 *
 * Every CaS that changes a shard's batches (an append in shard.c, a merge
 * in compact.c) publishes the count once its transaction commits, with the
 * state's seqno: an older seqno never overwrites a newer one, so commits
 * whose callbacks run out of order leave the latest count.  Publishing at
 * commit rather than at the CaS means only counts of committed states are
 * ever seen: a merge that aborts cannot let writers through on a count it
 * never committed, and an append that aborts cannot stall them on one.
 * The batches committed but not yet published are those of the sink
 * intervals still in flight, which the sink counts itself until their
 * commit (and so this publication) is done.  A count that drops broadcasts
 * the condition variable stalled writers sleep on.
 *
 * The table holds PS_DEBT_MAX_SHARDS entries.  When it is full, the entry
 * with the smallest count makes room for a larger one (a shard with no
 * entry counts as 0 batches: its writers are not slowed until its next
 * commit publishes again); the entry of a shard whose compactions are
 * failing makes room only for another failing shard, and only once every
 * entry is one.  create_shard and drop_shard forget the entry
 * when they commit.
 *
 * The same entries count the background compactions of the shard that
 * failed in a row, with the last one's time and message: the compactor
 * backs off from a shard whose merges keep failing, and its writers,
 * stalled at the bound, fail at once instead of waiting for a merge that
 * cannot succeed.
 *
 * Locking: DebtShared->lock guards the hash; shared to read a count,
 * exclusive to change one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "base/settings.h"
#include "shard/debt.h"

/* Shards whose count is kept, over every database */
#define PS_DEBT_MAX_SHARDS	1024
/* Longest delay of a slowed append */
#define PS_SLOWDOWN_MAX_MS	20

typedef struct DebtKey
{
	Oid			database;
	char		shard[PS_MAX_SHARD_NAME + 1];
} DebtKey;

typedef struct DebtEntry
{
	DebtKey		key;
	int64		seqno;			/* seqno of the state counted */
	int			batches;
	int			failures;		/* background compactions failed in a row */
	TimestampTz failed_at;		/* ... the last one's time */
	char		error[PS_DEBT_ERROR_LEN];	/* ... and message */
} DebtEntry;

typedef struct DebtShared
{
	LWLock	   *lock;
	ConditionVariable cv;		/* a shard's count dropped */
} DebtShared;

/* A count to publish, or an entry to forget, when the transaction commits */
typedef struct DebtPending
{
	SubTransactionId subid;
	bool		forget;
	DebtKey		key;
	int64		seqno;
	int			batches;
} DebtPending;

static DebtShared *debt_shared = NULL;
static HTAB *debt_hash = NULL;
static List *pending = NIL;

/* Shared memory of the debt table. */
Size
ps_debt_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(DebtShared)),
					hash_estimate_size(PS_DEBT_MAX_SHARDS, sizeof(DebtEntry)));
}

/* Creates or attaches the debt table; caller holds AddinShmemInitLock. */
void
ps_debt_shmem_init(void)
{
	HASHCTL		info;
	bool		found;

	debt_shared = ShmemInitStruct("persist_sink debt", sizeof(DebtShared), &found);
	if (!found)
	{
		debt_shared->lock = &(GetNamedLWLockTranche("persist_sink debt"))->lock;
		ConditionVariableInit(&debt_shared->cv);
	}
	info.keysize = sizeof(DebtKey);
	info.entrysize = sizeof(DebtEntry);
	debt_hash = ShmemInitHash("persist_sink debt hash",
							  PS_DEBT_MAX_SHARDS, PS_DEBT_MAX_SHARDS,
							  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/* Fills the key of a shard of this database. */
static void
make_key(DebtKey *key, const char *shard)
{
	memset(key, 0, sizeof(DebtKey));
	key->database = MyDatabaseId;
	strlcpy(key->shard, shard, sizeof(key->shard));
}

/*
 * The entry with the smallest count among those whose compactions are
 * failing (failing true) or not; NULL if there is none.  Caller holds the
 * lock.
 */
static DebtEntry *
smallest_entry(bool failing)
{
	HASH_SEQ_STATUS seq;
	DebtEntry  *e;
	DebtEntry  *smallest = NULL;

	hash_seq_init(&seq, debt_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if ((e->failures > 0) == failing &&
			(smallest == NULL || e->batches < smallest->batches))
			smallest = e;
	return smallest;
}

/*
 * Removes the entry with the smallest count if it is below batches, to
 * make room; false if every entry counts as many.  An entry of a failing
 * shard goes only for another failure (for_failure) and only when every
 * entry is failing: compaction_failures shows failing shards from here.
 * Caller holds the lock exclusively.
 */
static bool
evict_smallest(int batches, bool for_failure)
{
	DebtEntry  *victim = smallest_entry(false);

	if (victim == NULL && for_failure)
		victim = smallest_entry(true);
	if (victim == NULL || victim->batches >= batches)
		return false;
	hash_search(debt_hash, &victim->key, HASH_REMOVE, NULL);
	return true;
}

/*
 * Records a committed count unless a newer seqno is recorded; wakes
 * stalled writers if it dropped.  Takes the debt lock exclusively; never
 * raises an error (it runs in commit callbacks).
 */
static void
publish(const DebtPending *p)
{
	DebtEntry  *e;
	bool		found;
	bool		dropped = false;

	LWLockAcquire(debt_shared->lock, LW_EXCLUSIVE);
	e = hash_search(debt_hash, &p->key, HASH_FIND, NULL);
	found = e != NULL;
	/* our own bound: dynahash would grow into the server's spare memory */
	if (e == NULL &&
		(hash_get_num_entries(debt_hash) < PS_DEBT_MAX_SHARDS ||
		 evict_smallest(p->batches, false)))
		e = hash_search(debt_hash, &p->key, HASH_ENTER_NULL, &found);
	if (e != NULL && !found)
		e->failures = 0;
	if (e != NULL && (!found || p->seqno >= e->seqno))
	{
		dropped = found && p->batches < e->batches;
		e->seqno = p->seqno;
		e->batches = p->batches;
	}
	LWLockRelease(debt_shared->lock);
	if (dropped)
		ConditionVariableBroadcast(&debt_shared->cv);
}

/* Forgets a shard's entry and wakes stalled writers; takes the debt lock exclusively. */
static void
forget(const DebtKey *key)
{
	LWLockAcquire(debt_shared->lock, LW_EXCLUSIVE);
	hash_search(debt_hash, key, HASH_REMOVE, NULL);
	LWLockRelease(debt_shared->lock);
	ConditionVariableBroadcast(&debt_shared->cv);
}

/* Queues a change of the table for the current (sub)transaction's commit. */
static void
add_pending(const char *shard, bool forget_it, int64 seqno, int batches)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	DebtPending *p = palloc0(sizeof(DebtPending));

	p->subid = GetCurrentSubTransactionId();
	p->forget = forget_it;
	make_key(&p->key, shard);
	p->seqno = seqno;
	p->batches = batches;
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
}

/* Publishes shard's batch count at seqno when the current transaction commits. */
void
ps_debt_publish_at_commit(const char *shard, int64 seqno, int batches)
{
	add_pending(shard, false, seqno, batches);
}

/* Forgets shard's count when the current transaction (create or drop) commits. */
void
ps_debt_forget_at_commit(const char *shard)
{
	add_pending(shard, true, 0, 0);
}

/* Carries out the queued changes at commit, in order; drops them otherwise. */
static void
debt_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (pending == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		if (debt_hash != NULL)
			foreach(lc, pending)
			{
				DebtPending *p = lfirst(lc);

				if (p->forget)
					forget(&p->key);
				else
					publish(p);
			}
	}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
			 event != XACT_EVENT_PREPARE)
		return;
	list_free_deep(pending);
	pending = NIL;
}

/* Drops an aborted subtransaction's changes; passes a committed one's up. */
static void
debt_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		DebtPending *p = lfirst(lc);

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

/* Registers the transaction callbacks that publish counts at commit. */
void
ps_debt_register_callbacks(void)
{
	RegisterXactCallback(debt_xact_callback, NULL);
	RegisterSubXactCallback(debt_subxact_callback, NULL);
}

/*
 * The shard's batch count as of its last published commit; 0 if none is
 * known.  Takes the debt lock shared.
 */
int
ps_debt_batches(const char *shard)
{
	DebtKey		key;
	DebtEntry  *e;
	int			batches = 0;

	if (debt_hash == NULL)
		return 0;
	make_key(&key, shard);
	LWLockAcquire(debt_shared->lock, LW_SHARED);
	e = hash_search(debt_hash, &key, HASH_FIND, NULL);
	if (e != NULL)
		batches = e->batches;
	LWLockRelease(debt_shared->lock);
	return batches;
}

/*
 * The entry of a shard of this database, made if needed (making room by
 * forgetting the entry with the fewest batches); caller holds the lock
 * exclusively.
 */
static DebtEntry *
entry_enter(const char *shard)
{
	DebtKey		key;
	DebtEntry  *e;
	bool		found;

	make_key(&key, shard);
	e = hash_search(debt_hash, &key, HASH_FIND, NULL);
	if (e != NULL)
		return e;
	if (hash_get_num_entries(debt_hash) >= PS_DEBT_MAX_SHARDS)
		(void) evict_smallest(INT_MAX, true);
	e = hash_search(debt_hash, &key, HASH_ENTER_NULL, &found);
	if (e != NULL && !found)
	{
		e->seqno = 0;
		e->batches = 0;
		e->failures = 0;
	}
	return e;
}

/*
 * Records that a background compaction of a shard of this database failed
 * with message; returns how many have in a row.  Takes the debt lock.
 */
int
ps_debt_compaction_failed(const char *shard, const char *message)
{
	DebtEntry  *e;
	int			failures = 1;

	LWLockAcquire(debt_shared->lock, LW_EXCLUSIVE);
	e = entry_enter(shard);
	if (e != NULL)
	{
		failures = ++e->failures;
		e->failed_at = GetCurrentTimestamp();
		strlcpy(e->error, message, sizeof(e->error));
	}
	LWLockRelease(debt_shared->lock);
	return failures;
}

/* Records that a background compaction of a shard succeeded; takes the debt lock. */
void
ps_debt_compaction_succeeded(const char *shard)
{
	DebtKey		key;
	DebtEntry  *e;

	make_key(&key, shard);
	LWLockAcquire(debt_shared->lock, LW_EXCLUSIVE);
	e = hash_search(debt_hash, &key, HASH_FIND, NULL);
	if (e != NULL)
		e->failures = 0;
	LWLockRelease(debt_shared->lock);
}

/*
 * How many background compactions of a shard of this database failed in a
 * row (0 if none), with the last one's time and message (error, of
 * PS_DEBT_ERROR_LEN bytes, may be NULL).  Takes the debt lock shared.
 */
int
ps_debt_compaction_failures(const char *shard, TimestampTz *failed_at, char *error)
{
	DebtKey		key;
	DebtEntry  *e;
	int			failures = 0;

	if (debt_hash == NULL)
		return 0;
	make_key(&key, shard);
	LWLockAcquire(debt_shared->lock, LW_SHARED);
	e = hash_search(debt_hash, &key, HASH_FIND, NULL);
	if (e != NULL && e->failures > 0)
	{
		failures = e->failures;
		*failed_at = e->failed_at;
		if (error)
			strlcpy(error, e->error, PS_DEBT_ERROR_LEN);
	}
	LWLockRelease(debt_shared->lock);
	return failures;
}

/*
 * The shards of this database whose background compactions are failing
 * now, as a List of PsDebtFailure palloc'd in the current context.  Takes
 * the debt lock shared.
 */
List *
ps_debt_failing_shards(void)
{
	HASH_SEQ_STATUS seq;
	DebtEntry  *e;
	List	   *failing = NIL;

	if (debt_hash == NULL)
		return NIL;
	LWLockAcquire(debt_shared->lock, LW_SHARED);
	hash_seq_init(&seq, debt_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		PsDebtFailure *f;

		if (e->key.database != MyDatabaseId || e->failures == 0)
			continue;
		f = palloc(sizeof(PsDebtFailure));
		strlcpy(f->shard, e->key.shard, sizeof(f->shard));
		f->failures = e->failures;
		f->failed_at = e->failed_at;
		strlcpy(f->error, e->error, sizeof(f->error));
		failing = lappend(failing, f);
	}
	LWLockRelease(debt_shared->lock);
	return failing;
}

/* The condition variable broadcast when a shard's count drops. */
ConditionVariable *
ps_debt_cv(void)
{
	return &debt_shared->cv;
}

/*
 * How long an append to a shard of `batches` batches is delayed: 0 below
 * persist_sink.slowdown_batches, 1ms per batch from there (at most
 * PS_SLOWDOWN_MAX_MS), -1 (stall until it drops) at
 * persist_sink.stop_batches.  No lock.
 */
int
ps_debt_delay_ms(int batches)
{
	if (batches >= ps_stop_batches)
		return -1;
	if (batches < ps_slowdown_batches)
		return 0;
	return Min(batches - ps_slowdown_batches + 1, PS_SLOWDOWN_MAX_MS);
}
