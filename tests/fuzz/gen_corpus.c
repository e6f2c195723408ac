/*
 * gen_corpus.c - writes the seed corpora of the fuzz targets, from the
 * encoders and writers themselves: for each target a few dozen small
 * inputs, named after what they are, valid ones and broken forms of them.
 *
 *   make fuzz-corpus        builds this and writes tests/fuzz/corpus/<name>/
 *   gen_corpus DIR [NAME...] writes DIR/<name>/ for the named targets (all
 *                           of the ones below when none is named)
 *
 * It is deterministic: run again, it writes the same files.  The corpora of
 * control, recovery_proto and itch were written before this program, from
 * the same encoders; it leaves those files alone and adds the inputs their
 * targets' later properties need (streams of several messages, whole
 * recovery responses), under names of their own.  The fuzzer's own finds
 * worth keeping are added by hand (tests/fuzz/corpus/README).
 */
#include "bus/crc32c.h"
#include "bus/config.h"
#include "bus/frame.h"
#include "bus/hist_encoding.h"
#include "bus/recovery/proto.h"
#include "bus/transport/control.h"
#include "bus/transport/packet.h"
#include "tools/md/gw.h"
#include "tickbus_schema.h"
#include <tickbus/hist.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *root;
static char target_dir[4096];

static void target(const char *name)
{
	snprintf(target_dir, sizeof(target_dir), "%s/%s", root, name);
	if (mkdir(target_dir, 0755) != 0 && errno != EEXIST) {
		perror(target_dir);
		exit(1);
	}
}

static void put(const char *name, const void *buf, size_t len)
{
	char path[8192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", target_dir, name);
	f = fopen(path, "wb");
	if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void put_text(const char *name, const char *text)
{
	put(name, text, strlen(text));
}

/* A growing byte buffer. */
typedef struct buf {
	uint8_t b[1 << 17];
	size_t n;
} buf_t;

static void b_reset(buf_t *b) { b->n = 0; }

static void b_add(buf_t *b, const void *p, size_t n)
{
	if (b->n + n > sizeof(b->b))
		abort();
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

static void b_u8(buf_t *b, uint8_t v) { b_add(b, &v, 1); }
static void b_u16(buf_t *b, uint16_t v) { b_add(b, &v, 2); }
static void b_u64(buf_t *b, uint64_t v) { b_add(b, &v, 8); }

/* A data frame of `payload` bytes (filled with the sequence's low byte),
 * padded to TB_FRAME_ALIGN when `pad`. */
static size_t frame(uint8_t *out, uint32_t payload, uint32_t stream,
		    uint64_t seq, int pad)
{
	tb_frame_hdr_t f;
	uint32_t len = TB_FRAME_HDR_LEN + payload;
	size_t space = pad ? tb_frame_space(len) : len;

	memset(out, 0, space);
	tb_frame_init(&f, payload, 2, stream, seq, 1000 + seq);
	memcpy(out, &f, sizeof(f));
	memset(out + TB_FRAME_HDR_LEN, (int)(seq & 0xff), payload);
	return space;
}

/* ------------------------------------------------------------- frame */

static void gen_frame(void)
{
	uint8_t b[4096];
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)b;
	size_t n;
	static const uint32_t sizes[] = {0, 1, 31, 32, 100};
	char name[64];

	target("frame");
	put("empty", "", 0);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		n = frame(b, sizes[i], 1, 7, 1);
		snprintf(name, sizeof(name), "data-%u", sizes[i]);
		put(name, b, n);
	}
	n = frame(b, 40, 1, 7, 0);
	put("data-40-unpadded", b, n);
	tb_frame_init_pad((tb_frame_hdr_t *)b, 96, 1, 8);
	put("pad-96", b, 96);
	n = frame(b, 0, 1, 9, 1);
	f->type = TB_FRAME_HEARTBEAT;
	put("heartbeat", b, n);
	/* a stretch of ring: data, data, pad, data */
	n = frame(b, 10, 1, 1, 1);
	n += frame(b + n, 50, 1, 2, 1);
	tb_frame_init_pad((tb_frame_hdr_t *)(b + n), 64, 1, 3);
	n += 64;
	n += frame(b + n, 5, 1, 3, 1);
	put("ring-data-pad-data", b, n);
	/* broken */
	n = frame(b, 8, 1, 7, 1);
	put("trunc-header", b, 31);
	put("trunc-payload", b, n - 8);
	f->version = 2;
	put("bad-version", b, n);
	n = frame(b, 8, 1, 7, 1);
	f->type = 0;
	put("bad-type-0", b, n);
	f->type = 4;
	put("bad-type-4", b, n);
	n = frame(b, 8, 1, 7, 1);
	f->length = 31;
	put("length-below-header", b, n);
	f->length = 0xffffffff;
	put("length-huge", b, n);
	f->length = TB_FRAME_MAX_LEN + 1;
	put("length-over-max", b, n);
	tb_frame_init_pad((tb_frame_hdr_t *)b, 40, 1, 8);
	n = 40;
	n += frame(b + 64, 4, 1, 8, 1);
	put("pad-odd-length", b, 64 + 64);
	memset(b, 0xff, 64);
	put("all-ff", b, 64);
	memset(b, 0, 64);
	put("zeros", b, 64);
}

/* --------------------------------------------------------------- shm */

/* fuzz_shm's input: set-up bytes, then the ring.  The newest mark is
 * the reader's own position and the sequence it expects there. */
static void shm_case(const char *name, uint8_t sel, uint64_t pos,
		     uint16_t behind, uint8_t intent, uint64_t expected,
		     uint8_t limit, const uint8_t *ring, size_t ring_len)
{
	buf_t *b = malloc(sizeof(*b));

	b_reset(b);
	b_u8(b, sel);
	b_u64(b, pos);
	b_u16(b, (uint16_t)(behind + intent)); /* the writer's intent */
	b_u16(b, 0);
	b_u64(b, expected ? expected : 1);
	b_u64(b, expected);
	b_u8(b, limit);
	b_add(b, ring, ring_len);
	put(name, b->b, b->n);
	free(b);
}

static void gen_shm(void)
{
	uint8_t ring[8192];
	size_t n = 0, k;

	target("shm");
	memset(ring, 0, sizeof(ring));
	/* frames 1..8 from offset 0 of a 1 KiB ring (largest frame 128) */
	for (int s = 1; s <= 8; s++)
		n += frame(ring + n, (uint32_t)(s * 7 % 60), 1, (uint64_t)s, 1);
	shm_case("in-order", 4, 0, (uint16_t)n, 0, 1, 16, ring, n);
	shm_case("in-order-limit-1", 4, 0, (uint16_t)n, 0, 1, 0, ring, n);
	shm_case("late-join", 0, 0, (uint16_t)n, 0, 0, 16, ring, n);
	shm_case("gap", 4, 0, (uint16_t)n, 0, 1, 16, ring + 64,
		 n - 64);
	shm_case("duplicates", 4, 0, (uint16_t)n, 0, 5, 16, ring, n);
	shm_case("lapped-behind", 4, 0, 1024 + 64, 0, 1, 16, ring, n);
	shm_case("lapped-intent", 4, 0, (uint16_t)n, 255, 1, 16, ring, n);
	shm_case("pos-high-bits", 4, UINT64_C(0x1000000000000), (uint16_t)n, 0,
		 1, 16, ring, n);
	shm_case("tail-before-end", 4, 0, 96, 0, 1, 16, ring, n);
	shm_case("empty-ring", 4, 0, 0, 0, 1, 16, ring, 0);
	shm_case("zero-ring-tail-ahead", 4, 0, 512, 0, 1, 16, NULL, 0);
	/* a wrap: frames up to the last 64 bytes, a pad, then from 0 */
	memset(ring, 0, sizeof(ring));
	k = frame(ring, 20, 1, 10, 1);
	tb_frame_init_pad((tb_frame_hdr_t *)(ring + 1024 - 64), 64, 1, 10);
	{
		uint8_t r2[1024];

		memset(r2, 0, sizeof(r2));
		memcpy(r2, ring, k);
		memcpy(r2 + 1024 - 64, ring + 1024 - 64, 64);
		shm_case("wrap-pad", 4, 1024 - 64, (uint16_t)(64 + k), 0, 10, 16,
			 r2, sizeof(r2));
		/* the pad's length runs past the ring's end */
		((tb_frame_hdr_t *)(r2 + 1024 - 64))->length = 128;
		shm_case("wrap-pad-too-long", 4, 1024 - 64, (uint16_t)(64 + k),
			 0, 10, 16, r2, sizeof(r2));
	}
	/* broken frames in a ring */
	n = 0;
	for (int s = 1; s <= 4; s++)
		n += frame(ring + n, 16, 1, (uint64_t)s, 1);
	((tb_frame_hdr_t *)(ring + 48))->version = 9;
	shm_case("bad-version-mid", 4, 0, (uint16_t)n, 0, 1, 16, ring, n);
	n = frame(ring, 16, 1, 1, 1);
	((tb_frame_hdr_t *)ring)->length = 200; /* over a 1 KiB ring's 128 */
	shm_case("frame-over-max", 4, 0, 256, 0, 1, 16, ring, 256);
	((tb_frame_hdr_t *)ring)->length = 31;
	shm_case("frame-below-header", 4, 0, 64, 0, 1, 16, ring, 64);
	n = frame(ring, 16, 1, UINT64_MAX, 1);
	n += frame(ring + n, 16, 1, 5, 1);
	shm_case("seq-max-then-5", 0, 0, (uint16_t)n, 0, 0, 16, ring, n);
	n = frame(ring, 16, 1, 1, 1);
	shm_case("misaligned-pos", 4, 8, (uint16_t)n, 0, 1, 16, ring, n);
	/* an 8 KiB ring (largest frame 1 KiB) with one big frame */
	n = frame(ring, 900, 1, 1, 1);
	shm_case("big-ring-big-frame", 7, 0, (uint16_t)n, 0, 1, 16, ring, n);
}

/* ------------------------------------------------------------- dgram */

/* fuzz_dgram's stream (its STREAM). */
#define DGRAM_STREAM 7

/* A datagram of `count` frames from `first`, for DGRAM_STREAM. */
static size_t dgram(uint8_t *out, uint64_t epoch, uint64_t first, int count,
		    uint8_t flags)
{
	tb_packet_hdr_t p;
	size_t n = TB_PACKET_HDR_LEN;

	for (int i = 0; i < count; i++)
		n += frame(out + n, (uint32_t)(5 + 9 * i), DGRAM_STREAM,
			   first + (uint64_t)i, i + 1 < count);
	tb_packet_init(&p, flags, DGRAM_STREAM, epoch, first, (uint16_t)count,
		       (uint32_t)n);
	memcpy(out, &p, sizeof(p));
	return n;
}

/*
 * fuzz_dgram's input: each datagram as a selector byte (1: the harness
 * signs it, as its publisher would), a u16 length and its bytes.  The
 * seeds written by hand beside these keep their names; these are gen-*.
 */
typedef struct dcase {
	buf_t b;
} dcase_t;

static void d_begin(dcase_t *c, uint8_t limit)
{
	(void)limit; /* fuzz_dgram delivers up to its own batch */
	b_reset(&c->b);
}

static void d_add(dcase_t *c, const uint8_t *d, size_t n)
{
	b_u8(&c->b, 1);
	b_u16(&c->b, (uint16_t)n);
	b_add(&c->b, d, n);
}

static void d_put(dcase_t *c, const char *name)
{
	char gen[128];

	snprintf(gen, sizeof(gen), "gen-%s", name);
	put(gen, c->b.b, c->b.n);
}

static void gen_dgram(void)
{
	static dcase_t c;
	uint8_t d[2048];
	tb_packet_hdr_t *p = (tb_packet_hdr_t *)d;
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)(d + TB_PACKET_HDR_LEN);
	size_t n;

	target("dgram");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 1, 0));
	d_put(&c, "one-frame");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 3, 0));
	d_add(&c, d, dgram(d, 5, 4, 2, 0));
	d_put(&c, "two-datagrams");
	d_begin(&c, 0);
	d_add(&c, d, dgram(d, 5, 1, 5, 0));
	d_put(&c, "five-frames-limit-1");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_add(&c, d, dgram(d, 5, 6, 2, 0));
	d_add(&c, d, dgram(d, 5, 3, 3, 0));
	d_put(&c, "gap-then-reordered");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_put(&c, "duplicate");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_add(&c, d, dgram(d, 5, 3, 0, TB_PACKET_F_HEARTBEAT));
	d_add(&c, d, dgram(d, 5, 7, 0, TB_PACKET_F_HEARTBEAT));
	d_put(&c, "heartbeat-tail-gap");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 10, 0, TB_PACKET_F_HEARTBEAT));
	d_add(&c, d, dgram(d, 5, 10, 2, 0));
	d_put(&c, "join-on-heartbeat");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_add(&c, d, dgram(d, 5, 5, 0, TB_PACKET_F_END));
	d_add(&c, d, dgram(d, 5, 5, 1, 0));
	d_put(&c, "end-with-gap-then-more");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 2, 0));
	d_add(&c, d, dgram(d, 6, 1, 2, 0));
	d_add(&c, d, dgram(d, 5, 3, 1, 0));
	d_add(&c, d, dgram(d, 0, 3, 1, 0));
	d_put(&c, "new-epoch-then-stale");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 100, 2, 0));
	d_put(&c, "late-join");
	d_begin(&c, 7);
	d_add(&c, d, dgram(d, 5, 1, 1, 0));
	d_add(&c, d, dgram(d, 5, UINT64_MAX, 1, 0));
	d_add(&c, d, dgram(d, 5, 2, 1, 0));
	d_put(&c, "seq-max");
	/* one datagram of each malformed kind */
	n = dgram(d, 5, 1, 2, 0);
	d_begin(&c, 7);
	d_add(&c, d, 20);
	d_put(&c, "bad-short");
	p->magic ^= 1;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-magic");
	n = dgram(d, 5, 1, 2, 0);
	p->version = 2;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-version");
	n = dgram(d, 5, 1, 2, 0);
	p->length += 32;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-length");
	n = dgram(d, 5, 1, 2, 0);
	p->flags = 4;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-flags");
	n = dgram(d, 5, 1, 2, 0);
	p->flags = TB_PACKET_F_HEARTBEAT;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "heartbeat-with-frames");
	n = dgram(d, 5, 1, 2, 0);
	p->count = 60;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-count-high");
	n = dgram(d, 5, 1, 2, 0);
	p->count = 1;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-count-low");
	n = dgram(d, 5, 1, 2, 0);
	f->version = 3;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-frame");
	n = dgram(d, 5, 1, 2, 0);
	p->stream_id = DGRAM_STREAM + 1;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "wrong-stream");
	n = dgram(d, 5, 1, 2, 0);
	f->stream_id = DGRAM_STREAM + 1;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "wrong-stream-frame");
	n = dgram(d, 5, 1, 2, 0);
	f->seq = 9;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "bad-seq");
	n = dgram(d, 5, 1, 2, 0);
	f->length = 4000;
	d_begin(&c, 7);
	d_add(&c, d, n);
	d_put(&c, "frame-past-end");
	d_begin(&c, 7);
	d_put(&c, "no-datagram");
}

/* ------------------------------------------------------------ config */

static void put_file(const char *name, const char *path)
{
	static char text[1 << 16];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		perror(path);
		exit(1);
	}
	n = fread(text, 1, sizeof(text), f);
	fclose(f);
	put(name, text, n);
}

static void gen_config(void)
{
	static const char *const examples[] = {"demo", "rc", "shm", "ud", "udp"};
	char name[64], path[64];

	target("config");
	for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
		snprintf(path, sizeof(path), "config/%s.ini", examples[i]);
		snprintf(name, sizeof(name), "example-%s", examples[i]);
		put_file(name, path);
	}
	put_text("minimal-shm", "[stream s]\nid = 1\ntransport = shm\n");
	put_text("two-streams", "[stream a]\nid = 1\ntransport = shm\n"
		 "[stream b]\nid = 2\ntransport = udp\ngroup = 239.1.1.1:5000\n");
	put_text("recovery", "[stream s]\nid = 3\ntransport = shm\ntoken = t0k\n"
		 "recovery = 127.0.0.1:7100,[::1]:7101\nretention = 1000\n"
		 "retention_endpoint = 127.0.0.1:7102\n");
	put_text("crlf-bom-indent", "\xEF\xBB\xBF[stream s]\r\n  id = 1\r\n"
		 "\ttransport: shm ; inline\r\n# comment\r\n");
	put_text("empty", "");
	put_text("comments-only", "# a\n; b\n\n");
	put_text("unknown-key", "[stream s]\nid = 1\ntransport = shm\nringsize = 4M\n");
	put_text("bad-int", "[stream s]\nid = -1\ntransport = shm\n");
	put_text("bad-size", "[stream s]\nid = 1\ntransport = shm\nring_size = 3M\n");
	put_text("bad-endpoint", "[stream s]\nid = 1\ntransport = rc\n"
		 "control = [::1:7000\n");
	put_text("bad-group", "[stream s]\nid = 1\ntransport = udp\n"
		 "group = 10.0.0.1:5000\n");
	put_text("bad-section", "[streams s]\nid = 1\n");
	put_text("section-no-close", "[stream s\nid = 1\n");
	put_text("key-before-section", "id = 1\n[stream s]\n");
	put_text("syntax", "[stream s]\nid 1\n");
	put_text("duplicate-key", "[stream s]\nid = 1\nid = 2\ntransport = shm\n");
	put_text("duplicate-id", "[stream a]\nid = 1\ntransport = shm\n"
		 "[stream b]\nid = 1\ntransport = shm\n");
	put_text("missing-transport", "[stream s]\nid = 1\n");
	put_text("wrong-transport-key", "[stream s]\nid = 1\ntransport = shm\n"
		 "group = 239.1.1.1:5000\n");
	put_text("liveness", "[stream s]\nid = 1\ntransport = shm\n"
		 "heartbeat_ms = 600\n");
	put_text("escape-key", "[stream s]\nid = 1\ntransport = shm\n"
		 "ring_siz\x1b[2J = 4M\n");
	put_text("escape-value", "[stream s]\nid = 1\ntransport = shm\n"
		 "idle = \x1b]0;x\x07\n");
	put_text("escape-section", "[stream a\xc2\x9b\xff\xe2\x80\xae\\b]\n");
	put_text("utf8-name", "[stream caf\xc3\xa9]\n");
	put("nul-byte", "[stream s]\nid = 1\0\n", 19);
	{
		char line[400];

		memset(line, 'p', sizeof(line));
		memcpy(line, "shm_path = /", 12);
		line[sizeof(line) - 1] = '\n';
		put("long-line", line, sizeof(line));
	}
	put_text("endpoint-only", "127.0.0.1:7000");
}

/* ------------------------------------------------------------ schema */

#define ENC(name, fill)                                                       \
	do {                                                                  \
		tb_md_##name##_t m;                                           \
		int64_t n;                                                    \
                                                                              \
		tb_md_##name##_init(&m);                                      \
		if (fill)                                                     \
			memset(&m, fill, sizeof(m));                          \
		n = tb_md_##name##_encode(b, sizeof(b), &m);                  \
		if (n < 0)                                                    \
			abort();                                              \
		snprintf(file, sizeof(file), "%s-%s", #name,                  \
			 fill ? "filled" : "null");                           \
		put(file, b, (size_t)n);                                      \
		len = (size_t)n;                                              \
	} while (0)

static void gen_schema(void)
{
	uint8_t b[4096];
	char file[96];
	size_t len = 0;
	tb_md_message_header_t h;

	target("schema");
	ENC(heartbeat, 0);
	ENC(heartbeat, 0x21);
	ENC(quote, 0);
	ENC(quote, 0x31);
	/* a version 1 quote: the block without bid_orders, ask_orders */
	memcpy(&h, b, sizeof(h));
	h.version = 1;
	h.block_length = 56;
	memcpy(b, &h, sizeof(h));
	put("quote-v1", b, TB_MD_HEADER_LEN + 56);
	/* a future version with a longer block */
	ENC(quote, 0x32);
	{
		uint8_t big[TB_MD_HEADER_LEN + 80];

		memset(big, 0x77, sizeof(big));
		memcpy(big, b, len);
		memcpy(&h, big, sizeof(h));
		h.version = 3;
		h.block_length = 80;
		memcpy(big, &h, sizeof(h));
		put("quote-v3-longer-block", big, sizeof(big));
	}
	put("quote-truncated", b, len - 1);
	put("header-only", b, TB_MD_HEADER_LEN);
	put("short-header", b, TB_MD_HEADER_LEN - 1);
	memcpy(&h, b, sizeof(h));
	h.schema_id = 8;
	memcpy(b, &h, sizeof(h));
	put("other-schema", b, len);
	h.schema_id = TB_MD_SCHEMA_ID;
	h.version = 0;
	memcpy(b, &h, sizeof(h));
	put("version-0", b, len);
	h.version = 2;
	h.template_id = 99;
	memcpy(b, &h, sizeof(h));
	put("unknown-template", b, len);
	h.template_id = TB_MD_QUOTE_TEMPLATE_ID;
	h.block_length = 8;
	memcpy(b, &h, sizeof(h));
	put("block-too-small", b, len);
	ENC(trade, 0);
	ENC(trade, 0x41);
	ENC(instrument_definition, 0);
	ENC(instrument_definition, 0x51);
	{
		tb_md_instrument_definition_t m;
		int64_t n;

		tb_md_instrument_definition_init(&m);
		memcpy(m.symbol, "AB\x1b[2J\"\\\xff", 10);
		memcpy(m.currency, "E\x01R", 3);
		n = tb_md_instrument_definition_encode(b, sizeof(b), &m);
		put("instrument-definition-control-chars", b, (size_t)n);
	}
	ENC(trading_status, 0);
	ENC(trading_status, 0x61);
	ENC(snapshot_begin, 0);
	ENC(snapshot_begin, 0x71);
	ENC(snapshot_end, 0);
	ENC(snapshot_end, 0x81);
	ENC(order, 0);
	ENC(order, 0x91);
	ENC(order_ack, 0);
	ENC(order_ack, 0xa1);
	{
		tb_md_book_level_update_t m;
		tb_md_book_level_update_levels_entry_t lv[3];
		int64_t n;

		tb_md_book_level_update_init(&m);
		m.instrument_id = 7;
		n = tb_md_book_level_update_encode(b, sizeof(b), &m, lv, 0);
		put("book-level-update-0-levels", b, (size_t)n);
		for (int i = 0; i < 3; i++) {
			tb_md_book_level_update_levels_entry_init(&lv[i]);
			lv[i].action = (uint8_t)i;
			lv[i].side = 1;
			lv[i].level = (uint8_t)i;
			lv[i].qty = 100u * (unsigned)i;
		}
		n = tb_md_book_level_update_encode(b, sizeof(b), &m, lv, 3);
		put("book-level-update-3-levels", b, (size_t)n);
		put("book-level-update-group-truncated", b, (size_t)n - 5);
		put("book-level-update-no-group-header", b,
		    TB_MD_HEADER_LEN + sizeof(m) + 2);
		/* entries of a version 1 sender (24 bytes each) */
		{
			uint8_t v1[256];
			tb_md_group_size_encoding_t gh;

			memcpy(v1, b, TB_MD_HEADER_LEN + sizeof(m));
			memcpy(&h, v1, sizeof(h));
			h.version = 1;
			memcpy(v1, &h, sizeof(h));
			gh.block_length = 24;
			gh.num_in_group = 2;
			memcpy(v1 + TB_MD_HEADER_LEN + sizeof(m), &gh, sizeof(gh));
			memset(v1 + TB_MD_HEADER_LEN + sizeof(m) + 4, 0x12, 48);
			put("book-level-update-v1-entries", v1,
			    TB_MD_HEADER_LEN + sizeof(m) + 4 + 48);
			gh.block_length = 20;
			memcpy(v1 + TB_MD_HEADER_LEN + sizeof(m), &gh, sizeof(gh));
			put("book-level-update-entry-too-small", v1,
			    TB_MD_HEADER_LEN + sizeof(m) + 4 + 48);
			gh.block_length = 0xffff;
			gh.num_in_group = 0xffff;
			memcpy(v1 + TB_MD_HEADER_LEN + sizeof(m), &gh, sizeof(gh));
			put("book-level-update-group-huge", v1,
			    TB_MD_HEADER_LEN + sizeof(m) + 4 + 48);
		}
	}
	put("empty", "", 0);
}

/* ------------------------------------------------------------- store */

/* fuzz_store's input (see its header). */
typedef struct scase {
	uint8_t flags, value;
	uint16_t where, first_minus_1;
	uint8_t sealed;
	buf_t rec[2], idx[2];
} scase_t;

static void s_init(scase_t *c, uint8_t flags, uint16_t first)
{
	memset(c, 0, sizeof(*c));
	c->flags = flags;
	c->first_minus_1 = (uint16_t)(first - 1);
}

/* Appends a record of a frame of `payload` bytes with sequence `seq` to
 * segment i; returns its offset in the file (after the 64-byte header). */
static uint32_t s_rec(scase_t *c, int i, uint64_t seq, uint32_t payload)
{
	uint8_t fr[2048];
	uint32_t len = TB_FRAME_HDR_LEN + payload, crc, off;
	size_t space = (len + 7) & ~(size_t)7;

	off = (uint32_t)(64 + c->rec[i].n);
	frame(fr, payload, 1, seq, 0);
	memset(fr + len, 0, space - len);
	crc = tb_crc32c(0, fr, len);
	b_add(&c->rec[i], &len, 4);
	b_add(&c->rec[i], &crc, 4);
	b_add(&c->rec[i], fr, space);
	return off;
}

static void s_idx(scase_t *c, int i, uint64_t seq, uint32_t off)
{
	uint8_t e[16];
	uint32_t crc;

	memcpy(e, &seq, 8);
	memcpy(e + 8, &off, 4);
	crc = tb_crc32c(0, e, 12);
	memcpy(e + 12, &crc, 4);
	b_add(&c->idx[i], e, 16);
}

static void s_put(const scase_t *c, const char *name)
{
	buf_t *b = malloc(sizeof(*b));

	b_reset(b);
	b_u8(b, c->flags);
	b_u16(b, c->where);
	b_u8(b, c->value);
	b_u16(b, c->first_minus_1);
	b_u8(b, c->sealed);
	for (int i = 0; i < 2; i++) {
		b_u16(b, (uint16_t)c->rec[i].n);
		b_add(b, c->rec[i].b, c->rec[i].n);
	}
	for (int i = 0; i < 2; i++) {
		b_u16(b, (uint16_t)c->idx[i].n);
		b_add(b, c->idx[i].b, c->idx[i].n);
	}
	put(name, b->b, b->n);
	free(b);
}

static void gen_store(void)
{
	static scase_t c;
	uint32_t off;

	target("store");
	/* one segment of 5 records, indexed at the first */
	s_init(&c, 0, 1);
	off = s_rec(&c, 0, 1, 10);
	s_idx(&c, 0, 1, off);
	for (uint64_t s = 2; s <= 5; s++)
		s_rec(&c, 0, s, (uint32_t)(s * 13));
	s_put(&c, "one-segment");
	c.flags = 128;
	s_put(&c, "one-segment-append");
	c.flags = 1;
	s_put(&c, "one-segment-read-only");
	c.flags = 16;
	s_put(&c, "one-segment-no-index");
	/* torn tail: the last record cut */
	c.flags = 0;
	c.rec[0].n -= 9;
	s_put(&c, "torn-tail");
	c.flags = 1;
	s_put(&c, "torn-tail-read-only");
	/* a bad CRC in the middle of the active segment */
	s_init(&c, 0, 1);
	for (uint64_t s = 1; s <= 5; s++)
		s_rec(&c, 0, s, 20);
	c.rec[0].b[2 * 64 + 4] ^= 1;
	s_put(&c, "bad-crc-middle");
	c.flags = 128;
	s_put(&c, "bad-crc-middle-append");
	/* the wrong sequence in a record */
	s_init(&c, 0, 10);
	s_rec(&c, 0, 10, 8);
	s_rec(&c, 0, 12, 8);
	s_put(&c, "wrong-seq");
	/* two segments: 3 sealed records, 2 active */
	s_init(&c, 8, 1);
	c.sealed = 2; /* the second starts at 1 + 1 + 2 = 4 */
	for (uint64_t s = 1; s <= 3; s++)
		s_rec(&c, 0, s, 16);
	off = s_rec(&c, 1, 4, 16);
	s_idx(&c, 1, 4, off);
	s_rec(&c, 1, 5, 16);
	s_idx(&c, 0, 1, 64);
	s_put(&c, "two-segments");
	c.flags = 8 | 128;
	s_put(&c, "two-segments-append");
	c.flags = 8 | 1;
	s_put(&c, "two-segments-read-only");
	/* corruption inside the sealed segment */
	c.flags = 8;
	c.rec[0].b[48 + 8 + 20] ^= 0x40;
	s_put(&c, "two-segments-sealed-corrupt");
	/* a sealed segment shorter than its successor's first says */
	s_init(&c, 8, 1);
	c.sealed = 9;
	s_rec(&c, 0, 1, 16);
	s_rec(&c, 1, 11, 16);
	s_put(&c, "two-segments-sealed-short");
	/* an empty active segment after a sealed one */
	s_init(&c, 8, 1);
	c.sealed = 0;
	s_rec(&c, 0, 1, 16);
	s_put(&c, "two-segments-active-empty");
	/* index entries: past the data, out of order, misaligned, bad CRC */
	s_init(&c, 0, 1);
	for (uint64_t s = 1; s <= 4; s++)
		s_rec(&c, 0, s, 600);
	s_idx(&c, 0, 1, 64);
	s_idx(&c, 0, 3, 64 + 2 * 640);
	s_idx(&c, 0, 9, 64 + 100000);
	s_put(&c, "index-past-data");
	c.idx[0].n = 0;
	s_idx(&c, 0, 3, 64 + 2 * 640);
	s_idx(&c, 0, 1, 64);
	s_put(&c, "index-out-of-order");
	c.idx[0].n = 0;
	s_idx(&c, 0, 1, 68);
	s_put(&c, "index-misaligned");
	c.idx[0].n = 0;
	s_idx(&c, 0, 1, 64);
	c.idx[0].b[12] ^= 1;
	s_put(&c, "index-bad-crc");
	c.flags = 4;
	s_put(&c, "index-crc-fixed");
	c.idx[0].n = 0;
	s_idx(&c, 0, 2, 64);
	s_put(&c, "index-points-at-wrong-record");
	/* headers broken: version, magic, CRC, first sequence, index header */
	s_init(&c, 64, 1);
	s_rec(&c, 0, 1, 16);
	c.where = 8;
	c.value = 2;
	s_put(&c, "header-version");
	c.where = 8;
	c.value = 0;
	s_put(&c, "header-version-0");
	c.where = 0;
	c.value = 'x';
	s_put(&c, "header-magic");
	c.where = 61;
	c.value = 0;
	s_put(&c, "header-crc");
	c.where = 0x80 | 32;
	c.value = 9;
	s_put(&c, "index-header-first-seq");
	s_init(&c, 64 | 8, 1);
	s_rec(&c, 0, 1, 16);
	s_rec(&c, 1, 2, 16);
	c.where = 0x100 | 12;
	c.value = 0;
	s_put(&c, "second-header-length");
	/* no records at all, and records to be made right by the flags */
	s_init(&c, 0, 1);
	s_put(&c, "no-records");
	s_init(&c, 2 | 32, 1);
	memset(c.rec[0].b, 0, 200);
	c.rec[0].b[0] = 40;
	c.rec[0].b[48] = 48;
	c.rec[0].b[112] = 32;
	c.rec[0].n = 200;
	s_put(&c, "fixed-by-flags");
	s_init(&c, 0, 1);
	c.rec[0].n = 8;
	memset(c.rec[0].b, 0xff, 8);
	s_put(&c, "record-length-huge");
	put("empty", "", 0);
}

/* -------------------------------------------------------- histograms */

static tb_hist_t *sample_hist(int kind)
{
	tb_hist_t *h;

	if (tb_hist_init(&h, 1, 3600000000000ll, 3) != 0)
		abort();
	switch (kind) {
	case 1:
		tb_hist_record(h, 1234);
		break;
	case 2:
		for (int64_t v = 1; v < 100000000; v = v * 3 + 7)
			tb_hist_record_n(h, v, v % 5 + 1);
		break;
	case 3:
		tb_hist_record_n(h, 3600000000000ll, 2);
		tb_hist_record(h, 0);
		break;
	}
	return h;
}

static void gen_hist_decode(void)
{
	char name[64];

	target("hist_decode");
	for (int k = 0; k < 4; k++) {
		tb_hist_t *h = sample_hist(k);
		uint8_t *enc;
		size_t n;
		char *text;

		if (tb_hist_encode(h, &enc, &n) != 0)
			abort();
		snprintf(name, sizeof(name), "hist-%d", k);
		put(name, enc, n);
		snprintf(name, sizeof(name), "hist-%d-truncated", k);
		put(name, enc, n - 3);
		enc[n / 2] ^= 0x55;
		snprintf(name, sizeof(name), "hist-%d-flipped", k);
		put(name, enc, n);
		enc[n / 2] ^= 0x55;
		text = malloc(tb_hist_encoding_base64_size(n));
		tb_hist_encoding_base64_encode(enc, n, text);
		snprintf(name, sizeof(name), "hist-%d-base64", k);
		put_text(name, text);
		enc[0] ^= 0xff;
		snprintf(name, sizeof(name), "hist-%d-bad-cookie", k);
		put(name, enc, n);
		free(text);
		free(enc);
		tb_hist_free(h);
	}
	put_text("base64-padding-middle", "QQ==QQ==");
	put_text("base64-bad-char", "QUJD*A==");
	put_text("base64-length-3", "QUJ");
	put_text("base64-nonzero-bits", "QR==");
	put("empty", "", 0);
}

static void gen_hist_log(void)
{
	char *text;
	size_t len;
	FILE *f;
	tb_hist_log_writer_t *w;

	target("hist_log");
	for (int k = 0; k < 3; k++) {
		char name[64];
		tb_hist_t *h = sample_hist(k + 1);

		f = open_memstream(&text, &len);
		if (tb_hist_log_writer_open(&w, f, 1700000000.0, 1e6) != 0 ||
		    tb_hist_log_writer_comment(w, "a comment") != 0 ||
		    tb_hist_log_writer_write(w, NULL, 0.0, 1.0, h) != 0 ||
		    tb_hist_log_writer_write(w, "tagged", 1.0, 1.0, h) != 0 ||
		    tb_hist_log_writer_close(w) != 0)
			abort();
		fclose(f);
		snprintf(name, sizeof(name), "log-%d", k);
		put(name, text, len);
		snprintf(name, sizeof(name), "log-%d-truncated", k);
		put(name, text, len - 10);
		free(text);
		tb_hist_free(h);
	}
	put_text("header-only", "#[Histogram log format version 1.3]\n"
		 "#[StartTime: 1700000000.000 (seconds since epoch), x]\n"
		 "#[BaseTime: 1700000000.000 (seconds since epoch)]\n"
		 "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\","
		 "\"Interval_Compressed_Histogram\"\n");
	put_text("bad-version", "#[Histogram log format version 2.0]\n");
	put_text("bad-start-time", "#[StartTime: x]\n#[BaseTime: nan]\n");
	put_text("bad-field", "0.000,x,1.0,HISTFAAAACB4nJNpmSzMwMDAxQABzFCaEUoz\n");
	put_text("bad-base64", "0.000,1.000,1.0,!!!!\n");
	put_text("tag-no-comma", "Tag=abc\n");
	put_text("tag-space", "Tag=a b,0.000,1.000,1.0,AAAA\n");
	put_text("fields-infinite", "0,inf,1,AAAA\n");
	put("nul-in-line", "0.0,1.0,\0,AAAA\n", 15);
	put_text("crlf-blank", "\r\n \r\n\n");
	put("empty", "", 0);
}

static void gen_hgrm(void)
{
	target("hgrm");
	for (int k = 1; k < 4; k++) {
		char name[64], *text;
		size_t len;
		tb_hist_t *h = sample_hist(k);
		FILE *f = open_memstream(&text, &len);

		if (tb_hist_write_hgrm(h, f, 1000.0, k == 2 ? 1 : 5) != 0)
			abort();
		fclose(f);
		snprintf(name, sizeof(name), "hgrm-%d", k);
		put(name, text, len);
		snprintf(name, sizeof(name), "hgrm-%d-truncated", k);
		put(name, text, len / 2);
		free(text);
		tb_hist_free(h);
	}
	put_text("header-only", "       Value     Percentile TotalCount "
		 "1/(1-Percentile)\n\n");
	put_text("two-lines", "Value Percentile TotalCount\n1.0 0.5 1 2.0\n"
		 "2.0 1.0 2\n");
	put_text("decreasing-total", "1.0 0.5 5\n2.0 1.0 3\n");
	put_text("percentile-out-of-range", "1.0 1.5 5\n");
	put_text("negative-value", "-1.0 0.5 5\n");
	put_text("value-huge", "1e300 0.5 5\n");
	put_text("nan", "nan 0.5 5\n");
	put_text("not-numbers", "a b c\n");
	put_text("total-overflow", "1.0 0.5 99999999999999999999\n");
	{
		char line[700];

		memset(line, '1', sizeof(line));
		line[sizeof(line) - 1] = '\n';
		put("long-line", line, sizeof(line));
	}
	put("empty", "", 0);
}

/* ---------------------------------------------------------------- gw */

static void gen_gw(void)
{
	tb_gw_order_t o;
	tb_gw_ack_t a;

	target("gw");
	tb_gw_order_init(&o);
	o.order_id = 42;
	o.sent_ns = 1000;
	o.price = 1234500;
	o.qty = 100;
	o.instrument = 7;
	o.side = 'B';
	put("order-buy", &o, sizeof(o));
	o.side = 'S';
	put("order-sell", &o, sizeof(o));
	put("order-short", &o, sizeof(o) - 1);
	o.qty = 0;
	put("order-qty-0", &o, sizeof(o));
	o.qty = 1;
	o.side = 'X';
	put("order-side-x", &o, sizeof(o));
	o.side = 'B';
	o.pad[6] = 1;
	put("order-pad", &o, sizeof(o));
	o.pad[6] = 0;
	o.magic ^= 1;
	put("order-magic", &o, sizeof(o));
	o.magic ^= 1;
	o.version = 2;
	put("order-version", &o, sizeof(o));
	o.version = TB_GW_VERSION;
	o.type = TB_GW_ACK;
	put("order-type-ack", &o, sizeof(o));
	memset(&a, 0, sizeof(a));
	a.magic = TB_GW_MAGIC;
	a.version = TB_GW_VERSION;
	a.type = TB_GW_ACK;
	a.order_id = 42;
	a.sent_ns = 1000;
	a.arrival_ns = 2000;
	put("ack", &a, sizeof(a));
	a.pad = 1;
	put("ack-pad", &a, sizeof(a));
	a.pad = 0;
	a.type = TB_GW_ORDER;
	put("ack-type-order", &a, sizeof(a));
	put("ack-long", &o, sizeof(a) + 1);
	put("empty", "", 0);
}

/* ------------------------------------ control and recovery: additions */

static void gen_control(void)
{
	uint8_t b[4096];
	tb_control_hello_t h;
	tb_control_heartbeat_t hb = {.timestamp_ns = 123456789, .last_seq = 42};
	tb_control_bye_t bye = {.reason = TB_CONTROL_BYE_NORMAL};
	int n = 0, r;

	target("control");
	memset(&h, 0, sizeof(h));
	h.stream_id = 1;
	snprintf(h.client_id, sizeof(h.client_id), "sub-1");
	snprintf(h.token, sizeof(h.token), "s3cret");
	if ((r = tb_control_encode_hello(b, sizeof(b), &h)) < 0)
		abort();
	n += r;
	if ((r = tb_control_encode_heartbeat(b + n, sizeof(b) - (size_t)n, &hb)) < 0)
		abort();
	n += r;
	if ((r = tb_control_encode_bye(b + n, sizeof(b) - (size_t)n, &bye)) < 0)
		abort();
	n += r;
	put("stream-hello-heartbeat-bye", b, (size_t)n);
	put("stream-cut-in-third", b, (size_t)n - 3);
}

static void gen_recovery_proto(void)
{
	uint8_t b[4096];
	tb_recovery_proto_begin_t begin = {.stream_id = 1, .count = 3,
					   .epoch = 5, .first = 10};
	tb_recovery_proto_end_t end = {.status = TB_RECOVERY_PROTO_END_COMPLETE,
				       .last_seq = 12};
	size_t n, second = 0;
	int r;

	target("recovery_proto");
	if ((r = tb_recovery_proto_encode_begin(b, sizeof(b), &begin)) < 0)
		abort();
	n = (size_t)r;
	for (uint64_t i = 0; i < 3; i++) {
		if (i == 1)
			second = n;
		n += frame(b + n, (uint32_t)(8 * i), 1, 10 + i, 0);
	}
	if ((r = tb_recovery_proto_encode_end(b + n, sizeof(b) - n, &end)) < 0)
		abort();
	n += (size_t)r;
	put("response-3-frames", b, n);
	put("response-cut-in-end", b, n - 4);
	/* the second frame carries the wrong sequence */
	b[second + 16] ^= 1;
	put("response-bad-seq", b, n);
}

/* ------------------------------------------------------------- ghash */

/* fuzz_ghash's input: key, IV, a piece count and the cuts, then `len`
 * bytes of data (a counting pattern). */
static void ghash_case(const char *name, int pieces, const uint16_t *cuts,
		       size_t len)
{
	static buf_t b;

	b_reset(&b);
	for (int i = 0; i < 16; i++)
		b_u8(&b, (uint8_t)(0x10 + i)); /* key */
	for (int i = 0; i < 12; i++)
		b_u8(&b, (uint8_t)(0xa0 + i)); /* IV */
	b_u8(&b, (uint8_t)(pieces - 1));
	for (int i = 0; i < pieces - 1; i++)
		b_u16(&b, cuts[i]);
	for (size_t i = 0; i < len; i++)
		b_u8(&b, (uint8_t)(i * 7 + 3));
	put(name, b.b, b.n);
}

static void gen_ghash(void)
{
	static const uint16_t hdr[] = {48}, ragged[] = {5, 17, 33},
			      blocks[] = {16, 32, 64, 128, 256, 512, 16};

	target("ghash");
	ghash_case("empty", 1, NULL, 0);
	ghash_case("one-byte", 1, NULL, 1);
	ghash_case("one-block", 1, NULL, 16);
	ghash_case("dgram-one-message", 2, hdr, 160);
	ghash_case("dgram-full", 2, hdr, 1472);
	ghash_case("heartbeat", 2, hdr, 48);
	ghash_case("63-blocks-one-run", 1, NULL, 63 * 16);
	ghash_case("64-blocks-two-runs", 1, NULL, 64 * 16);
	ghash_case("129-blocks-ragged", 1, NULL, 128 * 16 + 9);
	ghash_case("ragged-pieces", 4, ragged, 300);
	ghash_case("whole-block-pieces", 8, blocks, 2048);
}

/* ------------------------------------------------------------------ */

static const struct {
	const char *name;
	void (*gen)(void);
} gens[] = {
	{"frame", gen_frame}, {"shm", gen_shm}, {"dgram", gen_dgram},
	{"config", gen_config}, {"schema", gen_schema}, {"store", gen_store},
	{"hist_decode", gen_hist_decode}, {"hist_log", gen_hist_log},
	{"hgrm", gen_hgrm}, {"gw", gen_gw}, {"control", gen_control},
	{"recovery_proto", gen_recovery_proto}, {"ghash", gen_ghash},
};

int main(int argc, char **argv)
{
	size_t n = sizeof(gens) / sizeof(gens[0]);

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR [NAME...]\n", argv[0]);
		return 2;
	}
	root = argv[1];
	for (size_t i = 0; i < n; i++) {
		int wanted = argc == 2;

		for (int a = 2; a < argc; a++)
			wanted |= !strcmp(argv[a], gens[i].name);
		if (wanted)
			gens[i].gen();
	}
	return 0;
}
