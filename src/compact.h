/*-------------------------------------------------------------------------
 *
 * compact.h
 *	  Compaction: merging a shard's batches, in the background (size-
 *	  tiered) and on demand (compact()).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_COMPACT_H
#define PS_COMPACT_H

#include "state.h"

extern bool ps_compact_choose(const PsState *state, int *from, int *to);
extern bool ps_compact_range(const char *shard, const PsState *state,
							 int from, int to);
extern void ps_shard_compact(const char *name);

/* compactor.c */
extern void ps_compaction_request(const char *shard);
extern void ps_compaction_request_at_commit(const char *shard);
extern void ps_compaction_stop_at_commit(const char *shard);
extern void ps_compaction_check_dropped(const char *shard);
extern void ps_register_compactor(void);
PGDLLEXPORT void ps_compactor_main(Datum arg);

#endif							/* PS_COMPACT_H */
