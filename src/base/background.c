/*-------------------------------------------------------------------------
 *
 * background.c
 *	  Registration and start-up shared by the sink workers and the
 *	  compactor.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <malloc.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"

#include "base/background.h"
#include "base/settings.h"

/*
 * Registers a background worker of this library, connected to a database,
 * started once recovery is over and restarted a second after it exits.
 * Called from _PG_init.
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
 * Start-up of every worker: malloc keeps freed large blocks for reuse (a
 * worker allocates buffers of part size for every interval or merge, and
 * fresh pages cost a page fault each); SIGHUP rereads the configuration,
 * SIGTERM exits; then connects to persist_sink.database.
 */
void
ps_worker_start(void)
{
	mallopt(M_MMAP_THRESHOLD, 64 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024 * 1024);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(ps_database, NULL, 0);
}

/*
 * Serves pending interrupts (SIGTERM exits), then rereads the
 * configuration file if SIGHUP asked for it.
 */
void
ps_worker_check_signals(void)
{
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}
