/*-------------------------------------------------------------------------
 *
 * upper_wait.h
 *	  Waiting for a shard's upper to move: condition variables that every
 *	  committed append of a shard broadcasts.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_UPPER_WAIT_H
#define PS_UPPER_WAIT_H

extern Size ps_upper_shmem_size(void);
extern void ps_upper_shmem_init(void);
extern void ps_upper_notify(const char *shard);
extern void ps_upper_notify_at_commit(const char *shard);
extern int64 ps_upper_wait(const char *shard, int64 past, int64 timeout_ms);

#endif							/* PS_UPPER_WAIT_H */
