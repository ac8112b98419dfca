/*-------------------------------------------------------------------------
 *
 * update.c
 *	  Sorting and consolidating updates, and building them from SQL arrays.
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "common/int128.h"
#include "port/pg_bswap.h"
#include "update.h"

#ifndef FRONTEND
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "persist_sink.h"
#endif

/*
 * Compares two byte strings as memcmp, shorter first on a tie.  Strings of
 * 8 bytes or more that differ in their first 8 (most keys) are told apart by
 * one integer comparison, without a call to memcmp.
 */
static inline int
bytes_cmp(const char *a, uint32 alen, const char *b, uint32 blen)
{
	int			c;

	if (alen >= sizeof(uint64) && blen >= sizeof(uint64))
	{
		uint64		x;
		uint64		y;

		memcpy(&x, a, sizeof(uint64));
		memcpy(&y, b, sizeof(uint64));
		if (x != y)
		{
			x = pg_ntoh64(x);
			y = pg_ntoh64(y);
			return (x > y) - (x < y);
		}
	}
	c = memcmp(a, b, Min(alen, blen));
	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

/* Orders updates by (key, val); inline for the sort below. */
static inline int
cmp_kv(const PsUpdate *a, const PsUpdate *b)
{
	int			c = bytes_cmp(a->key, a->key_len, b->key, b->key_len);

	if (c != 0)
		return c;
	return bytes_cmp(a->val, a->val_len, b->val, b->val_len);
}

/* Orders updates by (key, val, time); inline for the sort below. */
static inline int
cmp_kvt(const PsUpdate *a, const PsUpdate *b)
{
	int			c = cmp_kv(a, b);

	if (c != 0)
		return c;
	return (a->time > b->time) - (a->time < b->time);
}

/* Orders updates by (key, val). */
int
ps_update_cmp_kv(const PsUpdate *a, const PsUpdate *b)
{
	return cmp_kv(a, b);
}

/* Orders updates by (key, val, time). */
int
ps_update_cmp_kvt(const PsUpdate *a, const PsUpdate *b)
{
	return cmp_kvt(a, b);
}

/* sort_updates(): a quicksort of PsUpdate with cmp_kvt inlined */
#define ST_SORT sort_updates
#define ST_ELEMENT_TYPE PsUpdate
#define ST_COMPARE(a, b) cmp_kvt(a, b)
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/* Sorts updates by (key, val, time). */
void
ps_updates_sort(PsUpdate *updates, int n)
{
	if (n > 1)
		sort_updates(updates, n);
}

/*
 * Sums the diffs of equal (key, val, time) in sorted updates and drops the
 * zeros, in place.  Returns false, leaving the array unspecified, if a sum
 * overflows int64.  Sums are taken in 128 bits, so only a total out of range
 * fails, whatever the order of the updates.
 */
bool
ps_updates_consolidate(PsUpdate *updates, int *n)
{
	int			out = 0;
	int			i = 0;

	while (i < *n)
	{
		PsUpdate	cur = updates[i++];
		INT128		sum = int64_to_int128(cur.diff);

		while (i < *n && ps_update_cmp_kvt(&cur, &updates[i]) == 0)
			int128_add_int64(&sum, updates[i++].diff);
		if (int128_compare(sum, int64_to_int128(PG_INT64_MAX)) > 0 ||
			int128_compare(sum, int64_to_int128(PG_INT64_MIN)) < 0)
			return false;
		cur.diff = int128_to_int64(sum);
		if (cur.diff != 0)
			updates[out++] = cur;
	}
	*n = out;
	return true;
}

#ifndef FRONTEND

/* Sorts and consolidates, raising an error when a diff sum overflows. */
void
ps_updates_sort_consolidate(PsUpdate *updates, int *n)
{
	ps_updates_sort(updates, *n);
	if (!ps_updates_consolidate(updates, n))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("sum of diffs out of range for type bigint"),
				 errdetail("Updates with the same key, val and time add up past the range of bigint.")));
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

#endif							/* !FRONTEND */
