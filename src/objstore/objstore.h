/*-------------------------------------------------------------------------
 *
 * objstore.h
 *	  Everything that talks to an S3 object store or keeps its bytes: the
 *	  requests (s3.c), their figures (store_stats.c), the owner marker of
 *	  a store's prefix (store_owner.c), and the caches of objects' bytes,
 *	  per process (object_cache.c) and on disk for every process
 *	  (object_disk_cache.c).
 *
 * Nothing here touches a table or needs SPI; the storage tables, and the
 * code that decides which objects a state names (blob.c, garbage.c, the
 * leak collector object_leaks.c), are in store/, above this layer.  A
 * request may raise an error (58030 once the store stays unreachable past
 * persist_sink.s3_timeout, 55000 for another database's prefix) and waits
 * interruptibly; the functions that keep shared memory say which lock
 * they take.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_OBJSTORE_H
#define PS_OBJSTORE_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/palloc.h"

/* Least bytes of an object one read of a slice of it fetches */
#define PS_OBJECT_WINDOW_BYTES (256 * 1024)

/*
 * A step of a caller's own work, done while its objects are put (between
 * looks at the requests, while they wait for the store); false once it has
 * none left for now.  It must not use the object store itself.
 */
typedef bool (*PsPutWork) (void *arg);

/* object_cache.c */

/* An object whose bytes are read through the caches */
typedef struct PsObjectRef
{
	const char *url;			/* s3://bucket/object: the caches' key */
	const char *bucket;
	const char *object;
	uint64		length;			/* bytes of the object, as its state says */
} PsObjectRef;

extern bool ps_object_cache_read(const PsObjectRef *ref, uint64 offset,
								 uint64 len, char *dest);

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

#endif							/* PS_OBJSTORE_H */
