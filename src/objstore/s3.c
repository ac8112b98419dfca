/*-------------------------------------------------------------------------
 *
 * s3.c
 *	  A client of an S3 object store (Amazon S3, Ceph's RADOS Gateway,
 *	  MinIO): PUT, ranged GET, DELETE and the listing of the objects under
 *	  a prefix, through libcurl, each request signed with AWS Signature
 *	  Version 4 and path-style URLs (endpoint/bucket/key).  A key's path
 *	  is sent as it is (CURLOPT_PATH_AS_IS): libcurl never removes a "." or
 *	  ".." segment from it, so a request names the object its key names.
 *
 * A request runs on the process's libcurl multi handle, which keeps its
 * connections open from one request to the next; several PUTs may run on
 * it at once (ps_s3_put_all), each on a connection of its own, so their
 * round trips overlap.  A request is bounded by
 * persist_sink.s3_timeout, its retries included, and interruptible: the
 * wait for the socket is cut into slices of at most POLL_SLICE_MS, after
 * each of which a pending cancel or termination aborts the request (the
 * handle is removed first) and is served.  No palloc happens inside a
 * libcurl callback, so no error can jump over libcurl's stack: a response
 * too large for its buffer aborts the transfer and is reported once
 * libcurl has returned.
 *
 * Retries.  An attempt that fails transiently is made again: the
 * connection refused, reset or closed before an answer, an attempt timed
 * out (connecting, say) while the request has time left, or the store
 * answering 500, 502, 503 (SlowDown too), 504 or 429 (another store's
 * throttling).  Before retry n the request waits RETRY_FIRST_MS doubled
 * n - 1 times, at most RETRY_MAX_MS, each wait taken at random between
 * half of that and all of it (so that processes failing together do not
 * retry together), on the process's latch: a cancel or termination is
 * served at once, and a wake-up meant for the caller is passed on.  The
 * last wait is cut short to leave the last attempt RETRY_LAST_MS, and no
 * attempt is begun with less left: a store that stays down fails the
 * request when persist_sink.s3_timeout is spent, with the last attempt's
 * error.  Any other answer (403, a 404 where the request needs the
 * object, 400, ...) fails at once.  Every kind of request is safe to
 * repeat here: a PUT writes a key never reused, with the same bytes, a
 * GET and a listing change nothing, and a DELETE of an object already
 * gone succeeds.
 *
 * Every request is counted, after its retries, in the object store's
 * figures (store_stats.c), its retries as they are made; a failed one
 * with its error's message, which names the bucket and the object but
 * never the credentials.
 *
 * The credentials are read from persist_sink.s3_credentials_file at every
 * request (so a rotation takes effect at once): the access key on the
 * first line, the secret on the second.  The file must belong to the
 * server's user and allow no access to its group or others, as
 * ssl_key_file; neither line is ever put in a message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <curl/curl.h>

#include "common/cryptohash.h"
#include "common/pg_prng.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "base/settings.h"
#include "objstore/objstore.h"

/* Longest wait for the socket before interrupts are looked at */
#define POLL_SLICE_MS		100

/* Most bytes of a listing page kept (a page names at most 1000 objects) */
#define MAX_LISTING_BYTES	(8 * 1024 * 1024)

/* Most PUTs ps_s3_put_all makes at once */
#define PS_S3_PUTS_AT_ONCE	8

/* Most bytes of another answer's body kept (an error's XML, say) */
#define MAX_OTHER_BYTES		(64 * 1024)

/* The wait before the first retry, doubled before each next, up to the cap */
#define RETRY_FIRST_MS		50
#define RETRY_MAX_MS		1000

/* Least time of the request left for an attempt: no retry with less */
#define RETRY_LAST_MS		50

/* The process's multi handle, its connection cache; NULL until first used */
static CURLM *multi = NULL;

/* Where a response's body goes: a buffer sized before the request */
typedef struct ResponseBuffer
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		overflow;		/* more came than cap: the transfer aborted */
} ResponseBuffer;

/* One request: its kind, method, URL, body, and what came back */
typedef struct S3Request
{
	PsStoreRequest kind;
	const char *method;
	char	   *url;
	const char *body;
	size_t		body_len;
	char		payload_hash[2 * PG_SHA256_DIGEST_LENGTH + 1];
	char	   *range;			/* "bytes=a-b", or NULL */
	bool		if_absent;		/* a PUT only if no object has the key */
	char	   *what;			/* what it does, for its error message */
	bool		done;			/* answered as its kind expects */
	int			attempts;		/* made so far */
	ResponseBuffer response;	/* of the last attempt */
	long		status;
	CURLcode	result;
	char		curl_error[CURL_ERROR_SIZE];
	long		failed_status;	/* the last failing status the store
								 * answered with (0: none yet), */
	char	   *failed_code;	/* and its error's Code and Message */
	char	   *failed_message;
} S3Request;

/* The credentials of the credentials file */
typedef struct S3Credentials
{
	char	   *access_key;
	char	   *secret;
} S3Credentials;

/* libcurl's write callback: appends to the request's buffer, never allocating. */
static size_t
receive_bytes(char *ptr, size_t size, size_t nmemb, void *arg)
{
	ResponseBuffer *buf = arg;
	size_t		n = size * nmemb;

	if (buf->len + n > buf->cap)
	{
		buf->overflow = true;
		return 0;				/* libcurl aborts with CURLE_WRITE_ERROR */
	}
	memcpy(buf->data + buf->len, ptr, n);
	buf->len += n;
	return n;
}

/* Reports an error of the object store's configuration. */
static void
config_error(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIG_FILE_ERROR),
			 errmsg("the object store is not configured"),
			 errdetail_internal("%s", detail),
			 errhint("Set persist_sink.s3_endpoint, persist_sink.s3_region and persist_sink.s3_credentials_file.")));
}

/*
 * Reads the credentials file: the access key on its first line, the secret
 * on its second.  Refuses a file others may read.
 */
static S3Credentials
read_credentials(void)
{
	const char *path = ps_s3_credentials_file;
	struct stat st;
	FILE	   *f;
	char		line[2][256];
	S3Credentials creds;

	if (path == NULL || path[0] == '\0')
		config_error("persist_sink.s3_credentials_file is empty.");
	if (stat(path, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read the object store's credentials file \"%s\": %m", path)));
	if (!S_ISREG(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("the object store's credentials file \"%s\" is not a regular file", path)));
	if (st.st_uid != geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("the object store's credentials file \"%s\" may be read by others", path),
				 errdetail("It must belong to the database server's user and allow no access to its group or others."),
				 errhint("chmod 0600 the file.")));
	f = AllocateFile(path, "r");
	if (f == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open the object store's credentials file \"%s\": %m", path)));
	for (int i = 0; i < 2; i++)
	{
		if (fgets(line[i], sizeof(line[i]), f) == NULL)
			line[i][0] = '\0';
		line[i][strcspn(line[i], "\r\n")] = '\0';
	}
	FreeFile(f);
	if (line[0][0] == '\0' || line[1][0] == '\0' || strchr(line[0], ':'))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("the object store's credentials file \"%s\" is malformed", path),
				 errdetail("It must hold the access key on its first line and the secret on its second.")));
	creds.access_key = pstrdup(line[0]);
	creds.secret = pstrdup(line[1]);
	explicit_bzero(line, sizeof(line));
	return creds;
}

/* The multi handle, made on first use. */
static CURLM *
get_multi(void)
{
	if (multi == NULL)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			elog(ERROR, "persist_sink: could not initialize libcurl");
		multi = curl_multi_init();
		if (multi == NULL)
			elog(ERROR, "persist_sink: could not create a libcurl multi handle");
	}
	return multi;
}

/* The SHA-256 of len bytes at data, into digest (PG_SHA256_DIGEST_LENGTH bytes). */
void
ps_sha256(const char *data, size_t len, uint8 *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "persist_sink: could not compute a SHA-256 digest: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/* Hex SHA-256 of len bytes at data (65 bytes with the NUL). */
static void
sha256_hex(const char *data, size_t len, char *hex)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	ps_sha256(data, len, digest);
	hex_encode((const char *) digest, sizeof(digest), hex);
	hex[2 * PG_SHA256_DIGEST_LENGTH] = '\0';
}

/* Appends s to buf URI-encoded as SigV4 wants: unreserved kept, '/' kept if keep_slash. */
static void
append_uri_encoded(StringInfo buf, const char *s, bool keep_slash)
{
	for (const unsigned char *p = (const unsigned char *) s; *p; p++)
	{
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			(*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
			*p == '.' || *p == '~' || (keep_slash && *p == '/'))
			appendStringInfoChar(buf, *p);
		else
			appendStringInfo(buf, "%%%02X", *p);
	}
}

/* Raises the configuration error of an empty endpoint or region. */
static void
check_settings(void)
{
	if (ps_s3_endpoint == NULL || ps_s3_endpoint[0] == '\0')
		config_error("persist_sink.s3_endpoint is empty.");
	if (ps_s3_region == NULL || ps_s3_region[0] == '\0')
		config_error("persist_sink.s3_region is empty.");
}

/*
 * The URL of an object (key NULL: of the bucket), path style; an empty
 * endpoint is refused when the request is made (check_settings).
 */
static char *
object_url(const char *bucket, const char *key)
{
	StringInfoData url;
	const char *endpoint = ps_s3_endpoint ? ps_s3_endpoint : "";
	size_t		n;

	n = strlen(endpoint);
	while (n > 0 && endpoint[n - 1] == '/')
		n--;
	initStringInfo(&url);
	appendBinaryStringInfo(&url, endpoint, n);
	appendStringInfoChar(&url, '/');
	append_uri_encoded(&url, bucket, false);
	if (key)
	{
		appendStringInfoChar(&url, '/');
		append_uri_encoded(&url, key, true);
	}
	return url.data;
}

/*
 * Sets up an easy handle for an attempt of req of at most timeout_ms,
 * signed with creds; headers go to *headers.
 */
static CURL *
prepare_handle(S3Request *req, const S3Credentials *creds, long timeout_ms,
			   struct curl_slist **headers)
{
	char	   *sha_header;
	char	   *range_header = NULL;
	char	   *sigv4 = psprintf("aws:amz:%s:s3", ps_s3_region);
	CURL	   *h;

	sha_header = psprintf("x-amz-content-sha256: %s", req->payload_hash);
	if (req->range)
		range_header = psprintf("Range: %s", req->range);
	/* from here on nothing raises an error before the caller owns h */
	h = curl_easy_init();
	if (h == NULL)
		elog(ERROR, "persist_sink: could not create a libcurl handle");
	*headers = curl_slist_append(NULL, sha_header);
	if (range_header)
		*headers = curl_slist_append(*headers, range_header);
	if (req->if_absent)
		*headers = curl_slist_append(*headers, "If-None-Match: *");
	/*
	 * An empty "Expect:" header (to spare a large PUT's 100-continue round
	 * trip) would be signed but not sent, so the store would refuse the
	 * signature: keep libcurl's.
	 */
	if (req->body)
		*headers = curl_slist_append(*headers, "Content-Type: application/octet-stream");
	curl_easy_setopt(h, CURLOPT_URL, req->url);
	/* the path goes out as it is: no "/./" or "/../" is ever squashed */
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, creds->access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, creds->secret);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, receive_bytes);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &req->response);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, req->curl_error);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, Min(timeout_ms, 10000L));
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	if (req->body)
	{
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	}
	return h;
}

/* The caller's work while its puts wait (ps_s3_put_all_working), or NULL */
static PsPutWork put_work = NULL;
static void *put_work_arg = NULL;

/*
 * Runs the n easy handles on the multi handle m (each with its request as
 * its CURLOPT_PRIVATE) until all are done or out of time, serving
 * interrupts between slices of the wait (an error then propagates; the
 * caller removes the handles), and sets each request's result and status.
 * While put_work has steps left, it does one instead of each slice of the
 * wait.
 */
static void
run_handles(CURLM *m, CURL **handles, int n)
{
	int			running = 1;
	CURLMsg    *msg;
	int			left;

	for (;;)
	{
		CURLMcode	rc = curl_multi_perform(m, &running);

		if (rc != CURLM_OK)
		{
			for (int i = 0; i < n; i++)
			{
				S3Request  *req;

				curl_easy_getinfo(handles[i], CURLINFO_PRIVATE, (char **) &req);
				req->result = CURLE_FAILED_INIT;
				strlcpy(req->curl_error, curl_multi_strerror(rc), CURL_ERROR_SIZE);
			}
			return;
		}
		if (running == 0)
			break;
		CHECK_FOR_INTERRUPTS();
		if (put_work != NULL && put_work(put_work_arg))
			continue;
		curl_multi_poll(m, NULL, 0, POLL_SLICE_MS, NULL);
	}
	while ((msg = curl_multi_info_read(m, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE)
		{
			S3Request  *req;

			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
			req->result = msg->data.result;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &req->status);
		}
}

/* True if [s, end) starts with prefix. */
static bool
starts_with_text(const char *s, const char *end, const char *prefix)
{
	size_t		n = strlen(prefix);

	return (size_t) (end - s) >= n && memcmp(s, prefix, n) == 0;
}

/* The first occurrence of needle in [from, end), or NULL. */
static const char *
find_text(const char *from, const char *end, const char *needle)
{
	for (const char *p = from; p < end; p++)
		if (starts_with_text(p, end, needle))
			return p;
	return NULL;
}

/* Appends [s, e) to out with XML's five predefined entities decoded. */
static void
append_xml_text(StringInfo out, const char *s, const char *e)
{
	static const char *const entity[][2] = {
		{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"},
		{"&quot;", "\""}, {"&apos;", "'"},
	};

	while (s < e)
	{
		int			i = 0;

		while (i < lengthof(entity) && !starts_with_text(s, e, entity[i][0]))
			i++;
		if (i < lengthof(entity))
		{
			appendStringInfoString(out, entity[i][1]);
			s += strlen(entity[i][0]);
		}
		else
			appendStringInfoChar(out, *s++);
	}
}

/*
 * The text of the first element name in body[0, len), entities decoded;
 * NULL if there is none.  *after (if not NULL) is set past its end tag.
 */
static char *
xml_element(const char *body, size_t len, const char *name, const char **after)
{
	const char *end = body + len;
	char	   *open = psprintf("<%s>", name);
	char	   *close = psprintf("</%s>", name);
	const char *s = find_text(body, end, open);
	const char *e = s ? find_text(s + strlen(open), end, close) : NULL;
	StringInfoData out;

	if (e == NULL)
		return NULL;
	s += strlen(open);
	if (after)
		*after = e + strlen(close);
	initStringInfo(&out);
	append_xml_text(&out, s, e);
	pfree(open);
	pfree(close);
	return out.data;
}

/*
 * The hint of a request that failed: how often it was tried, or the
 * timeout its only attempt ran into; 0 if neither.
 */
static int
failure_hint(const S3Request *req)
{
	if (req->attempts > 1)
		return errhint("It was tried %d times within persist_sink.s3_timeout (%d ms).",
					   req->attempts, ps_s3_timeout_ms);
	if (req->result == CURLE_OPERATION_TIMEDOUT)
		return errhint("persist_sink.s3_timeout is %d ms.", ps_s3_timeout_ms);
	return 0;
}

/* The transport error of req's last attempt. */
static const char *
transport_error(const S3Request *req)
{
	return req->curl_error[0] ? req->curl_error : curl_easy_strerror(req->result);
}

/*
 * Keeps the failing status the store answered req's last attempt with, and
 * its error's Code and Message, if it answered one: reported if the
 * request runs out of time in a later attempt that gets no answer.
 */
static void
keep_failed_answer(S3Request *req)
{
	if (req->result != CURLE_OK || req->status < 300)
		return;
	req->failed_status = req->status;
	if (req->failed_code)
		pfree(req->failed_code);
	if (req->failed_message)
		pfree(req->failed_message);
	req->failed_code = xml_element(req->response.data, req->response.len, "Code", NULL);
	req->failed_message = xml_element(req->response.data, req->response.len, "Message", NULL);
}

/*
 * Raises the error of a request that failed: its transport, its size or
 * its HTTP status.  A request whose last attempt got no answer in the
 * time left, after the store answered an earlier one with a failing
 * status (503 SlowDown, say), raises that status: the store's reason,
 * with the last attempt's in the detail.
 */
static void
report_failure(const S3Request *req)
{
	const char *what = req->what;
	char	   *code;
	char	   *message;

	if (req->response.overflow && req->status < 300)
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not %s: the object store answered more than expected", what)));
	if (req->result != CURLE_OK && req->failed_status != 0)
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not %s: HTTP status %ld%s%s", what, req->failed_status,
						req->failed_code ? ", " : "",
						req->failed_code ? req->failed_code : ""),
				 errdetail_internal("%s%sThe last attempt got no answer: %s.",
									req->failed_message ? req->failed_message : "",
									req->failed_message && req->failed_message[0] ? " " : "",
									transport_error(req)),
				 failure_hint(req)));
	if (req->result != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not %s: %s", what, transport_error(req)),
				 failure_hint(req)));
	code = xml_element(req->response.data, req->response.len, "Code", NULL);
	message = xml_element(req->response.data, req->response.len, "Message", NULL);
	ereport(ERROR,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("could not %s: HTTP status %ld%s%s", what, req->status,
					code ? ", " : "", code ? code : ""),
			 message && message[0] ? errdetail_internal("%s", message) : 0,
			 failure_hint(req)));
}

/*
 * True if status is an answer a request of kind expects (its caller tells
 * them apart): the object or its range for a GET, or its absence; done
 * for a DELETE, also of an object already gone; 200 for the others.
 */
static bool
expected_status(PsStoreRequest kind, long status)
{
	switch (kind)
	{
		case PS_STORE_GET:
			return status == 200 || status == 206 || status == 404;
		case PS_STORE_DELETE:
			return status == 200 || status == 204 || status == 404;
		case PS_STORE_PUT:
		case PS_STORE_LIST:
			return status == 200;
	}
	return false;
}

/*
 * True if the last attempt of req failed in a way another may not: the
 * connection refused, reset or closed before a whole answer, the attempt
 * timed out, or the store failing or busy (500, 502, 503, 504, 429).
 */
static bool
transient_failure(const S3Request *req)
{
	switch (req->result)
	{
		case CURLE_OK:
			break;
		case CURLE_COULDNT_CONNECT:
		case CURLE_OPERATION_TIMEDOUT:
		case CURLE_SEND_ERROR:
		case CURLE_RECV_ERROR:
		case CURLE_GOT_NOTHING:
		case CURLE_PARTIAL_FILE:
			return true;
		default:
			return false;
	}
	return req->status == 500 || req->status == 502 || req->status == 503 ||
		req->status == 504 || req->status == 429;
}

/* Milliseconds since start. */
static long
ms_since(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return (long) INSTR_TIME_GET_MILLISEC(now);
}

/* Microseconds since start. */
static uint64
us_since(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_MICROSEC(now);
}

/*
 * Sleeps ms on the process's latch, serving interrupts; a wake-up of the
 * latch meanwhile is passed on to the caller's own wait by setting it
 * again at the end.
 */
static void
sleep_interruptibly(long ms)
{
	instr_time	start;
	bool		woken = false;
	long		left;

	INSTR_TIME_SET_CURRENT(start);
	while ((left = ms - ms_since(start)) > 0)
	{
		int			rc;

		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			woken = true;
		}
		CHECK_FOR_INTERRUPTS();
	}
	if (woken)
		SetLatch(MyLatch);
}

/*
 * Waits before the next attempt of req, the request having left_ms of its
 * time left (see Retries above), and counts the retry; false, without
 * waiting, if too little is left for another attempt.
 */
static bool
back_off(S3Request *req, long left_ms)
{
	long		cap = RETRY_FIRST_MS;
	long		wait;

	if (left_ms <= RETRY_LAST_MS)
		return false;
	for (int i = 1; i < req->attempts && cap < RETRY_MAX_MS; i++)
		cap *= 2;
	cap = Min(cap, RETRY_MAX_MS);
	wait = cap / 2 + (long) (pg_prng_double(&pg_global_prng_state) * (cap - cap / 2));
	wait = Min(wait, left_ms - RETRY_LAST_MS);
	ps_store_stats_retried(req->kind);
	sleep_interruptibly(wait);
	return true;
}

/* Readies req for another attempt. */
static void
reset_attempt(S3Request *req)
{
	req->result = CURLE_OK;
	req->status = 0;
	req->curl_error[0] = '\0';
	req->response.len = 0;
	req->response.overflow = false;
	req->attempts++;
}

/*
 * Makes one attempt of each of the n requests at once, of at most
 * timeout_ms, on the multi handle m (a connection each), serving
 * interrupts meanwhile (an error then propagates, the handles removed);
 * the caller reads their results and statuses.
 */
static void
attempt_all(CURLM *m, S3Request **reqs, int n, long timeout_ms)
{
	S3Credentials creds = read_credentials();
	struct curl_slist **headers = palloc0(sizeof(struct curl_slist *) * n);
	CURL	  **handles = palloc0(sizeof(CURL *) * n);
	volatile int added = 0;

	PG_TRY();
	{
		for (; added < n; added++)
		{
			reset_attempt(reqs[added]);
			handles[added] = prepare_handle(reqs[added], &creds, timeout_ms,
											&headers[added]);
			curl_easy_setopt(handles[added], CURLOPT_PRIVATE, reqs[added]);
			curl_multi_add_handle(m, handles[added]);
		}
		run_handles(m, handles, n);
	}
	PG_FINALLY();
	{
		explicit_bzero(creds.secret, strlen(creds.secret));
		for (int i = 0; i < added; i++)
		{
			curl_multi_remove_handle(m, handles[i]);
			curl_easy_cleanup(handles[i]);
			curl_slist_free_all(headers[i]);
		}
	}
	PG_END_TRY();
	pfree(headers);
	pfree(handles);
}

/* True if the last attempt of req got an answer its kind expects. */
static bool
answered(const S3Request *req)
{
	return req->result == CURLE_OK &&
		(expected_status(req->kind, req->status) ||
		 (req->if_absent && req->status == 412));
}

/*
 * Makes attempts of the n requests, begun at start, all at once, then
 * again of those that failed transiently, until the store gives each an
 * answer its kind expects (req->done set); raises the error of a request
 * whose failure is not transient, or of one still failing when
 * persist_sink.s3_timeout is spent.
 */
static void
attempt_until_answered(S3Request **reqs, int n, instr_time start)
{
	long		timeout_ms = ps_s3_timeout_ms;
	S3Request **pending = palloc(sizeof(S3Request *) * n);
	int			npending = n;
	CURLM	   *m;

	check_settings();
	m = get_multi();
	for (int i = 0; i < n; i++)
	{
		sha256_hex(reqs[i]->body ? reqs[i]->body : "", reqs[i]->body_len,
				   reqs[i]->payload_hash);
		pending[i] = reqs[i];
	}
	while (npending > 0)
	{
		int			again = 0;

		attempt_all(m, pending, npending, Max(timeout_ms - ms_since(start), 1));
		for (int i = 0; i < npending; i++)
		{
			S3Request  *req = pending[i];

			req->done = answered(req);
			if (!req->done && !transient_failure(req))
				report_failure(req);
			if (!req->done)
			{
				keep_failed_answer(req);
				pending[again++] = req;
			}
		}
		npending = again;
		if (npending == 0)
			break;
		if (!back_off(pending[0], timeout_ms - ms_since(start)))
			report_failure(pending[0]);
		for (int i = 1; i < npending; i++)
			ps_store_stats_retried(pending[i]->kind);
	}
	pfree(pending);
}

/*
 * Counts the n requests, begun at start, in the object store's figures:
 * those done as succeeded, the others as failed with failure.
 */
static void
count_ended(S3Request **reqs, int n, instr_time start, const char *failure)
{
	for (int i = 0; i < n; i++)
	{
		const S3Request *req = reqs[i];

		if (req->done)
			ps_store_stats_ended(req->kind,
								 req->body_len + (req->status < 300 ? req->response.len : 0),
								 us_since(start), NULL);
		else
			ps_store_stats_ended(req->kind, 0, us_since(start), failure);
	}
}

/*
 * Runs the n requests (their response buffers already sized) at once until
 * the store answers each as its kind expects, with retries (see Retries
 * above); raises the first error of one that could not be made, and
 * serves interrupts meanwhile.  Counts each in the object store's figures
 * once all have ended (when an error is raised, those not done as failed,
 * with its message).  The caller reads the statuses.
 */
static void
perform_all(S3Request **reqs, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	PG_TRY();
	{
		attempt_until_answered(reqs, n, start);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		count_ended(reqs, n, start, edata->message);
		FreeErrorData(edata);
		PG_RE_THROW();
	}
	PG_END_TRY();
	count_ended(reqs, n, start, NULL);
}

/* Runs one request: perform_all of it alone. */
static void
perform(S3Request *req)
{
	perform_all(&req, 1);
}

/*
 * A request of kind on key of bucket, its response buffer of cap bytes;
 * what (palloc'd, freed with it) says what it does in its error message.
 */
static S3Request *
new_request(PsStoreRequest kind, const char *bucket, const char *key, size_t cap,
			char *what)
{
	static const char *const methods[PS_STORE_REQUEST_KINDS] = {
		[PS_STORE_PUT] = "PUT",
		[PS_STORE_GET] = "GET",
		[PS_STORE_DELETE] = "DELETE",
		[PS_STORE_LIST] = "GET",
	};
	S3Request  *req = palloc0(sizeof(S3Request));

	req->kind = kind;
	req->what = what;
	req->method = methods[kind];
	req->url = object_url(bucket, key);
	req->response.cap = cap;
	req->response.data = palloc(Max(cap, 1));
	return req;
}

/* Frees a request. */
static void
free_request(S3Request *req)
{
	pfree(req->response.data);
	pfree(req->url);
	pfree(req->what);
	if (req->range)
		pfree(req->range);
	pfree(req);
}

/* A PUT of len bytes at data as object key of bucket. */
static S3Request *
new_put(const char *bucket, const char *key, const char *data, size_t len)
{
	S3Request  *req = new_request(PS_STORE_PUT, bucket, key, MAX_OTHER_BYTES,
								  psprintf("PUT object \"%s\" to bucket \"%s\"",
										   key, bucket));

	req->body = data;
	req->body_len = len;
	return req;
}

/*
 * Puts len bytes at data as object key of bucket, replacing any object of
 * that key; returns once the store has acknowledged it (durable there).
 */
void
ps_s3_put(const char *bucket, const char *key, const char *data, size_t len)
{
	ps_s3_put_all(bucket, &key, &data, &len, 1);
}

static void put_objects(const char *bucket, const char *const *keys,
						const char *const *datas, const size_t *lens, int n);

/*
 * Puts n objects of bucket at once, object keys[i] of lens[i] bytes at
 * datas[i], each on a connection of its own, at most PS_S3_PUTS_AT_ONCE
 * at a time; returns once the store has acknowledged every one, or raises
 * the error of one that could not be put (those put before stay: their
 * keys are never used again, and the collector of leaked objects takes
 * them).
 */
void
ps_s3_put_all(const char *bucket, const char *const *keys,
			  const char *const *datas, const size_t *lens, int n)
{
	ps_s3_put_all_working(bucket, keys, datas, lens, n, NULL, NULL);
}

/*
 * ps_s3_put_all, doing steps of work(arg) (if not NULL) while the requests
 * wait for the store: a caller encodes its next parts as these go.
 */
void
ps_s3_put_all_working(const char *bucket, const char *const *keys,
					  const char *const *datas, const size_t *lens, int n,
					  PsPutWork work, void *arg)
{
	Assert(put_work == NULL);
	put_work = work;
	put_work_arg = arg;
	PG_TRY();
	{
		put_objects(bucket, keys, datas, lens, n);
	}
	PG_FINALLY();
	{
		put_work = NULL;
		put_work_arg = NULL;
	}
	PG_END_TRY();
}

/* Puts n objects of bucket at once (see ps_s3_put_all). */
static void
put_objects(const char *bucket, const char *const *keys,
			const char *const *datas, const size_t *lens, int n)
{
	for (int from = 0; from < n; from += PS_S3_PUTS_AT_ONCE)
	{
		int			count = Min(n - from, PS_S3_PUTS_AT_ONCE);
		S3Request  *reqs[PS_S3_PUTS_AT_ONCE];

		for (int i = 0; i < count; i++)
			reqs[i] = new_put(bucket, keys[from + i], datas[from + i], lens[from + i]);
		perform_all(reqs, count);
		for (int i = 0; i < count; i++)
			free_request(reqs[i]);
	}
}

/*
 * Puts len bytes at data as object key of bucket unless an object has that
 * key (a conditional PUT, If-None-Match: *); false, writing nothing, if one
 * has.
 */
bool
ps_s3_put_if_absent(const char *bucket, const char *key, const char *data,
					size_t len)
{
	S3Request  *req = new_put(bucket, key, data, len);
	bool		put;

	req->if_absent = true;
	perform(req);
	put = req->status != 412;
	free_request(req);
	return put;
}

/*
 * Gets len bytes (len > 0) of object key of bucket from offset on, in a
 * bytea of dest.  Returns NULL if there is no such object.  If it has
 * fewer, raises an error if exact, else returns those it has.
 */
static bytea *
get_range(const char *bucket, const char *key, uint64 offset, uint64 len,
		  MemoryContext dest, bool exact)
{
	S3Request  *req;
	bytea	   *out;
	size_t		got;

	if (len > MaxAllocHugeSize - VARHDRSZ)
		elog(ERROR, "persist_sink: an object read of " UINT64_FORMAT " bytes is too large", len);
	req = new_request(PS_STORE_GET, bucket, key, Max(len, MAX_OTHER_BYTES),
					  psprintf("GET object \"%s\" of bucket \"%s\"", key, bucket));
	req->range = psprintf("bytes=" UINT64_FORMAT "-" UINT64_FORMAT,
						  offset, offset + len - 1);
	perform(req);
	if (req->status == 404)
	{
		free_request(req);
		return NULL;
	}
	/* a whole object (200) is the range only if it starts at 0 */
	got = (req->status == 416 || (req->status == 200 && offset != 0)) ? 0 :
		Min(req->response.len, len);
	if (exact && got != len)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("object \"%s\" of bucket \"%s\" is shorter than expected", key, bucket),
				 errdetail("Asked for " UINT64_FORMAT " bytes from byte " UINT64_FORMAT ", got %zu (HTTP status %ld).",
						   len, offset, req->response.len, req->status)));
	out = MemoryContextAllocHuge(dest, VARHDRSZ + got);
	SET_VARSIZE(out, VARHDRSZ + got);
	memcpy(VARDATA(out), req->response.data, got);
	free_request(req);
	return out;
}

/*
 * Gets len bytes of object key of bucket from offset on, in a bytea of
 * dest.  Returns NULL if there is no such object; raises an error if it is
 * shorter.  len 0 makes no request.
 */
bytea *
ps_s3_get(const char *bucket, const char *key, uint64 offset, uint64 len,
		  MemoryContext dest)
{
	bytea	   *out;

	if (len == 0)
	{
		out = MemoryContextAlloc(dest, VARHDRSZ);
		SET_VARSIZE(out, VARHDRSZ);
		return out;
	}
	return get_range(bucket, key, offset, len, dest, true);
}

/*
 * Gets the first len bytes (len > 0) of object key of bucket, or all it
 * has if it has fewer, in a bytea of dest; NULL if there is no such object.
 */
bytea *
ps_s3_get_upto(const char *bucket, const char *key, uint64 len,
			   MemoryContext dest)
{
	Assert(len > 0);
	return get_range(bucket, key, 0, len, dest, false);
}

/* Deletes object key of bucket; deleting an object that is not there succeeds. */
void
ps_s3_delete(const char *bucket, const char *key)
{
	S3Request  *req = new_request(PS_STORE_DELETE, bucket, key, MAX_OTHER_BYTES,
								  psprintf("DELETE object \"%s\" of bucket \"%s\"",
										   key, bucket));

	perform(req);
	free_request(req);
}

/*
 * Lists the keys of bucket's objects whose key starts with prefix, in key
 * order (a page of up to 1000 per request).
 */
List *
ps_s3_list(const char *bucket, const char *prefix)
{
	List	   *keys = NIL;
	char	   *token = NULL;

	do
	{
		S3Request  *req = new_request(PS_STORE_LIST, bucket, NULL, MAX_LISTING_BYTES,
									  psprintf("list the objects of bucket \"%s\"",
											   bucket));
		StringInfoData url;
		const char *p;
		char	   *key;
		char	   *truncated;

		/* the query in SigV4's canonical order: parameters sorted by name */
		initStringInfo(&url);
		appendStringInfo(&url, "%s?", req->url);
		if (token)
		{
			appendStringInfoString(&url, "continuation-token=");
			append_uri_encoded(&url, token, false);
			appendStringInfoChar(&url, '&');
		}
		appendStringInfoString(&url, "list-type=2&prefix=");
		append_uri_encoded(&url, prefix, false);
		pfree(req->url);
		req->url = url.data;
		perform(req);
		p = req->response.data;
		while ((key = xml_element(p, req->response.data + req->response.len - p,
								  "Key", &p)) != NULL)
			keys = lappend(keys, key);
		truncated = xml_element(req->response.data, req->response.len,
								"IsTruncated", NULL);
		token = NULL;
		if (truncated && strcmp(truncated, "true") == 0)
			token = xml_element(req->response.data, req->response.len,
								"NextContinuationToken", NULL);
		free_request(req);
	} while (token);
	return keys;
}
