/*-------------------------------------------------------------------------
 *
 * workers.h
 *	  The compactors, the background workers that keep shards size-tiered,
 *	  and what becomes of the workers of a database that is dropped.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_WORKERS_H
#define PS_WORKERS_H

#include "fmgr.h"

extern void ps_register_compactor(void);
PGDLLEXPORT void ps_compactor_main(Datum arg);

/* databases.c */
extern void ps_databases_install_hook(void);

#endif							/* PS_WORKERS_H */
