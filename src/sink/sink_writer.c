/*-------------------------------------------------------------------------
 *
 * sink_writer.c
 *	  append() through the sink: a call's way from its arrival to its
 *	  outcome (see sink.h).  Each call has a SinkCall, passed down to its
 *	  steps (sink_keyed.c, sink_join.c, sink_large.c); the one error
 *	  handler of the call gives up what it holds and raises the error the
 *	  outcome table of sink_protocol.c says.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/elog.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "sink/sink.h"
#include "sink/sink_internal.h"
#include "store/store.h"

/* A write: its updates in memory (w), or only a stream of them (w NULL) */
typedef struct SinkWrite
{
	PsUpdateArrays *w;
	PsUpdateStream *s;			/* always: of w's updates if w is set */
} SinkWrite;

/*
 * The last append of this backend that returned a time: the statement it
 * was called in, its shard and time, and how many appends of that
 * statement did.  An error later in the same statement says they were
 * written (outcome_log_hook).  File statics: they outlive the call, and
 * an error report hook, which has no argument of ours, reads them.
 */
static TimestampTz written_statement = 0;
static int	written_calls = 0;
static char written_shard[PS_MAX_SHARD_NAME + 1];
static int64 written_time = 0;

static emit_log_hook_type prev_emit_log_hook = NULL;

/*
 * Raises an error if this transaction has written or locked the shard's
 * state row: the worker's CaS, and any compaction the append would wait for
 * under backpressure, would wait for this transaction, which waits for them.
 * Only a transaction that has written anything needs the check.  No
 * lock.
 */
static void
check_not_held_here(const char *shard)
{
	bool		mine;

	SPI_connect();
	mine = ps_consensus_held_here(shard);
	SPI_finish();
	if (mine)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot append to shard \"%s\" in a transaction that has changed or locked it",
						shard),
				 errdetail("append() commits in a worker, which would wait for this transaction."),
				 errhint("Commit first, or use compare_and_append in this transaction.")));
}

/*
 * Records that an append of this statement returned time: an error later
 * in the statement says so (outcome_log_hook).  No lock.
 */
static void
note_written(const char *shard, int64 time)
{
	TimestampTz stmt = GetCurrentStatementStartTimestamp();

	written_calls = written_statement == stmt ? written_calls + 1 : 1;
	written_statement = stmt;
	strlcpy(written_shard, shard, sizeof(written_shard));
	written_time = time;
}

/*
 * Error reports of this backend: an error that ends a statement in which
 * an append already returned a time (a cancel or statement timeout that
 * arrives after append() returned, a later call that fails) becomes the
 * outcome SP_RETURNED gives (sink_protocol.c).  No lock.
 */
static void
outcome_log_hook(ErrorData *edata)
{
	if (edata->elevel == ERROR && edata->output_to_client &&
		written_calls > 0 &&
		written_statement == GetCurrentStatementStartTimestamp() &&
		ps_sink_outcome(SP_RETURNED, NULL,
						edata->sqlerrcode) == SO_WRITTEN_EARLIER)
		ps_sink_rewrite_written(edata, written_calls, written_shard,
								written_time);
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * Installs the error report hook of append()'s outcomes; called from _PG_init.
 * No lock.
 */
void
ps_sink_install_hooks(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = outcome_log_hook;
}

/*
 * Gives up what the call holds: its small chunk not yet in an interval,
 * its hold on its interval (withdrawing its write if not sealed yet:
 * ps_sink_give_up), and the keys' window it holds open.  Does each once;
 * called on error, and on exit (call_cleanup).  Takes the sink lock.
 */
static void
let_go(SinkCall *call)
{
	ConditionVariableCancelSleep();
	if (DsaPointerIsValid(call->unattached))
	{
		ps_sink_free(call->unattached);
		call->unattached = InvalidDsaPointer;
	}
	if (call->phase >= SP_JOINED && !call->released)
		ps_sink_give_up(call);
	if (call->key_held)
	{
		ps_idempotency_hold(0);
		call->key_held = false;
	}
}

/* Error/exit cleanup of a call (arg: its SinkCall); takes the sink lock. */
static void
call_cleanup(int code, Datum arg)
{
	let_go((SinkCall *) DatumGetPointer(arg));
}

/*
 * The error handler of a call (in PG_CATCH): gives up what the call
 * holds, then raises the error being handled as the outcome table says
 * for how far the call came and what it knows.  Takes the sink lock.
 */
static void
call_failed(SinkCall *call)
{
	SinkKnown	known = {0};

	let_go(call);
	known.keyed = call->proto.has_key;
	known.key = call->proto.key;
	known.withdrawn = call->withdrawn;
	known.rival = call->phase == SP_JOINED ?
		call->rival : call->rival_at_arrival;
	ps_sink_rethrow(call->phase, &known, call->shard, call->cxt);
}

/*
 * A call's steps, from its arrival to its time: checks, the digest of a
 * keyed write, its key's lookup (a retry of a committed write returns
 * that write's time without joining), backpressure, then the small or
 * large write's path.  Moves call->phase as it goes.  Takes the sink lock
 * for each step; holds none while it waits.
 */
static int64
run_call(SinkCall *call, const SinkWrite *sw)
{
	SinkTicket *proto = &call->proto;
	int64		time;

	call->phase = SP_READING;
	check_not_held_here(call->shard);
	if (proto->has_key)
	{
		if (proto->large)
			ps_sink_write_digest(sw->s, proto->digest);
		else
			call->digest_pending = true;
		ps_idempotency_hold(proto->arrived_at);
		call->key_held = true;
		call->phase = SP_LOOKUP;
		if (ps_sink_settled_on_arrival(call, sw->s))
		{
			let_go(call);
			return call->time;
		}
	}
	call->phase = SP_BEFORE_JOIN;
	/* an empty write only moves the upper: it adds no batch */
	if (sw->s->n > 0)
		ps_sink_wait_for_compaction(call->shard);
	if (proto->large)
		time = ps_sink_append_large(call, sw->s);
	else
		time = ps_sink_append_small(call, sw->w);
	let_go(call);
	return time;
}

/*
 * Rethrows the error caught while a call read, sorted or digested its
 * updates, before its key was looked up (SP_READING of the outcome
 * table): for a keyed call (key not NULL) a cancel or a statement timeout
 * becomes 40003, since an earlier call with its key may have been
 * written; any other error stands (it would stand again on a retry).
 * Call it in PG_CATCH, with cxt the memory context the caller ran in.  No
 * lock.
 */
void
ps_sink_rethrow_before_lookup(const char *shard, const char *key, MemoryContext cxt)
{
	SinkKnown	known = {0};

	known.keyed = key != NULL;
	known.key = key;
	ps_sink_rethrow(SP_READING, &known, shard, cxt);
}

/*
 * Appends a write (its updates in memory, or a stream) through the sink;
 * returns the time it was committed at, once it is durable.  large: it
 * goes as a large write (parts of its own), else into the shared part.
 * The call's one error handler (call_failed) decides what its caller gets;
 * its exit callback (call_cleanup) gives up what it holds on FATAL.
 * Takes the sink lock for each step; holds none while it waits.
 */
static int64
append_through_sink(const char *shard, const SinkWrite *sw, bool large,
					const char *idempotency_key)
{
	SinkCall   *call;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot append to shard \"%s\" during recovery", shard),
				 errhint("Append on the primary; a standby serves reads.")));
	if (ps_sink == NULL)
		elog(ERROR, "persist_sink shared memory is not initialized");
	/* (read before the sink lock is taken: it may read the catalogs) */
	(void) ps_home_database();
	/* in memory, not on the stack: PG_CATCH reads what the steps wrote */
	call = palloc0(sizeof(SinkCall));
	call->shard = shard;
	call->cxt = CurrentMemoryContext;
	call->phase = SP_READING;
	call->unattached = InvalidDsaPointer;
	call->small = InvalidDsaPointer;
	call->interval = call->ticket = -1;
	call->proto.arrived_at = GetCurrentTimestamp();
	call->proto.large = large;
	call->proto.has_key = idempotency_key != NULL;
	if (idempotency_key != NULL)
		strlcpy(call->proto.key, idempotency_key, sizeof(call->proto.key));
	PG_ENSURE_ERROR_CLEANUP(call_cleanup, PointerGetDatum(call));
	{
		PG_TRY();
		{
			call->time = run_call(call, sw);
		}
		PG_CATCH();
		{
			call_failed(call);
		}
		PG_END_TRY();
	}
	PG_END_ENSURE_ERROR_CLEANUP(call_cleanup, PointerGetDatum(call));
	note_written(shard, call->time);
	return call->time;
}

/* A write's updates in memory, read as a stream (PsUpdateStream) */
typedef struct ArraysStream
{
	PsUpdateStream base;
	const PsUpdateArrays *w;
	int			pos;
} ArraysStream;

/*
 * PsUpdateStream.next of an ArraysStream: a slice of the array, in place;
 * no lock.
 */
static bool
arrays_next(PsUpdateStream *s, uint64 max_raw, PsUpdateArrays *out)
{
	ArraysStream *as = (ArraysStream *) s;
	const PsUpdateArrays *w = as->w;
	int			to = as->pos;

	if (as->pos >= w->n)
		return false;
	out->raw_bytes = 0;
	while (to < w->n &&
		   (to == as->pos ||
			out->raw_bytes + PS_UPDATE_RAW_SIZE(&w->updates[to]) <= max_raw))
	{
		out->raw_bytes += PS_UPDATE_RAW_SIZE(&w->updates[to]);
		to++;
	}
	out->updates = &w->updates[as->pos];
	out->n = to - as->pos;
	as->pos = to;
	return true;
}

/* PsUpdateStream.rewind of an ArraysStream; no lock. */
static void
arrays_rewind(PsUpdateStream *s)
{
	((ArraysStream *) s)->pos = 0;
}

/*
 * Appends a write's sorted, consolidated updates through the sink; returns
 * the time they were committed at, once they are durable.  Not part of the
 * caller's transaction.
 * Takes the sink lock for each step; holds none while it waits.
 */
int64
ps_sink_append(const char *shard, PsUpdateArrays *w, const char *idempotency_key)
{
	ArraysStream as = {{arrays_next, arrays_rewind, w->n}, w, 0};
	SinkWrite	sw = {w, &as.base};
	uint64		small_size = 0;

	for (int i = 0; i < w->n; i++)
		small_size += SMALL_UPDATE_SIZE(&w->updates[i]);
	return append_through_sink(shard, &sw,
							   !(w->raw_bytes < (uint64) ps_shared_batch_max_bytes &&
								 MAXALIGN(sizeof(SinkChunk)) + small_size <= ps_sink->budget / 4),
							   idempotency_key);
}

/*
 * ps_sink_append of a write read from a stream, too large to hold in
 * memory: it goes as a large write, its parts encoded and handed over a
 * part at a time.  A keyed write reads the stream twice (its digest, then
 * its parts).  Takes the sink lock for each step; holds none while it waits.
 */
int64
ps_sink_append_stream(const char *shard, PsUpdateStream *s,
					  const char *idempotency_key)
{
	SinkWrite	sw = {NULL, s};

	return append_through_sink(shard, &sw, true, idempotency_key);
}
