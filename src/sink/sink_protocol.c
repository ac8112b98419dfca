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
 *	free		joined		writer	it joins an open interval (join_interval)
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
 *	done		free		writer	it read the outcome (take_result), or gave
 *									up once it was set (give_up)
 *	done		free		worker	at the finish, if its writer left (40003,
 *									exit)
 */
static const bool ticket_moves[TK_DONE + 1][TK_DONE + 1] = {
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
 *				or worker	(ps_sink_drop_if_abandoned, from give_up or
 *									the end of an encode ahead); freed at once
 *	processing	done		worker	committed or failed (finish_interval)
 *	done		free		writer	the last waiter read its outcome
 *				or worker	(ps_sink_release), or none waits
 */
static const bool interval_moves[IV_DONE + 1][IV_DONE + 1] = {
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
