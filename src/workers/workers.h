/*-------------------------------------------------------------------------
 *
 * workers.h
 *	  The compactors: the background workers that keep shards size-tiered.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_WORKERS_H
#define PS_WORKERS_H

#include "fmgr.h"

extern void ps_register_compactor(void);
PGDLLEXPORT void ps_compactor_main(Datum arg);

#endif							/* PS_WORKERS_H */
