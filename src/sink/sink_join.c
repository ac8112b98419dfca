/*-------------------------------------------------------------------------
 *
 * sink_join.c
 *	  The writer's side of the interval protocol (see sink.h): join the
 *	  shard's open interval with a ticket, wait for the worker, take the
 *	  outcome; or give up the hold, withdrawing the write if it is not
 *	  sealed yet.  A small write's whole path is here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "storage/proc.h"

#include "base/settings.h"
#include "sink/sink.h"
#include "sink/sink_internal.h"

/*
 * The worker that serves an interval, or NULL if it is not running; caller
 * holds the sink lock.  Callers wake it with ps_sink_wake once they have
 * released the lock, so that the lock is not held over the signal.
 */
PGPROC *
ps_sink_worker_of(const SinkInterval *iv)
{
	return ps_sink->workers[iv->worker].proc;
}

/*
 * Wakes a worker found by ps_sink_worker_of; no lock needed (a worker that has
 * exited since only leaves a harmless latch set).
 */
void
ps_sink_wake(PGPROC *worker)
{
	if (worker)
		SetLatch(&worker->procLatch);
}

/*
 * True if a small write of size payload bytes that just joined an interval
 * must wake its worker: it is the interval's first write (the worker learns
 * of the interval and sleeps until its batch_interval deadline at most),
 * the one whose join makes the interval ready (ps_sink_wave_joined), or
 * large enough for the worker to encode it ahead (sink_shared.c).  Other
 * joins change nothing the worker does; waking it for each would take a
 * core from the writers still preparing theirs.  Caller holds the sink
 * lock.
 */
static bool
joined_wakes_worker(const SinkInterval *iv, uint64 size)
{
	return iv->joined == 1 || ps_sink_wave_joined(iv) ||
		size >= PS_SINK_AHEAD_MIN_BYTES;
}

/*
 * Raises the error of an append in a database that found no worker slot
 * left: as many other databases have appends in flight as there are
 * slots.  Nothing was written.  No lock.
 */
static void
raise_no_worker_slot(const char *shard)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no persist_sink worker is free for database \"%s\"",
					get_database_name(MyDatabaseId)),
			 errdetail("persist_sink.max_databases (%d) other databases than persist_sink.database have appends in flight.  Nothing of this append to shard \"%s\" was written.",
					   ps_max_databases, shard),
			 errhint("Retry once one of them has been idle for persist_sink.worker_idle_timeout, or raise persist_sink.max_databases and restart the server.")));
}

/*
 * Joins the shard's open interval with a new ticket made from the call's
 * proto (its key, digest, arrival and kind); returns the interval with the
 * sink lock held, the call holding it and its ticket (SP_JOINED).
 * Interval slots and tickets are as many as can ever be in use
 * (sink_shmem.c): the wait for one is a safeguard that never sleeps.  If
 * opening an interval would take the shard to its stop bound (other
 * writers opened intervals since this one's backpressure wait), waits for
 * compaction again, with that wait's bounds.  Holds no lock while it
 * sleeps.
 */
SinkInterval *
ps_sink_join(SinkCall *call)
{
	const char *shard = call->shard;

	for (;;)
	{
		int			i = -1;
		bool		at_bound = false;

		LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
		if (ps_sink->free_ticket >= 0)
		{
			i = ps_sink_open_interval(shard);
			at_bound = i == -1 && ps_sink_stopped(shard);
		}
		if (i == PS_SINK_NO_WORKER)
		{
			LWLockRelease(ps_sink->lock);
			raise_no_worker_slot(shard);
		}
		if (i >= 0)
		{
			SinkInterval *iv = &ps_sink_intervals[i];
			int			t = ps_sink_ticket_take();
			SinkTicket *tk = &ps_sink_tickets[t];
			uint64		id = tk->id;

			Assert(call->proto.state == TK_FREE);
			*tk = call->proto;
			tk->id = id;
			ps_sink_ticket_move(tk, TK_FREE, TK_JOINED);
			tk->writer_waits = true;
			ps_sink_ticket_link(iv, t);
			iv->joined++;
			iv->waiters++;
			call->interval = i;
			call->ticket = t;
			call->ticket_id = id;
			call->phase = SP_JOINED;
			return iv;
		}
		LWLockRelease(ps_sink->lock);
		if (at_bound)
			ps_sink_wait_for_compaction(shard);
		else
			ConditionVariableTimedSleep(&ps_sink->space_cv, 100, PG_WAIT_EXTENSION);
	}
}

/*
 * Unlinks from an interval's list of parts those of a write (its ticket
 * id) and returns them as a list of their own, to be freed once the lock
 * is released.  Caller holds the lock exclusively.
 */
static dsa_pointer
unlink_parts(SinkInterval *iv, uint64 ticket_id)
{
	dsa_pointer taken = InvalidDsaPointer;
	dsa_pointer *link = &iv->parts_head;
	dsa_pointer last = InvalidDsaPointer;

	while (DsaPointerIsValid(*link))
	{
		dsa_pointer p = *link;
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		if (c->ticket_id != ticket_id)
		{
			last = p;
			link = &c->next;
			continue;
		}
		*link = c->next;
		c->next = taken;
		taken = p;
	}
	iv->parts_tail = last;
	return taken;
}

/*
 * Withdraws a joined write from its interval, before the seal: its ticket
 * is freed and its small chunk, or its parts not yet taken by the worker,
 * are returned to be freed once the lock is released (parts the worker
 * took name a ticket that is no longer theirs, so it drops them).  A small
 * chunk being encoded ahead is left to the worker, which frees it and the
 * ticket when it is done.  Caller holds the lock exclusively.
 */
static dsa_pointer
withdraw(SinkInterval *iv, SinkCall *call)
{
	SinkTicket *tk = &ps_sink_tickets[call->ticket];
	dsa_pointer to_free = InvalidDsaPointer;
	dsa_pointer small;

	Assert(tk->state == TK_JOINED && tk->id == call->ticket_id);
	if (tk->encoding)
	{
		ps_sink_ticket_move(tk, TK_JOINED, TK_WITHDRAWN);
		tk->writer_waits = false;
		return InvalidDsaPointer;
	}
	if (tk->large)
		to_free = unlink_parts(iv, call->ticket_id);
	small = ps_sink_drop_write(iv, call->ticket, call->small, TK_JOINED);
	return DsaPointerIsValid(small) ? small : to_free;
}

/*
 * Gives up a call's hold on its interval: withdraws its write if the
 * worker has not sealed it yet (and records that it did, and whether a
 * write of its key was in flight; an open interval it was the last write
 * of is freed), else leaves the ticket to the worker, which frees it once
 * it is done.  Does nothing once the hold is given up.  Takes the sink
 * lock.
 */
void
ps_sink_give_up(SinkCall *call)
{
	SinkInterval *iv = &ps_sink_intervals[call->interval];
	PGPROC	   *worker = NULL;
	dsa_pointer to_free = InvalidDsaPointer;

	ConditionVariableCancelSleep();
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (!call->released)
	{
		SinkTicket *tk = &ps_sink_tickets[call->ticket];

		Assert(tk->id == call->ticket_id);
		call->withdrawn = tk->state == TK_JOINED;
		if (call->withdrawn && tk->has_key)
			call->rival = call->rival_at_arrival ||
				ps_sink_key_in_flight(iv->shard, tk->key, call->ticket);
		if (call->withdrawn)
			to_free = withdraw(iv, call);
		else if (tk->state == TK_DONE)
			ps_sink_ticket_free(call->ticket, TK_DONE);
		else
			tk->writer_waits = false;
		if (call->handing)
			iv->active_large--;
		worker = ps_sink_worker_of(iv);
		ps_sink_release(iv);
		if (call->withdrawn)
			ps_sink_drop_if_abandoned(iv);
		call->released = true;
	}
	LWLockRelease(ps_sink->lock);
	ps_sink_free_list(to_free);
	ps_sink_wake(worker);
}

/*
 * True if the worker that commits the interval (or the shard's interval
 * before it) waits for a lock this transaction holds on the shard's state
 * row.  Caller holds the lock.
 */
static bool
blocking_own_worker(const SinkInterval *iv)
{
	TransactionId blocker = ps_sink_blocker(iv);

	return TransactionIdIsValid(blocker) && TransactionIdIsCurrentTransactionId(blocker);
}

/*
 * Raises 40P01: the worker waits for this transaction, which waits for it;
 * no lock.
 */
static void
raise_self_deadlock(const char *shard)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail("The persist_sink worker that commits this append to shard \"%s\" waits for a lock on the shard that this transaction holds.",
					   shard),
			 errhint("Commit first, or use compare_and_append in this transaction.")));
}

/*
 * Raises the error of an append whose worker has stayed away: refused a
 * slot at server start, or not running for another reason (it cannot
 * connect to its database, say).  Nothing of the append was written (the
 * caller's cleanup says so).  No lock.
 */
static void
raise_worker_absent(int worker, bool refused)
{
	if (refused && worker >= ps_workers)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a persist_sink worker for database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("No background worker slot is free: max_worker_processes is %d.",
						   max_worker_processes),
				 errhint("Raise max_worker_processes and restart the server.")));
	if (refused)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("persist_sink worker %d is not running", worker),
				 errdetail("It was refused a background worker slot at server start: max_worker_processes is %d.",
						   max_worker_processes),
				 errhint("Raise max_worker_processes and restart the server; the server log at start names every persist_sink worker refused a slot.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("persist_sink worker %d is not running", worker),
			 errhint("Check the server log: persist_sink.database may name no existing database, or the worker may fail at start.")));
}

/*
 * Sleeps until an interval reaches at least state `until`; IV_PROCESSING
 * counts only once the worker takes parts, in the interval's transaction
 * (not while it waits for the shard's state row), so that a large write
 * hands its parts over only when the worker takes them, not to fill the
 * arena while another transaction holds the shard, and puts none in an
 * object store before that transaction began.
 * Gives up with an error at once if the worker that serves it was refused a
 * slot at server start, or once it stays away for 30 seconds (it restarts
 * within a second after a crash).  Takes the sink lock, shared, each time
 * it looks; holds none while it sleeps.
 */
void
ps_sink_wait_for_state(SinkInterval *iv, SinkIntervalState until)
{
	int			absent = 0;

	ConditionVariablePrepareToSleep(&iv->cv);
	for (;;)
	{
		SinkIntervalState s;
		bool		running;
		bool		refused;
		bool		deadlock;

		LWLockAcquire(ps_sink->lock, LW_SHARED);
		s = iv->state;
		if (s == IV_PROCESSING && !iv->taking)
			s = IV_OPEN;
		running = ps_sink->workers[iv->worker].proc != NULL;
		refused = ps_sink->workers[iv->worker].refused ||
			ps_sink->workers[iv->worker].claim.refused;
		deadlock = s < until && blocking_own_worker(iv);
		LWLockRelease(ps_sink->lock);
		if (s >= until)
			break;
		if (deadlock)
			raise_self_deadlock(iv->shard);
		absent = running ? 0 : absent + 1;
		/* refused a slot (at server start, or when started): it will not come */
		if (refused || absent >= 30)
			raise_worker_absent(iv->worker, refused);
		ConditionVariableTimedSleep(&iv->cv, 1000, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
}

/*
 * Reads the call's outcome from its ticket, once the worker has set it,
 * and gives up the ticket and the hold on the interval; raises the
 * outcome's error (SP_RESULT of the outcome table).  A time is returned
 * only once the WAL it rests on is flushed: the worker does not wait for
 * that (sink_worker.c), its writers do, together.  Takes the sink lock.
 */
int64
ps_sink_take_result(SinkCall *call)
{
	SinkInterval *iv = &ps_sink_intervals[call->interval];
	SinkTicket *tk = &ps_sink_tickets[call->ticket];
	SinkKnown	known = {0};
	SinkOutcome oc;
	int64		time;
	XLogRecPtr	flush_lsn;
	char		message[sizeof(iv->message)];

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	Assert(tk->id == call->ticket_id && tk->state == TK_DONE);
	time = tk->time;
	known.keyed = tk->has_key;
	known.code = tk->sqlerrcode;
	known.refused = tk->refused;
	known.key = call->proto.key;
	flush_lsn = iv->flush_lsn;
	strlcpy(message, iv->message, sizeof(message));
	known.message = message;
	ps_sink_ticket_free(call->ticket, TK_DONE);
	ps_sink_release(iv);
	call->released = true;
	LWLockRelease(ps_sink->lock);
	oc = ps_sink_outcome(SP_RESULT, &known, known.code);
	call->phase = SP_TOLD;
	if (oc != SO_TIME)
		ps_sink_raise_outcome(oc, call->shard, &known, NULL);
	XLogFlush(flush_lsn);
	return time;
}

/*
 * A small write: copy into the arena, join, wait for the commit; returns
 * its time.  Until attached, the chunk is the call's to free on error or
 * exit (call->unattached).  Takes the sink lock; holds none while it
 * waits.
 */
int64
ps_sink_append_small(SinkCall *call, const PsUpdateArrays *w)
{
	uint64		size = 0;
	SinkChunk  *c;
	SinkInterval *iv;
	PGPROC	   *worker;

	for (int i = 0; i < w->n; i++)
		size += SMALL_UPDATE_SIZE(&w->updates[i]);
	call->unattached = ps_sink_alloc(CHUNK_SMALL, size, true);
	c = dsa_get_address(ps_sink_arena(), call->unattached);
	c->nupdates = w->n;
	ps_sink_serialize_small(SINK_CHUNK_PAYLOAD(c), w->updates, w->n);
	if (call->digest_pending)
	{
		ps_sink_chunk_digest(SINK_CHUNK_PAYLOAD(c), c->size,
							 call->proto.digest);
		call->digest_pending = false;
	}
	iv = ps_sink_join(call);
	c->ticket = call->ticket;
	c->ticket_id = call->ticket_id;
	c->next = iv->small_head;
	iv->small_head = call->unattached;
	call->small = call->unattached;
	call->unattached = InvalidDsaPointer;
	worker = joined_wakes_worker(iv, c->size) ? ps_sink_worker_of(iv) : NULL;
	LWLockRelease(ps_sink->lock);
	ps_sink_wake(worker);

	ps_sink_wait_for_state(iv, IV_DONE);
	return ps_sink_take_result(call);
}
