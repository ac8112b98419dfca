/*-------------------------------------------------------------------------
 *
 * key_splits.c
 *	  Cutting a shard's keys into ranges that readers in parallel share.
 *
 * A merge that reads only a range of keys (ps_merge_begin_keys) returns
 * exactly the consolidated updates of those keys: equal keys never fall
 * in two ranges, so nothing that sums together is read apart.  So several
 * processes read one snapshot by taking ranges in turn.  The cuts are
 * parts' lower bounds (prefixes of their first keys), so that a range
 * opens few parts and most parts are read by one process: the distinct
 * lower bounds of the parts the window reads, in order, thinned to at most
 * PS_KEY_SPLITS_MAX - 1 cuts.  Every process that reads the same state
 * makes the same cuts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shard/read.h"

/* A part's lower bound, to sort */
typedef struct Bound
{
	const char *key;
	uint32		len;
} Bound;

/* qsort order of bounds: bytewise, shorter first on a tie. */
static int
bound_cmp(const void *a, const void *b)
{
	const Bound *x = (const Bound *) a;
	const Bound *y = (const Bound *) b;

	return ps_bytes_cmp(x->key, x->len, y->key, y->len);
}

/*
 * The cuts of the keys of state's parts that may hold times in [min_time,
 * max_time]: palloc'd copies of at most PS_KEY_SPLITS_MAX - 1 keys, in
 * ascending order, into *cuts (their lengths into *lens); returns how
 * many.  Range 0 is the keys below the first cut, range i those from cut
 * i - 1 up to (not including) cut i, the last those from the last cut on.
 */
int
ps_key_splits(const PsState *state, int64 min_time, int64 max_time,
			  char ***cuts, uint32 **lens)
{
	Bound	   *bounds;
	int			n = 0;
	int			distinct = 0;
	int			ncuts;
	int			total = 0;

	for (int i = 0; i < state->nbatches; i++)
		total += state->batches[i].nparts;
	bounds = palloc(sizeof(Bound) * Max(total, 1));
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		if (b->lower > max_time || b->upper <= min_time)
			continue;
		for (int j = 0; j < b->nparts; j++)
		{
			bounds[n].key = b->parts[j].lower;
			bounds[n++].len = b->parts[j].lower_len;
		}
	}
	qsort(bounds, n, sizeof(Bound), bound_cmp);
	/* distinct bounds, the lowest left out: nothing sorts below every part */
	for (int i = 1; i < n; i++)
		if (bound_cmp(&bounds[i], &bounds[distinct]) != 0)
			bounds[++distinct] = bounds[i];
	ncuts = Min(distinct, PS_KEY_SPLITS_MAX - 1);
	*cuts = palloc(sizeof(char *) * Max(ncuts, 1));
	*lens = palloc(sizeof(uint32) * Max(ncuts, 1));
	for (int c = 0; c < ncuts; c++)
	{
		/* every distinct / ncuts-th bound, from the second on */
		const Bound *cut = &bounds[1 + (int) ((int64) c * distinct / ncuts)];

		(*cuts)[c] = palloc(cut->len + 1);
		memcpy((*cuts)[c], cut->key, cut->len);
		(*lens)[c] = cut->len;
	}
	pfree(bounds);
	return ncuts;
}

/*
 * Narrows range (keys the caller reads anyway) to range `index` of cuts
 * (see ps_key_splits); false if nothing of it is left.  The range points
 * into cuts.
 */
bool
ps_key_split_range(PsKeyRange *range, int index, int ncuts, char **cuts,
				   const uint32 *lens)
{
	if (index > 0)
	{
		const char *low = cuts[index - 1];
		uint32		len = lens[index - 1];
		int			c = range->has_lower ?
			ps_bytes_cmp(low, len, range->lower, range->lower_len) : 1;

		if (c > 0)
		{
			range->has_lower = true;
			range->lower_inclusive = true;
			range->lower = low;
			range->lower_len = len;
		}
	}
	if (index < ncuts)
	{
		const char *high = cuts[index];
		uint32		len = lens[index];
		int			c = range->has_upper ?
			ps_bytes_cmp(high, len, range->upper, range->upper_len) : -1;

		if (c <= 0)
		{
			range->has_upper = true;
			range->upper_inclusive = false;
			range->upper = high;
			range->upper_len = len;
		}
	}
	if (range->has_lower && range->has_upper)
	{
		int			c = ps_bytes_cmp(range->lower, range->lower_len,
									 range->upper, range->upper_len);

		return c < 0 || (c == 0 && range->lower_inclusive && range->upper_inclusive);
	}
	return true;
}
