/*-------------------------------------------------------------------------
 *
 * state.h
 *	  Shard state and its versioned binary codec.
 *
 * The state of a shard is its seqno, upper, since, optional row type and
 * the list of batches that tile [0, upper).  It is stored, encoded, in the
 * shard's consensus row.  The codec is pure (see part.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_STATE_H
#define PS_STATE_H

#define PS_STATE_MAGIC		0x54535350	/* "PSST" little-endian */
#define PS_STATE_VERSION	1	/* a state whose parts are in the blob table */
#define PS_STATE_VERSION_STORE 2	/* one that names its blob store */
#define PS_DIFF_MAGIC		0x44535350	/* "PSSD" little-endian */
#define PS_DIFF_VERSION		1

/* Longest prefix of a part's first key kept as its lower bound */
#define PS_PART_LOWER_MAX	16

/* One part of a batch: a blob row, or encoded bytes kept inline */
typedef struct PsPart
{
	char	   *blob_key;		/* NULL for an inline part */
	char	   *inline_data;	/* encoded part, inline parts only */
	char		lower[PS_PART_LOWER_MAX];	/* a prefix of its first key: no
											 * update of it sorts lower */
	uint8		lower_len;
	bool		has_upper;		/* parts written before 0.11 have none */
	char		upper[PS_PART_LOWER_MAX];	/* a prefix of its last key: no
											 * update's key of it has a
											 * prefix that sorts higher */
	uint8		upper_len;
	uint64		encoded_size;
	uint64		raw_size;
	uint64		nupdates;
	int64		diff_sum;
	uint32		checksum;
	bool		positive;		/* every diff above 0, diff_sum exact (see
								 * PsPartInfo): diff_sum is the rows it adds
								 * to a snapshot */
	bool		distinct;		/* no (key, val) in two of its updates */
	bool		has_time;		/* every update is at time, whatever the
								 * part's own times say */
	int64		time;			/* has_time parts only */
} PsPart;

/*
 * The updates of [lower, upper), with times before since advanced.  A
 * single_time batch holds updates all at `time`: its parts' own times are
 * ignored, so the sink can choose the time at the CaS without encoding the
 * parts again.  A batch's parts are one sorted run, or several one after
 * the other (the compactor lists batches together without rewriting them,
 * see compact.c): readers merge parts, not batches, so either reads alike.
 * A part listed from a single_time batch keeps that batch's time as its
 * own (has_time): a batch of several times can list it unchanged.
 */
typedef struct PsBatch
{
	int64		lower;
	int64		upper;
	int64		since;
	bool		single_time;
	int64		time;			/* single_time batches only */
	int			nparts;
	PsPart	   *parts;
	bool		parts_ordered;	/* not stored, noted when decoded: each
								 * part's upper bound sorts below the next
								 * one's lower bound (a key can be in one
								 * part only, found by a binary search) */
	bool		parts_timed;	/* noted with parts_ordered: some part
								 * has_time */
} PsBatch;

typedef struct PsState
{
	int64		seqno;
	int64		upper;
	int64		since;
	char	   *row_type;		/* qualified type name, or NULL */
	char	   *blob_store;		/* where its parts are: an s3:// URL, or
								 * NULL for the blob table */
	int			nbatches;
	PsBatch    *batches;

	/*
	 * Where the store read the state from, not encoded: the seqno of the
	 * rollup it was rebuilt from and the bytes of the diffs applied since.
	 */
	int64		rollup_seqno;
	uint64		diff_bytes;
} PsState;

/* Sets a part's lower bound from its first key. */
static inline void
ps_part_set_lower(PsPart *part, const char *key, uint32 key_len)
{
	part->lower_len = (uint8) Min(key_len, PS_PART_LOWER_MAX);
	memcpy(part->lower, key, part->lower_len);
}

/* Sets a part's upper bound from its last key. */
static inline void
ps_part_set_upper(PsPart *part, const char *key, uint32 key_len)
{
	part->has_upper = true;
	part->upper_len = (uint8) Min(key_len, PS_PART_LOWER_MAX);
	memcpy(part->upper, key, part->upper_len);
}

/* Sets a part's lower and upper bounds from those of another. */
static inline void
ps_part_copy_bounds(PsPart *part, const PsPart *from)
{
	ps_part_set_lower(part, from->lower, from->lower_len);
	part->has_upper = from->has_upper;
	part->upper_len = from->upper_len;
	memcpy(part->upper, from->upper, from->upper_len);
}

extern char *ps_state_encode(const PsState *state, uint64 *len);
extern uint64 ps_state_encoded_size(const PsState *state);
extern bool ps_state_decode(const char *data, uint64 len, PsState *out,
							const char **errmsg);
extern void ps_state_copy(const PsState *src, PsState *dst);
extern void ps_batch_note_parts(PsBatch *batch);

/*
 * State diffs: what one compare-and-swap changed.  A diff takes the state
 * at seqno s to the state at s + 1: upper and since, and the batches
 * [prefix, prefix + removed) replaced by new ones, each given whole or as
 * an earlier batch's parts under new bounds (so widening a batch or
 * advancing its since costs a few bytes whatever its part count).
 */
extern char *ps_state_diff_encode(const PsState *from, const PsState *to,
								  uint64 *len);
extern bool ps_state_diff_apply(PsState *state, const char *data, uint64 len,
								const char **errmsg);
extern bool ps_batch_equal(const PsBatch *a, const PsBatch *b);
extern bool ps_batch_same_parts(const PsBatch *a, const PsBatch *b);

/* Derived figures */
extern uint64 ps_batch_updates(const PsBatch *batch);
extern uint64 ps_batch_encoded_bytes(const PsBatch *batch);
extern bool ps_batch_is_inline(const PsBatch *batch);
extern int	ps_batch_runs(const PsBatch *batch);
extern bool ps_part_ends_before(const PsPart *a, const PsPart *b);

#endif							/* PS_STATE_H */
