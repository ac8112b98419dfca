/*-------------------------------------------------------------------------
 *
 * update.c
 *	  Sorting and consolidating updates.  Pure code, also built outside the
 *	  server (unit tests, fuzzers).
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "port/pg_bswap.h"
#include "codec/diff_sum.h"
#include "codec/update.h"

/*
 * Compares two byte strings as memcmp, shorter first on a tie.  The common
 * length is compared 8 bytes at a time as big-endian integers, the rest by
 * memcmp: keys that share a prefix (a tenant, a table, one call's prefix)
 * are told apart without a call to memcmp.
 */
static inline int
bytes_cmp(const char *a, uint32 alen, const char *b, uint32 blen)
{
	uint32		len = Min(alen, blen);
	uint32		i = 0;
	int			c;

	for (; i + sizeof(uint64) <= len; i += sizeof(uint64))
	{
		uint64		x;
		uint64		y;

		memcpy(&x, a + i, sizeof(uint64));
		memcpy(&y, b + i, sizeof(uint64));
		if (x != y)
		{
			x = pg_ntoh64(x);
			y = pg_ntoh64(y);
			return (x > y) - (x < y);
		}
	}
	c = memcmp(a + i, b + i, len - i);
	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

/* Orders updates by (key, val); inline for the sort below. */
static inline int
cmp_kv(const PsUpdate *a, const PsUpdate *b)
{
	int			c = bytes_cmp(a->key, a->key_len, b->key, b->key_len);

	if (c != 0)
		return c;
	return bytes_cmp(a->val, a->val_len, b->val, b->val_len);
}

/* Orders updates by (key, val, time); inline for the sort below. */
static inline int
cmp_kvt(const PsUpdate *a, const PsUpdate *b)
{
	int			c = cmp_kv(a, b);

	if (c != 0)
		return c;
	return (a->time > b->time) - (a->time < b->time);
}

/* Orders byte strings as keys are ordered: memcmp, shorter first on a tie. */
int
ps_bytes_cmp(const char *a, uint32 alen, const char *b, uint32 blen)
{
	return bytes_cmp(a, alen, b, blen);
}

/* True if two of n sorted updates share a (key, val) (at two times). */
bool
ps_updates_repeat_keyval(const PsUpdate *updates, uint32 n)
{
	for (uint32 i = 1; i < n; i++)
		if (ps_update_same_keyval(&updates[i - 1], &updates[i]))
			return true;
	return false;
}

/* Orders updates by (key, val). */
int
ps_update_cmp_kv(const PsUpdate *a, const PsUpdate *b)
{
	return cmp_kv(a, b);
}

/* Orders updates by (key, val, time). */
int
ps_update_cmp_kvt(const PsUpdate *a, const PsUpdate *b)
{
	return cmp_kvt(a, b);
}

/* sort_updates(): a quicksort of PsUpdate with cmp_kvt inlined */
#define ST_SORT sort_updates
#define ST_ELEMENT_TYPE PsUpdate
#define ST_COMPARE(a, b) cmp_kvt(a, b)
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * An update as the abbreviated sort sees it: 8 bytes of its key after the
 * prefix every key of the sort shares, and where it is in the updates.
 */
typedef struct AbbrevUpdate
{
	uint64		abbrev;
	uint32		index;
} AbbrevUpdate;

/* Orders abbreviated updates: abbreviations, then the updates in full. */
static inline int
cmp_abbrev(const AbbrevUpdate *a, const AbbrevUpdate *b, const PsUpdate *updates)
{
	if (a->abbrev != b->abbrev)
		return a->abbrev < b->abbrev ? -1 : 1;
	return cmp_kvt(&updates[a->index], &updates[b->index]);
}

/* sort_abbrev(): a quicksort of AbbrevUpdate with cmp_abbrev inlined */
#define ST_SORT sort_abbrev
#define ST_ELEMENT_TYPE AbbrevUpdate
#define ST_COMPARE_ARG_TYPE const PsUpdate
#define ST_COMPARE(a, b, arg) cmp_abbrev(a, b, arg)
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/* Fewest updates worth sorting abbreviated */
#define ABBREV_SORT_MIN 64

/* Length of the prefix every key of updates shares (n > 0). */
static uint32
shared_key_prefix(const PsUpdate *updates, int n)
{
	const char *first = updates[0].key;
	uint32		len = updates[0].key_len;

	for (int i = 1; i < n && len > 0; i++)
	{
		const char *key = updates[i].key;
		uint32		common = 0;

		len = Min(len, updates[i].key_len);
		while (common + sizeof(uint64) <= len &&
			   memcmp(first + common, key + common, sizeof(uint64)) == 0)
			common += sizeof(uint64);
		while (common < len && first[common] == key[common])
			common++;
		len = common;
	}
	return len;
}

/* The 8 key bytes from offset as a big-endian integer, zero-padded. */
static inline uint64
key_abbrev(const PsUpdate *u, uint32 offset)
{
	if (u->key_len <= offset)
		return 0;
	return ps_key_prefix(u->key + offset, u->key_len - offset);
}

/*
 * Puts updates in the order of sorted: updates[i] becomes the update that
 * was at sorted[i].index.  Follows each cycle of the permutation, marking
 * the places it fills by setting their index to themselves.
 */
static void
permute_updates(PsUpdate *updates, AbbrevUpdate *sorted, int n)
{
	for (int start = 0; start < n; start++)
	{
		PsUpdate	held;
		int			to = start;

		if (sorted[start].index == (uint32) start)
			continue;
		held = updates[start];
		for (;;)
		{
			int			from = (int) sorted[to].index;

			sorted[to].index = (uint32) to;
			if (from == start)
			{
				updates[to] = held;
				break;
			}
			updates[to] = updates[from];
			to = from;
		}
	}
}

/*
 * Sorts updates by (key, val, time).  Many updates are sorted as small
 * (abbreviation, index) pairs, the abbreviation being the 8 key bytes
 * after the prefix all keys share (a tenant, a table, a call's own
 * prefix), so that most comparisons touch neither key nor val; equal
 * abbreviations fall back to comparing the updates.  Then the updates are
 * moved into that order, each once.
 */
void
ps_updates_sort(PsUpdate *updates, int n)
{
	AbbrevUpdate *abbrev;
	uint32		offset;

	if (n < ABBREV_SORT_MIN)
	{
		if (n > 1)
			sort_updates(updates, n);
		return;
	}
	offset = shared_key_prefix(updates, n);
	abbrev = palloc_extended(sizeof(AbbrevUpdate) * n, MCXT_ALLOC_HUGE);
	for (int i = 0; i < n; i++)
	{
		abbrev[i].abbrev = key_abbrev(&updates[i], offset);
		abbrev[i].index = (uint32) i;
	}
	sort_abbrev(abbrev, n, updates);
	permute_updates(updates, abbrev, n);
	pfree(abbrev);
}

/*
 * Sums the diffs of equal (key, val, time) in sorted updates and drops the
 * zeros, in place.  Returns false, leaving the array unspecified, if a sum
 * leaves bigint (codec/diff_sum.h: only the total counts).
 */
bool
ps_updates_consolidate(PsUpdate *updates, int *n)
{
	int			out = 0;
	int			i = 0;

	while (i < *n)
	{
		PsUpdate	cur = updates[i++];
		PsDiffSum	sum = ps_diff_sum_of(cur.diff);

		while (i < *n && ps_update_cmp_kvt(&cur, &updates[i]) == 0)
			ps_diff_sum_add(&sum, updates[i++].diff);
		if (!ps_diff_sum_fits(sum))
			return false;
		cur.diff = ps_diff_sum_value(sum);
		if (cur.diff != 0)
			updates[out++] = cur;
	}
	*n = out;
	return true;
}
