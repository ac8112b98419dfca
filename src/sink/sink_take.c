/*-------------------------------------------------------------------------
 *
 * sink_take.c
 *	  The worker's side of large writes: it takes the parts their writers
 *	  hand over, in the interval's transaction, and writes them to the
 *	  shard's blob store.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"

#include "shard/shard.h"
#include "sink/sink.h"
#include "sink/sink_internal.h"
#include "store/store.h"

/*
 * The blob store the parts of the run's shard go to (NULL: the blob
 * table), read from its state the first time the run needs it (so an
 * interval of small writes reads it only once sealed, when it builds the
 * shared part); the state read serves the interval's CaS as its first
 * attempt.  NULL if the shard is gone (its append then fails).  Needs the
 * interval's transaction and SPI; no lock.
 */
const char *
ps_sink_run_store(SinkRun *run)
{
	if (!run->state_read)
	{
		run->state_found = ps_consensus_read(run->iv->shard, &run->state,
											 CurrentMemoryContext, true);
		run->state_read = true;
	}
	return run->state_found ? run->state.blob_store : NULL;
}

/* Handed-over parts put to an object store at once (their round trips overlap) */
#define PARTS_PUT_AT_ONCE	8

/*
 * The record of a handed-over part: under a new key of the shard's store,
 * or under its chunk's key if its writer put it in the shard's object
 * store.  No lock.
 */
static WrittenPart *
new_written_part(SinkRun *run, const SinkChunk *c)
{
	const char *shard = run->iv->shard;

	WrittenPart *w = palloc0(sizeof(WrittenPart));

	w->ticket = c->ticket;
	w->ticket_id = c->ticket_id;
	if (c->put)
	{
		/* the store start_taking() read from the state this CaS expects */
		Assert(strncmp(SINK_CHUNK_PAYLOAD(c), ps_sink_run_store(run),
					   strlen(ps_sink_run_store(run))) == 0);
		w->part.blob_key = pstrdup(SINK_CHUNK_PAYLOAD(c));
	}
	else
		w->part.blob_key = ps_blob_new_key(shard, ps_sink_run_store(run));
	w->part.encoded_size = c->info.encoded_size;
	w->part.raw_size = c->info.raw_size;
	w->part.nupdates = c->info.nupdates;
	w->part.diff_sum = c->info.diff_sum;
	w->part.checksum = c->info.checksum;
	w->part.positive = !c->info.maybe_nonpositive;
	w->part.distinct = !c->info.maybe_repeating;
	ps_part_copy_bounds(&w->part, &c->bounds);
	return w;
}

/*
 * Writes up to PARTS_PUT_AT_ONCE handed-over parts of the chain run->taken
 * starts to the shard's blob store, at once, and records them in *written
 * with those their writers put in its object store themselves; deletes the
 * objects of writes withdrawn meanwhile, and skips their other parts.
 * Then moves run->taken past them and frees their chunks.  Until then the
 * chunks stay in the chain, which an error frees from run->taken.  Takes
 * the sink lock, briefly, per part.
 */
static void
write_parts(SinkRun *run, List **written, PsWriteCounts *counts)
{
	dsa_pointer taken[PARTS_PUT_AT_ONCE];
	WrittenPart *parts[PARTS_PUT_AT_ONCE];
	const char *keys[PARTS_PUT_AT_ONCE];
	const char *datas[PARTS_PUT_AT_ONCE];
	uint64		lens[PARTS_PUT_AT_ONCE];
	int			ntaken = 0;
	int			nrecorded = 0;
	int			nput = 0;
	dsa_pointer next = run->taken;

	while (ntaken < PARTS_PUT_AT_ONCE && DsaPointerIsValid(next))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), next);
		bool		live;

		LWLockAcquire(ps_sink->lock, LW_SHARED);
		live = ps_sink_ticket_live(c->ticket, c->ticket_id);
		LWLockRelease(ps_sink->lock);
		taken[ntaken++] = next;
		if (live)
			parts[nrecorded++] = new_written_part(run, c);
		else if (c->put)
			ps_blob_delete(SINK_CHUNK_PAYLOAD(c));
		if (live && !c->put)
		{
			keys[nput] = parts[nrecorded - 1]->part.blob_key;
			datas[nput] = SINK_CHUNK_PAYLOAD(c);
			lens[nput++] = c->size;
		}
		next = c->next;
	}
	if (nput > 0)
		ps_blob_put_all(keys, datas, lens, nput);
	for (int i = 0; i < nrecorded; i++)
	{
		counts->blob_puts++;
		counts->blob_bytes += parts[i]->part.encoded_size;
		*written = lappend(*written, parts[i]);
	}
	run->taken = next;
	for (int i = 0; i < ntaken; i++)
		ps_sink_free(taken[i]);
}

/*
 * Tells the interval's large writes that this worker, in the interval's
 * transaction, takes their parts from now on, and the object store they
 * put them in themselves if the shard keeps its parts in one (read from
 * its state, only if a large write joined).  Takes the sink lock.
 */
void
ps_sink_start_taking(SinkRun *run)
{
	SinkInterval *iv = run->iv;
	const char *store = NULL;
	int			large;

	LWLockAcquire(ps_sink->lock, LW_SHARED);
	large = iv->active_large;
	LWLockRelease(ps_sink->lock);
	if (large > 0)
		store = ps_sink_run_store(run);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (store != NULL && strlen(store) < sizeof(iv->parts_store))
		strlcpy(iv->parts_store, store, sizeof(iv->parts_store));
	iv->taking = true;
	LWLockRelease(ps_sink->lock);
	ConditionVariableBroadcast(&iv->cv);
}

/*
 * Writes the parts of large writes as they are handed over, until no large
 * write is still handing over (the barrier).  Parts of cancelled writes are
 * skipped.  Takes the sink lock; holds none while it waits.
 */
List *
ps_sink_take_parts(SinkRun *run, PsWriteCounts *counts)
{
	SinkInterval *iv = run->iv;
	List	   *written = NIL;

	for (;;)
	{
		dsa_pointer head;
		bool		sealed;

		LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
		head = iv->parts_head;
		iv->parts_head = iv->parts_tail = InvalidDsaPointer;
		sealed = !DsaPointerIsValid(head) && iv->active_large == 0;
		LWLockRelease(ps_sink->lock);
		if (sealed)
			return written;
		if (!DsaPointerIsValid(head))
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 100, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		/* until freed, the taken parts are ours to free if we fail */
		run->taken = head;
		while (DsaPointerIsValid(run->taken))
			write_parts(run, &written, counts);
	}
}

/*
 * Drops the parts of writes withdrawn after their parts were written; the
 * interval is sealed, so no more can be.  Takes the sink lock per part.
 */
List *
ps_sink_drop_abandoned(List *written, PsWriteCounts *counts)
{
	List	   *kept = NIL;
	ListCell   *lc;

	foreach(lc, written)
	{
		WrittenPart *w = lfirst(lc);
		bool		skip;

		LWLockAcquire(ps_sink->lock, LW_SHARED);
		skip = !ps_sink_ticket_live(w->ticket, w->ticket_id);
		LWLockRelease(ps_sink->lock);
		if (skip)
		{
			ps_blob_delete(w->part.blob_key);
			counts->blob_puts--;
			counts->blob_bytes -= w->part.encoded_size;
		}
		else
			kept = lappend(kept, w);
	}
	return kept;
}
