/*-------------------------------------------------------------------------
 *
 * sink_settle.c
 *	  The worker's side of idempotency keys: at the seal it settles each
 *	  keyed write against the keys committed before and the writes of the
 *	  same interval, leaves out those not to be written, and records the
 *	  keys of those it commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "sink/sink.h"
#include "sink/sink_internal.h"
#include "store/store.h"

/*
 * Looks up at once, in the idempotency table, the keys of the sealed
 * interval's keyed writes, but those whose lookup on arrival still stands
 * (key_epoch.c).  Their keys never change once published: read without
 * the lock.
 */
static List *
fetch_stored_keys(SinkInterval *iv)
{
	const char **keys = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	int			n = 0;
	uint64		epoch = ps_sink_key_epoch();

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
		if (ps_sink_tickets[t].has_key && ps_sink_tickets[t].key_epoch != epoch)
			keys[n++] = ps_sink_tickets[t].key;
	return ps_idempotency_get_many(iv->shard, keys, n, PS_DIGEST_LEN);
}

/* The stored key of that name, or NULL; no lock. */
static PsStoredKey *
find_stored(List *stored, const char *key)
{
	ListCell   *lc;

	foreach(lc, stored)
		if (strcmp(((PsStoredKey *) lfirst(lc))->key, key) == 0)
			return lfirst(lc);
	return NULL;
}

/*
 * The first write of the interval, before ticket t in join order, that
 * has t's key and is to be written; -1 if none.  Reads only what the
 * worker alone writes until the tickets are done: no lock.
 */
static int
first_of_key(SinkInterval *iv, int t)
{
	for (int f = iv->tickets_head; f >= 0 && f != t; f = ps_sink_tickets[f].next)
		if (ps_sink_tickets[f].has_key && ps_sink_tickets[f].verdict == VD_WRITE &&
			strcmp(ps_sink_tickets[f].key, ps_sink_tickets[t].key) == 0)
			return f;
	return -1;
}

/*
 * Gives each keyed write of the sealed interval its verdict, in join
 * order: its key committed before (in the idempotency table) makes it a
 * repeat of that write or a conflict with it; else a write of the same
 * key earlier in the interval makes it follow that one; else it is to be
 * written.  Verdicts are the worker's own until the tickets are done.
 * No lock: the interval is sealed.
 */
void
ps_sink_settle_keys(SinkInterval *iv)
{
	List	   *stored = fetch_stored_keys(iv);

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
	{
		SinkTicket *tk = &ps_sink_tickets[t];
		PsStoredKey *sk;
		bool		same;

		if (!tk->has_key)
			continue;
		if ((sk = find_stored(stored, tk->key)) != NULL)
		{
			same = sk->digest_len == PS_DIGEST_LEN &&
				memcmp(sk->digest, tk->digest, PS_DIGEST_LEN) == 0;
			tk->verdict = same ? VD_REPEAT_STORED : VD_CONFLICT_STORED;
			tk->stored_time = sk->time;
		}
		else if ((tk->first = first_of_key(iv, t)) >= 0)
		{
			same = memcmp(ps_sink_tickets[tk->first].digest, tk->digest,
						  PS_DIGEST_LEN) == 0;
			tk->verdict = same ? VD_REPEAT_HERE : VD_CONFLICT_HERE;
		}
	}
}

/* True if the write of ticket t is to be written (so far); no lock. */
static bool
to_write(int t)
{
	return ps_sink_tickets[t].verdict == VD_WRITE;
}

/*
 * Leaves out of the interval the small chunks and the large writes' parts
 * of writes not to be written (repeats and conflicts), deleting those
 * parts' blob rows.  The interval is sealed: its lists no longer change.
 * Takes the sink lock only to free chunks.
 */
List *
ps_sink_leave_out_settled(SinkInterval *iv, List *written, PsWriteCounts *counts)
{
	dsa_pointer dropped = InvalidDsaPointer;
	dsa_pointer *link = &iv->small_head;
	List	   *kept = NIL;
	ListCell   *lc;

	while (DsaPointerIsValid(*link))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), *link);
		dsa_pointer p = *link;

		if (to_write(c->ticket))
		{
			link = &c->next;
			continue;
		}
		*link = c->next;
		c->next = dropped;
		dropped = p;
	}
	ps_sink_free_list(dropped);
	foreach(lc, written)
	{
		WrittenPart *w = lfirst(lc);

		if (to_write(w->ticket))
		{
			kept = lappend(kept, w);
			continue;
		}
		ps_blob_delete(w->part.blob_key);
		counts->blob_puts--;
		counts->blob_bytes -= w->part.encoded_size;
	}
	return kept;
}

/*
 * Counts the interval's writes to be written, small (joining the shared
 * part) and large; after the shared part is built, refused ones are not.
 * No lock: the interval is sealed.
 */
int
ps_sink_count_to_write(SinkInterval *iv, int *small, int *large)
{
	*small = *large = 0;
	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
		if (to_write(t))
			(*(ps_sink_tickets[t].large ? large : small))++;
	return *small + *large;
}

/*
 * Records the keys of the interval's keyed writes it commits, at time;
 * if there are any, the key epoch is moved once the transaction ends
 * (ps_sink_keys_commit_ended).  No lock: the interval is sealed.
 */
void
ps_sink_store_keys(SinkRun *run, int64 time)
{
	SinkInterval *iv = run->iv;
	const char **keys = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	const char **digests = palloc(sizeof(char *) * Max(ps_sink->ntickets, 1));
	int			n = 0;

	for (int t = iv->tickets_head; t >= 0; t = ps_sink_tickets[t].next)
	{
		if (!ps_sink_tickets[t].has_key || !to_write(t))
			continue;
		keys[n] = ps_sink_tickets[t].key;
		digests[n++] = ps_sink_tickets[t].digest;
	}
	ps_idempotency_put_many(iv->shard, keys, digests, n, time, PS_DIGEST_LEN);
	run->keys_recorded = n > 0;
}

/*
 * Moves the key epoch if the run's transaction, now ended, recorded keys;
 * no lock (the epoch is an atomic).
 */
void
ps_sink_keys_commit_ended(SinkRun *run)
{
	if (!run->keys_recorded)
		return;
	run->keys_recorded = false;
	ps_sink_key_epoch_move();
}
