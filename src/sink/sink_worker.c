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

/* A part written by the worker, with the write it came from */
typedef struct WrittenPart
{
	uint64		writer;
	int			procno;
	PsPart		part;
} WrittenPart;

/* What the worker makes of a write with an idempotency key */
typedef enum KeyOutcome
{
	KEY_NEW,					/* commit it, and its key with it */
	KEY_REPEAT_HERE,			/* an equal write of this interval commits */
	KEY_REPEAT_STORED,			/* an equal write was committed before */
	KEY_CONFLICT				/* the key was used for other content */
} KeyOutcome;

/* A write with a new idempotency key that this interval commits */
typedef struct KeyedWrite
{
	char		key[PS_MAX_IDEMPOTENCY_KEY + 1];
	char		digest[PS_DIGEST_LEN];
} KeyedWrite;

static int	my_index = -1;
static int	my_interval = -1;	/* the interval being processed */
static List *my_blocked = NIL;	/* intervals waiting for their state row's
								 * lock (int list, in TopMemoryContext) */
static bool my_committed = false;	/* ... and its transaction committed */
static bool my_nothing = false;	/* ... or it had nothing left to commit */
static int64 my_time = 0;		/* ... at this time */
static XLogRecPtr my_commit_lsn = InvalidXLogRecPtr;	/* ... its commit record's end */
static dsa_pointer my_taken = InvalidDsaPointer;	/* parts taken, not yet freed */

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

/* Frees every chunk of a list; takes the sink lock per chunk. */
static void
free_chunks(dsa_pointer head)
{
	while (DsaPointerIsValid(head))
	{
		dsa_pointer next = ((SinkChunk *) dsa_get_address(ps_sink_arena(), head))->next;

		ps_sink_free(head);
		head = next;
	}
}

/*
 * Marks an interval done (failed or at time), frees its chunks and wakes its
 * writers.  A committed interval's writers flush the WAL up to its commit
 * record (my_commit_lsn); any other outcome up to the WAL written so far,
 * which covers the earlier commits it was decided from (a repeated
 * idempotency key's time).
 */
static void
finish_interval(int index, bool failed, int64 time, int code, const char *message)
{
	SinkInterval *iv = &ps_sink->intervals[index];
	XLogRecPtr	flush_lsn = my_committed ? my_commit_lsn : ps_wal_inserted_end();
	dsa_pointer small;
	dsa_pointer parts;

	if (iv->waiting_row)
		ps_sink_set_blocked(iv, false, InvalidTransactionId);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	small = iv->small_head;
	parts = iv->parts_head;
	iv->small_head = iv->parts_head = iv->parts_tail = InvalidDsaPointer;
	iv->failed = failed;
	iv->time = time;
	iv->flush_lsn = flush_lsn;
	iv->sqlerrcode = code;
	strlcpy(iv->message, message ? message : "", sizeof(iv->message));
	ps_sink_finish(iv);
	LWLockRelease(ps_sink->lock);
	ConditionVariableBroadcast(&iv->cv);
	ps_sink_forget_ahead(index);
	free_chunks(small);
	free_chunks(parts);
	free_chunks(my_taken);
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
	{
		ListCell   *lc;

		foreach(lc, my_blocked)
			finish_interval(lfirst_int(lc), true, 0, ERRCODE_CONNECTION_FAILURE,
							"persist_sink worker exited before the interval committed");
	}
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[my_index].proc = NULL;
	LWLockRelease(ps_sink->lock);
}

/* Writes a handed-over part's blob row and records it. */
static void
write_part(const char *shard, SinkChunk *c, List **written, PsWriteCounts *counts)
{
	WrittenPart *w = palloc0(sizeof(WrittenPart));

	w->writer = c->writer;
	w->procno = c->procno;
	w->part.blob_key = ps_blob_new_key(shard);
	w->part.encoded_size = c->info.encoded_size;
	w->part.raw_size = c->info.raw_size;
	w->part.nupdates = c->info.nupdates;
	w->part.diff_sum = c->info.diff_sum;
	w->part.checksum = c->info.checksum;
	ps_part_set_lower(&w->part, c->lower.lower, c->lower.lower_len);
	ps_blob_put(w->part.blob_key, SINK_CHUNK_PAYLOAD(c), c->size);
	counts->blob_puts++;
	counts->blob_bytes += c->size;
	*written = lappend(*written, w);
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
		{
			SinkChunk  *c = dsa_get_address(ps_sink_arena(), my_taken);
			dsa_pointer next = c->next;
			bool		skip;

			LWLockAcquire(ps_sink->lock, LW_SHARED);
			skip = ps_sink_is_withdrawn(iv, c->writer);
			LWLockRelease(ps_sink->lock);
			if (!skip)
				write_part(iv->shard, c, &written, counts);
			ps_sink_free(my_taken);
			my_taken = next;
		}
	}
}

/* Drops the parts of writes cancelled after their parts were written. */
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
		skip = ps_sink_is_withdrawn(iv, w->writer);
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
 * The writer slot of a write, if the write carries an idempotency key;
 * NULL if not.  Slots are filled before their write joins an interval.
 */
static SinkWriterSlot *
keyed_slot(int procno, uint64 writer)
{
	SinkWriterSlot *slot = &ps_sink_writers[procno];

	if (procno < 0 || procno >= MaxBackends || slot->writer != writer || !slot->has_key)
		return NULL;
	return slot;
}

/*
 * Looks up at once, in the idempotency table, the keys of every keyed write
 * of the sealed interval (small chunks and large writes' parts).
 */
static List *
fetch_stored_keys(SinkInterval *iv, List *written)
{
	const char **keys = palloc(sizeof(char *) * (iv->joined + 1));
	int			n = 0;
	ListCell   *lc;

	for (dsa_pointer p = iv->small_head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);
		SinkWriterSlot *slot = keyed_slot(c->procno, c->writer);

		if (slot && n < iv->joined + 1)
			keys[n++] = slot->key;
		p = c->next;
	}
	foreach(lc, written)
	{
		WrittenPart *w = lfirst(lc);
		SinkWriterSlot *slot = keyed_slot(w->procno, w->writer);

		if (slot && n < iv->joined + 1)
			keys[n++] = slot->key;
	}
	return ps_idempotency_get_many(iv->shard, keys, n, PS_DIGEST_LEN);
}

/*
 * Decides what to do with a keyed write: an equal write of this interval
 * or committed before (in stored) makes it a repeat, other content under
 * the key a conflict; a new key joins *keyed.  A decision that is the
 * write's own (a committed repeat, a conflict) is set in its slot, under
 * the sink lock.
 */
static KeyOutcome
decide_key(SinkWriterSlot *slot, List *stored, List **keyed)
{
	ListCell   *lc;
	KeyedWrite *k;
	int64		time = 0;
	KeyOutcome	outcome = KEY_NEW;

	foreach(lc, *keyed)
	{
		k = lfirst(lc);
		if (strcmp(k->key, slot->key) == 0)
			return memcmp(k->digest, slot->digest, PS_DIGEST_LEN) == 0 ?
				KEY_REPEAT_HERE : KEY_CONFLICT;
	}
	foreach(lc, stored)
	{
		PsStoredKey *sk = lfirst(lc);

		if (strcmp(sk->key, slot->key) != 0)
			continue;
		time = sk->time;
		outcome = memcmp(sk->digest, slot->digest, PS_DIGEST_LEN) == 0 ?
			KEY_REPEAT_STORED : KEY_CONFLICT;
		break;
	}
	if (outcome == KEY_NEW)
	{
		k = palloc(sizeof(KeyedWrite));
		strlcpy(k->key, slot->key, sizeof(k->key));
		memcpy(k->digest, slot->digest, PS_DIGEST_LEN);
		*keyed = lappend(*keyed, k);
		return outcome;
	}
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	slot->decided = true;
	slot->time = time;
	slot->sqlerrcode = outcome == KEY_CONFLICT ? ERRCODE_PS_IDEMPOTENCY_CONFLICT : 0;
	LWLockRelease(ps_sink->lock);
	return outcome;
}

/* Records the new keys of the interval's writes, committed at time. */
static void
store_keys(const char *shard, List *keyed, int64 time)
{
	int			n = list_length(keyed);
	const char **keys = palloc(sizeof(char *) * Max(n, 1));
	const char **digests = palloc(sizeof(char *) * Max(n, 1));
	int			i = 0;
	ListCell   *lc;

	foreach(lc, keyed)
	{
		KeyedWrite *k = lfirst(lc);

		keys[i] = k->key;
		digests[i++] = k->digest;
	}
	ps_idempotency_put_many(shard, keys, digests, n, time, PS_DIGEST_LEN);
}

/*
 * Leaves out of the interval every keyed small write that repeats an
 * earlier one or conflicts with its key; returns how many.  The interval
 * is sealed: its list of small chunks no longer changes.
 */
static int
settle_small_keys(SinkInterval *iv, List *stored, List **keyed)
{
	dsa_pointer dropped = InvalidDsaPointer;
	dsa_pointer *link = &iv->small_head;
	int			n = 0;

	while (DsaPointerIsValid(*link))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), *link);
		SinkWriterSlot *slot = keyed_slot(c->procno, c->writer);
		dsa_pointer p = *link;

		if (slot == NULL || decide_key(slot, stored, keyed) == KEY_NEW)
		{
			link = &c->next;
			continue;
		}
		*link = c->next;
		c->next = dropped;
		dropped = p;
		iv->nsmall--;
		n++;
	}
	free_chunks(dropped);
	return n;
}

/* A large write and whether the interval keeps it */
typedef struct LargeVerdict
{
	uint64		writer;
	bool		keep;
} LargeVerdict;

/*
 * Whether the interval keeps a large write's part: decided once per write
 * (its parts may come interleaved with other writes' parts), and kept in
 * *verdicts.
 */
static bool
keep_large(SinkInterval *iv, const WrittenPart *w, List *stored, List **verdicts,
		   List **keyed)
{
	ListCell   *lc;
	LargeVerdict *v;
	SinkWriterSlot *slot;

	foreach(lc, *verdicts)
	{
		v = lfirst(lc);
		if (v->writer == w->writer)
			return v->keep;
	}
	v = palloc(sizeof(LargeVerdict));
	v->writer = w->writer;
	slot = keyed_slot(w->procno, w->writer);
	v->keep = slot == NULL || decide_key(slot, stored, keyed) == KEY_NEW;
	*verdicts = lappend(*verdicts, v);
	if (!v->keep)
		iv->nlarge--;
	return v->keep;
}

/*
 * Leaves out of the interval every keyed large write that repeats an
 * earlier one or conflicts with its key, deleting the blob rows of its
 * parts; returns how many writes.
 */
static int
settle_large_keys(SinkInterval *iv, List **written, PsWriteCounts *counts,
				  List *stored, List **keyed)
{
	List	   *kept = NIL;
	List	   *verdicts = NIL;
	ListCell   *lc;
	int			left_out = 0;

	foreach(lc, *written)
	{
		WrittenPart *w = lfirst(lc);

		if (keep_large(iv, w, stored, &verdicts, keyed))
		{
			kept = lappend(kept, w);
			continue;
		}
		ps_blob_delete(w->part.blob_key);
		counts->blob_puts--;
		counts->blob_bytes -= w->part.encoded_size;
	}
	foreach(lc, verdicts)
		left_out += ((LargeVerdict *) lfirst(lc))->keep ? 0 : 1;
	*written = kept;
	return left_out;
}

/*
 * Builds the interval's batch: the shared part(s) of the small writes, then
 * the large writes' parts.  The batch is single_time: its time is chosen at
 * the CaS.
 */
static void
build_batch(SinkInterval *iv, List *written, PsBatch *batch, PsWriteCounts *counts,
			uint64 *updates)
{
	PsBatch		shared = {0};
	PsWriteCounts shared_counts = {0};
	ListCell   *lc;
	int			i;

	*updates = ps_sink_build_shared(iv - ps_sink->intervals, &shared, &shared_counts);

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
 * withdraw; the small writes withdrawn so far are unlinked and freed.
 * Returns how many writes are left.  Takes the sink lock.
 */
static int
seal_writes(SinkInterval *iv)
{
	dsa_pointer withdrawn = InvalidDsaPointer;
	dsa_pointer *link = &iv->small_head;
	int			live;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	iv->committing = true;
	while (DsaPointerIsValid(*link))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), *link);

		if (ps_sink_is_withdrawn(iv, c->writer))
		{
			dsa_pointer p = *link;

			*link = c->next;
			c->next = withdrawn;
			withdrawn = p;
			iv->nsmall--;
			iv->nabandoned_small++;
		}
		else
			link = &c->next;
	}
	live = iv->joined - iv->nabandoned;
	LWLockRelease(ps_sink->lock);
	free_chunks(withdrawn);
	return live;
}

/*
 * Records that the shard's state row was held by another transaction, and
 * when to try again; wakes the interval's writers, one of which may be
 * that transaction.  Takes the sink lock.
 */
static void
block_interval(int index, TransactionId holder)
{
	SinkInterval *iv = &ps_sink->intervals[index];
	MemoryContext old;

	ps_sink_set_blocked(iv, true, holder);
	iv->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RETRY_BLOCKED_MS);
	ConditionVariableBroadcast(&iv->cv);
	old = MemoryContextSwitchTo(TopMemoryContext);
	my_blocked = list_append_unique_int(my_blocked, index);
	MemoryContextSwitchTo(old);
}

/*
 * Takes off the blocked list the first interval due for another try; -1 if
 * none, with *sleep_ms lowered to the next one's time.
 */
static int
take_blocked_due(TimestampTz now, long *sleep_ms)
{
	ListCell   *lc;

	foreach(lc, my_blocked)
	{
		int			index = lfirst_int(lc);
		TimestampTz at = ps_sink->intervals[index].retry_at;

		if (at <= now)
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
 * interval fails (55P03) with nothing written.  An interval left with no write to commit (every
 * one withdrawn or refused) is not appended: a failed write changes nothing.
 */
static pg_noinline bool
commit_interval(int index, PsCounters *delta)
{
	SinkInterval *iv = &ps_sink->intervals[index];
	PsWriteCounts counts = {0};
	PsAppendResult result;
	PsBatch		batch = {0};
	List	   *written;
	uint64		updates = 0;
	TransactionId holder;
	int			live;
	List	   *keyed = NIL;
	List	   *stored;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, iv->shard);

	/* a bound on any lock wait, so that one shard cannot stall the others */
	(void) set_config_option("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	if (!ps_consensus_probe_lock(iv->shard, &holder))
	{
		abandon_transaction();
		block_interval(index, holder);
		return false;
	}
	/* only this worker sets waiting_row: no lock needed to read it */
	if (iv->waiting_row)
		ps_sink_set_blocked(iv, false, InvalidTransactionId);
	written = take_parts(iv, &counts);
	live = seal_writes(iv);
	if (iv->poisoned)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("too many writes to shard \"%s\" were cancelled in one interval", iv->shard)));
	written = drop_abandoned(iv, written, &counts);
	stored = fetch_stored_keys(iv, written);
	live -= settle_small_keys(iv, stored, &keyed);
	live -= settle_large_keys(iv, &written, &counts, stored, &keyed);
	if (live > 0)
		build_batch(iv, written, &batch, &counts, &updates);
	if (live - iv->nrejected <= 0)
	{
		abandon_transaction();
		my_nothing = true;
		return true;
	}
	ps_shard_append_now(iv->shard, &batch, &result);
	store_keys(iv->shard, keyed, batch.time);

	memset(delta, 0, sizeof(PsCounters));
	delta->appends = 1;
	delta->updates = updates;
	delta->shared_writes = iv->nsmall - iv->nrejected;
	delta->own_writes = iv->nlarge - (iv->nabandoned - iv->nabandoned_small);
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
	SinkInterval *iv = &ps_sink->intervals[index];
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

/* Entry point of a sink worker. */
void
ps_sink_worker_main(Datum arg)
{
	MemoryContext work_cxt;

	my_index = DatumGetInt32(arg);
	ps_worker_start();
	/* its reads feed its own commits, whose writers wait for the flush */
	ps_consensus_skip_durable_wait();

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[my_index].proc = MyProc;
	LWLockRelease(ps_sink->lock);
	before_shmem_exit(worker_exit, (Datum) 0);

	work_cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink worker",
									 ALLOCSET_DEFAULT_SIZES);
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
			continue;
		}
		if (ps_sink_encode_ahead(my_index))
			continue;
		pgstat_report_stat(true);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
