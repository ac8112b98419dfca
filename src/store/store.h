/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The storage tables (blob, consensus and its diff log, idempotency,
 *	  shard_acl, reader, garbage), reached through saved SPI plans, and the
 *	  objects their rows name.  A function that reads or writes a table
 *	  must be called between SPI_connect and SPI_finish; those of
 *	  sql_objects.c, the key helpers of blob.c (ps_blob_is_object,
 *	  ps_blob_shard_segment, ps_blob_new_key, ps_blob_keys_*) and
 *	  state_cache.c's need no SPI.  The object store itself is the layer
 *	  below (objstore/objstore.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_STORE_H
#define PS_STORE_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"
#include "utils/acl.h"
#include "codec/state.h"
#include "objstore/objstore.h"

/* sql_objects.c: the storage objects a version after 0.1 added */
typedef enum PsSqlObject
{
	PS_OBJ_DIFF_LOG,			/* 0.4: the table consensus_diff */
	PS_OBJ_BLOB_CHUNKS,			/* 0.6: the blob table in page-sized rows */
	PS_OBJ_SHARD_ACL,			/* 0.9: shard owners and grants */
	PS_OBJ_READER,				/* 0.10: the reader table */
	PS_OBJ_GARBAGE,				/* 0.12: the garbage table */
	PS_OBJ_COUNT
} PsSqlObject;

extern bool ps_sql_objects_have(PsSqlObject object);
extern Oid	ps_sql_object_relid(PsSqlObject object);
extern const char *ps_sql_object_version(PsSqlObject object);

/* spi.c */
extern Oid	ps_storage_owner(void);
extern int	ps_spi_run(SPIPlanPtr *plan, const char *sql, int nargs,
					   Oid *argtypes, Datum *values, bool read_only);
extern int	ps_spi_run_nulls(SPIPlanPtr *plan, const char *sql, int nargs,
							 Oid *argtypes, Datum *values, const char *nulls,
							 bool read_only);

/* blob.c */

/*
 * Bytes of a blob row's chunk of a part (its last chunk holds the rest).
 * Part of the storage format: a row of the longest key and a whole chunk
 * fills a heap page.
 */
#define PS_BLOB_CHUNK_BYTES 7864

/* A part being read a slice at a time (ps_blob_open) */
typedef struct PsBlobRef
{
	char	   *key;
	uint64		length;			/* bytes of the part */
	bool		read_only;		/* read its slices in the active snapshot */
	struct varlena *whole_row;	/* 0.5's one row of the part: its TOAST
								 * pointer or small value; else NULL */
	char	   *bucket;			/* an object's bucket and name; else NULL */
	char	   *object;
	bytea	   *window;			/* the object's bytes read last, or NULL */
	uint64		window_offset;	/* where in the object they start */
} PsBlobRef;

extern bool ps_blob_is_object(const char *key);
extern char *ps_blob_shard_segment(const char *shard);
extern char *ps_blob_new_key(const char *shard, const char *store);
extern void ps_blob_put(const char *key, const char *data, uint64 len);
extern void ps_blob_put_all(const char *const *keys, const char *const *datas,
							const uint64 *lens, int n);

extern void ps_blob_put_all_working(const char *const *keys,
									const char *const *datas,
									const uint64 *lens, int n,
									PsPutWork work, void *arg);
extern bytea *ps_blob_get(const char *key, uint64 len, MemoryContext dest,
						  bool read_only, char **why);
extern PsBlobRef *ps_blob_open(const char *key, uint64 len, MemoryContext dest,
							   bool read_only);
extern PsBlobRef *ps_blob_open_sized(const char *key, uint64 len,
									 MemoryContext dest, bool read_only);
extern bytea *ps_blob_read(PsBlobRef *ref, uint64 offset, uint64 len,
						   char **why);
extern void ps_blob_close(PsBlobRef *ref);
extern bool ps_blob_delete(const char *key);
extern uint64 ps_blob_delete_shard(const char *shard);
extern List *ps_blob_shard_keys(const char *shard, bool read_only);
extern List *ps_blob_store_keys(const char *store, const char *shard);
extern void ps_blob_keys_sort(List *keys);
extern bool ps_blob_keys_have(const List *sorted, const char *key);

/* garbage.c */
extern void ps_garbage_put(const char *shard, int64 seqno,
						   const char *const *keys, int n);
extern bool ps_garbage_collect(const char *shard, bool *held_back);
extern List *ps_garbage_shard_keys(const char *shard, bool read_only);
extern void ps_garbage_delete_shard(const char *shard);
extern List *ps_garbage_shard_objects(const char *shard);
extern List *ps_garbage_all_objects(void);

/* object_leaks.c */
extern uint64 ps_object_leaks_step(bool *pending);
extern void ps_garbage_put_dropped(const char *shard, List *objects);

/* consensus.c */
typedef void (*PsStateVisitor) (const char *shard, const PsState *state,
							   void *arg);

extern void ps_consensus_skip_durable_wait(void);
extern XLogRecPtr ps_wal_inserted_end(void);
extern bool ps_consensus_read(const char *shard, PsState *state,
							  MemoryContext dest, bool read_only);
extern void ps_consensus_read_or_error(const char *shard, PsState *state,
									   MemoryContext dest, bool read_only);
extern const PsState *ps_consensus_read_lent(const char *shard,
											 MemoryContext dest);
extern void ps_consensus_read_stored(const char *shard, PsState *state,
									 MemoryContext dest, bool read_only);
extern bool ps_consensus_insert(const char *shard, const PsState *state);
extern bool ps_consensus_cas(const char *shard, const PsState *from,
							 PsState *to, uint64 *state_bytes);
extern bool ps_consensus_delete(const char *shard);
extern void ps_consensus_foreach(PsStateVisitor fn, void *arg, bool read_only);
extern List *ps_consensus_shards(MemoryContext dest, bool read_only);
extern bool ps_consensus_held_here(const char *shard);
extern bool ps_consensus_lock(const char *shard);
extern bool ps_consensus_probe_lock(const char *shard, TransactionId *holder);
extern void ps_state_decode_or_error(const char *shard, const char *data,
									 uint64 len, PsState *state);

/* state_cache.c */
extern bool ps_state_cache_get(const char *shard, int64 seqno,
							   TransactionId xmin, PsState *state,
							   MemoryContext dest);
extern bool ps_state_cache_lend(const char *shard, int64 seqno,
								TransactionId xmin, const PsState **state,
								MemoryContext dest);
extern bool ps_state_cache_version(const char *shard, int64 *seqno,
								   TransactionId *xmin);
extern void ps_state_cache_put(const char *shard, TransactionId xmin,
							   const PsState *state);
extern void ps_state_cache_forget(const char *shard);

/* idempotency.c */
typedef struct PsStoredKey
{
	char	   *key;
	int64		time;
	int			digest_len;
	char		digest[FLEXIBLE_ARRAY_MEMBER];
} PsStoredKey;

extern Size ps_idempotency_shmem_size(void);
extern void ps_idempotency_shmem_init(void);
extern void ps_idempotency_hold(TimestampTz arrived_at);

extern List *ps_idempotency_get_many(const char *shard, const char *const *keys,
									 int n, int digest_len);
extern void ps_idempotency_put_many(const char *shard, const char *const *keys,
									const char *const *digests, int n,
									int64 time, int digest_len);
extern uint64 ps_idempotency_expire(int window_ms);
extern void ps_idempotency_delete_shard(const char *shard);

/* shard_acl.c */

/* A shard's owner and the privileges it granted (its shard_acl row) */
typedef struct PsShardAcl
{
	Oid			owner;
	Acl		   *acl;			/* never NULL; may hold no item */
} PsShardAcl;

extern bool ps_shard_acl_read(const char *shard, PsShardAcl *out,
							  MemoryContext dest, bool for_update);
extern void ps_shard_acl_put(const char *shard, const PsShardAcl *acl,
							 bool replace);
extern void ps_shard_acl_delete(const char *shard);
extern bool ps_shard_acl_lock(const char *shard, bool exclusive);

/* reader_table.c */

/* A reader's row, as a caller sees it */
typedef struct PsReaderRow
{
	Oid			owner;
	int64		position;		/* the last time it has processed */
	bool		leased;			/* it has a lease (it may expire) */
	bool		expired;		/* its lease has passed */
} PsReaderRow;

extern bool ps_reader_read(const char *shard, const char *reader,
						   TimestampTz now, bool read_only, PsReaderRow *out);
extern bool ps_reader_lock(const char *shard, const char *reader,
						   TimestampTz now, PsReaderRow *out);
extern bool ps_reader_insert(const char *shard, const char *reader, Oid owner,
							 int64 position, Interval *lease, TimestampTz now);
extern void ps_reader_set_position(const char *shard, const char *reader,
								   int64 position, TimestampTz now);
extern bool ps_reader_delete(const char *shard, const char *reader);
extern void ps_reader_delete_shard(const char *shard);
extern int64 ps_reader_hold(const char *shard, TimestampTz now, char **holder);
extern uint64 ps_reader_list(TimestampTz now);

#endif							/* PS_STORE_H */
