/*-------------------------------------------------------------------------
 *
 * fdw.h
 *	  Shards as tables: the foreign data wrapper persist_sink.
 *
 * A foreign table bound to a shard (option shard) takes INSERT and
 * COPY FROM, each statement one append through the sink, and answers
 * SELECT from the shard's snapshot, with conditions on the key pushed down
 * into the merge of its parts.  UPDATE, DELETE and TRUNCATE are refused.
 * IMPORT FOREIGN SCHEMA persist_sink makes a table per shard the caller may
 * read; ANALYZE samples a table's rows.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_FDW_H
#define PS_FDW_H

#include "access/tupdesc.h"
#include "fmgr.h"
#include "utils/relcache.h"

#include "codec/state.h"
#include "codec/update.h"
#include "sink/sink.h"

/* What a column of a shard's foreign table holds */
typedef enum PsColumnKind
{
	PS_COLUMN_DROPPED,
	PS_COLUMN_KEY,				/* an untyped shard's key (bytea or text) */
	PS_COLUMN_VAL,				/* an untyped shard's val (bytea or text) */
	PS_COLUMN_DIFF,				/* the update's diff (bigint) */
	PS_COLUMN_TIME,				/* its time (bigint), read only */
	PS_COLUMN_FIELD,			/* a field of a typed shard's composite rows */
	PS_COLUMN_ROW				/* a typed shard's row of a scalar type */
} PsColumnKind;

/* A foreign table bound to its shard (fdw_table.c) */
typedef struct PsShardTable
{
	char	   *shard;
	bool		has_as_of;		/* table option as_of */
	int64		as_of;
	Oid			row_type;		/* the shard's, InvalidOid if untyped */
	bool		composite;		/* row_type is a composite type */
	TupleDesc	row_desc;		/* its fields, if composite */
	Datum	   *fields;			/* and room for one row of them */
	bool	   *field_nulls;
	TupleDesc	desc;			/* the table's columns */
	PsColumnKind *kind;			/* per column */
	int		   *field;			/* PS_COLUMN_FIELD: the field's index */
	int			key_column;		/* untyped: the key's column, or -1 */
	bool		has_diff;		/* a column holds the diff */
	bool	   *unused;			/* per column: no need to make it (NULL:
								 * every column is made) */
	bool		needs_row;		/* a typed shard's row must be received */
	StringInfo	row_bytes;		/* where to make a row's key and val, valid
								 * until the next row (NULL: palloc'd) */
	FmgrInfo	send;			/* typed: the row type's send and receive */
	FmgrInfo	recv;
	Oid			recv_ioparam;
} PsShardTable;

/* fdw_table.c */
extern void ps_fdw_table_options(Oid relid, PsShardTable *t);
extern void ps_fdw_table_bind(PsShardTable *t, Relation rel, const PsState *state,
							  MemoryContext cxt);
extern void ps_fdw_row_to_update(PsShardTable *t, Datum *values, bool *isnull,
								 PsUpdate *u, bytea **row);
extern void ps_fdw_update_to_row(PsShardTable *t, const PsUpdate *u, int64 time,
								 StringInfo buf, Datum *values, bool *isnull);
extern int	ps_fdw_key_column(Relation rel);
extern void ps_fdw_table_use_columns(PsShardTable *t, List *columns,
									 MemoryContext cxt);
extern int64 ps_fdw_table_as_of(const PsShardTable *t, const PsState *state);
extern void ps_fdw_raise_negative(const char *shard, int64 diff) pg_attribute_noreturn();

/* fdw_spill.c */
typedef struct PsSpill PsSpill;
extern PsSpill *ps_spill_begin(int work_mem_kb, bool rereadable);
extern void ps_spill_add(PsSpill *sp, const PsUpdate *u);
extern PsUpdateStream *ps_spill_sort(PsSpill *sp);
extern void ps_spill_end(PsSpill *sp);

/* fdw_scan.c */
struct FdwRoutine;
extern void ps_fdw_scan_routine(struct FdwRoutine *routine);

/* fdw_aggregate.c */
struct PlannerInfo;
struct RelOptInfo;
struct ForeignPath;
struct ForeignScan;
struct ForeignScanState;
struct ExplainState;
struct Plan;
struct TupleTableSlot;
extern void ps_fdw_aggregate_routine(struct FdwRoutine *routine);
extern struct ForeignScan *ps_fdw_aggregate_plan(struct PlannerInfo *root,
												 struct RelOptInfo *rel,
												 struct ForeignPath *path,
												 List *tlist, struct Plan *outer_plan);
extern bool ps_fdw_aggregate_planned(struct ForeignScan *fs);
extern void ps_fdw_aggregate_begin(struct ForeignScanState *node, int eflags);
extern struct TupleTableSlot *ps_fdw_aggregate_next(struct ForeignScanState *node);
extern void ps_fdw_aggregate_rescan(struct ForeignScanState *node);
extern void ps_fdw_aggregate_end(struct ForeignScanState *node);
extern void ps_fdw_aggregate_explain(struct ForeignScanState *node,
									 struct ExplainState *es);

/* fdw_modify.c */
extern void ps_fdw_modify_routine(struct FdwRoutine *routine);

/* fdw_import.c */
extern void ps_fdw_import_routine(struct FdwRoutine *routine);

/* fdw_analyze.c */
struct RelOptInfo;
extern void ps_fdw_analyze_routine(struct FdwRoutine *routine);
extern void ps_fdw_estimate_size(struct RelOptInfo *baserel, Oid foreigntableid,
								 double fallback);

#endif							/* PS_FDW_H */
