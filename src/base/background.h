/*-------------------------------------------------------------------------
 *
 * background.h
 *	  What every background worker of persist_sink does: registration,
 *	  start-up, and serving signals.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_BACKGROUND_H
#define PS_BACKGROUND_H

#include "access/xlogdefs.h"
#include "postgres_ext.h"

/*
 * What a worker started on demand for a database other than
 * persist_sink.database is told (bgw_extra): its database, and which
 * claim of its slot it was started for, so that one restarted after its
 * slot was given up or shared memory was reset does not serve a slot that
 * is no longer its own.
 */
typedef struct PsWorkerClaim
{
	Oid			database;
	uint64		incarnation;	/* of shared memory (ps_shmem_incarnation) */
	uint64		generation;		/* of the slot's claims */
} PsWorkerClaim;


/*
 * The claim a database other than persist_sink.database holds on a worker
 * slot (of the sink's, or of the compaction queue's slots), under the lock
 * of that array.
 */
typedef struct PsSlotClaim
{
	Oid			database;		/* the claiming database; InvalidOid if free */
	uint64		generation;		/* claims of the slot so far */
	bool		refused;		/* its worker could not be started */
	bool		stop;			/* its database is being dropped: exit */
} PsSlotClaim;

extern void ps_slot_claim(PsSlotClaim *slot, Oid database);
extern void ps_slot_free(PsSlotClaim *slot);
extern bool ps_slot_is_mine(PsSlotClaim *slot, PsWorkerClaim *claim,
							uint64 incarnation, bool running);

extern bool ps_register_worker(const char *function, const char *name,
							   const char *type, int arg);
extern void ps_report_refused_workers(void);
extern void ps_slot_start_worker(PsSlotClaim *slot, const char *function,
								 const char *type, int arg, uint64 incarnation);
extern bool ps_home_database(void);
extern void ps_worker_start(Oid database);
extern void ps_worker_check_signals(void);
extern XLogRecPtr ps_worker_commit(void);

#endif							/* PS_BACKGROUND_H */
