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

#include "common/int128.h"
#include "port/pg_bswap.h"
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

/* Sorts updates by (key, val, time). */
void
ps_updates_sort(PsUpdate *updates, int n)
{
	if (n > 1)
		sort_updates(updates, n);
}

/*
 * Sums the diffs of equal (key, val, time) in sorted updates and drops the
 * zeros, in place.  Returns false, leaving the array unspecified, if a sum
 * overflows int64.  Sums are taken in 128 bits, so only a total out of range
 * fails, whatever the order of the updates.
 */
bool
ps_updates_consolidate(PsUpdate *updates, int *n)
{
	int			out = 0;
	int			i = 0;

	while (i < *n)
	{
		PsUpdate	cur = updates[i++];
		INT128		sum = int64_to_int128(cur.diff);

		while (i < *n && ps_update_cmp_kvt(&cur, &updates[i]) == 0)
			int128_add_int64(&sum, updates[i++].diff);
		if (int128_compare(sum, int64_to_int128(PG_INT64_MAX)) > 0 ||
			int128_compare(sum, int64_to_int128(PG_INT64_MIN)) < 0)
			return false;
		cur.diff = int128_to_int64(sum);
		if (cur.diff != 0)
			updates[out++] = cur;
	}
	*n = out;
	return true;
}
