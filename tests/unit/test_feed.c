/*
 * test_feed.c - unit tests of the feed-handler core (tools/md/feed.c),
 * in one process on loopback: the test sends hand-built MoldUDP64 packets
 * to the feed's socket (unicast 127.0.0.1, an ephemeral port) and plays the
 * retransmission server on a socket of its own, so that every request the
 * feed makes can be read and checked, answered or ignored.  Line B is a
 * second socket of the feed (another ephemeral port) that the test sends
 * copies to, in whatever order a test needs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bus/clock.h"
#include "tools/md/feed.h"
#include "tools/md/md_error.h"

#define SESSION "UNITSESS01"
#define MAXEV 4096

/* ------------------------------------------------------------ fixture */

typedef struct fx {
	tb_feed_t *f;
	int tx;            /* sends to the feed */
	int rs;            /* the retransmission server */
	uint16_t port, rport;
	tb_feed_event_t ev[MAXEV];
	int nev;
	uint16_t port_b;   /* line B, 0 = none */
	uint64_t applied[MAXEV];
	int napplied;
} fx_t;

static fx_t fx;

static void on_event(void *ctx, const tb_feed_event_t *ev)
{
	fx_t *x = ctx;

	assert_true(x->nev < MAXEV);
	x->ev[x->nev++] = *ev;
}

static void on_applied(void *ctx, uint64_t seq)
{
	fx_t *x = ctx;

	assert_true(x->napplied < MAXEV);
	x->applied[x->napplied++] = seq;
}

static uint16_t bound_port(int fd)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	return ntohs(sa.sin_port);
}

/* Opens a feed on 127.0.0.1:0 with the test's retransmission server;
 * with `ab_wait_ns` > 0 a line B too, on another port. */
static void fx_open_lines(uint64_t gap_timeout_ns, uint32_t retries,
			  const char *session, uint64_t ab_wait_ns,
			  uint64_t line_timeout_ns)
{
	struct sockaddr_in sa;
	tb_feed_cfg_t c;

	memset(&fx, 0, sizeof(fx));
	fx.rs = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fx.rs, (struct sockaddr *)&sa, sizeof(sa)), 0);
	fx.rport = bound_port(fx.rs);
	fx.tx = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(fx.tx >= 0);

	tb_feed_cfg_init(&c);
	c.group = "127.0.0.1";
	c.port = 0;
	c.retrans_host = "127.0.0.1";
	c.retrans_port = fx.rport;
	c.first_seq = 1;
	c.max_instruments = 16;
	c.max_orders = 1024;
	c.max_levels = 32;
	c.pending_max = 8;
	c.gap_timeout_ns = gap_timeout_ns;
	c.gap_retries = retries;
	c.rcvbuf = 0;
	c.session = session;
	c.cb = on_event;
	c.applied = on_applied;
	c.ctx = &fx;
	if (ab_wait_ns) {
		c.group_b = "127.0.0.1";
		c.port_b = 0;
		c.ab_wait_ns = ab_wait_ns;
		c.line_timeout_ns = line_timeout_ns;
	}
	assert_int_equal(tb_feed_open(&fx.f, &c), 0);
	fx.port = tb_feed_port(fx.f);
	assert_true(fx.port > 0);
	if (ab_wait_ns) {
		fx.port_b = tb_feed_line_port(fx.f, 1);
		assert_true(fx.port_b > 0 && fx.port_b != fx.port);
	} else {
		assert_int_equal(tb_feed_line_port(fx.f, 1), 0);
	}
}

static void fx_open(uint64_t gap_timeout_ns, uint32_t retries, const char *session)
{
	fx_open_lines(gap_timeout_ns, retries, session, 0, 0);
}

static void fx_close(void)
{
	tb_feed_close(fx.f);
	close(fx.tx);
	close(fx.rs);
}

static void send_raw_to(uint16_t port, const void *b, size_t n)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(sendto(fx.tx, b, n, 0, (struct sockaddr *)&sa, sizeof(sa)),
			 (ssize_t)n);
}

static void send_raw(const void *b, size_t n)
{
	send_raw_to(fx.port, b, n);
}

/* Polls the feed until `pred` holds, for at most 10 s (sleeping between
 * empty polls, so the test never spins on a busy machine). */
static int poll_until(int (*pred)(void))
{
	struct timespec ts = { 0, 200000 };
	int i;

	for (i = 0; i < 50000; i++) {
		assert_true(tb_feed_poll(fx.f) >= 0);
		if (pred())
			return 1;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* Polls for about `ms` regardless. */
static void poll_for(int ms)
{
	struct timespec ts = { 0, 200000 };
	uint64_t until = tb_clock_now_ns() + (uint64_t)ms * 1000000ull;

	while (tb_clock_now_ns() < until) {
		assert_true(tb_feed_poll(fx.f) >= 0);
		nanosleep(&ts, NULL);
	}
}

static tb_feed_stats_t stats(void)
{
	tb_feed_stats_t st;

	tb_feed_stats(fx.f, &st);
	return st;
}

/* ------------------------------------------------------- messages */

typedef struct msgbuf {
	uint8_t b[64];
	int n;
} msgbuf_t;

static msgbuf_t enc(const tb_itch_msg_t *m)
{
	msgbuf_t r;

	r.n = tb_itch_encode(m, r.b, sizeof(r.b));
	assert_true(r.n > 0);
	return r;
}

static msgbuf_t m_dir(uint16_t locate, const char *sym)
{
	tb_itch_msg_t m;

	memset(&m, 0, sizeof(m));
	m.type = TB_ITCH_STOCK_DIRECTORY;
	m.locate = locate;
	memset(m.u.dir.stock, ' ', 8);
	memcpy(m.u.dir.stock, sym, strlen(sym));
	return enc(&m);
}

static msgbuf_t m_add(uint16_t locate, uint64_t ref, char side, uint32_t px,
		      uint32_t qty)
{
	tb_itch_msg_t m;

	memset(&m, 0, sizeof(m));
	m.type = TB_ITCH_ADD_ORDER;
	m.locate = locate;
	m.timestamp = 1000 + ref;
	m.u.add.ref = ref;
	m.u.add.side = (uint8_t)side;
	m.u.add.shares = qty;
	m.u.add.price = px;
	return enc(&m);
}

static msgbuf_t m_exec(uint16_t locate, uint64_t ref, uint32_t qty)
{
	tb_itch_msg_t m;

	memset(&m, 0, sizeof(m));
	m.type = TB_ITCH_ORDER_EXECUTED;
	m.locate = locate;
	m.u.exec.ref = ref;
	m.u.exec.shares = qty;
	m.u.exec.match = 77;
	return enc(&m);
}

/* Sends one data packet of `n` messages starting at `seq` to `port`. */
static void send_pkt_to(uint16_t port, const char *session, uint64_t seq,
			const msgbuf_t *m, int n)
{
	uint8_t pkt[TB_MOLD_MAX_PKT];
	tb_mold_builder_t b;
	int i;

	assert_int_equal(tb_mold_build_begin(&b, pkt, sizeof(pkt), session, seq), 0);
	for (i = 0; i < n; i++)
		assert_int_equal(tb_mold_build_add(&b, m[i].b, (size_t)m[i].n), 0);
	send_raw_to(port, pkt, tb_mold_build_end(&b));
}

static void send_pkt(const char *session, uint64_t seq, const msgbuf_t *m, int n)
{
	send_pkt_to(fx.port, session, seq, m, n);
}

/* Reads one request from the retransmission socket (waiting up to 10 s). */
static int read_request(tb_mold_req_t *r, struct sockaddr_in *from)
{
	uint8_t buf[64];
	socklen_t fl = sizeof(*from);
	int i;

	for (i = 0; i < 50000; i++) {
		ssize_t n = recvfrom(fx.rs, buf, sizeof(buf), 0,
				     (struct sockaddr *)from, &fl);

		if (n >= 0) {
			assert_int_equal(tb_mold_req_decode(buf, (size_t)n, r), 0);
			return 1;
		}
		assert_true(tb_feed_poll(fx.f) >= 0);
		usleep(200);
	}
	return 0;
}

static int count_kind(uint32_t kind, int book_kind)
{
	int i, n = 0;

	for (i = 0; i < fx.nev; i++)
		if (fx.ev[i].kind == kind &&
		    (book_kind < 0 || fx.ev[i].book.kind == book_kind))
			n++;
	return n;
}

static uint64_t want_next;
static int next_is(void) { return stats().next_seq == want_next; }

/* --------------------------------------------------------------- tests */

static void test_in_order(void **state)
{
	msgbuf_t m[4];
	uint64_t t0;
	tb_book_level_t lv;
	int i;

	(void)state;
	fx_open(20000000ull, 3, NULL);
	m[0] = m_dir(3, "ABC");
	m[1] = m_add(3, 10, 'B', 1000000, 300);
	m[2] = m_add(3, 11, 'S', 1010000, 200);
	m[3] = m_exec(3, 10, 100);
	t0 = tb_clock_now_ns();
	send_pkt(SESSION, 1, m, 4);
	want_next = 5;
	assert_true(poll_until(next_is));

	assert_int_equal(count_kind(TB_FEED_EV_INSTRUMENT, -1), 1);
	assert_memory_equal(fx.ev[0].symbol, "ABC     ", 8);
	assert_int_equal(fx.ev[0].instrument, 3);
	assert_int_equal(fx.ev[0].seq, 1);
	/* add bid: level add + top; add ask: level add + top; exec: trade,
	 * level modify, top. */
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_LEVEL_ADD), 2);
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_TOP), 3);
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_TRADE), 1);
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_LEVEL_MODIFY), 1);
	for (i = 1; i < fx.nev; i++) {
		assert_true(fx.ev[i].seq >= fx.ev[i - 1].seq);
		assert_true(fx.ev[i].feed_receive_ns >= t0 - 1000000);
		assert_true(fx.ev[i].feed_receive_ns <= tb_clock_now_ns());
		assert_int_equal(fx.ev[i].instrument, 3);
	}
	/* The trade: seq 4, at the resting price, the bid side. */
	for (i = 0; i < fx.nev; i++)
		if (fx.ev[i].book.kind == TB_BOOK_EV_TRADE) {
			assert_int_equal(fx.ev[i].seq, 4);
			assert_int_equal(fx.ev[i].book.price, 1000000);
			assert_int_equal(fx.ev[i].book.qty, 100);
			assert_int_equal(fx.ev[i].book.side, TB_BOOK_BID);
			assert_int_equal(fx.ev[i].book.match, 77);
		}
	assert_int_equal(fx.ev[fx.nev - 1].book.kind, TB_BOOK_EV_TOP);
	assert_int_equal(fx.ev[fx.nev - 1].book.bid_qty, 200);
	assert_int_equal(fx.ev[fx.nev - 1].book.ask_px, 1010000);
	assert_int_equal(tb_book_levels(tb_feed_book(fx.f), 3, TB_BOOK_BID, &lv, 1), 1);
	assert_int_equal(lv.qty, 200);
	assert_int_equal(stats().messages, 4);
	assert_int_equal(stats().gaps, 0);
	assert_int_equal(stats().requests, 0);
	fx_close();
}

/* A packet ahead of the sequence is kept; the hole is re-requested from
 * the retransmission server; its answer fills the hole and the kept packet
 * is applied after it, in order. */
static void test_gap_filled(void **state)
{
	msgbuf_t m[3];
	tb_mold_req_t r;
	struct sockaddr_in from;
	uint8_t pkt[TB_MOLD_MAX_PKT];
	tb_mold_builder_t b;
	int i;

	(void)state;
	fx_open(50000000ull, 5, NULL);
	m[0] = m_dir(1, "X");
	m[1] = m_add(1, 5, 'B', 500000, 100);
	m[2] = m_exec(1, 5, 40);
	/* Sequence 3 arrives first. */
	send_pkt(SESSION, 3, &m[2], 1);
	assert_true(read_request(&r, &from));
	assert_memory_equal(r.session, SESSION, 10);
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.count, 2);
	assert_int_equal(fx.nev, 0); /* nothing applied out of order */
	assert_int_equal(stats().gaps, 1);
	/* Answer from the server socket, as a retransmission server does. */
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 1);
	tb_mold_build_add(&b, m[0].b, (size_t)m[0].n);
	tb_mold_build_add(&b, m[1].b, (size_t)m[1].n);
	assert_true(sendto(fx.rs, pkt, tb_mold_build_end(&b), 0,
			   (struct sockaddr *)&from, sizeof(from)) > 0);
	want_next = 4;
	assert_true(poll_until(next_is));
	for (i = 1; i < fx.nev; i++)
		assert_true(fx.ev[i].seq >= fx.ev[i - 1].seq);
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_TRADE), 1);
	assert_int_equal(stats().gaps_filled, 1);
	assert_int_equal(stats().retrans_packets, 1);
	assert_int_equal(stats().lost_messages, 0);
	/* The same packet again: duplicates, no events. */
	{
		int before = fx.nev;

		send_pkt(SESSION, 1, m, 3);
		poll_for(50);
		assert_int_equal(fx.nev, before);
		assert_int_equal(stats().duplicates, 3);
	}
	fx_close();
}

/* A server that answers a request only in part: when the timeout comes,
 * the rest is asked for as a new request (not a retry), and filled. */
static void test_gap_partial_answer(void **state)
{
	msgbuf_t m[4];
	tb_mold_req_t r;
	struct sockaddr_in from;
	uint8_t pkt[TB_MOLD_MAX_PKT];
	tb_mold_builder_t b;

	(void)state;
	fx_open(5000000ull, 1, NULL);
	m[0] = m_dir(1, "A");
	m[1] = m_add(1, 5, 'B', 500000, 100);
	m[2] = m_add(1, 6, 'B', 500100, 100);
	m[3] = m_exec(1, 5, 10);
	send_pkt(SESSION, 4, &m[3], 1);
	assert_true(read_request(&r, &from));
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.count, 3);
	/* Answer the first message only. */
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 1);
	tb_mold_build_add(&b, m[0].b, (size_t)m[0].n);
	assert_true(sendto(fx.rs, pkt, tb_mold_build_end(&b), 0,
			   (struct sockaddr *)&from, sizeof(from)) > 0);
	/* With one retry allowed, a retry here would be the last; the
	 * partial answer instead starts a fresh request for 2..3. */
	assert_true(read_request(&r, &from));
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.count, 2);
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 2);
	tb_mold_build_add(&b, m[1].b, (size_t)m[1].n);
	tb_mold_build_add(&b, m[2].b, (size_t)m[2].n);
	assert_true(sendto(fx.rs, pkt, tb_mold_build_end(&b), 0,
			   (struct sockaddr *)&from, sizeof(from)) > 0);
	want_next = 5;
	assert_true(poll_until(next_is));
	assert_int_equal(stats().gaps_lost, 0);
	assert_int_equal(stats().gaps_filled, 1);
	assert_int_equal(stats().requests, 2);
	assert_int_equal(tb_book_order_count(tb_feed_book(fx.f)), 2);
	fx_close();
}

/* Nobody answers: the request is repeated `retries` times, then the range
 * is given up, the instruments seen are reported stale, the books cleared,
 * and the feed carries on from the first packet it held. */
static void test_gap_given_up(void **state)
{
	msgbuf_t m[4];
	tb_mold_req_t r;
	struct sockaddr_in from;
	int i;

	(void)state;
	fx_open(5000000ull, 3, NULL);
	m[0] = m_dir(1, "A");
	m[1] = m_dir(2, "B");
	m[2] = m_add(1, 5, 'B', 500000, 100);
	send_pkt(SESSION, 1, m, 3);
	want_next = 4;
	assert_true(poll_until(next_is));
	/* 4 and 5 lost; 6 arrives. */
	m[3] = m_add(2, 9, 'S', 600000, 10);
	send_pkt(SESSION, 6, &m[3], 1);
	for (i = 0; i < 4; i++) {
		assert_true(read_request(&r, &from));
		assert_int_equal(r.seq, 4);
		assert_int_equal(r.count, 2);
	}
	want_next = 7;
	assert_true(poll_until(next_is));
	assert_int_equal(stats().requests, 4);
	assert_int_equal(stats().gaps_lost, 1);
	assert_int_equal(stats().lost_messages, 2);
	assert_int_equal(stats().stale_reports, 2);
	assert_int_equal(count_kind(TB_FEED_EV_STALE, -1), 2);
	assert_true(tb_feed_stale(fx.f, 1));
	assert_true(tb_feed_stale(fx.f, 2));
	assert_false(tb_feed_stale(fx.f, 3));
	/* The books restarted from the resync point: order 5 is gone, the
	 * order of sequence 6 is there. */
	assert_int_equal(tb_book_order_count(tb_feed_book(fx.f)), 1);
	{
		uint32_t in;
		tb_book_side_t s;
		int64_t px;
		uint64_t q;

		assert_int_equal(tb_book_order(tb_feed_book(fx.f), 9, &in, &s, &px, &q), 0);
		assert_int_equal(tb_book_order(tb_feed_book(fx.f), 5, &in, &s, &px, &q),
				 TB_BOOK_ENOORDER);
	}
	/* A message about a lost order is a counted book error. */
	m[0] = m_exec(1, 5, 1);
	send_pkt(SESSION, 7, m, 1);
	want_next = 8;
	assert_true(poll_until(next_is));
	assert_int_equal(stats().book_errors, 1);
	fx_close();
}

static int malformed_is_5(void) { return stats().malformed_packets == 5; }

static void test_malformed(void **state)
{
	uint8_t pkt[4096];
	msgbuf_t m[4];
	tb_feed_stats_t st;

	(void)state;
	fx_open(20000000ull, 3, SESSION);
	send_raw("tiny", 4);                          /* ESHORT */
	tb_mold_write_ctl(pkt, SESSION, 0, 0);
	send_raw(pkt, 20);                            /* ESEQ */
	tb_mold_write_ctl(pkt, SESSION, 1, 0);
	send_raw(pkt, 25);                            /* ECTLLEN */
	m[0] = m_dir(1, "A");
	send_pkt(SESSION, 1, m, 1);
	/* That packet with count 2: EBLOCK; and truncated datagram (longer
	 * than any packet the feed reads). */
	{
		tb_mold_builder_t b;
		size_t n;

		tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 1);
		tb_mold_build_add(&b, m[0].b, (size_t)m[0].n);
		n = tb_mold_build_end(&b);
		pkt[19] = 2;
		send_raw(pkt, n);
		memset(pkt + 20, 0, 3000);
		send_raw(pkt, 3000);
	}
	/* Another session: counted, dropped. */
	send_pkt("OTHERSESS1", 2, m, 1);
	assert_true(poll_until(malformed_is_5));
	want_next = 2;
	assert_true(poll_until(next_is));
	st = stats();
	assert_int_equal(st.malformed_by_kind[-TB_MOLD_ESHORT - 101], 1);
	assert_int_equal(st.malformed_by_kind[-TB_MOLD_ESEQ - 101], 1);
	assert_int_equal(st.malformed_by_kind[-TB_MOLD_ECTLLEN - 101], 1);
	assert_int_equal(st.malformed_by_kind[-TB_MOLD_EBLOCK - 101], 1);
	assert_int_equal(st.wrong_session, 1);

	/* Inside a good packet: a message of the wrong length, an unknown
	 * type, a bad side; each consumes its sequence. */
	memset(m, 0, sizeof(m));
	m[0] = m_add(1, 5, 'B', 100, 1);
	m[0].n--;
	m[1].b[0] = 'Z';
	m[1].n = 5;
	m[2] = m_add(1, 6, 'B', 100, 1);
	m[2].b[19] = 'Q';
	m[3] = m_add(1, 7, 'S', 200, 1);
	send_pkt(SESSION, 2, m, 4);
	want_next = 6;
	assert_true(poll_until(next_is));
	st = stats();
	assert_int_equal(st.malformed_messages, 2);
	assert_int_equal(st.unknown_types, 1);
	assert_int_equal(tb_book_order_count(tb_feed_book(fx.f)), 1);
	assert_int_equal(st.gaps, 0);
	fx_close();
}

/* A heartbeat that announces sequences not seen opens a gap; the end of
 * session ends the feed once everything before it is applied. */
static void test_heartbeat_and_end(void **state)
{
	uint8_t pkt[32];
	msgbuf_t m[2];
	tb_mold_req_t r;
	struct sockaddr_in from;

	(void)state;
	fx_open(50000000ull, 5, NULL);
	tb_mold_write_ctl(pkt, SESSION, 1, 0);
	send_raw(pkt, 20);
	poll_for(20);
	assert_int_equal(stats().heartbeats, 1);
	assert_int_equal(stats().gaps, 0);
	tb_mold_write_ctl(pkt, SESSION, 3, TB_MOLD_COUNT_END);
	send_raw(pkt, 20);
	assert_true(read_request(&r, &from));
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.count, 2);
	assert_false(tb_feed_ended(fx.f));
	m[0] = m_dir(1, "A");
	m[1] = m_dir(2, "B");
	send_pkt(SESSION, 1, m, 2);
	want_next = 3;
	assert_true(poll_until(next_is));
	assert_true(tb_feed_ended(fx.f));
	assert_int_equal(stats().end_seq, 3);
	fx_close();
}

/* ------------------------------------------------------- lines A and B */

/* No request reaches the retransmission socket within `ms`. */
static void no_request_for(int ms)
{
	uint8_t buf[64];

	poll_for(ms);
	assert_true(recv(fx.rs, buf, sizeof(buf), MSG_DONTWAIT) < 0);
}

/* The messages 1..4 of test_in_order, two to a packet. */
static void four(msgbuf_t m[4])
{
	m[0] = m_dir(3, "ABC");
	m[1] = m_add(3, 10, 'B', 1000000, 300);
	m[2] = m_add(3, 11, 'S', 1010000, 200);
	m[3] = m_exec(3, 10, 100);
}

/* The first copy of each packet is taken, whichever line brings it; the
 * second is dropped whole and counted against its line, with how late it
 * came.  Every message is applied once, in order (the applied callback
 * says so). */
static void test_ab_first_copy_wins(void **state)
{
	msgbuf_t m[4];
	tb_feed_stats_t st;

	(void)state;
	fx_open_lines(20000000ull, 3, SESSION, 1000000000ull, 10000000000ull);
	four(m);
	send_pkt_to(fx.port, SESSION, 1, m, 2);       /* A first */
	want_next = 3;
	assert_true(poll_until(next_is));
	usleep(2000);
	send_pkt_to(fx.port_b, SESSION, 1, m, 2);     /* B's copy, 2 ms on */
	send_pkt_to(fx.port_b, SESSION, 3, m + 2, 2); /* B first */
	want_next = 5;
	assert_true(poll_until(next_is));
	send_pkt_to(fx.port, SESSION, 3, m + 2, 2);   /* A's copy */
	poll_for(20);
	st = stats();
	assert_int_equal(st.lines, 2);
	assert_int_equal(st.next_seq, 5);
	assert_int_equal(st.messages, 4);
	assert_int_equal(st.duplicates, 4);
	assert_int_equal(st.line[0].packets, 2);
	assert_int_equal(st.line[1].packets, 2);
	assert_int_equal(st.line[0].won, 2);
	assert_int_equal(st.line[1].won, 2);
	assert_int_equal(st.line[0].lost, 2);
	assert_int_equal(st.line[1].lost, 2);
	assert_int_equal(st.line[1].late_packets, 1);
	assert_true(st.line[1].late_ns_max >= 1000000);  /* 2 ms, give or take */
	assert_true(st.line[1].late_ns_sum == st.line[1].late_ns_max);
	assert_int_equal(st.requests, 0);
	/* Each message's events once: 2 level adds, 3 tops, 1 trade. */
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_TOP), 3);
	assert_int_equal(count_kind(TB_FEED_EV_BOOK, TB_BOOK_EV_TRADE), 1);
	assert_int_equal(fx.napplied, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(fx.applied[i], (uint64_t)i + 1);
	fx_close();
}

/* A hole on A that B fills is never re-requested, however long B takes
 * within ab_wait. */
static void test_ab_hole_filled_by_the_other_line(void **state)
{
	msgbuf_t m[4];
	tb_feed_stats_t st;

	(void)state;
	fx_open_lines(20000000ull, 3, SESSION, 2000000000ull, 10000000000ull);
	four(m);
	send_pkt_to(fx.port, SESSION, 1, m, 1);
	send_pkt_to(fx.port_b, SESSION, 1, m, 1);
	send_pkt_to(fx.port, SESSION, 3, m + 2, 2);   /* A lost 2 */
	no_request_for(100);
	assert_int_equal(stats().next_seq, 2);
	send_pkt_to(fx.port_b, SESSION, 2, m + 1, 1); /* B had it */
	want_next = 5;
	assert_true(poll_until(next_is));
	no_request_for(50);
	st = stats();
	assert_int_equal(st.requests, 0);
	assert_int_equal(st.requested_new, 0);
	assert_int_equal(st.gaps, 0);
	assert_int_equal(st.line[0].won, 3);          /* 1, 3 and 4 */
	assert_int_equal(st.line[1].won, 1);          /* 2 */
	fx_close();
}

/* Both lines went past the hole: it is re-requested at once (ab_wait is
 * 10 s here), exactly what both lost. */
static void test_ab_hole_both_lost_is_requested_at_once(void **state)
{
	msgbuf_t m[4];
	tb_mold_req_t r;
	struct sockaddr_in from;
	uint64_t t0;
	uint8_t pkt[TB_MOLD_MAX_PKT];
	tb_mold_builder_t b;

	(void)state;
	fx_open_lines(20000000ull, 3, SESSION, 10000000000ull, 20000000000ull);
	four(m);
	t0 = tb_clock_now_ns();
	send_pkt_to(fx.port, SESSION, 1, m, 1);
	send_pkt_to(fx.port, SESSION, 3, m + 2, 2);
	send_pkt_to(fx.port_b, SESSION, 1, m, 1);
	send_pkt_to(fx.port_b, SESSION, 3, m + 2, 2);
	assert_true(read_request(&r, &from));
	assert_true(tb_clock_now_ns() - t0 < 5000000000ull);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.count, 1);
	/* Answer it: the feed goes on to 4. */
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 2);
	tb_mold_build_add(&b, m[1].b, (size_t)m[1].n);
	sendto(fx.rs, pkt, tb_mold_build_end(&b), 0, (struct sockaddr *)&from,
	       sizeof(from));
	want_next = 5;
	assert_true(poll_until(next_is));
	assert_int_equal(stats().requested_new, 1);
	assert_int_equal(stats().gaps_filled, 1);
	fx_close();
}

/* B brings nothing past the hole: the hole waits ab_wait (200 ms) for it,
 * then is re-requested. */
static void test_ab_hole_waits_for_a_slow_line(void **state)
{
	msgbuf_t m[4];
	tb_mold_req_t r;
	struct sockaddr_in from;

	(void)state;
	fx_open_lines(20000000ull, 3, SESSION, 200000000ull, 10000000000ull);
	four(m);
	send_pkt_to(fx.port, SESSION, 1, m, 1);
	send_pkt_to(fx.port_b, SESSION, 1, m, 1);
	send_pkt_to(fx.port, SESSION, 3, m + 2, 2);
	no_request_for(100);
	assert_true(read_request(&r, &from));
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.count, 1);
	fx_close();
}

/* A line quiet for line_timeout is silent (once), no longer waited for,
 * and back with its next packet. */
static void test_ab_silent_line(void **state)
{
	msgbuf_t m[4];
	tb_feed_stats_t st;
	uint8_t hb[TB_MOLD_HDR_LEN];
	tb_mold_req_t r;
	struct sockaddr_in from;

	(void)state;
	fx_open_lines(20000000ull, 3, SESSION, 5000000000ull, 100000000ull);
	four(m);
	send_pkt_to(fx.port, SESSION, 1, m, 1);
	send_pkt_to(fx.port_b, SESSION, 1, m, 1);
	for (int i = 0; i < 15; i++) {             /* A beats; B says nothing */
		tb_mold_write_ctl(hb, SESSION, 2, 0);
		send_raw(hb, sizeof(hb));
		poll_for(20);
	}
	st = stats();
	assert_int_equal(st.line[0].silent, 0);
	assert_int_equal(st.line[1].silent, 1);
	assert_int_equal(st.line[1].silences, 1);
	/* Silent B is not waited for: a hole on A goes out at once. */
	send_pkt_to(fx.port, SESSION, 3, m + 2, 2);
	assert_true(read_request(&r, &from));
	assert_int_equal(r.seq, 2);
	send_pkt_to(fx.port_b, SESSION, 2, m + 1, 1);
	want_next = 5;
	assert_true(poll_until(next_is));
	st = stats();
	assert_int_equal(st.line[1].silent, 0);
	assert_int_equal(st.line[1].silences, 1);
	fx_close();
}

static void test_open_errors(void **state)
{
	tb_feed_cfg_t c;
	tb_feed_t *f;

	(void)state;
	tb_feed_cfg_init(&c);
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	assert_null(f);
	c.group = "not-an-address";
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	assert_non_null(strstr(tb_md_error_msg(), "not-an-address"));
	c.group = "127.0.0.1";
	c.session = "ELEVENCHARS";
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	assert_non_null(strstr(tb_md_error_msg(), "session"));
	c.session = NULL;
	c.retrans_host = "127.0.0.1";
	c.retrans_port = 0;
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	c.retrans_host = NULL;
	c.pending_max = 0;
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	tb_feed_cfg_init(&c);
	c.group = "127.0.0.1";
	c.max_levels = 0;
	assert_int_equal(tb_feed_open(&f, &c), TB_EINVAL);
	assert_non_null(strstr(tb_md_error_msg(), "feed: book"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_order),
		cmocka_unit_test(test_gap_filled),
		cmocka_unit_test(test_gap_partial_answer),
		cmocka_unit_test(test_gap_given_up),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_heartbeat_and_end),
		cmocka_unit_test(test_ab_first_copy_wins),
		cmocka_unit_test(test_ab_hole_filled_by_the_other_line),
		cmocka_unit_test(test_ab_hole_both_lost_is_requested_at_once),
		cmocka_unit_test(test_ab_hole_waits_for_a_slow_line),
		cmocka_unit_test(test_ab_silent_line),
		cmocka_unit_test(test_open_errors),
	};

	tb_clock_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
