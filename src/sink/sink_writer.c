/*-------------------------------------------------------------------------
 *
 * sink_writer.c
 *	  The writer's side of the sink's interval protocol (see sink.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "common/cryptohash.h"
#include "port/pg_crc32c.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/elog.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "codec/part.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/stats.h"
#include "sink/sink.h"
#include "store/store.h"

/* Serialized size of one update in a small chunk. */
#define SMALL_UPDATE_SIZE(u)	(4 + 4 + 8 + (uint64) (u)->key_len + (u)->val_len)
/* Raw bytes of the slices a write's digest is computed a slice at a time */
#define DIGEST_SLICE_RAW	(64 * 1024)
/*
 * Parts of a large write its writer puts in an object store at once, and
 * most bytes of them (a batch is put while the next one is encoded)
 */
#define PARTS_PUT_AT_ONCE	8
#define PARTS_PUT_AT_ONCE_BYTES	(8 * 1024 * 1024)

/* A write: its updates in memory (w), or only a stream of them (w NULL) */
typedef struct SinkWrite
{
	PsUpdateArrays *w;
	PsUpdateStream *s;			/* always: of w's updates if w is set */
} SinkWrite;

/* A writer's hold on an interval and its ticket, for cleanup on error or exit */
typedef struct WriterHold
{
	int			interval;
	int			ticket;
	uint64		ticket_id;
	bool		has_key;
	bool		handing;		/* a large write still handing over parts */
	bool		released;		/* the hold is given up already */
	bool		withdrawn;		/* ... and the write was left out of the commit */
	bool		rival;			/* ... while a write of its key was in flight */
} WriterHold;

/*
 * The last append of this backend that returned a time: the statement it
 * was called in, its shard and time, and how many appends of that
 * statement did.  An error later in the same statement says they were
 * written (outcome_log_hook).
 */
static TimestampTz written_statement = 0;
static int	written_calls = 0;
static char written_shard[PS_MAX_SHARD_NAME + 1];
static int64 written_time = 0;

static emit_log_hook_type prev_emit_log_hook = NULL;

/*
 * Whether another write with this call's idempotency key was in flight
 * when the call arrived: if so, the call cannot say "nothing written" when
 * it is withdrawn, since that write may be committing.
 */
static bool rival_at_arrival = false;

/*
 * A keyed small write's digest is not computed yet: it is taken from its
 * chunk once the chunk is filled (the same bytes), or from the updates if
 * its key turns out to be recorded on arrival.
 */
static bool digest_pending = false;

/* How far a keyed call has come, for the error it raises (append_keyed) */
typedef enum KeyedPhase
{
	KP_LOOKUP,					/* its key's status is not known yet */
	KP_BEFORE_JOIN,				/* its key was not recorded on arrival */
	KP_JOINED					/* it has a ticket: guarded() says the rest */
} KeyedPhase;

static KeyedPhase keyed_phase = KP_LOOKUP;

static void wait_for_compaction(const char *shard);

/*
 * The worker that serves an interval, or NULL if it is not running; caller
 * holds the sink lock.  Callers wake it with wake_worker once they have
 * released the lock, so that the lock is not held over the signal.
 */
static PGPROC *
worker_of(const SinkInterval *iv)
{
	return ps_sink->workers[iv->worker].proc;
}

/*
 * Wakes a worker found by worker_of; no lock needed (a worker that has
 * exited since only leaves a harmless latch set).
 */
static void
wake_worker(PGPROC *worker)
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

/* Raises PS005: the key was used by a committed append of other content. */
static void
raise_key_conflict(const char *shard, const char *key)
{
	ereport(ERROR,
			(errcode(ERRCODE_PS_IDEMPOTENCY_CONFLICT),
			 errmsg("idempotency key \"%s\" of shard \"%s\" was used by an append of other content",
					key, shard),
			 errdetail("A retry must carry the same keys, vals and diffs as the append it repeats; nothing was written."),
			 errhint("Use a new idempotency key for a new append.")));
}

/* Writes sorted updates into a small chunk's payload. */
static void
serialize_small(char *p, const PsUpdate *u, int n)
{
	for (int i = 0; i < n; i++)
	{
		memcpy(p, &u[i].key_len, 4);
		memcpy(p + 4, &u[i].val_len, 4);
		memcpy(p + 8, &u[i].diff, 8);
		p += 16;
		memcpy(p, u[i].key, u[i].key_len);
		p += u[i].key_len;
		memcpy(p, u[i].val, u[i].val_len);
		p += u[i].val_len;
	}
}

/* Raises the error of a failed digest computation. */
static void
raise_digest_error(pg_cryptohash_ctx *ctx)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not compute the SHA-256 digest of an append: %s",
					pg_cryptohash_error(ctx))));
}

/*
 * Fills digest (PS_DIGEST_LEN bytes) with the SHA-256 of a write's sorted,
 * consolidated updates as a small chunk holds them (every update's key and
 * val lengths, diff, key and val): equal content, equal digest, whichever
 * way the write goes.  The updates are laid out a slice at a time.
 */
static void
write_digest(PsUpdateStream *s, char *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	StringInfoData buf;
	PsUpdateArrays slice;

	initStringInfo(&buf);
	if (pg_cryptohash_init(ctx) < 0)
		raise_digest_error(ctx);
	s->rewind(s);
	while (s->next(s, DIGEST_SLICE_RAW, &slice))
	{
		uint64		size = 0;

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < slice.n; i++)
			size += SMALL_UPDATE_SIZE(&slice.updates[i]);
		resetStringInfo(&buf);
		enlargeStringInfo(&buf, (int) size);
		serialize_small(buf.data, slice.updates, slice.n);
		if (pg_cryptohash_update(ctx, (uint8 *) buf.data, size) < 0)
			raise_digest_error(ctx);
	}
	if (pg_cryptohash_final(ctx, (uint8 *) digest, PS_DIGEST_LEN) < 0)
		raise_digest_error(ctx);
	pg_cryptohash_free(ctx);
	pfree(buf.data);
}

/* Fills digest with the SHA-256 of a small write's chunk of size bytes. */
static void
chunk_digest(const char *payload, uint64 size, char *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) payload, size) < 0 ||
		pg_cryptohash_final(ctx, (uint8 *) digest, PS_DIGEST_LEN) < 0)
		raise_digest_error(ctx);
	pg_cryptohash_free(ctx);
}

/*
 * The 16-byte digest earlier libraries recorded for a key (CRC-32C of keys
 * and diffs, of vals, and the total size), to recognize a retry of a write
 * committed before the upgrade.
 */
static void
legacy_digest(PsUpdateStream *s, char *digest)
{
	pg_crc32c	keys_crc;
	pg_crc32c	vals_crc;
	uint64		size = 0;
	PsUpdateArrays slice;

	INIT_CRC32C(keys_crc);
	INIT_CRC32C(vals_crc);
	s->rewind(s);
	while (s->next(s, DIGEST_SLICE_RAW, &slice))
	{
		for (int i = 0; i < slice.n; i++)
		{
			const PsUpdate *u = &slice.updates[i];

			COMP_CRC32C(keys_crc, &u->key_len, sizeof(u->key_len));
			COMP_CRC32C(keys_crc, u->key, u->key_len);
			COMP_CRC32C(keys_crc, &u->diff, sizeof(u->diff));
			COMP_CRC32C(vals_crc, &u->val_len, sizeof(u->val_len));
			COMP_CRC32C(vals_crc, u->val, u->val_len);
			size += (uint64) u->key_len + u->val_len + 1;
		}
	}
	FIN_CRC32C(keys_crc);
	FIN_CRC32C(vals_crc);
	memcpy(digest, &keys_crc, 4);
	memcpy(digest + 4, &vals_crc, 4);
	memcpy(digest + 8, &size, 8);
}

/* True if a stored key's digest is that of the write's content. */
static bool
same_content(const PsStoredKey *stored, PsUpdateStream *s, const char *digest)
{
	char		legacy[16];

	if (stored->digest_len == PS_DIGEST_LEN)
		return memcmp(stored->digest, digest, PS_DIGEST_LEN) == 0;
	if (stored->digest_len != sizeof(legacy))
		return false;
	legacy_digest(s, legacy);
	return memcmp(stored->digest, legacy, sizeof(legacy)) == 0;
}

/*
 * Settles a keyed write against the idempotency table when it arrives:
 * returns true with *time set if a committed write of the shard used the
 * key for the same content (nothing is to be written; the WAL is flushed
 * up to where that write may be, so the time is durable), raises PS005 if
 * it used it for other content, and returns false if the key is new.  The
 * worker settles the key again at the commit, against what committed
 * meanwhile.
 */
static bool
settled_on_arrival(const char *shard, const char *key, PsUpdateStream *s,
				   char *digest, int64 *time)
{
	List	   *found;
	PsStoredKey *stored;

	found = ps_idempotency_get_many(shard, &key, 1, PS_DIGEST_LEN);
	if (found == NIL)
		return false;
	stored = linitial(found);
	if (digest_pending)
	{
		write_digest(s, digest);
		digest_pending = false;
	}
	if (!same_content(stored, s, digest))
		raise_key_conflict(shard, key);
	XLogFlush(ps_wal_inserted_end());
	*time = stored->time;
	return true;
}

/*
 * Raises the error of an append in a database that found no worker slot
 * left: as many other databases have appends in flight as there are
 * slots.  Nothing was written.
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
 * Raises an error if this transaction has written or locked the shard's
 * state row: the worker's CaS, and any compaction the append would wait for
 * under backpressure, would wait for this transaction, which waits for them.
 * Only a transaction that has written anything needs the check.
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
 * Joins the shard's open interval with a new ticket made from proto (its
 * key, digest, arrival and kind); returns the interval with the sink lock
 * held, and the ticket in *ticket.  Interval slots and tickets are as
 * many as can ever be in use (sink_shmem.c): the wait for one is a
 * safeguard that never sleeps.  If opening an
 * interval would take the shard to its stop bound (other writers opened
 * intervals since this one's backpressure wait), waits for compaction
 * again, with that wait's bounds.  Holds no lock while it sleeps.
 */
static int
join_interval(const char *shard, const SinkTicket *proto, int *ticket)
{
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

			Assert(proto->state == TK_FREE);
			*tk = *proto;
			tk->id = id;
			ps_sink_ticket_move(tk, TK_FREE, TK_JOINED);
			tk->writer_waits = true;
			ps_sink_ticket_link(iv, t);
			keyed_phase = KP_JOINED;
			iv->joined++;
			iv->waiters++;
			*ticket = t;
			return i;
		}
		LWLockRelease(ps_sink->lock);
		if (at_bound)
			wait_for_compaction(shard);
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
withdraw(SinkInterval *iv, WriterHold *hold, dsa_pointer small)
{
	SinkTicket *tk = &ps_sink_tickets[hold->ticket];
	dsa_pointer to_free = InvalidDsaPointer;

	Assert(tk->state == TK_JOINED && tk->id == hold->ticket_id);
	if (tk->encoding)
	{
		ps_sink_ticket_move(tk, TK_JOINED, TK_WITHDRAWN);
		tk->writer_waits = false;
		return InvalidDsaPointer;
	}
	if (tk->large)
		to_free = unlink_parts(iv, hold->ticket_id);
	small = ps_sink_drop_write(iv, hold->ticket, small, TK_JOINED);
	return DsaPointerIsValid(small) ? small : to_free;
}

/*
 * Gives up a writer's hold on its interval: withdraws its write if the
 * worker has not sealed it yet (and records that it did; an open interval
 * it was the last write of is freed), else leaves the ticket to the
 * worker, which frees it once it is done.  small is the write's small
 * chunk, if it has one.  Takes the sink lock.
 */
static void
give_up(WriterHold *hold, dsa_pointer small)
{
	SinkInterval *iv = &ps_sink_intervals[hold->interval];
	PGPROC	   *worker = NULL;
	dsa_pointer to_free = InvalidDsaPointer;

	ConditionVariableCancelSleep();
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (!hold->released)
	{
		SinkTicket *tk = &ps_sink_tickets[hold->ticket];

		Assert(tk->id == hold->ticket_id);
		hold->withdrawn = tk->state == TK_JOINED;
		if (hold->withdrawn && tk->has_key)
			hold->rival = rival_at_arrival ||
				ps_sink_key_in_flight(iv->shard, tk->key, hold->ticket);
		if (hold->withdrawn)
			to_free = withdraw(iv, hold, small);
		else if (tk->state == TK_DONE)
			ps_sink_ticket_free(hold->ticket, TK_DONE);
		else
			tk->writer_waits = false;
		if (hold->handing)
			iv->active_large--;
		worker = worker_of(iv);
		ps_sink_release(iv);
		if (hold->withdrawn)
			ps_sink_drop_if_abandoned(iv);
		hold->released = true;
	}
	LWLockRelease(ps_sink->lock);
	ps_sink_free_list(to_free);
	wake_worker(worker);
}

/* A writer's hold and its small chunk (invalid for a large write) */
typedef struct HeldWrite
{
	WriterHold *hold;
	dsa_pointer small;
} HeldWrite;

/* Error/exit cleanup: gives up a writer's hold on its interval. */
static void
writer_cleanup(int code, Datum arg)
{
	HeldWrite  *hw = (HeldWrite *) DatumGetPointer(arg);

	give_up(hw->hold, hw->small);
}

/*
 * Takes the error being handled (in PG_CATCH) out of the error state, in
 * cxt, the memory context the caller ran in, to be raised again in
 * another form.
 */
static ErrorData *
caught_error(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	return edata;
}

/*
 * Raises again the error that interrupted a writer's wait, saying what
 * became of the write: withdrawn before its interval was committed (the
 * error stands, nothing was written), or too late for that (40003: it may
 * still commit).  A keyed write withdrawn while another write of its key
 * was in flight (the call it retries, say) is 40003 too: nothing of this
 * call was written, but the key's write may still be.
 */
static void
raise_interrupted(HeldWrite *hw, ErrorData *edata, const char *shard)
{
	WriterHold *hold = hw->hold;

	give_up(hold, hw->small);
	if (hold->withdrawn && !hold->rival)
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("%s", edata->message),
				 edata->detail ?
				 errdetail("%s  Nothing of this append to shard \"%s\" was written.",
						   edata->detail, shard) :
				 errdetail("Nothing of this append to shard \"%s\" was written.", shard),
				 edata->hint ? errhint("%s", edata->hint) : 0));
	if (hold->withdrawn)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
				 errmsg("append to shard \"%s\" was interrupted while a write with its idempotency key was in flight",
						shard),
				 errdetail("%s.  Nothing of this call was written, but the write with the same key may still commit.",
						   edata->message),
				 errhint("Retry it with the same idempotency key: it is written once.")));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
			 errmsg("append to shard \"%s\" was interrupted while its interval was being committed",
					shard),
			 errdetail("%s.  The append may still commit.", edata->message),
			 hold->has_key ?
			 errhint("Retry it with the same idempotency key: it is written once.") :
			 errhint("Check whether the write is in the shard before you retry it, or give appends an idempotency key.")));
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

/* Raises 40P01: the worker waits for this transaction, which waits for it. */
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

/* One step of a writer that waits on its interval */
typedef void (*WriterStep) (WriterHold *hold, void *arg);

/*
 * Runs a writer's step with its hold guarded: on error the write is
 * withdrawn if it still can be and the error says what became of it; on
 * exit (FATAL) the hold is given up all the same.
 */
static void
guarded(WriterHold *hold, dsa_pointer small, const char *shard, WriterStep step,
		void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	HeldWrite	hw = {hold, small};

	PG_ENSURE_ERROR_CLEANUP(writer_cleanup, PointerGetDatum(&hw));
	{
		PG_TRY();
		{
			step(hold, arg);
		}
		PG_CATCH();
		{
			raise_interrupted(&hw, caught_error(cxt), shard);
		}
		PG_END_TRY();
	}
	PG_END_ENSURE_ERROR_CLEANUP(writer_cleanup, PointerGetDatum(&hw));
}

/*
 * Raises the error of an append whose worker has stayed away: refused a
 * slot at server start, or not running for another reason (it cannot
 * connect to its database, say).  Nothing of the append was written (the
 * caller's cleanup says so).
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
 * within a second after a crash).
 */
static void
wait_for_state(SinkInterval *iv, SinkIntervalState until)
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
 * Reads a write's outcome from its ticket, once the worker has set it, and
 * gives up the ticket and the hold on the interval; raises its error.  A
 * time is returned only once the WAL it rests on is flushed: the worker
 * does not wait for that (sink_worker.c), its writers do, together.
 */
static int64
take_result(WriterHold *hold, const char *shard)
{
	SinkInterval *iv = &ps_sink_intervals[hold->interval];
	SinkTicket *tk = &ps_sink_tickets[hold->ticket];
	int64		time;
	int			code;
	bool		refused;
	XLogRecPtr	flush_lsn;
	char		message[sizeof(iv->message)];
	char		key[PS_MAX_IDEMPOTENCY_KEY + 1];

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	Assert(tk->id == hold->ticket_id && tk->state == TK_DONE);
	time = tk->time;
	code = tk->sqlerrcode;
	refused = tk->refused;
	strlcpy(key, tk->key, sizeof(key));
	flush_lsn = iv->flush_lsn;
	strlcpy(message, iv->message, sizeof(message));
	ps_sink_ticket_free(hold->ticket, TK_DONE);
	ps_sink_release(iv);
	hold->released = true;
	LWLockRelease(ps_sink->lock);
	if (code == ERRCODE_PS_IDEMPOTENCY_CONFLICT)
		raise_key_conflict(shard, key);
	if (refused)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("sum of diffs out of range for type bigint in shard \"%s\"", shard),
				 errdetail("Updates of this write and of earlier writes of the same interval with the same key and val add up past the range of bigint; nothing of this write was appended.")));
	if (code != 0)
		ereport(ERROR,
				(errcode(code),
				 errmsg("%s", message),
				 errdetail("Nothing of this append to shard \"%s\" was written.", shard)));
	XLogFlush(flush_lsn);
	return time;
}

/* Error/exit cleanup: frees a small write's chunk not yet attached to an interval. */
static void
free_unattached(int code, Datum arg)
{
	dsa_pointer *chunk = (dsa_pointer *) DatumGetPointer(arg);

	ConditionVariableCancelSleep();
	if (DsaPointerIsValid(*chunk))
		ps_sink_free(*chunk);
	*chunk = InvalidDsaPointer;
}

/* A writer step: waits until the interval is done. */
static void
wait_done(WriterHold *hold, void *arg)
{
	wait_for_state(&ps_sink_intervals[hold->interval], IV_DONE);
}

/* A small write: copy into the arena, join, wait for the commit. */
static int64
append_small(const char *shard, const PsUpdateArrays *w, SinkTicket *proto)
{
	uint64		size = 0;
	dsa_pointer chunk;
	SinkChunk  *c;
	WriterHold *hold = palloc0(sizeof(WriterHold));
	SinkInterval *iv;
	PGPROC	   *worker;

	for (int i = 0; i < w->n; i++)
		size += SMALL_UPDATE_SIZE(&w->updates[i]);
	chunk = ps_sink_alloc(CHUNK_SMALL, size, true);
	c = dsa_get_address(ps_sink_arena(), chunk);
	c->nupdates = w->n;
	serialize_small(SINK_CHUNK_PAYLOAD(c), w->updates, w->n);

	/* until attached, the chunk is ours to free, on error or exit */
	PG_ENSURE_ERROR_CLEANUP(free_unattached, PointerGetDatum(&chunk));
	{
		if (digest_pending)
		{
			chunk_digest(SINK_CHUNK_PAYLOAD(c), c->size, proto->digest);
			digest_pending = false;
		}
		hold->interval = join_interval(shard, proto, &hold->ticket);
	}
	PG_END_ENSURE_ERROR_CLEANUP(free_unattached, PointerGetDatum(&chunk));
	iv = &ps_sink_intervals[hold->interval];
	hold->ticket_id = ps_sink_tickets[hold->ticket].id;
	hold->has_key = proto->has_key;
	c->ticket = hold->ticket;
	c->ticket_id = hold->ticket_id;
	c->next = iv->small_head;
	iv->small_head = chunk;
	worker = joined_wakes_worker(iv, c->size) ? worker_of(iv) : NULL;
	LWLockRelease(ps_sink->lock);
	wake_worker(worker);

	guarded(hold, chunk, shard, wait_done, NULL);
	return take_result(hold, shard);
}

/* A part of a large write, encoded: its bytes, what it holds, its bounds */
typedef struct EncodedPart
{
	char	   *data;			/* palloc'd */
	PsPartInfo	info;
	PsPart		bounds;			/* lower and upper bounds only */
	char	   *key;			/* where its writer put it (object store) */
} EncodedPart;

/* Encodes n sorted updates as a part of shard; raises 54000 if it cannot. */
static void
encode_part(const char *shard, const PsUpdate *u, int n, EncodedPart *part)
{
	const char *why = NULL;

	part->data = ps_part_encode(u, n, ps_compression_level, &part->info, &why);
	if (part->data == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("could not encode a part of shard \"%s\": %s", shard, why)));
	memset(&part->bounds, 0, sizeof(PsPart));
	ps_part_set_lower(&part->bounds, u[0].key, u[0].key_len);
	ps_part_set_upper(&part->bounds, u[n - 1].key, u[n - 1].key_len);
	part->key = NULL;
}

/*
 * A part chunk of the hold's write for an encoded part (waiting for room):
 * its bytes, or with part->key set (put by the writer), only its key.
 */
static dsa_pointer
part_chunk(const EncodedPart *part, const WriterHold *hold)
{
	uint64		size = part->key ? strlen(part->key) + 1 : part->info.encoded_size;
	dsa_pointer chunk;
	SinkChunk  *c;

	if (MAXALIGN(sizeof(SinkChunk)) + size > ps_sink->budget)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a part of %llu bytes does not fit in persist_sink.shared_memory",
						(unsigned long long) size),
				 errhint("Increase persist_sink.shared_memory or lower persist_sink.blob_target_size.")));
	chunk = ps_sink_alloc(CHUNK_PART, size, true);
	c = dsa_get_address(ps_sink_arena(), chunk);
	c->ticket = hold->ticket;
	c->ticket_id = hold->ticket_id;
	c->info = part->info;
	c->bounds = part->bounds;
	c->put = part->key != NULL;
	memcpy(SINK_CHUNK_PAYLOAD(c), part->key ? part->key : part->data, size);
	return chunk;
}

/*
 * Attaches a part chunk to an interval and wakes its worker; takes the sink
 * lock.  Returns false, freeing the chunk, if the interval already failed.
 */
static bool
hand_over(SinkInterval *iv, dsa_pointer chunk)
{
	bool		open;
	PGPROC	   *worker = NULL;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	open = iv->state == IV_PROCESSING;
	if (open)
	{
		if (DsaPointerIsValid(iv->parts_tail))
			((SinkChunk *) dsa_get_address(ps_sink_arena(), iv->parts_tail))->next = chunk;
		else
			iv->parts_head = chunk;
		iv->parts_tail = chunk;
		worker = worker_of(iv);
	}
	LWLockRelease(ps_sink->lock);
	wake_worker(worker);
	if (!open)
		ps_sink_free(chunk);
	return open;
}

/* Largest raw size of a large write's part: the target, capped by the arena. */
static uint64
part_cut_size(void)
{
	return Min((uint64) ps_blob_target_size, ps_sink->budget / 4);
}

/*
 * Encodes a large write's parts one at a time and hands each one's bytes
 * over; the worker takes them (the caller waited for that, and it lasts
 * until the interval is done), so the arena holds few at a time.
 */
static void
hand_over_bytes(SinkInterval *iv, const char *shard, PsUpdateStream *s,
				const WriterHold *hold)
{
	PsUpdateArrays slice;
	EncodedPart part;

	while (s->next(s, part_cut_size(), &slice))
	{
		/* a cancel withdraws the write, the parts handed over with it */
		CHECK_FOR_INTERRUPTS();
		encode_part(shard, slice.updates, slice.n, &part);
		if (!hand_over(iv, part_chunk(&part, hold)))
			return;				/* the interval failed: its result says why */
		pfree(part.data);
	}
}

/* Encoded parts of a large write, put in its shard's object store at once */
typedef struct PartBatch
{
	EncodedPart parts[PARTS_PUT_AT_ONCE];
	int			n;
	uint64		bytes;			/* their encoded bytes */
} PartBatch;

/* Where a large write's writer is in its stream of parts */
typedef struct PartEncoder
{
	const char *shard;
	const char *store;			/* the shard's object store */
	PsUpdateStream *s;
	bool		more;			/* the stream may have more */
	PartBatch  *filling;		/* the batch the next part goes to */
} PartEncoder;

/*
 * Encodes the stream's next part, under a new key of the store, into the
 * batch being filled; false if that batch is full or the stream is done.
 * A PsPutWork: the batch before is put meanwhile.
 */
static bool
encode_next_part(void *arg)
{
	PartEncoder *e = (PartEncoder *) arg;
	PsUpdateArrays slice;
	EncodedPart *part;

	if (!e->more || e->filling->n >= PARTS_PUT_AT_ONCE ||
		e->filling->bytes >= PARTS_PUT_AT_ONCE_BYTES)
		return false;
	/* a cancel withdraws the write, the parts handed over with it */
	CHECK_FOR_INTERRUPTS();
	e->more = e->s->next(e->s, part_cut_size(), &slice);
	if (!e->more)
		return false;
	part = &e->filling->parts[e->filling->n++];
	encode_part(e->shard, slice.updates, slice.n, part);
	part->key = ps_blob_new_key(e->shard, e->store);
	e->filling->bytes += part->info.encoded_size;
	return true;
}

/*
 * Puts a batch of parts in the object store, encoding the next batch's
 * parts meanwhile, then hands over their keys; false if the interval has
 * failed meanwhile.
 */
static bool
put_batch(SinkInterval *iv, PartBatch *batch, PartEncoder *e,
		  const WriterHold *hold)
{
	const char *keys[PARTS_PUT_AT_ONCE];
	const char *datas[PARTS_PUT_AT_ONCE];
	uint64		lens[PARTS_PUT_AT_ONCE];

	for (int i = 0; i < batch->n; i++)
	{
		keys[i] = batch->parts[i].key;
		datas[i] = batch->parts[i].data;
		lens[i] = batch->parts[i].info.encoded_size;
	}
	ps_blob_put_all_working(keys, datas, lens, batch->n, encode_next_part, e);
	for (int i = 0; i < batch->n; i++)
	{
		if (!hand_over(iv, part_chunk(&batch->parts[i], hold)))
			return false;
		pfree(batch->parts[i].data);
		pfree(batch->parts[i].key);
	}
	batch->n = 0;
	batch->bytes = 0;
	return true;
}

/*
 * Encodes a large write's parts and puts them in the shard's object store
 * (store), PARTS_PUT_AT_ONCE (or PARTS_PUT_AT_ONCE_BYTES) at a time, each
 * batch's put overlapping the encoding of the next, and hands over each
 * one's key.  The worker's interval transaction runs from before the first
 * put until after the last hand-over (the collector of leaked objects
 * relies on it); objects of a write withdrawn or failed are deleted by the
 * worker or that collector.
 */
static void
put_and_hand_over(SinkInterval *iv, const char *shard, const char *store,
				  PsUpdateStream *s, const WriterHold *hold)
{
	PartBatch	batches[2] = {0};
	PartEncoder e = {shard, store, s, true, NULL};

	for (int cur = 0;; cur = 1 - cur)
	{
		/* finish the batch the last put began to fill */
		e.filling = &batches[cur];
		while (encode_next_part(&e))
			;
		if (batches[cur].n == 0)
			return;
		e.filling = &batches[1 - cur];
		if (!put_batch(iv, &batches[cur], &e, hold))
			return;				/* the interval failed: its result says why */
	}
}

/* What a large write hands over */
typedef struct LargeWrite
{
	const char *shard;
	PsUpdateStream *s;
} LargeWrite;

/*
 * A writer step of a large write: once a worker takes the interval's
 * parts, encodes its parts and puts them in the shard's object store or
 * hands their bytes over, then waits for the commit.
 */
static void
hand_over_and_wait(WriterHold *hold, void *arg)
{
	LargeWrite *lw = (LargeWrite *) arg;
	SinkInterval *iv = &ps_sink_intervals[hold->interval];
	char		store[PS_SINK_STORE_URL_MAX];
	PGPROC	   *worker;

	wait_for_state(iv, IV_PROCESSING);
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	strlcpy(store, iv->parts_store, sizeof(store));
	LWLockRelease(ps_sink->lock);
	lw->s->rewind(lw->s);
	if (store[0] != '\0')
		put_and_hand_over(iv, lw->shard, store, lw->s, hold);
	else
		hand_over_bytes(iv, lw->shard, lw->s, hold);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	iv->active_large--;
	hold->handing = false;
	worker = worker_of(iv);
	LWLockRelease(ps_sink->lock);
	wake_worker(worker);
	wait_for_state(iv, IV_DONE);
}

/*
 * A large write: join, encode parts one at a time and hand each over once a
 * worker is processing the interval, then wait for the commit.
 */
static int64
append_large(const char *shard, PsUpdateStream *s, const SinkTicket *proto)
{
	WriterHold *hold = palloc0(sizeof(WriterHold));
	LargeWrite	lw = {shard, s};
	SinkInterval *iv;
	PGPROC	   *worker;

	hold->interval = join_interval(shard, proto, &hold->ticket);
	iv = &ps_sink_intervals[hold->interval];
	iv->active_large++;
	hold->ticket_id = ps_sink_tickets[hold->ticket].id;
	hold->has_key = proto->has_key;
	hold->handing = true;
	worker = worker_of(iv);
	LWLockRelease(ps_sink->lock);
	wake_worker(worker);

	guarded(hold, InvalidDsaPointer, shard, hand_over_and_wait, &lw);
	return take_result(hold, shard);
}

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
 * background compaction off: nothing else would end it.
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
 * Backpressure (invariant 6), before a write joins an interval: delays it
 * 1ms per batch its shard holds past persist_sink.slowdown_batches, and
 * while it holds persist_sink.stop_batches waits for compaction (asking
 * for it), woken when a count drops or every STALL_RECHECK_MS.  A cancel
 * here is a plain error: nothing was written.  Counts the time in the
 * shard's stats.  Holds no lock while it sleeps.
 */
static void
wait_for_compaction(const char *shard)
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

/*
 * Records that an append of this statement returned time: an error later
 * in the statement says so (outcome_log_hook).
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
 * arrives after append() returned, a later call that fails) becomes 40003,
 * with a DETAIL saying the write was written and stays so, whatever the
 * error: the caller must not take it for "nothing written".
 */
static void
outcome_log_hook(ErrorData *edata)
{
	if (edata->elevel == ERROR && edata->output_to_client && written_calls > 0 &&
		written_statement == GetCurrentStatementStartTimestamp())
	{
		const char *what = written_calls == 1 ?
		psprintf("An append of this statement to shard \"%s\" was written at time " INT64_FORMAT " and stays written.",
				 written_shard, written_time) :
		psprintf("%d appends of this statement were written (the last to shard \"%s\" at time " INT64_FORMAT ") and stay written.",
				 written_calls, written_shard, written_time);

		edata->detail = edata->detail ? psprintf("%s  %s", edata->detail, what) :
			(char *) what;
		if (edata->sqlerrcode != ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN &&
			edata->hint == NULL)
			edata->hint = pstrdup("The statement failed, but appends are not part of its transaction: do not retry the appends that were written, or retry them with their idempotency keys.");
		edata->sqlerrcode = ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN;
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/* Installs the error report hook of append()'s outcomes; called from _PG_init. */
void
ps_sink_install_hooks(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = outcome_log_hook;
}

/* Error/exit cleanup: this backend no longer holds a keyed write. */
static void
release_key_hold(int code, Datum arg)
{
	ps_idempotency_hold(0);
}

/*
 * Appends a write's updates through the sink, the write described by
 * proto; returns its time.  A keyed write is settled against the
 * idempotency table first: a retry of a committed write returns that
 * write's time without joining.
 */
static int64
append_write(const char *shard, const SinkWrite *sw, SinkTicket *proto)
{
	int64		time;

	if (proto->has_key)
	{
		/* first: a rival no longer in flight has committed, or failed */
		LWLockAcquire(ps_sink->lock, LW_SHARED);
		rival_at_arrival = ps_sink_key_in_flight(shard, proto->key, -1);
		LWLockRelease(ps_sink->lock);
		/* before the lookup's snapshot */
		proto->key_epoch = ps_sink_key_epoch();
		if (settled_on_arrival(shard, proto->key, sw->s, proto->digest, &time))
			return time;
		keyed_phase = KP_BEFORE_JOIN;
	}
	/* an empty write only moves the upper: it adds no batch */
	if (sw->s->n > 0)
		wait_for_compaction(shard);
	if (proto->large)
		return append_large(shard, sw->s, proto);
	return append_small(shard, sw->w, proto);
}

/*
 * Raises the error being handled (in PG_CATCH) as 40003: a keyed call was
 * interrupted before it could tell whether its key was used.
 */
static void
raise_key_unknown(const char *shard, MemoryContext cxt)
{
	ErrorData  *edata = caught_error(cxt);

	ereport(ERROR,
			(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
			 errmsg("append to shard \"%s\" was interrupted before it could tell whether its idempotency key was used",
					shard),
			 errdetail("%s.  Nothing of this call was written, but another call with the same key may have been, or may still be.",
					   edata->message),
			 errhint("Retry it with the same idempotency key: it is written once.")));
}

/*
 * Raises the cancel being handled (in PG_CATCH) of a keyed call that knew
 * its key was not used and not in flight, with the DETAIL that says so: a
 * bare 57014 (a statement cancelled before the call ran) says nothing of
 * earlier calls with the key.
 */
static void
raise_cancel_not_written(const char *shard, MemoryContext cxt)
{
	ErrorData  *edata = caught_error(cxt);

	ereport(ERROR,
			(errcode(edata->sqlerrcode),
			 errmsg("%s", edata->message),
			 errdetail("Nothing of this append to shard \"%s\" was written.", shard)));
}

/*
 * append_write of a keyed call, whose errors before it joins must not say
 * "nothing written" when the key may be: an error while its key is looked
 * up (a cancel, a timeout), or one before it joins while another call of
 * its key was in flight, is raised as 40003.  Nothing of this call was
 * written, but an earlier call with its key may have been, or may be.
 */
static int64
append_keyed(const char *shard, const SinkWrite *sw, SinkTicket *proto)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile int64 time = 0;

	keyed_phase = KP_LOOKUP;
	PG_TRY();
	{
		time = append_write(shard, sw, proto);
	}
	PG_CATCH();
	{
		if (keyed_phase == KP_BEFORE_JOIN && !rival_at_arrival &&
			geterrcode() == ERRCODE_QUERY_CANCELED)
			raise_cancel_not_written(shard, cxt);
		if (keyed_phase == KP_JOINED ||
			(keyed_phase == KP_BEFORE_JOIN && !rival_at_arrival) ||
			geterrcode() == ERRCODE_PS_IDEMPOTENCY_CONFLICT)
			PG_RE_THROW();
		raise_key_unknown(shard, cxt);
	}
	PG_END_TRY();
	return time;
}

/*
 * Rethrows the error caught while a call read, sorted or digested its
 * updates, before its key was looked up: for a keyed call (key not NULL)
 * a cancel or a statement timeout becomes 40003, since an earlier call
 * with its key may have been written; any other error stands (it would
 * stand again on a retry).  Call it in PG_CATCH, with cxt the memory
 * context the caller ran in.
 */
void
ps_sink_rethrow_before_lookup(const char *shard, const char *key, MemoryContext cxt)
{
	if (key == NULL || geterrcode() != ERRCODE_QUERY_CANCELED)
		PG_RE_THROW();
	raise_key_unknown(shard, cxt);
}

/*
 * Appends a write (its updates in memory, or a stream) through the sink;
 * returns the time it was committed at, once it is durable.  large: it
 * goes as a large write (parts of its own), else into the shared part.
 */
static int64
append_through_sink(const char *shard, const SinkWrite *sw, bool large,
					const char *idempotency_key)
{
	SinkTicket	proto;
	int64		time;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot append to shard \"%s\" during recovery", shard),
				 errhint("Append on the primary; a standby serves reads.")));
	if (ps_sink == NULL)
		elog(ERROR, "persist_sink shared memory is not initialized");
	/* (read before the sink lock is taken: it may read the catalogs) */
	(void) ps_home_database();
	memset(&proto, 0, sizeof(proto));
	rival_at_arrival = false;
	digest_pending = false;
	proto.arrived_at = GetCurrentTimestamp();
	proto.large = large;
	proto.has_key = idempotency_key != NULL;
	if (!proto.has_key)
	{
		check_not_held_here(shard);
		time = append_write(shard, sw, &proto);
	}
	else
	{
		MemoryContext cxt = CurrentMemoryContext;

		strlcpy(proto.key, idempotency_key, sizeof(proto.key));
		PG_TRY();
		{
			check_not_held_here(shard);
			if (large)
				write_digest(sw->s, proto.digest);
			else
				digest_pending = true;
		}
		PG_CATCH();
		{
			ps_sink_rethrow_before_lookup(shard, idempotency_key, cxt);
		}
		PG_END_TRY();
		ps_idempotency_hold(proto.arrived_at);
		PG_ENSURE_ERROR_CLEANUP(release_key_hold, (Datum) 0);
		{
			time = append_keyed(shard, sw, &proto);
		}
		PG_END_ENSURE_ERROR_CLEANUP(release_key_hold, (Datum) 0);
		ps_idempotency_hold(0);
	}
	note_written(shard, time);
	return time;
}

/* A write's updates in memory, read as a stream (PsUpdateStream) */
typedef struct ArraysStream
{
	PsUpdateStream base;
	const PsUpdateArrays *w;
	int			pos;
} ArraysStream;

/* PsUpdateStream.next of an ArraysStream: a slice of the array, in place. */
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

/* PsUpdateStream.rewind of an ArraysStream. */
static void
arrays_rewind(PsUpdateStream *s)
{
	((ArraysStream *) s)->pos = 0;
}

/*
 * Appends a write's sorted, consolidated updates through the sink; returns
 * the time they were committed at, once they are durable.  Not part of the
 * caller's transaction.
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
 * its parts).
 */
int64
ps_sink_append_stream(const char *shard, PsUpdateStream *s,
					  const char *idempotency_key)
{
	SinkWrite	sw = {NULL, s};

	return append_through_sink(shard, &sw, true, idempotency_key);
}
