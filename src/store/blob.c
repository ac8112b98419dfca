/*-------------------------------------------------------------------------
 *
 * blob.c
 *	  The blob table: each part's bytes, keyed "<shard>/<random hex>", in
 *	  rows of PS_BLOB_CHUNK_BYTES (the last one shorter).
 *
 * A row per page-sized chunk, stored in the row itself (STORAGE PLAIN), is
 * a quarter of the rows and index entries TOAST's 2 kB chunks would make
 * of one value: writing, reading and deleting a part costs about a quarter
 * of the row operations.  A chunk is found by (key, chunk), so a slice of
 * a part is read by fetching only the chunks it is in.
 *
 * Until ALTER EXTENSION persist_sink UPDATE, an installation may still
 * hold version 0.5's blob table, one row (key, data) per part, with the
 * bytes out of line in TOAST; every function here also works on it.
 *
 * Shard names cannot contain '/', so a shard's keys are exactly those in
 * ["<shard>/", "<shard>0") under the key column's "C" collation.
 *
 * A part of a shard whose blob store is an object store is not in the
 * table: its key is the object's URL, "<store>/<shard>/<random hex>" (the
 * store an s3:// URL, the shard's name escaped into a segment that no
 * HTTP client, proxy or store rewrites: see ps_blob_shard_segment; keys
 * made before names were escaped are used as their states record them),
 * and every function here taking a key goes to the object store for such
 * a key (see ps_blob_is_object).  A part's key says where it is, so a
 * reader needs nothing but the key.  An object is deleted only under a
 * store this database owns (ps_blob_delete, objstore/store_owner.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "base/settings.h"
#include "store/store.h"

/*
 * The largest chunk row: tuple header, key of 4-byte length word, chunk
 * number, data length word and a whole chunk, each aligned as stored.
 * It must fit on a heap page by itself.
 */
#define LONGEST_KEY		(PS_MAX_SHARD_NAME + 1 + 32)
#define LONGEST_CHUNK_ROW \
	MAXALIGN(INTALIGN(INTALIGN(INTALIGN(MAXALIGN(SizeofHeapTupleHeader) + \
										VARHDRSZ + LONGEST_KEY) + \
						   sizeof(int32)) + VARHDRSZ) + PS_BLOB_CHUNK_BYTES)
StaticAssertDecl(LONGEST_CHUNK_ROW <= MaxHeapTupleSize,
				 "a blob chunk row must fit on a heap page");

/* True if key names an object in an object store, not blob rows. */
bool
ps_blob_is_object(const char *key)
{
	return strncmp(key, "s3://", 5) == 0;
}

/* Splits an object's key (an s3:// URL) into its bucket and object name. */
static void
object_of_key(const char *key, char **bucket, char **object)
{
	if (!ps_s3_parse_url(key, bucket, object) || **object == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("blob key \"%s\" is not an object's URL", key)));
}

/*
 * The path segment of shard under an object store: the bytes A-Z, a-z, 0-9,
 * '_' and '-' as they are, every other byte (the escape '~' too) as '~'
 * and two upper-case hex digits.  Distinct names give distinct segments,
 * and no client, proxy or store rewrites one ('.', '..', '%', '/', spaces
 * and bytes past ASCII never appear in it).  palloc'd.
 */
char *
ps_blob_shard_segment(const char *shard)
{
	static const char hex[] = "0123456789ABCDEF";
	StringInfoData seg;

	initStringInfo(&seg);
	for (const unsigned char *p = (const unsigned char *) shard; *p; p++)
	{
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			(*p >= '0' && *p <= '9') || *p == '_' || *p == '-')
			appendStringInfoChar(&seg, *p);
		else
		{
			appendStringInfoChar(&seg, '~');
			appendStringInfoChar(&seg, hex[*p >> 4]);
			appendStringInfoChar(&seg, hex[*p & 0x0F]);
		}
	}
	return seg.data;
}

/*
 * Makes a fresh blob key for a part of shard, whose parts are in store (an
 * object store's URL, or NULL for the blob table): "<shard>/<hex>" in the
 * table, "<store>/<escaped shard>/<hex>" in a store (the shard's segment
 * escaped by ps_blob_shard_segment).
 */
char *
ps_blob_new_key(const char *shard, const char *store)
{
	uint8		rnd[16];
	char		hex[33];

	if (!pg_strong_random(rnd, sizeof(rnd)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random blob key")));
	hex_encode((const char *) rnd, sizeof(rnd), hex);
	hex[32] = '\0';
	if (store)
		return psprintf("%s/%s/%s", store, ps_blob_shard_segment(shard), hex);
	return psprintf("%s/%s", shard, hex);
}

/* Number of chunks of a part of len bytes (at least one). */
static int32
chunk_count(uint64 len)
{
	return (int32) Max((len + PS_BLOB_CHUNK_BYTES - 1) / PS_BLOB_CHUNK_BYTES, 1);
}

/*
 * Inserts one part's bytes under key as blob rows, one statement for all
 * its chunks (each a slice of the one parameter).
 */
static void
insert_blob_rows(const char *key, const char *data, uint64 len)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr whole_plan = NULL;
	Oid			types[4] = {TEXTOID, BYTEAOID, INT4OID, INT4OID};
	bytea	   *b;
	Datum		values[4];

	Assert(len <= PG_INT32_MAX - VARHDRSZ);
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	values[0] = CStringGetTextDatum(key);
	values[1] = PointerGetDatum(b);
	values[2] = Int32GetDatum(PS_BLOB_CHUNK_BYTES);
	values[3] = Int32GetDatum(chunk_count(len) - 1);
	if (ps_sql_objects_have(PS_OBJ_BLOB_CHUNKS))
		ps_spi_run(&plan,
				   "INSERT INTO persist_sink.blob (key, chunk, data)"
				   " SELECT $1, c, pg_catalog.substr($2, c OPERATOR(pg_catalog.*) $3 OPERATOR(pg_catalog.+) 1, $3)"
				   " FROM pg_catalog.generate_series(0, $4) AS c",
				   4, types, values, false);
	else
		ps_spi_run(&whole_plan,
				   "INSERT INTO persist_sink.blob (key, data) VALUES ($1, $2)",
				   2, types, values, false);
	pfree(b);
}

/*
 * Splits the key of an object to put into its bucket and name, once its
 * store is found to be this database's (55000 if not: nothing goes under
 * another database's store).
 */
static void
object_to_put(const char *key, char **bucket, char **object)
{
	char	   *store = ps_store_of_object_key(key);

	if (store)
		ps_store_claim(store);
	object_of_key(key, bucket, object);
}

/* Stores one part's bytes under key: ps_blob_put_all of it alone. */
void
ps_blob_put(const char *key, const char *data, uint64 len)
{
	ps_blob_put_all(&key, &data, &len, 1);
}

/* Stores n parts' bytes: ps_blob_put_all_working with no work of its own. */
void
ps_blob_put_all(const char *const *keys, const char *const *datas,
				const uint64 *lens, int n)
{
	ps_blob_put_all_working(keys, datas, lens, n, NULL, NULL);
}

/*
 * Stores n parts' bytes, part i under keys[i] (lens[i] bytes at datas[i]):
 * blob rows one part after the other, objects of one bucket (a batch's
 * parts are all in its shard's store) at once (ps_s3_put_all_working, which
 * runs work(arg), if given, while they wait for the store).
 */
void
ps_blob_put_all_working(const char *const *keys, const char *const *datas,
						const uint64 *lens, int n, PsPutWork work, void *arg)
{
	char	   *bucket = NULL;
	const char **objects = palloc(sizeof(char *) * n);
	const char **object_datas = palloc(sizeof(char *) * n);
	size_t	   *sizes = palloc(sizeof(size_t) * n);
	int			nobjects = 0;

	for (int i = 0; i < n; i++)
	{
		char	   *b;
		char	   *object;

		if (!ps_blob_is_object(keys[i]))
		{
			insert_blob_rows(keys[i], datas[i], lens[i]);
			continue;
		}
		object_to_put(keys[i], &b, &object);
		if (bucket && strcmp(bucket, b) != 0)
		{
			ps_s3_put(b, object, datas[i], lens[i]);
			continue;
		}
		bucket = b;
		objects[nobjects] = object;
		object_datas[nobjects] = datas[i];
		sizes[nobjects++] = lens[i];
	}
	if (nobjects > 0)
		ps_s3_put_all_working(bucket, objects, object_datas, sizes, nobjects,
							  work, arg);
	pfree(objects);
	pfree(object_datas);
	pfree(sizes);
}

/*
 * Runs the statement that fetches chunks [first, last] of key in order
 * (columns chunk, data); returns how many it found.
 */
static uint64
fetch_chunks(const char *key, int32 first, int32 last, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT4OID, INT4OID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(key);
	values[1] = Int32GetDatum(first);
	values[2] = Int32GetDatum(last);
	ps_spi_run(&plan,
			   "SELECT chunk, data FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.=) $1"
			   " AND chunk OPERATOR(pg_catalog.>=) $2 AND chunk OPERATOR(pg_catalog.<=) $3"
			   " ORDER BY chunk",
			   3, types, values, read_only);
	return SPI_processed;
}

/*
 * Checks one chunk found by a fetch: it must be chunk want, of a whole
 * chunk's bytes (len) unless it is a part's last, which holds the rest of
 * a part of size bytes (size 0 when unknown: then the last one found,
 * last_found, is taken as the last, and may be short).  NULL, or why not.
 */
static char *
check_chunk(int32 chunk, int32 want_chunk, uint64 len, uint64 size,
			bool last_found)
{
	bool		last = size ? chunk == chunk_count(size) - 1 : last_found;
	uint64		want = PS_BLOB_CHUNK_BYTES;

	if (chunk != want_chunk)
		return psprintf("blob chunk %d is missing", want_chunk);
	if (last && size)
		want = size - (uint64) chunk * PS_BLOB_CHUNK_BYTES;
	if (last && !size ? len > want : len != want)
		return psprintf("blob chunk %d has %llu bytes, not %s%llu",
						chunk, (unsigned long long) len,
						last && !size ? "at most " : "",
						(unsigned long long) want);
	return NULL;
}

/*
 * Checks the chunks fetch_chunks found, numbered first on, with
 * check_chunk; count of them (0: as many as were found).  Returns NULL
 * with *bytes set to what they hold, or why not.
 */
static char *
check_chunks(int32 first, int32 count, uint64 size, uint64 *bytes)
{
	SPITupleTable *rows = SPI_tuptable;
	uint64		found = SPI_processed;

	*bytes = 0;
	for (uint64 i = 0; i < found; i++)
	{
		bool		isnull;
		int32		chunk = DatumGetInt32(SPI_getbinval(rows->vals[i], rows->tupdesc, 1, &isnull));
		bytea	   *data = DatumGetByteaPP(SPI_getbinval(rows->vals[i], rows->tupdesc, 2, &isnull));
		uint64		len = VARSIZE_ANY_EXHDR(data);
		char	   *why = check_chunk(chunk, first + (int32) i, len, size,
									  i == found - 1);

		if (why)
			return why;
		*bytes += len;
	}
	if (count > 0 && found < (uint64) count)
		return psprintf("blob chunk %d is missing", first + (int32) found);
	return NULL;
}

/*
 * Copies what the i-th chunk fetched (data, dlen bytes) holds of bytes
 * [from, from + len) of the chunks fetched (counted from the first one's
 * start) into result, where byte from goes first.
 */
static void
copy_chunk(bytea *result, uint64 from, uint64 len, uint64 i,
		   const char *data, uint64 dlen)
{
	uint64		start = i * PS_BLOB_CHUNK_BYTES;
	uint64		lo = Max(start, from);
	uint64		hi = Min(start + dlen, from + len);

	if (lo < hi)
		memcpy(VARDATA(result) + (lo - from), data + (lo - start), hi - lo);
}

/*
 * Copies bytes [from, from + len) of the chunks fetch_chunks found (counted
 * from the first one's start; check_chunks passed them) into a new bytea
 * in dest, each byte copied once.
 */
static bytea *
copy_chunks(uint64 from, uint64 len, MemoryContext dest)
{
	SPITupleTable *rows = SPI_tuptable;
	bytea	   *result = MemoryContextAlloc(dest, VARHDRSZ + len);

	SET_VARSIZE(result, VARHDRSZ + len);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		bytea	   *data = DatumGetByteaPP(SPI_getbinval(rows->vals[i], rows->tupdesc, 2, &isnull));

		copy_chunk(result, from, len, i, VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data));
	}
	return result;
}

/*
 * The blob table, opened with AccessShareLock as a statement would, and
 * its primary key (key, chunk).  The table's columns are key, chunk and
 * data, in that order, since 0.6 made it.
 */
static Relation
open_blob_table(Relation *index)
{
	Relation	rel;

	Oid			relid = get_relname_relid("blob", get_namespace_oid(PS_SCHEMA, false));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("persist_sink storage table \"%s.blob\" does not exist",
						PS_SCHEMA)));
	rel = table_open(relid, AccessShareLock);
	if (!OidIsValid(RelationGetPrimaryKeyIndex(rel)))
		elog(ERROR, "persist_sink: the blob table has no primary key");
	*index = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	return rel;
}

/* Closes what open_blob_table opened. */
static void
close_blob_table(Relation rel, Relation index)
{
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
}

/*
 * Starts an ordered scan, in the active snapshot, of the blob table's
 * primary key (key, chunk) for key's chunks from first to last.
 */
static SysScanDesc
begin_chunk_scan(Relation rel, Relation index, const char *key,
				 int32 first, int32 last)
{
	ScanKeyData keys[3];

	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, CStringGetTextDatum(key));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTGreaterEqualStrategyNumber,
						   InvalidOid, InvalidOid, F_INT4GE, Int32GetDatum(first));
	ScanKeyEntryInitialize(&keys[2], 0, 2, BTLessEqualStrategyNumber,
						   InvalidOid, InvalidOid, F_INT4LE, Int32GetDatum(last));
	return systable_beginscan_ordered(rel, index, GetActiveSnapshot(), 3, keys);
}

/*
 * The number and length of key's last chunk in the active snapshot, by a
 * backward scan of the blob table's primary key; false if it has none.
 */
static bool
scan_last_chunk(const char *key, int32 *last, int32 *last_len)
{
	Relation	index;
	Relation	rel = open_blob_table(&index);
	SysScanDesc scan = begin_chunk_scan(rel, index, key, 0, PG_INT32_MAX);
	HeapTuple	tuple = systable_getnext_ordered(scan, BackwardScanDirection);
	bool		isnull;

	if (tuple != NULL)
	{
		*last = DatumGetInt32(heap_getattr(tuple, 2, RelationGetDescr(rel), &isnull));
		*last_len = VARSIZE_ANY_EXHDR(DatumGetPointer(heap_getattr(tuple, 3,
																	 RelationGetDescr(rel),
																	 &isnull)));
	}
	systable_endscan_ordered(scan);
	close_blob_table(rel, index);
	return tuple != NULL;
}

/*
 * ps_blob_read's fetch of a read-only reader, as fetch_chunks, check_chunks
 * and copy_chunks do it but by a scan of the blob table's primary key in
 * the active snapshot: each chunk's bytes go from its buffer straight into
 * the slice, with no statement and no copy of the row.
 */
static bytea *
scan_chunks(const PsBlobRef *ref, int32 first, int32 last, uint64 from,
			uint64 len, char **why)
{
	Relation	index;
	Relation	rel = open_blob_table(&index);
	SysScanDesc scan = begin_chunk_scan(rel, index, ref->key, first, last);
	TupleDesc	desc = RelationGetDescr(rel);
	bytea	   *result = palloc(VARHDRSZ + len);
	int32		next = first;
	HeapTuple	tuple;

	SET_VARSIZE(result, VARHDRSZ + len);
	*why = NULL;
	while (*why == NULL &&
		   (tuple = systable_getnext_ordered(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		int32		chunk = DatumGetInt32(heap_getattr(tuple, 2, desc, &isnull));
		bytea	   *data = DatumGetByteaPP(heap_getattr(tuple, 3, desc, &isnull));
		uint64		dlen = VARSIZE_ANY_EXHDR(data);

		*why = check_chunk(chunk, next, dlen, ref->length, false);
		if (*why == NULL)
			copy_chunk(result, from, len, (uint64) (next - first),
					   VARDATA_ANY(data), dlen);
		next++;
	}
	if (*why == NULL && next <= last)
		*why = psprintf("blob chunk %d is missing", next);
	systable_endscan_ordered(scan);
	close_blob_table(rel, index);
	if (*why == NULL)
		return result;
	pfree(result);
	return NULL;
}

/* Copies bytes into a new bytea in dest. */
static bytea *
bytes_to_bytea(const char *bytes, uint64 len, MemoryContext dest)
{
	bytea	   *result = MemoryContextAlloc(dest, VARHDRSZ + len);

	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), bytes, len);
	return result;
}

/*
 * Fetches 0.5's one row of the part key: its stored value (a TOAST pointer
 * when out of line), in SPI_tuptable, which the caller frees; NULL if the
 * row is missing.
 */
static struct varlena *
fetch_whole_row(const char *key, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;

	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "SELECT data FROM persist_sink.blob WHERE key OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
		return NULL;
	return (struct varlena *)
		DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Fetches the len bytes of object of bucket into dest; NULL if it is
 * missing.  NULL with *why set if it has fewer or more bytes than len.
 */
static bytea *
get_whole_object(const char *bucket, const char *object, uint64 len,
				 MemoryContext dest, char **why)
{
	bytea	   *got = ps_s3_get_upto(bucket, object, len + 1, dest);
	uint64		bytes;

	if (got == NULL)
		return NULL;
	bytes = VARSIZE_ANY_EXHDR(got);
	if (bytes == len)
		return got;
	*why = bytes < len ?
		psprintf("object is " UINT64_FORMAT " bytes, shorter than the " UINT64_FORMAT " the shard state says",
				 bytes, len) :
		psprintf("object is longer than the " UINT64_FORMAT " bytes the shard state says",
				 len);
	pfree(got);
	return NULL;
}

/*
 * Fetches a part's bytes into dest; NULL if it has no row.  NULL with *why
 * set if its chunks do not make a part (one missing, or of the wrong size).
 * An object is read as the length its state gives (len); one of another
 * length is reported by *why.
 */
bytea *
ps_blob_get(const char *key, uint64 len, MemoryContext dest, bool read_only,
			char **why)
{
	struct varlena *stored;
	MemoryContext old;
	bytea	   *result;
	uint64		bytes;

	*why = NULL;
	if (ps_blob_is_object(key))
	{
		char	   *bucket;
		char	   *object;

		object_of_key(key, &bucket, &object);
		return get_whole_object(bucket, object, len, dest, why);
	}
	if (!ps_sql_objects_have(PS_OBJ_BLOB_CHUNKS))
	{
		stored = fetch_whole_row(key, read_only);
		if (stored == NULL)
			return NULL;
		old = MemoryContextSwitchTo(dest);
		result = (bytea *) pg_detoast_datum_copy(stored);
		MemoryContextSwitchTo(old);
		SPI_freetuptable(SPI_tuptable);
		return result;
	}
	if (fetch_chunks(key, 0, PG_INT32_MAX, read_only) == 0)
		return NULL;
	*why = check_chunks(0, 0, 0, &bytes);
	result = *why ? NULL : copy_chunks(0, bytes, dest);
	SPI_freetuptable(SPI_tuptable);
	return result;
}

/*
 * Looks up 0.5's one row of the part key into ref: a copy of its TOAST
 * pointer when its bytes are out of line, else of the (small) value
 * itself, allocated in dest.  False if the row is missing.
 */
static bool
open_whole_row(PsBlobRef *ref, const char *key, MemoryContext dest,
			   bool read_only)
{
	struct varlena *stored = fetch_whole_row(key, read_only);
	MemoryContext old;

	if (stored == NULL)
		return false;
	old = MemoryContextSwitchTo(dest);
	if (VARATT_IS_EXTERNAL_ONDISK(stored))
	{
		ref->whole_row = palloc(VARSIZE_EXTERNAL(stored));
		memcpy(ref->whole_row, stored, VARSIZE_EXTERNAL(stored));
		ref->length = toast_raw_datum_size(PointerGetDatum(stored)) - VARHDRSZ;
	}
	else
	{
		ref->whole_row = (struct varlena *) pg_detoast_datum_copy(stored);
		ref->length = VARSIZE_ANY_EXHDR(ref->whole_row);
	}
	MemoryContextSwitchTo(old);
	SPI_freetuptable(SPI_tuptable);
	return true;
}

/*
 * Starts reading a part a slice at a time: finds how long it is (from its
 * last chunk) without reading its bytes.  Allocates in dest; NULL if the
 * part has no row.  The slices must be read in the same snapshot, or
 * after the part's rows can no longer be deleted.  An object is taken to
 * be len bytes long (its state says so) without a request: its slices
 * are read, and checked, as they are needed.
 */
PsBlobRef *
ps_blob_open(const char *key, uint64 len, MemoryContext dest, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int32		last;
	int32		last_len;
	PsBlobRef  *ref = MemoryContextAllocZero(dest, sizeof(PsBlobRef));

	ref->key = MemoryContextStrdup(dest, key);
	ref->read_only = read_only;
	if (ps_blob_is_object(key))
	{
		MemoryContext old = MemoryContextSwitchTo(dest);

		object_of_key(key, &ref->bucket, &ref->object);
		MemoryContextSwitchTo(old);
		ref->length = len;
		return ref;
	}
	if (!ps_sql_objects_have(PS_OBJ_BLOB_CHUNKS))
	{
		if (open_whole_row(ref, key, dest, read_only))
			return ref;
		ps_blob_close(ref);
		return NULL;
	}
	if (read_only && ActiveSnapshotSet())
	{
		if (!scan_last_chunk(key, &last, &last_len))
		{
			ps_blob_close(ref);
			return NULL;
		}
		ref->length = (uint64) last * PS_BLOB_CHUNK_BYTES + last_len;
		return ref;
	}
	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "SELECT chunk, pg_catalog.length(data) FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.=) $1 ORDER BY chunk DESC LIMIT 1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
	{
		ps_blob_close(ref);
		return NULL;
	}
	last = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	last_len = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	ref->length = (uint64) last * PS_BLOB_CHUNK_BYTES + last_len;
	SPI_freetuptable(SPI_tuptable);
	return ref;
}

/*
 * ps_blob_open of a part whose length its state gives (len), without the
 * query for its length: a missing or short part is found when its chunks
 * are read (ps_blob_read reports a missing chunk, or one of the wrong
 * size).  0.5's table of one row per part is still looked up.
 */
PsBlobRef *
ps_blob_open_sized(const char *key, uint64 len, MemoryContext dest,
				   bool read_only)
{
	PsBlobRef  *ref;

	if (ps_blob_is_object(key) || !ps_sql_objects_have(PS_OBJ_BLOB_CHUNKS))
		return ps_blob_open(key, len, dest, read_only);
	ref = MemoryContextAllocZero(dest, sizeof(PsBlobRef));
	ref->key = MemoryContextStrdup(dest, key);
	ref->read_only = read_only;
	ref->length = len;
	return ref;
}

/* Raises the error of an object a state names that is missing or short. */
static void
raise_object_missing(const PsBlobRef *ref)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("object \"%s\" of bucket \"%s\" is missing",
					ref->object, ref->bucket)));
}

/*
 * How many bytes from offset on the window ref's reader read last holds
 * (0 if it does not hold offset).
 */
static uint64
bytes_in_window(const PsBlobRef *ref, uint64 offset)
{
	uint64		end;

	if (ref->window == NULL || offset < ref->window_offset)
		return 0;
	end = ref->window_offset + VARSIZE(ref->window) - VARHDRSZ;
	return offset < end ? end - offset : 0;
}

/*
 * Makes the window of the object ref names that holds bytes [offset,
 * offset + len) (within its length): with a cache of objects (the
 * process's, or the server's on disk), the whole cache windows they are
 * in, taking what the reader's last window holds of them (a block across
 * a window's end) and reading the rest through the caches
 * (object_cache.c); with neither, at least PS_OBJECT_WINDOW_BYTES from
 * offset on, by one ranged GET.
 */
static void
fill_object_window(PsBlobRef *ref, uint64 offset, uint64 len)
{
	MemoryContext cxt = GetMemoryChunkContext(ref);
	uint64		from = offset;
	uint64		bytes;
	bytea	   *got;

	if (ps_object_cache_kb > 0 || ps_object_disk_cache_on())
	{
		PsObjectRef object = {ref->key, ref->bucket, ref->object, ref->length};
		uint64		kept;

		from = offset / PS_OBJECT_WINDOW_BYTES * PS_OBJECT_WINDOW_BYTES;
		bytes = Min(((offset + len - 1) / PS_OBJECT_WINDOW_BYTES + 1) * PS_OBJECT_WINDOW_BYTES,
					ref->length) - from;
		got = MemoryContextAllocHuge(cxt, VARHDRSZ + bytes);
		SET_VARSIZE(got, VARHDRSZ + bytes);
		kept = Min(bytes_in_window(ref, from), bytes);
		if (kept > 0)
			memcpy(VARDATA(got), VARDATA(ref->window) + (from - ref->window_offset), kept);
		if (kept < bytes &&
			!ps_object_cache_read(&object, from + kept, bytes - kept, VARDATA(got) + kept))
			raise_object_missing(ref);
	}
	else
	{
		bytes = Min(Max(len, PS_OBJECT_WINDOW_BYTES), ref->length - offset);
		got = ps_s3_get(ref->bucket, ref->object, offset, bytes, cxt);
		if (got == NULL)
			raise_object_missing(ref);
	}
	if (ref->window)
		pfree(ref->window);
	ref->window = got;
	ref->window_offset = from;
}

/*
 * Reads bytes [offset, offset + len) of an object (within its length) as
 * a new bytea: from the window of it this reader read last if they are in
 * it, else from a new window (fill_object_window).  A reader going through
 * a part block by block so fetches each window once, however many parts
 * a merge reads in turn and whatever the caches hold meanwhile.
 */
static bytea *
read_object_slice(PsBlobRef *ref, uint64 offset, uint64 len)
{
	if (len == 0)
		return bytes_to_bytea("", 0, CurrentMemoryContext);
	if (bytes_in_window(ref, offset) < len)
		fill_object_window(ref, offset, len);
	return bytes_to_bytea(VARDATA(ref->window) + (offset - ref->window_offset),
						  len, CurrentMemoryContext);
}

/*
 * Reads up to len bytes at offset of the part ref names, fetching only the
 * chunks they are in; fewer at the part's end.  Returns them palloc'd as a
 * bytea, or NULL with *why set if those chunks do not make the part's
 * bytes (one missing, or of the wrong size).
 */
bytea *
ps_blob_read(PsBlobRef *ref, uint64 offset, uint64 len, char **why)
{
	int32		first;
	int32		last;
	uint64		bytes;
	bytea	   *slice;

	Assert(offset <= ref->length && len <= PG_INT32_MAX);
	CHECK_FOR_INTERRUPTS();
	*why = NULL;
	len = Min(len, ref->length - offset);
	if (ref->object)
		return read_object_slice(ref, offset, len);
	if (ref->whole_row && VARATT_IS_EXTERNAL_ONDISK(ref->whole_row))
		return (bytea *) detoast_attr_slice(ref->whole_row, (int32) offset, (int32) len);
	if (ref->whole_row)
		return bytes_to_bytea(VARDATA_ANY(ref->whole_row) + offset, len,
							  CurrentMemoryContext);
	if (len == 0)
		return bytes_to_bytea("", 0, CurrentMemoryContext);
	first = (int32) (offset / PS_BLOB_CHUNK_BYTES);
	last = (int32) ((offset + len - 1) / PS_BLOB_CHUNK_BYTES);
	if (ref->read_only && ActiveSnapshotSet())
		return scan_chunks(ref, first, last,
						   offset - (uint64) first * PS_BLOB_CHUNK_BYTES, len, why);
	fetch_chunks(ref->key, first, last, ref->read_only);
	*why = check_chunks(first, last - first + 1, ref->length, &bytes);
	slice = *why ? NULL : copy_chunks(offset - (uint64) first * PS_BLOB_CHUNK_BYTES,
									  len, CurrentMemoryContext);
	SPI_freetuptable(SPI_tuptable);
	return slice;
}

/* Frees what ps_blob_open allocated. */
void
ps_blob_close(PsBlobRef *ref)
{
	if (ref->whole_row)
		pfree(ref->whole_row);
	if (ref->object)
	{
		pfree(ref->bucket);
		pfree(ref->object);
	}
	if (ref->window)
		pfree(ref->window);
	pfree(ref->key);
	pfree(ref);
}

/*
 * Deletes one part's rows and returns true.  An object is deleted at once,
 * whatever becomes of the caller's transaction, and only if its store is
 * this database's (its owner marker names it, see objstore/store_owner.c): one
 * under another database's store, or under a store with no marker, is
 * left where it is, and false returned.
 */
bool
ps_blob_delete(const char *key)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	if (ps_blob_is_object(key))
	{
		char	   *bucket;
		char	   *object;

		if (!ps_store_may_delete(key))
			return false;
		object_of_key(key, &bucket, &object);
		ps_s3_delete(bucket, object);
		return true;
	}
	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.blob WHERE key OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
	return true;
}

/* Fills the key range of a shard's blob rows. */
static void
shard_range(const char *shard, Datum *values)
{
	values[0] = CStringGetTextDatum(psprintf("%s/", shard));
	values[1] = CStringGetTextDatum(psprintf("%s0", shard));
}

/* Deletes every blob row of shard; returns how many. */
uint64
ps_blob_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	shard_range(shard, values);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.>=) $1 AND key OPERATOR(pg_catalog.<) $2",
			   2, types, values, false);
	return SPI_processed;
}

/* Lists the key of every part of shard in the blob table, palloc'd in the caller's context. */
List *
ps_blob_shard_keys(const char *shard, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	List	   *keys = NIL;

	shard_range(shard, values);
	ps_spi_run(&plan,
			   "SELECT DISTINCT key FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.>=) $1 AND key OPERATOR(pg_catalog.<) $2",
			   2, types, values, read_only);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		keys = lappend(keys, key);
	}
	return keys;
}

/*
 * Lists the keys (URLs) of the objects under store (an object store's URL)
 * that belong to shard (to any shard if NULL), palloc'd in the caller's
 * context: those under the shard's escaped segment, where its new parts
 * go (a part put before names were escaped is where its key says).
 */
List *
ps_blob_store_keys(const char *store, const char *shard)
{
	char	   *bucket;
	char	   *prefix;
	char	   *shard_prefix;
	List	   *keys = NIL;
	ListCell   *lc;

	if (!ps_s3_parse_url(store, &bucket, &prefix))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("blob store \"%s\" is not an object store's URL", store)));
	if (shard)
	{
		char	   *segment = ps_blob_shard_segment(shard);

		shard_prefix = *prefix ? psprintf("%s/%s/", prefix, segment) :
			psprintf("%s/", segment);
	}
	else
		shard_prefix = *prefix ? psprintf("%s/", prefix) : "";
	foreach(lc, ps_s3_list(bucket, shard_prefix))
		keys = lappend(keys, psprintf("s3://%s/%s", bucket, (char *) lfirst(lc)));
	return keys;
}

/* Orders two blob keys a ListCell points to (for list_sort). */
static int
key_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/* Compares a blob key with the one a ListCell points to (for bsearch). */
static int
key_cell_cmp(const void *key, const void *cell)
{
	return strcmp(key, lfirst((const ListCell *) cell));
}

/* Sorts a List of blob keys (C strings), for ps_blob_keys_have. */
void
ps_blob_keys_sort(List *keys)
{
	list_sort(keys, key_cmp);
}

/* True if a List of blob keys sorted by ps_blob_keys_sort holds key. */
bool
ps_blob_keys_have(const List *sorted, const char *key)
{
	return sorted != NIL &&
		bsearch(key, sorted->elements, list_length(sorted), sizeof(ListCell),
				key_cell_cmp) != NULL;
}
