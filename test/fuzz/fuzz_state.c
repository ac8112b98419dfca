/*-------------------------------------------------------------------------
 *
 * fuzz_state.c
 *	  libFuzzer harness of the state decoder (src/codec/state_codec.c).
 *
 * ps_state_decode must accept or reject any bytes without reading past them,
 * crashing or tripping a sanitizer, and a rejected state must leave only
 * allocations the caller can free (the harness frees what the decoder
 * filled, so ASan's leak checker sees any allocation the decoder lost).
 * When it accepts, encoding the state again and decoding the result must
 * give back an equal state, and encoding that must give the same bytes
 * (the encoder is deterministic).
 *
 * The first byte of an input picks how the rest is used (modulo 4):
 *	 0  raw: the rest is a stored state, as is;
 *	 1  fixup: the rest is a state whose magic, version and CRC-32C are
 *		repaired, so the fuzzer reaches the field parser;
 *	 2  diff: the rest is a state diff, applied to the state of
 *		fuzz_diff_base.h;
 *	 3  diff fixup: the same, its magic, version and CRC-32C repaired.
 *
 * ps_state_diff_apply must refuse a diff that does not apply and leave the
 * state as it was (and free what it decoded); a diff it applies must give
 * a state that encodes, decodes back to an equal one and encodes to the
 * same bytes.
 *
 * Built with -DFUZZ_CANONICAL, it also requires that a decoded state
 * encodes back to exactly the input bytes (that the decoder accepts only
 * canonical encodings).  That is stricter than the contract and off by
 * default.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include "codec/state.h"
#include "fuzz_diff_base.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Frees everything a (possibly partly) decoded state points to. */
static void
free_state(PsState *s)
{
	if (s->row_type)
		pfree(s->row_type);
	for (int i = 0; i < s->nbatches; i++)
	{
		PsBatch    *b = &s->batches[i];

		for (int j = 0; j < b->nparts; j++)
		{
			if (b->parts[j].blob_key)
				pfree(b->parts[j].blob_key);
			if (b->parts[j].inline_data)
				pfree(b->parts[j].inline_data);
		}
		if (b->parts)
			pfree(b->parts);
	}
	if (s->batches)
		pfree(s->batches);
	memset(s, 0, sizeof(PsState));
}

/* True if two optional C strings are equal. */
static bool
same_string(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Checks that two decoded states are equal in every field. */
static void
check_same_state(const PsState *a, const PsState *b)
{
	FZ_CHECK(a->seqno == b->seqno, "seqno differs");
	FZ_CHECK(a->upper == b->upper, "upper differs");
	FZ_CHECK(a->since == b->since, "since differs");
	FZ_CHECK(same_string(a->row_type, b->row_type), "row type \"%s\" vs \"%s\"",
			 a->row_type ? a->row_type : "(null)", b->row_type ? b->row_type : "(null)");
	FZ_CHECK(a->nbatches == b->nbatches, "batch count %d vs %d", a->nbatches, b->nbatches);
	for (int i = 0; i < a->nbatches; i++)
	{
		const PsBatch *x = &a->batches[i];
		const PsBatch *y = &b->batches[i];

		FZ_CHECK(x->lower == y->lower && x->upper == y->upper && x->since == y->since,
				 "batch %d bounds differ", i);
		FZ_CHECK(x->single_time == y->single_time, "batch %d single_time differs", i);
		FZ_CHECK(!x->single_time || x->time == y->time, "batch %d time differs", i);
		FZ_CHECK(x->nparts == y->nparts, "batch %d part count %d vs %d",
				 i, x->nparts, y->nparts);
		FZ_CHECK(ps_batch_updates(x) == ps_batch_updates(y) &&
				 ps_batch_encoded_bytes(x) == ps_batch_encoded_bytes(y) &&
				 ps_batch_is_inline(x) == ps_batch_is_inline(y),
				 "batch %d derived figures differ", i);
		for (int j = 0; j < x->nparts; j++)
		{
			const PsPart *p = &x->parts[j];
			const PsPart *q = &y->parts[j];

			FZ_CHECK(p->encoded_size == q->encoded_size && p->raw_size == q->raw_size &&
					 p->nupdates == q->nupdates && p->diff_sum == q->diff_sum &&
					 p->checksum == q->checksum,
					 "batch %d part %d facts differ", i, j);
			FZ_CHECK(same_string(p->blob_key, q->blob_key), "batch %d part %d blob key differs",
					 i, j);
			FZ_CHECK((p->inline_data == NULL) == (q->inline_data == NULL),
					 "batch %d part %d kind differs", i, j);
			FZ_CHECK((p->blob_key == NULL) != (p->inline_data == NULL),
					 "batch %d part %d is neither blob nor inline (or both)", i, j);
			if (p->inline_data)
				FZ_CHECK(memcmp(p->inline_data, q->inline_data, p->encoded_size) == 0,
						 "batch %d part %d inline bytes differ", i, j);
		}
	}
}

/* Decodes a state; on success checks its round trip. */
static void
decode_and_check(const char *data, uint64 len)
{
	PsState		s1;
	PsState		s2;
	const char *why = NULL;
	char	   *e1;
	char	   *e2;
	uint64		l1;
	uint64		l2;

	if (!ps_state_decode(data, len, &s1, &why))
	{
		FZ_CHECK(why != NULL, "decode failed without a message");
		free_state(&s1);
		return;
	}

	e1 = ps_state_encode(&s1, &l1);
#ifdef FUZZ_CANONICAL
	FZ_CHECK(l1 == len && memcmp(e1, data, len) == 0,
			 "accepted state (%llu bytes) does not encode back to itself (%llu bytes)",
			 (unsigned long long) len, (unsigned long long) l1);
#endif
	FZ_CHECK(ps_state_decode(e1, l1, &s2, &why), "re-encoded state does not decode: %s", why);
	check_same_state(&s1, &s2);
	e2 = ps_state_encode(&s2, &l2);
	FZ_CHECK(l1 == l2 && memcmp(e1, e2, l1) == 0,
			 "encoding the state twice gives different bytes");

	pfree(e1);
	pfree(e2);
	free_state(&s1);
	free_state(&s2);
}

/* Frees a batch array's parts arrays (and what they hold), each once. */
static void
free_parts_once(PsBatch *batches, int n, PsBatch *also, int nalso)
{
	for (int i = 0; i < n; i++)
	{
		bool		freed_before = false;

		for (int j = 0; j < i && !freed_before; j++)
			freed_before = batches[j].parts == batches[i].parts;
		for (int j = 0; j < nalso && !freed_before; j++)
			freed_before = also[j].parts == batches[i].parts;
		if (freed_before || batches[i].parts == NULL)
			continue;
		for (int k = 0; k < batches[i].nparts; k++)
		{
			if (batches[i].parts[k].blob_key)
				pfree(batches[i].parts[k].blob_key);
			if (batches[i].parts[k].inline_data)
				pfree(batches[i].parts[k].inline_data);
		}
		pfree(batches[i].parts);
	}
}

/* Applies a diff to the base state; checks a refusal or the result. */
static void
apply_and_check(const char *diff, uint64 len)
{
	uint64		base_len;
	char	   *base = fz_diff_base(&base_len);
	PsState		st;
	PsBatch    *before;
	int			nbefore;
	const char *why = NULL;

	FZ_CHECK(ps_state_decode(base, base_len, &st, &why), "base state: %s", why);
	nbefore = st.nbatches;
	before = palloc(sizeof(PsBatch) * nbefore);
	memcpy(before, st.batches, sizeof(PsBatch) * nbefore);
	if (!ps_state_diff_apply(&st, diff, len, &why))
	{
		uint64		again_len;
		char	   *again = ps_state_encode(&st, &again_len);

		FZ_CHECK(why != NULL, "diff refused without a message");
		FZ_CHECK(again_len == base_len && memcmp(again, base, base_len) == 0,
				 "a refused diff changed the state");
		pfree(again);
		pfree(before);
		free_state(&st);
		pfree(base);
		return;
	}
	FZ_CHECK(st.seqno == 42, "applied diff gives seqno %lld", (long long) st.seqno);
	{
		uint64		l1;
		uint64		l2;
		char	   *e1 = ps_state_encode(&st, &l1);
		PsState		s2;
		char	   *e2;

		FZ_CHECK(ps_state_decode(e1, l1, &s2, &why), "applied state does not decode: %s", why);
		check_same_state(&st, &s2);
		e2 = ps_state_encode(&s2, &l2);
		FZ_CHECK(l1 == l2 && memcmp(e1, e2, l1) == 0,
				 "encoding the applied state twice gives different bytes");
		pfree(e1);
		pfree(e2);
		free_state(&s2);
	}
	/* the result shares parts with the base's batches: free each array once */
	free_parts_once(st.batches, st.nbatches, NULL, 0);
	free_parts_once(before, nbefore, st.batches, st.nbatches);
	if (st.row_type)
		pfree(st.row_type);
	pfree(st.batches);
	pfree(before);
	pfree(base);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *bytes;
	size_t		len;
	int			mode;

	if (size < 1)
		return 0;
	mode = data[0] % 4;
	len = size - 1;
	bytes = fz_copy(data + 1, len);
	if (mode == 1 || mode == FZ_STATE_MODE_DIFF_FIXUP)
	{
		/* fixup: magic, version, and the CRC of everything before it */
		if (len >= 8)
		{
			store_le(bytes, mode == 1 ? PS_STATE_MAGIC : PS_DIFF_MAGIC, 4);
			store_le(bytes + 4, mode == 1 ? PS_STATE_VERSION : PS_DIFF_VERSION, 4);
		}
		if (len >= 4)
			store_le(bytes + len - 4, crc_of(bytes, len - 4, NULL, 0), 4);
	}
	if (mode <= 1)
		decode_and_check(bytes, len);
	else
		apply_and_check(bytes, len);
	free(bytes);
	return 0;
}
