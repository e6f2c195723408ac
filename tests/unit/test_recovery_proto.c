/* The recovery protocol codec (version 2): round trips, the exact wire
 * bytes, every malformed input, truncation at every byte, random mutation,
 * and the frames of a response read from a byte stream. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/recovery/proto.h"
#include "bus/transport/control.h"
#include "tests/common/codec_fuzz.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

static uint64_t rng_state;

static tb_recovery_proto_request_t sample_request(void)
{
	tb_recovery_proto_request_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 7;
	m.count = 100;
	m.epoch = 0x1122334455667788ull;
	m.first = 5000;
	return m;
}

static tb_recovery_proto_hello_t sample_hello(void)
{
	tb_recovery_proto_hello_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 7;
	strcpy(m.token, "s3cret");
	return m;
}

static tb_recovery_proto_welcome_t sample_welcome(void)
{
	tb_recovery_proto_welcome_t m = {.stream_id = 7, .max_count = 4096,
					 .epoch = 0x1122334455667788ull,
					 .first = 1000, .last = 5002};
	return m;
}

static tb_recovery_proto_begin_t sample_begin(void)
{
	tb_recovery_proto_begin_t m = {.stream_id = 7, .count = 3,
			       .epoch = 0x1122334455667788ull, .first = 5000};
	return m;
}

static tb_recovery_proto_end_t sample_end(void)
{
	tb_recovery_proto_end_t m = {.status = TB_RECOVERY_PROTO_END_COMPLETE,
			     .last_seq = 5002};
	return m;
}

static tb_recovery_proto_reject_t sample_reject(void)
{
	tb_recovery_proto_reject_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 7;
	m.reason = TB_RECOVERY_PROTO_REJ_TOO_OLD;
	m.earliest_seq = 4000000;
	strcpy(m.text, "sequences before 4000000 were dropped from the store");
	return m;
}

static int encode_sample(int type, uint8_t *buf, size_t cap)
{
	switch (type) {
	case TB_RECOVERY_PROTO_REQUEST: { tb_recovery_proto_request_t m = sample_request();
		return tb_recovery_proto_encode_request(buf, cap, &m); }
	case TB_RECOVERY_PROTO_RESPONSE_BEGIN: { tb_recovery_proto_begin_t m = sample_begin();
		return tb_recovery_proto_encode_begin(buf, cap, &m); }
	case TB_RECOVERY_PROTO_RESPONSE_END: { tb_recovery_proto_end_t m = sample_end();
		return tb_recovery_proto_encode_end(buf, cap, &m); }
	case TB_RECOVERY_PROTO_REJECT: { tb_recovery_proto_reject_t m = sample_reject();
		return tb_recovery_proto_encode_reject(buf, cap, &m); }
	case TB_RECOVERY_PROTO_HELLO: { tb_recovery_proto_hello_t m = sample_hello();
		return tb_recovery_proto_encode_hello(buf, cap, &m); }
	case TB_RECOVERY_PROTO_WELCOME: { tb_recovery_proto_welcome_t m = sample_welcome();
		return tb_recovery_proto_encode_welcome(buf, cap, &m); }
	}
	fail_msg("no sample for type %d", type);
	return -1;
}

static int encode_msg(const tb_recovery_proto_msg_t *m, uint8_t *buf, size_t cap)
{
	switch (m->type) {
	case TB_RECOVERY_PROTO_REQUEST:
		return tb_recovery_proto_encode_request(buf, cap, &m->request);
	case TB_RECOVERY_PROTO_RESPONSE_BEGIN:
		return tb_recovery_proto_encode_begin(buf, cap, &m->begin);
	case TB_RECOVERY_PROTO_RESPONSE_END:
		return tb_recovery_proto_encode_end(buf, cap, &m->end);
	case TB_RECOVERY_PROTO_REJECT:
		return tb_recovery_proto_encode_reject(buf, cap, &m->reject);
	case TB_RECOVERY_PROTO_HELLO:
		return tb_recovery_proto_encode_hello(buf, cap, &m->hello);
	case TB_RECOVERY_PROTO_WELCOME:
		return tb_recovery_proto_encode_welcome(buf, cap, &m->welcome);
	}
	return -1;
}

static const uint32_t sizes[TB_RECOVERY_PROTO_TYPE_MAX + 1] = {0, 32, 32, 24, 224,
								 144, 40};

static int decode_bad(const uint8_t *buf, size_t len)
{
	tb_recovery_proto_msg_t out, before;
	int rc;

	memset(&out, 0x5a, sizeof(out));
	memcpy(&before, &out, sizeof(out));
	rc = tb_recovery_proto_decode(buf, len, &out);
	assert_true(rc < 0);
	assert_memory_equal(&out, &before, sizeof(out));
	return rc;
}

#define W(type, field) offsetof(tb_recovery_proto_wire_##type##_t, field)

/* ---------------------------------------------------------- round trips */

static void round_trip_request(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_request_t in = sample_request();
	tb_recovery_proto_msg_t out;

	(void)state;
	assert_int_equal(tb_recovery_proto_encode_request(buf, sizeof(buf), &in), 32);
	assert_int_equal(tb_recovery_proto_decode(buf, 32, &out), 32);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_REQUEST);
	assert_int_equal(out.version, TB_RECOVERY_PROTO_VERSION);
	assert_int_equal(out.length, 32);
	assert_int_equal(out.request.stream_id, 7);
	assert_int_equal(out.request.count, 100);
	assert_true(out.request.epoch == 0x1122334455667788ull);
	assert_true(out.request.first == 5000);

	/* Edges: the largest count, the last range that does not overflow. */
	in.count = TB_RECOVERY_PROTO_COUNT_MAX;
	in.first = UINT64_MAX - TB_RECOVERY_PROTO_COUNT_MAX;
	assert_int_equal(tb_recovery_proto_encode_request(buf, sizeof(buf), &in), 32);
	assert_int_equal(tb_recovery_proto_decode(buf, 32, &out), 32);
	assert_int_equal(out.request.count, TB_RECOVERY_PROTO_COUNT_MAX);
	assert_true(out.request.first == UINT64_MAX - TB_RECOVERY_PROTO_COUNT_MAX);
	in.count = 1;
	in.first = 1;
	assert_int_equal(tb_recovery_proto_encode_request(buf, sizeof(buf), &in), 32);
	assert_int_equal(tb_recovery_proto_decode(buf, 32, &out), 32);
	assert_int_equal(out.request.count, 1);
	assert_true(out.request.first == 1);
}

static void round_trip_hello_welcome(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_hello_t h = sample_hello();
	tb_recovery_proto_welcome_t w = sample_welcome();
	tb_recovery_proto_msg_t out;

	(void)state;
	assert_int_equal(tb_recovery_proto_encode_hello(buf, sizeof(buf), &h), 144);
	assert_int_equal(tb_recovery_proto_decode(buf, 144, &out), 144);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_HELLO);
	assert_int_equal(out.hello.stream_id, 7);
	assert_string_equal(out.hello.token, "s3cret");
	/* The longest token. */
	memset(h.token, '~', sizeof(h.token) - 1);
	h.token[sizeof(h.token) - 1] = '\0';
	assert_int_equal(tb_recovery_proto_encode_hello(buf, sizeof(buf), &h), 144);
	assert_int_equal(tb_recovery_proto_decode(buf, 144, &out), 144);
	assert_int_equal(strlen(out.hello.token), 127);

	assert_int_equal(tb_recovery_proto_encode_welcome(buf, sizeof(buf), &w), 40);
	assert_int_equal(tb_recovery_proto_decode(buf, 40, &out), 40);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_WELCOME);
	assert_int_equal(out.welcome.stream_id, 7);
	assert_int_equal(out.welcome.max_count, 4096);
	assert_true(out.welcome.epoch == 0x1122334455667788ull);
	assert_true(out.welcome.first == 1000);
	assert_true(out.welcome.last == 5002);
	/* Nothing held yet; an epoch with nothing of it yet; one frame. */
	w.epoch = w.first = w.last = 0;
	assert_int_equal(tb_recovery_proto_encode_welcome(buf, sizeof(buf), &w), 40);
	assert_int_equal(tb_recovery_proto_decode(buf, 40, &out), 40);
	assert_true(out.welcome.epoch == 0 && out.welcome.last == 0);
	w.epoch = 3;
	assert_int_equal(tb_recovery_proto_encode_welcome(buf, sizeof(buf), &w), 40);
	w.first = w.last = 9;
	assert_int_equal(tb_recovery_proto_encode_welcome(buf, sizeof(buf), &w), 40);
	assert_int_equal(tb_recovery_proto_decode(buf, 40, &out), 40);
	assert_true(out.welcome.first == 9 && out.welcome.last == 9);
}

static void round_trip_begin_end(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_begin_t b = sample_begin();
	tb_recovery_proto_end_t e = sample_end();
	tb_recovery_proto_msg_t out;

	(void)state;
	assert_int_equal(tb_recovery_proto_encode_begin(buf, sizeof(buf), &b), 32);
	assert_int_equal(tb_recovery_proto_decode(buf, 32, &out), 32);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_RESPONSE_BEGIN);
	assert_int_equal(out.begin.stream_id, 7);
	assert_int_equal(out.begin.count, 3);
	assert_true(out.begin.epoch == 0x1122334455667788ull);
	assert_true(out.begin.first == 5000);

	assert_int_equal(tb_recovery_proto_encode_end(buf, sizeof(buf), &e), 24);
	assert_int_equal(tb_recovery_proto_decode(buf, 24, &out), 24);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_RESPONSE_END);
	assert_int_equal(out.end.status, TB_RECOVERY_PROTO_END_COMPLETE);
	assert_true(out.end.last_seq == 5002);
	/* Truncated before the first frame: last_seq is first - 1, may be 0. */
	e.status = TB_RECOVERY_PROTO_END_TRUNCATED;
	e.last_seq = 0;
	assert_int_equal(tb_recovery_proto_encode_end(buf, sizeof(buf), &e), 24);
	assert_int_equal(tb_recovery_proto_decode(buf, 24, &out), 24);
	assert_int_equal(out.end.status, TB_RECOVERY_PROTO_END_TRUNCATED);
	assert_true(out.end.last_seq == 0);
}

static void round_trip_reject_every_reason(void **state)
{
	static const struct { uint32_t reason; uint64_t detail; } cases[] = {
		{TB_RECOVERY_PROTO_REJ_TOO_OLD, 4000000},
		{TB_RECOVERY_PROTO_REJ_TOO_OLD, 1},
		{TB_RECOVERY_PROTO_REJ_NOT_YET, 0},
		{TB_RECOVERY_PROTO_REJ_NOT_YET, UINT64_MAX},
		{TB_RECOVERY_PROTO_REJ_TOO_LARGE, TB_RECOVERY_PROTO_COUNT_MAX},
		{TB_RECOVERY_PROTO_REJ_TOO_LARGE, 1},
		{TB_RECOVERY_PROTO_REJ_RATE_LIMITED, 250},
		{TB_RECOVERY_PROTO_REJ_RATE_LIMITED, TB_RECOVERY_PROTO_RETRY_MAX_MS},
		{TB_RECOVERY_PROTO_REJ_UNAUTHORISED, 0},
		{TB_RECOVERY_PROTO_REJ_MALFORMED, 0},
		{TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM, 0},
		{TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH, 0x8000000000000002ull},
		{TB_RECOVERY_PROTO_REJ_BUSY, 1000},
		{TB_RECOVERY_PROTO_REJ_BUSY, TB_RECOVERY_PROTO_RETRY_MAX_MS},
	};
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_reject_t in = sample_reject();
	tb_recovery_proto_msg_t out;

	(void)state;
	assert_int_equal(tb_recovery_proto_encode_reject(buf, sizeof(buf), &in), 224);
	assert_int_equal(tb_recovery_proto_decode(buf, 224, &out), 224);
	assert_int_equal(out.type, TB_RECOVERY_PROTO_REJECT);
	assert_int_equal(out.reject.stream_id, 7);
	assert_int_equal(out.reject.reason, TB_RECOVERY_PROTO_REJ_TOO_OLD);
	assert_true(out.reject.earliest_seq == 4000000);
	assert_string_equal(out.reject.text, in.text);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		in.reason = cases[i].reason;
		in.detail = cases[i].detail;
		in.stream_id = (uint32_t)i;
		snprintf(in.text, sizeof(in.text), "case %zu: %s", i,
			 tb_recovery_proto_reject_name(in.reason));
		assert_int_equal(tb_recovery_proto_encode_reject(buf, sizeof(buf), &in),
				 224);
		assert_int_equal(tb_recovery_proto_decode(buf, 224, &out), 224);
		assert_int_equal(out.reject.reason, cases[i].reason);
		assert_true(out.reject.detail == cases[i].detail);
		assert_int_equal(out.reject.stream_id, i);
		assert_string_equal(out.reject.text, in.text);
		assert_string_not_equal(tb_recovery_proto_reject_name(in.reason), "?");
	}
	/* The named views of detail are one field. */
	in.reason = TB_RECOVERY_PROTO_REJ_RATE_LIMITED;
	in.retry_after_ms = 40;
	assert_true(in.detail == 40);
	assert_string_equal(tb_recovery_proto_reject_name(0), "?");
	assert_string_equal(tb_recovery_proto_type_name(TB_RECOVERY_PROTO_TYPE_MAX + 1), "?");
	for (int t = 1; t <= TB_RECOVERY_PROTO_TYPE_MAX; t++)
		assert_string_not_equal(tb_recovery_proto_type_name(t), "?");
}

/* ---------------------------------------------------------- wire bytes */

static void golden_request_and_hello(void **state)
{
	static const uint8_t request[32] = {
		/* header: magic "TR", version 2, type 1, length 32 */
		0x54, 0x52, 0x02, 0x01, 0x20, 0x00, 0x00, 0x00,
		/* stream_id 7, count 100 */
		0x07, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00,
		/* epoch 0x1122334455667788 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		/* first 5000 */
		0x88, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t hello_head[24] = {
		/* header: magic "TR", version 2, type 5, length 144 */
		0x54, 0x52, 0x02, 0x05, 0x90, 0x00, 0x00, 0x00,
		/* stream_id 7, reserved 0 */
		0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		/* token "s3cret", NUL, zeros */
		's', '3', 'c', 'r', 'e', 't', 0x00, 0x00,
	};
	static const uint8_t welcome[40] = {
		/* header: magic "TR", version 2, type 6, length 40 */
		0x54, 0x52, 0x02, 0x06, 0x28, 0x00, 0x00, 0x00,
		/* stream_id 7, max_count 4096 */
		0x07, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
		/* epoch, first 1000, last 5002 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0xe8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x8a, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	uint8_t golden[144], buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_msg_t out;

	(void)state;
	assert_int_equal(encode_sample(TB_RECOVERY_PROTO_REQUEST, buf, sizeof(buf)), 32);
	assert_memory_equal(buf, request, sizeof(request));
	assert_int_equal(encode_sample(TB_RECOVERY_PROTO_WELCOME, buf, sizeof(buf)), 40);
	assert_memory_equal(buf, welcome, sizeof(welcome));
	memset(golden, 0, sizeof(golden));
	memcpy(golden, hello_head, sizeof(hello_head));
	assert_int_equal(encode_sample(TB_RECOVERY_PROTO_HELLO, buf, sizeof(buf)), 144);
	assert_memory_equal(buf, golden, sizeof(golden));
	assert_int_equal(tb_recovery_proto_decode(golden, sizeof(golden), &out), 144);
	assert_string_equal(out.hello.token, "s3cret");
}

static void golden_end_and_reject_head(void **state)
{
	static const uint8_t end[24] = {
		0x54, 0x52, 0x02, 0x03, 0x18, 0x00, 0x00, 0x00,
		0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x8a, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t reject_head[24] = {
		0x54, 0x52, 0x02, 0x04, 0xe0, 0x00, 0x00, 0x00,
		0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
		0x00, 0x09, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x00, /* 4000000 */
	};
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];

	(void)state;
	assert_int_equal(encode_sample(TB_RECOVERY_PROTO_RESPONSE_END, buf, sizeof(buf)),
			 24);
	assert_memory_equal(buf, end, sizeof(end));
	assert_int_equal(encode_sample(TB_RECOVERY_PROTO_REJECT, buf, sizeof(buf)), 224);
	assert_memory_equal(buf, reject_head, sizeof(reject_head));
	assert_memory_equal(buf + 24, "sequences before", 16);
}

/* ------------------------------------------------------------ bad input */

static void bad_headers(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX + 64];
	uint8_t ctl[TB_CONTROL_MSG_MAX];
	tb_control_bye_t bye = {.reason = TB_CONTROL_BYE_NORMAL};
	int n;

	(void)state;
	n = encode_sample(TB_RECOVERY_PROTO_HELLO, buf, sizeof(buf));
	codec_expect_err(decode_bad(buf, 0), TB_EPROTO, "truncated");
	codec_expect_err(decode_bad(buf, 5), TB_EPROTO, "truncated");

	/* A control message on the recovery port. */
	assert_int_equal(tb_control_encode_bye(ctl, sizeof(ctl), &bye), 16);
	codec_expect_err(decode_bad(ctl, 16), TB_EFORMAT, "magic");
	codec_expect_err(tb_recovery_proto_frame_need(ctl, 2), TB_EPROTO, "magic");

	/* Another version: version 1's REQUEST, and a later one. */
	codec_put8(buf, 2, 1);
	codec_expect_err(decode_bad(buf, (size_t)n), TB_EFORMAT, "version 1");
	assert_non_null(strstr(tb_errmsg(), "version 2"));
	codec_put8(buf, 2, 3);
	codec_expect_err(decode_bad(buf, (size_t)n), TB_EFORMAT, "version 3");
	codec_put8(buf, 2, TB_RECOVERY_PROTO_VERSION);

	codec_put8(buf, 3, 0);
	codec_expect_err(decode_bad(buf, (size_t)n), TB_EPROTO, "type 0");
	codec_put8(buf, 3, TB_RECOVERY_PROTO_TYPE_MAX + 1);
	codec_expect_err(decode_bad(buf, (size_t)n), TB_EPROTO, "type 7");
	codec_put8(buf, 3, TB_RECOVERY_PROTO_HELLO);

	codec_put32(buf, 4, 145);
	codec_expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 145");
	codec_put32(buf, 4, 32); /* a REQUEST's length */
	codec_expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 32");
	codec_put32(buf, 4, 144);
	codec_expect_err(decode_bad(buf, 143), TB_EPROTO, "length");

	codec_put32(buf, 4, 0x10000000u);
	codec_expect_err(tb_recovery_proto_frame_need(buf, 8), TB_EPROTO, "length");
	codec_put32(buf, 4, 3);
	codec_expect_err(tb_recovery_proto_frame_need(buf, 8), TB_EPROTO, "length");
	codec_put32(buf, 4, 100);
	codec_expect_err(tb_recovery_proto_frame_need(buf, 8), TB_EPROTO, "length 100");
}

/* REQUEST and RESPONSE_BEGIN share the range rules. */
static void bad_ranges(void **state)
{
	static const struct { int type; size_t stream, count, epoch, first; } at[] = {
		{TB_RECOVERY_PROTO_REQUEST, W(request, stream_id), W(request, count),
		 W(request, epoch), W(request, first)},
		{TB_RECOVERY_PROTO_RESPONSE_BEGIN, W(begin, stream_id), W(begin, count),
		 W(begin, epoch), W(begin, first)},
	};
	uint8_t good[TB_RECOVERY_PROTO_MSG_MAX], b[TB_RECOVERY_PROTO_MSG_MAX];

	(void)state;
	for (int i = 0; i < 2; i++) {
		int n = encode_sample(at[i].type, good, sizeof(good));

#define RESET() memcpy(b, good, sizeof(b))
		RESET(); codec_put32(b, at[i].stream, 0);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
		RESET(); codec_put32(b, at[i].count, 0);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "count 0");
		RESET(); codec_put32(b, at[i].count, TB_RECOVERY_PROTO_COUNT_MAX + 1);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "count");
		RESET(); codec_put32(b, at[i].count, 0xffffffffu);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "count");
		RESET(); codec_put64(b, at[i].epoch, 0);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "epoch");
		RESET(); codec_put64(b, at[i].first, 0);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "first");
		/* first + count overflows: by one, and by a lot. */
		RESET(); codec_put64(b, at[i].first, UINT64_MAX - 2);
		codec_put32(b, at[i].count, 3);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "overflow");
		RESET(); codec_put64(b, at[i].first, UINT64_MAX);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, "overflow");
		/* ... and the largest first that does not. */
		RESET(); codec_put64(b, at[i].first, UINT64_MAX - 3);
		codec_put32(b, at[i].count, 3);
		tb_recovery_proto_msg_t out;
		assert_int_equal(tb_recovery_proto_decode(b, n, &out), n);
#undef RESET
	}
}

static void bad_hello_and_welcome(void **state)
{
	uint8_t good[TB_RECOVERY_PROTO_MSG_MAX], b[TB_RECOVERY_PROTO_MSG_MAX];
	size_t tok = W(hello, token);
	int n;

	(void)state;
	n = encode_sample(TB_RECOVERY_PROTO_HELLO, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	RESET(); memset(b + tok, 0, TB_RECOVERY_PROTO_TOKEN_LEN);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "token is empty");
	RESET(); memset(b + tok, 'a', TB_RECOVERY_PROTO_TOKEN_LEN);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); codec_put8(b, tok + 1, 0x00); codec_put8(b, tok + 2, 'x');
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); codec_put8(b, tok + 1, 0x80);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); codec_put8(b, tok + 1, ' ');
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); codec_put32(b, W(hello, stream_id), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); codec_put32(b, W(hello, reserved), 1);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "reserved");

	n = encode_sample(TB_RECOVERY_PROTO_WELCOME, good, sizeof(good));
	RESET(); codec_put32(b, W(welcome, stream_id), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); codec_put32(b, W(welcome, max_count), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "max_count");
	RESET(); codec_put32(b, W(welcome, max_count), TB_RECOVERY_PROTO_COUNT_MAX + 1);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "max_count");
	RESET(); codec_put64(b, W(welcome, first), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "first 0");
	RESET(); codec_put64(b, W(welcome, last), 999);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "not a range");
	RESET(); codec_put64(b, W(welcome, epoch), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "epoch 0");
#undef RESET
}

static void bad_end_and_reject(void **state)
{
	static const struct { uint32_t reason; uint64_t detail; const char *field; } bad[] = {
		{TB_RECOVERY_PROTO_REJ_TOO_OLD, 0, "earliest_seq"},
		{TB_RECOVERY_PROTO_REJ_TOO_LARGE, 0, "max_count"},
		{TB_RECOVERY_PROTO_REJ_TOO_LARGE, TB_RECOVERY_PROTO_COUNT_MAX + 1, "max_count"},
		{TB_RECOVERY_PROTO_REJ_RATE_LIMITED, 0, "retry_after_ms"},
		{TB_RECOVERY_PROTO_REJ_RATE_LIMITED, TB_RECOVERY_PROTO_RETRY_MAX_MS + 1,
		 "retry_after_ms"},
		{TB_RECOVERY_PROTO_REJ_RATE_LIMITED, UINT64_MAX, "retry_after_ms"},
		{TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH, 0, "current_epoch"},
		{TB_RECOVERY_PROTO_REJ_UNAUTHORISED, 1, "detail"},
		{TB_RECOVERY_PROTO_REJ_MALFORMED, 1ull << 40, "detail"},
		{TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM, 9, "detail"},
		{0, 0, "reason"},
		{TB_RECOVERY_PROTO_REJ_MAX + 1, 0, "reason"},
		{0xffffffffu, 0, "reason"},
	};
	uint8_t good[TB_RECOVERY_PROTO_MSG_MAX], b[TB_RECOVERY_PROTO_MSG_MAX];
	int n;

	(void)state;
	n = encode_sample(TB_RECOVERY_PROTO_RESPONSE_END, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	RESET(); codec_put32(b, W(end, status), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "status");
	RESET(); codec_put32(b, W(end, status), TB_RECOVERY_PROTO_END_MAX + 1);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "status");
	RESET(); codec_put64(b, W(end, last_seq), 0);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "last_seq");
	RESET(); codec_put32(b, W(end, reserved), 1);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "reserved");

	n = encode_sample(TB_RECOVERY_PROTO_REJECT, good, sizeof(good));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		RESET();
		codec_put32(b, W(reject, reason), bad[i].reason);
		codec_put64(b, W(reject, detail), bad[i].detail);
		codec_expect_err(decode_bad(b, n), TB_EPROTO, bad[i].field);
	}
	RESET(); memset(b + W(reject, text), 'z', TB_RECOVERY_PROTO_TEXT_LEN);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "text");
	RESET(); codec_put8(b, W(reject, text), 0x07);
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "text");
	RESET(); codec_put8(b, W(reject, text) + 150, 'z');
	codec_expect_err(decode_bad(b, n), TB_EPROTO, "text");
#undef RESET
}

static void encoders_refuse(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_request_t q = sample_request();
	tb_recovery_proto_begin_t bg = sample_begin();
	tb_recovery_proto_end_t e = sample_end();
	tb_recovery_proto_reject_t r = sample_reject();
	tb_recovery_proto_hello_t h = sample_hello();
	tb_recovery_proto_welcome_t w = sample_welcome();

	(void)state;
	for (int t = 1; t <= TB_RECOVERY_PROTO_TYPE_MAX; t++) {
		memset(buf, 0xee, sizeof(buf));
		codec_expect_err(encode_sample(t, buf, sizes[t] - 1), TB_EMSGSIZE,
			   tb_recovery_proto_type_name(t));
		assert_int_equal(buf[0], 0xee);
		assert_int_equal(encode_sample(t, buf, sizes[t]), (int)sizes[t]);
	}
	q.count = 0;
	codec_expect_err(tb_recovery_proto_encode_request(buf, sizeof(buf), &q), TB_EINVAL,
		   "count");
	q = sample_request();
	q.first = UINT64_MAX;
	codec_expect_err(tb_recovery_proto_encode_request(buf, sizeof(buf), &q), TB_EINVAL,
		   "overflow");
	h.token[0] = '\0';
	codec_expect_err(tb_recovery_proto_encode_hello(buf, sizeof(buf), &h), TB_EINVAL,
		   "token");
	w.max_count = 0;
	codec_expect_err(tb_recovery_proto_encode_welcome(buf, sizeof(buf), &w),
			 TB_EINVAL, "max_count");
	bg.epoch = 0;
	codec_expect_err(tb_recovery_proto_encode_begin(buf, sizeof(buf), &bg), TB_EINVAL,
		   "epoch");
	e.status = 3;
	codec_expect_err(tb_recovery_proto_encode_end(buf, sizeof(buf), &e), TB_EINVAL,
		   "status");
	r.reason = TB_RECOVERY_PROTO_REJ_RATE_LIMITED;
	r.retry_after_ms = 0;
	codec_expect_err(tb_recovery_proto_encode_reject(buf, sizeof(buf), &r), TB_EINVAL,
		   "retry_after_ms");
	r = sample_reject();
	r.text[0] = '\r';
	codec_expect_err(tb_recovery_proto_encode_reject(buf, sizeof(buf), &r), TB_EINVAL,
		   "text");
}

/* ---------------------------------------------------------- truncation */

static int decode_any(const uint8_t *buf, size_t len)
{
	tb_recovery_proto_msg_t out;

	return tb_recovery_proto_decode(buf, len, &out);
}

static const codec_fuzz_codec_t codec = {
	.types = TB_RECOVERY_PROTO_TYPE_MAX,
	.sizes = sizes,
	.hdr_len = TB_WIRE_HDR_LEN,
	.cap = TB_RECOVERY_PROTO_MSG_MAX,
	.encode_sample = encode_sample,
	.decode_bad = decode_bad,
	.decode = decode_any,
	.frame_need = tb_recovery_proto_frame_need,
};

static void truncation_every_byte(void **state)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];

	(void)state;
	codec_fuzz_truncation(&codec, buf);
}

/* ------------------------------------------------- frames of a response */

/* Writes a data frame with `payload` bytes at any (unaligned) address. */
static size_t put_frame(uint8_t *at, uint32_t stream, uint64_t seq,
			uint32_t payload)
{
	tb_frame_hdr_t h;

	tb_frame_init(&h, payload, 3, stream, seq, 1000 + seq);
	h.flags = TB_FRAME_F_REPLAY;
	memcpy(at, &h, sizeof(h));
	for (uint32_t i = 0; i < payload; i++)
		at[TB_FRAME_HDR_LEN + i] = (uint8_t)(seq + i);
	return TB_FRAME_HDR_LEN + payload;
}

static void replay_frame_checks(void **state)
{
	uint8_t raw[512];
	uint8_t *f = raw + 3; /* deliberately misaligned */
	tb_recovery_proto_begin_t bg = sample_begin();
	size_t n;

	(void)state;
	n = put_frame(f, bg.stream_id, bg.first + 1, 21);
	for (size_t have = 0; have < n; have++) {
		int need = tb_recovery_proto_replay_need(f, have);

		assert_int_equal(need, have < 32 ? (int)(32 - have)
						 : (int)(n - have));
		codec_expect_err(tb_recovery_proto_replay_check(f, have, &bg, 1), TB_EPROTO,
			   have < 32 ? "truncated" : "length");
	}
	assert_int_equal(tb_recovery_proto_replay_need(f, n), 0);
	assert_int_equal(tb_recovery_proto_replay_check(f, n, &bg, 1), (int64_t)n);
	assert_int_equal(tb_recovery_proto_replay_check(f, sizeof(raw) - 3, &bg, 1),
			 (int64_t)n);

	codec_expect_err(tb_recovery_proto_replay_check(f, n, &bg, 0), TB_EPROTO, "seq");
	codec_expect_err(tb_recovery_proto_replay_check(f, n, &bg, 3), TB_EPROTO, "count");
	bg.stream_id = 8;
	codec_expect_err(tb_recovery_proto_replay_check(f, n, &bg, 1), TB_EPROTO, "stream_id");
	bg = sample_begin();

	/* A padding frame or heartbeat has no place in a response. */
	f[5] = TB_FRAME_PAD;
	codec_expect_err(tb_recovery_proto_replay_check(f, n, &bg, 1), TB_EPROTO, "type");
	f[5] = TB_FRAME_DATA;

	/* Headers that can never become a frame. */
	f[4] = TB_FRAME_VERSION + 1;
	codec_expect_err(tb_recovery_proto_replay_need(f, 32), TB_EFORMAT, "version");
	codec_expect_err(tb_recovery_proto_replay_check(f, n, &bg, 1), TB_EFORMAT, "version");
	f[4] = TB_FRAME_VERSION;
	f[5] = 9;
	codec_expect_err(tb_recovery_proto_replay_need(f, 32), TB_EFORMAT, "type");
	f[5] = TB_FRAME_DATA;
	codec_put32(f, 0, 31);
	codec_expect_err(tb_recovery_proto_replay_need(f, 32), TB_EPROTO, "length");
	codec_put32(f, 0, TB_FRAME_MAX_LEN + 1);
	codec_expect_err(tb_recovery_proto_replay_need(f, 32), TB_EPROTO, "length");
	/* The largest frame is waited for, not refused. */
	codec_put32(f, 0, TB_FRAME_MAX_LEN);
	assert_int_equal(tb_recovery_proto_replay_need(f, 32), TB_FRAME_MAX_LEN - 32);
}

/* A whole response arriving one byte at a time, as a reader sees it. */
static void response_read_byte_by_byte(void **state)
{
	/* Both the sender's bytes and the reader's buffer misaligned. */
	uint8_t stream[1024], *p = stream + 1;
	uint8_t inraw[1024 + 3], *inbuf = inraw + 3;
	tb_recovery_proto_begin_t bg = sample_begin();
	tb_recovery_proto_end_t e = sample_end();
	tb_recovery_proto_msg_t msg;
	size_t total = 0, have = 0, fed = 0;
	uint64_t frames = 0, payload_bytes = 0;
	int phase = 0; /* 0: BEGIN, 1: frames, 2: END, 3: done */

	(void)state;
	total += tb_recovery_proto_encode_begin(p, 64, &bg);
	for (uint32_t i = 0; i < bg.count; i++)
		total += put_frame(p + total, bg.stream_id, bg.first + i,
				   5 + 40 * i);
	total += tb_recovery_proto_encode_end(p + total, 64, &e);

	while (phase < 3) {
		int need;

		need = phase == 1 ? tb_recovery_proto_replay_need(inbuf, have)
				  : tb_recovery_proto_frame_need(inbuf, have);
		assert_true(need >= 0);
		if (need > 0) {
			assert_true(fed < total);
			inbuf[have++] = p[fed++];
			continue;
		}
		if (phase == 0) {
			assert_int_equal(tb_recovery_proto_decode(inbuf, have, &msg),
					 (int)have);
			assert_int_equal(msg.type, TB_RECOVERY_PROTO_RESPONSE_BEGIN);
			bg = msg.begin;
			phase = 1;
		} else if (phase == 1) {
			int64_t n = tb_recovery_proto_replay_check(inbuf, have, &bg,
							   frames);

			assert_int_equal(n, (int64_t)have);
			payload_bytes += (uint64_t)n - TB_FRAME_HDR_LEN;
			if (++frames == bg.count)
				phase = 2;
		} else {
			assert_int_equal(tb_recovery_proto_decode(inbuf, have, &msg),
					 (int)have);
			assert_int_equal(msg.type, TB_RECOVERY_PROTO_RESPONSE_END);
			assert_true(msg.end.last_seq == bg.first + bg.count - 1);
			phase = 3;
		}
		have = 0;
	}
	assert_int_equal(fed, total);
	assert_true(frames == 3);
	assert_true(payload_bytes == 5 + 45 + 85);
}

/* ------------------------------------------------------------ mutation */

static void check_in_range(const tb_recovery_proto_msg_t *m)
{
	switch (m->type) {
	case TB_RECOVERY_PROTO_REQUEST:
		assert_true(m->request.count >= 1 &&
			    m->request.count <= TB_RECOVERY_PROTO_COUNT_MAX);
		assert_true(m->request.first >= 1);
		assert_true(m->request.first <= UINT64_MAX - m->request.count);
		assert_true(m->request.epoch != 0 && m->request.stream_id != 0);
		break;
	case TB_RECOVERY_PROTO_HELLO:
		assert_true(m->hello.stream_id != 0);
		assert_true(strlen(m->hello.token) >= 1 &&
			    strlen(m->hello.token) < TB_RECOVERY_PROTO_TOKEN_LEN);
		break;
	case TB_RECOVERY_PROTO_WELCOME:
		assert_true(m->welcome.stream_id != 0);
		assert_true(m->welcome.max_count >= 1 &&
			    m->welcome.max_count <= TB_RECOVERY_PROTO_COUNT_MAX);
		assert_true(m->welcome.first <= m->welcome.last);
		assert_true((m->welcome.first == 0) == (m->welcome.last == 0));
		assert_true(m->welcome.epoch != 0 || m->welcome.last == 0);
		break;
	case TB_RECOVERY_PROTO_RESPONSE_BEGIN:
		assert_true(m->begin.count >= 1 &&
			    m->begin.count <= TB_RECOVERY_PROTO_COUNT_MAX);
		assert_true(m->begin.first >= 1);
		assert_true(m->begin.first <= UINT64_MAX - m->begin.count);
		break;
	case TB_RECOVERY_PROTO_RESPONSE_END:
		assert_true(m->end.status >= 1 &&
			    m->end.status <= TB_RECOVERY_PROTO_END_MAX);
		break;
	case TB_RECOVERY_PROTO_REJECT:
		assert_true(m->reject.reason >= 1 &&
			    m->reject.reason <= TB_RECOVERY_PROTO_REJ_MAX);
		if (m->reject.reason == TB_RECOVERY_PROTO_REJ_RATE_LIMITED ||
		    m->reject.reason == TB_RECOVERY_PROTO_REJ_BUSY)
			assert_true(m->reject.retry_after_ms >= 1 &&
				    m->reject.retry_after_ms <=
					    TB_RECOVERY_PROTO_RETRY_MAX_MS);
		assert_true(strlen(m->reject.text) < TB_RECOVERY_PROTO_TEXT_LEN);
		break;
	default:
		fail_msg("decoded unknown type %u", m->type);
	}
}

static void random_mutation(void **state)
{
	enum { ROUNDS = 300000 };
	uint8_t good[TB_RECOVERY_PROTO_MSG_MAX], b[TB_RECOVERY_PROTO_MSG_MAX + 16];
	uint8_t again[TB_RECOVERY_PROTO_MSG_MAX];
	long ok = 0, bad = 0;

	(void)state;
	rng_state = 0x5eed0002badc0de5ull;
	for (int round = 0; round < ROUNDS; round++) {
		int type = 1 + (int)(rng_xorshift64s(&rng_state) % TB_RECOVERY_PROTO_TYPE_MAX);
		int n = encode_sample(type, good, sizeof(good));
		size_t len = codec_fuzz_mutate(&rng_state, good, (size_t)n, b,
					       sizeof(b), 40, 1);
		tb_recovery_proto_msg_t out;
		int rc, need;

		need = tb_recovery_proto_frame_need(b, len);
		rc = tb_recovery_proto_decode(b, len, &out);
		if (rc > 0) {
			ok++;
			assert_true((size_t)rc <= len);
			assert_int_equal(need, 0);
			check_in_range(&out);
			assert_int_equal(encode_msg(&out, again, sizeof(again)), rc);
			assert_memory_equal(again, b, (size_t)rc);
		} else {
			bad++;
			assert_true(rc == TB_EPROTO || rc == TB_EFORMAT);
			assert_true(tb_errmsg()[0] != '\0');
		}
		assert_true(need <= (int)TB_RECOVERY_PROTO_MSG_MAX);
	}
	print_message("mutation: %ld decoded, %ld refused\n", ok, bad);
	assert_true(ok > 1000 && bad > 1000);
}

/* Random bytes as a replayed frame: checked, never trusted. */
static void random_replay_frames(void **state)
{
	uint8_t raw[256 + 1];
	uint8_t *f = raw + 1;
	tb_recovery_proto_begin_t bg = sample_begin();
	long ok = 0;

	(void)state;
	rng_state = 0x5eed0003f00dfaceull;
	for (int round = 0; round < 200000; round++) {
		size_t len = rng_xorshift64s(&rng_state) % 257;
		int need;
		int64_t n;

		put_frame(f, bg.stream_id, bg.first + 1, (uint32_t)(rng_xorshift64s(&rng_state) % 200));
		for (int k = 1 + (int)(rng_xorshift64s(&rng_state) % 3); k > 0; k--)
			f[rng_xorshift64s(&rng_state) % 40] ^= (uint8_t)rng_xorshift64s(&rng_state);
		need = tb_recovery_proto_replay_need(f, len);
		n = tb_recovery_proto_replay_check(f, len, &bg, 1);
		if (n > 0) {
			ok++;
			assert_int_equal(need, 0);
			assert_true((size_t)n <= len);
		} else {
			assert_true(n == TB_EPROTO || n == TB_EFORMAT);
		}
	}
	assert_true(ok > 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_request),
		cmocka_unit_test(round_trip_hello_welcome),
		cmocka_unit_test(round_trip_begin_end),
		cmocka_unit_test(round_trip_reject_every_reason),
		cmocka_unit_test(golden_request_and_hello),
		cmocka_unit_test(golden_end_and_reject_head),
		cmocka_unit_test(bad_headers),
		cmocka_unit_test(bad_ranges),
		cmocka_unit_test(bad_hello_and_welcome),
		cmocka_unit_test(bad_end_and_reject),
		cmocka_unit_test(encoders_refuse),
		cmocka_unit_test(truncation_every_byte),
		cmocka_unit_test(replay_frame_checks),
		cmocka_unit_test(response_read_byte_by_byte),
		cmocka_unit_test(random_mutation),
		cmocka_unit_test(random_replay_frames),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
