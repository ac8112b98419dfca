/*-------------------------------------------------------------------------
 *
 * diff_overflow.c
 *	  The errors of a sum of diffs that leaves bigint, as the rule in
 *	  codec/diff_sum.h has them (a write refused, or a read that cannot
 *	  return its sum), and how they and verify() show a key or val.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "shard/read.h"

/*
 * Bytes as in a message: "\x" and up to 32 bytes in hex, then "..." and
 * the length when there are more.
 */
char *
ps_bytes_for_message(const char *data, uint32 len)
{
	StringInfoData buf;
	uint32		shown = Min(len, 32);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "\\x");
	for (uint32 i = 0; i < shown; i++)
		appendStringInfo(&buf, "%02x", (unsigned char) data[i]);
	if (shown < len)
		appendStringInfo(&buf, "... (%u bytes)", len);
	return buf.data;
}

/*
 * Raises 22003 for a write refused because its updates (in_interval: with
 * those of earlier writes of its sink interval) sum past bigint for some
 * (key, val, time); shard may be NULL where the message need not name it.
 */
void
ps_raise_write_diff_overflow(const char *shard, bool in_interval)
{
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 shard ?
			 errmsg("sum of diffs out of range for type bigint in shard \"%s\"", shard) :
			 errmsg("sum of diffs out of range for type bigint"),
			 in_interval ?
			 errdetail("Updates of this write and of earlier writes of the same interval with the same key and val add up past the range of bigint; nothing of this write was appended.") :
			 errdetail("Updates with the same key, val and time add up past the range of bigint.")));
}

/*
 * Raises 22003 for a read whose sum for key and val leaves bigint: at time
 * (by_time), or up to it (summed over times).
 */
void
ps_raise_read_diff_overflow(const char *shard, const char *key, uint32 key_len,
							const char *val, uint32 val_len, int64 time, bool by_time)
{
	char	   *k = ps_bytes_for_message(key, key_len);
	char	   *v = ps_bytes_for_message(val, val_len);

	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("sum of diffs out of range for type bigint in shard \"%s\"", shard),
			 by_time ?
			 errdetail("The diffs of key %s and val %s at time " INT64_FORMAT " add up past the range of bigint.",
					   k, v, time) :
			 errdetail("The diffs of key %s and val %s up to time " INT64_FORMAT " add up past the range of bigint.",
					   k, v, time)));
}
