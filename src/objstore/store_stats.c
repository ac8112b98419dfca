/*-------------------------------------------------------------------------
 *
 * store_stats.c
 *	  The object store's requests, failures and latency, in shared memory,
 *	  one set of figures per kind of request (put, get, delete, list), as
 *	  pg_stat_archiver keeps archiving's; the view object_store_stats over
 *	  them is in sql/object_store_view.c.
 *
 * The S3 client (s3.c) counts each request once it has ended, after its
 * retries, whether it succeeded or failed, and each retry as it is made.
 * A kind's figures, its last failure and a ring of the latencies of its
 * last PS_STORE_LATENCY_RING requests are guarded by the kind's spinlock,
 * held only to update or copy them.  They count from the server's start
 * or the last object_store_stats_reset(), for the whole server (every
 * database's requests together), and are not kept across a restart.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "objstore/objstore.h"

/* One kind's figures and recent latencies */
typedef struct StoreKind
{
	slock_t		mutex;
	PsStoreStats stats;			/* recent, p50_us and p99_us unused here */
	uint32		ring_us[PS_STORE_LATENCY_RING];
	int			ring_next;		/* where the next latency goes */
	int			ring_count;		/* latencies in the ring */
} StoreKind;

static StoreKind *store_kinds = NULL;

/* The names of the kinds, as the view shows them */
static const char *const kind_names[PS_STORE_REQUEST_KINDS] = {
	"put", "get", "delete", "list"
};

/* Shared memory of the figures: one StoreKind per kind. */
Size
ps_store_stats_shmem_size(void)
{
	return MAXALIGN(mul_size(sizeof(StoreKind), PS_STORE_REQUEST_KINDS));
}

/* Empties one kind's figures, reset at now; needs its spinlock (or no sharing yet). */
static void
kind_clear(StoreKind *k, TimestampTz now)
{
	memset(&k->stats, 0, sizeof(PsStoreStats));
	k->stats.stats_reset = now;
	k->ring_next = 0;
	k->ring_count = 0;
}

/*
 * Attaches to (or creates, empty, reset at the server's start) the
 * figures of every kind; caller holds AddinShmemInitLock.
 */
void
ps_store_stats_shmem_init(void)
{
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	store_kinds = ShmemInitStruct("persist_sink object store stats",
								  ps_store_stats_shmem_size(), &found);
	if (found)
		return;
	for (int i = 0; i < PS_STORE_REQUEST_KINDS; i++)
	{
		SpinLockInit(&store_kinds[i].mutex);
		kind_clear(&store_kinds[i], now);
	}
}

/* The name of a kind of request: put, get, delete or list. */
const char *
ps_store_request_name(PsStoreRequest kind)
{
	Assert(kind >= 0 && kind < PS_STORE_REQUEST_KINDS);
	return kind_names[kind];
}

/* Counts a retry of a request of kind; takes the kind's spinlock. */
void
ps_store_stats_retried(PsStoreRequest kind)
{
	StoreKind  *k;

	if (store_kinds == NULL)
		return;
	k = &store_kinds[kind];
	SpinLockAcquire(&k->mutex);
	k->stats.retries++;
	SpinLockRelease(&k->mutex);
}

/*
 * Counts a request of kind that ended after elapsed_us, with bytes of
 * bodies sent and received, failed with the message failure (NULL if it
 * succeeded; kept cut at a character's end to PS_STORE_FAILURE_BYTES - 1
 * bytes); takes the kind's spinlock.
 */
void
ps_store_stats_ended(PsStoreRequest kind, uint64 bytes, uint64 elapsed_us,
					 const char *failure)
{
	StoreKind  *k;
	char		message[PS_STORE_FAILURE_BYTES];
	TimestampTz now = 0;

	if (store_kinds == NULL)
		return;
	k = &store_kinds[kind];
	if (failure)
	{
		int			len = pg_mbcliplen(failure, strlen(failure),
									   PS_STORE_FAILURE_BYTES - 1);

		memcpy(message, failure, len);
		message[len] = '\0';
		now = GetCurrentTimestamp();
	}
	SpinLockAcquire(&k->mutex);
	k->stats.requests++;
	k->stats.bytes += (int64) bytes;
	k->stats.total_us += (int64) elapsed_us;
	k->stats.max_us = Max(k->stats.max_us, (int64) elapsed_us);
	k->ring_us[k->ring_next] = (uint32) Min(elapsed_us, PG_UINT32_MAX);
	k->ring_next = (k->ring_next + 1) % PS_STORE_LATENCY_RING;
	k->ring_count = Min(k->ring_count + 1, PS_STORE_LATENCY_RING);
	if (failure)
	{
		k->stats.failed++;
		k->stats.last_failure_at = now;
		strlcpy(k->stats.last_failure, message, PS_STORE_FAILURE_BYTES);
	}
	SpinLockRelease(&k->mutex);
}

/* Orders two latencies, for qsort. */
static int
latency_cmp(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a;
	uint32		y = *(const uint32 *) b;

	return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of n sorted latencies, n > 0. */
static int64
percentile(const uint32 *sorted, int n, int p)
{
	int			rank = (n * p + 99) / 100;

	return sorted[Max(rank, 1) - 1];
}

/*
 * Copies kind's figures to out, with the median and the 99th percentile
 * of its recent latencies (0 if none yet, recent then 0); takes the
 * kind's spinlock and sorts outside it.
 */
void
ps_store_stats_get(PsStoreRequest kind, PsStoreStats *out)
{
	StoreKind  *k;
	uint32		ring[PS_STORE_LATENCY_RING];
	int			n;

	memset(out, 0, sizeof(PsStoreStats));
	if (store_kinds == NULL)
		return;
	k = &store_kinds[kind];
	SpinLockAcquire(&k->mutex);
	*out = k->stats;
	n = k->ring_count;
	memcpy(ring, k->ring_us, n * sizeof(uint32));
	SpinLockRelease(&k->mutex);
	out->recent = n;
	if (n == 0)
		return;
	qsort(ring, n, sizeof(uint32), latency_cmp);
	out->p50_us = percentile(ring, n, 50);
	out->p99_us = percentile(ring, n, 99);
}

/* Empties the figures of every kind, reset now; takes each kind's spinlock in turn. */
void
ps_store_stats_reset(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (store_kinds == NULL)
		return;
	for (int i = 0; i < PS_STORE_REQUEST_KINDS; i++)
	{
		SpinLockAcquire(&store_kinds[i].mutex);
		kind_clear(&store_kinds[i], now);
		SpinLockRelease(&store_kinds[i].mutex);
	}
}
