/*-------------------------------------------------------------------------
 *
 * sink_worker.c
 *	  The sink's background workers: they pick intervals that are ready,
 *	  write their parts and commit each with one compare_and_append.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "base/background.h"
#include "base/settings.h"
#include "shard/compact.h"
#include "shard/shard.h"
#include "shard/stats.h"
#include "shard/upper_wait.h"
#include "sink/sink.h"
#include "store/store.h"

/* How long an interval whose state row is held waits before another try */
#define RETRY_BLOCKED_MS	20
/* Longest wait for a lock in an interval's transaction */
#define WORKER_LOCK_TIMEOUT	"10s"

/* A part written by the worker, with the write (ticket) it came from */
typedef struct WrittenPart
{
	int			ticket;
	uint64		ticket_id;
	PsPart		part;
} WrittenPart;

static int	my_index = -1;
static int	my_interval = -1;	/* the interval being processed */
static List *my_blocked = NIL;	/* intervals waiting for their state row's
								 * lock (int list, in TopMemoryContext) */
static bool my_committed = false;	/* ... and its transaction committed */
static bool my_nothing = false;	/* ... or it had nothing left to commit */
static int64 my_time = 0;		/* ... at this time */
static XLogRecPtr my_commit_lsn = InvalidXLogRecPtr;	/* ... its commit record's end */
static dsa_pointer my_taken = InvalidDsaPointer;	/* parts taken, not yet freed */
static bool my_state_read = false;	/* the interval's shard's state has
										 * been read in its transaction: */
static bool my_state_found = false; /* ... the shard exists, */
static PsState my_state;		/* ... its state then (in the work context) */
static bool my_keys_recorded = false;	/* the interval's transaction recorded
										 * keys: move the key epoch after it */

static void keys_commit_ended(void);

/*
 * Registers the sink workers, and records those refused a slot; called from
 * _PG_init.
 */
void
ps_sink_register_workers(void)
{
	for (int i = 0; i < ps_workers; i++)
	{
		char		name[BGW_MAXLEN];

		snprintf(name, sizeof(name), "persist_sink worker %d", i);
		if (!ps_register_worker("ps_sink_worker_main", name, "persist_sink worker", i))
			ps_sink_note_refused(i);
	}
}

/*
 * Sets the outcome of every ticket of an interval at once and marks them
 * done; frees those whose writers left.  Caller holds the sink lock
 * exclusively.
 */
static void
decide_outcomes(SinkInterval *iv, bool committed, int64 time, int code)
{
	int			t;
	int			next;

	for (t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
		ps_sink_ticket_decide(&ps_sink_tickets[t], committed, time, code);
	for (t = iv->tickets_head; t >= 0; t = next)
	{
		SinkTicket *tk = &ps_sink_tickets[t];
		SinkTicketState state = tk->state;

		next = tk->next;
		/* withdrawn while a worker that exited encoded it: no one waits */
		if (state != TK_WITHDRAWN)
		{
			ps_sink_ticket_move(tk, state, TK_DONE);
			state = TK_DONE;
		}
		if (!tk->writer_waits)
			ps_sink_ticket_free(t, state);
	}
	iv->tickets_head = iv->tickets_tail = -1;
}

/*
 * Marks an interval done (committed at time, or failed), sets the outcome
 * of each of its writes, frees its chunks and wakes its writers.  A
 * committed interval's writers flush the WAL up to its commit record
 * (my_commit_lsn); any other outcome up to the WAL written so far, which
 * covers the earlier commits it was decided from (a repeated idempotency
 * key's time).
 */
static void
finish_interval(int index, bool failed, int64 time, int code, const char *message)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	XLogRecPtr	flush_lsn = my_committed ? my_commit_lsn : ps_wal_inserted_end();
	dsa_pointer small;
	dsa_pointer parts;

	if (iv->waiting_row)
		ps_sink_set_blocked(iv, false, InvalidTransactionId, 0);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	small = iv->small_head;
	parts = iv->parts_head;
	iv->small_head = iv->parts_head = iv->parts_tail = InvalidDsaPointer;
	iv->flush_lsn = flush_lsn;
	strlcpy(iv->message, message ? message : "", sizeof(iv->message));
	decide_outcomes(iv, !failed, time, code);
	ps_sink_finish(iv);
	LWLockRelease(ps_sink->lock);
	ps_idempotency_hold(0);
	ConditionVariableBroadcast(&iv->cv);
	ps_sink_forget_ahead(index);
	ps_sink_free_list(small);
	ps_sink_free_list(parts);
	ps_sink_free_list(my_taken);
	my_taken = InvalidDsaPointer;
}

/* Fails the interval being processed, if any, when the worker exits. */
static void
worker_exit(int code, Datum arg)
{
	if (my_interval >= 0 && my_committed)
		finish_interval(my_interval, false, my_time, 0, NULL);
	else if (my_interval >= 0)
		finish_interval(my_interval, true, 0, ERRCODE_CONNECTION_FAILURE,
						"persist_sink worker exited before the interval committed");
	my_interval = -1;
	keys_commit_ended();
	{
		ListCell   *lc;

		foreach(lc, my_blocked)
			finish_interval(lfirst_int(lc), true, 0, ERRCODE_CONNECTION_FAILURE,
							"persist_sink worker exited before the interval committed");
	}
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (ps_sink->workers[my_index].proc == MyProc)
		ps_sink->workers[my_index].proc = NULL;
	LWLockRelease(ps_sink->lock);
}

/*
 * The blob store the parts of the interval's shard go to (NULL: the blob
 * table), read from its state the first time an interval needs it (so an
 * interval of small writes reads it only once sealed, when it builds the
 * shared part); the state read serves the interval's CaS as its first
 * attempt.  NULL if the shard is gone (its append then fails).  Needs the
 * interval's transaction and SPI.
 */
static const char *
interval_store(const char *shard)
{
	if (!my_state_read)
	{
		my_state_found = ps_consensus_read(shard, &my_state,
										   CurrentMemoryContext, true);
		my_state_read = true;
	}
	return my_state_found ? my_state.blob_store : NULL;
}

/* Handed-over parts put to an object store at once (their round trips overlap) */
#define PARTS_PUT_AT_ONCE	8

/*
 * The record of a handed-over part: under a new key of the shard's store,
 * or under its chunk's key if its writer put it in the shard's object
 * store.
 */
static WrittenPart *
new_written_part(const char *shard, const SinkChunk *c)
{
	WrittenPart *w = palloc0(sizeof(WrittenPart));

	w->ticket = c->ticket;
	w->ticket_id = c->ticket_id;
	if (c->put)
	{
		/* the store start_taking() read from the state this CaS expects */
		Assert(strncmp(SINK_CHUNK_PAYLOAD(c), interval_store(shard),
					   strlen(interval_store(shard))) == 0);
		w->part.blob_key = pstrdup(SINK_CHUNK_PAYLOAD(c));
	}
	else
		w->part.blob_key = ps_blob_new_key(shard, interval_store(shard));
	w->part.encoded_size = c->info.encoded_size;
	w->part.raw_size = c->info.raw_size;
	w->part.nupdates = c->info.nupdates;
	w->part.diff_sum = c->info.diff_sum;
	w->part.checksum = c->info.checksum;
	ps_part_copy_bounds(&w->part, &c->bounds);
	return w;
}

/*
 * Writes up to PARTS_PUT_AT_ONCE handed-over parts of the chain my_taken
 * starts to the shard's blob store, at once, and records them in *written
 * with those their writers put in its object store themselves; deletes the
 * objects of writes withdrawn meanwhile, and skips their other parts.
 * Then moves my_taken past them and frees their chunks.  Until then the
 * chunks stay in the chain, which an error frees from my_taken.
 */
static void
write_parts(const char *shard, List **written, PsWriteCounts *counts)
{
	dsa_pointer taken[PARTS_PUT_AT_ONCE];
	WrittenPart *parts[PARTS_PUT_AT_ONCE];
	const char *keys[PARTS_PUT_AT_ONCE];
	const char *datas[PARTS_PUT_AT_ONCE];
	uint64		lens[PARTS_PUT_AT_ONCE];
	int			ntaken = 0;
	int			nrecorded = 0;
	int			nput = 0;
	dsa_pointer next = my_taken;

	while (ntaken < PARTS_PUT_AT_ONCE && DsaPointerIsValid(next))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), next);
		bool		live;

		LWLockAcquire(ps_sink->lock, LW_SHARED);
		live = ps_sink_ticket_live(c->ticket, c->ticket_id);
		LWLockRelease(ps_sink->lock);
		taken[ntaken++] = next;
		if (live)
			parts[nrecorded++] = new_written_part(shard, c);
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
	my_taken = next;
	for (int i = 0; i < ntaken; i++)
		ps_sink_free(taken[i]);
}

/*
 * Tells the interval's large writes that this worker, in the interval's
 * transaction, takes their parts from now on, and the object store they
 * put them in themselves if the shard keeps its parts in one (read from
 * its state, only if a large write joined).  Takes the sink lock.
 */
static void
start_taking(SinkInterval *iv)
{
	const char *store = NULL;
	int			large;

	LWLockAcquire(ps_sink->lock, LW_SHARED);
	large = iv->active_large;
	LWLockRelease(ps_sink->lock);
	if (large > 0)
		store = interval_store(iv->shard);
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
 * skipped.
 */
static List *
take_parts(SinkInterval *iv, PsWriteCounts *counts)
{
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
		my_taken = head;
		while (DsaPointerIsValid(my_taken))
			write_parts(iv->shard, &written, counts);
	}
}

/*
 * Drops the parts of writes withdrawn after their parts were written; the
 * interval is sealed, so no more can be.
 */
static List *
drop_abandoned(SinkInterval *iv, List *written, PsWriteCounts *counts)
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

/*
 * Looks up at once, in the idempotency table, the keys of the sealed
 * interval's keyed writes, but those whose lookup on arrival still stands
 * (key_epoch.c).  Their keys never change once published: read without
 * the lock.
 */
static List *
fetch_stored_keys(SinkInterval *iv)
{
	const char **keys = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	int			n = 0;
	uint64		epoch = ps_sink_key_epoch();

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
		if (ps_sink_tickets[t].has_key && ps_sink_tickets[t].key_epoch != epoch)
			keys[n++] = ps_sink_tickets[t].key;
	return ps_idempotency_get_many(iv->shard, keys, n, PS_DIGEST_LEN);
}

/* The stored key of that name, or NULL. */
static PsStoredKey *
find_stored(List *stored, const char *key)
{
	ListCell   *lc;

	foreach(lc, stored)
		if (strcmp(((PsStoredKey *) lfirst(lc))->key, key) == 0)
			return lfirst(lc);
	return NULL;
}

/*
 * The first write of the interval, before ticket t in join order, that
 * has t's key and is to be written; -1 if none.
 */
static int
first_of_key(SinkInterval *iv, int t)
{
	for (int f = iv->tickets_head; f >= 0 && f != t; f = ps_sink_tickets[f].next)
		if (ps_sink_tickets[f].has_key && ps_sink_tickets[f].verdict == VD_WRITE &&
			strcmp(ps_sink_tickets[f].key, ps_sink_tickets[t].key) == 0)
			return f;
	return -1;
}

/*
 * Gives each keyed write of the sealed interval its verdict, in join
 * order: its key committed before (in the idempotency table) makes it a
 * repeat of that write or a conflict with it; else a write of the same
 * key earlier in the interval makes it follow that one; else it is to be
 * written.  Verdicts are the worker's own until the tickets are done.
 */
static void
settle_keys(SinkInterval *iv)
{
	List	   *stored = fetch_stored_keys(iv);

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
	{
		SinkTicket *tk = &ps_sink_tickets[t];
		PsStoredKey *sk;
		bool		same;

		if (!tk->has_key)
			continue;
		if ((sk = find_stored(stored, tk->key)) != NULL)
		{
			same = sk->digest_len == PS_DIGEST_LEN &&
				memcmp(sk->digest, tk->digest, PS_DIGEST_LEN) == 0;
			tk->verdict = same ? VD_REPEAT_STORED : VD_CONFLICT_STORED;
			tk->stored_time = sk->time;
		}
		else if ((tk->first = first_of_key(iv, t)) >= 0)
		{
			same = memcmp(ps_sink_tickets[tk->first].digest, tk->digest,
						  PS_DIGEST_LEN) == 0;
			tk->verdict = same ? VD_REPEAT_HERE : VD_CONFLICT_HERE;
		}
	}
}

/* True if the write of ticket t is to be written (so far). */
static bool
to_write(int t)
{
	return ps_sink_tickets[t].verdict == VD_WRITE;
}

/*
 * Leaves out of the interval the small chunks and the large writes' parts
 * of writes not to be written (repeats and conflicts), deleting those
 * parts' blob rows.  The interval is sealed: its lists no longer change.
 */
static List *
leave_out_settled(SinkInterval *iv, List *written, PsWriteCounts *counts)
{
	dsa_pointer dropped = InvalidDsaPointer;
	dsa_pointer *link = &iv->small_head;
	List	   *kept = NIL;
	ListCell   *lc;

	while (DsaPointerIsValid(*link))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), *link);
		dsa_pointer p = *link;

		if (to_write(c->ticket))
		{
			link = &c->next;
			continue;
		}
		*link = c->next;
		c->next = dropped;
		dropped = p;
	}
	ps_sink_free_list(dropped);
	foreach(lc, written)
	{
		WrittenPart *w = lfirst(lc);

		if (to_write(w->ticket))
		{
			kept = lappend(kept, w);
			continue;
		}
		ps_blob_delete(w->part.blob_key);
		counts->blob_puts--;
		counts->blob_bytes -= w->part.encoded_size;
	}
	return kept;
}

/*
 * Counts the interval's writes to be written, small (joining the shared
 * part) and large; after the shared part is built, refused ones are not.
 */
static int
count_to_write(SinkInterval *iv, int *small, int *large)
{
	*small = *large = 0;
	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
		if (to_write(t))
			(*(ps_sink_tickets[t].large ? large : small))++;
	return *small + *large;
}

/*
 * Records the keys of the interval's keyed writes it commits, at time;
 * if there are any, the key epoch is moved once the transaction ends
 * (keys_commit_ended).
 */
static void
store_keys(SinkInterval *iv, int64 time)
{
	const char **keys = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	const char **digests = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	int			n = 0;

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
	{
		if (!ps_sink_tickets[t].has_key || !to_write(t))
			continue;
		keys[n] = ps_sink_tickets[t].key;
		digests[n++] = ps_sink_tickets[t].digest;
	}
	ps_idempotency_put_many(iv->shard, keys, digests, n, time, PS_DIGEST_LEN);
	my_keys_recorded = n > 0;
}

/* Moves the key epoch if the interval's transaction, now ended, recorded keys. */
static void
keys_commit_ended(void)
{
	if (!my_keys_recorded)
		return;
	my_keys_recorded = false;
	ps_sink_key_epoch_move();
}

/*
 * Builds the interval's batch: the shared part(s) of the small writes, then
 * the large writes' parts.  The batch is single_time: its time is chosen at
 * the CaS.
 */
static void
build_batch(SinkInterval *iv, List *written, PsBatch *batch,
			PsWriteCounts *counts, uint64 *updates)
{
	PsBatch		shared = {0};
	PsWriteCounts shared_counts = {0};
	ListCell   *lc;
	int			i;

	*updates = ps_sink_build_shared(iv - ps_sink_intervals, interval_store(iv->shard),
									&shared, &shared_counts);

	batch->single_time = true;
	batch->since = 0;
	batch->nparts = shared.nparts + list_length(written);
	batch->parts = palloc0(sizeof(PsPart) * Max(batch->nparts, 1));
	for (i = 0; i < shared.nparts; i++)
		batch->parts[i] = shared.parts[i];
	foreach(lc, written)
	{
		batch->parts[i++] = ((WrittenPart *) lfirst(lc))->part;
		*updates += ((WrittenPart *) lfirst(lc))->part.nupdates;
	}
	counts->parts = batch->nparts;
	counts->blob_puts += shared_counts.blob_puts;
	counts->blob_bytes += shared_counts.blob_bytes;
	counts->inline_batches = ps_batch_is_inline(batch) ? 1 : 0;
}

/*
 * Commits the interval's transaction and records where its commit record
 * ends.  Without synchronous standbys to wait for, the commit does not wait
 * for the WAL flush: the interval's writers wait for it (each flushes up to
 * my_commit_lsn before it reports success, whatever synchronous_commit
 * says), and the worker goes on with the next interval meanwhile.  Reads
 * of the shard's state wait for the flush of what they read
 * (store/consensus.c), so nothing a crash could undo is ever returned.
 * With synchronous standbys to wait for (synchronous_commit above local),
 * the commit waits as it says.
 */
static void
commit_interval_xact(void)
{
	my_commit_lsn = ps_worker_commit();
	my_committed = true;
}

/*
 * Seals the set of writes the interval commits: from now on no writer can
 * withdraw its write, and the worker decides each one's outcome.  A ticket
 * left withdrawn by a worker that exited while encoding its chunk ahead is
 * freed.  While the keyed writes sealed are in flight, this worker holds
 * their keys' window open from the oldest one's arrival.  Takes the sink
 * lock.
 */
static void
seal_writes(SinkInterval *iv)
{
	dsa_pointer stale = InvalidDsaPointer;
	TimestampTz oldest_keyed = 0;
	int			next;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (int t = iv->tickets_head; t >= 0; t = next)
	{
		SinkTicket *tk = &ps_sink_tickets[t];

		next = tk->next;
		if (tk->state == TK_WITHDRAWN)
		{
			dsa_pointer chunk = ps_sink_drop_write(iv, t, ps_sink_small_of(iv, t),
												   TK_WITHDRAWN);

			if (DsaPointerIsValid(chunk))
			{
				((SinkChunk *) dsa_get_address(ps_sink_arena(), chunk))->next = stale;
				stale = chunk;
			}
			continue;
		}
		ps_sink_ticket_move(tk, TK_JOINED, TK_SEALED);
		tk->verdict = VD_WRITE;
		tk->first = -1;
		tk->encoding = false;
		if (tk->has_key && (oldest_keyed == 0 || tk->arrived_at < oldest_keyed))
			oldest_keyed = tk->arrived_at;
	}
	if (oldest_keyed != 0)
		ps_idempotency_hold(oldest_keyed);
	LWLockRelease(ps_sink->lock);
	ps_sink_free_list(stale);
}

/*
 * Records that the shard's state row was held by another transaction, and
 * when to try again (sooner if a compactor's merge that held it ends:
 * ps_sink_state_row_released); wakes the interval's writers, one of which
 * may be that transaction.  Takes the sink lock.
 */
static void
block_interval(int index, TransactionId holder)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	MemoryContext old;

	ps_sink_set_blocked(iv, true, holder,
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													RETRY_BLOCKED_MS));
	/* a holder that ended before the interval was marked could not wake it */
	if (TransactionIdIsValid(holder) && !TransactionIdIsInProgress(holder))
		ps_sink_state_row_released(iv->shard);
	ConditionVariableBroadcast(&iv->cv);
	old = MemoryContextSwitchTo(TopMemoryContext);
	my_blocked = list_append_unique_int(my_blocked, index);
	MemoryContextSwitchTo(old);
}

/* True if every write has left the interval; takes the sink lock. */
static bool
interval_abandoned(SinkInterval *iv)
{
	bool		abandoned;

	LWLockAcquire(ps_sink->lock, LW_SHARED);
	abandoned = ps_sink_abandoned(iv);
	LWLockRelease(ps_sink->lock);
	return abandoned;
}

/*
 * Takes off the blocked list the first interval due for another try, or
 * that every write has left (it is finished at once, to free its slot);
 * -1 if none, with *sleep_ms lowered to the next one's time.
 */
static int
take_blocked_due(TimestampTz now, long *sleep_ms)
{
	ListCell   *lc;

	foreach(lc, my_blocked)
	{
		int			index = lfirst_int(lc);
		TimestampTz at = ps_sink_retry_at(&ps_sink_intervals[index]);

		if (at <= now || interval_abandoned(&ps_sink_intervals[index]))
		{
			my_blocked = foreach_delete_current(my_blocked, lc);
			return index;
		}
		*sleep_ms = Min(*sleep_ms, Max(1, TimestampDifferenceMilliseconds(now, at)));
	}
	return -1;
}

/* Ends the interval's transaction without writing anything. */
static void
abandon_transaction(void)
{
	PopActiveSnapshot();
	SPI_finish();
	AbortCurrentTransaction();
}

/*
 * Writes, appends and commits one interval, in a transaction of its own;
 * sets my_time to its time and delta to what it wrote.  Returns false,
 * having written nothing, if another transaction holds the shard's state
 * row: the interval is then tried again later, and the worker goes on with
 * other shards meanwhile.  A lock taken in the short time between that
 * check and the CaS is waited for up to WORKER_LOCK_TIMEOUT, then the
 * interval fails (55P03) with nothing written.  An interval left with no
 * write to commit (every one withdrawn, refused, or settled by its key) is
 * not appended: a failed write changes nothing.
 */
static pg_noinline bool
commit_interval(int index, PsCounters *delta)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	PsWriteCounts counts = {0};
	PsAppendResult result;
	PsBatch		batch = {0};
	List	   *written;
	uint64		updates = 0;
	TransactionId holder;
	int			nsmall;
	int			nlarge;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, iv->shard);

	/* a bound on any lock wait, so that one shard cannot stall the others */
	(void) set_config_option("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	/* every write left it while it waited for its row: nothing to try */
	if (iv->waiting_row && interval_abandoned(iv))
	{
		abandon_transaction();
		my_nothing = true;
		return true;
	}
	if (!ps_consensus_probe_lock(iv->shard, &holder))
	{
		abandon_transaction();
		block_interval(index, holder);
		return false;
	}
	/* only this worker sets waiting_row: no lock needed to read it */
	if (iv->waiting_row)
		ps_sink_set_blocked(iv, false, InvalidTransactionId, 0);
	my_state_read = false;
	start_taking(iv);
	written = take_parts(iv, &counts);
	seal_writes(iv);
	written = drop_abandoned(iv, written, &counts);
	settle_keys(iv);
	written = leave_out_settled(iv, written, &counts);
	if (count_to_write(iv, &nsmall, &nlarge) > 0)
		build_batch(iv, written, &batch, &counts, &updates);
	/* the shared part may have refused small writes */
	if (count_to_write(iv, &nsmall, &nlarge) == 0)
	{
		abandon_transaction();
		my_nothing = true;
		return true;
	}
	ps_shard_append_now(iv->shard, my_state_found ? &my_state : NULL,
						&batch, &result);
	store_keys(iv, batch.time);

	memset(delta, 0, sizeof(PsCounters));
	delta->appends = 1;
	delta->updates = updates;
	delta->shared_writes = nsmall;
	delta->own_writes = nlarge;
	delta->parts_written = counts.parts;
	delta->blob_puts = counts.blob_puts;
	delta->blob_bytes = counts.blob_bytes;
	delta->inline_batches = counts.inline_batches;
	delta->state_bytes = result.state_bytes;
	delta->cas_attempts = result.cas_attempts;
	delta->cas_mismatches = result.cas_mismatches;
	my_time = batch.time;

	PopActiveSnapshot();
	SPI_finish();
	commit_interval_xact();
	keys_commit_ended();
	return true;
}

/*
 * Processes one interval and tells its writers the outcome, decided once:
 * an error before the commit fails the interval, and once it has committed
 * its writers are told success whatever fails afterwards.  An interval
 * whose state row is held elsewhere is left for a later try.
 */
static void
process_interval(int index, MemoryContext work_cxt)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	MemoryContext old = MemoryContextSwitchTo(work_cxt);
	ErrorData  *volatile edata = NULL;
	volatile bool blocked = false;
	PsCounters	delta;

	my_interval = index;
	my_committed = false;
	my_nothing = false;
	PG_TRY();
	{
		blocked = !commit_interval(index, &delta);
		pgstat_report_activity(STATE_IDLE, NULL);
		if (my_committed)
		{
			/* let autovacuum see the blob and consensus rows this wrote */
			pgstat_report_stat(false);
			ps_stats_add(iv->shard, &delta);
			ps_compaction_request(iv->shard);
			ps_upper_notify(iv->shard);
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(work_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		keys_commit_ended();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_END_TRY();
	my_interval = -1;
	if (blocked && edata == NULL)
	{
		/* not finished: block_interval listed it for another try */
	}
	else if (my_committed)
		finish_interval(index, false, my_time, 0, NULL);
	else if (my_nothing)
		finish_interval(index, true, 0, ERRCODE_QUERY_CANCELED,
						"every write of the interval was withdrawn or refused");
	else
		finish_interval(index, true, 0, edata->sqlerrcode, edata->message);
	if (edata)
		ereport(LOG,
				(errmsg("persist_sink: interval of shard \"%s\" %s: %s", iv->shard,
						my_committed ? "committed, but a later step failed" : "failed",
						edata->message)));
	MemoryContextSwitchTo(old);
	MemoryContextReset(work_cxt);
}

/*
 * The database a worker started on demand serves (InvalidOid for the
 * workers of persist_sink.database); exits, for good, if its slot is no
 * longer its own.
 */
static Oid
claimed_database(PsWorkerClaim *claim)
{
	if (my_index < ps_workers)
		return InvalidOid;
	memcpy(claim, MyBgworkerEntry->bgw_extra, sizeof(PsWorkerClaim));
	if (!ps_sink_claim_slot(my_index, claim, false))
		proc_exit(0);
	return claim->database;
}

/*
 * Makes this process the worker of its slot, once connected; a worker
 * started on demand whose slot was given up meanwhile exits, for good.
 */
static void
attach_to_slot(PsWorkerClaim *claim)
{
	if (my_index >= ps_workers)
	{
		if (!ps_sink_claim_slot(my_index, claim, true))
			proc_exit(0);
		return;
	}
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[my_index].proc = MyProc;
	LWLockRelease(ps_sink->lock);
}

/*
 * Exits, for good, a worker started on demand that has had nothing to do
 * for persist_sink.worker_idle_timeout since idle_since, or whose database
 * is being dropped, once it has no interval left: its database's next
 * append starts another.
 */
static void
exit_if_done(TimestampTz idle_since)
{
	bool		idle;

	if (my_index < ps_workers || my_blocked != NIL)
		return;
	idle = TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(),
									  ps_worker_idle_timeout_ms);
	if (ps_sink_give_up_slot(my_index, idle))
		proc_exit(0);
}

/* Entry point of a sink worker. */
void
ps_sink_worker_main(Datum arg)
{
	MemoryContext work_cxt;
	TimestampTz idle_since;
	PsWorkerClaim claim;

	my_index = DatumGetInt32(arg);
	ps_worker_start(claimed_database(&claim));
	/* its reads feed its own commits, whose writers wait for the flush */
	ps_consensus_skip_durable_wait();
	attach_to_slot(&claim);
	before_shmem_exit(worker_exit, (Datum) 0);

	work_cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink worker",
									 ALLOCSET_DEFAULT_SIZES);
	idle_since = GetCurrentTimestamp();
	for (;;)
	{
		long		sleep_ms = 1000;
		int			index;

		ps_worker_check_signals();
		index = take_blocked_due(GetCurrentTimestamp(), &sleep_ms);
		if (index < 0)
			index = ps_sink_take_ready(my_index, GetCurrentTimestamp(), &sleep_ms);
		if (index >= 0)
		{
			process_interval(index, work_cxt);
			idle_since = GetCurrentTimestamp();
			continue;
		}
		if (ps_sink_encode_ahead(my_index))
			continue;
		pgstat_report_stat(true);
		exit_if_done(idle_since);
		if (my_index >= ps_workers)
			sleep_ms = Min(sleep_ms, ps_worker_idle_timeout_ms);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
