/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  Definition of the persist_sink.* configuration parameters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <limits.h>

#include "utils/guc.h"

#include "base/base.h"
#include "base/settings.h"

int			ps_shared_batch_max_bytes = 1024 * 1024;
int			ps_batch_interval_ms = 10;
int			ps_inline_max_bytes = 4096;
int			ps_blob_target_size = 2 * 1024 * 1024;
int			ps_compression_level = 1;
int			ps_object_cache_kb = 16 * 1024;
int			ps_block_cache_kb = 16 * 1024;
int			ps_object_disk_cache_kb = 0;
int			ps_shared_memory_kb = 64 * 1024;
int			ps_workers = 2;
int			ps_compactors = 2;
char	   *ps_database = NULL;
int			ps_worker_idle_timeout_ms = 60 * 1000;
int			ps_reader_lease_s = 0;
int			ps_reader_cache_kb = 1024 * 1024;
int			ps_max_databases = 8;
bool		ps_compaction = true;
bool		ps_subscriber = false;
int			ps_stats_max = 4096;
int			ps_idempotency_window_s = 600;
char	   *ps_table_idempotency_key = NULL;
int			ps_table_write_memory_kb = 64 * 1024;
char	   *ps_table_as_of = NULL;
char	   *ps_blob_store = NULL;
char	   *ps_s3_endpoint = NULL;
char	   *ps_s3_region = NULL;
char	   *ps_s3_credentials_file = NULL;
int			ps_s3_timeout_ms = 30 * 1000;

/*
 * Backpressure (a shard stays bounded under any load).  An append() writer counts its shard's
 * batches as the count the shard layer published at the last commit
 * (shard/debt.c) plus the shard's sink intervals not yet committed: the
 * open one, the one a worker is committing, and those a worker retries
 * later because another transaction held the state row (up to 255 of
 * them, so they must be counted, not allowed for).  Above
 * slowdown_batches each append is delayed 1ms per batch past it; at
 * stop_batches it waits until compaction brings the count back below.
 * A new interval is opened only while that count is below stop_batches
 * (checked again under the sink lock when the interval opens), and an
 * interval adds at most one batch: so the intervals in flight when
 * writers start waiting are already in the count, and the sink never
 * takes a shard past stop_batches.  With the defaults: at most 48 batches,
 * under the design's 64; the 16 left are margin for compare_and_append,
 * which is never slowed, and for a count forgotten by a full debt table.
 */
int			ps_slowdown_batches = 32;
int			ps_stop_batches = 48;

/* Parses a time (a bigint in decimal, nothing around it); false if it is not one. */
bool
ps_parse_time(const char *s, int64 *time)
{
	char	   *end;

	errno = 0;
	*time = strtoi64(s, &end, 10);
	return errno == 0 && end != s && *end == '\0';
}

/*
 * Parses an object store URL, s3://bucket[/prefix]: sets *bucket and
 * *prefix (without slashes at either end; "" if none).  False if url is
 * not one.
 */
bool
ps_s3_parse_url(const char *url, char **bucket, char **prefix)
{
	const char *b;
	const char *slash;
	size_t		blen;
	char	   *p;
	size_t		plen;

	if (strncmp(url, "s3://", 5) != 0)
		return false;
	b = url + 5;
	slash = strchr(b, '/');
	blen = slash ? (size_t) (slash - b) : strlen(b);
	/* bucket names: 3 to 63 of lower-case letters, digits, '.' and '-' */
	if (blen < 3 || blen > 63)
		return false;
	for (size_t i = 0; i < blen; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') ||
			  b[i] == '.' || b[i] == '-'))
			return false;
	*bucket = pnstrdup(b, blen);
	p = pstrdup(slash ? slash + 1 : "");
	plen = strlen(p);
	while (plen > 0 && p[plen - 1] == '/')
		p[--plen] = '\0';
	*prefix = p;
	return true;
}

/*
 * What is wrong with prefix (as ps_s3_parse_url returns it) as the prefix
 * new parts go under, or NULL if nothing is: at most PS_MAX_PREFIX bytes,
 * in segments of letters, digits, '.', '_' and '-' that are neither empty,
 * "." nor "..", so that no client, proxy or store rewrites a key under it.
 */
const char *
ps_s3_prefix_problem(const char *prefix)
{
	const char *seg = prefix;

	if (strlen(prefix) > PS_MAX_PREFIX)
		return "The prefix has more than " CppAsString2(PS_MAX_PREFIX) " bytes.";
	if (*prefix == '\0')
		return NULL;
	for (const char *p = prefix;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			size_t		len = p - seg;

			if (len == 0 || (len == 1 && seg[0] == '.') ||
				(len == 2 && seg[0] == '.' && seg[1] == '.'))
				return "A segment of the prefix is empty, \".\" or \"..\".";
			if (*p == '\0')
				return NULL;
			seg = p + 1;
		}
		else if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
				   (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			return "The prefix may hold only letters, digits, '.', '_', '-' and '/' between segments.";
	}
}

/*
 * Check hook of persist_sink.blob_store: "table" or an object store's URL
 * whose prefix ps_s3_prefix_problem accepts.
 */
static bool
check_blob_store(char **newval, void **extra, GucSource source)
{
	char	   *bucket;
	char	   *prefix;
	const char *problem;

	if (strcmp(*newval, "table") == 0)
		return true;
	if (!ps_s3_parse_url(*newval, &bucket, &prefix))
	{
		GUC_check_errdetail("persist_sink.blob_store is \"table\" or s3://bucket/prefix, the bucket of 3 to 63 lower-case letters, digits, dots and hyphens.");
		return false;
	}
	problem = ps_s3_prefix_problem(prefix);
	pfree(bucket);
	pfree(prefix);
	if (problem == NULL)
		return true;
	GUC_check_errdetail("%s", problem);
	return false;
}

/*
 * The blob store new shards keep their parts in, from persist_sink.blob_store:
 * NULL for the blob table, else the object store's URL without a trailing
 * slash (palloc'd).
 */
char *
ps_new_shard_blob_store(void)
{
	char	   *bucket;
	char	   *prefix;

	if (strcmp(ps_blob_store, "table") == 0 ||
		!ps_s3_parse_url(ps_blob_store, &bucket, &prefix))
		return NULL;
	return *prefix ? psprintf("s3://%s/%s", bucket, prefix) : psprintf("s3://%s", bucket);
}

/* Check hook of persist_sink.idempotency_key: at most PS_MAX_IDEMPOTENCY_KEY bytes. */
static bool
check_table_idempotency_key(char **newval, void **extra, GucSource source)
{
	if (strlen(*newval) <= PS_MAX_IDEMPOTENCY_KEY)
		return true;
	GUC_check_errdetail("An idempotency key has at most %d bytes.", PS_MAX_IDEMPOTENCY_KEY);
	return false;
}

/* Check hook of persist_sink.as_of: empty, or a bigint. */
static bool
check_table_as_of(char **newval, void **extra, GucSource source)
{
	int64		time;

	if ((*newval)[0] == '\0' || ps_parse_time(*newval, &time))
		return true;
	GUC_check_errdetail("persist_sink.as_of is a time (a bigint), or empty for the latest.");
	return false;
}

/* Defines every parameter and reserves the persist_sink. prefix. */
void
ps_define_settings(void)
{
	DefineCustomIntVariable("persist_sink.shared_batch_max_bytes",
							"Writes smaller than this join the shared batch of their interval.",
							"Larger writes are encoded into parts of their own by the writing backend. 0 disables sharing.",
							&ps_shared_batch_max_bytes, 1024 * 1024, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.batch_interval",
							"Longest time an interval stays open before it is sealed.",
							NULL,
							&ps_batch_interval_ms, 10, 1, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.inline_max_bytes",
							"Batches that encode smaller than this are kept inline in the shard state.",
							"0 writes every non-empty batch to the blob table.",
							&ps_inline_max_bytes, 4096, 0, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.blob_target_size",
							"Size at which a batch is split into another part.",
							"Measured on the uncompressed columns, so encoded parts are at most this large.",
							&ps_blob_target_size, 2 * 1024 * 1024, 1024, 512 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.compression_level",
							"zstd compression level of parts.",
							NULL,
							&ps_compression_level, 1, -7, 22,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.object_cache_size",
							"Memory each process keeps of the parts it read from an object store.",
							"Windows of 256kB of objects, least recently used first out. 0 keeps only the window each reader of a part read last.",
							&ps_object_cache_kb, 16 * 1024, 0, INT_MAX / 2,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.block_cache_size",
							"Memory each process keeps of the decoded blocks that key lookups read.",
							"Decoded blocks of parts read by reads with a key condition, least recently used first out, where each part's blocks start and end, and the key filters of the blocks lookups of one key consulted. 0 turns the cache off.",
							&ps_block_cache_kb, 16 * 1024, 0, INT_MAX / 2,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.object_disk_cache_size",
							"Disk the server's processes share to cache the parts they read from an object store.",
							"Windows of 256kB of objects in one file of base/pgsql_tmp, indexed in shared memory. 0 (the default) turns the cache off.",
							&ps_object_disk_cache_kb, 0, 0, INT_MAX / 2,
							PGC_POSTMASTER, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.shared_memory",
							"Size of the shared staging arena of the sink.",
							"When it is full, writers wait for space.",
							&ps_shared_memory_kb, 64 * 1024, 1024, INT_MAX / 2,
							PGC_POSTMASTER, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.workers",
							"Number of background workers that commit the sink's intervals.",
							NULL,
							&ps_workers, 2, 1, 64,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.compactors",
							"Number of background workers that compact shards.",
							"Several merge disjoint runs of one shard at once: new batches are merged while a long merge of older ones runs.",
							&ps_compactors, 2, 1, PS_MAX_COMPACTORS,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.database",
							   "Database whose shards the background workers serve.",
							   NULL,
							   &ps_database, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.max_databases",
							"How many databases other than persist_sink.database may have appends in flight at once.",
							"Each such database has a sink worker and a compactor while it has work.",
							&ps_max_databases, 8, 0, PS_MAX_DATABASES,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.worker_idle_timeout",
							"How long the workers of a database other than persist_sink.database wait with nothing to do before they exit.",
							"They are started again by the next append or compaction request of their database.",
							&ps_worker_idle_timeout_ms, 60 * 1000, 10, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomBoolVariable("persist_sink.compaction",
							 "Merges shards' batches in the background.",
							 "Turn off only to diagnose; compact() still works.",
							 &ps_compaction, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("persist_sink.subscriber",
							 "Makes every shard of this server read-only: a publisher's logical replication writes them.",
							 "Writes to shards are refused, and the compactor neither merges batches nor deletes expired idempotency keys.",
							 &ps_subscriber, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.stats_max",
							"Most shards, in all databases, whose counters the stats view keeps.",
							"Counters of further shards are not kept until entries are freed.",
							&ps_stats_max, 4096, 100, 1000000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.idempotency_window",
							"How long the idempotency keys of committed appends are remembered.",
							"A retry with the same key within this time returns the first append's time and writes nothing.",
							&ps_idempotency_window_s, 600, 1, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.slowdown_batches",
							"Batches of a shard above which append() callers are slowed down.",
							"Each append waits 1ms per batch above this, so that the compactor catches up.",
							&ps_slowdown_batches, 32, 1, 64,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.stop_batches",
							"Batches of a shard at which append() callers wait for compaction.",
							"At most 64. A value at or below slowdown_batches stops writers without slowing them first.",
							&ps_stop_batches, 48, 1, 64,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.reader_lease",
							"Lease of readers created without one: how long a reader may go without read_next() or advance_reader() before it expires.",
							"0 (the default): never expires.  An expired reader no longer holds the shard's since.",
							&ps_reader_lease_s, 0, 0, PS_READER_LEASE_MAX_S,
							PGC_USERSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.reader_cache",
							"Temporary file space a backend's read_next() may keep a window it read in, for its next steps.",
							"A read_next() far behind decodes its whole window once and keeps the times past its cut in temporary files, so its next steps read only theirs.  0: keeps none.",
							&ps_reader_cache_kb, 1024 * 1024, 0, MAX_KILOBYTES,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.idempotency_key",
							   "Idempotency key of each INSERT or COPY into a shard's foreign table.",
							   "Empty (the default): none.  Each statement is one append, with this key; set it anew before each statement.",
							   &ps_table_idempotency_key, "",
							   PGC_USERSET, 0, check_table_idempotency_key, NULL, NULL);
	DefineCustomIntVariable("persist_sink.table_write_memory",
							"Memory an INSERT or COPY into a shard's foreign table holds its rows in.",
							"Past it, the statement's rows are sorted on disk (temporary files) and appended from there, a part at a time.",
							&ps_table_write_memory_kb, 64 * 1024, 1024, MAX_KILOBYTES,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.as_of",
							   "Time the shards' foreign tables are read as of.",
							   "Empty (the default): the table's option as_of, else the shard's upper - 1.",
							   &ps_table_as_of, "",
							   PGC_USERSET, 0, check_table_as_of, NULL, NULL);
	DefineCustomStringVariable("persist_sink.blob_store",
							   "Where new shards keep their parts: \"table\" (the blob table) or an object store's s3://bucket/prefix.",
							   "Read when a shard is created and recorded in its state: a shard keeps its store for good.",
							   &ps_blob_store, "table",
							   PGC_SIGHUP, 0, check_blob_store, NULL, NULL);
	DefineCustomStringVariable("persist_sink.s3_endpoint",
							   "URL of the S3 object store's endpoint, such as https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:7480.",
							   "Objects are addressed path-style: endpoint/bucket/key.",
							   &ps_s3_endpoint, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.s3_region",
							   "Region the object store's requests are signed for.",
							   NULL,
							   &ps_s3_region, "us-east-1",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("persist_sink.s3_credentials_file",
							   "File holding the object store's access key (first line) and secret (second line).",
							   "It must belong to the server's user and allow no access to others; it is read at every request.",
							   &ps_s3_credentials_file, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("persist_sink.s3_timeout",
							"Longest time one request to the object store may take.",
							NULL,
							&ps_s3_timeout_ms, 30 * 1000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	MarkGUCPrefixReserved("persist_sink");
}
