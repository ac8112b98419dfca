/*-------------------------------------------------------------------------
 *
 * state_cache.c
 *	  This process's copies of the shard states it last read or wrote.
 *
 * A shard's state at a given version of its consensus row never changes:
 * every CaS writes a new row version, and the diffs a read applies are
 * those logged with the row's seqno.  A version is named by its seqno and
 * its xmin, the (sub)transaction that wrote it; no other version of the
 * row can have both, since a transaction writes a seqno at most once
 * unless it drops and creates the shard again, and this process forgets a
 * shard it drops or creates.  So a read that finds the row at the seqno
 * and xmin of a copy here can take the copy instead of decoding the rollup
 * and applying its diffs.  A version that was rolled back is never found
 * (the visible row has another xmin), so nothing is undone at abort.
 *
 * Rows whose xmin is not a normal transaction id (frozen ones) are not
 * kept, and a copy is dropped once the transaction counter has moved on by
 * a quarter of the xid space, long before an xid could come round again.
 *
 * The cache is per process, in TopMemoryContext: STATE_CACHE_SHARDS
 * shards, the least recently used one replaced.  No locks.
 *
 * A reader that never changes the state may borrow a copy instead of
 * copying it (ps_state_cache_lend): the copy is lent until the reader's
 * memory context is reset or deleted.  An entry dropped meanwhile leaves
 * the cache at once, and its memory is freed when its last borrower's
 * context goes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "utils/memutils.h"

#include "store/store.h"

#define STATE_CACHE_SHARDS	8

/* Transactions after which a copy is no longer trusted */
#define STATE_CACHE_MAX_XID_AGE ((uint64) 1 << 30)

/* What borrows a cached state's memory; allocated in it */
typedef struct StateLoans
{
	MemoryContext cxt;			/* the memory */
	int			borrowers;		/* contexts it is lent to */
	bool		dropped;		/* out of the cache: the last borrower frees it */
} StateLoans;

typedef struct CachedState
{
	MemoryContext cxt;			/* holds shard, loans and state; NULL when
								 * unused */
	StateLoans *loans;
	char	   *shard;
	TransactionId xmin;			/* of the row version at state->seqno */
	FullTransactionId cached_at;	/* the next xid when it was cached */
	uint64		last_use;
	PsState    *state;			/* in cxt, as borrowers point at it */
} CachedState;

static CachedState cache[STATE_CACHE_SHARDS];
static uint64 use_clock = 0;

/* The entry of shard, or NULL. */
static CachedState *
find_entry(const char *shard)
{
	for (int i = 0; i < STATE_CACHE_SHARDS; i++)
		if (cache[i].cxt && strcmp(cache[i].shard, shard) == 0)
			return &cache[i];
	return NULL;
}

/* An unused entry, else the least recently used one. */
static CachedState *
victim_entry(void)
{
	CachedState *victim = &cache[0];

	for (int i = 0; i < STATE_CACHE_SHARDS; i++)
	{
		if (cache[i].cxt == NULL)
			return &cache[i];
		if (cache[i].last_use < victim->last_use)
			victim = &cache[i];
	}
	return victim;
}

/* Empties an entry: its memory is freed now, or by its last borrower. */
static void
drop_entry(CachedState *e)
{
	if (e->cxt && e->loans->borrowers > 0)
		e->loans->dropped = true;
	else if (e->cxt)
		MemoryContextDelete(e->cxt);
	memset(e, 0, sizeof(CachedState));
}

/* Ends a loan (a borrower's context reset or deleted). */
static void
end_loan(void *arg)
{
	StateLoans *loans = (StateLoans *) arg;

	Assert(loans->borrowers > 0);
	if (--loans->borrowers == 0 && loans->dropped)
		MemoryContextDelete(loans->cxt);
}

/* True if the entry is too old to trust its xmin. */
static bool
entry_too_old(const CachedState *e)
{
	FullTransactionId next = ReadNextFullTransactionId();

	return U64FromFullTransactionId(next) - U64FromFullTransactionId(e->cached_at) >
		STATE_CACHE_MAX_XID_AGE;
}

/*
 * Copies into dest the state of shard at the row version (seqno, xmin), if
 * this process holds it; returns false if not.
 */
bool
ps_state_cache_get(const char *shard, int64 seqno, TransactionId xmin,
				   PsState *state, MemoryContext dest)
{
	CachedState *e = find_entry(shard);
	MemoryContext old;

	if (e == NULL || e->state->seqno != seqno || e->xmin != xmin)
		return false;
	if (entry_too_old(e))
	{
		drop_entry(e);
		return false;
	}
	e->last_use = ++use_clock;
	old = MemoryContextSwitchTo(dest);
	ps_state_copy(e->state, state);
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * Points *state at this process's copy of the state of shard at the row
 * version (seqno, xmin), lent until dest is reset or deleted: the caller
 * must never change it.  Returns false if this process holds none.
 */
bool
ps_state_cache_lend(const char *shard, int64 seqno, TransactionId xmin,
					const PsState **state, MemoryContext dest)
{
	CachedState *e = find_entry(shard);
	MemoryContextCallback *cb;

	if (e == NULL || e->state->seqno != seqno || e->xmin != xmin)
		return false;
	if (entry_too_old(e))
	{
		drop_entry(e);
		return false;
	}
	cb = MemoryContextAlloc(dest, sizeof(MemoryContextCallback));
	cb->func = end_loan;
	cb->arg = e->loans;
	MemoryContextRegisterResetCallback(dest, cb);
	e->loans->borrowers++;
	e->last_use = ++use_clock;
	*state = e->state;
	return true;
}

/*
 * The row version (seqno, xmin) of this process's copy of shard's state;
 * false if there is none it still trusts.
 */
bool
ps_state_cache_version(const char *shard, int64 *seqno, TransactionId *xmin)
{
	CachedState *e = find_entry(shard);

	if (e == NULL)
		return false;
	if (entry_too_old(e))
	{
		drop_entry(e);
		return false;
	}
	*seqno = e->state->seqno;
	*xmin = e->xmin;
	return true;
}

/*
 * Keeps a copy of shard's state as of the row version its seqno and xmin
 * name (forgetting the shard instead if xmin is not a normal xid).
 */
void
ps_state_cache_put(const char *shard, TransactionId xmin, const PsState *state)
{
	CachedState *e = find_entry(shard);
	CachedState fresh;
	MemoryContext old;

	if (!TransactionIdIsNormal(xmin))
	{
		if (e)
			drop_entry(e);
		return;
	}
	if (e == NULL)
		e = victim_entry();
	/*
	 * Copy under the current context first, so an error frees the copy and
	 * leaves the old entry whole; then move it under TopMemoryContext.
	 */
	fresh.cxt = AllocSetContextCreate(CurrentMemoryContext,
									  "persist_sink cached state",
									  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(fresh.cxt);
	fresh.loans = palloc0(sizeof(StateLoans));
	fresh.loans->cxt = fresh.cxt;
	fresh.shard = pstrdup(shard);
	fresh.state = palloc0(sizeof(PsState));
	ps_state_copy(state, fresh.state);
	MemoryContextSwitchTo(old);
	MemoryContextSetParent(fresh.cxt, TopMemoryContext);
	fresh.xmin = xmin;
	fresh.cached_at = ReadNextFullTransactionId();
	fresh.last_use = ++use_clock;
	drop_entry(e);
	*e = fresh;
}

/* Forgets shard's state: it was dropped or created here. */
void
ps_state_cache_forget(const char *shard)
{
	CachedState *e = find_entry(shard);

	if (e)
		drop_entry(e);
}
