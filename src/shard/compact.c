/*-------------------------------------------------------------------------
 *
 * compact.c
 *	  Merging a run of a shard's batches into one and swapping it in.
 *
 * A merge reads the run's parts with a k-way merge, advances times below
 * since to since, sums equal (key, val, time) and drops zeros, and writes
 * the result as a new batch.  A sum that leaves bigint is written as several
 * updates of that (key, val, time), each in range, in separate parts (see
 * read.c), so a merge never fails on it and readers still see the exact sum.
 * It is swapped in by compare-and-swap only if
 * the run is still in the state (appends only add batches after it, so
 * the merge survives them); the replaced parts' blob rows are deleted in
 * the same transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/snapmgr.h"

#include "shard/compact.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "shard/stats.h"
#include "store/store.h"

/* Batches of one tier that are merged together */
#define FANOUT			8
/* Batches below this many encoded bytes are all in tier 0 */
#define TIER0_BYTES		(64 * 1024)
/* Updates merged between checks that the shard was not dropped */
#define DROP_CHECK_EVERY	8192

/* Tier of a batch: 0 below TIER0_BYTES, then one more per FANOUT times larger. */
static int
batch_tier(const PsBatch *b)
{
	uint64		size = ps_batch_encoded_bytes(b);
	int			tier = 0;

	for (uint64 bound = TIER0_BYTES; size >= bound && tier < 32; bound *= FANOUT)
		tier++;
	return tier;
}

/*
 * Picks the run [from, to) to merge, size-tiered: for the lowest tier t
 * that has at least FANOUT batches in the run of batches of tier t or below
 * at the end of the list, that whole run.  Counting only tier t keeps one
 * large batch from being rewritten together with every few small ones:
 * each merge moves updates up about one tier, so after n appends a shard
 * holds O(FANOUT log n) batches and each update is rewritten
 * O(log n / log FANOUT) times.
 */
bool
ps_compact_choose(const PsState *state, int *from, int *to)
{
	int			n = state->nbatches;
	int			max_tier = 0;
	int		   *tiers;
	bool		found = false;

	if (n < FANOUT)
		return false;
	tiers = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		tiers[i] = batch_tier(&state->batches[i]);
		max_tier = Max(max_tier, tiers[i]);
	}
	for (int t = 0; t <= max_tier && !found; t++)
	{
		int			j = n;
		int			at_t = 0;

		for (; j > 0 && tiers[j - 1] <= t; j--)
			at_t += (tiers[j - 1] == t);
		if (at_t >= FANOUT)
		{
			*from = j;
			*to = n;
			found = true;
		}
	}
	pfree(tiers);
	return found;
}

/*
 * Writes the merge of batches [from, to) of state as one batch.  Sums that
 * leave bigint are split into several updates.
 */
static void
merge_run(const char *shard, const PsState *state, int from, int to, PsBatch *out)
{
	PsState		run = *state;
	PsMerge    *m;
	PsBatchWriter w;
	PsUpdate	u;
	uint64		merged = 0;

	run.batches = &state->batches[from];
	run.nbatches = to - from;
	m = ps_merge_begin(shard, &run, PG_INT64_MIN, PG_INT64_MAX, true);
	ps_merge_split_overflow(m);
	ps_batch_writer_init(&w, shard, true);
	while (ps_merge_next_consolidated(m, true, state->since, &u))
	{
		if (++merged % DROP_CHECK_EVERY == 0)
			ps_compaction_check_dropped(shard);
		ps_batch_writer_add(&w, &u);
	}
	ps_batch_writer_finish(&w, out);
	ps_merge_end(m);
	out->lower = state->batches[from].lower;
	out->upper = state->batches[to - 1].upper;
	out->since = state->since;
	out->single_time = false;
	out->time = 0;
}

/* True if two batch descriptions (and their parts) are the same. */
static bool
same_batch(const PsBatch *a, const PsBatch *b)
{
	if (a->lower != b->lower || a->upper != b->upper || a->nparts != b->nparts ||
		a->single_time != b->single_time || a->time != b->time)
		return false;
	for (int i = 0; i < a->nparts; i++)
	{
		const PsPart *p = &a->parts[i];
		const PsPart *q = &b->parts[i];

		if (p->checksum != q->checksum || (p->blob_key == NULL) != (q->blob_key == NULL) ||
			(p->blob_key && strcmp(p->blob_key, q->blob_key) != 0))
			return false;
	}
	return true;
}

/* Position of the run old[from, to) in cur, or -1 if it is gone. */
static int
find_run(const PsState *cur, const PsState *old, int from, int to)
{
	int			len = to - from;

	for (int k = 0; k + len <= cur->nbatches; k++)
	{
		bool		same = true;

		for (int i = 0; i < len && same; i++)
			same = same_batch(&cur->batches[k + i], &old->batches[from + i]);
		if (same)
			return k;
	}
	return -1;
}

/* Deletes the blob rows of n batches' parts. */
static void
delete_parts(const PsBatch *batches, int n)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < batches[i].nparts; j++)
			if (batches[i].parts[j].blob_key)
				ps_blob_delete(batches[i].parts[j].blob_key);
}

/* Replaces cur's batches [k, k + len) by merged, in place. */
static void
splice_run(PsState *cur, int k, int len, const PsBatch *merged)
{
	PsBatch    *b = palloc(sizeof(PsBatch) * (cur->nbatches - len + 1));
	int			n = 0;

	for (int i = 0; i < k; i++)
		b[n++] = cur->batches[i];
	b[n++] = *merged;
	for (int i = k + len; i < cur->nbatches; i++)
		b[n++] = cur->batches[i];
	cur->batches = b;
	cur->nbatches = n;
}

/*
 * Counts a merge of batches [from, to) of state that was swapped in, and
 * the updates it read, when the transaction commits.
 */
static void
count_merge(const char *shard, const PsState *state, int from, int to)
{
	PsCounters	delta = {0};

	delta.compactions = 1;
	for (int i = from; i < to; i++)
		delta.compacted_updates += ps_batch_updates(&state->batches[i]);
	ps_stats_add_at_commit(shard, &delta);
}

/*
 * Merges batches [from, to) of state and swaps the result in by CaS,
 * retrying while appends move the seqno; the replaced parts' blob rows are
 * then deleted, in the same transaction, and the merge is counted in the
 * stats once it commits.  The state must have been read
 * with the active snapshot, which the merge reads the parts with: a
 * concurrent compaction that deletes them cannot take them away mid-merge.  Locks are taken in
 * the order every writer uses: the consensus row, then blob rows.  Returns
 * false, with the new parts deleted again, if the run is no longer in the
 * state.
 */
bool
ps_compact_range(const char *shard, const PsState *state, int from, int to)
{
	PsBatch		merged;

	merge_run(shard, state, from, to, &merged);
	for (;;)
	{
		PsState		cur;
		int			k;

		CHECK_FOR_INTERRUPTS();
		ps_consensus_read_or_error(shard, &cur, CurrentMemoryContext, false);
		k = find_run(&cur, state, from, to);
		if (k < 0)
		{
			delete_parts(&merged, 1);
			return false;
		}
		splice_run(&cur, k, to - from, &merged);
		if (ps_consensus_cas(shard, cur.seqno, &cur, NULL))
			break;
	}
	delete_parts(&state->batches[from], to - from);
	count_merge(shard, state, from, to);
	return true;
}

/* True if compacting state would change nothing. */
static bool
already_compact(const PsState *state)
{
	return state->nbatches == 0 ||
		(state->nbatches == 1 && state->batches[0].since == state->since &&
		 !state->batches[0].single_time);
}

/*
 * compact(): merges every batch of the shard into one, now.  Batches
 * appended meanwhile stay after the merged one.
 */
void
ps_shard_compact(const char *name)
{
	for (;;)
	{
		PsState		state;
		bool		done;

		CHECK_FOR_INTERRUPTS();
		PushActiveSnapshot(GetLatestSnapshot());
		ps_consensus_read_or_error(name, &state, CurrentMemoryContext, true);
		done = already_compact(&state) ||
			ps_compact_range(name, &state, 0, state.nbatches);
		PopActiveSnapshot();
		if (done)
			return;
	}
}
