/*-------------------------------------------------------------------------
 *
 * sql.h
 *	  The SQL layer: argument checks and the errors users see, shared by
 *	  every SQL-callable function.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_SQL_H
#define PS_SQL_H

#include "fmgr.h"
#include "utils/array.h"

#include "codec/state.h"
#include "codec/update.h"

/* args.c */
#define PS_WRITER(f)	ps_require_privilege(true, false, (f))
#define PS_READER(f)	ps_require_privilege(false, true, (f))
#define PS_ANY_ROLE(f)	ps_require_privilege(true, true, (f))

extern void ps_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern char *ps_name_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern char *ps_shard_arg(FunctionCallInfo fcinfo, int argno);
extern void ps_check_shard_name(const char *name);
extern char *ps_reader_arg(FunctionCallInfo fcinfo, int argno);
extern int64 ps_int64_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern int64 ps_timeout_ms_arg(FunctionCallInfo fcinfo, int argno);
extern void ps_check_new_upper(int64 expected_upper, int64 new_upper);
extern void ps_check_times(const PsUpdateArrays *w, int64 lower, int64 upper);
extern void ps_require_writable(const char *shard);
extern void ps_require_privilege(bool write, bool read, const char *function);
extern bool ps_has_privilege(bool write, bool read);
extern void ps_refuse_security_definer(FunctionCallInfo fcinfo, const char *function);
extern void ps_raise_upper_mismatch(const char *shard, int64 expected,
									int64 current) pg_attribute_noreturn();

/* arrays.c */
extern void ps_updates_from_arrays(PsUpdateArrays *out,
								   ArrayType *keys, ArrayType *vals,
								   ArrayType *times, ArrayType *diffs,
								   int64 fixed_time);
extern void ps_updates_sort_consolidate(PsUpdateArrays *w);
extern int	ps_array_elements(ArrayType *arr, const char *argname, Oid elemtype,
							  Datum **values);
extern void ps_check_array_length(int n, int expected, const char *argname,
								  const char *other);

/* reader_functions.c */

/* The window of updates a read_next reads (ps_reader_next_window) */
typedef struct PsReadWindow
{
	char	   *shard;
	PsState		state;
	int64		after;			/* the reader's position */
	int64		max_updates;
} PsReadWindow;

extern bool ps_reader_next_window(FunctionCallInfo fcinfo, int argno,
								  const char *function, PsReadWindow *w);

/* shard_privileges.c */

/* What a function needs of a shard */
typedef enum PsShardRight
{
	PS_SHARD_READ,				/* the read privilege */
	PS_SHARD_APPEND,			/* the append privilege, to append */
	PS_SHARD_MAINTAIN,			/* the append privilege, to compact */
	PS_SHARD_USE,				/* either of them */
	PS_SHARD_OWNER				/* the owner's privileges */
} PsShardRight;

extern void ps_require_shard_right(const char *shard, PsShardRight right,
								   const char *function);
extern bool ps_has_shard_right(const char *shard, PsShardRight right);
extern bool ps_shard_owned_by_user(const char *shard);
extern const char *ps_role_name(Oid role);
extern void ps_shard_owner_set(const char *shard);
extern void ps_shard_owner_forget(const char *shard);

/* functions.c */
struct ReturnSetInfo;
struct PsReaderStep;
extern Datum ps_bytea_datum(const char *data, uint32 len);
extern void ps_emit_reader_step(struct ReturnSetInfo *rsinfo,
								struct PsReaderStep *step);
extern void ps_emit_consolidated(struct ReturnSetInfo *rsinfo, const char *shard,
								 const PsState *state, int64 min_time,
								 int64 max_time, int64 time_floor,
								 bool by_time, int64 out_time);

/* rows.c */
struct HeapTupleData;
extern void ps_row_tuple(Datum row, struct HeapTupleData *tuple);

/* utility.c */
extern void ps_utility_install_hook(void);

/* writes.c */
extern int64 ps_sql_compare_and_append(const char *shard, PsUpdateArrays *w,
									   int64 expected_upper, int64 new_upper,
									   Oid row_type);
extern int64 ps_sql_append(const char *shard, PsUpdateArrays *w,
						   const char *idempotency_key);
struct PsUpdateStream;
extern int64 ps_sql_append_stream(const char *shard,
								  struct PsUpdateStream *(*sort) (void *arg),
								  void *arg, const char *idempotency_key);
extern const char *ps_idempotency_key_arg(FunctionCallInfo fcinfo, int argno);

#endif							/* PS_SQL_H */
