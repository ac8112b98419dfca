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
#include "sink/sink_internal.h"
#include "store/store.h"

/* How long an interval whose state row is held waits before another try */
#define RETRY_BLOCKED_MS	20
/* Longest wait for a lock in an interval's transaction */
#define WORKER_LOCK_TIMEOUT	"10s"

/*
 * Registers the sink workers, and records those refused a slot; called from
 * _PG_init.  No lock.
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
 * Marks the run's interval done (committed at run->time, or failed with
 * code), sets the outcome of each of its writes, frees its chunks and
 * wakes its writers.  A committed interval's writers flush the WAL up to
 * its commit record (run->commit_lsn); any other outcome up to the WAL
 * written so far, which covers the earlier commits it was decided from (a
 * repeated idempotency key's time).  Takes the sink lock.
 */
static void
finish_interval(SinkRun *run, int code, const char *message)
{
	int			index = run->index;
	SinkInterval *iv = &ps_sink_intervals[index];
	bool		failed = !run->committed;
	XLogRecPtr	flush_lsn = run->committed ? run->commit_lsn : ps_wal_inserted_end();
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
	decide_outcomes(iv, !failed, run->time, code);
	ps_sink_finish(iv);
	LWLockRelease(ps_sink->lock);
	ps_idempotency_hold(0);
	ConditionVariableBroadcast(&iv->cv);
	ps_sink_forget_ahead(index);
	ps_sink_free_list(small);
	ps_sink_free_list(parts);
	ps_sink_free_list(run->taken);
	run->taken = InvalidDsaPointer;
}

/*
 * Fails a blocked interval of a worker that exits: never sealed, none of
 * its writes was in a commit.  Takes the sink lock.
 */
static void
fail_blocked(int index)
{
	SinkRun		gone = {0};

	gone.index = index;
	gone.iv = &ps_sink_intervals[index];
	gone.taken = InvalidDsaPointer;
	finish_interval(&gone, ERRCODE_CONNECTION_FAILURE,
					"persist_sink worker exited before the interval committed");
}

/*
 * Fails the interval being processed, if any, and the blocked ones when
 * the worker exits (arg: its SinkWorker, in TopMemoryContext).  Takes the
 * sink lock.
 */
static void
worker_exit(int code, Datum arg)
{
	SinkWorker *w = (SinkWorker *) DatumGetPointer(arg);
	ListCell   *lc;

	if (w->run.index >= 0)
		finish_interval(&w->run, w->run.committed ? 0 : ERRCODE_CONNECTION_FAILURE,
						w->run.committed ? NULL :
						"persist_sink worker exited before the interval committed");
	w->run.index = -1;
	ps_sink_keys_commit_ended(&w->run);
	foreach(lc, w->blocked)
		fail_blocked(lfirst_int(lc));
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (ps_sink->workers[w->index].proc == MyProc)
		ps_sink->workers[w->index].proc = NULL;
	LWLockRelease(ps_sink->lock);
}

/*
 * Builds the run's batch: the shared part(s) of the small writes, then the
 * large writes' parts.  The batch is single_time: its time is chosen at
 * the CaS.  Takes the sink lock while it builds the shared part.
 */
static void
build_batch(SinkRun *run, List *written, PsBatch *batch,
			PsWriteCounts *counts, uint64 *updates)
{
	PsBatch		shared = {0};
	PsWriteCounts shared_counts = {0};
	ListCell   *lc;
	int			i;

	*updates = ps_sink_build_shared(run->index, ps_sink_run_store(run),
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
 * Commits the run's transaction and records where its commit record ends.
 * Without synchronous standbys to wait for, the commit does not wait for
 * the WAL flush: the interval's writers wait for it (each flushes up to
 * run->commit_lsn before it reports success, whatever synchronous_commit
 * says), and the worker goes on with the next interval meanwhile.  Reads
 * of the shard's state wait for the flush of what they read
 * (store/consensus.c), so nothing a crash could undo is ever returned.
 * With synchronous standbys to wait for (synchronous_commit above local),
 * the commit waits as it says.  No lock.
 */
static void
commit_interval_xact(SinkRun *run)
{
	run->commit_lsn = ps_worker_commit();
	run->committed = true;
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
block_interval(SinkWorker *w, int index, TransactionId holder)
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
	w->blocked = list_append_unique_int(w->blocked, index);
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
 * Takes off the worker's blocked list the first interval due for another
 * try, or that every write has left (it is finished at once, to free its
 * slot); -1 if none, with *sleep_ms lowered to the next one's time.  Takes
 * the sink lock.
 */
static int
take_blocked_due(SinkWorker *w, TimestampTz now, long *sleep_ms)
{
	ListCell   *lc;

	foreach(lc, w->blocked)
	{
		int			index = lfirst_int(lc);
		TimestampTz at = ps_sink_retry_at(&ps_sink_intervals[index]);

		if (at <= now || interval_abandoned(&ps_sink_intervals[index]))
		{
			w->blocked = foreach_delete_current(w->blocked, lc);
			return index;
		}
		*sleep_ms = Min(*sleep_ms, Max(1, TimestampDifferenceMilliseconds(now, at)));
	}
	return -1;
}

/* Ends the interval's transaction without writing anything; no lock. */
static void
abandon_transaction(void)
{
	PopActiveSnapshot();
	SPI_finish();
	AbortCurrentTransaction();
}

/*
 * Writes, appends and commits the worker's run, in a transaction of its
 * own; sets run->time to its time and delta to what it wrote.  Returns false,
 * having written nothing, if another transaction holds the shard's state
 * row: the interval is then tried again later, and the worker goes on with
 * other shards meanwhile.  A lock taken in the short time between that
 * check and the CaS is waited for up to WORKER_LOCK_TIMEOUT, then the
 * interval fails (55P03) with nothing written.  An interval left with no
 * write to commit (every one withdrawn, refused, or settled by its key) is
 * not appended: a failed write changes nothing.  Takes the sink lock for
 * each step; holds none while it writes.
 */
static pg_noinline bool
commit_interval(SinkWorker *w, PsCounters *delta)
{
	SinkRun    *run = &w->run;
	SinkInterval *iv = run->iv;
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
		run->nothing = true;
		return true;
	}
	if (!ps_consensus_probe_lock(iv->shard, &holder))
	{
		abandon_transaction();
		block_interval(w, run->index, holder);
		return false;
	}
	/* only this worker sets waiting_row: no lock needed to read it */
	if (iv->waiting_row)
		ps_sink_set_blocked(iv, false, InvalidTransactionId, 0);
	run->state_read = false;
	ps_sink_start_taking(run);
	written = ps_sink_take_parts(run, &counts);
	seal_writes(iv);
	written = ps_sink_drop_abandoned(written, &counts);
	ps_sink_settle_keys(iv);
	written = ps_sink_leave_out_settled(iv, written, &counts);
	if (ps_sink_count_to_write(iv, &nsmall, &nlarge) > 0)
		build_batch(run, written, &batch, &counts, &updates);
	/* the shared part may have refused small writes */
	if (ps_sink_count_to_write(iv, &nsmall, &nlarge) == 0)
	{
		abandon_transaction();
		run->nothing = true;
		return true;
	}
	ps_shard_append_now(iv->shard, run->state_found ? &run->state : NULL,
						&batch, &result);
	ps_sink_store_keys(run, batch.time);

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
	run->time = batch.time;

	PopActiveSnapshot();
	SPI_finish();
	commit_interval_xact(run);
	ps_sink_keys_commit_ended(run);
	return true;
}

/* Makes interval index the worker's run, nothing done yet; no lock. */
static void
start_run(SinkWorker *w, int index)
{
	SinkRun    *run = &w->run;

	run->index = index;
	run->iv = &ps_sink_intervals[index];
	run->committed = false;
	run->nothing = false;
	run->time = 0;
	run->commit_lsn = InvalidXLogRecPtr;
	run->taken = InvalidDsaPointer;
	run->state_read = false;
	run->state_found = false;
	Assert(!run->keys_recorded);
}

/*
 * Processes one interval and tells its writers the outcome, decided once:
 * an error before the commit fails the interval, and once it has committed
 * its writers are told success whatever fails afterwards.  An interval
 * whose state row is held elsewhere is left for a later try.  Takes the
 * sink lock for each step.
 */
static void
process_interval(SinkWorker *w, int index, MemoryContext work_cxt)
{
	SinkRun    *run = &w->run;
	SinkInterval *iv = &ps_sink_intervals[index];
	MemoryContext old = MemoryContextSwitchTo(work_cxt);
	ErrorData  *volatile edata = NULL;
	volatile bool blocked = false;
	PsCounters	delta;
	SinkRun		done;

	start_run(w, index);
	PG_TRY();
	{
		blocked = !commit_interval(w, &delta);
		pgstat_report_activity(STATE_IDLE, NULL);
		if (run->committed)
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
		ps_sink_keys_commit_ended(run);
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_END_TRY();
	/* worker_exit no longer finishes it: it is finished here, or blocked */
	done = *run;
	run->index = -1;
	if (blocked && edata == NULL)
	{
		/* not finished: block_interval listed it for another try */
	}
	else if (done.committed)
		finish_interval(&done, 0, NULL);
	else if (done.nothing)
		finish_interval(&done, ERRCODE_QUERY_CANCELED,
						"every write of the interval was withdrawn or refused");
	else
		finish_interval(&done, edata->sqlerrcode, edata->message);
	if (edata)
		ereport(LOG,
				(errmsg("persist_sink: interval of shard \"%s\" %s: %s", iv->shard,
						run->committed ? "committed, but a later step failed" : "failed",
						edata->message)));
	MemoryContextSwitchTo(old);
	MemoryContextReset(work_cxt);
}

/*
 * The database a worker started on demand serves (InvalidOid for the
 * workers of persist_sink.database); exits, for good, if its slot is no
 * longer its own.  Takes the sink lock.
 */
static Oid
claimed_database(const SinkWorker *w, PsWorkerClaim *claim)
{
	if (w->index < ps_workers)
		return InvalidOid;
	memcpy(claim, MyBgworkerEntry->bgw_extra, sizeof(PsWorkerClaim));
	if (!ps_sink_claim_slot(w->index, claim, false))
		proc_exit(0);
	return claim->database;
}

/*
 * Makes this process the worker of its slot, once connected; a worker
 * started on demand whose slot was given up meanwhile exits, for good.
 * Takes the sink lock.
 */
static void
attach_to_slot(const SinkWorker *w, PsWorkerClaim *claim)
{
	if (w->index >= ps_workers)
	{
		if (!ps_sink_claim_slot(w->index, claim, true))
			proc_exit(0);
		return;
	}
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[w->index].proc = MyProc;
	LWLockRelease(ps_sink->lock);
}

/*
 * Exits, for good, a worker started on demand that has had nothing to do
 * for persist_sink.worker_idle_timeout since idle_since, or whose database
 * is being dropped, once it has no interval left: its database's next
 * append starts another.  Takes the sink lock.
 */
static void
exit_if_done(const SinkWorker *w, TimestampTz idle_since)
{
	bool		idle;

	if (w->index < ps_workers || w->blocked != NIL)
		return;
	idle = TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(),
									  ps_worker_idle_timeout_ms);
	if (ps_sink_give_up_slot(w->index, idle))
		proc_exit(0);
}

/* Entry point of a sink worker.  Takes the sink lock for each step. */
void
ps_sink_worker_main(Datum arg)
{
	MemoryContext work_cxt;
	TimestampTz idle_since;
	PsWorkerClaim claim;
	SinkWorker *w = MemoryContextAllocZero(TopMemoryContext, sizeof(SinkWorker));

	w->index = DatumGetInt32(arg);
	w->blocked = NIL;
	w->run.index = -1;
	w->run.taken = InvalidDsaPointer;
	ps_worker_start(claimed_database(w, &claim));
	/* its reads feed its own commits, whose writers wait for the flush */
	ps_consensus_skip_durable_wait();
	attach_to_slot(w, &claim);
	before_shmem_exit(worker_exit, PointerGetDatum(w));

	work_cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink worker",
									 ALLOCSET_DEFAULT_SIZES);
	idle_since = GetCurrentTimestamp();
	for (;;)
	{
		long		sleep_ms = 1000;
		int			index;

		ps_worker_check_signals();
		index = take_blocked_due(w, GetCurrentTimestamp(), &sleep_ms);
		if (index < 0)
			index = ps_sink_take_ready(w->index, GetCurrentTimestamp(), &sleep_ms);
		if (index >= 0)
		{
			process_interval(w, index, work_cxt);
			idle_since = GetCurrentTimestamp();
			continue;
		}
		if (ps_sink_encode_ahead(w->index))
			continue;
		pgstat_report_stat(true);
		exit_if_done(w, idle_since);
		if (w->index >= ps_workers)
			sleep_ms = Min(sleep_ms, ps_worker_idle_timeout_ms);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
