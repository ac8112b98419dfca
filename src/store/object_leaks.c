/*-------------------------------------------------------------------------
 *
 * object_leaks.c
 *	  Deleting the objects no state and no garbage row names: parts an
 *	  append or a merge put in an object store before a CaS that never
 *	  committed (an error, a lost race, a crash, a cancel).
 *
 * Blob rows of such parts go with their transaction's rollback; objects
 * do not.  Every part is put while the transaction whose CaS would
 * reference it runs (the sink worker's interval, a merge, the caller's own
 * for compare_and_append()): the worker puts a sink interval's parts in
 * its transaction, and a large write puts its own only once the worker
 * has said, in that transaction, that it takes them (sink_take.c,
 * ps_sink_start_taking).  A transaction that wrote a shard cannot be prepared.  So
 * a collection runs in two steps, without relying on any clock:
 *
 *	1. It lists the objects of each store the database's shards use, then
 *	   notes the virtual transaction ids running at that moment: every
 *	   object listed was put while one of them ran, or a transaction
 *	   already over.
 *	2. Once all of those have ended (a later step checks, without
 *	   waiting), it reads every state and every garbage row in a new
 *	   snapshot: a listed object neither names was put by a transaction
 *	   that did not commit a state naming it, or was named and then
 *	   deleted as garbage; either way nothing will name it, and it is
 *	   deleted.
 *
 * Only objects named as parts are (<store>/<shard>/<32 hex digits>):
 * anything else under a store is left alone.  A store's prefix belongs to
 * one database, whose owner marker it holds (objstore/store_owner.c): a collection
 * leaves another database's store alone, and says so in the log, and a
 * store with no marker yet too; step 2 asks again before it deletes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/procarray.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/settings.h"
#include "store/store.h"

/* The objects listed by step 1 and the transactions running then */
typedef struct LeakScan
{
	MemoryContext cxt;			/* holds all of this */
	List	   *objects;		/* keys (URLs) of the objects listed */
	VirtualTransactionId *running;
	int			nrunning;
} LeakScan;

static LeakScan *scan = NULL;

/* Strings gathered from every state (ps_consensus_foreach frees each call's memory) */
typedef struct Gathered
{
	MemoryContext cxt;			/* where the list and its strings go */
	List	   *strings;
} Gathered;

/* Adds the store of a state, if new, to the Gathered *arg (a PsStateVisitor). */
static void
add_store(const char *shard, const PsState *state, void *arg)
{
	Gathered   *g = arg;
	MemoryContext old;
	ListCell   *lc;

	if (state->blob_store == NULL)
		return;
	foreach(lc, g->strings)
		if (strcmp(lfirst(lc), state->blob_store) == 0)
			return;
	old = MemoryContextSwitchTo(g->cxt);
	g->strings = lappend(g->strings, pstrdup(state->blob_store));
	MemoryContextSwitchTo(old);
}

/* Adds every object key of a state to the Gathered *arg (a PsStateVisitor). */
static void
add_objects(const char *shard, const PsState *state, void *arg)
{
	Gathered   *g = arg;
	MemoryContext old = MemoryContextSwitchTo(g->cxt);

	for (int i = 0; i < state->nbatches; i++)
		for (int j = 0; j < state->batches[i].nparts; j++)
		{
			const char *key = state->batches[i].parts[j].blob_key;

			if (key && ps_blob_is_object(key))
				g->strings = lappend(g->strings, pstrdup(key));
		}
	MemoryContextSwitchTo(old);
}

/* True if the last path element of key is a part's 32 hex digits. */
static bool
named_as_part(const char *key)
{
	const char *slash = strrchr(key, '/');

	if (slash == NULL || strlen(slash + 1) != 32)
		return false;
	for (const char *p = slash + 1; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/*
 * Step 1: lists the part objects of every store the shards use (and the
 * one new shards get) and notes the transactions running now.
 */
static void
begin_scan(void)
{
	Gathered	stores = {CurrentMemoryContext, NIL};
	char	   *configured = ps_new_shard_blob_store();
	MemoryContext cxt;
	MemoryContext old;
	LeakScan   *s;
	ListCell   *lc;

	ps_consensus_foreach(add_store, &stores, true);
	if (configured)
		add_store(NULL, &(PsState) {.blob_store = configured}, &stores);
	if (stores.strings == NIL)
		return;
	cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink object leaks",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		s = palloc0(sizeof(LeakScan));
		s->cxt = cxt;
		foreach(lc, stores.strings)
		{
			ListCell   *k;

			if (!ps_store_collected_here(lfirst(lc)))
				continue;
			foreach(k, ps_blob_store_keys(lfirst(lc), NULL))
				if (named_as_part(lfirst(k)))
					s->objects = lappend(s->objects, lfirst(k));
		}
		/* after the listing: whoever put a listed object is running or done */
		s->running = GetCurrentVirtualXIDs(InvalidTransactionId, false, true, 0,
										   &s->nrunning);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	scan = s;
}

/* True once every transaction step 1 noted has ended. */
static bool
scan_settled(void)
{
	for (int i = 0; i < scan->nrunning; i++)
		if (!VirtualXactLock(scan->running[i], false))
			return false;
	return true;
}

/*
 * Step 2: deletes the objects step 1 listed that no state and no garbage
 * row names in a snapshot taken now (after the transactions step 1 noted
 * have ended, so it sees what they committed).  Returns how many.
 */
static uint64
finish_scan(void)
{
	Gathered	named = {CurrentMemoryContext, NIL};
	uint64		deleted = 0;
	ListCell   *lc;

	PushActiveSnapshot(GetLatestSnapshot());
	named.strings = ps_garbage_all_objects();
	ps_consensus_foreach(add_objects, &named, true);
	PopActiveSnapshot();
	ps_blob_keys_sort(named.strings);
	foreach(lc, scan->objects)
	{
		const char *key = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (ps_blob_keys_have(named.strings, key))
			continue;
		if (ps_blob_delete(key))
			deleted++;
	}
	return deleted;
}

/*
 * Takes the next step of a collection of leaked objects, in the caller's
 * transaction: step 1 if none is under way, else step 2 once the
 * transactions step 1 noted have all ended.  Returns the objects deleted;
 * *pending tells whether a step 2 is still to come.
 */
uint64
ps_object_leaks_step(bool *pending)
{
	volatile uint64 deleted = 0;

	*pending = true;
	if (scan == NULL)
	{
		begin_scan();
		*pending = scan != NULL;
		return 0;
	}
	if (!scan_settled())
		return 0;
	*pending = false;
	PG_TRY();
	{
		deleted = finish_scan();
	}
	PG_FINALLY();
	{
		MemoryContextDelete(scan->cxt);
		scan = NULL;
	}
	PG_END_TRY();
	return deleted;
}
