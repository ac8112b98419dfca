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
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compact.h"
#include "settings.h"
#include "shard.h"
#include "sink.h"
#include "stats.h"
#include "storage.h"

/* A part written by the worker, with the write it came from */
typedef struct WrittenPart
{
	uint64		writer;
	PsPart		part;
} WrittenPart;

static int	my_index = -1;
static int	my_interval = -1;	/* the interval being processed */

/* Registers the background workers; called from _PG_init. */
void
ps_sink_register_workers(void)
{
	BackgroundWorker bgw;

	for (int i = 0; i < ps_workers; i++)
	{
		memset(&bgw, 0, sizeof(bgw));
		bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
		bgw.bgw_restart_time = 1;
		strlcpy(bgw.bgw_library_name, "persist_sink", BGW_MAXLEN);
		strlcpy(bgw.bgw_function_name, "ps_sink_worker_main", BGW_MAXLEN);
		snprintf(bgw.bgw_name, BGW_MAXLEN, "persist_sink worker %d", i);
		strlcpy(bgw.bgw_type, "persist_sink worker", BGW_MAXLEN);
		bgw.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&bgw);
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

/* Marks an interval done (failed or at time), frees its chunks and wakes its writers. */
static void
finish_interval(int index, bool failed, int64 time, int code, const char *message)
{
	SinkInterval *iv = &ps_sink->intervals[index];
	dsa_pointer small;
	dsa_pointer parts;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	small = iv->small_head;
	parts = iv->parts_head;
	iv->small_head = iv->parts_head = iv->parts_tail = InvalidDsaPointer;
	iv->failed = failed;
	iv->time = time;
	iv->sqlerrcode = code;
	strlcpy(iv->message, message ? message : "", sizeof(iv->message));
	iv->state = IV_DONE;
	if (iv->waiters == 0)
		iv->state = IV_FREE;
	LWLockRelease(ps_sink->lock);
	ConditionVariableBroadcast(&iv->cv);
	free_chunks(small);
	free_chunks(parts);
}

/* Fails the interval being processed, if any, when the worker exits. */
static void
worker_exit(int code, Datum arg)
{
	if (my_interval >= 0)
		finish_interval(my_interval, true, 0, ERRCODE_CONNECTION_FAILURE,
						"persist_sink worker exited before the interval committed");
	my_interval = -1;
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[my_index].proc = NULL;
	LWLockRelease(ps_sink->lock);
}

/* True if an open interval should be sealed now; caller holds the lock. */
static bool
interval_ready(const SinkInterval *iv, TimestampTz now, long *sleep_ms)
{
	TimestampTz deadline;

	if (iv->joined == 0)
		return false;
	if (iv->active_large > 0 || iv->joined >= iv->expected)
		return true;
	deadline = TimestampTzPlusMilliseconds(iv->opened_at, ps_batch_interval_ms);
	if (now >= deadline)
		return true;
	*sleep_ms = Min(*sleep_ms, Max(1, TimestampDifferenceMilliseconds(now, deadline)));
	return false;
}

/*
 * Picks the oldest ready open interval of this worker and marks it
 * processing (no more writers join it); -1 if none.  Takes the sink lock.
 */
static int
pick_interval(long *sleep_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	int			best = -1;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (int i = 0; i < PS_SINK_MAX_INTERVALS; i++)
	{
		SinkInterval *iv = &ps_sink->intervals[i];

		if (iv->state != IV_OPEN || iv->worker != my_index)
			continue;
		if (interval_ready(iv, now, sleep_ms) &&
			(best < 0 || iv->seq < ps_sink->intervals[best].seq))
			best = i;
	}
	if (best >= 0)
	{
		ps_sink->intervals[best].state = IV_PROCESSING;
		ps_sink_remember_wave(ps_sink->intervals[best].shard,
							  ps_sink->intervals[best].joined);
	}
	LWLockRelease(ps_sink->lock);
	if (best >= 0)
		ConditionVariableBroadcast(&ps_sink->intervals[best].cv);
	return best;
}

/* True if writer is among the interval's cancelled writes; caller holds the lock. */
static bool
is_abandoned(const SinkInterval *iv, uint64 writer)
{
	for (int i = 0; i < iv->nabandoned; i++)
		if (iv->abandoned[i] == writer)
			return true;
	return false;
}

/* Writes a handed-over part's blob row and records it. */
static void
write_part(const char *shard, SinkChunk *c, List **written, PsWriteCounts *counts)
{
	WrittenPart *w = palloc0(sizeof(WrittenPart));

	w->writer = c->writer;
	w->part.blob_key = ps_blob_new_key(shard);
	w->part.encoded_size = c->info.encoded_size;
	w->part.raw_size = c->info.raw_size;
	w->part.nupdates = c->info.nupdates;
	w->part.diff_sum = c->info.diff_sum;
	w->part.checksum = c->info.checksum;
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
		while (DsaPointerIsValid(head))
		{
			SinkChunk  *c = dsa_get_address(ps_sink_arena(), head);
			dsa_pointer next = c->next;
			bool		skip;

			LWLockAcquire(ps_sink->lock, LW_SHARED);
			skip = is_abandoned(iv, c->writer);
			LWLockRelease(ps_sink->lock);
			if (!skip)
				write_part(iv->shard, c, &written, counts);
			ps_sink_free(head);
			head = next;
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
		skip = is_abandoned(iv, w->writer);
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

/* Reads the updates of every small chunk (in place in the arena). */
static PsUpdate *
gather_small(dsa_pointer head, int *n)
{
	int			total = 0;
	int			k = 0;
	PsUpdate   *u;

	for (dsa_pointer p = head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		total += (int) c->nupdates;
		p = c->next;
	}
	u = palloc_extended(sizeof(PsUpdate) * Max(total, 1), MCXT_ALLOC_HUGE);
	for (dsa_pointer p = head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);
		const char *d = SINK_CHUNK_PAYLOAD(c);

		for (uint64 i = 0; i < c->nupdates; i++, k++)
		{
			memcpy(&u[k].key_len, d, 4);
			memcpy(&u[k].val_len, d + 4, 4);
			memcpy(&u[k].diff, d + 8, 8);
			u[k].time = 0;
			u[k].key = d + 16;
			u[k].val = u[k].key + u[k].key_len;
			d = u[k].val + u[k].val_len;
		}
		p = c->next;
	}
	*n = total;
	return u;
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
	PsUpdate   *u;
	int			n;
	ListCell   *lc;
	int			i;

	u = gather_small(iv->small_head, &n);
	ps_updates_sort_consolidate(u, &n);
	ps_batch_build(iv->shard, u, n, &shared, &shared_counts);
	*updates = n;

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
	counts->inline_batches = shared_counts.inline_batches;
}

/* Writes, appends and commits one interval; returns its time.  Runs in a transaction. */
static int64
commit_interval(SinkInterval *iv)
{
	PsWriteCounts counts = {0};
	PsAppendResult result;
	PsBatch		batch = {0};
	List	   *written;
	uint64		updates;
	PsCounters	delta = {0};

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, iv->shard);

	written = take_parts(iv, &counts);
	if (iv->poisoned)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("too many writes to shard \"%s\" were cancelled in one interval", iv->shard)));
	written = drop_abandoned(iv, written, &counts);
	build_batch(iv, written, &batch, &counts, &updates);
	ps_shard_append_now(iv->shard, &batch, &result);

	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	delta.appends = 1;
	delta.updates = updates;
	delta.shared_writes = iv->nsmall;
	delta.own_writes = iv->nlarge - iv->nabandoned;
	delta.parts_written = counts.parts;
	delta.blob_puts = counts.blob_puts;
	delta.blob_bytes = counts.blob_bytes;
	delta.inline_batches = counts.inline_batches;
	delta.state_bytes = result.state_bytes;
	delta.cas_attempts = result.cas_attempts;
	delta.cas_mismatches = result.cas_mismatches;
	ps_stats_add(iv->shard, &delta);
	ps_compaction_request(iv->shard);
	return batch.time;
}

/* Processes one interval, turning any error into a failure its writers see. */
static void
process_interval(int index, MemoryContext work_cxt)
{
	SinkInterval *iv = &ps_sink->intervals[index];
	MemoryContext old = MemoryContextSwitchTo(work_cxt);

	my_interval = index;
	PG_TRY();
	{
		int64		time = commit_interval(iv);

		my_interval = -1;
		finish_interval(index, false, time, 0, NULL);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(work_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		my_interval = -1;
		finish_interval(index, true, 0, edata->sqlerrcode, edata->message);
		ereport(LOG,
				(errmsg("persist_sink: interval of shard \"%s\" failed: %s",
						iv->shard, edata->message)));
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	MemoryContextReset(work_cxt);
}

/* Entry point of a sink worker. */
void
ps_sink_worker_main(Datum arg)
{
	MemoryContext work_cxt;

	my_index = DatumGetInt32(arg);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(ps_database, NULL, 0);

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	ps_sink->workers[my_index].proc = MyProc;
	ps_sink->workers[my_index].database = MyDatabaseId;
	ps_sink->workers[my_index].generation++;
	LWLockRelease(ps_sink->lock);
	before_shmem_exit(worker_exit, (Datum) 0);

	work_cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink worker",
									 ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		long		sleep_ms = 1000;
		int			index;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		index = pick_interval(&sleep_ms);
		if (index >= 0)
		{
			process_interval(index, work_cxt);
			continue;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
