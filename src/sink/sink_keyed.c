/*-------------------------------------------------------------------------
 *
 * sink_keyed.c
 *	  The writer's side of idempotency keys: the digest of a write's
 *	  content, and the lookup of its key when it arrives.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "common/cryptohash.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"

#include "sink/sink.h"
#include "sink/sink_internal.h"
#include "store/store.h"

/* Raw bytes of the slices a write's digest is computed a slice at a time */
#define DIGEST_SLICE_RAW	(64 * 1024)

/* Writes sorted updates into a small chunk's payload; no lock. */
void
ps_sink_serialize_small(char *p, const PsUpdate *u, int n)
{
	for (int i = 0; i < n; i++)
	{
		memcpy(p, &u[i].key_len, 4);
		memcpy(p + 4, &u[i].val_len, 4);
		memcpy(p + 8, &u[i].diff, 8);
		p += 16;
		memcpy(p, u[i].key, u[i].key_len);
		p += u[i].key_len;
		memcpy(p, u[i].val, u[i].val_len);
		p += u[i].val_len;
	}
}

/* Raises the error of a failed digest computation; no lock. */
static void
raise_digest_error(pg_cryptohash_ctx *ctx)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not compute the SHA-256 digest of an append: %s",
					pg_cryptohash_error(ctx))));
}

/*
 * Fills digest (PS_DIGEST_LEN bytes) with the SHA-256 of a write's sorted,
 * consolidated updates as a small chunk holds them (every update's key and
 * val lengths, diff, key and val): equal content, equal digest, whichever
 * way the write goes.  The updates are laid out a slice at a time.  No
 * lock.
 */
void
ps_sink_write_digest(PsUpdateStream *s, char *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	StringInfoData buf;
	PsUpdateArrays slice;

	initStringInfo(&buf);
	if (pg_cryptohash_init(ctx) < 0)
		raise_digest_error(ctx);
	s->rewind(s);
	while (s->next(s, DIGEST_SLICE_RAW, &slice))
	{
		uint64		size = 0;

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < slice.n; i++)
			size += SMALL_UPDATE_SIZE(&slice.updates[i]);
		resetStringInfo(&buf);
		enlargeStringInfo(&buf, (int) size);
		ps_sink_serialize_small(buf.data, slice.updates, slice.n);
		if (pg_cryptohash_update(ctx, (uint8 *) buf.data, size) < 0)
			raise_digest_error(ctx);
	}
	if (pg_cryptohash_final(ctx, (uint8 *) digest, PS_DIGEST_LEN) < 0)
		raise_digest_error(ctx);
	pg_cryptohash_free(ctx);
	pfree(buf.data);
}

/*
 * Fills digest with the SHA-256 of a small write's chunk of size bytes; no
 * lock.
 */
void
ps_sink_chunk_digest(const char *payload, uint64 size, char *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) payload, size) < 0 ||
		pg_cryptohash_final(ctx, (uint8 *) digest, PS_DIGEST_LEN) < 0)
		raise_digest_error(ctx);
	pg_cryptohash_free(ctx);
}

/*
 * The 16-byte digest earlier libraries recorded for a key (CRC-32C of keys
 * and diffs, of vals, and the total size), to recognize a retry of a write
 * committed before the upgrade.  No lock.
 */
static void
legacy_digest(PsUpdateStream *s, char *digest)
{
	pg_crc32c	keys_crc;
	pg_crc32c	vals_crc;
	uint64		size = 0;
	PsUpdateArrays slice;

	INIT_CRC32C(keys_crc);
	INIT_CRC32C(vals_crc);
	s->rewind(s);
	while (s->next(s, DIGEST_SLICE_RAW, &slice))
	{
		for (int i = 0; i < slice.n; i++)
		{
			const PsUpdate *u = &slice.updates[i];

			COMP_CRC32C(keys_crc, &u->key_len, sizeof(u->key_len));
			COMP_CRC32C(keys_crc, u->key, u->key_len);
			COMP_CRC32C(keys_crc, &u->diff, sizeof(u->diff));
			COMP_CRC32C(vals_crc, &u->val_len, sizeof(u->val_len));
			COMP_CRC32C(vals_crc, u->val, u->val_len);
			size += (uint64) u->key_len + u->val_len + 1;
		}
	}
	FIN_CRC32C(keys_crc);
	FIN_CRC32C(vals_crc);
	memcpy(digest, &keys_crc, 4);
	memcpy(digest + 4, &vals_crc, 4);
	memcpy(digest + 8, &size, 8);
}

/* True if a stored key's digest is that of the write's content; no lock. */
static bool
same_content(const PsStoredKey *stored, PsUpdateStream *s, const char *digest)
{
	char		legacy[16];

	if (stored->digest_len == PS_DIGEST_LEN)
		return memcmp(stored->digest, digest, PS_DIGEST_LEN) == 0;
	if (stored->digest_len != sizeof(legacy))
		return false;
	legacy_digest(s, legacy);
	return memcmp(stored->digest, legacy, sizeof(legacy)) == 0;
}

/*
 * Settles a keyed call against the idempotency table when it arrives:
 * returns true with call->time set if a committed write of the shard used
 * the key for the same content (nothing is to be written; the WAL is
 * flushed up to where that write may be, so the time is durable), raises
 * PS005 if it used it for other content, and returns false if the key is
 * new.  First records whether a write with its key is in flight (a rival,
 * which may still commit) and the key epoch its lookup is made at.  The
 * worker settles the key again at the commit, against what committed
 * meanwhile.  Takes the sink lock, shared, briefly.
 */
bool
ps_sink_settled_on_arrival(SinkCall *call, PsUpdateStream *s)
{
	SinkTicket *proto = &call->proto;
	const char *key = proto->key;
	List	   *found;
	PsStoredKey *stored;

	/* first: a rival no longer in flight has committed, or failed */
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	call->rival_at_arrival = ps_sink_key_in_flight(call->shard, proto->key, -1);
	LWLockRelease(ps_sink->lock);
	/* before the lookup's snapshot */
	proto->key_epoch = ps_sink_key_epoch();
	found = ps_idempotency_get_many(call->shard, &key, 1, PS_DIGEST_LEN);
	if (found == NIL)
		return false;
	stored = linitial(found);
	if (call->digest_pending)
	{
		ps_sink_write_digest(s, proto->digest);
		call->digest_pending = false;
	}
	if (!same_content(stored, s, proto->digest))
	{
		SinkKnown	known = {0};

		known.keyed = true;
		known.key = proto->key;
		ps_sink_raise_outcome(SO_KEY_CONFLICT, call->shard, &known, NULL);
	}
	XLogFlush(ps_wal_inserted_end());
	call->time = stored->time;
	return true;
}
