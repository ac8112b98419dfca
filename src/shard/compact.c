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
 *
 * A background merge rewrites only what pays: batches of LIST_MIN_BYTES
 * and more keep their parts, which the merged batch lists as sorted runs
 * of its own, and only the others are merged into one new run.  The parts
 * of a single_time batch (a sink interval) are listed with its time as
 * their own, so the interval batches that make up most of a busy shard's
 * appends reach their first rewrite FANOUT^3 runs at a time, not
 * FANOUT.  Readers merge parts, not batches, so a batch of several runs
 * reads as the batches it lists did.  A merged batch holds at most FANOUT
 * runs, or FANOUT * FANOUT from WIDE_MIN_BYTES: a merge lists the largest
 * batches first, keeping one run for what it rewrites unless it lists them
 * all; when they do not all fit and what fits holds no more than half the
 * bytes, it rewrites them all into one run.  With FANOUT batches per
 * merge, tiers go in threes: a merge lists FANOUT batches of one run, the
 * next one up lists FANOUT batches of FANOUT runs, and the one above
 * rewrites FANOUT^3 runs at once.  Each update is rewritten about a third
 * as often as when every merge rewrites (measured: 1.06 rewrites per row
 * over 3 minutes of unique keys, 1.71 with at most FANOUT^2 runs per
 * merge), for reads that merge up to FANOUT^2 times as many runs.  A merge
 * holds a block of each run in memory (see part_reader.c), not a part, so
 * FANOUT^3 runs take about 100MB.  A merge that took a few more large
 * batches than FANOUT (they piled up during a longer merge) lists what
 * fits in one run fewer than it may hold and rewrites the rest into one
 * run.
 * compact() always rewrites every batch into one run.
 *
 * The merge is swapped in by compare-and-swap only if the run is still in
 * the state.  A batch is known by its lower bound and its parts, never by
 * its upper: appends only add batches after the run, and an empty append
 * only widens the last batch's upper, so the merge survives both.  The
 * merged batch takes the lower and upper the run has at the CaS.  The
 * replaced parts' blob rows are deleted in the same transaction.
 *
 * compact() reads the state and the parts with a snapshot of its
 * transaction: a fresh one per attempt under READ COMMITTED, the
 * transaction's snapshot under REPEATABLE READ and SERIALIZABLE.  There,
 * if the state has changed since that snapshot was taken, the CaS could
 * only fail, so compact() raises 40001 (serialization_failure) at once, and
 * a concurrent change that commits during the merge makes the CaS raise it:
 * the caller retries the transaction.  While compact() runs, it holds the
 * shard's compaction lock (an advisory lock of our own space) in share
 * mode, and a background compactor merges a shard only if it gets that
 * lock at once, in row exclusive mode, until its transaction ends: so the
 * compactors cannot take runs away from compact() over and over while
 * writers keep appending.  Row exclusive mode conflicts with share mode but
 * not with itself: compactors merge disjoint runs of one shard at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/settings.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/progress.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "shard/stats.h"
#include "store/store.h"

/*
 * Set by the module (to the sink's ps_sink_state_row_released): the sink's
 * intervals waiting for a state row a merge held are tried again as soon
 * as the merge's transaction ends.
 */
PsMergeEndedHook ps_merge_ended_hook = NULL;

/* Tells the hook, if any, that a compactor's merge of shard has ended. */
void
ps_compact_merge_ended(const char *shard)
{
	if (ps_merge_ended_hook)
		ps_merge_ended_hook(shard);
}

/* Batches of one tier that are merged together */
#define FANOUT			8
/*
 * Lowest tier whose merges take long enough (a run of 8 tier-2 batches is
 * tens of MB) for a shard's new batches to pile up meanwhile
 */
#define LONG_MERGE_TIER	2
/* Batches below this many encoded bytes are all in tier 0 */
#define TIER0_BYTES		(64 * 1024)
/*
 * Batches of this many encoded bytes or more may be listed, not rewritten:
 * those of tier 1 and above, so that tiers go in threes from the first
 */
#define LIST_MIN_BYTES	TIER0_BYTES
/*
 * A merged batch of this many encoded bytes or more (tier 3 and above) may
 * hold FANOUT * FANOUT runs, not FANOUT
 */
#define WIDE_MIN_BYTES	(TIER0_BYTES * FANOUT * FANOUT)
/* Updates merged between checks that the shard was not dropped */
#define DROP_CHECK_EVERY	8192
/* field4 of the advisory lock tags of compaction locks (users' are 1 and 2) */
#define COMPACTION_LOCK_SPACE	0x7073

/*
 * Tier of a batch of `size` encoded bytes: 0 below TIER0_BYTES, then one
 * more per FANOUT times larger.
 */
static int
size_tier(uint64 size)
{
	int			tier = 0;

	for (uint64 bound = TIER0_BYTES; size >= bound && tier < 32; bound *= FANOUT)
		tier++;
	return tier;
}

/* The encoded bytes of each of state's batches, in a new array. */
static uint64 *
batch_sizes(const PsState *state)
{
	uint64	   *sizes = palloc(sizeof(uint64) * Max(state->nbatches, 1));

	for (int i = 0; i < state->nbatches; i++)
		sizes[i] = ps_batch_encoded_bytes(&state->batches[i]);
	return sizes;
}

/*
 * Picks the run [from, to) of min(FANOUT, n) adjacent batches of the
 * fewest encoded bytes, of n batches of sizes; false if n < 2.
 */
static bool
choose_cheapest_window(const uint64 *sizes, int n, int *from, int *to)
{
	int			width = Min(FANOUT, n);
	uint64		best = PG_UINT64_MAX;

	if (width < 2)
		return false;
	for (int i = 0; i + width <= n; i++)
	{
		uint64		size = 0;

		for (int j = i; j < i + width; j++)
			size += sizes[j];
		if (size < best)
		{
			best = size;
			*from = i;
			*to = i + width;
		}
	}
	return true;
}

/*
 * Picks the run [from, to) to merge of n batches of sizes, size-tiered:
 * for the lowest tier t that has at least FANOUT batches in the run of
 * batches of tier t or below at the end of the list, that whole run.
 * Counting only tier t keeps one large batch from being rewritten together
 * with every few small ones: each merge moves updates up about one tier, so
 * after n appends a shard holds O(FANOUT log n) batches and each update is
 * rewritten O(log n / log FANOUT) times.  With leave_tail, a run of tier
 * LONG_MERGE_TIER or above ends at its last batch of tier t: the smaller
 * batches after it are left to another compactor, which merges them with
 * the ones appended during the long merge.
 */
static bool
choose_tiered(const uint64 *sizes, int n, bool leave_tail, int *from, int *to)
{
	int			max_tier = 0;
	int		   *tiers;
	bool		found = false;

	if (n < FANOUT)
		return false;
	tiers = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		tiers[i] = size_tier(sizes[i]);
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
			while (leave_tail && t >= LONG_MERGE_TIER && tiers[*to - 1] < t)
				(*to)--;
			found = true;
		}
	}
	pfree(tiers);
	return found;
}

/*
 * Picks the run [from, to) the compactor merges next of n batches of
 * sizes: the size-tiered choice, or, once the shard holds
 * persist_sink.slowdown_batches (where writers are slowed, then stalled) or
 * stop_batches, the cheapest FANOUT adjacent batches: tiers in order can
 * still hold FANOUT - 1 batches each, and compaction must always be able to
 * bring the count back down.  Only the batches from `start` on are looked
 * at (those after another compactor's merge: the newest, small ones, whose
 * merges are short, while the batches before wait for that merge to end).
 * leave_tail as for choose_tiered.
 */
static bool
choose_run(const uint64 *sizes, int start, bool leave_tail, int n,
		   int *from, int *to)
{
	if (choose_tiered(&sizes[start], n - start, leave_tail, from, to) ||
		(n >= Min(ps_slowdown_batches, ps_stop_batches) &&
		 choose_cheapest_window(&sizes[start], n - start, from, to)))
	{
		*from += start;
		*to += start;
		return true;
	}
	return false;
}

/*
 * Picks the run [from, to) of state the compactor merges next (choose_run),
 * among its batches from `first` on; with leave_tail, a long merge leaves
 * the small batches at the end to another compactor.
 */
bool
ps_compact_choose(const PsState *state, int first, bool leave_tail,
				  int *from, int *to)
{
	uint64	   *sizes = batch_sizes(state);
	bool		found = choose_run(sizes, first, leave_tail, state->nbatches,
								   from, to);

	pfree(sizes);
	return found;
}

/*
 * The shard's compaction debt: how many batches fewer it would hold once
 * the compactor caught up, merging run after run as ps_compact_choose
 * picks them until it picks none, each merged batch counted as large as
 * the batches it replaced (consolidation can only make it smaller).  Once
 * caught up, a shard holds fewer than persist_sink.slowdown_batches and
 * stop_batches (or one batch), with its tiers in order.  Reads the
 * settings; no lock.
 */
int
ps_compact_debt(const PsState *state)
{
	uint64	   *sizes = batch_sizes(state);
	int			n = state->nbatches;
	int			from;
	int			to;

	while (choose_run(sizes, 0, false, n, &from, &to))
	{
		for (int i = from + 1; i < to; i++)
			sizes[from] += sizes[i];
		memmove(&sizes[from + 1], &sizes[to], sizeof(uint64) * (n - to));
		n -= to - from - 1;
	}
	pfree(sizes);
	return state->nbatches - n;
}

/*
 * How a merge makes its batch from batches [from, to) of a state: the
 * batches it lists as they are (listed[i - from]), and the ones it
 * rewrites into one new run, with their updates.
 */
typedef struct MergePlan
{
	int			from;
	int			to;
	bool	   *listed;
	PsState		rewritten;		/* the state with only the rewritten batches */
	int64		rewritten_updates;
} MergePlan;

/* A batch a merge may list: its position, encoded bytes and runs */
typedef struct ListCandidate
{
	int			index;
	uint64		bytes;
	int			runs;
} ListCandidate;

/* qsort comparator: larger candidates first, then older ones. */
static int
candidate_cmp(const void *a, const void *b)
{
	const ListCandidate *ca = a;
	const ListCandidate *cb = b;

	if (ca->bytes != cb->bytes)
		return ca->bytes > cb->bytes ? -1 : 1;
	return ca->index - cb->index;
}

/*
 * Marks in plan->listed the batches of [from, to) of state the merge
 * lists: of those that may be listed (LIST_MIN_BYTES or more, not inline),
 * largest first, each whose runs still fit with those taken before.  They
 * fit in FANOUT runs (FANOUT * FANOUT if the merged batch will be of
 * WIDE_MIN_BYTES or more) if the merge lists every batch; else one run is
 * kept for the batches it rewrites, so that a merge above can list the
 * merged batch among others of its size.  If some do not fit, the
 * listing is kept only if it holds more bytes than are left to rewrite: a
 * merge that would rewrite most of its bytes anyway rewrites them all into
 * one run, which the next merge above may list.
 */
static void
choose_listed(const PsState *state, MergePlan *plan)
{
	int			n = plan->to - plan->from;
	ListCandidate *c = palloc(sizeof(ListCandidate) * n);
	int			nc = 0;
	int			runs = 0;
	int			candidate_runs = 0;
	int			max_runs;
	int			room;
	bool		all_fit = true;
	uint64		listed_bytes = 0;
	uint64		total_bytes = 0;

	for (int i = plan->from; i < plan->to; i++)
	{
		const PsBatch *b = &state->batches[i];
		uint64		bytes = ps_batch_encoded_bytes(b);

		total_bytes += bytes;
		if (bytes < LIST_MIN_BYTES || ps_batch_is_inline(b))
			continue;
		c[nc].index = i;
		c[nc].bytes = bytes;
		c[nc].runs = ps_batch_runs(b);
		candidate_runs += c[nc].runs;
		nc++;
	}
	max_runs = total_bytes >= WIDE_MIN_BYTES ? FANOUT * FANOUT : FANOUT;
	room = (nc == n && candidate_runs <= max_runs) ? max_runs : max_runs - 1;
	qsort(c, nc, sizeof(ListCandidate), candidate_cmp);
	for (int k = 0; k < nc; k++)
	{
		if (runs + c[k].runs > room)
		{
			all_fit = false;
			continue;
		}
		plan->listed[c[k].index - plan->from] = true;
		runs += c[k].runs;
		listed_bytes += c[k].bytes;
	}
	if (!all_fit && listed_bytes <= total_bytes - listed_bytes)
		memset(plan->listed, 0, sizeof(bool) * n);
	pfree(c);
}

/*
 * Plans the merge of batches [from, to) of state: with may_list, the
 * batches choose_listed picks are listed; every other batch is rewritten.
 */
static void
plan_merge(const PsState *state, int from, int to, bool may_list,
		   MergePlan *plan)
{
	plan->from = from;
	plan->to = to;
	plan->listed = palloc0(sizeof(bool) * (to - from));
	if (may_list)
		choose_listed(state, plan);

	plan->rewritten = *state;
	plan->rewritten.batches = palloc(sizeof(PsBatch) * (to - from));
	plan->rewritten.nbatches = 0;
	plan->rewritten_updates = 0;
	for (int i = from; i < to; i++)
		if (!plan->listed[i - from])
		{
			plan->rewritten.batches[plan->rewritten.nbatches++] = state->batches[i];
			plan->rewritten_updates += ps_batch_updates(&state->batches[i]);
		}
}

/*
 * Writes the merge of the batches plan rewrites as one batch, out.  Sums
 * that leave bigint are split into several updates.  Blocks that overlap
 * no other part's updates are handed on whole, not decoded into updates
 * and encoded again (see read.c).  Reports its progress as it goes.
 */
static void
rewrite_run(const char *shard, const MergePlan *plan, PsBatch *out)
{
	PsMerge    *m;
	PsBatchWriter w;
	PsUpdate	u;
	PsMergeBlock block;
	uint64		merged = 0;
	uint64		checked = 0;
	uint64		whole_blocks = 0;
	uint64		whole_updates = 0;
	uint64		undecoded_blocks = 0;

	m = ps_merge_begin(shard, &plan->rewritten, PG_INT64_MIN, PG_INT64_MAX, true);
	ps_merge_split_overflow(m);
	ps_merge_hand_on_blocks(m);
	ps_batch_writer_init(&w, shard, plan->rewritten.blob_store, true);
	while (ps_merge_next_or_block(m, plan->rewritten.since, &u, &block))
	{
		/* a run of whole blocks does not pass through the merge's own checks */
		CHECK_FOR_INTERRUPTS();
		merged += block.data ? block.nupdates : 1;
		if (merged - checked >= DROP_CHECK_EVERY)
		{
			ps_compaction_check_dropped(shard);
			checked = merged;
		}
		if (block.data)
		{
			ps_batch_writer_add_block(&w, block.data, block.len, &block.first,
									  &block.last);
			whole_blocks++;
			whole_updates += block.nupdates;
			undecoded_blocks += block.undecoded ? 1 : 0;
		}
		else
			ps_batch_writer_add(&w, &u);
		ps_progress_update(ps_merge_updates_read(m),
						   w.counts.blob_bytes + w.pending_bytes);
	}
	ps_batch_writer_finish(&w, out);
	ps_merge_end(m);
	ereport(DEBUG1,
			(errmsg_internal("merge of shard \"%s\" wrote %llu updates, %llu of them in %llu blocks handed on whole, %llu of those never decompressed",
							 shard, (unsigned long long) merged,
							 (unsigned long long) whole_updates,
							 (unsigned long long) whole_blocks,
							 (unsigned long long) undecoded_blocks)));
}

/*
 * Makes the batch a plan merges batches [from, to) of state into: the
 * parts of the listed batches, in order (those of a single_time batch take
 * its time as their own), then those of rewritten (the new run, if any
 * batch is rewritten).  Its lower and upper are set when it is swapped in;
 * its since is the lowest of what it holds.
 */
static void
assemble_batch(const PsState *state, const MergePlan *plan,
			   const PsBatch *rewritten, PsBatch *out)
{
	int			nparts = rewritten->nparts;
	int			n = 0;

	out->since = plan->rewritten.nbatches > 0 ? state->since : PG_INT64_MAX;
	for (int i = plan->from; i < plan->to; i++)
		if (plan->listed[i - plan->from])
		{
			nparts += state->batches[i].nparts;
			out->since = Min(out->since, state->batches[i].since);
		}
	out->parts = palloc(sizeof(PsPart) * Max(nparts, 1));
	for (int i = plan->from; i < plan->to; i++)
		if (plan->listed[i - plan->from])
		{
			const PsBatch *b = &state->batches[i];

			memcpy(&out->parts[n], b->parts, sizeof(PsPart) * b->nparts);
			for (int j = 0; b->single_time && j < b->nparts; j++)
			{
				out->parts[n + j].has_time = true;
				out->parts[n + j].time = b->time;
			}
			n += b->nparts;
		}
	if (rewritten->nparts > 0)
		memcpy(&out->parts[n], rewritten->parts,
			   sizeof(PsPart) * rewritten->nparts);
	out->nparts = nparts;
	out->single_time = false;
	out->time = 0;
	ps_batch_note_parts(out);
}

/*
 * True if two batch descriptions are the same batch: the same lower bound
 * and the same parts.  The upper is not compared: an empty append widens
 * the last batch's upper without changing what it holds.
 */
static bool
same_batch(const PsBatch *a, const PsBatch *b)
{
	return a->lower == b->lower && a->since == b->since &&
		a->single_time == b->single_time && a->time == b->time &&
		ps_batch_same_parts(a, b);
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

/* Deletes the blob rows of a batch's parts. */
static void
delete_parts(const PsBatch *batch)
{
	for (int j = 0; j < batch->nparts; j++)
		if (batch->parts[j].blob_key)
			ps_blob_delete(batch->parts[j].blob_key);
}

/* Deletes the blob rows of the batches plan rewrote. */
static void
delete_rewritten(const MergePlan *plan)
{
	for (int i = 0; i < plan->rewritten.nbatches; i++)
		delete_parts(&plan->rewritten.batches[i]);
}

/*
 * Lists the blob keys of the batches plan rewrote as garbage of the state
 * seqno of shard (the merge's), for a compactor to delete once the merge
 * has committed (store/garbage.c).  False if they have none.
 */
static bool
list_rewritten_as_garbage(const char *shard, int64 seqno, const MergePlan *plan)
{
	int			max = 0;
	int			n = 0;
	const char **keys;

	for (int i = 0; i < plan->rewritten.nbatches; i++)
		max += plan->rewritten.batches[i].nparts;
	keys = palloc(sizeof(char *) * Max(max, 1));
	for (int i = 0; i < plan->rewritten.nbatches; i++)
	{
		const PsBatch *b = &plan->rewritten.batches[i];

		for (int j = 0; j < b->nparts; j++)
			if (b->parts[j].blob_key)
				keys[n++] = b->parts[j].blob_key;
	}
	ps_garbage_put(shard, seqno, keys, n);
	pfree(keys);
	return n > 0;
}

/*
 * Replaces cur's batches [k, k + len) by merged, in place; merged takes
 * their lower and (maybe widened) upper.
 */
static void
splice_run(PsState *cur, int k, int len, PsBatch *merged)
{
	PsBatch    *b = palloc(sizeof(PsBatch) * (cur->nbatches - len + 1));
	int			n = 0;

	merged->lower = cur->batches[k].lower;
	merged->upper = cur->batches[k + len - 1].upper;
	for (int i = 0; i < k; i++)
		b[n++] = cur->batches[i];
	b[n++] = *merged;
	for (int i = k + len; i < cur->nbatches; i++)
		b[n++] = cur->batches[i];
	cur->batches = b;
	cur->nbatches = n;
}

/*
 * Counts a merge that was swapped in, and the updates it read (those of
 * the batches it rewrote), when the transaction commits.
 */
static void
count_merge(const char *shard, const MergePlan *plan)
{
	PsCounters	delta = {0};

	delta.compactions = 1;
	delta.compacted_updates = plan->rewritten_updates;
	ps_stats_add_at_commit(shard, &delta);
}

/*
 * Makes the batch plan merges batches [from, to) of state into: rewrites
 * the batches it does not list into one run, written as blob rows (into
 * *rewritten), and lists the others' parts with it.  Reports the swap
 * phase once written.
 */
static void
make_merged_batch(const char *shard, const PsState *state,
				  const MergePlan *plan, PsBatch *rewritten, PsBatch *merged)
{
	memset(rewritten, 0, sizeof(PsBatch));
	if (plan->rewritten.nbatches > 0)
		rewrite_run(shard, plan, rewritten);
	assemble_batch(state, plan, rewritten, merged);
	ps_progress_set_phase(PS_PROGRESS_SWAPPING, plan->rewritten_updates,
						  ps_batch_encoded_bytes(rewritten));
}

/*
 * Merges batches [from, to) of state as plan says and swaps the result in
 * by CaS, retrying while appends move the seqno; the blob rows of the
 * rewritten batches' parts are then deleted in the same transaction, or,
 * if deferred is not NULL, listed as garbage for after the commit (the
 * state row stays held from the CaS to the commit; *deferred says whether
 * there was any), and the merge is counted in the stats once it commits.  The state must have
 * been read with the active snapshot, which the merge reads the parts
 * with: a concurrent compaction that deletes them cannot take them away
 * mid-merge.  The state is read again for each CaS through the
 * transaction's snapshot (a new one per statement under READ COMMITTED).
 * Locks are taken in the order every writer uses: the consensus row, then
 * blob rows.  Returns false, with the new run's parts deleted again, if the
 * run is no longer in the state, or if the CaS failed under a transaction
 * snapshot (a concurrent change normally raises 40001 there first).
 */
static bool
merge_and_swap(const char *shard, const PsState *state, const MergePlan *plan,
			   bool *deferred)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "persist_sink compaction CaS",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old;
	PsBatch		rewritten;
	PsBatch		merged = {0};
	bool		swapped = false;
	int64		seqno = 0;

	make_merged_batch(shard, state, plan, &rewritten, &merged);
	old = MemoryContextSwitchTo(cxt);
	for (;;)
	{
		PsState		cur;
		PsState		next;
		int			k;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(cxt);
		ps_consensus_read_or_error(shard, &cur, cxt, false);
		k = find_run(&cur, state, plan->from, plan->to);
		if (k < 0)
			break;
		next = cur;
		splice_run(&next, k, plan->to - plan->from, &merged);
		swapped = ps_consensus_cas(shard, &cur, &next, NULL);
		if (swapped)
		{
			seqno = next.seqno;
			ps_debt_publish_at_commit(shard, next.seqno, next.nbatches);
		}
		/* under a transaction snapshot, the same CaS would fail again */
		if (swapped || IsolationUsesXactSnapshot())
			break;
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	if (!swapped)
	{
		delete_parts(&rewritten);
		return false;
	}
	/* objects cannot be deleted in a transaction: they wait for the collector */
	if (deferred)
		*deferred = list_rewritten_as_garbage(shard, seqno, plan);
	else if (state->blob_store && list_rewritten_as_garbage(shard, seqno, plan))
		ps_compaction_request_at_commit(shard, true);	/* the compactor collects it */
	else
		delete_rewritten(plan);
	count_merge(shard, plan);
	return true;
}

/*
 * Logs a merge its CaS swapped in, at DEBUG1: what it listed and rewrote.
 * Counts nothing unless the message would go to the log or the client.
 */
static void
log_merge(const char *shard, const PsState *state, const MergePlan *plan)
{
	int			listed_runs = 0;
	uint64		rewritten_bytes = 0;

	if (!message_level_is_interesting(DEBUG1))
		return;
	for (int i = plan->from; i < plan->to; i++)
		if (plan->listed[i - plan->from])
			listed_runs += ps_batch_runs(&state->batches[i]);
	for (int i = 0; i < plan->rewritten.nbatches; i++)
		rewritten_bytes += ps_batch_encoded_bytes(&plan->rewritten.batches[i]);
	ereport(DEBUG1,
			(errmsg_internal("persist_sink: merged batches %d to %d of %d of shard \"%s\": listed runs %d, rewritten batches %d, updates " INT64_FORMAT ", bytes " UINT64_FORMAT,
							 plan->from, plan->to - 1, state->nbatches, shard,
							 listed_runs, plan->rewritten.nbatches,
							 plan->rewritten_updates, rewritten_bytes)));
}

/*
 * Plans the merge of batches [from, to) of state (plan_merge) and does it
 * (merge_and_swap, deferring its deletes if deferred is not NULL), shown meanwhile in the
 * compaction_progress view as a merge of command's; the row goes when it
 * returns or raises an error.
 */
static bool
merge_and_swap_shown(const char *shard, const PsState *state, int from, int to,
					 bool may_list, PsProgressCommand command,
					 bool *deferred)
{
	volatile bool swapped = false;
	MergePlan	plan;

	plan_merge(state, from, to, may_list, &plan);
	ps_progress_begin(command, shard, to - from, plan.rewritten_updates);
	PG_TRY();
	{
		swapped = merge_and_swap(shard, state, &plan, deferred);
	}
	PG_FINALLY();
	{
		ps_progress_end();
	}
	PG_END_TRY();
	if (swapped)
		log_merge(shard, state, &plan);
	pfree(plan.listed);
	pfree(plan.rewritten.batches);
	return swapped;
}

/* The lock tag of a shard's compaction lock, in the current database. */
static void
compaction_locktag(LOCKTAG *tag, const char *shard)
{
	uint64		h = hash_bytes_extended((const unsigned char *) shard,
										(int) strlen(shard), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 COMPACTION_LOCK_SPACE);
}

/*
 * A background compactor's merge of batches [from, to) of state (read with
 * the active snapshot), as merge_and_swap.  It is done only if no compact()
 * of the shard runs or waits: the shard's compaction lock is taken at once
 * in row exclusive mode (shared with the other compactors) until the
 * transaction ends, or nothing is done and false returned.  The replaced
 * parts are left as garbage where the table for it exists (*left_garbage
 * set if there were any), for the caller to collect once it has committed.
 */
bool
ps_compact_range(const char *shard, const PsState *state, int from, int to,
				 bool *left_garbage)
{
	LOCKTAG		tag;

	*left_garbage = false;
	compaction_locktag(&tag, shard);
	if (LockAcquire(&tag, RowExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	return merge_and_swap_shown(shard, state, from, to, true,
								PS_PROGRESS_BACKGROUND,
								ps_sql_objects_have(PS_OBJ_GARBAGE) ? left_garbage : NULL);
}

/*
 * Takes the shard's compaction lock (tag) in share mode, so that the
 * background compactor starts no merge of the shard until compact()
 * releases it.  Under READ COMMITTED it waits for a merge of the compactor
 * to end; it only tries if this transaction already wrote the shard's state
 * (that merge may be waiting for this transaction's row lock), and under
 * REPEATABLE READ and SERIALIZABLE (a merge committed after the
 * transaction's snapshot makes compact() fail anyway).  True if taken.
 */
static bool
lock_for_compact(const char *shard, LOCKTAG *tag)
{
	bool		wait;

	wait = !IsolationUsesXactSnapshot() && !ps_consensus_held_here(shard);
	compaction_locktag(tag, shard);
	return LockAcquire(tag, ShareLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/* True if compacting state would change nothing. */
static bool
already_compact(const PsState *state)
{
	return state->nbatches == 0 ||
		(state->nbatches == 1 && state->batches[0].since == state->since &&
		 !state->batches[0].single_time &&
		 ps_batch_runs(&state->batches[0]) <= 1);
}

/* Raises 40001: the shard changed after the transaction's snapshot. */
static void
raise_changed(const char *shard)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access to shard \"%s\" due to a concurrent change",
					shard),
			 errdetail("The state of the shard changed after this transaction's snapshot was taken."),
			 errhint("Retry compact() in a new transaction.")));
}

/*
 * Under REPEATABLE READ or SERIALIZABLE: raises 40001 unless the shard's
 * latest committed state is the one the transaction's snapshot sees (a CaS
 * of that state could only fail).
 */
static void
check_snapshot_current(const char *shard, const PsState *state)
{
	PsState		latest;
	bool		found;

	PushActiveSnapshot(GetLatestSnapshot());
	found = ps_consensus_read(shard, &latest, CurrentMemoryContext, true);
	PopActiveSnapshot();
	if (!found || latest.seqno != state->seqno)
		raise_changed(shard);
}

/*
 * One attempt of compact(): reads the state with a snapshot of the
 * transaction (new under READ COMMITTED, the transaction's under
 * REPEATABLE READ and SERIALIZABLE, seeing this transaction's own writes),
 * merges every batch with it and swaps the merge in.  False if the run was
 * merged by someone else meanwhile.
 */
static bool
compact_attempt(const char *name)
{
	PsState		state;
	bool		done;

	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	ps_consensus_read_or_error(name, &state, CurrentMemoryContext, true);
	done = already_compact(&state);
	if (!done && IsolationUsesXactSnapshot())
		check_snapshot_current(name, &state);
	if (!done)
		done = merge_and_swap_shown(name, &state, 0, state.nbatches, false,
									PS_PROGRESS_COMPACT, NULL);
	PopActiveSnapshot();
	return done;
}

/*
 * compact(): merges every batch of the shard into one, now.  Batches
 * appended meanwhile stay after the merged one.  Under READ COMMITTED a
 * merge whose run another merge took is done again from the new state;
 * under REPEATABLE READ and SERIALIZABLE a concurrent change of the shard
 * raises 40001 instead (the snapshot cannot see the new state).  Holds the
 * shard's compaction lock while it runs (see lock_for_compact).
 */
void
ps_shard_compact(const char *name)
{
	LOCKTAG		tag;
	bool		locked = lock_for_compact(name, &tag);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (compact_attempt(name))
			break;
		if (IsolationUsesXactSnapshot())
			raise_changed(name);
	}
	if (locked)
		LockRelease(&tag, ShareLock, false);
	/* a merge of every part succeeded: the shard is not failing any more */
	ps_debt_compaction_succeeded(name);
}
