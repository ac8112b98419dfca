/*-------------------------------------------------------------------------
 *
 * sink_protocol.c
 *	  The write protocol as one state machine: every move of a ticket's or
 *	  an interval's state, the outcome a worker gives each ticket, and the
 *	  error an append() call raises for what it knows of its write.
 *
 * No other file writes a ticket's or an interval's state: each move goes
 * through ps_sink_ticket_move or ps_sink_interval_move, which check that
 * the state is the one the caller expects, that the move is one of the
 * tables below, and that the caller holds the sink lock exclusively.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shard/read.h"
#include "sink/sink.h"

/*
 * The sink's shared memory: the state the protocol moves.  Set up, and
 * attached in each process, by sink_shmem.c.
 */
SinkShared *ps_sink = NULL;
SinkInterval *ps_sink_intervals = NULL;
SinkTicket *ps_sink_tickets = NULL;

/*
 * The moves of a ticket (SinkTicket.state), who makes them, and when:
 *
 *	from		to			who		when
 *	free		joined		writer	it joins an open interval (ps_sink_join)
 *	joined		free		writer	it gives up before the seal (cancel,
 *									timeout, error, exit): the write is
 *									withdrawn (withdraw)
 *	joined		withdrawn	writer	as above, while the worker encodes its
 *									small chunk ahead: the worker frees it
 *	withdrawn	free		worker	done encoding it ahead (encoded_ahead), at
 *									the seal (seal_writes), or at the finish
 *	joined		sealed		worker	it is taken to commit (seal_writes): from
 *									here on nothing withdraws it
 *	joined		done		worker	the interval ended before the seal (it
 *									failed, or its worker exited): not written
 *	sealed		done		worker	the outcome is set from its verdict and
 *									the interval's result (decide_outcomes)
 *	done		free		writer	it read the outcome (ps_sink_take_result),
 *									or gave up once it was set
 *									(ps_sink_give_up)
 *	done		free		worker	at the finish, if its writer left (40003,
 *									exit)
 */
/* ticket_moves[from][to]: the move is in the table (read by assertions) */
static const bool ticket_moves[TK_DONE + 1][TK_DONE + 1] pg_attribute_unused() = {
	[TK_FREE] = {[TK_JOINED] = true},
	[TK_JOINED] = {[TK_FREE] = true,[TK_WITHDRAWN] = true,
	[TK_SEALED] = true,[TK_DONE] = true},
	[TK_WITHDRAWN] = {[TK_FREE] = true},
	[TK_SEALED] = {[TK_DONE] = true},
	[TK_DONE] = {[TK_FREE] = true},
};

/*
 * The moves of an interval (SinkInterval.state), who makes them, and when:
 *
 *	from		to			who		when
 *	free		open		writer	the first write of a shard with no open
 *									interval joins (ps_sink_open_interval)
 *	open		processing	worker	it is ready, and no interval of its shard
 *									waits for the state row (ps_sink_take_ready)
 *	open		done		writer	its last write withdrew before the seal
 *				or worker	(ps_sink_drop_if_abandoned, from
 *									ps_sink_give_up or the end of an encode
 *									ahead); freed at once
 *	processing	done		worker	committed or failed (finish_interval)
 *	done		free		writer	the last waiter read its outcome
 *				or worker	(ps_sink_release), or none waits
 */
/* interval_moves[from][to]: the move is in the table (read by assertions) */
static const bool interval_moves[IV_DONE + 1][IV_DONE + 1] pg_attribute_unused() = {
	[IV_FREE] = {[IV_OPEN] = true},
	[IV_OPEN] = {[IV_PROCESSING] = true,[IV_DONE] = true},
	[IV_PROCESSING] = {[IV_DONE] = true},
	[IV_DONE] = {[IV_FREE] = true},
};

/*
 * Moves a ticket from state `from` to `to`, a move of the table above;
 * caller holds the sink lock exclusively.
 */
void
ps_sink_ticket_move(SinkTicket *tk, SinkTicketState from, SinkTicketState to)
{
	Assert(LWLockHeldByMeInMode(ps_sink->lock, LW_EXCLUSIVE));
	Assert(tk->state == from);
	Assert(ticket_moves[from][to]);
	tk->state = to;
}

/*
 * Moves an interval from state `from` to `to`, a move of the table above;
 * caller holds the sink lock exclusively.
 */
void
ps_sink_interval_move(SinkInterval *iv, SinkIntervalState from,
					  SinkIntervalState to)
{
	Assert(LWLockHeldByMeInMode(ps_sink->lock, LW_EXCLUSIVE));
	Assert(iv->state == from);
	Assert(interval_moves[from][to]);
	iv->state = to;
}

/*
 * Sets the outcome of a ticket of an interval that committed at time, or
 * failed with code, from its verdict (the worker's, once sealed):
 *
 *	verdict				interval committed	interval failed
 *	write				its time			the interval's error
 *	repeat stored		the stored time		the stored time
 *	conflict stored		PS005				PS005
 *	repeat/conflict		follows the first	the interval's error
 *	here				ticket of its key:
 *						written: the time /
 *						PS005; refused: 22003
 *	refused				22003				22003
 *
 * A ticket never sealed is in no commit: the interval's error.  Caller
 * holds the sink lock exclusively.
 */
void
ps_sink_ticket_decide(SinkTicket *tk, bool committed, int64 time, int code)
{
	SinkVerdict v = tk->verdict;

	Assert(LWLockHeldByMeInMode(ps_sink->lock, LW_EXCLUSIVE));
	if (tk->state != TK_SEALED)
		v = VD_WRITE;			/* never sealed: not in any commit */
	else if (v == VD_REPEAT_HERE || v == VD_CONFLICT_HERE)
	{
		/* it follows the first write of its key in the interval */
		if (ps_sink_tickets[tk->first].verdict == VD_REFUSED)
			v = VD_REFUSED;
		else if (committed && v == VD_CONFLICT_HERE)
			v = VD_CONFLICT_STORED;
		else
			v = VD_WRITE;
	}
	tk->time = 0;
	tk->sqlerrcode = 0;
	tk->refused = v == VD_REFUSED;
	switch (v)
	{
		case VD_WRITE:
		case VD_REPEAT_HERE:
		case VD_CONFLICT_HERE:
			if (committed)
				tk->time = time;
			else
				tk->sqlerrcode = code ? code : ERRCODE_INTERNAL_ERROR;
			break;
		case VD_REPEAT_STORED:
			tk->time = tk->stored_time;
			break;
		case VD_CONFLICT_STORED:
			tk->sqlerrcode = ERRCODE_PS_IDEMPOTENCY_CONFLICT;
			break;
		case VD_REFUSED:
			tk->sqlerrcode = ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE;
			break;
	}
}

/*
 * The outcome of an append() call: what its caller gets, from how far the
 * call has come (phase), what it knows of its write (known) and the error
 * that interrupted it (sqlerrcode; at SP_RESULT, its ticket's):
 *
 *	phase		known					error	the caller gets
 *	reading		keyed					57014	40003, key unknown
 *	reading		otherwise				any		the error
 *	lookup		keyed					PS005	the error (a committed call of
 *												its key had other content)
 *	lookup		keyed					other	40003, key unknown
 *	before join	no key					any		the error
 *	before join	keyed, no rival			57014	the error, nothing written
 *	before join	keyed, no rival			other	the error
 *	before join	keyed, rival			PS005	the error
 *	before join	keyed, rival			other	40003, key unknown
 *	joined		withdrawn, no rival		any		the error, nothing written
 *	joined		withdrawn, rival		any		40003, rival in flight
 *	joined		sealed (not withdrawn)	any		40003, may still commit
 *	result		ticket done with PS005	-		PS005, nothing written
 *	result		ticket refused			-		22003, nothing written
 *	result		ticket done with error	-		the interval's error, nothing
 *												written
 *	result		ticket done with a time	-		the time
 *	told		-						any		the error (it is the outcome)
 *	returned	-						any		40003, written earlier
 *
 * "Rival": another write with the call's shard and key was in flight when
 * the call arrived (or, once joined, when it was withdrawn), which may
 * commit: the call cannot say that nothing of its key was written.
 * "Returned": an append of the statement returned a time, and a later
 * error ends the statement (outcome_log_hook).  A cancel (57014) of a
 * keyed call says "nothing written" only when no call of its key can be.
 * No lock.
 */
SinkOutcome
ps_sink_outcome(SinkCallPhase phase, const SinkKnown *known, int sqlerrcode)
{
	bool		cancel = sqlerrcode == ERRCODE_QUERY_CANCELED;
	bool		conflict = sqlerrcode == ERRCODE_PS_IDEMPOTENCY_CONFLICT;

	switch (phase)
	{
		case SP_READING:
			return known->keyed && cancel ? SO_KEY_UNKNOWN : SO_STANDS;
		case SP_LOOKUP:
			return !known->keyed || conflict ? SO_STANDS : SO_KEY_UNKNOWN;
		case SP_BEFORE_JOIN:
			if (!known->keyed || conflict)
				return SO_STANDS;
			if (known->rival)
				return SO_KEY_UNKNOWN;
			return cancel ? SO_NOT_WRITTEN : SO_STANDS;
		case SP_JOINED:
			if (!known->withdrawn)
				return SO_MAY_COMMIT;
			return known->rival ? SO_RIVAL_IN_FLIGHT : SO_NOT_WRITTEN;
		case SP_RESULT:
			if (conflict)
				return SO_KEY_CONFLICT;
			if (known->refused)
				return SO_REFUSED;
			return sqlerrcode != 0 ? SO_FAILED : SO_TIME;
		case SP_TOLD:
			return SO_STANDS;
		case SP_RETURNED:
			return SO_WRITTEN_EARLIER;
	}
	return SO_STANDS;			/* keep the compiler quiet */
}

/*
 * Raises an outcome of the table above that is an error: edata is the
 * error that interrupted the call (taken out of the error state), NULL at
 * SP_RESULT, whose outcomes known describes.  No lock.
 */
void
ps_sink_raise_outcome(SinkOutcome oc, const char *shard, const SinkKnown *known,
					  const ErrorData *edata)
{
	switch (oc)
	{
		case SO_NOT_WRITTEN:
			ereport(ERROR,
					(errcode(edata->sqlerrcode),
					 errmsg("%s", edata->message),
					 edata->detail ?
					 errdetail("%s  Nothing of this append to shard \"%s\" was written.",
							   edata->detail, shard) :
					 errdetail("Nothing of this append to shard \"%s\" was written.", shard),
					 edata->hint ? errhint("%s", edata->hint) : 0));
			break;
		case SO_KEY_UNKNOWN:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
					 errmsg("append to shard \"%s\" was interrupted before it could tell whether its idempotency key was used",
							shard),
					 errdetail("%s.  Nothing of this call was written, but another call with the same key may have been, or may still be.",
							   edata->message),
					 errhint("Retry it with the same idempotency key: it is written once.")));
			break;
		case SO_RIVAL_IN_FLIGHT:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
					 errmsg("append to shard \"%s\" was interrupted while a write with its idempotency key was in flight",
							shard),
					 errdetail("%s.  Nothing of this call was written, but the write with the same key may still commit.",
							   edata->message),
					 errhint("Retry it with the same idempotency key: it is written once.")));
			break;
		case SO_MAY_COMMIT:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
					 errmsg("append to shard \"%s\" was interrupted while its interval was being committed",
							shard),
					 errdetail("%s.  The append may still commit.", edata->message),
					 known->keyed ?
					 errhint("Retry it with the same idempotency key: it is written once.") :
					 errhint("Check whether the write is in the shard before you retry it, or give appends an idempotency key.")));
			break;
		case SO_KEY_CONFLICT:
			ereport(ERROR,
					(errcode(ERRCODE_PS_IDEMPOTENCY_CONFLICT),
					 errmsg("idempotency key \"%s\" of shard \"%s\" was used by an append of other content",
							known->key, shard),
					 errdetail("A retry must carry the same keys, vals and diffs as the append it repeats; nothing was written."),
					 errhint("Use a new idempotency key for a new append.")));
			break;
		case SO_REFUSED:
			ps_raise_write_diff_overflow(shard, true);
			break;
		case SO_FAILED:
			ereport(ERROR,
					(errcode(known->code),
					 errmsg("%s", known->message),
					 errdetail("Nothing of this append to shard \"%s\" was written.", shard)));
			break;
		case SO_TIME:
		case SO_STANDS:
		case SO_WRITTEN_EARLIER:
			break;
	}
	elog(ERROR, "append outcome %d is not an error to raise", (int) oc);
}

/*
 * Takes the error being handled (in PG_CATCH) out of the error state, in
 * cxt, the memory context the caller ran in, to be raised again in
 * another form.  No lock.
 */
ErrorData *
ps_sink_caught_error(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	return edata;
}

/*
 * Raises the error being handled (in PG_CATCH) as the outcome table says,
 * for a call at phase that knows known of its write; cxt is the memory
 * context the call ran in.  No lock.
 */
void
ps_sink_rethrow(SinkCallPhase phase, const SinkKnown *known, const char *shard,
				MemoryContext cxt)
{
	SinkOutcome oc = ps_sink_outcome(phase, known, geterrcode());

	if (oc == SO_STANDS)
		PG_RE_THROW();
	ps_sink_raise_outcome(oc, shard, known, ps_sink_caught_error(cxt));
}

/*
 * Rewrites an error that ends a statement in which calls appends returned
 * a time (the last to shard, at time) into the outcome SO_WRITTEN_EARLIER:
 * 40003, with a DETAIL saying they were written and stay so, whatever the
 * error: the caller must not take it for "nothing written".  Called from
 * an error report hook; no lock.
 */
void
ps_sink_rewrite_written(ErrorData *edata, int calls, const char *shard,
						int64 time)
{
	const char *what = calls == 1 ?
	psprintf("An append of this statement to shard \"%s\" was written at time " INT64_FORMAT " and stays written.",
			 shard, time) :
	psprintf("%d appends of this statement were written (the last to shard \"%s\" at time " INT64_FORMAT ") and stay written.",
			 calls, shard, time);

	edata->detail = edata->detail ? psprintf("%s  %s", edata->detail, what) :
		(char *) what;
	if (edata->sqlerrcode != ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN &&
		edata->hint == NULL)
		edata->hint = pstrdup("The statement failed, but appends are not part of its transaction: do not retry the appends that were written, or retry them with their idempotency keys.");
	edata->sqlerrcode = ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN;
}
