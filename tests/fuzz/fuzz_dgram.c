/*
 * fuzz_dgram.c - libFuzzer target for what ud and udp do with a datagram
 * from the network: tb_packet_check and the frame walk (packet.h), then
 * tb_dgram_rx_input (dgram.h): authentication, the replay window, epochs
 * and their start, heartbeats, END, gaps and delivery.
 *
 * `make fuzz` builds it with libFuzzer and runs it (see the Makefile's
 * top); `make test` replays its corpus, tests/fuzz/corpus/dgram/, through
 * it (tests/fuzz/replay.c).
 *
 * The input is a run of records, each one selector byte, a 2-byte
 * little-endian length and that many bytes of datagram, given in turn to
 * one receiver as a poll loop gives them (again while it says "not done").
 * An odd selector has the harness sign the datagram with the receiver's
 * token for the epoch it names, as its publisher would, so that the
 * fuzzer reaches what lies past authentication; an even one leaves it as
 * the network brought it (a forgery: it must deliver nothing and cause no
 * condition).  Checked beside what ASan and UBSan see: every message
 * handed over lies inside its datagram, belongs to the stream, and follows
 * the previous one (sequence + 1) within an epoch; a condition comes only
 * from a call that delivered nothing; and a datagram is done within a few
 * calls.
 */
#include "bus/transport/dgram.h"

#include <stdlib.h>
#include <string.h>

#define STREAM 7
#define TOKEN "fuzz-token"

struct seen {
	const uint8_t *lo, *hi;  /* the datagram being read */
	uint64_t next;           /* 0: any */
	uint64_t n;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct seen *s = clientd;
	const uint8_t *p = m->data;

	if (p < s->lo || p + m->len > s->hi || m->stream_id != STREAM)
		abort();
	if (s->next && m->seq != s->next)
		abort();
	s->next = m->seq + 1;
	s->n++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[8192] __attribute__((aligned(64)));
	static tb_dgram_rx_t rx;
	static tb_dgram_auth_t auth;
	static tb_dgram_key_t key;
	struct seen seen = {0};
	tb_seq_range_t loss;
	tb_seq_t seq;
	uint64_t now = 1000000000ull;

	/* Each input gets a fresh receiver, which says its warnings (datagram
	 * size, packet version) once each: without this, 10 M runs log
	 * 175 MB of them. */
	setenv("TICKBUS_QUIET", "1", 1);
	tb_dgram_rx_init(&rx, STREAM, 100, TOKEN, 4096);
	tb_dgram_auth_init(&auth, TOKEN, STREAM);
	tb_seq_init(&seq, 0);
	while (size >= 3) {
		int sign = data[0] & 1, done = 0, tries = 0;
		size_t len = (size_t)data[1] | (size_t)data[2] << 8;

		data += 3;
		size -= 3;
		if (len > size)
			len = size;
		if (len > sizeof(buf))
			len = sizeof(buf);
		memcpy(buf, data, len);
		data += len;
		size -= len;
		if (sign && len >= TB_PACKET_HDR_LEN) {
			const tb_packet_hdr_t *h = (const tb_packet_hdr_t *)buf;

			if (key.epoch != h->epoch || !key.epoch)
				tb_dgram_auth_key(&auth, h->epoch, &key);
			tb_dgram_auth_sign(&key, (tb_packet_hdr_t *)buf,
					   buf + TB_PACKET_HDR_LEN,
					   len - TB_PACKET_HDR_LEN);
		}
		seen.lo = buf;
		seen.hi = buf + len;
		now += 1000000;
		while (!done) {
			uint64_t before = seen.n;
			int rc = tb_dgram_rx_input(&rx, &seq, &loss, buf, len, now,
						   on_msg, &seen, 16, 0, &done);

			if (rc < 0 && seen.n != before)
				abort(); /* a condition only when nothing went */
			if (rc == TB_NEW_EPOCH)
				seen.next = 0; /* sequences start again */
			if (rc == TB_GAP) {
				if (loss.first > loss.last)
					abort();
				seen.next = loss.last + 1;
			}
			if (!sign && (rc != 0 || seen.n != before || !done))
				abort(); /* a forgery does nothing */
			if (++tries > 64)
				abort(); /* a datagram is done in a few calls */
		}
		tb_dgram_rx_idle(&rx, now);
	}
	tb_dgram_rx_fini(&rx);
	return 0;
}
