/*-------------------------------------------------------------------------
 *
 * idempotency.c
 *	  The idempotency table: the keys of committed appends, each with the
 *	  time it was written at and a digest of its content.
 *
 * A key is written in the transaction of the interval that commits its
 * append, so it exists exactly when the append does.  Keys older than
 * persist_sink.idempotency_window are deleted by the compactor, the window
 * counted back from the oldest keyed write still in flight: each process
 * publishes when the keyed write it holds arrived (a writer while its
 * write waits, a sink worker for the writes it has sealed), as each
 * process publishes its xmin, so that a retry that arrived before its
 * original committed still finds the original's key when its own interval
 * commits, however long that is held back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "store/store.h"

/* Per process: when the keyed write it holds arrived, 0 if none */
static pg_atomic_uint64 *key_holds = NULL;

/* Shared memory of the holds: one per process that may append. */
Size
ps_idempotency_shmem_size(void)
{
	return mul_size(MaxBackends, sizeof(pg_atomic_uint64));
}

/* Creates or attaches the holds; caller holds AddinShmemInitLock. */
void
ps_idempotency_shmem_init(void)
{
	bool		found;

	key_holds = ShmemInitStruct("persist_sink idempotency holds",
								ps_idempotency_shmem_size(), &found);
	if (!found)
		for (int i = 0; i < MaxBackends; i++)
			pg_atomic_init_u64(&key_holds[i], 0);
}

/*
 * Publishes that this process holds a keyed write that arrived at
 * arrived_at (0: none any more); no lock needed, each process writes only
 * its own.
 */
void
ps_idempotency_hold(TimestampTz arrived_at)
{
	Assert(MyProc->pgprocno < MaxBackends);
	pg_atomic_write_u64(&key_holds[MyProc->pgprocno], (uint64) arrived_at);
}

/* The oldest arrival of a keyed write in flight, or now if none. */
static TimestampTz
oldest_hold(void)
{
	TimestampTz oldest = GetCurrentTimestamp();

	for (int i = 0; i < MaxBackends; i++)
	{
		TimestampTz t = (TimestampTz) pg_atomic_read_u64(&key_holds[i]);

		if (t != 0 && t < oldest)
			oldest = t;
	}
	return oldest;
}

/*
 * Deletes the keys written more than window_ms before the oldest keyed
 * write in flight arrived (or before now); returns how many.
 */
uint64
ps_idempotency_expire(int window_ms)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];

	values[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(oldest_hold(),
																-(int64) window_ms));
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.idempotency WHERE written_at OPERATOR(pg_catalog.<) $1",
			   1, types, values, false);
	return SPI_processed;
}

/* Deletes every key of a shard (it is dropped). */
void
ps_idempotency_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.idempotency WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}

/* A text[] or bytea[] datum of n C strings or n byte strings of len bytes. */
static Datum
array_datum(const char *const *items, int n, Oid elemtype, int len)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
	{
		if (elemtype == TEXTOID)
			elems[i] = CStringGetTextDatum(items[i]);
		else
		{
			bytea	   *b = palloc(VARHDRSZ + len);

			SET_VARSIZE(b, VARHDRSZ + len);
			memcpy(VARDATA(b), items[i], len);
			elems[i] = PointerGetDatum(b);
		}
	}
	return PointerGetDatum(construct_array(elems, n, elemtype, -1, false,
										   TYPALIGN_INT));
}

/*
 * The stored key of one key of a shard, or NULL, allocated in the caller's
 * context: one probe of the primary key, whose columns are text of the C
 * collation, in snap.
 */
static PsStoredKey *
probe_key(Relation rel, Oid pkey, Snapshot snap, const char *shard,
		  const char *key, int digest_len)
{
	ScanKeyData scankeys[2];
	SysScanDesc scan;
	HeapTuple	tup;
	PsStoredKey *k = NULL;

	ScanKeyEntryInitialize(&scankeys[0], 0, 1, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ,
						   CStringGetTextDatum(shard));
	ScanKeyEntryInitialize(&scankeys[1], 0, 2, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ,
						   CStringGetTextDatum(key));
	scan = systable_beginscan(rel, pkey, true, snap, 2, scankeys);
	if ((tup = systable_getnext(scan)) != NULL)
	{
		TupleDesc	desc = RelationGetDescr(rel);
		bool		isnull;
		bytea	   *d;

		k = palloc0(sizeof(PsStoredKey) + digest_len);
		k->key = pstrdup(key);	/* equal under the C collation: the same bytes */
		k->time = DatumGetInt64(heap_getattr(tup, 3, desc, &isnull));
		d = DatumGetByteaPP(heap_getattr(tup, 4, desc, &isnull));
		k->digest_len = Min(digest_len, VARSIZE_ANY_EXHDR(d));
		memcpy(k->digest, VARDATA_ANY(d), k->digest_len);
	}
	systable_endscan(scan);
	return k;
}

/*
 * Looks up n keys of a shard; returns the PsStoredKey of each one that is
 * there (at most digest_len bytes of digest each: keys recorded by earlier
 * libraries have a 16-byte checksum), allocated in the caller's context.
 * Reads the latest committed keys, in any isolation level: appends commit
 * in the sink's own transactions, never in the caller's.  One probe of the
 * primary key per key, without SPI: no plan to run, no user to switch to
 * and no user-defined code (the key columns compare as C text).
 */
List *
ps_idempotency_get_many(const char *shard, const char *const *keys, int n,
						int digest_len)
{
	Relation	rel;
	Oid			pkey;
	Snapshot	snap;
	List	   *found = NIL;

	if (n == 0)
		return NIL;
	rel = table_open(get_relname_relid("idempotency",
									   get_namespace_oid(PS_SCHEMA, false)),
					 AccessShareLock);
	pkey = RelationGetPrimaryKeyIndex(rel);
	if (!OidIsValid(pkey))
		elog(ERROR, "persist_sink: the idempotency table has no primary key");
	snap = RegisterSnapshot(GetLatestSnapshot());
	for (int i = 0; i < n; i++)
	{
		PsStoredKey *k = probe_key(rel, pkey, snap, shard, keys[i], digest_len);

		if (k != NULL)
			found = lappend(found, k);
	}
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Records n keys of appends committed (by the current transaction) at one
 * time, with their digests of digest_len bytes.
 */
void
ps_idempotency_put_many(const char *shard, const char *const *keys,
						const char *const *digests, int n, int64 time,
						int digest_len)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[4] = {TEXTOID, TEXTARRAYOID, INT8OID, BYTEAARRAYOID};
	Datum		values[4];

	if (n == 0)
		return;
	values[0] = CStringGetTextDatum(shard);
	values[1] = array_datum(keys, n, TEXTOID, 0);
	values[2] = Int64GetDatum(time);
	values[3] = array_datum(digests, n, BYTEAOID, digest_len);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.idempotency (shard, key, time, digest, written_at)"
			   " SELECT $1, k, $3, d, pg_catalog.now()"
			   " FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($4)) AS u(k, d)",
			   4, types, values, false);
}
