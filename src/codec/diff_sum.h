/*-------------------------------------------------------------------------
 *
 * diff_sum.h
 *	  Sums of diffs, and the one rule for a sum that leaves bigint.
 *
 * Every path sums the diffs of equal updates in 128 bits (PsDiffSum), so
 * only a total out of bigint's range counts, never the order its terms
 * come in.  What such a total does depends only on who sums:
 *
 *	- one write's own updates (append(), compare_and_append(), an INSERT or
 *	  COPY into a shard's table): the write is refused with 22003 before
 *	  anything of it is written (ps_raise_write_diff_overflow);
 *	- the small writes sharing a sink interval: the writes whose updates
 *	  would take a sum out of range are refused one by one, each caller
 *	  getting 22003 (ps_raise_write_diff_overflow), and the others are
 *	  written (sink/sink_shared.c): no writer fails for another's updates;
 *	- a merge (compaction): never fails; it keeps the total as pieces of
 *	  at most bigint's range at the same (key, val, time), which every
 *	  reader sums again (ps_merge_split_overflow in shard/read.c);
 *	- a read (snapshot, listen, read_next, a table's scan) and verify():
 *	  22003 naming the key and val (ps_raise_read_diff_overflow).
 *
 * Pure (no ereport), so the codecs' stand-alone tests can use it; the two
 * errors are raised by shard/diff_overflow.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_DIFF_SUM_H
#define PS_DIFF_SUM_H

#include "common/int128.h"

/* A sum of diffs, exact whatever the order of its terms */
typedef INT128 PsDiffSum;

/* A sum of one diff. */
static inline PsDiffSum
ps_diff_sum_of(int64 diff)
{
	return int64_to_int128(diff);
}

/* Adds diff to *sum. */
static inline void
ps_diff_sum_add(PsDiffSum *sum, int64 diff)
{
	int128_add_int64(sum, diff);
}

/* True if sum is within bigint's range. */
static inline bool
ps_diff_sum_fits(PsDiffSum sum)
{
	return int128_compare(sum, int64_to_int128(PG_INT64_MAX)) <= 0 &&
		int128_compare(sum, int64_to_int128(PG_INT64_MIN)) >= 0;
}

/* The value of a sum that fits. */
static inline int64
ps_diff_sum_value(PsDiffSum sum)
{
	Assert(ps_diff_sum_fits(sum));
	return int128_to_int64(sum);
}

#endif							/* PS_DIFF_SUM_H */
