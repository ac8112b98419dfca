/*-------------------------------------------------------------------------
 *
 * read.h
 *	  K-way merge of a shard's parts in (key, val, time) order.
 *
 * Memory is bounded by the blocks being merged (each part is read a block
 * at a time, when the merge first needs it, and each block freed once it
 * is exhausted and no update returned still points into it), never by the
 * size of the shard or of its parts.  Must be used between SPI_connect and
 * SPI_finish (unless ps_merge_connect_spi), with an active snapshot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_READ_H
#define PS_READ_H

#include "lib/stringinfo.h"
#include "codec/part.h"
#include "codec/state.h"

typedef struct PsMerge PsMerge;

/* The keys a merge reads (ps_merge_begin_keys); an unset bound is open */
typedef struct PsKeyRange
{
	bool		has_lower;
	bool		lower_inclusive;
	const char *lower;
	uint32		lower_len;
	bool		has_upper;
	bool		upper_inclusive;
	const char *upper;
	uint32		upper_len;
} PsKeyRange;

/* True if key sorts before every key of range. */
static inline bool
ps_key_before_range(const PsKeyRange *range, const char *key, uint32 key_len)
{
	int			c;

	if (!range->has_lower)
		return false;
	c = ps_bytes_cmp(key, key_len, range->lower, range->lower_len);
	return c < 0 || (c == 0 && !range->lower_inclusive);
}

/* True if key sorts after every key of range. */
static inline bool
ps_key_past_range(const PsKeyRange *range, const char *key, uint32 key_len)
{
	int			c;

	if (!range->has_upper)
		return false;
	c = ps_bytes_cmp(key, key_len, range->upper, range->upper_len);
	return c > 0 || (c == 0 && !range->upper_inclusive);
}

/* True if range is one key: its key filters can tell where it is not. */
static inline bool
ps_key_range_is_one_key(const PsKeyRange *range)
{
	return range->has_lower && range->has_upper &&
		range->lower_inclusive && range->upper_inclusive &&
		ps_bytes_cmp(range->lower, range->lower_len,
					 range->upper, range->upper_len) == 0;
}

/* What lookups did with the blocks they met (EXPLAIN ANALYZE) */
typedef struct PsLookupBlocks
{
	uint64		decoded;		/* fetched and decoded */
	uint64		from_cache;		/* their updates taken from the block cache */
	uint64		passed;			/* fetched and checked, their bounds before
								 * the keys: not decoded */
	uint64		filtered;		/* their key filter without the key: not
								 * decoded (fetched unless known) */
} PsLookupBlocks;

/* A part being read a block at a time (part_reader.c) */
typedef struct PsPartReader
{
	const char *shard;
	const PsPart *part;
	struct PsBlobRef *blob;		/* a blob part's rows, none read yet */
	uint64		offset;			/* of the next block */
	char		next_header[PS_PART_HEADER_SIZE];	/* its header, once read */
	bool		have_header;	/* next_header holds it */
	PsPartInfo	seen;			/* what the blocks read so far add up to */
	bool		keep_block;		/* keep the encoded bytes of the last block */
	bool		leave_bounded;	/* and leave bounded blocks undecoded */
	const char *block;			/* they, when kept */
	uint64		block_len;
	uint64		block_raw;		/* their raw (column) size */
	uint64		block_nupdates;
	void	   *block_free;		/* what holds them, if it must be freed */
	bool		undecoded;		/* the last block is bounded, left undecoded */
	PsUpdate	first;			/* its first and last update, if it has any:
								 * from its bounds (no diff) or decoded */
	PsUpdate	last;
	StringInfoData last_copy;	/* once a block had updates, the key and
								 * val of the last of them (data NULL
								 * before) */
	PsUpdate	last_before;	/* and it, pointing into last_copy */
	const PsKeyRange *keys;		/* a lookup's keys (ps_part_reader_open_keys),
								 * else NULL */
	bool		read_only;		/* a lookup's part is opened when first read */
	bool		sought;			/* a lookup found where to start */
	bool		partial;		/* blocks were skipped: the part is not
								 * checked as a whole */
	int			cached;			/* blocks it put in the block cache */
	bool		key_absent;		/* a key filter said the rest of the part
								 * does not hold the lookup's one key */
	PsLookupBlocks blocks;		/* what a lookup did with the blocks it met */
} PsPartReader;

extern void ps_part_reader_open(PsPartReader *reader, const char *shard,
								const PsPart *part, bool read_only);
extern void ps_part_reader_open_keys(PsPartReader *reader, const char *shard,
									 const PsPart *part, bool read_only,
									 const PsKeyRange *keys);
extern bool ps_part_reader_next(PsPartReader *reader, PsDecodedPart *block);
extern void ps_part_reader_decode(PsPartReader *reader, PsDecodedPart *block);
extern void ps_part_reader_close(PsPartReader *reader);
extern char *ps_part_length_problem(const char *shard, const PsPart *part,
									uint64 len);

/* A whole block a merge hands on (ps_merge_next_or_block) */
typedef struct PsMergeBlock
{
	char	   *data;			/* its encoded bytes, valid until the next call */
	uint64		len;
	uint64		nupdates;
	PsUpdate	first;			/* its first update; bytes valid as data's */
	PsUpdate	last;			/* its last update; the same */
	bool		undecoded;		/* it was never decompressed (bounded) */
} PsMergeBlock;

/* What a merge's key range saved: parts never opened, parts left early */
typedef struct PsMergeParts
{
	uint64		skipped;		/* no key of them could be in the range */
	uint64		opened;
	uint64		cut_short;		/* opened, left once past the range */
	PsLookupBlocks blocks;		/* of the parts opened */
} PsMergeParts;

/* key_splits.c: ranges of keys that parallel readers share */
#define PS_KEY_SPLITS_MAX	64
extern int	ps_key_splits(const PsState *state, int64 min_time, int64 max_time,
						  char ***cuts, uint32 **lens);
extern bool ps_key_split_range(PsKeyRange *range, int index, int ncuts,
							   char **cuts, const uint32 *lens);

extern PsMerge *ps_merge_begin(const char *shard, const PsState *state,
							   int64 min_time, int64 max_time, bool read_only);
extern PsMerge *ps_merge_begin_keys(const char *shard, const PsState *state,
									int64 min_time, int64 max_time,
									bool read_only, const PsKeyRange *range);
extern void ps_merge_connect_spi(PsMerge *merge);
extern PsMergeParts ps_merge_parts(const PsMerge *merge);
extern void ps_merge_parts_add(PsMergeParts *sum, const PsMergeParts *parts);
extern bool ps_merge_next(PsMerge *merge, PsUpdate *out);
extern bool ps_merge_next_consolidated(PsMerge *merge, bool by_time,
									   int64 time_floor, PsUpdate *out);
extern void ps_merge_hand_on_blocks(PsMerge *merge);
extern bool ps_merge_next_or_block(PsMerge *merge, int64 time_floor,
								   PsUpdate *out, PsMergeBlock *block);
extern void ps_merge_split_overflow(PsMerge *merge);
extern uint64 ps_merge_updates_read(const PsMerge *merge);
extern void ps_merge_end(PsMerge *merge);

extern int64 ps_snapshot_as_of(const char *shard, const PsState *state,
							   bool as_of_null, int64 as_of);
extern bool ps_listen_window(const char *shard, const PsState *state,
							 int64 as_of, bool until_null, int64 until,
							 int64 *min_time, int64 *max_time,
							 int64 *time_floor);
extern char *ps_part_problem(const char *shard, const PsPart *part,
							 bool read_only, PsDecodedPart *out);

/* diff_overflow.c: the errors of the rule in codec/diff_sum.h */
extern char *ps_bytes_for_message(const char *data, uint32 len);
extern void ps_raise_write_diff_overflow(const char *shard, bool in_interval);
extern void ps_raise_read_diff_overflow(const char *shard, const char *key, uint32 key_len,
										const char *val, uint32 val_len, int64 time,
										bool by_time);

#endif							/* PS_READ_H */
