/*-------------------------------------------------------------------------
 *
 * object_store.c
 *	  check_object_store(url): a round trip through an S3 object store with
 *	  the server's settings, for a DBA to see that its endpoint, region,
 *	  credentials and bucket work and how long each kind of request takes;
 *	  take_object_store(url): this database becomes the store's owner.
 *
 * It PUTs a probe object of PROBE_BYTES random bytes under
 * prefix/persist_sink-check/, reads it back whole and a range of it,
 * lists it, deletes it, and checks each answer.  Any failure is the
 * store's error, raised as the requests raise it (SQLSTATE 58030).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "portability/instr_time.h"
#include "utils/builtins.h"

#include "base/settings.h"
#include "store/store.h"
#include "sql/sql.h"

/* Bytes of the probe object */
#define PROBE_BYTES			(64 * 1024)

/* The part of the probe the ranged read asks for */
#define RANGE_OFFSET		1000
#define RANGE_BYTES			4096

/* Milliseconds since start. */
static double
ms_since(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_MILLISEC(now);
}

/* Raises the error of a probe the store answered wrongly. */
static void
probe_wrong(const char *key, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("the object store answered the probe object \"%s\" wrongly: %s",
					key, what)));
}

/* True if the bytea holds len bytes equal to data. */
static bool
same_bytes(const bytea *b, const char *data, size_t len)
{
	return b != NULL && VARSIZE(b) - VARHDRSZ == len &&
		memcmp(VARDATA(b), data, len) == 0;
}

/* True if keys (a List of C strings) holds key. */
static bool
listed(List *keys, const char *key)
{
	ListCell   *lc;

	foreach(lc, keys)
		if (strcmp(lfirst(lc), key) == 0)
			return true;
	return false;
}

/* Splits url, an argument, into bucket and prefix; 22023 if it is not an object store's URL. */
static void
parse_url_argument(const char *url, char **bucket, char **prefix)
{
	if (!ps_s3_parse_url(url, bucket, prefix))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid object store URL \"%s\"", url),
				 errhint("Write s3://bucket or s3://bucket/prefix; a bucket name has 3 to 63 lower-case letters, digits, dots and hyphens.")));
}

PG_FUNCTION_INFO_V1(ps_check_object_store);

/*
 * check_object_store(url text): one PUT, GET, ranged GET, listing and
 * DELETE of a probe object; returns the bucket, the prefix and each
 * request's milliseconds.
 */
Datum
ps_check_object_store(PG_FUNCTION_ARGS)
{
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *bucket;
	char	   *prefix;
	char	   *dir;
	char	   *key;
	char	   *data = palloc(PROBE_BYTES);
	uint64		rnd;
	TupleDesc	desc;
	Datum		values[7];
	bool		nulls[7] = {0};
	instr_time	start;
	bytea	   *got;

	parse_url_argument(url, &bucket, &prefix);
	if (ps_s3_prefix_problem(prefix))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid object store URL \"%s\"", url),
				 errdetail("%s", ps_s3_prefix_problem(prefix))));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (!pg_strong_random(&rnd, sizeof(rnd)) || !pg_strong_random(data, PROBE_BYTES))
		elog(ERROR, "persist_sink: could not generate random bytes");
	dir = psprintf("%s%spersist_sink-check/", prefix, prefix[0] ? "/" : "");
	key = psprintf("%s%016llx", dir, (unsigned long long) rnd);

	INSTR_TIME_SET_CURRENT(start);
	ps_s3_put(bucket, key, data, PROBE_BYTES);
	values[2] = Float8GetDatum(ms_since(start));

	INSTR_TIME_SET_CURRENT(start);
	got = ps_s3_get(bucket, key, 0, PROBE_BYTES, CurrentMemoryContext);
	values[3] = Float8GetDatum(ms_since(start));
	if (!same_bytes(got, data, PROBE_BYTES))
		probe_wrong(key, got ? "its bytes differ from those put" : "it is missing");

	INSTR_TIME_SET_CURRENT(start);
	got = ps_s3_get(bucket, key, RANGE_OFFSET, RANGE_BYTES, CurrentMemoryContext);
	values[4] = Float8GetDatum(ms_since(start));
	if (!same_bytes(got, data + RANGE_OFFSET, RANGE_BYTES))
		probe_wrong(key, "a range of it differs from the bytes put");

	INSTR_TIME_SET_CURRENT(start);
	if (!listed(ps_s3_list(bucket, dir), key))
		probe_wrong(key, "its listing does not name it");
	values[5] = Float8GetDatum(ms_since(start));

	INSTR_TIME_SET_CURRENT(start);
	ps_s3_delete(bucket, key);
	values[6] = Float8GetDatum(ms_since(start));
	if (ps_s3_get(bucket, key, 0, 1, CurrentMemoryContext) != NULL)
		probe_wrong(key, "it is still there after its DELETE");

	values[0] = CStringGetTextDatum(bucket);
	values[1] = CStringGetTextDatum(prefix);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

PG_FUNCTION_INFO_V1(ps_take_object_store);

/*
 * take_object_store(url text): makes this database the owner of the store
 * (see objstore/store_owner.c), to write and collect under it after the one
 * that owned it is gone (a promoted logical replica, a restored dump);
 * returns which database owned it before, or NULL if none did.
 */
Datum
ps_take_object_store(PG_FUNCTION_ARGS)
{
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *bucket;
	char	   *prefix;
	char	   *before;

	parse_url_argument(url, &bucket, &prefix);
	before = ps_store_take(url);
	if (before == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(before));
}
