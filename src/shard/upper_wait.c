/*-------------------------------------------------------------------------
 *
 * upper_wait.c
 *	  Waiting for a shard's upper to pass a time, woken by the commits that
 *	  move it rather than by polling.
 *
 * A fixed array of condition variables in shared memory: a shard uses the
 * one its name hashes to.  Every committed append of a shard (a
 * compare_and_append's transaction, a sink interval) broadcasts it; a
 * waiter rereads the upper with a new snapshot each time it wakes, so a
 * wake-up meant for another shard of the same slot costs one read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"

#include "common/hashfn.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "shard/shard.h"
#include "shard/upper_wait.h"
#include "store/store.h"

/* Condition variables shards share by the hash of their names */
#define PS_UPPER_SLOTS		64

/* Longest sleep between rereads, in case a broadcast was missed */
#define PS_UPPER_RECHECK_MS	1000

static ConditionVariable *upper_cvs = NULL;

/* Shared memory of the condition variables. */
Size
ps_upper_shmem_size(void)
{
	return mul_size(PS_UPPER_SLOTS, sizeof(ConditionVariable));
}

/* Creates or attaches the condition variables; caller holds AddinShmemInitLock. */
void
ps_upper_shmem_init(void)
{
	bool		found;

	upper_cvs = ShmemInitStruct("persist_sink upper waits", ps_upper_shmem_size(),
								&found);
	if (!found)
		for (int i = 0; i < PS_UPPER_SLOTS; i++)
			ConditionVariableInit(&upper_cvs[i]);
}

/* The condition variable of a shard. */
static ConditionVariable *
shard_cv(const char *shard)
{
	uint32		h = hash_bytes((const unsigned char *) shard, strlen(shard));

	return &upper_cvs[h % PS_UPPER_SLOTS];
}

/* Wakes the waiters of a shard whose upper moved (after the commit). */
void
ps_upper_notify(const char *shard)
{
	if (upper_cvs != NULL)
		ConditionVariableBroadcast(shard_cv(shard));
}

/* Shards whose waiters the current transaction wakes when it commits */
static List *notify_at_commit = NIL;

/* Wakes the waiters of notify_at_commit once the transaction commits. */
static void
notify_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (notify_at_commit == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		foreach(lc, notify_at_commit)
			ps_upper_notify(lfirst(lc));
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	/* the list's memory goes with the transaction */
	notify_at_commit = NIL;
}

/*
 * Wakes the waiters of a shard when the current transaction commits (a
 * reader dropped: a read_next waiting with it checks it again).
 */
void
ps_upper_notify_at_commit(const char *shard)
{
	static bool registered = false;
	MemoryContext old;

	if (!registered)
	{
		RegisterXactCallback(notify_xact_callback, NULL);
		registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	notify_at_commit = lappend(notify_at_commit, pstrdup(shard));
	MemoryContextSwitchTo(old);
}

/* The shard's upper as of now (a new snapshot); error if it is gone. */
static int64
current_upper(const char *shard)
{
	PsState		state;

	SPI_connect();
	ps_shard_read_latest(shard, &state);
	SPI_finish();
	return state.upper;
}

/*
 * Returns the shard's upper as soon as it passes past, or the current one
 * once timeout_ms have gone by (a negative timeout waits as long as it
 * takes).  Interruptible.
 */
int64
ps_upper_wait(const char *shard, int64 past, int64 timeout_ms)
{
	ConditionVariable *cv = shard_cv(shard);
	TimestampTz end = 0;
	int64		upper;

	/* a timeout past the end of timestamps is no timeout */
	if (timeout_ms >= 0 &&
		(timeout_ms > (PG_INT64_MAX - GetCurrentTimestamp()) / 1000 ||
		 pg_add_s64_overflow(GetCurrentTimestamp(), timeout_ms * 1000, &end)))
		timeout_ms = -1;

	ConditionVariablePrepareToSleep(cv);
	for (;;)
	{
		long		sleep_ms = PS_UPPER_RECHECK_MS;

		upper = current_upper(shard);
		if (upper > past)
			break;
		if (timeout_ms >= 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			if (now >= end)
				break;
			sleep_ms = Min(sleep_ms, Max(1, TimestampDifferenceMilliseconds(now, end)));
		}
		(void) ConditionVariableTimedSleep(cv, sleep_ms, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return upper;
}
