/*-------------------------------------------------------------------------
 *
 * persist_sink.c
 *	  Module entry point: defines the settings, requests and sets up every
 *	  layer's shared memory, and registers the background workers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "base/background.h"
#include "base/settings.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/progress.h"
#include "shard/upper_wait.h"
#include "shard/stats.h"
#include "sink/sink.h"
#include "sql/sql.h"
#include "store/store.h"
#include "workers/workers.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Requests the shared memory and LWLocks of every subsystem. */
static void
ps_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ps_stats_shmem_size());
	RequestAddinShmemSpace(ps_compaction_shmem_size());
	RequestAddinShmemSpace(ps_debt_shmem_size());
	RequestAddinShmemSpace(ps_progress_shmem_size());
	RequestAddinShmemSpace(ps_upper_shmem_size());
	RequestAddinShmemSpace(ps_sink_shmem_size());
	RequestAddinShmemSpace(ps_idempotency_shmem_size());
	RequestAddinShmemSpace(ps_store_stats_shmem_size());
	RequestAddinShmemSpace(ps_object_disk_cache_shmem_size());
	RequestNamedLWLockTranche("persist_sink stats", 1);
	RequestNamedLWLockTranche("persist_sink compaction", 1);
	RequestNamedLWLockTranche("persist_sink debt", 1);
	RequestNamedLWLockTranche("persist_sink sink", 1);
	RequestNamedLWLockTranche("persist_sink object disk cache", 1);
}

/* Sets up (or attaches to) every subsystem's shared memory. */
static void
ps_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ps_stats_shmem_init();
	ps_compaction_shmem_init();
	ps_debt_shmem_init();
	ps_progress_shmem_init();
	ps_upper_shmem_init();
	ps_sink_shmem_init();
	ps_idempotency_shmem_init();
	ps_store_stats_shmem_init();
	ps_object_disk_cache_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Defines settings, hooks the shared memory and registers the workers
 * (logging those refused a slot); refuses to load outside
 * shared_preload_libraries.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("persist_sink must be loaded via shared_preload_libraries"),
				 errhint("Add persist_sink to shared_preload_libraries in postgresql.conf and restart the server.")));
	ps_define_settings();
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ps_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ps_shmem_startup;
	ps_stats_register_callbacks();
	ps_compaction_register_callbacks();
	ps_debt_register_callbacks();
	ps_sink_register_workers();
	ps_sink_install_hooks();
	ps_merge_ended_hook = ps_sink_state_row_released;
	ps_register_compactor();
	ps_utility_install_hook();
	ps_report_refused_workers();
}
