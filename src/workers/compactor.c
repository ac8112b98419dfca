/*-------------------------------------------------------------------------
 *
 * compactor.c
 *	  The compactors: background workers that keep every shard's batches
 *	  size-tiered, so a shard holds O(log n) batches after n appends.
 *
 * Writers ask for compaction of a shard after each append (the queue of
 * shard/compaction_queue.c).  The compactors work outside the append path:
 * appends never wait for a merge, and a merge waits for appends only at
 * its CaS.  There are persist_sink.compactors of them; each takes shards
 * from the queue, and two of them on one shard merge disjoint runs, so a
 * long merge of large batches does not hold back the merges of new ones.
 * The first one also deletes expired idempotency keys, and the parts merges
 * left as garbage that a crash kept from being deleted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/background.h"
#include "base/base.h"
#include "base/settings.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/stats.h"
#include "store/store.h"
#include "workers/workers.h"

/* How often expired idempotency keys are deleted */
#define EXPIRE_EVERY_MS			(60 * 1000)

/* How often garbage is swept while objects wait for snapshots to end */
#define OBJECTS_HELD_BACK_MS	(5 * 1000)

/* Longest wait for a lock in a merge's or a collection's transaction */
#define COMPACTOR_LOCK_TIMEOUT	"2s"

/* Most merges of one shard in a row before the compactor moves on */
#define MAX_ROUNDS_PER_SHARD	16

/* How long a merge that waited out its lock timeout waits to be tried again */
#define POSTPONE_S				10

/*
 * Shards whose merge gave up on a lock, to be queued again once POSTPONE_S
 * have passed since the first of them (names in TopMemoryContext).
 */
static List *postponed = NIL;
static TimestampTz postponed_since = 0;

/* Remembers a shard whose merge waited out its lock timeout. */
static void
postpone(const char *shard)
{
	MemoryContext old;
	ListCell   *lc;

	foreach(lc, postponed)
		if (strcmp(strVal(lfirst(lc)), shard) == 0)
			return;
	if (postponed == NIL)
		postponed_since = GetCurrentTimestamp();
	old = MemoryContextSwitchTo(TopMemoryContext);
	postponed = lappend(postponed, makeString(pstrdup(shard)));
	MemoryContextSwitchTo(old);
}

/* Queues the postponed shards again and forgets them; takes the queue lock. */
static void
requeue_postponed(void)
{
	ListCell   *lc;

	foreach(lc, postponed)
	{
		ps_compaction_request(strVal(lfirst(lc)));
		pfree(strVal(lfirst(lc)));
	}
	list_free_deep(postponed);
	postponed = NIL;
}

/* Queues the postponed shards again once their time has come. */
static void
requeue_postponed_when_due(void)
{
	if (postponed != NIL &&
		TimestampDifferenceExceeds(postponed_since, GetCurrentTimestamp(),
								   POSTPONE_S * 1000))
		requeue_postponed();
}

/*
 * Queues the postponed shards at once when the compactor exits, for another
 * compactor (or this one, restarted) to try.
 */
static void
requeue_postponed_at_exit(int code, Datum arg)
{
	requeue_postponed();
}

/* Registers the compactors, and records refusals; called from _PG_init. */
void
ps_register_compactor(void)
{
	for (int i = 0; i < ps_compactors; i++)
	{
		char		name[BGW_MAXLEN];

		snprintf(name, sizeof(name), "persist_sink compactor %d", i);
		if (!ps_register_worker("ps_compactor_main", name,
								"persist_sink compactor", i))
			ps_compaction_note_refused();
	}
}

/*
 * Starts a transaction on the storage tables: locks waited for at most
 * COMPACTOR_LOCK_TIMEOUT, SPI connected, a snapshot active.
 */
static void
begin_storage_xact(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) set_config_option("lock_timeout", COMPACTOR_LOCK_TIMEOUT, PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
}

/* Ends what begin_storage_xact began, committing without waiting for the flush. */
static void
commit_storage_xact(void)
{
	PopActiveSnapshot();
	SPI_finish();
	(void) ps_worker_commit();
}

/* Garbage of objects was left for a snapshot that might still need them */
static bool objects_held_back = false;

/*
 * Deletes the parts background merges of shard (of every shard if NULL)
 * replaced, listed in the garbage table, in transactions of their own of a
 * few garbage rows each.  A blob row locked elsewhere for longer than the
 * merges' lock timeout, like any other error, is logged, not fatal: what
 * is left is found by the next sweep (sweep_garbage), and so are objects
 * a snapshot may still need (sooner: see objects_held_back).
 */
static void
collect_garbage(const char *shard)
{
	volatile bool more = true;
	bool		held_back = false;

	while (more)
	{
		CHECK_FOR_INTERRUPTS();
		more = false;
		PG_TRY();
		{
			begin_storage_xact();
			more = ps_garbage_collect(shard, &held_back);
			commit_storage_xact();
		}
		PG_CATCH();
		{
			EmitErrorReport();
			FlushErrorState();
			AbortCurrentTransaction();
			more = false;
		}
		PG_END_TRY();
	}
	if (shard == NULL)
		objects_held_back = held_back;
	else
		objects_held_back |= held_back;
}

/*
 * Takes a step of the collection of objects that failed appends and merges
 * left in an object store (store/object_leaks.c), in a transaction of its
 * own; an error (the store unavailable) is logged, not fatal.  While its
 * second step is to come, sweeps come every OBJECTS_HELD_BACK_MS.
 */
static void
collect_leaked_objects(void)
{
	PG_TRY();
	{
		uint64		deleted;
		bool		pending;

		begin_storage_xact();
		deleted = ps_object_leaks_step(&pending);
		commit_storage_xact();
		objects_held_back |= pending;
		if (deleted > 0)
			ereport(LOG,
					(errmsg("persist_sink: deleted " UINT64_FORMAT " objects that no shard state names",
							deleted)));
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
}

/*
 * Deletes the garbage of every shard at most once every EXPIRE_EVERY_MS
 * (OBJECTS_HELD_BACK_MS while objects wait for snapshots to end), the
 * first time at start: a crash between a merge's commit and its
 * collection leaves the merge's garbage row behind.  With leaks (the
 * first compactor), leaked objects are collected at the same pace; the
 * other compactors sweep only while objects they could not delete wait.
 */
static void
sweep_garbage(bool leaks)
{
	static TimestampTz last = 0;
	TimestampTz now = GetCurrentTimestamp();
	bool		installed;

	if (!leaks && !objects_held_back)
		return;
	if (last != 0 &&
		!TimestampDifferenceExceeds(last, now, objects_held_back ?
									OBJECTS_HELD_BACK_MS : EXPIRE_EVERY_MS))
		return;
	last = now;
	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("persist_sink", true)) &&
		ps_sql_objects_have(PS_OBJ_GARBAGE);
	CommitTransactionCommand();
	if (installed)
	{
		collect_garbage(NULL);
		if (leaks)
			collect_leaked_objects();
	}
}

/*
 * Does one merge of a shard, of a run no other compactor is merging, if its
 * tiers call for one.  True if it merged, or if its run changed meanwhile
 * (worth another look); false if nothing is to be merged, or a compact() of
 * the shard runs or waits (it merges everything: another round would only
 * find its lock busy again).  The run stays claimed until the merge
 * commits.  The shard's garbage is collected after a merge that left
 * some, with collect, or if the shard is gone.
 */
static bool
compact_once(const char *shard, bool collect)
{
	PsState		state;
	int			from;
	int			to;
	bool		again = false;
	bool		merging = false;
	bool		left_garbage = false;
	bool		found;

	/* a shard whose state row is held elsewhere is left for later */
	begin_storage_xact();
	pgstat_report_activity(STATE_RUNNING, shard);
	found = ps_consensus_read(shard, &state, CurrentMemoryContext, true);
	/* a compact() of the shard running or waiting merges it all: stop */
	if (found && ps_compaction_claim_run(&state, ps_compact_choose, &from, &to))
	{
		merging = true;
		again = ps_compact_range(shard, &state, from, to, &left_garbage);
	}
	/* a merge lost in a crash leaves its shard as it was: no need to wait */
	commit_storage_xact();
	/* only a merge's CaS takes the state row */
	if (merging)
		ps_compact_merge_ended(shard);
	ps_compaction_release_claim();
	/*
	 * The replaced parts go now that no state names them; compact() of a
	 * shard in an object store and drop_shard() ask for theirs to go.
	 */
	if (left_garbage || collect || !found)
		collect_garbage(shard);
	pgstat_report_activity(STATE_IDLE, NULL);
	/* let autovacuum see the rows the merge replaced */
	pgstat_report_stat(false);
	return again;
}

/* Longest wait before another try of a shard whose merges keep failing */
#define BACKOFF_MAX_S			300

/* Seconds before another try after failures merges failed in a row. */
static int
backoff_s(int failures)
{
	return failures >= 9 ? BACKOFF_MAX_S : Min(1 << (failures - 1), BACKOFF_MAX_S);
}

/*
 * True if a shard's merges failed lately and its back-off has not passed:
 * it is then left for later (postponed), not tried at every request.
 */
static bool
backing_off(const char *shard)
{
	TimestampTz failed_at;
	int			failures = ps_debt_compaction_failures(shard, &failed_at, NULL);

	if (failures == 0 ||
		TimestampDifferenceExceeds(failed_at, GetCurrentTimestamp(),
								   backoff_s(failures) * 1000))
		return false;
	postpone(shard);
	return true;
}

/*
 * Merges a shard until its tiers are in order; errors are logged, not
 * fatal.  A merge that fails for another reason than a lock or a lost race
 * is counted (debt.c), and the shard is tried again only after a back-off
 * that doubles with each failure in a row, up to BACKOFF_MAX_S: a damaged
 * part makes a few log lines, not one per request.  With collect, the
 * shard's garbage is collected after each merge (compact_once).
 */
static void
compact_shard(const char *shard, bool collect, MemoryContext cxt)
{
	volatile bool failed = false;

	if (backing_off(shard))
		return;
	for (int round = 0; round < MAX_ROUNDS_PER_SHARD; round++)
	{
		bool		merged = false;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			merged = compact_once(shard, collect);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			ps_compact_merge_ended(shard);
			ps_compaction_release_claim();
			pgstat_report_activity(STATE_IDLE, NULL);
			/*
			 * A lost race is retried at once, a lock held elsewhere after a
			 * while; a dropped shard is done with.
			 */
			merged = edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
				edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED;
			if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			{
				postpone(shard);
				ereport(LOG,
						(errmsg("persist_sink: compaction of shard \"%s\" postponed: %s",
								shard, edata->message),
						 errdetail("A lock the merge needs was held by another transaction for longer than %s; the shard is tried again within %d seconds.",
								   COMPACTOR_LOCK_TIMEOUT, POSTPONE_S)));
			}
			else if (!merged && edata->sqlerrcode != ERRCODE_UNDEFINED_OBJECT)
			{
				int			failures = ps_debt_compaction_failed(shard, edata->message);

				ps_stats_compaction_failed(shard, edata->message);
				failed = true;
				ereport(LOG,
						(errmsg("persist_sink: compaction of shard \"%s\" failed: %s",
								shard, edata->message),
						 errdetail("It failed %d time%s in a row; the shard is tried again in %d seconds at the earliest.",
								   failures, failures == 1 ? "" : "s", backoff_s(failures))));
			}
		}
		PG_END_TRY();
		MemoryContextSwitchTo(cxt);
		MemoryContextReset(cxt);
		if (!merged)
			break;
	}
	if (!failed)
		ps_debt_compaction_succeeded(shard);
}

/*
 * True if the compactor may merge: compaction is on and this server is not a
 * subscriber, whose shards only replication writes (requests wait in the
 * queue meanwhile).
 */
static bool
may_compact(void)
{
	return ps_compaction && !ps_subscriber;
}

/*
 * Compacts one shard (with collect, collecting its garbage too), recorded
 * as the one being compacted meanwhile.
 */
static void
compact_named(const char *shard, bool collect, MemoryContext cxt)
{
	ps_compaction_set_current(shard);
	compact_shard(shard, collect, cxt);
	ps_compaction_set_current(NULL);
}

/* The names of every shard, allocated in cxt; NIL without the extension. */
static List *
all_shards(MemoryContext cxt)
{
	List	   *names;

	StartTransactionCommand();
	if (!OidIsValid(get_extension_oid("persist_sink", true)))
	{
		CommitTransactionCommand();
		return NIL;
	}
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	names = ps_consensus_shards(cxt, true);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	return names;
}

/*
 * Compacts every shard in turn (after the request queue overflowed, and at
 * start): the requests that did not fit in the queue are not known, so
 * every shard is looked at.  If compaction is turned off meanwhile (or the
 * server becomes a subscriber), it stops and is owed again.
 */
static void
compact_all_shards(MemoryContext cxt)
{
	MemoryContext scan_cxt = AllocSetContextCreate(TopMemoryContext,
												   "persist_sink compactor scan",
												   ALLOCSET_SMALL_SIZES);
	List	   *names = NIL;
	ListCell   *lc;

	PG_TRY();
	{
		names = all_shards(scan_cxt);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	foreach(lc, names)
	{
		ps_worker_check_signals();
		if (!may_compact())
		{
			/* the scan is owed: start it again once compaction is back on */
			ps_compaction_owe_scan();
			break;
		}
		compact_named(lfirst(lc), false, cxt);
	}
	MemoryContextDelete(scan_cxt);
}

/*
 * Deletes the idempotency keys older than persist_sink.idempotency_window,
 * at most once every EXPIRE_EVERY_MS (or window, if shorter); errors are
 * logged, not fatal.
 */
static void
expire_keys(void)
{
	static TimestampTz last = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (last != 0 &&
		!TimestampDifferenceExceeds(last, now,
									Min(EXPIRE_EVERY_MS, ps_idempotency_window_s * 1000)))
		return;
	last = now;
	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		if (OidIsValid(get_extension_oid("persist_sink", true)))
		{
			SPI_connect();
			PushActiveSnapshot(GetTransactionSnapshot());
			(void) ps_idempotency_expire(ps_idempotency_window_s * 1000);
			PopActiveSnapshot();
			SPI_finish();
		}
		CommitTransactionCommand();
		pgstat_report_stat(false);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
}

/*
 * The database of compactor number my_index: InvalidOid (that is,
 * persist_sink.database) for the first persist_sink.compactors, else the
 * one it was started for (claim), if its slot is still that database's;
 * exits, for good, if not.
 */
static Oid
compactor_database(int my_index, PsWorkerClaim *claim)
{
	memset(claim, 0, sizeof(PsWorkerClaim));
	if (my_index < ps_compactors)
		return InvalidOid;
	memcpy(claim, MyBgworkerEntry->bgw_extra, sizeof(PsWorkerClaim));
	if (!ps_compaction_claim_slot(my_index, claim))
		proc_exit(0);
	return claim->database;
}

/*
 * Entry point of compactor number DatumGetInt32(arg), from 0.  One started
 * for another database than persist_sink.database looks at each of its
 * shards first, and exits (for good) after persist_sink.worker_idle_timeout
 * with nothing queued, or when its database is dropped.
 */
void
ps_compactor_main(Datum arg)
{
	int			my_index = DatumGetInt32(arg);
	bool		on_demand = my_index >= ps_compactors;
	MemoryContext cxt;
	char		shard[PS_MAX_SHARD_NAME + 1];
	PsWorkerClaim claim;
	bool		scan_first = on_demand;
	TimestampTz idle_since;

	ps_worker_start(compactor_database(my_index, &claim));
	/* its reads feed its own commits, which come later in the WAL */
	ps_consensus_skip_durable_wait();
	if (!ps_compaction_attach_compactor(my_index, &claim))
		proc_exit(0);
	before_shmem_exit(requeue_postponed_at_exit, (Datum) 0);
	cxt = AllocSetContextCreate(TopMemoryContext, "persist_sink compactor",
								ALLOCSET_DEFAULT_SIZES);
	idle_since = GetCurrentTimestamp();
	for (;;)
	{
		bool		scan_all = false;
		bool		collect = false;
		long		sleep_ms = Min(10 * 1000L, ps_idempotency_window_s * 1000L);

		ps_worker_check_signals();
		/* its database is being dropped: DROP DATABASE waits for it to go */
		if (on_demand && ps_compaction_give_up(false))
			proc_exit(0);
		requeue_postponed_when_due();
		/* a subscriber's keys are deleted by replication, as they expire upstream */
		if ((my_index == 0 || on_demand) && !ps_subscriber)
			expire_keys();
		if (may_compact())
			sweep_garbage(my_index == 0 || on_demand);
		if (may_compact() && ps_compaction_take(shard, &collect, &scan_all))
		{
			compact_named(shard, collect, cxt);
			idle_since = GetCurrentTimestamp();
			continue;
		}
		if (may_compact() && (scan_all || scan_first))
		{
			scan_first = false;
			compact_all_shards(cxt);
			idle_since = GetCurrentTimestamp();
			continue;
		}
		pgstat_report_stat(true);
		if (on_demand && postponed == NIL &&
			ps_compaction_give_up(TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(),
															 ps_worker_idle_timeout_ms)))
			proc_exit(0);
		if (on_demand)
			sleep_ms = Min(sleep_ms, ps_worker_idle_timeout_ms);
		if (objects_held_back)
			sleep_ms = Min(sleep_ms, OBJECTS_HELD_BACK_MS);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
