/*-------------------------------------------------------------------------
 *
 * sink_backpressure.c
 *	  Backpressure: a write waits, before it joins an interval, while its
 *	  shard holds too many batches for compaction to keep up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/stats.h"
#include "sink/sink.h"
#include "sink/sink_internal.h"

/* Longest stall of a writer while background compaction is off */
#define STALL_WITHOUT_COMPACTION_MS	30000
/* Longest sleep of a stalled writer between two looks at the count */
#define STALL_RECHECK_MS	100

/*
 * The shard's batches: the count committed and published by the shard
 * layer, plus its intervals in flight.  Takes the sink lock, then the
 * debt lock, one at a time.
 */
static int
shard_debt(const char *shard)
{
	int			in_flight;

	LWLockAcquire(ps_sink->lock, LW_SHARED);
	in_flight = ps_sink_in_flight(shard);
	LWLockRelease(ps_sink->lock);
	return in_flight + ps_debt_batches(shard);
}

/*
 * Raises an error once a stall has lasted STALL_WITHOUT_COMPACTION_MS with
 * background compaction off: nothing else would end it.  No lock.
 */
static void
check_stall_bounded(const char *shard, TimestampTz start, int batches)
{
	if (ps_compaction ||
		TimestampDifferenceMilliseconds(start, GetCurrentTimestamp()) <
		STALL_WITHOUT_COMPACTION_MS)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("shard \"%s\" holds %d batches, at persist_sink.stop_batches, and background compaction is off",
					shard, batches),
			 errdetail("The append waited %d seconds for compaction; nothing of it was written.",
					   STALL_WITHOUT_COMPACTION_MS / 1000),
			 errhint("Run compact('%s'), or turn persist_sink.compaction on.", shard)));
}

/*
 * Raises an error once a stall has lasted STALL_WITHOUT_COMPACTION_MS with
 * background compaction on but every compactor absent all along (refused a
 * slot at server start, or failing at start): nothing but a compact() call
 * would end it.  *absent_since is when it was first seen absent, 0 while it
 * runs.  Takes the compaction queue's lock.
 */
static void
check_compactor_present(const char *shard, TimestampTz *absent_since, int batches)
{
	bool		refused;
	TimestampTz now;

	if (!ps_compaction || ps_compactor_running(&refused))
	{
		*absent_since = 0;
		return;
	}
	now = GetCurrentTimestamp();
	if (*absent_since == 0)
		*absent_since = now;
	if (TimestampDifferenceMilliseconds(*absent_since, now) < STALL_WITHOUT_COMPACTION_MS)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("shard \"%s\" holds %d batches, at persist_sink.stop_batches, and no persist_sink compactor is running",
					shard, batches),
			 refused ?
			 errdetail("Every compactor was refused a background worker slot at server start (max_worker_processes is %d). The append waited %d seconds for compaction; nothing of it was written.",
					   max_worker_processes, STALL_WITHOUT_COMPACTION_MS / 1000) :
			 errdetail("The append waited %d seconds for compaction; nothing of it was written.",
					   STALL_WITHOUT_COMPACTION_MS / 1000),
			 errhint("Run compact('%s'), and see the server log for why no compactor runs.",
					 shard)));
}

/* Background compactions failed in a row after which a stalled append fails */
#define COMPACTION_FAILURES_TO_REFUSE	3

/*
 * Raises an error if the shard's background compactions keep failing (a
 * damaged part, say): the stall would last until someone repairs it, so
 * the append fails at once, naming the cause.  Takes the debt lock.
 */
static void
check_compaction_failing(const char *shard, int batches)
{
	TimestampTz failed_at;
	char		error[PS_DEBT_ERROR_LEN];
	int			failures = ps_debt_compaction_failures(shard, &failed_at, error);

	if (failures < COMPACTION_FAILURES_TO_REFUSE)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("shard \"%s\" holds %d batches, at persist_sink.stop_batches, and its background compaction keeps failing",
					shard, batches),
			 errdetail("%d compactions of it failed in a row, the last at %s: %s.  Nothing of this append was written.",
					   failures, timestamptz_to_str(failed_at), error),
			 errhint("Run verify('%s') to find damaged parts; the server log has every failure.",
					 shard)));
}

/*
 * Backpressure (a shard stays bounded under any load), before a write joins an interval: delays it
 * 1ms per batch its shard holds past persist_sink.slowdown_batches, and
 * while it holds persist_sink.stop_batches waits for compaction (asking
 * for it), woken when a count drops or every STALL_RECHECK_MS.  A cancel
 * here is a plain error: nothing was written.  Counts the time in the
 * shard's stats.  Holds no lock while it sleeps.
 */
void
ps_sink_wait_for_compaction(const char *shard)
{
	PsCounters	delta = {0};
	TimestampTz start;
	TimestampTz compactor_absent_since = 0;
	int			batches = shard_debt(shard);
	int			delay = ps_debt_delay_ms(batches);

	if (delay == 0)
		return;
	start = GetCurrentTimestamp();
	ConditionVariablePrepareToSleep(ps_debt_cv());
	for (; delay < 0; delay = ps_debt_delay_ms(batches = shard_debt(shard)))
	{
		check_stall_bounded(shard, start, batches);
		check_compactor_present(shard, &compactor_absent_since, batches);
		check_compaction_failing(shard, batches);
		ps_compaction_request(shard);
		(void) ConditionVariableTimedSleep(ps_debt_cv(), STALL_RECHECK_MS,
										   PG_WAIT_EXTENSION);
		delta.stalled_ms = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	}
	if (delay > 0)
	{
		start = GetCurrentTimestamp();
		(void) ConditionVariableTimedSleep(ps_debt_cv(), delay, PG_WAIT_EXTENSION);
		delta.slowed_ms = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	}
	ConditionVariableCancelSleep();
	ps_stats_add(shard, &delta);
}
