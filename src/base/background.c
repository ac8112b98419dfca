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

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgworker_internals.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "base/background.h"
#include "base/settings.h"

/*
 * What registering this library's workers found, in the postmaster: how
 * many background workers were registered before the first of ours (the
 * logical replication launcher, libraries loaded before this one), how
 * many of ours were tried, and the names of those refused a slot.
 */
static int	registered_before = -1;
static int	tried = 0;
static int	refused = 0;
static StringInfo refused_names = NULL;

/* The number of background workers registered so far, in the postmaster. */
static int
registered_count(void)
{
	slist_iter	iter;
	int			n = 0;

	slist_foreach(iter, &BackgroundWorkerList)
		n++;
	return n;
}

/* Remembers a worker of ours that was refused a slot, for the log line. */
static void
note_refused(const char *name)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (refused_names == NULL)
		refused_names = makeStringInfo();
	appendStringInfo(refused_names, "%s\"%s\"", refused > 0 ? ", " : "", name);
	refused++;
	MemoryContextSwitchTo(old);
}

/* Claims a free slot for database; caller holds the slot array's lock. */
void
ps_slot_claim(PsSlotClaim *slot, Oid database)
{
	slot->database = database;
	slot->generation++;
	slot->refused = false;
	slot->stop = false;
}

/* Frees a claimed slot; caller holds the slot array's lock. */
void
ps_slot_free(PsSlotClaim *slot)
{
	ps_slot_claim(slot, InvalidOid);
}

/*
 * True if a slot is still that of claim, the claim its worker was started
 * for, and no other worker runs for it (running), bringing the claim up
 * to date: after shared memory was reset (its incarnation is not the
 * claim's), a restarted worker claims its slot again if it is free.
 * Caller holds the slot array's lock.
 */
bool
ps_slot_is_mine(PsSlotClaim *slot, PsWorkerClaim *claim, uint64 incarnation,
				bool running)
{
	if (claim->incarnation != incarnation && !OidIsValid(slot->database))
	{
		ps_slot_claim(slot, claim->database);
		claim->incarnation = incarnation;
		claim->generation = slot->generation;
	}
	return slot->database == claim->database && !running &&
		claim->incarnation == incarnation && slot->generation == claim->generation;
}

/*
 * Fills in a background worker of this library, connected to a database,
 * started once recovery is over and restarted a second after it fails.
 */
static void
fill_worker(BackgroundWorker *bgw, const char *function, const char *name,
			const char *type, int arg)
{
	memset(bgw, 0, sizeof(BackgroundWorker));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw->bgw_restart_time = 1;
	strlcpy(bgw->bgw_library_name, "persist_sink", BGW_MAXLEN);
	strlcpy(bgw->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(bgw->bgw_name, name, BGW_MAXLEN);
	strlcpy(bgw->bgw_type, type, BGW_MAXLEN);
	bgw->bgw_main_arg = Int32GetDatum(arg);
}

/*
 * Registers a background worker of this library, connected to a database,
 * started once recovery is over and restarted a second after it exits.
 * Returns false if the postmaster refused it a slot: RegisterBackgroundWorker
 * returns nothing, and logs only "too many background workers", so whether
 * it was added is read from the postmaster's list of registered workers.
 * Called from _PG_init.
 */
bool
ps_register_worker(const char *function, const char *name, const char *type,
				   int arg)
{
	BackgroundWorker bgw;
	bool		in_postmaster = IsPostmasterEnvironment && !IsUnderPostmaster;
	int			before;

	fill_worker(&bgw, function, name, type, arg);
	if (!in_postmaster)
	{
		/*
		 * An EXEC_BACKEND child loads the library again, and a single-user
		 * backend starts no worker: nothing to find out or report
		 */
		RegisterBackgroundWorker(&bgw);
		return true;
	}
	before = registered_count();
	if (registered_before < 0)
		registered_before = before;
	tried++;
	RegisterBackgroundWorker(&bgw);
	if (registered_count() > before)
		return true;
	note_refused(name);
	return false;
}

/*
 * Logs, once every worker of ours was tried, which of them were refused a
 * slot, and how large max_worker_processes would have to be.  Called at the
 * end of _PG_init.
 */
void
ps_report_refused_workers(void)
{
	if (refused == 0)
		return;
	ereport(LOG,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg_plural("persist_sink background worker refused a slot: %s",
						   "persist_sink background workers refused a slot: %s",
						   refused, refused_names->data),
			 errdetail("persist_sink registers %d background workers (persist_sink.workers = %d sink workers, persist_sink.compactors = %d compactors); max_worker_processes is %d; background workers registered before them: %d.",
					   tried, ps_workers, ps_compactors, max_worker_processes, registered_before),
			 errhint("Set max_worker_processes to at least %d and restart the server.",
					 registered_before + tried)));
}

/* The database ps_home_database() last answered for, its name and its answer */
static Oid	home_known_for = InvalidOid;
static char home_name[NAMEDATALEN];
static bool home = false;

/* Reads the name of this process's database and whether it is persist_sink.database. */
static void
learn_home(void)
{
	char	   *name = get_database_name(MyDatabaseId);

	strlcpy(home_name, name ? name : "", sizeof(home_name));
	home = name != NULL && strcmp(name, ps_database) == 0;
	home_known_for = MyDatabaseId;
}

/*
 * Starts the worker of a slot claimed by this process's database (not
 * persist_sink.database), now (RegisterDynamicBackgroundWorker), for the
 * slot's current claim in shared memory of that incarnation: restarted a
 * second after it fails, never after it exits by itself (status 0).  Its
 * name says which database it serves.  Marks the slot refused, and logs
 * what to raise, if no background worker slot is free.  Caller holds the
 * slot array's lock; ps_home_database() must have been called.
 */
void
ps_slot_start_worker(PsSlotClaim *slot, const char *function, const char *type,
					 int arg, uint64 incarnation)
{
	BackgroundWorker bgw;
	PsWorkerClaim claim;
	char		name[BGW_MAXLEN];

	StaticAssertStmt(sizeof(PsWorkerClaim) <= BGW_EXTRALEN,
					 "a worker's claim must fit in bgw_extra");
	/* a request is always of the requesting process's own database */
	Assert(home_known_for == MyDatabaseId && slot->database == MyDatabaseId);
	claim.database = MyDatabaseId;
	claim.incarnation = incarnation;
	claim.generation = slot->generation;
	snprintf(name, sizeof(name), "%s of database %s", type, home_name);
	fill_worker(&bgw, function, name, type, arg);
	memcpy(bgw.bgw_extra, &claim, sizeof(PsWorkerClaim));
	slot->refused = !RegisterDynamicBackgroundWorker(&bgw, NULL);
	if (slot->refused)
		ereport(LOG,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a %s for database \"%s\": no background worker slot is free",
						type, home_name),
				 errhint("Raise max_worker_processes (now %d) and restart the server.",
						 max_worker_processes)));
}

/*
 * True if this process's database is persist_sink.database, whose workers
 * always run (registered at server start); others get theirs on demand.
 * The first call of a backend reads the catalogs: make it in a
 * transaction, before taking a lock (a worker knows without).
 */
bool
ps_home_database(void)
{
	if (home_known_for != MyDatabaseId)
		learn_home();
	return home;
}

/*
 * Start-up of every worker: malloc keeps freed large blocks for reuse (a
 * worker allocates buffers of part size for every interval or merge, and
 * fresh pages cost a page fault each); SIGHUP rereads the configuration,
 * SIGTERM exits; then connects to database (persist_sink.database if
 * InvalidOid), with the worker's name ("persist_sink worker 1") as its
 * application_name, which pg_stat_activity shows.
 */
void
ps_worker_start(Oid database)
{
	mallopt(M_MMAP_THRESHOLD, 64 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024 * 1024);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	if (OidIsValid(database))
		BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
	else
		BackgroundWorkerInitializeConnection(ps_database, NULL, 0);
	StartTransactionCommand();
	learn_home();
	CommitTransactionCommand();
	SetConfigOption("application_name", MyBgworkerEntry->bgw_name,
					PGC_USERSET, PGC_S_OVERRIDE);
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

/*
 * Commits the worker's transaction without waiting for the WAL flush,
 * unless synchronous standbys are to be waited for (synchronous_commit
 * above local and synchronous_standby_names set), and returns where its
 * commit record ends.  For workers whose commits nobody is told of before
 * that point is flushed: a crash before it undoes the commit as if it had
 * never been made.
 */
XLogRecPtr
ps_worker_commit(void)
{
	bool		standbys = SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';

	if (!(SyncRepRequested() && standbys))
		(void) set_config_option("synchronous_commit", "off", PGC_SUSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	CommitTransactionCommand();
	return XactLastCommitEnd;
}
