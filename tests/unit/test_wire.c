/*
 * The shared codec of the TCP protocols (wire.h), on a toy protocol of two
 * types: framing, header checks, table-driven encode and decode, field and
 * string rules, constant-time tokens.  Bad input included.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/wire.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------ the toy protocol */

#define TOY_MAGIC 0x5954u /* 'T','Y' */
#define TOY_PING 1
#define TOY_NOTE 2

typedef struct toy_ping {
	uint32_t stream_id;
	uint64_t seq;
} toy_ping_t;

typedef struct toy_wire_ping {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t reserved;
	uint64_t seq;
} toy_wire_ping_t;

typedef struct toy_note {
	char text[24];
} toy_note_t;

typedef struct toy_wire_note {
	tb_wire_hdr_t hdr;
	char text[24];
} toy_wire_note_t;

static int put_ping(void *wire, const void *msg)
{
	toy_wire_ping_t *w = wire;
	const toy_ping_t *m = msg;
	int rc;

	if ((rc = tb_wire_stream_id_check("toy PING", m->stream_id, TB_EINVAL)) < 0 ||
	    (rc = tb_wire_seq_check("toy PING", "seq", m->seq, TB_EINVAL)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->seq = htole64(m->seq);
	return 0;
}

static int get_ping(const void *wire, void *msg)
{
	const toy_wire_ping_t *w = wire;
	toy_ping_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check("toy PING", "reserved", w->reserved)) < 0)
		return rc;
	m->stream_id = le32toh(w->stream_id);
	m->seq = le64toh(w->seq);
	if ((rc = tb_wire_stream_id_check("toy PING", m->stream_id, TB_EPROTO)) < 0)
		return rc;
	return tb_wire_seq_check("toy PING", "seq", m->seq, TB_EPROTO);
}

static int put_note(void *wire, const void *msg)
{
	toy_wire_note_t *w = wire;
	const toy_note_t *m = msg;

	return tb_wire_str_put("toy NOTE", "text", w->text, m->text,
			       sizeof(w->text), TB_WIRE_STR_TEXT);
}

static int get_note(const void *wire, void *msg)
{
	const toy_wire_note_t *w = wire;
	toy_note_t *m = msg;
	int rc;

	if ((rc = tb_wire_str_check("toy NOTE", "text", w->text, sizeof(w->text),
				    TB_WIRE_STR_TEXT)) < 0)
		return rc;
	memcpy(m->text, w->text, sizeof(m->text));
	return 0;
}

static const tb_wire_type_t toy_types[3] = {
	[TOY_PING] = {"PING", sizeof(toy_wire_ping_t), put_ping, get_ping},
	[TOY_NOTE] = {"NOTE", sizeof(toy_wire_note_t), put_note, get_note},
};

static const tb_wire_proto_t toy = {
	.name = "toy", .magic = TOY_MAGIC, .version = 3, .type_max = 2,
	.msg_max = 64, .types = toy_types,
};

static int msg_has(const char *s)
{
	return strstr(tb_errmsg(), s) != NULL;
}

/* --------------------------------------------------------------- header */

static void header_is_little_endian_and_fixed(void **state)
{
	uint8_t b[8];

	(void)state;
	tb_wire_hdr_put((tb_wire_hdr_t *)(void *)b, 0x4354, 1, 6, 0x01020304);
	assert_int_equal(b[0], 0x54);
	assert_int_equal(b[1], 0x43);
	assert_int_equal(b[2], 1);
	assert_int_equal(b[3], 6);
	assert_int_equal(b[4], 0x04);
	assert_int_equal(b[7], 0x01);
}

static void encode_decode_round_trip_at_any_alignment(void **state)
{
	toy_ping_t in = {.stream_id = 7, .seq = 0x1122334455667788ull}, out;
	uint8_t buf[80];
	tb_wire_hdr_t h;

	(void)state;
	for (int off = 0; off < 8; off++) {
		memset(buf, 0xee, sizeof(buf));
		assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf + off, 64, &in),
				 (int)sizeof(toy_wire_ping_t));
		assert_int_equal(buf[off + 2], 3);            /* version */
		assert_int_equal(buf[off + 3], TOY_PING);
		assert_int_equal(buf[off + 12], 0);           /* reserved zeroed */
		memset(&out, 0, sizeof(out));
		assert_int_equal(tb_wire_decode(&toy, buf + off, 64, &h, &out),
				 (int)sizeof(toy_wire_ping_t));
		assert_int_equal(h.type, TOY_PING);
		assert_int_equal(h.length, sizeof(toy_wire_ping_t));
		assert_int_equal(out.stream_id, 7);
		assert_true(out.seq == in.seq);
	}
}

static void encode_refuses_small_buffers_and_bad_fields(void **state)
{
	toy_ping_t p = {.stream_id = 7, .seq = 1};
	toy_note_t n;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf, 23, &p), TB_EMSGSIZE);
	assert_true(msg_has("toy PING: buffer of 23 bytes, the message is 24"));
	p.stream_id = 0;
	assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf, 64, &p), TB_EINVAL);
	assert_true(msg_has("toy PING: stream_id 0 names no stream"));
	p.stream_id = 1;
	p.seq = 0;
	assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf, 64, &p), TB_EINVAL);
	assert_true(msg_has("toy PING: seq 0 (sequences start at 1)"));
	memset(&n, 0, sizeof(n));
	memset(n.text, 'a', sizeof(n.text));            /* no NUL */
	assert_int_equal(tb_wire_encode(&toy, TOY_NOTE, buf, 64, &n), TB_EINVAL);
	assert_true(msg_has("toy NOTE: text is longer than 23 characters"));
	snprintf(n.text, sizeof(n.text), "tab\there");
	assert_int_equal(tb_wire_encode(&toy, TOY_NOTE, buf, 64, &n), TB_EINVAL);
	assert_true(msg_has("byte 0x09 at 3"));
}

static void frame_need_counts_and_refuses(void **state)
{
	toy_ping_t p = {.stream_id = 7, .seq = 1};
	uint8_t buf[64];

	(void)state;
	assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf, sizeof(buf), &p), 24);
	assert_int_equal(tb_wire_frame_need(&toy, buf, 0), 8);
	assert_int_equal(tb_wire_frame_need(&toy, buf, 5), 3);
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), 16);
	assert_int_equal(tb_wire_frame_need(&toy, buf, 24), 0);
	assert_int_equal(tb_wire_frame_need(&toy, buf, 30), 0);
	/* The magic alone is enough to refuse. */
	buf[0] ^= 0xff;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 2), TB_EPROTO);
	assert_true(msg_has("toy: bad magic"));
	buf[0] ^= 0xff;
	/* A length past msg_max, or below a header. */
	buf[4] = 65;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), TB_EPROTO);
	assert_true(msg_has("length 65 is outside 8..64"));
	buf[4] = 7;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), TB_EPROTO);
	/* This version: the type must exist and the length be its size. */
	buf[4] = 24;
	buf[3] = 9;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), TB_EPROTO);
	assert_true(msg_has("unknown message type 9"));
	buf[3] = TOY_NOTE;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), TB_EPROTO);
	assert_true(msg_has("toy NOTE: length 24, but the message is 32 bytes"));
	/* Another version: framed by its length alone. */
	buf[2] = 4;
	assert_int_equal(tb_wire_frame_need(&toy, buf, 8), 16);
}

static void decode_checks_the_header_first(void **state)
{
	toy_ping_t p = {.stream_id = 7, .seq = 1}, out;
	uint8_t buf[64];
	tb_wire_hdr_t h;

	(void)state;
	assert_int_equal(tb_wire_encode(&toy, TOY_PING, buf, sizeof(buf), &p), 24);
	assert_int_equal(tb_wire_decode(&toy, buf, 7, &h, &out), TB_EPROTO);
	assert_true(msg_has("toy: truncated: 7 bytes, a header is 8"));
	assert_int_equal(tb_wire_decode(&toy, buf, 23, &h, &out), TB_EPROTO);
	assert_true(msg_has("toy PING: truncated: 23 of 24 bytes"));
	buf[2] = 2;
	assert_int_equal(tb_wire_decode(&toy, buf, 24, &h, &out), TB_EFORMAT);
	assert_true(msg_has("protocol version 2 is not supported; this peer "
			    "speaks version 3"));
	buf[2] = 3;
	buf[1] = 0;
	assert_int_equal(tb_wire_decode(&toy, buf, 24, &h, &out), TB_EFORMAT);
	assert_true(msg_has("bad magic"));
	buf[1] = TOY_MAGIC >> 8;
	buf[3] = 0;
	assert_int_equal(tb_wire_decode(&toy, buf, 24, &h, &out), TB_EPROTO);
	assert_true(msg_has("unknown message type 0"));
	buf[3] = TOY_PING;
	/* The body's own checks: a reserved field, a field out of range. */
	buf[12] = 1;
	assert_int_equal(tb_wire_decode(&toy, buf, 24, &h, &out), TB_EPROTO);
	assert_true(msg_has("toy PING: reserved is not zero"));
	buf[12] = 0;
	memset(buf + 8, 0, 4);
	assert_int_equal(tb_wire_decode(&toy, buf, 24, &h, &out), TB_EPROTO);
	assert_true(msg_has("stream_id 0 names no stream"));
}

static void strings_as_received(void **state)
{
	char f[8];

	(void)state;
	memset(f, 0, sizeof(f));
	memcpy(f, "ab c", 4);
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_TEXT), 0);
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_WORD),
			 TB_EPROTO);
	assert_true(msg_has("x: s has byte 0x20 at 2; it must be printable "
			    "ASCII without spaces"));
	memset(f, 0, sizeof(f));
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_WORD), 0);
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_TOKEN),
			 TB_EPROTO);
	assert_true(msg_has("x: s is empty"));
	memcpy(f, "ok\0z", 4);
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_TEXT),
			 TB_EPROTO);
	assert_true(msg_has("non-zero bytes after its NUL"));
	memset(f, 'k', sizeof(f));
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_TEXT),
			 TB_EPROTO);
	assert_true(msg_has("not NUL-terminated within its 8 bytes"));
	f[0] = (char)0x80;
	f[1] = 0;
	assert_int_equal(tb_wire_str_check("x", "s", f, 8, TB_WIRE_STR_TEXT),
			 TB_EPROTO);
}

static void strings_put_zero_fill(void **state)
{
	char f[8];

	(void)state;
	memset(f, 0x55, sizeof(f));
	assert_int_equal(tb_wire_str_put("x", "s", f, "abc", 8, TB_WIRE_STR_TOKEN), 0);
	assert_string_equal(f, "abc");
	for (int i = 3; i < 8; i++)
		assert_int_equal(f[i], 0);
	assert_int_equal(tb_wire_str_put("x", "s", f, "", 8, TB_WIRE_STR_TOKEN),
			 TB_EINVAL);
	assert_int_equal(tb_wire_str_put("x", "s", f, "1234567", 8,
					 TB_WIRE_STR_WORD), 0);
	assert_int_equal(tb_wire_str_put("x", "s", f, "12345678", 8,
					 TB_WIRE_STR_WORD), TB_EINVAL);
	assert_true(msg_has("x: s is longer than 7 characters"));
}

static void field_checks_name_the_field(void **state)
{
	(void)state;
	assert_int_equal(tb_wire_epoch_check("x Y", 1, TB_EPROTO), 0);
	assert_int_equal(tb_wire_epoch_check("x Y", 0, TB_EPROTO), TB_EPROTO);
	assert_true(msg_has("x Y: epoch 0 is not an epoch"));
	assert_int_equal(tb_wire_enum_check("x Y", "reason", 3, 3, "a reason",
					    TB_EINVAL), 0);
	assert_int_equal(tb_wire_enum_check("x Y", "reason", 4, 3, "a reason",
					    TB_EINVAL), TB_EINVAL);
	assert_true(msg_has("x Y: reason 4 is not a reason (1..3)"));
	assert_int_equal(tb_wire_enum_check("x Y", "reason", 0, 3, "a reason",
					    TB_EPROTO), TB_EPROTO);
	assert_int_equal(tb_wire_reserved_check("x Y", "pad", 0), 0);
	assert_int_equal(tb_wire_reserved_check("x Y", "pad", 1ull << 40),
			 TB_EPROTO);
}

static void names_or_question_mark(void **state)
{
	static const char *const names[3] = {NULL, "one", "two"};

	(void)state;
	assert_string_equal(tb_wire_type_name(&toy, TOY_NOTE), "NOTE");
	assert_string_equal(tb_wire_type_name(&toy, 0), "?");
	assert_string_equal(tb_wire_type_name(&toy, 3), "?");
	assert_string_equal(tb_wire_enum_name(names, 2, 2), "two");
	assert_string_equal(tb_wire_enum_name(names, 2, 0), "?");
	assert_string_equal(tb_wire_enum_name(names, 2, 3), "?");
}

static void tokens_compare_whole(void **state)
{
	char a[16], b[16];

	(void)state;
	assert_int_equal(tb_wire_token_equal("abc", "abc", 16), 1);
	assert_int_equal(tb_wire_token_equal("abc", "abd", 16), 0);
	assert_int_equal(tb_wire_token_equal("abc", "ab", 16), 0);
	assert_int_equal(tb_wire_token_equal("", "", 16), 1);
	/* Unterminated within `size`: compared over `size` bytes only. */
	memset(a, 'q', sizeof(a));
	memset(b, 'q', sizeof(b));
	assert_int_equal(tb_wire_token_equal(a, b, 16), 1);
	b[15] = 'r';
	assert_int_equal(tb_wire_token_equal(a, b, 16), 0);
	assert_int_equal(tb_wire_token_equal(a, b, 15), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_is_little_endian_and_fixed),
		cmocka_unit_test(encode_decode_round_trip_at_any_alignment),
		cmocka_unit_test(encode_refuses_small_buffers_and_bad_fields),
		cmocka_unit_test(frame_need_counts_and_refuses),
		cmocka_unit_test(decode_checks_the_header_first),
		cmocka_unit_test(strings_as_received),
		cmocka_unit_test(strings_put_zero_fill),
		cmocka_unit_test(field_checks_name_the_field),
		cmocka_unit_test(names_or_question_mark),
		cmocka_unit_test(tokens_compare_whole),
	};
	return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
