/*
 * The udp transport on loopback multicast, through the public API and,
 * where a test needs to see inside, through the transport ops: delivery,
 * several subscribers sharing the port, interface by address and by name,
 * sendmmsg batching, TB_EMSGSIZE at offer, the SO_RCVBUF warning, every
 * malformed datagram injected from a raw socket, epoch change, END ->
 * TB_CLOSED, silence -> TB_PUBLISHER_DEAD, and loss injected from outside
 * by the udp loss interposer (tests/common/udp_loss.h).  Forgery from a
 * raw socket that knows the stream id and the epoch: END, a far-future
 * sequence and epoch + 1, in the old 32-byte layout and in the new one
 * with a wrong tag, change nothing; datagrams sniffed from the group and
 * replayed, in their epoch or after a restart, are refused.
 *
 * Each run takes a group and port from its pid, so parallel runs of the
 * suite never hear each other.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/counters.h"
#include "bus/transport/udp.h"
#include "tests/common/frames.h"
#include "tests/common/udp_loss.h"
#include <tickbus/tickbus.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STREAM 31
#define TOKEN "udp-unit-token"

static char group[32];
static uint16_t port;

static void cfg_for(tb_stream_cfg_t *cfg)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "unit-udp");
	cfg->id = STREAM;
	cfg->transport = TB_TRANSPORT_UDP;
	snprintf(cfg->group.host, sizeof(cfg->group.host), "%s", group);
	cfg->group.port = port;
	snprintf(cfg->interface, sizeof(cfg->interface), "127.0.0.1");
	cfg->ring_size = 1 << 20;
	cfg->heartbeat_ms = 20;
	cfg->liveness_timeout_ms = 200;
	snprintf(cfg->token, sizeof(cfg->token), TOKEN);
}

static int setup(void **state)
{
	unsigned p = (unsigned)getpid();

	(void)state;
	snprintf(group, sizeof(group), "239.193.%u.%u", (p >> 8) & 0xff,
		 (p & 0xff) | 1);
	port = (uint16_t)(20000 + p % 12000); /* below the ephemeral range */
	return 0;
}

static void fill(uint8_t *p, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seq * 7 + i);
}

struct sink {
	uint64_t count;
	uint64_t next; /* expected seq; 0 = any */
	uint64_t bad;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct sink *s = clientd;
	uint8_t want[2048];

	if (s->next && m->seq != s->next)
		s->bad++;
	s->next = m->seq + 1;
	if (m->len > sizeof(want)) {
		s->bad++;
	} else {
		fill(want, m->len, m->seq);
		if (memcmp(want, m->data, m->len) != 0)
			s->bad++;
	}
	if (m->stream_id != STREAM || m->template_id != 4)
		s->bad++;
	s->count++;
}

static int64_t offer(tb_publisher_t *pub, uint32_t len)
{
	uint8_t buf[2048];

	fill(buf, len, tb_pub_next_seq(pub));
	return tb_pub_offer(pub, 4, buf, len);
}

/* Polls (yielding when idle) until `want` messages in all, or a condition
 * other than TB_NOT_CONNECTED, or `ms` pass; returns the condition or 0. */
static int poll_for(tb_subscriber_t *sub, struct sink *s, uint64_t want, int ms)
{
	uint64_t until = tb_clock_mono_ms() + (uint64_t)ms;

	while (tb_clock_mono_ms() < until) {
		int rc = tb_sub_poll(sub, on_msg, s, 256);

		if (rc < 0 && rc != TB_NOT_CONNECTED)
			return rc;
		if (want && s->count >= want)
			return 0;
		if (rc <= 0)
			sched_yield();
	}
	return 0;
}

static void delivers_in_order_to_two_subscribers_sharing_the_port(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub[2];
	struct sink s[2] = {{0, 1, 0}, {0, 1, 0}};

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_subscriber_open(&sub[0], &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub[1], &cfg), 0);
	assert_int_equal(tb_sub_poll(sub[0], on_msg, &s[0], 10), TB_NOT_CONNECTED);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	/* Rounds of 20 keep well inside any default receive buffer. */
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 20; i++)
			assert_true(offer(pub, (uint32_t)(round * 20 + i) % 1400) > 0);
		for (int k = 0; k < 2; k++)
			assert_int_equal(poll_for(sub[k], &s[k], (uint64_t)(round + 1) * 20,
						  5000), 0);
	}
	for (int k = 0; k < 2; k++) {
		assert_int_equal(s[k].count, 1000);
		assert_int_equal(s[k].bad, 0);
		assert_int_equal(tb_sub_next_seq(sub[k]), 1001);
		assert_int_equal(tb_sub_epoch(sub[k]), tb_pub_epoch(pub));
	}
	/* END: each subscriber is told the stream closed. */
	tb_publisher_close(pub);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(poll_for(sub[k], &s[k], 0, 5000), TB_CLOSED);
		tb_subscriber_close(sub[k]);
	}
}

static void interface_by_netdev_name_and_bad_names(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};

	(void)state;
	cfg_for(&cfg);
	snprintf(cfg.interface, sizeof(cfg.interface), "lo");
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_true(offer(pub, 100) > 0);
	assert_int_equal(poll_for(sub, &s, 1, 5000), 0);
	assert_int_equal(s.count, 1);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);

	snprintf(cfg.interface, sizeof(cfg.interface), "nosuchnetdev9");
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "nosuchnetdev9"));
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "network device"));
}

static void message_larger_than_a_datagram_is_refused_at_offer(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_claim_t claim;

	(void)state;
	cfg_for(&cfg);
	/* Default mtu for udp: 1472 bytes, 1376 of payload (a 64-byte
	 * packet header and a 32-byte frame header). */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 1376), 1);
	assert_int_equal(offer(pub, 1377), TB_EMSGSIZE);
	assert_int_equal(tb_pub_claim(pub, 4, 1377, &claim), TB_EMSGSIZE);
	assert_int_equal(tb_pub_next_seq(pub), 2);
	tb_publisher_close(pub);
	cfg.mtu = 256;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 160), 1);
	assert_int_equal(offer(pub, 161), TB_EMSGSIZE);
	tb_publisher_close(pub);
}

/* Commits frames straight into the transport's ring, as the publisher
 * does, without sending. */
static void commit_frames(tb_tx_t *tx, uint64_t *seq, int n, uint32_t len)
{
	for (int i = 0; i < n; i++) {
		tb_frame_hdr_t *f = tb_ring_claim(&tx->ring, len, *seq);

		assert_non_null(f);
		tb_frame_init(f, len, 4, STREAM, *seq, 0);
		fill(tb_frame_payload(f), len, *seq);
		tb_ring_commit(&tx->ring);
		(*seq)++;
	}
}

struct rx_side {
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	struct sink s;
};

static void rx_open(struct rx_side *r, const tb_stream_cfg_t *cfg)
{
	memset(r, 0, sizeof(*r));
	r->s.next = 1;
	tb_seq_init(&r->seq, 0);
	assert_int_equal(tb_udp_rx_ops.open(&r->rx, cfg), 0);
}

static int rx_poll_for(struct rx_side *r, uint64_t want, int ms)
{
	uint64_t until = tb_clock_mono_ms() + (uint64_t)ms;

	while (tb_clock_mono_ms() < until) {
		int rc = tb_udp_rx_ops.poll(r->rx, &r->seq, &r->loss, on_msg,
					    &r->s, 256);

		if (rc < 0 && rc != TB_NOT_CONNECTED)
			return rc;
		if (want && r->s.count >= want)
			return 0;
		if (rc <= 0)
			sched_yield();
	}
	return 0;
}

/* The publisher's system calls so far: lone datagrams sent whole from a
 * copy, lone ones gathered, and batches. */
static void assert_sends(const tb_udp_tx_t *u, uint64_t whole,
			 uint64_t gathered, uint64_t batches)
{
	assert_int_equal(u->send_calls, whole);
	assert_int_equal(u->sendmsg_calls, gathered);
	assert_int_equal(u->sendmmsg_calls, batches);
	assert_int_equal(u->send_errors, 0);
}

static void several_datagrams_leave_in_one_sendmmsg(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_tx_t *u;
	tb_tx_t *tx;
	uint64_t seq = 1;

	(void)state;
	cfg_for(&cfg);
	cfg.mtu = 288; /* two 72-byte frames per datagram */
	rx_open(&r, &cfg);
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 77), 0);
	u = (tb_udp_tx_t *)tx;
	/* One send covering 20 frames: 10 datagrams, one system call. */
	commit_frames(tx, &seq, 20, 40);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_sends(u, 0, 0, 1);
	assert_int_equal(tb_dgram_tx_datagrams(&u->dg), 10);
	assert_int_equal(rx_poll_for(&r, 20, 5000), 0);
	assert_int_equal(r.s.count, 20);
	assert_int_equal(r.s.bad, 0);
	/* A lone frame goes by send, copied whole. */
	commit_frames(tx, &seq, 1, 40);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_sends(u, 1, 0, 1);
	assert_int_equal(rx_poll_for(&r, 21, 5000), 0);
	assert_int_equal(r.s.count, 21);
	assert_int_equal(r.s.bad, 0);
	tb_udp_tx_ops.close(tx, seq - 1);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	tb_udp_rx_ops.close(r.rx);
}

/* A lone datagram of up to TB_UDP_COPY_MAX bytes is sent from a copy by
 * send; a larger one is gathered by sendmsg, header and frames in place.
 * Both arrive whole, in order, their payloads as written. */
static void a_lone_datagram_is_copied_unless_large(void **state)
{
	const uint32_t fits = TB_UDP_COPY_MAX - TB_PACKET_HDR_LEN -
			      TB_FRAME_HDR_LEN;
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_tx_t *u;
	tb_tx_t *tx;
	uint64_t seq = 1, mid;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 78), 0);
	u = (tb_udp_tx_t *)tx;
	/* The largest that fits the copy, exactly. */
	commit_frames(tx, &seq, 1, fits);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_sends(u, 1, 0, 0);
	/* One byte more (a frame 32 bytes larger): gathered. */
	commit_frames(tx, &seq, 1, fits + 1);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_sends(u, 1, 1, 0);
	/* Small after large is copied again, large after small gathered. */
	commit_frames(tx, &seq, 1, 8);
	mid = tx->ring.tail;
	commit_frames(tx, &seq, 1, 1000);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, mid), 0);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_sends(u, 2, 2, 0);
	assert_int_equal(rx_poll_for(&r, 4, 5000), 0);
	assert_int_equal(r.s.count, 4);
	assert_int_equal(r.s.bad, 0);
	tb_udp_tx_ops.close(tx, seq - 1);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	tb_udp_rx_ops.close(r.rx);
}

struct burst_sink {
	struct sink s;
	uint64_t stamp, stamps;
};

static void on_burst_msg(void *clientd, const tb_msg_t *m)
{
	struct burst_sink *b = clientd;

	on_msg(&b->s, m);
	if (m->publish_ns != b->stamp) {
		b->stamp = m->publish_ns;
		b->stamps++;
	}
}

/* A burst (tb_pub_offerv) over udp: small messages take the offer's
 * inline way to the transport's send, large ones the checked way, each
 * a datagram of its own; all arrive in order, whole, with the burst's
 * one stamp. */
static void a_burst_is_sent_in_order_with_one_stamp(void **state)
{
	static uint8_t bufs[20][400];
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct burst_sink b = {{0, 1, 0}, 0, 0};
	tb_pub_msg_t v[20];
	uint64_t until;
	int offered, bad_rc = 0;

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (int i = 0; i < 20; i++) {
		uint32_t len = i % 3 == 2 ? 400 : 40;

		fill(bufs[i], len, (uint64_t)i + 1);
		v[i] = (tb_pub_msg_t){bufs[i], len, 4};
	}
	offered = tb_pub_offerv(pub, v, 20);
	until = tb_clock_mono_ms() + 5000;
	while (b.s.count < 20 && tb_clock_mono_ms() < until && bad_rc == 0) {
		int rc = tb_sub_poll(sub, on_burst_msg, &b, 256);

		if (rc < 0 && rc != TB_NOT_CONNECTED)
			bad_rc = rc;
		if (rc <= 0)
			sched_yield();
	}
	/* Closed before the checks: a failure leaves no sender behind. */
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
	assert_int_equal(offered, 20);
	assert_int_equal(bad_rc, 0);
	assert_int_equal(b.s.count, 20);
	assert_int_equal(b.s.bad, 0);
	assert_int_equal(b.stamps, 1);
}

static void batching_holds_until_full_flush_or_time(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};

	(void)state;
	cfg_for(&cfg);
	cfg.mtu = 288;
	cfg.batch_us = 1000000; /* a second: only size and flush matter */
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 40), 1);
	assert_int_equal(poll_for(sub, &s, 1, 100), 0);
	assert_int_equal(s.count, 0); /* held */
	/* The second frame fills the datagram (96 + 96 of 224: a third
	 * would not fit), so the third offer sends the first two. */
	assert_int_equal(offer(pub, 40), 2);
	assert_int_equal(offer(pub, 40), 3);
	assert_int_equal(poll_for(sub, &s, 2, 5000), 0);
	assert_int_equal(s.count, 2);
	assert_int_equal(poll_for(sub, &s, 3, 100), 0);
	assert_int_equal(s.count, 2);
	assert_int_equal(tb_pub_flush(pub), 0);
	assert_int_equal(poll_for(sub, &s, 3, 5000), 0);
	assert_int_equal(s.count, 3);
	assert_int_equal(s.bad, 0);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);

	/* With a 2 ms bound, a held frame leaves at the next offer after it. */
	cfg.batch_us = 2000;
	memset(&s, 0, sizeof(s));
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 8), 1);
	usleep(5000);
	assert_int_equal(offer(pub, 8), 2);
	assert_int_equal(poll_for(sub, &s, 1, 5000), 0);
	assert_int_equal(s.count, 1);
	tb_publisher_close(pub); /* flushes 2, then END */
	assert_int_equal(poll_for(sub, &s, 0, 5000), TB_CLOSED);
	assert_int_equal(s.count, 2);
	tb_subscriber_close(sub);
}

/* Runs `open` with stderr captured into `out`. */
static int open_capturing(tb_subscriber_t **sub, const tb_stream_cfg_t *cfg,
			  char *out, size_t len)
{
	char path[] = "/tmp/tb-udp-warn.XXXXXX";
	int fd = mkstemp(path), saved = dup(2), rc;
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	rc = tb_subscriber_open(sub, cfg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, out, len - 1, 0);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	return rc;
}

/* Whether this process may size a socket's receive buffer past
 * net.core.rmem_max (CAP_NET_ADMIN). */
static int may_force_rcvbuf(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), want = 1 << 30, ok;

	assert_true(fd >= 0);
	ok = setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want,
			sizeof(want)) == 0;
	close(fd);
	return ok;
}

/* rcvbuf is granted whole where the process may (CAP_NET_ADMIN), else up
 * to rmem_max with a warning that says how to raise it. */
static void rcvbuf_is_granted_or_its_cap_warned(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	char err[2048];
	const char *quiet = getenv("TICKBUS_QUIET");
	char *saved = quiet ? strdup(quiet) : NULL;
	long rmem_max = 0;
	FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");

	(void)state;
	if (f) {
		if (fscanf(f, "%ld", &rmem_max) != 1)
			rmem_max = 0;
		fclose(f);
	}
	unsetenv("TICKBUS_QUIET");
	cfg_for(&cfg);
	cfg.rcvbuf = 64 << 10; /* below any rmem_max: granted, no warning */
	assert_int_equal(open_capturing(&sub, &cfg, err, sizeof(err)), 0);
	assert_null(strstr(err, "rmem_max"));
	tb_subscriber_close(sub);
	if (rmem_max > 0 && rmem_max < (1l << 30)) {
		cfg.rcvbuf = 1u << 30; /* the most the config allows */
		assert_int_equal(open_capturing(&sub, &cfg, err, sizeof(err)), 0);
		print_message("%s", err);
		if (may_force_rcvbuf()) {
			/* CAP_NET_ADMIN: granted past rmem_max, no warning
			 * (which is said when the socket got less). */
			assert_null(strstr(err, "SO_RCVBUF"));
		} else {
			assert_non_null(strstr(err, "SO_RCVBUF"));
			assert_non_null(strstr(err, "net.core.rmem_max"));
		}
		tb_subscriber_close(sub);
	}
	if (saved) {
		setenv("TICKBUS_QUIET", saved, 1);
		free(saved);
	}
}

/* Sends raw bytes to the group from a plain socket. */
static void inject(const void *buf, size_t len)
{
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct in_addr lo = {.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, group, &to.sin_addr);
	assert_int_equal(setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo,
				    sizeof(lo)), 0);
	assert_int_equal(sendto(fd, buf, len, 0, (struct sockaddr *)&to,
				sizeof(to)), (ssize_t)len);
	close(fd);
}

static uint8_t dg[4096] __attribute__((aligned(64)));
static uint64_t nonce_next;

/* Signs the `len`-byte datagram in `dg` with `token`'s key, as it stands. */
static size_t sign_as(const char *token, size_t len)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	tb_dgram_auth_t auth;
	tb_dgram_key_t key;

	tb_dgram_auth_init(&auth, token, h->stream_id);
	tb_dgram_auth_key(&auth, h->epoch, &key);
	tb_dgram_auth_sign(&key, h, dg + TB_PACKET_HDR_LEN,
			   len - TB_PACKET_HDR_LEN);
	return len;
}

/* A datagram as a publisher holding the token makes it: numbered, with
 * its epoch's start (later epochs, later starts), signed. */
static size_t make(uint64_t epoch, uint64_t first, int count)
{
	size_t len = frames_datagram(dg, sizeof(dg), STREAM, epoch, first, count,
				     16, 4, fill);
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;

	h->mtu = 1472;
	h->since = epoch * 1000;
	h->nonce = nonce_next++;
	return sign_as(TOKEN, len);
}

static void every_malformed_datagram_is_counted_and_dropped(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_rx_t *u;
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	tb_frame_hdr_t *f2 = (tb_frame_hdr_t *)(dg + TB_PACKET_HDR_LEN + 64);
	size_t len;
	uint64_t total = 0;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	u = (tb_udp_rx_t *)r.rx;
	inject(dg, make(500, 1, 2));
	assert_int_equal(rx_poll_for(&r, 2, 5000), 0);
	for (int k = TB_PACKET_SHORT; k < TB_PACKET_FAULT_COUNT; k++) {
		len = make(500, 3, 2);
		switch ((enum tb_packet_fault)k) {
		case TB_PACKET_SHORT: len = 7; break;
		case TB_PACKET_BAD_MAGIC: h->magic = 0; break;
		case TB_PACKET_BAD_VERSION: h->version = 1; break;
		case TB_PACKET_BAD_LENGTH: h->length += 32; break;
		case TB_PACKET_BAD_FLAGS: h->flags = 0x40; break;
		case TB_PACKET_BAD_COUNT: h->count = 200; break;
		/* Frame faults under a good tag: a publisher's bug. */
		case TB_PACKET_BAD_FRAME: f2->length = 4000; sign_as(TOKEN, len); break;
		case TB_PACKET_WRONG_STREAM: h->stream_id = STREAM + 3; break;
		case TB_PACKET_BAD_SEQ: f2->seq = 3; sign_as(TOKEN, len); break;
		default: fail();
		}
		inject(dg, len);
	}
	/* An empty datagram and a 60000-byte one of garbage (bad magic). */
	inject(dg, 0);
	{
		static uint8_t big[60000];

		memset(big, 0xee, sizeof(big));
		inject(big, sizeof(big));
	}
	/* A good one after them all: delivered, and no gap. */
	inject(dg, make(500, 3, 1));
	assert_int_equal(rx_poll_for(&r, 3, 5000), 0);
	for (int k = TB_PACKET_SHORT; k < TB_PACKET_FAULT_COUNT; k++) {
		uint64_t want = k == TB_PACKET_SHORT || k == TB_PACKET_BAD_MAGIC ? 2 : 1;

		print_message("%s: %llu\n", tb_packet_fault_name((enum tb_packet_fault)k),
			      (unsigned long long)u->dg.faults[k]);
		assert_int_equal(u->dg.faults[k], want);
		assert_int_equal(tb_counter_get(u->dg.ctr, (tb_counter_id_t)
				 (TB_CTR_MALFORMED_SHORT + k - TB_PACKET_SHORT)), want);
		total += u->dg.faults[k];
	}
	assert_int_equal(tb_counter_get(u->dg.ctr, TB_CTR_MALFORMED), total);
	assert_int_equal(u->dg.forged, 0);
	assert_int_equal(r.s.count, 3);
	assert_int_equal(r.s.bad, 0);
	assert_int_equal(r.seq.gaps, 0);
	tb_udp_rx_ops.close(r.rx);
}

static int poll_once(struct rx_side *r)
{
	return tb_udp_rx_ops.poll(r->rx, &r->seq, &r->loss, on_msg, &r->s, 256);
}

/* A lone datagram is received alone (recv, cheaper than a batch that
 * tries for a second), a burst in one batch: one receive a poll either
 * way, and batches for as long as they come back with two or more. */
static void lone_datagrams_alone_bursts_in_one_batch(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_rx_t *u;
	uint64_t calls;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	u = (tb_udp_rx_t *)r.rx;
	assert_int_equal(u->one, 1);
	inject(dg, make(700, 1, 1));
	assert_int_equal(rx_poll_for(&r, 1, 5000), 0);
	assert_int_equal(r.s.count, 1);
	assert_int_equal(u->one, 0); /* one came: a burst may follow */
	for (uint64_t seq = 2; seq <= 6; seq++)
		inject(dg, make(700, seq, 1));
	calls = u->recv_calls;
	assert_int_equal(poll_once(&r), 5);
	assert_int_equal(u->recv_calls, calls + 1);
	assert_int_equal(u->one, 0);
	/* Nothing waiting: back to one at a time. */
	assert_int_equal(poll_once(&r), 0);
	assert_int_equal(u->one, 1);
	for (uint64_t seq = 7; seq <= 9; seq++)
		inject(dg, make(700, seq, 1));
	calls = u->recv_calls;
	assert_int_equal(poll_once(&r), 1);
	assert_int_equal(poll_once(&r), 2);
	assert_int_equal(u->recv_calls, calls + 2);
	assert_int_equal(r.s.count, 9);
	assert_int_equal(r.s.bad, 0);
	assert_int_equal(r.seq.gaps, 0);
	tb_udp_rx_ops.close(r.rx);
}

/* One poll makes at most one receive, so a flood of garbage neither holds
 * the caller nor hides a publisher that went quiet. */
static void garbage_never_holds_the_poll_nor_hides_silence(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_rx_t *u;
	uint64_t calls, until;
	int rc, dead = 0;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	u = (tb_udp_rx_t *)r.rx;
	inject(dg, make(700, 1, 1));
	assert_int_equal(rx_poll_for(&r, 1, 5000), 0);
	for (int i = 0; i < TB_UDP_RX_BATCH + 8; i++)
		inject("garbage", 7);
	calls = u->recv_calls;
	rc = tb_udp_rx_ops.poll(r.rx, &r.seq, &r.loss, on_msg, &r.s, 256);
	assert_int_equal(rc, 0);
	assert_int_equal(u->recv_calls, calls + 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_MAGIC], TB_UDP_RX_BATCH);
	rc = tb_udp_rx_ops.poll(r.rx, &r.seq, &r.loss, on_msg, &r.s, 256);
	assert_int_equal(rc, 0);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_MAGIC], TB_UDP_RX_BATCH + 8);
	/* Garbage keeps coming, the publisher says nothing: dead. */
	until = tb_clock_mono_ms() + 5000;
	while (!dead && tb_clock_mono_ms() < until) {
		inject("garbage", 7);
		rc = tb_udp_rx_ops.poll(r.rx, &r.seq, &r.loss, on_msg, &r.s, 256);
		dead = rc == TB_PUBLISHER_DEAD;
		usleep(2000);
	}
	assert_true(dead);
	tb_udp_rx_ops.close(r.rx);
}

/* Through the public API the counts land in the process's counters file,
 * in the subscriber's slot, where tools read them. */
static void malformed_counts_reach_the_counters_file(void **state)
{
	tb_counters_proc_t *proc = calloc(1, sizeof(*proc));
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};
	const tb_counters_stream_t *mine = NULL;

	(void)state;
	assert_non_null(proc);
	cfg_for(&cfg);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	inject(dg, make(600, 1, 1));
	assert_int_equal(poll_for(sub, &s, 1, 5000), 0);
	make(600, 2, 1);
	((tb_packet_hdr_t *)dg)->version = 9;
	inject(dg, TB_PACKET_HDR_LEN + 64);
	inject(dg, make(600, 1, 1)); /* a duplicate */
	inject(dg, make(600, 2, 1));
	assert_int_equal(poll_for(sub, &s, 2, 5000), 0);
	assert_int_equal(tb_counters_read_file(tb_counters_path(), proc), 0);
	for (int i = 0; i < proc->n_streams; i++)
		if (proc->streams[i].stream_id == STREAM &&
		    proc->streams[i].role == TB_ROLE_SUBSCRIBER)
			mine = &proc->streams[i];
	assert_non_null(mine);
	assert_string_equal(mine->transport, "udp");
	assert_int_equal(mine->c[TB_CTR_DELIVERED], 2);
	assert_int_equal(mine->c[TB_CTR_MALFORMED], 1);
	assert_int_equal(mine->c[TB_CTR_MALFORMED_BAD_VERSION], 1);
	assert_int_equal(mine->c[TB_CTR_DUPLICATES], 1);
	tb_subscriber_close(sub);
	free(proc);
}

/* ------------------------------------------------------------ forgery */

/* The subscriber slot of this process's counters file for STREAM. */
static void sub_counters(tb_counters_proc_t *proc, uint64_t *c)
{
	int found = 0;

	assert_int_equal(tb_counters_read_file(tb_counters_path(), proc), 0);
	for (int i = 0; i < proc->n_streams; i++)
		if (proc->streams[i].stream_id == STREAM &&
		    proc->streams[i].role == TB_ROLE_SUBSCRIBER) {
			memcpy(c, proc->streams[i].c, sizeof(proc->streams[i].c));
			found = 1;
		}
	assert_true(found);
}

/* What an attacker who can send to the group makes of the stream id and
 * the epoch, both in clear in every datagram it sniffed. */
enum forgery {
	FORGE_END,        /* the stream ends at the next sequence */
	FORGE_FAR_SEQ,    /* a frame a billion sequences ahead */
	FORGE_NEXT_EPOCH, /* epoch + 1, sequence 1: a "restart" */
};

/* In the 32-byte layout of packet version 1, as the attacks were first
 * made: magic, version 1, flags, stream, epoch, first_seq, count, length. */
static size_t forge_v1(uint8_t *b, enum forgery kind, uint64_t epoch,
		       uint64_t next)
{
	uint32_t stream = STREAM, len = 32;
	uint64_t first = next;
	uint16_t count = 0;
	uint8_t flags = 0;

	memset(b, 0, 256);
	if (kind == FORGE_END)
		flags = TB_PACKET_F_END;
	if (kind == FORGE_FAR_SEQ)
		first = next + 1000000000ull;
	if (kind == FORGE_NEXT_EPOCH) {
		epoch++;
		first = 1;
	}
	if (kind != FORGE_END) {
		count = 1;
		len += frames_put(b + 32, STREAM, first, 16, 4, 0, fill);
	}
	b[0] = 'T';
	b[1] = 'P';
	b[2] = 1;
	b[3] = flags;
	memcpy(b + 4, &stream, 4);
	memcpy(b + 8, &epoch, 8);
	memcpy(b + 16, &first, 8);
	memcpy(b + 24, &count, 2);
	memcpy(b + 28, &len, 4);
	return len;
}

/* In the current layout, with a tag made under a guessed token. */
static size_t forge_v2(enum forgery kind, uint64_t epoch, uint64_t next)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	size_t len;

	if (kind == FORGE_END)
		len = frames_control_datagram(dg, STREAM, epoch, TB_PACKET_F_END,
					      next);
	else
		len = frames_datagram(dg, sizeof(dg), STREAM,
				      kind == FORGE_NEXT_EPOCH ? epoch + 1 : epoch,
				      kind == FORGE_FAR_SEQ ? next + 1000000000ull : 1,
				      1, 16, 4, fill);
	h->mtu = 1472;
	h->nonce = 1ull << 40; /* far ahead of the publisher's */
	h->since = tb_clock_realtime_ns();
	return sign_as("guessed-token", len);
}

/* A live stream, one forgery in each layout, then more of the stream:
 * every message delivered in order, no condition (no TB_CLOSED, TB_GAP or
 * TB_NEW_EPOCH), the forgeries counted by kind. */
static void forgery_changes_nothing(enum forgery kind)
{
	tb_counters_proc_t *proc = calloc(1, sizeof(*proc));
	uint64_t c[TB_CTR_CAPACITY], epoch;
	static uint8_t v1[256];
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};

	assert_non_null(proc);
	cfg_for(&cfg);
	cfg.heartbeat_ms = 50;
	cfg.liveness_timeout_ms = 5000;
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (int i = 0; i < 3; i++)
		assert_true(offer(pub, 24) > 0);
	assert_int_equal(poll_for(sub, &s, 3, 5000), 0);
	epoch = tb_pub_epoch(pub);
	inject(v1, forge_v1(v1, kind, epoch, 4));
	inject(dg, forge_v2(kind, epoch, 4));
	/* Time for both to arrive, and heartbeats after them. */
	assert_int_equal(poll_for(sub, &s, 0, 150), 0);
	for (int i = 0; i < 3; i++)
		assert_true(offer(pub, 24) > 0);
	assert_int_equal(poll_for(sub, &s, 6, 5000), 0);
	assert_int_equal(s.count, 6);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), epoch);
	assert_int_equal(tb_sub_next_seq(sub), 7);
	sub_counters(proc, c);
	assert_int_equal(c[TB_CTR_GAPS], 0);
	assert_int_equal(c[TB_CTR_MALFORMED_BAD_VERSION], 1);
	assert_int_equal(c[TB_CTR_DGRAM_FORGED], 1);
	/* The real END still ends it. */
	tb_publisher_close(pub);
	assert_int_equal(poll_for(sub, &s, 0, 5000), TB_CLOSED);
	tb_subscriber_close(sub);
	free(proc);
}

static void one_forged_end_no_longer_stops_subscribers(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_END);
}

static void forged_far_sequence_no_longer_drops_the_stream(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_FAR_SEQ);
}

static void forged_next_epoch_no_longer_hijacks_the_stream(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_NEXT_EPOCH);
}

/* A plain socket on the group, as an attacker's sniffer would be. */
static int sniffer(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct ip_mreqn m;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), one = 1;

	assert_true(fd >= 0);
	inet_pton(AF_INET, group, &a.sin_addr);
	memset(&m, 0, sizeof(m));
	m.imr_multiaddr = a.sin_addr;
	m.imr_address.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)), 0);
	return fd;
}

/* The data datagrams `fd` holds (up to `max`, each at most 256 bytes). */
static int sniff(int fd, uint8_t (*got)[256], size_t *len, int max)
{
	int n = 0;
	ssize_t r;

	while (n < max && (r = recv(fd, got[n], 256, 0)) > 0)
		if (((tb_packet_hdr_t *)got[n])->flags == 0)
			len[n++] = (size_t)r;
	return n;
}

/* What an attacker who sniffed epoch A can do: replay A's datagrams, in A
 * (refused as seen) and after the publisher restarted into B, to a
 * subscriber that followed A (refused: A was left) and to one that never
 * saw A (refused: A started before B did). */
static void sniffed_datagrams_replayed_are_refused(void **state)
{
	tb_counters_proc_t *proc = calloc(1, sizeof(*proc));
	static uint8_t got[8][256];
	uint64_t c[TB_CTR_CAPACITY];
	size_t len[8];
	tb_stream_cfg_t cfg;
	tb_publisher_t *a, *b;
	tb_subscriber_t *old_sub, *new_sub;
	struct sink s1 = {0, 1, 0}, s2 = {0, 1, 0};
	int fd, n;

	(void)state;
	assert_non_null(proc);
	cfg_for(&cfg);
	cfg.liveness_timeout_ms = 5000;
	fd = sniffer();
	assert_int_equal(tb_subscriber_open(&old_sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&a, &cfg), 0);
	for (int i = 0; i < 3; i++)
		assert_true(offer(a, 24) > 0);
	assert_int_equal(poll_for(old_sub, &s1, 3, 5000), 0);
	n = sniff(fd, got, len, 8);
	assert_int_equal(n, 3);
	/* Within A: the copies are seen nonces. */
	for (int i = 0; i < n; i++)
		inject(got[i], len[i]);
	assert_int_equal(poll_for(old_sub, &s1, 0, 100), 0);
	assert_int_equal(s1.count, 3);
	sub_counters(proc, c);
	assert_int_equal(c[TB_CTR_DGRAM_REPLAYED], 3);
	/* A restarts as B; a second subscriber joins B only. */
	tb_publisher_close(a);
	assert_int_equal(poll_for(old_sub, &s1, 0, 5000), TB_CLOSED);
	assert_int_equal(tb_publisher_open(&b, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&new_sub, &cfg), 0);
	assert_true(offer(b, 24) == 1);
	assert_int_equal(poll_for(old_sub, &s1, 0, 5000), TB_NEW_EPOCH);
	s1.next = 1;
	assert_int_equal(poll_for(old_sub, &s1, 4, 5000), 0);
	assert_int_equal(poll_for(new_sub, &s2, 1, 5000), 0);
	/* A's datagrams again: neither subscriber goes back to A. */
	for (int i = 0; i < n; i++)
		inject(got[i], len[i]);
	assert_true(offer(b, 24) == 2);
	assert_int_equal(poll_for(old_sub, &s1, 5, 5000), 0);
	assert_int_equal(poll_for(new_sub, &s2, 2, 5000), 0);
	assert_int_equal(poll_for(old_sub, &s1, 0, 100), 0);
	assert_int_equal(poll_for(new_sub, &s2, 0, 100), 0);
	assert_int_equal(s1.count, 5);
	assert_int_equal(s2.count, 2);
	assert_int_equal(s1.bad + s2.bad, 0);
	assert_int_equal(tb_sub_epoch(old_sub), tb_pub_epoch(b));
	assert_int_equal(tb_sub_epoch(new_sub), tb_pub_epoch(b));
	/* Counted as stale by each: an epoch left (the first), an epoch that
	 * started before the followed one (the second). */
	assert_int_equal(tb_counters_read_file(tb_counters_path(), proc), 0);
	n = 0;
	for (int i = 0; i < proc->n_streams; i++)
		if (proc->streams[i].stream_id == STREAM &&
		    proc->streams[i].role == TB_ROLE_SUBSCRIBER) {
			assert_int_equal(proc->streams[i].c[TB_CTR_STALE_EPOCH], 3);
			n++;
		}
	assert_int_equal(n, 2);
	tb_publisher_close(b);
	tb_subscriber_close(old_sub);
	tb_subscriber_close(new_sub);
	close(fd);
	free(proc);
}

static void restart_is_a_new_epoch_and_the_old_one_is_ignored(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *a, *b;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&a, &cfg), 0);
	for (int i = 0; i < 3; i++)
		assert_true(offer(a, 32) > 0);
	assert_int_equal(poll_for(sub, &s, 3, 5000), 0);
	assert_int_equal(tb_sub_epoch(sub), tb_pub_epoch(a));
	/* A second publisher: a restart, as the subscriber sees it. */
	assert_int_equal(tb_publisher_open(&b, &cfg), 0);
	assert_true(offer(b, 32) == 1);
	assert_int_equal(poll_for(sub, &s, 0, 5000), TB_NEW_EPOCH);
	assert_int_equal(tb_sub_epoch(sub), tb_pub_epoch(b));
	s.next = 1;
	assert_int_equal(poll_for(sub, &s, 4, 5000), 0);
	/* The old publisher is still talking: nothing of it gets through,
	 * not even its END. */
	assert_true(offer(a, 32) > 0);
	tb_publisher_close(a);
	assert_true(offer(b, 32) == 2);
	assert_int_equal(poll_for(sub, &s, 5, 5000), 0);
	assert_int_equal(s.count, 5);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_next_seq(sub), 3);
	tb_publisher_close(b);
	assert_int_equal(poll_for(sub, &s, 0, 5000), TB_CLOSED);
	tb_subscriber_close(sub);
}

static void silent_publisher_is_dead_then_closes(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_tx_t *tx;
	uint64_t seq = 1, t0;
	int rc;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	/* The transport alone: no heartbeat thread, so it goes silent. */
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 99), 0);
	commit_frames(tx, &seq, 1, 16);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_int_equal(rx_poll_for(&r, 1, 5000), 0);
	t0 = tb_clock_mono_ms();
	rc = rx_poll_for(&r, 0, 5000);
	assert_int_equal(rc, TB_PUBLISHER_DEAD);
	assert_true(tb_clock_mono_ms() - t0 >= 150); /* liveness_timeout_ms = 200 */
	/* Reported once. */
	assert_int_equal(rx_poll_for(&r, 0, 300), 0);
	/* A heartbeat revives it; END closes it. */
	tb_udp_tx_ops.beat(tx, 0, 1);
	assert_int_equal(rx_poll_for(&r, 0, 100), 0);
	tb_udp_tx_ops.close(tx, 1);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	tb_udp_rx_ops.close(r.rx);
}

static void heartbeat_reports_a_lost_tail(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_tx_t *tx;
	tb_udp_tx_t *u;
	uint64_t seq = 1;

	(void)state;
	cfg_for(&cfg);
	rx_open(&r, &cfg);
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 99), 0);
	u = (tb_udp_tx_t *)tx;
	commit_frames(tx, &seq, 2, 16);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_int_equal(rx_poll_for(&r, 2, 5000), 0);
	/* 3..5 "sent" but never on the wire: the heartbeat names them. */
	tb_atomic_store_relaxed(&u->dg.sent_next, 6);
	tb_udp_tx_ops.beat(tx, 0, 5);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_GAP);
	assert_int_equal(r.loss.first, 3);
	assert_int_equal(r.loss.last, 5);
	tb_udp_tx_ops.close(tx, 5);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	tb_udp_rx_ops.close(r.rx);
}

/* Loss injected from outside the transport: the interposer
 * (tests/common/udp_loss.c) is linked into this binary, so the transport's
 * recvmmsg goes through it. */
static void loss_interposer_drops_logs_and_rejects_bad_values(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_tx_t *tx;
	uint64_t seq = 1;
	char log[64], line[128], out[64], cmd[PATH_MAX + 256], *text;
	FILE *f;
	int lines = 0;
	long n;

	(void)state;
	cfg_for(&cfg);
	snprintf(log, sizeof(log), "/tmp/tb-udp-drop.%d", (int)getpid());
	unlink(log);
	setenv(UDP_LOSS_ENV_RATE, "1", 1);
	setenv(UDP_LOSS_ENV_LOG, log, 1);
	assert_int_equal(udp_loss_arm(), 0);
	rx_open(&r, &cfg);
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 5), 0);
	for (int i = 0; i < 3; i++) {
		commit_frames(tx, &seq, 2, 16);
		assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	}
	/* Every data datagram dropped; END still closes, with the tail gap. */
	tb_udp_tx_ops.close(tx, 6);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	assert_int_equal(r.s.count, 0);
	assert_int_equal(udp_loss_dropped(), 3);
	tb_udp_rx_ops.close(r.rx);
	f = fopen(log, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char want[32];

		snprintf(want, sizeof(want), "drop %d 2\n", 1 + 2 * lines);
		assert_string_equal(line, want);
		lines++;
	}
	fclose(f);
	unlink(log);
	assert_int_equal(lines, 3);

	setenv(UDP_LOSS_ENV_RATE, "1.5", 1);
	assert_int_equal(udp_loss_arm(), -1);
	assert_non_null(strstr(udp_loss_error(), UDP_LOSS_ENV_RATE "='1.5'"));
	setenv(UDP_LOSS_ENV_RATE, "0.5", 1);
	setenv(UDP_LOSS_ENV_SEED, "x1", 1);
	assert_int_equal(udp_loss_arm(), -1);
	assert_non_null(strstr(udp_loss_error(), UDP_LOSS_ENV_SEED "='x1'"));

	/* Preloaded, the same refusal ends the program before main. */
	snprintf(out, sizeof(out), "/tmp/tb-udp-loss-out.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "env LD_PRELOAD=%s %s=1.5 /bin/true >%s 2>&1",
		 udp_loss_library(), UDP_LOSS_ENV_RATE, out);
	n = system(cmd);
	assert_true(WIFEXITED(n) && WEXITSTATUS(n) == 2);
	f = fopen(out, "r");
	assert_non_null(f);
	text = calloc(1, 512);
	assert_non_null(text);
	assert_true(fread(text, 1, 511, f) > 0);
	fclose(f);
	unlink(out);
	assert_non_null(strstr(text, UDP_LOSS_ENV_RATE "='1.5'"));
	free(text);

	unsetenv(UDP_LOSS_ENV_RATE);
	unsetenv(UDP_LOSS_ENV_SEED);
	unsetenv(UDP_LOSS_ENV_LOG);
	assert_int_equal(udp_loss_arm(), 0);
}

static void config_file_opens_a_udp_stream(void **state)
{
	tb_subscriber_t *sub;
	tb_publisher_t *pub;

	(void)state;
	/* The shipped example loads and opens both ends. */
	assert_int_equal(tb_subscriber_open_file(&sub, "config/udp.ini",
						 "trades-udp"), 0);
	assert_int_equal(tb_publisher_open_file(&pub, "config/udp.ini",
						"trades-udp"), 0);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(delivers_in_order_to_two_subscribers_sharing_the_port),
		cmocka_unit_test(interface_by_netdev_name_and_bad_names),
		cmocka_unit_test(message_larger_than_a_datagram_is_refused_at_offer),
		cmocka_unit_test(several_datagrams_leave_in_one_sendmmsg),
		cmocka_unit_test(a_lone_datagram_is_copied_unless_large),
		cmocka_unit_test(a_burst_is_sent_in_order_with_one_stamp),
		cmocka_unit_test(batching_holds_until_full_flush_or_time),
		cmocka_unit_test(rcvbuf_is_granted_or_its_cap_warned),
		cmocka_unit_test(every_malformed_datagram_is_counted_and_dropped),
		cmocka_unit_test(garbage_never_holds_the_poll_nor_hides_silence),
		cmocka_unit_test(malformed_counts_reach_the_counters_file),
		cmocka_unit_test(one_forged_end_no_longer_stops_subscribers),
		cmocka_unit_test(forged_far_sequence_no_longer_drops_the_stream),
		cmocka_unit_test(forged_next_epoch_no_longer_hijacks_the_stream),
		cmocka_unit_test(sniffed_datagrams_replayed_are_refused),
		cmocka_unit_test(restart_is_a_new_epoch_and_the_old_one_is_ignored),
		cmocka_unit_test(silent_publisher_is_dead_then_closes),
		cmocka_unit_test(heartbeat_reports_a_lost_tail),
		cmocka_unit_test(loss_interposer_drops_logs_and_rejects_bad_values),
		cmocka_unit_test(lone_datagrams_alone_bursts_in_one_batch),
		cmocka_unit_test(config_file_opens_a_udp_stream),
	};
	return cmocka_run_group_tests_name("transport_udp", tests, setup, NULL);
}
