/*-------------------------------------------------------------------------
 *
 * fuzz_diff_base.h
 *	  The state that fuzz_state applies fuzzed state diffs to, shared with
 *	  gen_seeds, which writes its diff seeds against it.  Include after
 *	  codec/state.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef FUZZ_DIFF_BASE_H
#define FUZZ_DIFF_BASE_H

/* fuzz_state's modes of a state diff (the first byte's value modulo 4) */
#define FZ_STATE_MODE_DIFF_RAW		2	/* a diff as stored, applied to the base */
#define FZ_STATE_MODE_DIFF_FIXUP	3	/* the same with magic, version, CRC repaired */

/*
 * The encoding of the state that fuzz_state applies diffs to, and that
 * gen_seeds makes its diff seeds from: four batches, blob and inline
 * parts, one single_time batch and one empty.  Returns palloc'd bytes.
 */
static inline char *
fz_diff_base(uint64 *len)
{
	static char inline_bytes[] = "not a real part, but bytes the state keeps";
	PsPart		p[4];
	PsBatch		b[4];
	PsState		s;

	memset(p, 0, sizeof(p));
	memset(b, 0, sizeof(b));
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 3; i++)
	{
		p[i].encoded_size = 1000 * (i + 1);
		p[i].raw_size = 5000 * (i + 1);
		p[i].nupdates = 100 * (i + 1);
		p[i].diff_sum = i - 1;
		p[i].checksum = 0x1000 + i;
		ps_part_set_lower(&p[i], "key", 3);
	}
	p[0].blob_key = "d/00000000000000000000000000000001";
	p[1].blob_key = "d/00000000000000000000000000000002";
	p[2].blob_key = "d/00000000000000000000000000000003";
	p[3].inline_data = inline_bytes;
	p[3].encoded_size = sizeof(inline_bytes);
	p[3].nupdates = 2;
	b[0] = (PsBatch) {.lower = 0, .upper = 10, .since = 0, .nparts = 2, .parts = &p[0]};
	b[1] = (PsBatch) {.lower = 10, .upper = 20, .since = 5, .single_time = true, .time = 19,
	.nparts = 1, .parts = &p[2]};
	b[2] = (PsBatch) {.lower = 20, .upper = 30, .since = 5, .nparts = 1, .parts = &p[3]};
	b[3] = (PsBatch) {.lower = 30, .upper = 40, .since = 5, .nparts = 0, .parts = NULL};
	s.seqno = 41;
	s.upper = 40;
	s.since = 5;
	s.batches = b;
	s.nbatches = 4;
	return ps_state_encode(&s, len);
}

#endif							/* FUZZ_DIFF_BASE_H */
