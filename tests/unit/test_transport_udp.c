/*
 * The udp transport on loopback multicast, through the public API and,
 * where a test needs to see inside, through the transport ops: delivery,
 * several subscribers sharing the port, interface by address and by name,
 * sendmmsg batching, TB_EMSGSIZE at offer, the SO_RCVBUF warning, every
 * malformed datagram injected from a raw socket, epoch change, END ->
 * TB_CLOSED, silence -> TB_PUBLISHER_DEAD, and loss injected from outside
 * by the udp loss interposer (tests/common/udp_loss.h).
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
	/* Default mtu for udp: 1472 bytes, 1408 of payload. */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 1408), 1);
	assert_int_equal(offer(pub, 1409), TB_EMSGSIZE);
	assert_int_equal(tb_pub_claim(pub, 4, 1409, &claim), TB_EMSGSIZE);
	assert_int_equal(tb_pub_next_seq(pub), 2);
	tb_publisher_close(pub);
	cfg.mtu = 256;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(offer(pub, 192), 1);
	assert_int_equal(offer(pub, 193), TB_EMSGSIZE);
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

static void several_datagrams_leave_in_one_sendmmsg(void **state)
{
	tb_stream_cfg_t cfg;
	struct rx_side r;
	tb_udp_tx_t *u;
	tb_tx_t *tx;
	uint64_t seq = 1;

	(void)state;
	cfg_for(&cfg);
	cfg.mtu = 256; /* two 72-byte frames per datagram */
	rx_open(&r, &cfg);
	assert_int_equal(tb_udp_tx_ops.open(&tx, &cfg, 77), 0);
	u = (tb_udp_tx_t *)tx;
	/* One send covering 20 frames: 10 datagrams, one system call. */
	commit_frames(tx, &seq, 20, 40);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_int_equal(u->sendmmsg_calls, 1);
	assert_int_equal(u->sendmsg_calls, 0);
	assert_int_equal(u->dg.datagrams, 10);
	assert_int_equal(rx_poll_for(&r, 20, 5000), 0);
	assert_int_equal(r.s.count, 20);
	assert_int_equal(r.s.bad, 0);
	/* A lone frame goes by sendmsg. */
	commit_frames(tx, &seq, 1, 40);
	assert_int_equal(tb_udp_tx_ops.send(tx, 0, tx->ring.tail), 0);
	assert_int_equal(u->sendmsg_calls, 1);
	assert_int_equal(rx_poll_for(&r, 21, 5000), 0);
	tb_udp_tx_ops.close(tx, seq - 1);
	assert_int_equal(rx_poll_for(&r, 0, 5000), TB_CLOSED);
	tb_udp_rx_ops.close(r.rx);
}

static void batching_holds_until_full_flush_or_time(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0};

	(void)state;
	cfg_for(&cfg);
	cfg.mtu = 256;
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

static void capped_rcvbuf_earns_a_warning(void **state)
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
		assert_non_null(strstr(err, "SO_RCVBUF"));
		assert_non_null(strstr(err, "net.core.rmem_max"));
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

static size_t make(uint64_t epoch, uint64_t first, int count)
{
	return frames_datagram(dg, sizeof(dg), STREAM, epoch, first, count, 16, 4,
			       fill);
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
		case TB_PACKET_BAD_VERSION: h->version = 2; break;
		case TB_PACKET_BAD_LENGTH: h->length += 32; break;
		case TB_PACKET_BAD_FLAGS: h->flags = 0x40; break;
		case TB_PACKET_BAD_COUNT: h->count = 200; break;
		case TB_PACKET_BAD_FRAME: f2->length = 4000; break;
		case TB_PACKET_WRONG_STREAM: h->stream_id = STREAM + 3; break;
		case TB_PACKET_BAD_SEQ: f2->seq = 3; break;
		default: fail();
		}
		inject(dg, len);
	}
	/* An empty datagram and a 60000-byte one of garbage. */
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
	assert_int_equal(r.s.count, 3);
	assert_int_equal(r.s.bad, 0);
	assert_int_equal(r.seq.gaps, 0);
	tb_udp_rx_ops.close(r.rx);
}

/* One poll makes at most one recvmmsg, so a flood of garbage neither holds
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
	assert_int_equal(u->dg.faults[TB_PACKET_SHORT], TB_UDP_RX_BATCH);
	rc = tb_udp_rx_ops.poll(r.rx, &r.seq, &r.loss, on_msg, &r.s, 256);
	assert_int_equal(rc, 0);
	assert_int_equal(u->dg.faults[TB_PACKET_SHORT], TB_UDP_RX_BATCH + 8);
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
		cmocka_unit_test(batching_holds_until_full_flush_or_time),
		cmocka_unit_test(capped_rcvbuf_earns_a_warning),
		cmocka_unit_test(every_malformed_datagram_is_counted_and_dropped),
		cmocka_unit_test(garbage_never_holds_the_poll_nor_hides_silence),
		cmocka_unit_test(malformed_counts_reach_the_counters_file),
		cmocka_unit_test(restart_is_a_new_epoch_and_the_old_one_is_ignored),
		cmocka_unit_test(silent_publisher_is_dead_then_closes),
		cmocka_unit_test(heartbeat_reports_a_lost_tail),
		cmocka_unit_test(loss_interposer_drops_logs_and_rejects_bad_values),
		cmocka_unit_test(config_file_opens_a_udp_stream),
	};
	return cmocka_run_group_tests_name("transport_udp", tests, setup, NULL);
}
