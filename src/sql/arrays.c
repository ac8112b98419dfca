/*-------------------------------------------------------------------------
 *
 * arrays.c
 *	  Building a write's updates from the SQL arrays of a call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "shard/read.h"
#include "sql/sql.h"

/* Sorts and consolidates a write, refusing it (22003) when a diff sum leaves bigint. */
void
ps_updates_sort_consolidate(PsUpdateArrays *w)
{
	ps_updates_sort(w->updates, w->n);
	if (!ps_updates_consolidate(w->updates, &w->n))
		ps_raise_write_diff_overflow(NULL, false);
}

/* Deconstructs a one-dimensional array without NULLs; returns its length. */
int
ps_array_elements(ArrayType *arr, const char *argname, Oid elemtype,
			   Datum **values)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"%s\" must be a one-dimensional array", argname)));
	if (ARR_ELEMTYPE(arr) != elemtype)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("argument \"%s\" has elements of type %s, expected %s",
						argname, format_type_be(ARR_ELEMTYPE(arr)),
						format_type_be(elemtype))));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign,
					  values, &nulls, &n);
	for (int i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not contain NULL elements", argname),
					 errdetail("Element %d is NULL.", i + 1)));
	return n;
}

/* Raises an error unless an array has as many elements as `other`. */
void
ps_check_array_length(int n, int expected, const char *argname,
					  const char *other)
{
	if (n != expected)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"%s\" has %d elements, but \"%s\" has %d",
						argname, n, other, expected)));
}

/* Points a key or val at the bytes of a detoasted bytea or text datum. */
static void
datum_bytes(Datum d, const char **data, uint32 *len)
{
	struct varlena *v = PG_DETOAST_DATUM_PACKED(d);

	*data = VARDATA_ANY(v);
	*len = VARSIZE_ANY_EXHDR(v);
}

/*
 * Builds the updates of one write from its SQL arrays.  keys and vals are
 * bytea[] or text[] (both the same); times may be NULL, in which case every
 * update gets fixed_time; diffs may not be NULL.  Errors name the argument.
 */
void
ps_updates_from_arrays(PsUpdateArrays *out, ArrayType *keys, ArrayType *vals,
					   ArrayType *times, ArrayType *diffs, int64 fixed_time)
{
	Oid			bytes_type = ARR_ELEMTYPE(keys) == TEXTOID ? TEXTOID : BYTEAOID;
	Datum	   *key_d,
			   *val_d,
			   *time_d = NULL,
			   *diff_d;
	int			n;

	n = ps_array_elements(keys, "keys", bytes_type, &key_d);
	ps_check_array_length(ps_array_elements(vals, "vals", bytes_type, &val_d), n, "vals", "keys");
	if (times != NULL)
		ps_check_array_length(ps_array_elements(times, "times", INT8OID, &time_d), n, "times", "keys");
	ps_check_array_length(ps_array_elements(diffs, "diffs", INT8OID, &diff_d), n, "diffs", "keys");

	out->n = n;
	out->raw_bytes = 0;
	out->updates = palloc_extended(sizeof(PsUpdate) * Max(n, 1),
								   MCXT_ALLOC_HUGE);
	for (int i = 0; i < n; i++)
	{
		PsUpdate   *u = &out->updates[i];

		datum_bytes(key_d[i], &u->key, &u->key_len);
		datum_bytes(val_d[i], &u->val, &u->val_len);
		u->time = times ? DatumGetInt64(time_d[i]) : fixed_time;
		u->diff = DatumGetInt64(diff_d[i]);
		out->raw_bytes += PS_UPDATE_RAW_SIZE(u);
	}
}
