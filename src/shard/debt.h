/*-------------------------------------------------------------------------
 *
 * debt.h
 *	  Compaction debt: the batch count of each shard, as of its last
 *	  committed CaS, in shared memory, for the sink's backpressure.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_DEBT_H
#define PS_DEBT_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/condition_variable.h"

#include "base/base.h"

/* Bytes kept of a failed compaction's message */
#define PS_DEBT_ERROR_LEN	160

/* A shard whose background compactions are failing, as the debt table has it */
typedef struct PsDebtFailure
{
	char		shard[PS_MAX_SHARD_NAME + 1];
	int			failures;		/* in a row */
	TimestampTz failed_at;		/* the last one's time */
	char		error[PS_DEBT_ERROR_LEN];	/* ... and message */
} PsDebtFailure;

extern Size ps_debt_shmem_size(void);
extern void ps_debt_shmem_init(void);
extern void ps_debt_register_callbacks(void);

/* Shards of the current database (MyDatabaseId) */
extern void ps_debt_publish_at_commit(const char *shard, int64 seqno, int batches);
extern void ps_debt_forget_at_commit(const char *shard);
extern int	ps_debt_batches(const char *shard);
extern ConditionVariable *ps_debt_cv(void);
extern int	ps_debt_delay_ms(int batches);
extern int	ps_debt_compaction_failed(const char *shard, const char *message);
extern void ps_debt_compaction_succeeded(const char *shard);
extern int	ps_debt_compaction_failures(const char *shard, TimestampTz *failed_at,
										char *error);
extern List *ps_debt_failing_shards(void);

#endif							/* PS_DEBT_H */
