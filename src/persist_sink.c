/*-------------------------------------------------------------------------
 *
 * persist_sink.c
 *	  Module entry point and shard-name rules.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "compact.h"
#include "persist_sink.h"
#include "settings.h"
#include "sink.h"
#include "stats.h"

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
	RequestAddinShmemSpace(ps_sink_shmem_size());
	RequestNamedLWLockTranche("persist_sink stats", 1);
	RequestNamedLWLockTranche("persist_sink sink", 1);
}

/* Sets up (or attaches to) every subsystem's shared memory. */
static void
ps_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ps_stats_shmem_init();
	ps_sink_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/* Defines settings; refuses to load outside shared_preload_libraries. */
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
	ps_sink_register_workers();
	ps_register_compactor();
}

/*
 * Registers a background worker of this library, connected to a database,
 * started once recovery is over and restarted a second after it exits.
 */
void
ps_register_worker(const char *function, const char *name, const char *type,
				   int arg)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 1;
	strlcpy(bgw.bgw_library_name, "persist_sink", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(bgw.bgw_name, name, BGW_MAXLEN);
	strlcpy(bgw.bgw_type, type, BGW_MAXLEN);
	bgw.bgw_main_arg = Int32GetDatum(arg);
	RegisterBackgroundWorker(&bgw);
}

/*
 * Raises an error unless name is a valid shard name: 1 to PS_MAX_SHARD_NAME
 * bytes, no '/' and no control characters.
 */
void
ps_check_shard_name(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0 || len > PS_MAX_SHARD_NAME)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid shard name \"%s\"", name),
				 errdetail("A shard name has 1 to %d bytes.", PS_MAX_SHARD_NAME)));
	for (const char *p = name; *p; p++)
		if (*p == '/' || (unsigned char) *p < 0x20 || *p == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid shard name \"%s\"", name),
					 errdetail("A shard name may not contain '/' or control characters.")));
}
