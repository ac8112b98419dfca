/*-------------------------------------------------------------------------
 *
 * compact.h
 *	  Compaction: merging a run of a shard's batches (compact.c), and the
 *	  queue of shards waiting for the background compactors
 *	  (compaction_queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_COMPACT_H
#define PS_COMPACT_H

#include "base/background.h"
#include "codec/state.h"

/* Picks a run [from, to) of state from batch `first` on (ps_compact_choose) */
typedef bool (*PsRunChooser) (const PsState *state, int first,
							  bool leave_tail, int *from, int *to);

/* Told that a merge's transaction, which may have held its shard's state row, ended */
typedef void (*PsMergeEndedHook) (const char *shard);
extern PGDLLIMPORT PsMergeEndedHook ps_merge_ended_hook;

/* compact.c */
extern void ps_compact_merge_ended(const char *shard);
extern bool ps_compact_choose(const PsState *state, int first,
							  bool leave_tail, int *from, int *to);
extern int	ps_compact_debt(const PsState *state);
extern bool ps_compact_range(const char *shard, const PsState *state,
							 int from, int to, bool *left_garbage);
extern void ps_shard_compact(const char *name);

/* compaction_queue.c */
extern Size ps_compaction_shmem_size(void);
extern void ps_compaction_shmem_init(void);
extern void ps_compaction_register_callbacks(void);
extern void ps_compaction_request(const char *shard);
extern void ps_compaction_request_at_commit(const char *shard, bool collect);
extern void ps_compaction_stop_at_commit(const char *shard);
extern void ps_compaction_check_dropped(const char *shard);
extern void ps_compaction_note_refused(void);
extern bool ps_compactor_running(bool *refused);

/* compaction_queue.c, the compactor's side */
extern bool ps_compaction_claim_slot(int i, PsWorkerClaim *claim);
extern bool ps_compaction_attach_compactor(int i, const PsWorkerClaim *claim);
extern bool ps_compaction_give_up(bool idle);
extern void ps_compaction_stop_database(Oid database);
extern bool ps_compaction_take(char *shard, bool *collect, bool *scan_all);
extern void ps_compaction_owe_scan(void);
extern void ps_compaction_set_current(const char *shard);
extern bool ps_compaction_claim_run(const PsState *state, PsRunChooser choose,
									int *from, int *to);
extern void ps_compaction_release_claim(void);

#endif							/* PS_COMPACT_H */
