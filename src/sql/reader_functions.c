/*-------------------------------------------------------------------------
 *
 * reader_functions.c
 *	  The SQL functions of readers: create_reader, drop_reader, read_next,
 *	  advance_reader and the readers view's reader_info().
 *
 * A reader belongs to the role that created it: only that role (or a
 * member) may read and advance it; that role or the shard's owner may
 * drop it and see it in the view.  Every function also needs the read
 * privilege on the shard.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "shard/upper_wait.h"
#include "sql/sql.h"
#include "store/store.h"

PG_FUNCTION_INFO_V1(ps_create_reader);
PG_FUNCTION_INFO_V1(ps_drop_reader);
PG_FUNCTION_INFO_V1(ps_read_next);
PG_FUNCTION_INFO_V1(ps_advance_reader);
PG_FUNCTION_INFO_V1(ps_reader_info);

/* Longest sleep of read_next before it checks its reader again */
#define READ_NEXT_RECHECK_MS	1000

/*
 * The subtransaction of this transaction that first locked a reader's row
 * (passed up when it commits); InvalidSubTransactionId if none holds one.
 */
static SubTransactionId reader_row_subid = InvalidSubTransactionId;

/*
 * Refuses to prepare a transaction that holds a reader's row lock (it
 * would outlive restarts and block the reader's calls until someone finds
 * the prepared transaction); forgets the lock when the transaction ends.
 */
static void
reader_xact_callback(XactEvent event, void *arg)
{
	if (reader_row_subid == InvalidSubTransactionId)
		return;
	if (event == XACT_EVENT_PRE_PREPARE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has used a persist_sink reader"),
				 errdetail("create_reader(), drop_reader(), read_next() and advance_reader() lock the reader until their transaction ends.")));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		reader_row_subid = InvalidSubTransactionId;
}

/* Passes the lock's subtransaction up at its commit; forgets it at its abort. */
static void
reader_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (reader_row_subid != mySubid)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		reader_row_subid = parentSubid;
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		reader_row_subid = InvalidSubTransactionId;
}

/* Notes that the current subtransaction holds a reader's row lock. */
static void
note_reader_row_locked(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(reader_xact_callback, NULL);
		RegisterSubXactCallback(reader_subxact_callback, NULL);
		registered = true;
	}
	if (reader_row_subid == InvalidSubTransactionId)
		reader_row_subid = GetCurrentSubTransactionId();
}

/* The checks every reader function makes first: role, shard, writable. */
static void
require_reader_function(const char *shard, const char *function)
{
	PS_READER(function);
	ps_require_shard_right(shard, PS_SHARD_READ, function);
	ps_require_writable(shard);
}

/*
 * Raises the error of a reader that is gone or has expired, or 42501
 * unless the current user has the privileges of its owner.
 */
static void
check_reader(const char *shard, const char *reader, bool found,
			 const PsReaderRow *row, const char *function)
{
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("reader \"%s\" of shard \"%s\" does not exist", reader, shard)));
	if (!has_privs_of_role(GetUserId(), row->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for reader \"%s\" of shard \"%s\"", reader, shard),
				 errdetail("Only its owner (%s) or a member of that role may call %s() with it.",
						   ps_role_name(row->owner), function)));
	if (row->expired)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("reader \"%s\" of shard \"%s\" has expired", reader, shard),
				 errdetail("Its lease passed, so its position (" INT64_FORMAT ") no longer holds the shard's since: the history after it may be compacted.",
						   row->position),
				 errhint("Create it again with create_reader(), from a position no lower than the shard's since - 1.")));
}

/*
 * Locks a live reader's row to the end of the transaction, after the
 * checks of check_reader; returns its position, and in *leased whether it
 * has a lease to renew.
 */
static int64
lock_reader(const char *shard, const char *reader, TimestampTz now,
			const char *function, bool *leased)
{
	PsReaderRow row;
	bool		found = ps_reader_lock(shard, reader, now, &row);

	note_reader_row_locked();
	check_reader(shard, reader, found, &row, function);
	*leased = row.leased;
	return row.position;
}

/*
 * Refuses a lease that is negative or longer than PS_READER_LEASE_MAX_S
 * (compared as intervals are, a month as 30 days, without overflow).
 */
static void
check_lease(Interval *lease)
{
	Interval	longest = {.time = (int64) PS_READER_LEASE_MAX_S * USECS_PER_SEC};

	if (lease->month < 0 || lease->day < 0 || lease->time < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"lease\" must not be negative")));
	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(lease),
										 IntervalPGetDatum(&longest))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"lease\" must be at most %d seconds (24855 days)",
						PS_READER_LEASE_MAX_S),
				 errhint("A lease of '0' never expires.")));
}

/*
 * create_reader(shard text, reader text, position bigint default null,
 * lease interval default null) returns bigint: its position.
 */
Datum
ps_create_reader(PG_FUNCTION_ARGS)
{
	char	   *shard = ps_shard_arg(fcinfo, 0);
	char	   *reader = ps_reader_arg(fcinfo, 1);
	Interval   *lease = PG_ARGISNULL(3) ? NULL : PG_GETARG_INTERVAL_P(3);
	int64		position;

	require_reader_function(shard, "create_reader");
	if (lease != NULL)
		check_lease(lease);
	SPI_connect();
	note_reader_row_locked();
	position = ps_reader_create(shard, reader, PG_ARGISNULL(2),
								PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2), lease);
	SPI_finish();
	PG_RETURN_INT64(position);
}

/*
 * drop_reader(shard text, reader text) returns void: by its owner or the
 * shard's.
 */
Datum
ps_drop_reader(PG_FUNCTION_ARGS)
{
	char	   *shard = ps_shard_arg(fcinfo, 0);
	char	   *reader = ps_reader_arg(fcinfo, 1);
	PsReaderRow row;
	bool		found;

	require_reader_function(shard, "drop_reader");
	SPI_connect();
	found = ps_reader_lock(shard, reader, GetCurrentTimestamp(), &row);
	note_reader_row_locked();
	row.expired = false;		/* an expired reader may be dropped */
	if (!found || !ps_shard_owned_by_user(shard))
		check_reader(shard, reader, found, &row, "drop_reader");
	(void) ps_reader_delete(shard, reader);
	SPI_finish();
	/* a read_next waiting with it checks it again */
	ps_upper_notify_at_commit(shard);
	PG_RETURN_VOID();
}

/*
 * Waits, up to timeout_ms (-1: as long as it takes), until the shard
 * holds updates after the reader's position, checking the reader again
 * every time it wakes.  Takes no lock (a reader's row this transaction
 * locked before, by an earlier read_next, stays locked meanwhile: the wait
 * is still bounded by its timeout, and interruptible).
 */
static void
wait_for_updates(const char *shard, const char *reader, int64 timeout_ms,
				 const char *function)
{
	TimestampTz start = GetCurrentTimestamp();

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		int64		waited_ms = (now - start) / 1000;
		int64		sleep_ms = READ_NEXT_RECHECK_MS;
		PsReaderRow row;
		PsState		state;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		PushActiveSnapshot(GetLatestSnapshot());
		found = ps_reader_read(shard, reader, now, true, &row);
		PopActiveSnapshot();
		check_reader(shard, reader, found, &row, function);
		ps_shard_read_latest(shard, &state);
		if (ps_updates_after(&state, row.position) > 0)
			return;
		if (timeout_ms >= 0)
		{
			if (waited_ms >= timeout_ms)
				return;
			sleep_ms = Min(sleep_ms, timeout_ms - waited_ms);
		}
		(void) ps_upper_wait(shard, state.upper, Max(sleep_ms, 1));
	}
}

/*
 * The common part of read_next and read_next_rows, arguments shard and
 * reader (0 and 1), max_updates and timeout (argno, argno + 1): checks,
 * waits, locks the reader's row and renews its lease, then pushes a new
 * snapshot (the caller pops it once it has read the window) and fills w;
 * false if the window after the position is empty.  Caller is connected
 * to SPI.
 */
bool
ps_reader_next_window(FunctionCallInfo fcinfo, int argno, const char *function,
					  PsReadWindow *w)
{
	char	   *shard = ps_shard_arg(fcinfo, 0);
	char	   *reader = ps_reader_arg(fcinfo, 1);
	int64		max_updates = ps_int64_arg(fcinfo, argno, "max_updates");
	int64		timeout_ms = PG_ARGISNULL(argno + 1) ? 0 :
		ps_timeout_ms_arg(fcinfo, argno + 1);
	TimestampTz now;
	int64		position;
	int64		min_time;
	int64		max_time;
	int64		time_floor;
	bool		leased;

	require_reader_function(shard, function);
	if (max_updates < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_updates\" must be at least 1")));
	if (timeout_ms != 0)
		wait_for_updates(shard, reader, timeout_ms, function);
	now = GetCurrentTimestamp();
	position = lock_reader(shard, reader, now, function, &leased);
	if (leased)
		ps_reader_set_position(shard, reader, position, now);

	PushActiveSnapshot(GetLatestSnapshot());
	w->shard = shard;
	w->after = position;
	w->max_updates = max_updates;
	ps_consensus_read_or_error(shard, &w->state, CurrentMemoryContext, true);
	return ps_listen_window(shard, &w->state, position, true, 0,
							&min_time, &max_time, &time_floor);
}

/*
 * read_next(shard text, reader text, max_updates bigint default 100000,
 * timeout interval default null): the updates after the reader's
 * position, consolidated per (key, val, time), whole times only.  Locks
 * the reader's row and renews its lease; does not move its position.
 */
Datum
ps_read_next(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PsReadWindow w;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (ps_reader_next_window(fcinfo, 2, "read_next", &w))
	{
		PsReaderStep *step = ps_reader_step_begin(w.shard, &w.state, w.after,
												  w.max_updates);

		ps_emit_reader_step(rsinfo, step);
		ps_reader_step_end(step);
	}
	PopActiveSnapshot();
	SPI_finish();
	return (Datum) 0;
}

/*
 * advance_reader(shard text, reader text, position bigint) returns void:
 * in the caller's transaction; never back, never to or past upper.
 */
Datum
ps_advance_reader(PG_FUNCTION_ARGS)
{
	char	   *shard = ps_shard_arg(fcinfo, 0);
	char	   *reader = ps_reader_arg(fcinfo, 1);
	int64		position = ps_int64_arg(fcinfo, 2, "position");
	TimestampTz now = GetCurrentTimestamp();
	int64		current;
	bool		leased;
	PsState		state;

	require_reader_function(shard, "advance_reader");
	SPI_connect();
	current = lock_reader(shard, reader, now, "advance_reader", &leased);
	if (position < current)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position of reader \"%s\" of shard \"%s\" cannot move back to " INT64_FORMAT,
						reader, shard, position),
				 errdetail("Its position is " INT64_FORMAT ".", current)));
	ps_shard_read_latest(shard, &state);
	ps_check_position_readable(shard, &state, position);
	ps_reader_set_position(shard, reader, position, now);
	SPI_finish();
	PG_RETURN_VOID();
}

/* A row of the reader table, copied out of SPI */
typedef struct ReaderInfo
{
	char	   *shard;
	Oid			owner;
	Datum		values[8];		/* as read: shard .. expired */
	bool		nulls[8];
} ReaderInfo;

/* Copies the rows of ps_reader_list's query into the current context. */
static ReaderInfo *
copy_reader_rows(uint64 n, MemoryContext dest)
{
	ReaderInfo *rows = MemoryContextAllocZero(dest, sizeof(ReaderInfo) * Max(n, 1));

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		for (int c = 0; c < 8; c++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, c);
			Datum		d = SPI_getbinval(tuple, desc, c + 1, &rows[i].nulls[c]);
			MemoryContext old = MemoryContextSwitchTo(dest);

			rows[i].values[c] = rows[i].nulls[c] ? (Datum) 0 :
				datumCopy(d, att->attbyval, att->attlen);
			MemoryContextSwitchTo(old);
		}
		rows[i].shard = MemoryContextStrdup(dest, TextDatumGetCString(rows[i].values[0]));
		rows[i].owner = DatumGetObjectId(rows[i].values[2]);
	}
	return rows;
}

/*
 * reader_info(): the readers the current user owns (as a member of their
 * owner) or whose shard it owns, with their lag (view readers).
 */
Datum
ps_reader_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt = CurrentMemoryContext;
	ReaderInfo *rows;
	uint64		n;

	PS_READER("reader_info");
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	n = ps_reader_list(GetCurrentTimestamp());
	rows = copy_reader_rows(n, cxt);
	for (uint64 i = 0; i < n; i++)
	{
		ReaderInfo *r = &rows[i];
		Datum		values[10];
		bool		nulls[10];
		PsState		state;
		int64		position = DatumGetInt64(r->values[3]);

		if (!has_privs_of_role(GetUserId(), r->owner) &&
			!ps_shard_owned_by_user(r->shard))
			continue;
		if (!ps_consensus_read(r->shard, &state, CurrentMemoryContext, true))
			continue;
		/* shard, reader, owner, position */
		memcpy(values, r->values, 4 * sizeof(Datum));
		memcpy(nulls, r->nulls, 4 * sizeof(bool));
		values[4] = Int64GetDatum(state.upper - 1 - position);
		values[5] = Int64GetDatum((int64) ps_updates_after(&state, position));
		nulls[4] = nulls[5] = false;
		/* lease, last_active, expires_at, expired */
		memcpy(values + 6, r->values + 4, 4 * sizeof(Datum));
		memcpy(nulls + 6, r->nulls + 4, 4 * sizeof(bool));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
