/*-------------------------------------------------------------------------
 *
 * sink_tickets.c
 *	  The sink's tickets, one per write in flight: taken and freed, linked
 *	  to their interval, and looked up by key.  Their states move in
 *	  sink_protocol.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "sink/sink.h"

/*
 * Takes a free ticket and gives it a new id; -1 if none is free (which the
 * count of tickets rules out).  Caller holds the lock exclusively.
 */
int
ps_sink_ticket_take(void)
{
	int			t = ps_sink->free_ticket;
	SinkTicket *tk;

	if (t < 0)
		return -1;
	tk = &ps_sink_tickets[t];
	ps_sink->free_ticket = tk->next;
	tk->id = ps_sink->next_ticket_id++;
	tk->next = -1;
	return t;
}

/*
 * Returns a ticket, in state from, to the free list; caller holds the lock
 * exclusively.
 */
void
ps_sink_ticket_free(int t, SinkTicketState from)
{
	SinkTicket *tk = &ps_sink_tickets[t];

	ps_sink_ticket_move(tk, from, TK_FREE);
	tk->id = 0;
	tk->next = ps_sink->free_ticket;
	if (ps_sink->free_ticket < 0)
		ConditionVariableBroadcast(&ps_sink->space_cv);
	ps_sink->free_ticket = t;
}

/* Adds a ticket at the end of an interval's list; caller holds the lock exclusively. */
void
ps_sink_ticket_link(SinkInterval *iv, int t)
{
	ps_sink_tickets[t].next = -1;
	ps_sink_tickets[t].interval = iv - ps_sink_intervals;
	if (iv->tickets_tail >= 0)
		ps_sink_tickets[iv->tickets_tail].next = t;
	else
		iv->tickets_head = t;
	iv->tickets_tail = t;
}

/*
 * Takes a ticket off its interval's list; false if it is not there.
 * Caller holds the lock exclusively.
 */
bool
ps_sink_ticket_unlink(SinkInterval *iv, int t)
{
	int			prev = -1;

	for (int i = iv->tickets_head; i >= 0; prev = i, i = ps_sink_tickets[i].next)
	{
		if (i != t)
			continue;
		if (prev >= 0)
			ps_sink_tickets[prev].next = ps_sink_tickets[i].next;
		else
			iv->tickets_head = ps_sink_tickets[i].next;
		if (iv->tickets_tail == i)
			iv->tickets_tail = prev;
		ps_sink_tickets[i].next = -1;
		return true;
	}
	return false;
}

/* The small chunk of ticket t's write in its interval, or InvalidDsaPointer; caller holds the lock. */
dsa_pointer
ps_sink_small_of(const SinkInterval *iv, int t)
{
	for (dsa_pointer p = iv->small_head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		if (c->ticket == t && c->ticket_id == ps_sink_tickets[t].id)
			return p;
		p = c->next;
	}
	return InvalidDsaPointer;
}

/*
 * Takes a withdrawn write off its interval: its small chunk, if it has one
 * there, and its ticket (joined, or withdrawn: from), which is freed.
 * Returns the chunk, to be freed once the lock is released
 * (InvalidDsaPointer if none).  Caller holds the lock exclusively.
 */
dsa_pointer
ps_sink_drop_write(SinkInterval *iv, int t, dsa_pointer small,
				   SinkTicketState from)
{
	if (!DsaPointerIsValid(small) || !ps_sink_unlink_small(iv, small))
		small = InvalidDsaPointer;
	(void) ps_sink_ticket_unlink(iv, t);
	ps_sink_ticket_free(t, from);
	return small;
}

/*
 * True if a write of the shard of this database with idempotency key key,
 * other than ticket except, is in flight: joined, sealed, or done but not
 * yet read by its writer.  Caller holds the lock.
 */
bool
ps_sink_key_in_flight(const char *shard, const char *key, int except)
{
	for (int t = 0; t < ps_sink->ntickets; t++)
	{
		SinkTicket *tk = &ps_sink_tickets[t];
		SinkInterval *iv;

		if (t == except || !tk->has_key ||
			(tk->state != TK_JOINED && tk->state != TK_SEALED && tk->state != TK_DONE))
			continue;
		iv = &ps_sink_intervals[tk->interval];
		if (iv->database == MyDatabaseId && strcmp(tk->key, key) == 0 &&
			strcmp(iv->shard, shard) == 0)
			return true;
	}
	return false;
}

/*
 * Takes a small chunk off its interval's list; false if it is not there.
 * Caller holds the lock exclusively.
 */
bool
ps_sink_unlink_small(SinkInterval *iv, dsa_pointer chunk)
{
	dsa_pointer *link = &iv->small_head;

	while (DsaPointerIsValid(*link))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), *link);

		if (*link == chunk)
		{
			*link = c->next;
			c->next = InvalidDsaPointer;
			return true;
		}
		link = &c->next;
	}
	return false;
}

/*
 * True if ticket t is still the write of that id and was not withdrawn: a
 * part or chunk that names it belongs to the interval.  Caller holds the
 * lock.
 */
bool
ps_sink_ticket_live(int t, uint64 id)
{
	SinkTicket *tk = &ps_sink_tickets[t];

	return tk->id == id && tk->state != TK_FREE && tk->state != TK_WITHDRAWN;
}
