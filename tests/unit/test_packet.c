/*
 * The ud/udp datagram header and frame walk (packet.h): every check of
 * tb_packet_check and tb_packet_frame_next on untrusted bytes, one case each, and
 * the sizes a datagram of a given MTU can carry.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/packet.h"
#include "tests/common/frames.h"

#include <string.h>

#define STREAM 77

static uint8_t buf[2048] __attribute__((aligned(64)));

/* Builds a data datagram of `n` frames with payload sizes `sizes`, first
 * sequence `first`; the last frame is left unpadded when `trim`.  Returns
 * the datagram's length. */
static size_t build(uint64_t first, int n, const uint32_t *sizes, int trim)
{
	size_t off = TB_PACKET_HDR_LEN;

	memset(buf, 0x5a, sizeof(buf));
	for (int i = 0; i < n; i++) {
		uint32_t space = frames_put(buf + off, STREAM, first + (uint64_t)i,
					    sizes[i], 3, 1000 + (uint64_t)i, NULL);

		off += (trim && i == n - 1) ? TB_FRAME_HDR_LEN + sizes[i] : space;
	}
	tb_packet_init((tb_packet_hdr_t *)buf, 0, STREAM, 9, first, (uint16_t)n,
		    (uint32_t)off);
	return off;
}

static tb_packet_hdr_t *hdr(void) { return (tb_packet_hdr_t *)buf; }

static tb_frame_hdr_t *frame_at(size_t off)
{
	return (tb_frame_hdr_t *)(buf + off);
}

/* Walks all frames; returns how many were good and the final fault. */
static int walk(size_t len, enum tb_packet_fault *fault)
{
	tb_packet_iter_t it;
	int n = 0;

	tb_packet_iter_init(&it, buf, len);
	while (tb_packet_frame_next(&it, fault))
		n++;
	return n;
}

static void header_layout_is_little_endian_on_the_wire(void **state)
{
	(void)state;
	build(0x0102030405060708ull, 1, (uint32_t[]){8}, 0);
	assert_int_equal(buf[0], 'T');
	assert_int_equal(buf[1], 'P');
	assert_int_equal(buf[2], TB_PACKET_VERSION);
	assert_int_equal(buf[4], STREAM);
	assert_int_equal(buf[16], 0x08);
	assert_int_equal(buf[23], 0x01);
	assert_int_equal(buf[24], 1);
	assert_int_equal(buf[28], 128); /* 64 + one 40-byte frame padded to 64 */
	/* What the sender fills in after tb_packet_init, where the format
	 * says: mtu at 26, nonce at 32, since at 40, the tag at 48..63. */
	hdr()->mtu = 0x0a0b;
	hdr()->nonce = 0x1112131415161718ull;
	hdr()->since = 0x2122232425262728ull;
	memset(hdr()->tag, 0xee, TB_PACKET_TAG_LEN);
	assert_int_equal(buf[26], 0x0b);
	assert_int_equal(buf[27], 0x0a);
	assert_int_equal(buf[32], 0x18);
	assert_int_equal(buf[39], 0x11);
	assert_int_equal(buf[40], 0x28);
	assert_int_equal(buf[47], 0x21);
	assert_int_equal(buf[48], 0xee);
	assert_int_equal(buf[63], 0xee);
	assert_int_equal(buf[TB_PACKET_HDR_LEN], 40); /* the frame's length */
}

static void valid_datagram_walks_every_frame(void **state)
{
	uint32_t sizes[] = {10, 64, 0, 100};
	enum tb_packet_fault fault;
	size_t len = build(500, 4, sizes, 0);
	tb_packet_iter_t it;
	const tb_frame_hdr_t *f;

	(void)state;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	tb_packet_iter_init(&it, buf, len);
	for (int i = 0; i < 4; i++) {
		f = tb_packet_frame_next(&it, &fault);
		assert_non_null(f);
		assert_int_equal(fault, TB_PACKET_OK);
		assert_int_equal(f->seq, 500 + i);
		assert_int_equal(tb_frame_payload_len(f), sizes[i]);
	}
	assert_null(tb_packet_frame_next(&it, &fault));
	assert_int_equal(fault, TB_PACKET_OK);
	assert_int_equal(it.left, 0);
}

static void last_frame_may_end_unpadded(void **state)
{
	enum tb_packet_fault fault;
	size_t len = build(1, 2, (uint32_t[]){8, 9}, 1);

	(void)state;
	assert_int_equal(len, TB_PACKET_HDR_LEN + 64 + 41);
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	assert_int_equal(walk(len, &fault), 2);
	assert_int_equal(fault, TB_PACKET_OK);
}

static void short_datagram(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);

	(void)state;
	(void)len;
	assert_int_equal(tb_packet_check(buf, 0, STREAM), TB_PACKET_SHORT);
	assert_int_equal(tb_packet_check(buf, TB_PACKET_HDR_LEN - 1, STREAM), TB_PACKET_SHORT);
}

static void bad_magic(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);

	(void)state;
	buf[0] ^= 0xff;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_MAGIC);
}

static void bad_version(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);

	(void)state;
	hdr()->version = TB_PACKET_VERSION + 1;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_VERSION);
}

/* A version-1 heartbeat was 32 bytes: told as a version mismatch, not as
 * a short datagram, since magic and version are where they always were;
 * fewer than 4 bytes are short. */
static void version_1_datagram_is_told_by_its_version(void **state)
{
	(void)state;
	memset(buf, 0, 32);
	buf[0] = 'T';
	buf[1] = 'P';
	buf[2] = 1;
	buf[3] = TB_PACKET_F_HEARTBEAT;
	buf[28] = 32;
	assert_int_equal(tb_packet_check(buf, 32, STREAM), TB_PACKET_BAD_VERSION);
	assert_int_equal(tb_packet_check(buf, 3, STREAM), TB_PACKET_SHORT);
	buf[2] = TB_PACKET_VERSION;
	assert_int_equal(tb_packet_check(buf, 32, STREAM), TB_PACKET_SHORT);
}

static void bad_length(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);

	(void)state;
	/* Header says more than arrived (a truncated datagram) ... */
	assert_int_equal(tb_packet_check(buf, len - 1, STREAM), TB_PACKET_BAD_LENGTH);
	/* ... or less. */
	assert_int_equal(tb_packet_check(buf, len + 32, STREAM), TB_PACKET_BAD_LENGTH);
}

static void bad_flags(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);

	(void)state;
	hdr()->flags = 0x80; /* unknown */
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_FLAGS);
	/* A heartbeat with frames behind it. */
	hdr()->flags = TB_PACKET_F_HEARTBEAT;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_FLAGS);
	/* An END with a count but no bytes. */
	tb_packet_init(hdr(), TB_PACKET_F_END, STREAM, 9, 5, 1, TB_PACKET_HDR_LEN);
	assert_int_equal(tb_packet_check(buf, TB_PACKET_HDR_LEN, STREAM), TB_PACKET_BAD_FLAGS);
	/* Well-formed heartbeat and END. */
	tb_packet_init(hdr(), TB_PACKET_F_HEARTBEAT, STREAM, 9, 5, 0, TB_PACKET_HDR_LEN);
	assert_int_equal(tb_packet_check(buf, TB_PACKET_HDR_LEN, STREAM), TB_PACKET_OK);
	tb_packet_init(hdr(), TB_PACKET_F_END, STREAM, 9, 5, 0, TB_PACKET_HDR_LEN);
	assert_int_equal(tb_packet_check(buf, TB_PACKET_HDR_LEN, STREAM), TB_PACKET_OK);
}

static void bad_count(void **state)
{
	size_t len = build(1, 2, (uint32_t[]){8, 8}, 0);

	(void)state;
	hdr()->count = 0;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_COUNT);
	/* Five frames of at least 32 bytes cannot fit in 128. */
	hdr()->count = 5;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_COUNT);
	hdr()->count = 0xffff;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_BAD_COUNT);
}

static void wrong_stream(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);
	enum tb_packet_fault fault;

	(void)state;
	assert_int_equal(tb_packet_check(buf, len, STREAM + 1), TB_PACKET_WRONG_STREAM);
	/* The header is ours but a frame inside is another stream's. */
	frame_at(TB_PACKET_HDR_LEN)->stream_id = STREAM + 1;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_WRONG_STREAM);
}

static void wrong_seq(void **state)
{
	size_t len = build(10, 3, (uint32_t[]){8, 8, 8}, 0);
	enum tb_packet_fault fault;

	(void)state;
	frame_at(TB_PACKET_HDR_LEN + 64)->seq = 13; /* 10, 11, then 13 */
	assert_int_equal(walk(len, &fault), 1);
	assert_int_equal(fault, TB_PACKET_BAD_SEQ);
	/* A header whose first_seq disagrees with the first frame. */
	len = build(10, 1, (uint32_t[]){8}, 0);
	hdr()->first_seq = 11;
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_BAD_SEQ);
}

static void frame_length_past_the_end(void **state)
{
	size_t len = build(1, 2, (uint32_t[]){8, 8}, 0);
	enum tb_packet_fault fault;

	(void)state;
	frame_at(TB_PACKET_HDR_LEN + 64)->length = 100; /* only 64 bytes left */
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	assert_int_equal(walk(len, &fault), 1);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
	/* A length below a frame header. */
	len = build(1, 1, (uint32_t[]){8}, 0);
	frame_at(TB_PACKET_HDR_LEN)->length = 8;
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
}

static void count_beyond_the_frames_present(void **state)
{
	size_t len = build(1, 2, (uint32_t[]){40, 0}, 0); /* 96 + 32 bytes */
	enum tb_packet_fault fault;

	(void)state;
	/* The bytes could hold three minimal frames, but two are there. */
	hdr()->count = 3;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	assert_int_equal(walk(len, &fault), 2);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
}

static void unpadded_frame_before_the_last(void **state)
{
	size_t len = build(1, 2, (uint32_t[]){8, 8}, 0);
	enum tb_packet_fault fault;

	(void)state;
	/* 72 bytes of frames: the first claims 72 (space 96) with a second
	 * frame still to come. */
	frame_at(TB_PACKET_HDR_LEN)->length = 72;
	hdr()->length = TB_PACKET_HDR_LEN + 72;
	len = TB_PACKET_HDR_LEN + 72;
	assert_int_equal(tb_packet_check(buf, len, STREAM), TB_PACKET_OK);
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
}

static void frame_of_wrong_version_or_type(void **state)
{
	size_t len = build(1, 1, (uint32_t[]){8}, 0);
	enum tb_packet_fault fault;

	(void)state;
	frame_at(TB_PACKET_HDR_LEN)->version = 99;
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
	len = build(1, 1, (uint32_t[]){8}, 0);
	frame_at(TB_PACKET_HDR_LEN)->type = TB_FRAME_PAD; /* valid frame, not data */
	assert_int_equal(walk(len, &fault), 0);
	assert_int_equal(fault, TB_PACKET_BAD_FRAME);
}

static void max_payload_follows_the_mtu(void **state)
{
	(void)state;
	/* 1472 = 46 * 32: header 64, frame header 32, 1376 of payload. */
	assert_int_equal(tb_packet_max_payload(1472), 1376);
	/* Rounded down to the frame alignment first. */
	assert_int_equal(tb_packet_max_payload(1500), 1472 - 96);
	assert_int_equal(tb_packet_max_payload(256), 160);
	assert_int_equal(tb_packet_max_payload(128), 32);
	assert_int_equal(tb_packet_max_payload(127), 0);
	assert_int_equal(tb_packet_max_payload(0), 0);
}

static void fault_names(void **state)
{
	(void)state;
	assert_string_equal(tb_packet_fault_name(TB_PACKET_OK), "ok");
	assert_string_equal(tb_packet_fault_name(TB_PACKET_SHORT), "short");
	assert_string_equal(tb_packet_fault_name(TB_PACKET_BAD_SEQ), "bad-seq");
	assert_string_equal(tb_packet_fault_name(TB_PACKET_FAULT_COUNT), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_layout_is_little_endian_on_the_wire),
		cmocka_unit_test(valid_datagram_walks_every_frame),
		cmocka_unit_test(last_frame_may_end_unpadded),
		cmocka_unit_test(short_datagram),
		cmocka_unit_test(bad_magic),
		cmocka_unit_test(bad_version),
		cmocka_unit_test(version_1_datagram_is_told_by_its_version),
		cmocka_unit_test(bad_length),
		cmocka_unit_test(bad_flags),
		cmocka_unit_test(bad_count),
		cmocka_unit_test(wrong_stream),
		cmocka_unit_test(wrong_seq),
		cmocka_unit_test(frame_length_past_the_end),
		cmocka_unit_test(count_beyond_the_frames_present),
		cmocka_unit_test(unpadded_frame_before_the_last),
		cmocka_unit_test(frame_of_wrong_version_or_type),
		cmocka_unit_test(max_payload_follows_the_mtu),
		cmocka_unit_test(fault_names),
	};
	return cmocka_run_group_tests_name("packet", tests, NULL, NULL);
}
