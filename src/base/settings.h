/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  The persist_sink.* configuration parameters.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SETTINGS_H
#define PS_SETTINGS_H

/* Most compactors persist_sink.compactors may ask for */
#define PS_MAX_COMPACTORS	8
#define PS_MAX_DATABASES	64	/* persist_sink.max_databases, at most */

extern int	ps_shared_batch_max_bytes;
extern int	ps_batch_interval_ms;
extern int	ps_inline_max_bytes;
extern int	ps_blob_target_size;
extern int	ps_compression_level;
extern int	ps_object_cache_kb;
extern int	ps_block_cache_kb;
extern int	ps_object_disk_cache_kb;
extern int	ps_shared_memory_kb;
extern int	ps_workers;
extern int	ps_compactors;
extern char *ps_database;
extern int	ps_worker_idle_timeout_ms;
extern int	ps_reader_lease_s;
extern int	ps_reader_cache_kb;

/* The longest lease of a reader, in seconds (24855 days): reader_lease's range */
#define PS_READER_LEASE_MAX_S 2147483647
extern int	ps_max_databases;
extern bool ps_compaction;
extern bool ps_subscriber;
extern int	ps_stats_max;
extern int	ps_slowdown_batches;
extern int	ps_stop_batches;

extern int	ps_idempotency_window_s;

extern char *ps_table_idempotency_key;
extern char *ps_table_as_of;
extern int	ps_table_write_memory_kb;

extern char *ps_blob_store;
extern char *ps_s3_endpoint;
extern char *ps_s3_region;
extern char *ps_s3_credentials_file;
extern int	ps_s3_timeout_ms;

extern bool ps_parse_time(const char *s, int64 *time);
extern bool ps_s3_parse_url(const char *url, char **bucket, char **prefix);
extern const char *ps_s3_prefix_problem(const char *prefix);
extern char *ps_new_shard_blob_store(void);
extern void ps_define_settings(void);

#endif							/* PS_SETTINGS_H */
