/*-------------------------------------------------------------------------
 *
 * s3.c
 *	  A client of an S3 object store (Amazon S3, Ceph's RADOS Gateway,
 *	  MinIO): PUT, ranged GET, DELETE and the listing of the objects under
 *	  a prefix, through libcurl, each request signed with AWS Signature
 *	  Version 4 and path-style URLs (endpoint/bucket/key).
 *
 * A request runs on the process's libcurl multi handle, which keeps its
 * connections open from one request to the next.  It is bounded by
 * persist_sink.s3_timeout and interruptible: the wait for the socket is cut
 * into slices of at most POLL_SLICE_MS, after each of which a pending
 * cancel or termination aborts the request (the handle is removed first)
 * and is served.  No palloc happens inside a libcurl callback, so no
 * error can jump over libcurl's stack: a response too large for its
 * buffer aborts the transfer and is reported once libcurl has returned.
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
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "base/settings.h"
#include "store/store.h"

/* Longest wait for the socket before interrupts are looked at */
#define POLL_SLICE_MS		100

/* Most bytes of a listing page kept (a page names at most 1000 objects) */
#define MAX_LISTING_BYTES	(8 * 1024 * 1024)

/* Most bytes of another answer's body kept (an error's XML, say) */
#define MAX_OTHER_BYTES		(64 * 1024)

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

/* One request: method, URL, body, and what came back */
typedef struct S3Request
{
	const char *method;
	char	   *url;
	const char *body;
	size_t		body_len;
	char	   *range;			/* "bytes=a-b", or NULL */
	ResponseBuffer response;
	long		status;
	CURLcode	result;
	char		curl_error[CURL_ERROR_SIZE];
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

/* Hex SHA-256 of len bytes at data (65 bytes with the NUL). */
static void
sha256_hex(const char *data, size_t len, char *hex)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "persist_sink: could not compute a SHA-256 digest: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
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

/* The URL of an object (key NULL: of the bucket), path style. */
static char *
object_url(const char *bucket, const char *key)
{
	StringInfoData url;
	const char *endpoint = ps_s3_endpoint;
	size_t		n;

	if (endpoint == NULL || endpoint[0] == '\0')
		config_error("persist_sink.s3_endpoint is empty.");
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

/* Sets up an easy handle for req, signed with creds; headers go to *headers. */
static CURL *
prepare_handle(S3Request *req, const S3Credentials *creds,
			   struct curl_slist **headers)
{
	char		payload_hash[2 * PG_SHA256_DIGEST_LENGTH + 1];
	char	   *sha_header;
	char	   *range_header = NULL;
	char	   *sigv4 = psprintf("aws:amz:%s:s3", ps_s3_region);
	CURL	   *h;

	sha256_hex(req->body ? req->body : "", req->body_len, payload_hash);
	sha_header = psprintf("x-amz-content-sha256: %s", payload_hash);
	if (req->range)
		range_header = psprintf("Range: %s", req->range);
	/* from here on nothing raises an error before the caller owns h */
	h = curl_easy_init();
	if (h == NULL)
		elog(ERROR, "persist_sink: could not create a libcurl handle");
	*headers = curl_slist_append(NULL, sha_header);
	if (range_header)
		*headers = curl_slist_append(*headers, range_header);
	/*
	 * An empty "Expect:" header (to spare a large PUT's 100-continue round
	 * trip) would be signed but not sent, so the store would refuse the
	 * signature: keep libcurl's.
	 */
	if (req->body)
		*headers = curl_slist_append(*headers, "Content-Type: application/octet-stream");
	curl_easy_setopt(h, CURLOPT_URL, req->url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, creds->access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, creds->secret);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, receive_bytes);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &req->response);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, req->curl_error);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) ps_s3_timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long) Min(ps_s3_timeout_ms, 10000));
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	if (req->body)
	{
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	}
	return h;
}

/*
 * Runs the easy handle h on the multi handle until it is done or its time
 * is up, serving interrupts between slices of the wait (an error then
 * propagates; the caller removes the handle).
 */
static void
run_handle(CURLM *m, CURL *h, S3Request *req)
{
	int			running = 1;
	CURLMsg    *msg;
	int			left;

	for (;;)
	{
		CURLMcode	rc = curl_multi_perform(m, &running);

		if (rc != CURLM_OK)
		{
			req->result = CURLE_FAILED_INIT;
			strlcpy(req->curl_error, curl_multi_strerror(rc), CURL_ERROR_SIZE);
			return;
		}
		if (running == 0)
			break;
		CHECK_FOR_INTERRUPTS();
		curl_multi_poll(m, NULL, 0, POLL_SLICE_MS, NULL);
	}
	while ((msg = curl_multi_info_read(m, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
			req->result = msg->data.result;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &req->status);
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

/* Raises the error of a request that failed: its transport, its size or its HTTP status. */
static void
report_failure(const S3Request *req, const char *what)
{
	char	   *code;
	char	   *message;

	if (req->response.overflow && req->status < 300)
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not %s: the object store answered more than expected", what)));
	if (req->result != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not %s: %s", what,
						req->curl_error[0] ? req->curl_error : curl_easy_strerror(req->result)),
				 req->result == CURLE_OPERATION_TIMEDOUT ?
				 errhint("persist_sink.s3_timeout is %d ms.", ps_s3_timeout_ms) : 0));
	code = xml_element(req->response.data, req->response.len, "Code", NULL);
	message = xml_element(req->response.data, req->response.len, "Message", NULL);
	ereport(ERROR,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("could not %s: HTTP status %ld%s%s", what, req->status,
					code ? ", " : "", code ? code : ""),
			 message && message[0] ? errdetail_internal("%s", message) : 0));
}

/*
 * Runs one request (its response buffer already sized) to its end; raises
 * an error if it could not be made, and serves interrupts meanwhile.  The
 * caller reads the status.
 */
static void
perform(S3Request *req, const char *what)
{
	CURLM	   *m = get_multi();
	S3Credentials creds = read_credentials();
	struct curl_slist *headers = NULL;
	CURL	   *h;

	if (ps_s3_region == NULL || ps_s3_region[0] == '\0')
		config_error("persist_sink.s3_region is empty.");
	req->result = CURLE_OK;
	req->status = 0;
	req->curl_error[0] = '\0';
	h = prepare_handle(req, &creds, &headers);
	explicit_bzero(creds.secret, strlen(creds.secret));
	curl_multi_add_handle(m, h);
	PG_TRY();
	{
		run_handle(m, h, req);
	}
	PG_FINALLY();
	{
		curl_multi_remove_handle(m, h);
		curl_easy_cleanup(h);
		curl_slist_free_all(headers);
	}
	PG_END_TRY();
	if (req->result != CURLE_OK)
		report_failure(req, what);
}

/* A request of method on key of bucket, its response buffer of cap bytes. */
static S3Request *
new_request(const char *method, const char *bucket, const char *key, size_t cap)
{
	S3Request  *req = palloc0(sizeof(S3Request));

	req->method = method;
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
	if (req->range)
		pfree(req->range);
	pfree(req);
}

/*
 * Puts len bytes at data as object key of bucket, replacing any object of
 * that key; returns once the store has acknowledged it (durable there).
 */
void
ps_s3_put(const char *bucket, const char *key, const char *data, size_t len)
{
	S3Request  *req = new_request("PUT", bucket, key, MAX_OTHER_BYTES);
	char	   *what = psprintf("PUT object \"%s\" to bucket \"%s\"", key, bucket);

	req->body = data;
	req->body_len = len;
	perform(req, what);
	if (req->status != 200)
		report_failure(req, what);
	free_request(req);
	pfree(what);
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
	S3Request  *req;
	char	   *what;
	bytea	   *out;

	if (len == 0)
	{
		out = MemoryContextAlloc(dest, VARHDRSZ);
		SET_VARSIZE(out, VARHDRSZ);
		return out;
	}
	what = psprintf("GET object \"%s\" of bucket \"%s\"", key, bucket);
	if (len > MaxAllocHugeSize - VARHDRSZ)
		elog(ERROR, "persist_sink: an object read of " UINT64_FORMAT " bytes is too large", len);
	req = new_request("GET", bucket, key, Max(len, MAX_OTHER_BYTES));
	req->range = psprintf("bytes=" UINT64_FORMAT "-" UINT64_FORMAT,
						  offset, offset + len - 1);
	perform(req, what);
	if (req->status == 404)
	{
		free_request(req);
		pfree(what);
		return NULL;
	}
	if (req->status != 206 && req->status != 200)
		report_failure(req, what);
	/* a whole object (200) is the range only if it starts at 0 */
	if ((req->status == 200 && offset != 0) || req->response.len != len)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("object \"%s\" of bucket \"%s\" is shorter than expected", key, bucket),
				 errdetail("Asked for " UINT64_FORMAT " bytes from byte " UINT64_FORMAT ", got %zu (HTTP status %ld).",
						   len, offset, req->response.len, req->status)));
	out = MemoryContextAllocHuge(dest, VARHDRSZ + len);
	SET_VARSIZE(out, VARHDRSZ + len);
	memcpy(VARDATA(out), req->response.data, len);
	free_request(req);
	pfree(what);
	return out;
}

/* Deletes object key of bucket; deleting an object that is not there succeeds. */
void
ps_s3_delete(const char *bucket, const char *key)
{
	S3Request  *req = new_request("DELETE", bucket, key, MAX_OTHER_BYTES);
	char	   *what = psprintf("DELETE object \"%s\" of bucket \"%s\"", key, bucket);

	perform(req, what);
	if (req->status != 204 && req->status != 200 && req->status != 404)
		report_failure(req, what);
	free_request(req);
	pfree(what);
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
	char	   *what = psprintf("list the objects of bucket \"%s\"", bucket);

	do
	{
		S3Request  *req = new_request("GET", bucket, NULL, MAX_LISTING_BYTES);
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
		perform(req, what);
		if (req->status != 200)
			report_failure(req, what);
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
	pfree(what);
	return keys;
}
