/*-------------------------------------------------------------------------
 *
 * persist_sink.h
 *	  Names shared by every subsystem: SQLSTATEs, shard-name rules, limits.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PERSIST_SINK_H
#define PERSIST_SINK_H

/* SQLSTATEs of the SQL contract */
#define ERRCODE_PS_UPPER_MISMATCH	MAKE_SQLSTATE('P','S','0','0','1')
#define ERRCODE_PS_NOT_YET_READABLE	MAKE_SQLSTATE('P','S','0','0','2')
#define ERRCODE_PS_COMPACTED_AWAY	MAKE_SQLSTATE('P','S','0','0','3')
#define ERRCODE_PS_NEGATIVE_MULTIPLICITY MAKE_SQLSTATE('P','S','0','0','4')

/* Longest shard name, in bytes */
#define PS_MAX_SHARD_NAME	200

/* Schema that holds the extension's objects */
#define PS_SCHEMA			"persist_sink"

#include "fmgr.h"

extern void ps_check_shard_name(const char *name);
extern void ps_register_worker(const char *function, const char *name,
							   const char *type, int arg);
extern char *ps_shard_arg(FunctionCallInfo fcinfo, int argno);
extern void ps_raise_upper_mismatch(const char *shard, int64 expected,
									int64 current) pg_attribute_noreturn();

#endif							/* PERSIST_SINK_H */
