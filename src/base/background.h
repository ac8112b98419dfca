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

extern bool ps_register_worker(const char *function, const char *name,
							   const char *type, int arg);
extern void ps_report_refused_workers(void);
extern void ps_worker_start(void);
extern void ps_worker_check_signals(void);
extern XLogRecPtr ps_worker_commit(void);

#endif							/* PS_BACKGROUND_H */
