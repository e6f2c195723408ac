/* The control protocol codec: round trips, the exact wire bytes, every
 * malformed input, truncation at every byte, random mutation, framing, the
 * refusal of (and by) a version 1 peer, and the constant-time token
 * comparison.  The fixtures every wire codec's test shares are in
 * tests/common/codec_fuzz.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/transport/control.h"
#include "tests/common/codec_fuzz.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

#define expect_err codec_expect_err
#define put8 codec_put8
#define put16 codec_put16
#define put32 codec_put32
#define put64 codec_put64

static tb_control_hello_t sample_hello(void)
{
	tb_control_hello_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 42;
	strcpy(m.client_id, "strat-7@hostA");
	strcpy(m.token, "s3cret-Token_!~");
	return m;
}

static tb_control_subscribe_t sample_subscribe(void)
{
	tb_control_subscribe_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 0x01020304;
	m.transport = TB_TRANSPORT_RC;
	m.mtu = TB_CONTROL_MTU_4096;
	m.flags = TB_CONTROL_SUB_F_CREDIT_SLOT;
	m.ring_addr = 0x1122334455667788ull;
	m.ring_len = 4u << 20;
	m.rkey = 0xa1b2c3d4;
	m.qpn = 0x123456;
	for (int i = 0; i < 16; i++)
		m.gid[i] = (uint8_t)(0xf0 + i);
	m.psn = 0xabcdef;
	m.recv_depth = 0x1000;
	m.start_seq = 0x0102030405060708ull;
	m.lid = 0xc001;
	return m;
}

static tb_control_accept_t sample_accept(void)
{
	tb_control_accept_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 42;
	m.qpn = 0xfedcba;
	m.epoch = 0x8000000000000001ull;
	for (int i = 0; i < 16; i++)
		m.gid[i] = (uint8_t)(i * 17);
	m.psn = 0x000001;
	m.credit_rkey = 0x55aa55aa;
	m.credit_addr = 0x7fff00001000ull;
	m.next_seq = 1000001;
	m.ring_offset = 4096 + 32;
	m.lid = 0x0102;
	m.mtu = TB_CONTROL_MTU_2048;
	m.sl = 3;
	m.traffic_class = 106;
	return m;
}

static tb_control_reject_t sample_reject(void)
{
	tb_control_reject_t m;

	memset(&m, 0, sizeof(m));
	m.stream_id = 42;
	m.reason = TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT;
	strcpy(m.text, "stream 42 is published over rc only; ud was asked");
	return m;
}

static tb_control_heartbeat_t sample_heartbeat(void)
{
	tb_control_heartbeat_t m = {.timestamp_ns = 1733150000123456789ull,
				.last_seq = 987654321, .skip_first = 987654000,
				.skip_last = 987654300};
	return m;
}

static tb_control_bye_t sample_bye(void)
{
	tb_control_bye_t m = {.reason = TB_CONTROL_BYE_CLOSED};
	return m;
}

static tb_control_ready_t sample_ready(void)
{
	tb_control_ready_t m = {.stream_id = 42, .qpn = 0xabcdef};
	return m;
}

/* Encodes the sample of `type`; returns its length. */
static int encode_sample(int type, uint8_t *buf, size_t cap)
{
	switch (type) {
	case TB_CONTROL_HELLO: { tb_control_hello_t m = sample_hello();
		return tb_control_encode_hello(buf, cap, &m); }
	case TB_CONTROL_SUBSCRIBE: { tb_control_subscribe_t m = sample_subscribe();
		return tb_control_encode_subscribe(buf, cap, &m); }
	case TB_CONTROL_ACCEPT: { tb_control_accept_t m = sample_accept();
		return tb_control_encode_accept(buf, cap, &m); }
	case TB_CONTROL_REJECT: { tb_control_reject_t m = sample_reject();
		return tb_control_encode_reject(buf, cap, &m); }
	case TB_CONTROL_HEARTBEAT: { tb_control_heartbeat_t m = sample_heartbeat();
		return tb_control_encode_heartbeat(buf, cap, &m); }
	case TB_CONTROL_BYE: { tb_control_bye_t m = sample_bye();
		return tb_control_encode_bye(buf, cap, &m); }
	case TB_CONTROL_READY: { tb_control_ready_t m = sample_ready();
		return tb_control_encode_ready(buf, cap, &m); }
	}
	fail_msg("no sample for type %d", type);
	return -1;
}

/* Re-encodes a decoded message. */
static int encode_msg(const tb_control_msg_t *m, uint8_t *buf, size_t cap)
{
	switch (m->type) {
	case TB_CONTROL_HELLO: return tb_control_encode_hello(buf, cap, &m->hello);
	case TB_CONTROL_SUBSCRIBE:
		return tb_control_encode_subscribe(buf, cap, &m->subscribe);
	case TB_CONTROL_ACCEPT: return tb_control_encode_accept(buf, cap, &m->accept);
	case TB_CONTROL_REJECT: return tb_control_encode_reject(buf, cap, &m->reject);
	case TB_CONTROL_HEARTBEAT:
		return tb_control_encode_heartbeat(buf, cap, &m->heartbeat);
	case TB_CONTROL_BYE: return tb_control_encode_bye(buf, cap, &m->bye);
	case TB_CONTROL_READY: return tb_control_encode_ready(buf, cap, &m->ready);
	}
	return -1;
}

static const uint32_t sizes[TB_CONTROL_TYPE_MAX + 1] = {
	0, 176, 80, 80, 216, 40, 16, 16,
};

/* Decodes a message that must fail, checking *out is left alone. */
static int decode_bad(const uint8_t *buf, size_t len)
{
	tb_control_msg_t out, before;
	int rc;

	memset(&out, 0xa5, sizeof(out));
	memcpy(&before, &out, sizeof(out));
	rc = tb_control_decode(buf, len, &out);
	assert_true(rc < 0);
	assert_memory_equal(&out, &before, sizeof(out));
	return rc;
}

/* ---------------------------------------------------------- round trips */

static void round_trip_hello(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_hello_t in = sample_hello();
	tb_control_msg_t out;

	(void)state;
	assert_int_equal(tb_control_encode_hello(buf, sizeof(buf), &in), 176);
	assert_int_equal(tb_control_decode(buf, 176, &out), 176);
	assert_int_equal(out.type, TB_CONTROL_HELLO);
	assert_int_equal(out.version, TB_CONTROL_VERSION);
	assert_int_equal(out.length, 176);
	assert_int_equal(out.hello.stream_id, 42);
	assert_string_equal(out.hello.client_id, "strat-7@hostA");
	assert_string_equal(out.hello.token, "s3cret-Token_!~");

	/* Longest strings that fit, and an empty client id. */
	memset(in.client_id, 'c', sizeof(in.client_id) - 1);
	in.client_id[sizeof(in.client_id) - 1] = '\0';
	memset(in.token, 't', sizeof(in.token) - 1);
	in.token[sizeof(in.token) - 1] = '\0';
	assert_int_equal(tb_control_encode_hello(buf, sizeof(buf), &in), 176);
	assert_int_equal(tb_control_decode(buf, 176, &out), 176);
	assert_int_equal(strlen(out.hello.client_id), 31);
	assert_int_equal(strlen(out.hello.token), 127);
	in.client_id[0] = '\0';
	assert_int_equal(tb_control_encode_hello(buf, sizeof(buf), &in), 176);
	assert_int_equal(tb_control_decode(buf, 176, &out), 176);
	assert_string_equal(out.hello.client_id, "");
}

static void round_trip_subscribe(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_subscribe_t in = sample_subscribe();
	tb_control_msg_t out;

	(void)state;
	assert_int_equal(tb_control_encode_subscribe(buf, sizeof(buf), &in), 80);
	assert_int_equal(tb_control_decode(buf, 80, &out), 80);
	assert_int_equal(out.type, TB_CONTROL_SUBSCRIBE);
	assert_int_equal(out.version, 2);
	assert_int_equal(out.subscribe.lid, 0xc001);
	assert_int_equal(out.subscribe.stream_id, 0x01020304);
	assert_int_equal(out.subscribe.transport, TB_TRANSPORT_RC);
	assert_int_equal(out.subscribe.mtu, TB_CONTROL_MTU_4096);
	assert_int_equal(out.subscribe.flags, TB_CONTROL_SUB_F_CREDIT_SLOT);
	assert_true(out.subscribe.ring_addr == 0x1122334455667788ull);
	assert_true(out.subscribe.ring_len == 4u << 20);
	assert_int_equal(out.subscribe.rkey, 0xa1b2c3d4);
	assert_int_equal(out.subscribe.qpn, 0x123456);
	assert_memory_equal(out.subscribe.gid, in.gid, 16);
	assert_int_equal(out.subscribe.psn, 0xabcdef);
	assert_int_equal(out.subscribe.recv_depth, 0x1000);
	assert_true(out.subscribe.start_seq == 0x0102030405060708ull);

	/* Edges: live start, no flags, 24-bit maxima, ring bounds. */
	in.start_seq = 0;
	in.flags = 0;
	in.qpn = TB_CONTROL_QPN_MASK;
	in.psn = TB_CONTROL_PSN_MASK;
	in.ring_len = TB_RING_MIN;
	in.transport = TB_TRANSPORT_UDP;
	in.mtu = TB_CONTROL_MTU_256;
	in.lid = 0;   /* RoCE */
	assert_int_equal(tb_control_encode_subscribe(buf, sizeof(buf), &in), 80);
	assert_int_equal(tb_control_decode(buf, 80, &out), 80);
	assert_int_equal(out.subscribe.lid, 0);
	assert_true(out.subscribe.start_seq == 0);
	assert_int_equal(out.subscribe.flags, 0);
	assert_int_equal(out.subscribe.qpn, 0xffffff);
	assert_int_equal(out.subscribe.psn, 0xffffff);
	assert_true(out.subscribe.ring_len == TB_RING_MIN);
	assert_int_equal(out.subscribe.transport, TB_TRANSPORT_UDP);
	assert_int_equal(out.subscribe.mtu, TB_CONTROL_MTU_256);
	in.ring_len = TB_RING_MAX;
	in.lid = 0xffff;
	assert_int_equal(tb_control_encode_subscribe(buf, sizeof(buf), &in), 80);
	assert_int_equal(tb_control_decode(buf, 80, &out), 80);
	assert_int_equal(out.subscribe.lid, 0xffff);
	assert_true(out.subscribe.ring_len == TB_RING_MAX);
}

static void round_trip_accept(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_accept_t in = sample_accept();
	tb_control_msg_t out;

	(void)state;
	assert_int_equal(tb_control_encode_accept(buf, sizeof(buf), &in), 80);
	assert_int_equal(tb_control_decode(buf, 80, &out), 80);
	assert_int_equal(out.type, TB_CONTROL_ACCEPT);
	assert_int_equal(out.accept.lid, 0x0102);
	assert_int_equal(out.accept.mtu, TB_CONTROL_MTU_2048);
	assert_int_equal(out.accept.sl, 3);
	assert_int_equal(out.accept.traffic_class, 106);
	assert_int_equal(out.accept.stream_id, 42);
	assert_int_equal(out.accept.qpn, 0xfedcba);
	assert_true(out.accept.epoch == 0x8000000000000001ull);
	assert_memory_equal(out.accept.gid, in.gid, 16);
	assert_int_equal(out.accept.psn, 1);
	assert_int_equal(out.accept.credit_rkey, 0x55aa55aa);
	assert_true(out.accept.credit_addr == 0x7fff00001000ull);
	assert_true(out.accept.next_seq == 1000001);
	assert_true(out.accept.ring_offset == 4096 + 32);

	/* No credit slot asked for: zero address and key are fine. */
	in.credit_addr = 0;
	in.credit_rkey = 0;
	in.ring_offset = 0;
	in.sl = TB_CONTROL_SL_MAX;
	in.traffic_class = 255;
	in.mtu = TB_CONTROL_MTU_256;
	assert_int_equal(tb_control_encode_accept(buf, sizeof(buf), &in), 80);
	assert_int_equal(tb_control_decode(buf, 80, &out), 80);
	assert_true(out.accept.credit_addr == 0 && out.accept.credit_rkey == 0);
	assert_true(out.accept.ring_offset == 0);
	assert_int_equal(out.accept.sl, 15);
	assert_int_equal(out.accept.traffic_class, 255);
	assert_int_equal(out.accept.mtu, TB_CONTROL_MTU_256);
}

static void round_trip_reject(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_reject_t in = sample_reject();
	tb_control_msg_t out;

	(void)state;
	assert_int_equal(tb_control_encode_reject(buf, sizeof(buf), &in), 216);
	assert_int_equal(tb_control_decode(buf, 216, &out), 216);
	assert_int_equal(out.type, TB_CONTROL_REJECT);
	assert_int_equal(out.reject.stream_id, 42);
	assert_int_equal(out.reject.reason, TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT);
	assert_string_equal(out.reject.text, in.text);

	/* Every reason; an empty text; stream 0 (not known yet); 199 chars. */
	for (uint32_t r = 1; r <= TB_CONTROL_REJ_MAX; r++) {
		in.reason = r;
		in.stream_id = 0;
		in.text[0] = '\0';
		assert_int_equal(tb_control_encode_reject(buf, sizeof(buf), &in), 216);
		assert_int_equal(tb_control_decode(buf, 216, &out), 216);
		assert_int_equal(out.reject.reason, r);
		assert_int_equal(out.reject.stream_id, 0);
		assert_string_equal(out.reject.text, "");
		assert_string_not_equal(tb_control_reject_name(r), "?");
	}
	memset(in.text, ' ', sizeof(in.text) - 1);
	in.text[sizeof(in.text) - 1] = '\0';
	assert_int_equal(tb_control_encode_reject(buf, sizeof(buf), &in), 216);
	assert_int_equal(tb_control_decode(buf, 216, &out), 216);
	assert_int_equal(strlen(out.reject.text), 199);
	assert_string_equal(tb_control_reject_name(0), "?");
	assert_string_equal(tb_control_reject_name(TB_CONTROL_REJ_MAX + 1), "?");
}

static void round_trip_heartbeat_and_bye(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_heartbeat_t hb = sample_heartbeat();
	tb_control_bye_t bye = sample_bye();
	tb_control_msg_t out;

	(void)state;
	tb_control_ready_t rd = sample_ready();

	assert_int_equal(tb_control_encode_heartbeat(buf, sizeof(buf), &hb), 40);
	assert_int_equal(tb_control_decode(buf, 40, &out), 40);
	assert_int_equal(out.type, TB_CONTROL_HEARTBEAT);
	assert_true(out.heartbeat.timestamp_ns == 1733150000123456789ull);
	assert_true(out.heartbeat.last_seq == 987654321);
	assert_true(out.heartbeat.skip_first == 987654000);
	assert_true(out.heartbeat.skip_last == 987654300);
	hb.timestamp_ns = UINT64_MAX;
	hb.last_seq = 0;
	hb.skip_first = hb.skip_last = 0;   /* not skipping */
	assert_int_equal(tb_control_encode_heartbeat(buf, sizeof(buf), &hb), 40);
	assert_int_equal(tb_control_decode(buf, 40, &out), 40);
	assert_true(out.heartbeat.timestamp_ns == UINT64_MAX);
	assert_true(out.heartbeat.last_seq == 0);
	assert_true(out.heartbeat.skip_first == 0 && out.heartbeat.skip_last == 0);
	hb.skip_first = hb.skip_last = 7;   /* one sequence */
	assert_int_equal(tb_control_encode_heartbeat(buf, sizeof(buf), &hb), 40);
	assert_int_equal(tb_control_decode(buf, 40, &out), 40);
	assert_true(out.heartbeat.skip_first == 7 && out.heartbeat.skip_last == 7);

	assert_int_equal(tb_control_encode_ready(buf, sizeof(buf), &rd), 16);
	assert_int_equal(tb_control_decode(buf, 16, &out), 16);
	assert_int_equal(out.type, TB_CONTROL_READY);
	assert_int_equal(out.ready.stream_id, 42);
	assert_int_equal(out.ready.qpn, 0xabcdef);

	for (uint32_t r = 1; r <= TB_CONTROL_BYE_MAX; r++) {
		bye.reason = r;
		assert_int_equal(tb_control_encode_bye(buf, sizeof(buf), &bye), 16);
		assert_int_equal(tb_control_decode(buf, 16, &out), 16);
		assert_int_equal(out.type, TB_CONTROL_BYE);
		assert_int_equal(out.bye.reason, r);
		assert_string_not_equal(tb_control_bye_name(r), "?");
	}
	for (int t = 1; t <= TB_CONTROL_TYPE_MAX; t++)
		assert_string_not_equal(tb_control_type_name(t), "?");
	assert_string_equal(tb_control_type_name(0), "?");
	assert_string_equal(tb_control_type_name(TB_CONTROL_TYPE_MAX + 1), "?");
}

/* Two messages back to back: decode returns what the first occupied. */
static void back_to_back(void **state)
{
	uint8_t buf[2 * TB_CONTROL_MSG_MAX];
	tb_control_msg_t out;
	int a, b;

	(void)state;
	a = encode_sample(TB_CONTROL_HELLO, buf, sizeof(buf));
	b = encode_sample(TB_CONTROL_SUBSCRIBE, buf + a, sizeof(buf) - a);
	assert_int_equal(tb_control_frame_need(buf, a + b), 0);
	assert_int_equal(tb_control_decode(buf, a + b, &out), a);
	assert_int_equal(out.type, TB_CONTROL_HELLO);
	assert_int_equal(tb_control_decode(buf + a, b, &out), b);
	assert_int_equal(out.type, TB_CONTROL_SUBSCRIBE);
}

/* ---------------------------------------------------------- wire bytes */

static void golden_subscribe(void **state)
{
	static const uint8_t golden[80] = {
		/* header: magic "TC", version 2, type 2, length 80 */
		0x54, 0x43, 0x02, 0x02, 0x50, 0x00, 0x00, 0x00,
		/* stream_id 0x01020304 */
		0x04, 0x03, 0x02, 0x01,
		/* transport rc, mtu 4096, flags credit-slot, reserved */
		0x01, 0x05, 0x01, 0x00,
		/* ring_addr 0x1122334455667788 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		/* ring_len 4 MiB */
		0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
		/* rkey 0xa1b2c3d4, qpn 0x123456 */
		0xd4, 0xc3, 0xb2, 0xa1, 0x56, 0x34, 0x12, 0x00,
		/* gid f0..ff */
		0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
		0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
		/* psn 0xabcdef, recv_depth 0x1000 */
		0xef, 0xcd, 0xab, 0x00, 0x00, 0x10, 0x00, 0x00,
		/* start_seq 0x0102030405060708 */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		/* lid 0xc001, reserved */
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t accept_tail[8 + 8] = {
		/* header: version 2, type 3, length 80 */
		0x54, 0x43, 0x02, 0x03, 0x50, 0x00, 0x00, 0x00,
		/* lid 0x0102, mtu 2048, sl 3, traffic class 106, reserved */
		0x02, 0x01, 0x04, 0x03, 0x6a, 0x00, 0x00, 0x00,
	};
	static const uint8_t heartbeat_skip[16] = {
		/* skip_first 987654000, skip_last 987654300 */
		0x70, 0x67, 0xde, 0x3a, 0x00, 0x00, 0x00, 0x00,
		0x9c, 0x68, 0xde, 0x3a, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t ready[16] = {
		0x54, 0x43, 0x02, 0x07, 0x10, 0x00, 0x00, 0x00,
		0x2a, 0x00, 0x00, 0x00, 0xef, 0xcd, 0xab, 0x00,
	};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_msg_t out;

	(void)state;
	assert_int_equal(encode_sample(TB_CONTROL_SUBSCRIBE, buf, sizeof(buf)), 80);
	assert_memory_equal(buf, golden, sizeof(golden));
	assert_int_equal(tb_control_decode(golden, sizeof(golden), &out), 80);
	assert_int_equal(out.subscribe.qpn, 0x123456);
	assert_int_equal(encode_sample(TB_CONTROL_ACCEPT, buf, sizeof(buf)), 80);
	assert_memory_equal(buf, accept_tail, 8);
	assert_memory_equal(buf + 72, accept_tail + 8, 8);
	assert_int_equal(encode_sample(TB_CONTROL_HEARTBEAT, buf, sizeof(buf)), 40);
	assert_memory_equal(buf + 24, heartbeat_skip, 16);
	assert_int_equal(encode_sample(TB_CONTROL_READY, buf, sizeof(buf)), 16);
	assert_memory_equal(buf, ready, 16);
}

static void golden_bye_and_hello_head(void **state)
{
	static const uint8_t bye[16] = {
		0x54, 0x43, 0x02, 0x06, 0x10, 0x00, 0x00, 0x00,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	/* HELLO: header, stream 42, reserved, then the strings in place. */
	static const uint8_t hello_head[24] = {
		0x54, 0x43, 0x02, 0x01, 0xb0, 0x00, 0x00, 0x00,
		0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		's', 't', 'r', 'a', 't', '-', '7', '@',
	};
	uint8_t buf[TB_CONTROL_MSG_MAX];

	(void)state;
	assert_int_equal(encode_sample(TB_CONTROL_BYE, buf, sizeof(buf)), 16);
	assert_memory_equal(buf, bye, sizeof(bye));
	assert_int_equal(encode_sample(TB_CONTROL_HELLO, buf, sizeof(buf)), 176);
	assert_memory_equal(buf, hello_head, sizeof(hello_head));
	assert_memory_equal(buf + 48, "s3cret-Token_!~", 16); /* with its NUL */
	for (size_t i = 48 + 16; i < 176; i++)
		assert_int_equal(buf[i], 0);
}

/* ------------------------------------------------------- bad headers */

static void bad_headers(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX + 64];
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_SUBSCRIBE, buf, sizeof(buf));

	expect_err(decode_bad(buf, 0), TB_EPROTO, "truncated");
	expect_err(decode_bad(buf, 7), TB_EPROTO, "truncated");

	buf[0] ^= 0xff;
	expect_err(decode_bad(buf, n), TB_EFORMAT, "magic");
	buf[0] ^= 0xff;
	buf[1] = 'R'; /* the recovery protocol's magic */
	expect_err(decode_bad(buf, n), TB_EFORMAT, "magic");
	buf[1] = 'C';

	put8(buf, 2, 1);
	expect_err(decode_bad(buf, n), TB_EFORMAT, "version 1");
	assert_non_null(strstr(tb_errmsg(), "version 2"));
	put8(buf, 2, 3);
	expect_err(decode_bad(buf, n), TB_EFORMAT, "version 3");
	put8(buf, 2, 0);
	expect_err(decode_bad(buf, n), TB_EFORMAT, "version 0");
	put8(buf, 2, TB_CONTROL_VERSION);

	put8(buf, 3, 0);
	expect_err(decode_bad(buf, n), TB_EPROTO, "type 0");
	put8(buf, 3, TB_CONTROL_TYPE_MAX + 1);
	expect_err(decode_bad(buf, n), TB_EPROTO, "type 8");
	put8(buf, 3, 0xff);
	expect_err(decode_bad(buf, n), TB_EPROTO, "type 255");
	put8(buf, 3, TB_CONTROL_SUBSCRIBE);

	/* Length disagreeing with the type, in both directions, even when
	 * the buffer holds that many bytes. */
	put32(buf, 4, 81);
	expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 81");
	put32(buf, 4, 79);
	expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 79");
	put32(buf, 4, 0xffffffffu);
	expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length");
	/* A HELLO's length on a SUBSCRIBE, and version 1's SUBSCRIBE size. */
	put32(buf, 4, 176);
	expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 176");
	put32(buf, 4, 72);
	expect_err(decode_bad(buf, sizeof(buf)), TB_EPROTO, "length 72");
	put32(buf, 4, 80);

	/* Length right, buffer shorter. */
	expect_err(decode_bad(buf, 79), TB_EPROTO, "length");
	assert_non_null(strstr(tb_errmsg(), "truncated"));
}

/* ------------------------------------------------------- bad fields */

#define W(type, field) offsetof(tb_control_wire_##type##_t, field)

static void bad_hello(void **state)
{
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX];
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_HELLO, good, sizeof(good));

#define RESET() memcpy(b, good, sizeof(b))
	RESET(); put32(b, W(hello, stream_id), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); put32(b, W(hello, reserved), 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved");

	/* client_id: unterminated, control byte, space, DEL, tail garbage. */
	RESET(); memset(b + W(hello, client_id), 'x', TB_CONTROL_CLIENT_ID_LEN);
	expect_err(decode_bad(b, n), TB_EPROTO, "client_id");
	assert_non_null(strstr(tb_errmsg(), "NUL"));
	RESET(); put8(b, W(hello, client_id) + 2, 0x01);
	expect_err(decode_bad(b, n), TB_EPROTO, "client_id");
	RESET(); put8(b, W(hello, client_id) + 2, ' ');
	expect_err(decode_bad(b, n), TB_EPROTO, "client_id");
	RESET(); put8(b, W(hello, client_id), 0x7f);
	expect_err(decode_bad(b, n), TB_EPROTO, "client_id");
	RESET(); put8(b, W(hello, client_id) + 31, 'z');
	expect_err(decode_bad(b, n), TB_EPROTO, "client_id");

	/* token: empty, unterminated, non-printable, high bit, tail. */
	RESET(); memset(b + W(hello, token), 0, TB_CONTROL_TOKEN_LEN);
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	assert_non_null(strstr(tb_errmsg(), "empty"));
	RESET(); memset(b + W(hello, token), 'k', TB_CONTROL_TOKEN_LEN);
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	assert_non_null(strstr(tb_errmsg(), "NUL"));
	RESET(); put8(b, W(hello, token) + 3, '\n');
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); put8(b, W(hello, token) + 0, 0xc3);
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); put8(b, W(hello, token) + 5, ' ');
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	RESET(); put8(b, W(hello, token) + 127, 'q');
	expect_err(decode_bad(b, n), TB_EPROTO, "token");
	assert_non_null(strstr(tb_errmsg(), "after its NUL"));
#undef RESET
}

static void bad_subscribe(void **state)
{
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX];
	static const uint64_t bad_len[] = {
		0, 1, 3, 65535, 65536 + 4096, 3ull << 20, (1ull << 30) + 1,
		1ull << 31, 1ull << 63, UINT64_MAX, 32768,
	};
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_SUBSCRIBE, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	RESET(); put32(b, W(subscribe, stream_id), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); put8(b, W(subscribe, transport), TB_TRANSPORT_UDP + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "transport");
	RESET(); put8(b, W(subscribe, transport), 0xff);
	expect_err(decode_bad(b, n), TB_EPROTO, "transport");
	RESET(); put8(b, W(subscribe, mtu), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "mtu");
	RESET(); put8(b, W(subscribe, mtu), TB_CONTROL_MTU_4096 + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "mtu");
	RESET(); put8(b, W(subscribe, flags), 0x02);
	expect_err(decode_bad(b, n), TB_EPROTO, "flags");
	RESET(); put8(b, W(subscribe, flags), 0x81);
	expect_err(decode_bad(b, n), TB_EPROTO, "flags");
	RESET(); put8(b, W(subscribe, reserved0), 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved0");
	RESET(); put16(b, W(subscribe, reserved1), 0x100);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved1");
	RESET(); put32(b, W(subscribe, reserved2), 0x80000000u);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved2");
	RESET(); put32(b, W(subscribe, recv_depth), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "recv_depth");
	RESET(); put32(b, W(subscribe, recv_depth), TB_CONTROL_RECV_MAX + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "recv_depth");
	for (size_t i = 0; i < sizeof(bad_len) / sizeof(bad_len[0]); i++) {
		RESET(); put64(b, W(subscribe, ring_len), bad_len[i]);
		expect_err(decode_bad(b, n), TB_EPROTO, "ring_len");
	}
	RESET(); put32(b, W(subscribe, qpn), 0x1000000);
	expect_err(decode_bad(b, n), TB_EPROTO, "qpn");
	RESET(); put32(b, W(subscribe, qpn), 0xffffffff);
	expect_err(decode_bad(b, n), TB_EPROTO, "qpn");
	RESET(); put32(b, W(subscribe, psn), 0x1000000);
	expect_err(decode_bad(b, n), TB_EPROTO, "psn");
	RESET(); put32(b, W(subscribe, psn), 0x80abcdef);
	expect_err(decode_bad(b, n), TB_EPROTO, "psn");
#undef RESET
}

static void bad_accept(void **state)
{
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX];
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_ACCEPT, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	RESET(); put32(b, W(accept, stream_id), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); put32(b, W(accept, qpn), 0x1000000);
	expect_err(decode_bad(b, n), TB_EPROTO, "qpn");
	RESET(); put32(b, W(accept, psn), 0x2000000);
	expect_err(decode_bad(b, n), TB_EPROTO, "psn");
	RESET(); put64(b, W(accept, epoch), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "epoch");
	RESET(); put64(b, W(accept, next_seq), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "next_seq");
	RESET(); put64(b, W(accept, ring_offset), 33);
	expect_err(decode_bad(b, n), TB_EPROTO, "ring_offset");
	RESET(); put64(b, W(accept, ring_offset), 16);
	expect_err(decode_bad(b, n), TB_EPROTO, "ring_offset");
	RESET(); put8(b, W(accept, mtu), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "mtu");
	RESET(); put8(b, W(accept, mtu), TB_CONTROL_MTU_4096 + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "mtu");
	RESET(); put8(b, W(accept, sl), TB_CONTROL_SL_MAX + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "sl 16");
	RESET(); put8(b, W(accept, reserved0), 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved0");
	RESET(); put16(b, W(accept, reserved1), 2);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved1");
#undef RESET
}

static void bad_heartbeat_and_ready(void **state)
{
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX];
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_HEARTBEAT, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	/* A skipped range is both zero or first <= last, both non-zero. */
	RESET(); put64(b, W(heartbeat, skip_first), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "skip_first");
	RESET(); put64(b, W(heartbeat, skip_last), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "skip_last");
	RESET(); put64(b, W(heartbeat, skip_last), 987653999);
	expect_err(decode_bad(b, n), TB_EPROTO, "not a range");

	n = encode_sample(TB_CONTROL_READY, good, sizeof(good));
	RESET(); put32(b, W(ready, stream_id), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "stream_id");
	RESET(); put32(b, W(ready, qpn), 0x1000000);
	expect_err(decode_bad(b, n), TB_EPROTO, "qpn");
#undef RESET
}

/* A version 1 peer: its messages are not read, but a REJECT of either
 * version is, and this build can refuse it in its own version. */
static void version_one_peers(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_reject_t r = sample_reject();
	tb_control_msg_t out;
	int n;

	(void)state;
	/* What a version 1 subscriber sends first: a HELLO (176 bytes in
	 * both versions) with version byte 1.  The framer bounds it, the
	 * decoder names both versions, and the version can be read. */
	n = encode_sample(TB_CONTROL_HELLO, buf, sizeof(buf));
	put8(buf, 2, 1);
	assert_int_equal(tb_control_frame_need(buf, 8), n - 8);
	expect_err(decode_bad(buf, (size_t)n), TB_EFORMAT, "version 1");
	assert_int_equal(tb_control_version_of(buf, (size_t)n), 1);
	assert_int_equal(tb_control_version_of(buf, 2), -1);
	buf[0] = 'X';
	assert_int_equal(tb_control_version_of(buf, (size_t)n), -1);
	/* Not a REJECT: refused by the refusal reader too. */
	n = encode_sample(TB_CONTROL_HELLO, buf, sizeof(buf));
	put8(buf, 2, 1);
	memset(&out, 0, sizeof(out));
	expect_err(tb_control_decode_refusal(buf, (size_t)n, &out), TB_EPROTO,
		   "only a REJECT");

	/* The refusal it gets, in version 1: the same bytes but the version. */
	r.reason = TB_CONTROL_REJ_BAD_VERSION;
	assert_int_equal(tb_control_encode_reject_in(buf, sizeof(buf), &r, 1), 216);
	assert_int_equal(buf[2], 1);
	expect_err(decode_bad(buf, 216), TB_EFORMAT, "version 1");
	assert_int_equal(tb_control_decode_refusal(buf, 216, &out), 216);
	assert_int_equal(out.type, TB_CONTROL_REJECT);
	assert_int_equal(out.version, 1);
	assert_int_equal(out.reject.reason, TB_CONTROL_REJ_BAD_VERSION);
	assert_string_equal(out.reject.text, r.text);
	{
		uint8_t v2[TB_CONTROL_MSG_MAX];

		assert_int_equal(tb_control_encode_reject(v2, sizeof(v2), &r), 216);
		assert_int_equal(v2[2], 2);
		v2[2] = 1;
		assert_memory_equal(v2, buf, 216);
	}
	/* A current REJECT reads through the refusal reader as well; other
	 * current messages come back as themselves. */
	assert_int_equal(tb_control_encode_reject(buf, sizeof(buf), &r), 216);
	assert_int_equal(tb_control_decode_refusal(buf, 216, &out), 216);
	assert_int_equal(out.version, 2);
	n = encode_sample(TB_CONTROL_ACCEPT, buf, sizeof(buf));
	assert_int_equal(tb_control_decode_refusal(buf, (size_t)n, &out), TB_EPROTO);
	/* Versions nobody wrote. */
	expect_err(tb_control_encode_reject_in(buf, sizeof(buf), &r, 0), TB_EINVAL,
		   "version 0");
	expect_err(tb_control_encode_reject_in(buf, sizeof(buf), &r, 3), TB_EINVAL,
		   "version 3");
	assert_int_equal(tb_control_encode_reject(buf, sizeof(buf), &r), 216);
	put8(buf, 2, 9);
	assert_int_equal(tb_control_decode_refusal(buf, 216, &out), TB_EFORMAT);
}

static void bad_reject_and_bye(void **state)
{
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX];
	int n;

	(void)state;
	n = encode_sample(TB_CONTROL_REJECT, good, sizeof(good));
#define RESET() memcpy(b, good, sizeof(b))
	RESET(); put32(b, W(reject, reason), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "reason");
	RESET(); put32(b, W(reject, reason), TB_CONTROL_REJ_MAX + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "reason");
	RESET(); memset(b + W(reject, text), 'r', TB_CONTROL_TEXT_LEN);
	expect_err(decode_bad(b, n), TB_EPROTO, "text");
	RESET(); put8(b, W(reject, text) + 4, 0x1b); /* an escape sequence */
	expect_err(decode_bad(b, n), TB_EPROTO, "text");
	RESET(); put8(b, W(reject, text) + TB_CONTROL_TEXT_LEN - 1, '!');
	expect_err(decode_bad(b, n), TB_EPROTO, "text");

	n = encode_sample(TB_CONTROL_BYE, good, sizeof(good));
	RESET(); put32(b, W(bye, reason), 0);
	expect_err(decode_bad(b, n), TB_EPROTO, "reason");
	RESET(); put32(b, W(bye, reason), TB_CONTROL_BYE_MAX + 1);
	expect_err(decode_bad(b, n), TB_EPROTO, "reason");
	RESET(); put32(b, W(bye, reserved), 7);
	expect_err(decode_bad(b, n), TB_EPROTO, "reserved");
#undef RESET
}

/* The encoders refuse what the decoder would refuse, and short buffers. */
static void encoders_refuse(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_hello_t h = sample_hello();
	tb_control_subscribe_t s = sample_subscribe();
	tb_control_accept_t a = sample_accept();
	tb_control_reject_t r = sample_reject();
	tb_control_bye_t bye = sample_bye();

	(void)state;
	for (int t = 1; t <= TB_CONTROL_TYPE_MAX; t++) {
		memset(buf, 0xee, sizeof(buf));
		expect_err(encode_sample(t, buf, sizes[t] - 1),
			   TB_EMSGSIZE, tb_control_type_name(t));
		assert_int_equal(buf[0], 0xee); /* nothing written */
		assert_int_equal(encode_sample(t, buf, sizes[t]), (int)sizes[t]);
	}

	h.token[0] = '\0';
	expect_err(tb_control_encode_hello(buf, sizeof(buf), &h), TB_EINVAL, "token");
	h = sample_hello();
	memset(h.token, 'a', sizeof(h.token));
	expect_err(tb_control_encode_hello(buf, sizeof(buf), &h), TB_EINVAL, "token");
	h = sample_hello();
	strcpy(h.token, "has space");
	expect_err(tb_control_encode_hello(buf, sizeof(buf), &h), TB_EINVAL, "token");
	h = sample_hello();
	memset(h.client_id, 'a', sizeof(h.client_id));
	expect_err(tb_control_encode_hello(buf, sizeof(buf), &h), TB_EINVAL,
		   "client_id");
	h = sample_hello();
	h.stream_id = 0;
	expect_err(tb_control_encode_hello(buf, sizeof(buf), &h), TB_EINVAL,
		   "stream_id");

	s.qpn = 1u << 24;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL, "qpn");
	s = sample_subscribe();
	s.psn = 1u << 24;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL, "psn");
	s = sample_subscribe();
	s.ring_len = 3u << 20;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL,
		   "ring_len");
	s = sample_subscribe();
	s.mtu = 9;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL, "mtu");
	s = sample_subscribe();
	s.transport = 4;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL,
		   "transport");
	s = sample_subscribe();
	s.flags = 0x40;
	expect_err(tb_control_encode_subscribe(buf, sizeof(buf), &s), TB_EINVAL,
		   "flags");

	a.epoch = 0;
	expect_err(tb_control_encode_accept(buf, sizeof(buf), &a), TB_EINVAL, "epoch");
	a = sample_accept();
	a.ring_offset = 1;
	expect_err(tb_control_encode_accept(buf, sizeof(buf), &a), TB_EINVAL,
		   "ring_offset");

	r.reason = 99;
	expect_err(tb_control_encode_reject(buf, sizeof(buf), &r), TB_EINVAL, "reason");
	r = sample_reject();
	r.text[3] = '\t';
	expect_err(tb_control_encode_reject(buf, sizeof(buf), &r), TB_EINVAL, "text");
	r = sample_reject();
	memset(r.text, 'x', sizeof(r.text));
	expect_err(tb_control_encode_reject(buf, sizeof(buf), &r), TB_EINVAL, "text");

	a = sample_accept();
	a.sl = 16;
	expect_err(tb_control_encode_accept(buf, sizeof(buf), &a), TB_EINVAL, "sl");
	a = sample_accept();
	a.mtu = 0;
	expect_err(tb_control_encode_accept(buf, sizeof(buf), &a), TB_EINVAL, "mtu");

	bye.reason = 0;
	expect_err(tb_control_encode_bye(buf, sizeof(buf), &bye), TB_EINVAL, "reason");
	{
		tb_control_heartbeat_t hb = sample_heartbeat();
		tb_control_ready_t rd = sample_ready();

		hb.skip_first = 0;
		expect_err(tb_control_encode_heartbeat(buf, sizeof(buf), &hb),
			   TB_EINVAL, "skip_first");
		rd.qpn = 1u << 24;
		expect_err(tb_control_encode_ready(buf, sizeof(buf), &rd), TB_EINVAL,
			   "qpn");
	}
}

/* A host string with garbage after its NUL goes out canonical. */
static void encoder_zero_fills_strings(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_hello_t h = sample_hello();
	tb_control_msg_t out;

	(void)state;
	memset(h.token, '#', sizeof(h.token));
	strcpy(h.token, "tok");
	memset(h.client_id, '#', sizeof(h.client_id));
	strcpy(h.client_id, "id");
	assert_int_equal(tb_control_encode_hello(buf, sizeof(buf), &h), 176);
	for (size_t i = 48 + 3; i < 176; i++)
		assert_int_equal(buf[i], 0);
	for (size_t i = 16 + 2; i < 48; i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(tb_control_decode(buf, 176, &out), 176);
	assert_string_equal(out.hello.token, "tok");
}

/* ---------------------------------------------------------- truncation */

static int decode_any(const uint8_t *buf, size_t len)
{
	tb_control_msg_t out;

	return tb_control_decode(buf, len, &out);
}

static const codec_fuzz_codec_t codec = {
	.types = TB_CONTROL_TYPE_MAX,
	.sizes = sizes,
	.hdr_len = TB_WIRE_HDR_LEN,
	.cap = TB_CONTROL_MSG_MAX,
	.encode_sample = encode_sample,
	.decode_bad = decode_bad,
	.decode = decode_any,
	.frame_need = tb_control_frame_need,
};

static void truncation_every_byte(void **state)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];

	(void)state;
	codec_fuzz_truncation(&codec, buf);
}

/* -------------------------------------------------------------- framer */

static void framer_refuses_hostile_headers(void **state)
{
	uint8_t b[TB_CONTROL_MSG_MAX];

	(void)state;
	encode_sample(TB_CONTROL_HELLO, b, sizeof(b));

	/* A stranger is told apart from its first two bytes. */
	memcpy(b, "GET / HTTP/1.1\r\n", 16);
	assert_int_equal(tb_control_frame_need(b, 1), 7);
	expect_err(tb_control_frame_need(b, 2), TB_EPROTO, "magic");
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "magic");

	encode_sample(TB_CONTROL_HELLO, b, sizeof(b));
	put32(b, 4, 0xffffffffu);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "length");
	put32(b, 4, TB_CONTROL_MSG_MAX + 1);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "length");
	put32(b, 4, 7);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "length");
	put32(b, 4, 0);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "length");
	/* This version, wrong size for the type: never valid. */
	put32(b, 4, 175);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "length 175");
	/* This version, unknown type. */
	put32(b, 4, 176);
	put8(b, 3, 99);
	expect_err(tb_control_frame_need(b, 8), TB_EPROTO, "type 99");

	/* Another version: framed within the bound, then decode names
	 * both versions. */
	put8(b, 2, 3);
	put8(b, 3, 42);
	put32(b, 4, 300);
	assert_int_equal(tb_control_frame_need(b, 8), 292);
	assert_int_equal(tb_control_frame_need(b, 300), 0);
	expect_err(decode_bad(b, 300), TB_EFORMAT, "version 3");
	assert_non_null(strstr(tb_errmsg(), "version 2"));
	put32(b, 4, TB_CONTROL_MSG_MAX);
	assert_int_equal(tb_control_frame_need(b, 8), TB_CONTROL_MSG_MAX - 8);
}

/* ------------------------------------------------------------ mutation */

static void check_in_range(const tb_control_msg_t *m)
{
	switch (m->type) {
	case TB_CONTROL_HELLO:
		assert_true(m->hello.stream_id != 0);
		assert_true(strlen(m->hello.token) > 0);
		assert_true(strlen(m->hello.token) < TB_CONTROL_TOKEN_LEN);
		assert_true(strlen(m->hello.client_id) < TB_CONTROL_CLIENT_ID_LEN);
		break;
	case TB_CONTROL_SUBSCRIBE:
		assert_true(m->subscribe.qpn <= 0xffffff);
		assert_true(m->subscribe.psn <= 0xffffff);
		assert_true(m->subscribe.ring_len >= TB_RING_MIN);
		assert_true((m->subscribe.ring_len &
			     (m->subscribe.ring_len - 1)) == 0);
		assert_true(m->subscribe.transport <= TB_TRANSPORT_UDP);
		assert_true(m->subscribe.mtu >= 1 && m->subscribe.mtu <= 5);
		break;
	case TB_CONTROL_ACCEPT:
		assert_true(m->accept.qpn <= 0xffffff);
		assert_true(m->accept.psn <= 0xffffff);
		assert_true(m->accept.epoch != 0 && m->accept.next_seq != 0);
		assert_true(m->accept.mtu >= 1 && m->accept.mtu <= 5);
		assert_true(m->accept.sl <= TB_CONTROL_SL_MAX);
		break;
	case TB_CONTROL_REJECT:
		assert_true(m->reject.reason >= 1 &&
			    m->reject.reason <= TB_CONTROL_REJ_MAX);
		assert_true(strlen(m->reject.text) < TB_CONTROL_TEXT_LEN);
		break;
	case TB_CONTROL_BYE:
		assert_true(m->bye.reason >= 1 && m->bye.reason <= TB_CONTROL_BYE_MAX);
		break;
	case TB_CONTROL_HEARTBEAT:
		assert_true((m->heartbeat.skip_first == 0) ==
			    (m->heartbeat.skip_last == 0));
		assert_true(m->heartbeat.skip_first <= m->heartbeat.skip_last);
		break;
	case TB_CONTROL_READY:
		assert_true(m->ready.stream_id != 0 && m->ready.qpn <= 0xffffff);
		break;
	default:
		fail_msg("decoded unknown type %u", m->type);
	}
}

static void random_mutation(void **state)
{
	enum { ROUNDS = 300000 };
	uint8_t good[TB_CONTROL_MSG_MAX], b[TB_CONTROL_MSG_MAX + 16];
	uint8_t again[TB_CONTROL_MSG_MAX];
	long ok = 0, bad = 0;

	uint64_t rng = 0x5eed0001c0ffee11ull;

	(void)state;
	for (int round = 0; round < ROUNDS; round++) {
		int type = 1 + (int)(rng_xorshift64s(&rng) % TB_CONTROL_TYPE_MAX);
		int n = encode_sample(type, good, sizeof(good));
		/* Mostly the header and the first bytes of the body, where
		 * the rules are densest; sometimes anywhere. */
		size_t len = codec_fuzz_mutate(&rng, good, (size_t)n, b,
					       sizeof(b), 24, 0);
		tb_control_msg_t out;
		int rc, need;

		need = tb_control_frame_need(b, len);
		rc = tb_control_decode(b, len, &out);
		if (rc > 0) {
			ok++;
			assert_true((size_t)rc <= len);
			assert_int_equal(need, 0);
			check_in_range(&out);
			/* Canonical: what decoded re-encodes to the same bytes. */
			assert_int_equal(encode_msg(&out, again, sizeof(again)), rc);
			assert_memory_equal(again, b, (size_t)rc);
		} else {
			bad++;
			assert_true(rc == TB_EPROTO || rc == TB_EFORMAT);
			assert_true(tb_errmsg()[0] != '\0');
			assert_true(need != 0 || len >= 8);
		}
		assert_true(need <= (int)TB_CONTROL_MSG_MAX);
	}
	print_message("mutation: %ld decoded, %ld refused\n", ok, bad);
	assert_true(ok > 1000 && bad > 1000);
}

/* ---------------------------------------------------------------- token */

static void token_compare(void **state)
{
	char a[TB_CONTROL_TOKEN_LEN], b[TB_CONTROL_TOKEN_LEN];

	(void)state;
	assert_int_equal(tb_control_token_equal("s3cret", "s3cret"), 1);
	assert_int_equal(tb_control_token_equal("", ""), 1);
	assert_int_equal(tb_control_token_equal("x3cret", "s3cret"), 0); /* first */
	assert_int_equal(tb_control_token_equal("s3creT", "s3cret"), 0); /* last */
	assert_int_equal(tb_control_token_equal("s3cre", "s3cret"), 0);  /* prefix */
	assert_int_equal(tb_control_token_equal("s3cret", "s3cret1"), 0);
	assert_int_equal(tb_control_token_equal("", "a"), 0);
	assert_int_equal(tb_control_token_equal("a", ""), 0);

	/* Longest tokens: differing only in the last byte, or equal. */
	memset(a, 'k', sizeof(a) - 1);
	a[sizeof(a) - 1] = '\0';
	memcpy(b, a, sizeof(b));
	assert_int_equal(tb_control_token_equal(a, b), 1);
	b[sizeof(b) - 2] = 'j';
	assert_int_equal(tb_control_token_equal(a, b), 0);
	b[sizeof(b) - 2] = 'k';
	b[0] = 'j';
	assert_int_equal(tb_control_token_equal(a, b), 0);
	/* Same contents, one a byte shorter. */
	memcpy(b, a, sizeof(b));
	b[sizeof(b) - 2] = '\0';
	assert_int_equal(tb_control_token_equal(a, b), 0);
	assert_int_equal(tb_control_token_equal(b, a), 0);
	/* Bytes after the NUL do not matter. */
	memcpy(b, a, sizeof(b));
	a[5] = '\0';
	b[5] = '\0';
	b[6] = 'Z';
	assert_int_equal(tb_control_token_equal(a, b), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_hello),
		cmocka_unit_test(round_trip_subscribe),
		cmocka_unit_test(round_trip_accept),
		cmocka_unit_test(round_trip_reject),
		cmocka_unit_test(round_trip_heartbeat_and_bye),
		cmocka_unit_test(back_to_back),
		cmocka_unit_test(golden_subscribe),
		cmocka_unit_test(golden_bye_and_hello_head),
		cmocka_unit_test(bad_headers),
		cmocka_unit_test(bad_hello),
		cmocka_unit_test(bad_subscribe),
		cmocka_unit_test(bad_accept),
		cmocka_unit_test(bad_reject_and_bye),
		cmocka_unit_test(bad_heartbeat_and_ready),
		cmocka_unit_test(version_one_peers),
		cmocka_unit_test(encoders_refuse),
		cmocka_unit_test(encoder_zero_fills_strings),
		cmocka_unit_test(truncation_every_byte),
		cmocka_unit_test(framer_refuses_hostile_headers),
		cmocka_unit_test(random_mutation),
		cmocka_unit_test(token_compare),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
