/*-------------------------------------------------------------------------
 *
 * shard.h
 *	  The shard layer: encoding batches (batch_writer.c) and the state
 *	  machine (shard.c): create, drop, since, and appending batches by CaS.
 *	  Every function here but ps_shard_compare_and_append must be called
 *	  between SPI_connect and SPI_finish.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SHARD_H
#define PS_SHARD_H

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "codec/part.h"
#include "codec/state.h"
#include "codec/update.h"

/* What writing one batch cost */
typedef struct PsWriteCounts
{
	uint64		parts;
	uint64		blob_puts;
	uint64		blob_bytes;
	uint64		inline_batches;
} PsWriteCounts;

/*
 * Encodes a sorted, consolidated stream of updates, and of blocks encoded
 * elsewhere, into the parts of one batch: a part is cut whenever its raw
 * size would pass blob_target_size, and the batch stays inline if it
 * encodes below inline_max_bytes.
 */
typedef struct PsBatchWriter
{
	const char *shard;
	const char *store;			/* the shard's blob store (NULL: the table) */
	bool		copy;			/* copy key/val bytes (the source is transient) */
	PsUpdate   *buf;			/* updates buffered for the part being filled */
	int			n;
	int			cap;
	uint64		raw;			/* raw size of buf */
	StringInfoData arena;		/* copied key/val bytes, when copy */
	char	   *part_data;		/* blocks of the part being filled, encoded */
	uint64		part_cap;		/* bytes allocated for them */
	PsPartInfo	part_info;		/* theirs (all zero while there are none) */
	PsPart		part_bounds;	/* its first and last keys' prefixes (only
								 * those) */
	PsUpdate	part_last;		/* its last update, while it has one (bytes
								 * in part_last_bytes) */
	StringInfoData part_last_bytes;
	List	   *parts;			/* PsPart * written so far */
	List	   *pending;		/* parts not yet put: the batch may be inline */
	uint64		pending_bytes;
	PsWriteCounts counts;
} PsBatchWriter;

/* batch_writer.c */
extern void ps_batch_writer_init(PsBatchWriter *w, const char *shard,
								 const char *store, bool copy);
extern void ps_batch_writer_add(PsBatchWriter *w, const PsUpdate *u);
extern void ps_batch_writer_add_part(PsBatchWriter *w, char *data,
									 const PsPartInfo *info,
									 const PsUpdate *first,
									 const PsUpdate *last);
extern void ps_batch_writer_add_block(PsBatchWriter *w, const char *data,
									  uint64 len, const PsUpdate *first,
									  const PsUpdate *last);
extern void ps_batch_writer_finish(PsBatchWriter *w, PsBatch *batch);

extern void ps_batch_build(const char *shard, const char *store,
						   const PsUpdate *updates, int n,
						   PsBatch *batch, PsWriteCounts *counts);

/* Outcome of appending a batch by CaS */
typedef struct PsAppendResult
{
	bool		ok;
	int64		seqno;			/* new seqno, when ok */
	int64		current_upper;	/* the shard's upper, when not ok */
	uint64		state_bytes;
	int			cas_attempts;
	int			cas_mismatches;
} PsAppendResult;

/* shard.c */
extern void ps_shard_append_now(const char *shard, PsState *known,
								PsBatch *batch, PsAppendResult *result);
extern void ps_shard_compare_and_append(const char *shard,
										const PsUpdateArrays *w,
										int64 expected_upper, int64 new_upper,
										Oid row_type, PsAppendResult *result);
extern void ps_check_row_type(const char *shard, const PsState *state, Oid type);

extern void ps_shard_create(const char *name, const char *row_type);
extern void ps_shard_drop(const char *name);
extern void ps_shard_downgrade_since(const char *name, int64 since);

/* reader_since.c */
extern void ps_shard_read_latest(const char *shard, PsState *state);
extern void ps_check_position_readable(const char *shard, const PsState *state,
									   int64 position);
extern int64 ps_reader_create(const char *shard, const char *reader,
							  bool position_null, int64 position,
							  Interval *lease);
extern int64 ps_reader_held_since(const char *shard, int64 since,
								  char **holder);

/* reader_step.c */
typedef struct PsReaderStep PsReaderStep;
extern PsReaderStep *ps_reader_step_begin(const char *shard,
										  const PsState *state, int64 after,
										  int64 max_updates);
extern bool ps_reader_step_next(PsReaderStep *step, PsUpdate *out);
extern void ps_reader_step_end(PsReaderStep *step);
extern uint64 ps_updates_after(const PsState *state, int64 after);

#endif							/* PS_SHARD_H */
