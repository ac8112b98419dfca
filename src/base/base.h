/*-------------------------------------------------------------------------
 *
 * base.h
 *	  Names every layer shares: SQLSTATEs of the SQL contract and limits.
 *
 * The layers of src/, lowest first (test/check_layers enforces the order):
 * base, codec, objstore, store, shard, then sink and workers side by side,
 * sql, fdw; persist_sink.c sits on top and only wires them together.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_BASE_H
#define PS_BASE_H

/* SQLSTATEs of the SQL contract */
#define ERRCODE_PS_UPPER_MISMATCH	MAKE_SQLSTATE('P','S','0','0','1')
#define ERRCODE_PS_NOT_YET_READABLE	MAKE_SQLSTATE('P','S','0','0','2')
#define ERRCODE_PS_COMPACTED_AWAY	MAKE_SQLSTATE('P','S','0','0','3')
#define ERRCODE_PS_NEGATIVE_MULTIPLICITY MAKE_SQLSTATE('P','S','0','0','4')
#define ERRCODE_PS_IDEMPOTENCY_CONFLICT MAKE_SQLSTATE('P','S','0','0','5')

/* Longest idempotency key, in bytes */
#define PS_MAX_IDEMPOTENCY_KEY	200

/* Longest shard name, in bytes */
#define PS_MAX_SHARD_NAME	200

/*
 * Longest prefix of persist_sink.blob_store, in bytes: with a shard's
 * segment (three bytes per byte of its name at most) and a part's name,
 * an object's key stays within the 1024 bytes S3 allows.
 */
#define PS_MAX_PREFIX		256

/* Schema that holds the extension's objects */
#define PS_SCHEMA			"persist_sink"

#endif							/* PS_BASE_H */
