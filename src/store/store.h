/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The blob table and the consensus table, reached through saved SPI
 *	  plans.  Every function here must be called between SPI_connect and
 *	  SPI_finish.
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

/* Least bytes of an object one read of a slice of it fetches */
#define PS_OBJECT_WINDOW_BYTES (256 * 1024)

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

/*
 * A step of a caller's own work, done while its objects are put (between
 * looks at the requests, while they wait for the store); false once it has
 * none left for now.  It must not use the object store itself.
 */
typedef bool (*PsPutWork) (void *arg);

extern void ps_blob_put_all_working(const char *const *keys,
									const char *const *datas,
									const uint64 *lens, int n,
									PsPutWork work, void *arg);
extern bytea *ps_blob_get(const char *key, uint64 len, MemoryContext dest,
						  bool read_only, char **why);
extern PsBlobRef *ps_blob_open(const char *key, uint64 len, MemoryContext dest,
							   bool read_only);
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

/* object_cache.c */
extern bool ps_object_cache_read(PsBlobRef *ref, uint64 offset, uint64 len,
								 char *dest);

/* object_disk_cache.c */
extern bool ps_object_disk_cache_on(void);
extern Size ps_object_disk_cache_shmem_size(void);
extern void ps_object_disk_cache_shmem_init(void);
extern bool ps_object_disk_cache_get(const char *url, uint64 number,
									 uint32 len, char *dest);
extern void ps_object_disk_cache_put(const char *url, uint64 number,
									 const char *data, uint32 len);

/* The disk cache's figures, as object_disk_cache_stats shows them */
typedef struct PsDiskCacheStats
{
	uint64		size;			/* bytes it may hold */
	uint64		windows;		/* windows it holds (or is writing) */
	uint64		hits;			/* windows found */
	uint64		misses;			/* windows looked for and not found */
	uint64		writes;			/* windows written */
	uint64		replaced;		/* windows dropped for others */
} PsDiskCacheStats;

extern void ps_object_disk_cache_get_stats(PsDiskCacheStats *out);

/* store_owner.c */

/* Whose an object store's prefix is, by its owner marker */
typedef enum PsStoreOwner
{
	PS_STORE_UNMARKED,			/* no marker: nothing was put under it yet */
	PS_STORE_OURS,				/* this database's */
	PS_STORE_OTHERS,			/* another database's */
} PsStoreOwner;

extern void ps_store_claim(const char *store);
extern PsStoreOwner ps_store_owner(const char *store, char **other);
extern bool ps_store_may_delete(const char *key);
extern bool ps_store_collected_here(const char *store);
extern char *ps_store_of_object_key(const char *key);
extern char *ps_store_take(const char *store);

/* s3.c */
extern void ps_sha256(const char *data, size_t len, uint8 *digest);
extern void ps_s3_put(const char *bucket, const char *key, const char *data,
					  size_t len);
extern void ps_s3_put_all(const char *bucket, const char *const *keys,
						  const char *const *datas, const size_t *lens, int n);
extern void ps_s3_put_all_working(const char *bucket, const char *const *keys,
								  const char *const *datas, const size_t *lens,
								  int n, PsPutWork work, void *arg);
extern bool ps_s3_put_if_absent(const char *bucket, const char *key,
								const char *data, size_t len);
extern bytea *ps_s3_get(const char *bucket, const char *key, uint64 offset,
						uint64 len, MemoryContext dest);
extern bytea *ps_s3_get_upto(const char *bucket, const char *key, uint64 len,
							 MemoryContext dest);
extern void ps_s3_delete(const char *bucket, const char *key);
extern List *ps_s3_list(const char *bucket, const char *prefix);

/* store_stats.c */

/* The kinds of request made to an object store (one row each in the view) */
typedef enum PsStoreRequest
{
	PS_STORE_PUT,
	PS_STORE_GET,
	PS_STORE_DELETE,
	PS_STORE_LIST
} PsStoreRequest;

#define PS_STORE_REQUEST_KINDS	4

/* Bytes kept of the last failure's message, its terminating NUL included */
#define PS_STORE_FAILURE_BYTES	256

/* Latencies kept per kind, of its last requests, for the percentiles */
#define PS_STORE_LATENCY_RING	256

/* One kind's figures, as object_store_stats shows them */
typedef struct PsStoreStats
{
	int64		requests;		/* ended, after their retries */
	int64		failed;			/* of them, ended in an error */
	int64		retries;		/* attempts made again */
	int64		bytes;			/* bodies sent and received */
	int64		total_us;		/* time of every request, retries included */
	int64		max_us;
	int			recent;			/* requests the percentiles are of */
	int64		p50_us;			/* of the recent ones */
	int64		p99_us;
	TimestampTz last_failure_at;	/* 0 if none */
	char		last_failure[PS_STORE_FAILURE_BYTES];
	TimestampTz stats_reset;
} PsStoreStats;

extern Size ps_store_stats_shmem_size(void);
extern void ps_store_stats_shmem_init(void);
extern const char *ps_store_request_name(PsStoreRequest kind);
extern void ps_store_stats_retried(PsStoreRequest kind);
extern void ps_store_stats_ended(PsStoreRequest kind, uint64 bytes,
								 uint64 elapsed_us, const char *failure);
extern void ps_store_stats_get(PsStoreRequest kind, PsStoreStats *out);
extern void ps_store_stats_reset(void);

/* consensus.c */
typedef void (*PsStateVisitor) (const char *shard, const PsState *state,
							   void *arg);

extern void ps_consensus_skip_durable_wait(void);
extern XLogRecPtr ps_wal_inserted_end(void);
extern bool ps_consensus_read(const char *shard, PsState *state,
							  MemoryContext dest, bool read_only);
extern void ps_consensus_read_or_error(const char *shard, PsState *state,
									   MemoryContext dest, bool read_only);
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
