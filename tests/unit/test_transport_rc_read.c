/*
 * An rc subscriber's read-back, seen from its poll: which poll delivers
 * what.  A real publisher and a real subscriber in one process, on
 * softrdma; the publisher skips the subscriber for exactly G frames (the
 * subscriber's receives run out: it does not poll while 2,048 + G frames
 * are published), then writes one more, behind an anchor.  The subscriber
 * reads the G back itself with RDMA READ (transport/rc.h, "Reading back").
 *
 * What is asserted, round after round: every sequence comes once, in
 * order, the G read back (TB_MSG_F_REPLAY) and only those; the poll that
 * delivers the last of them delivers the live frame after them too (it is
 * in hand: no reason to leave it to a later poll, which the caller's idle
 * strategy may put off); and the poll that finds the gap and posts the
 * READs waits for them and delivers the gap and the live frame itself,
 * whatever the caller does between polls.  That last one depends on the
 * READ landing within the subscriber's wait (10 us): softrdma's engine
 * runs in the polling thread's own ibv_poll_cq, but a loaded machine can
 * take the core away, so it is asserted for at least one round in
 * ROUNDS, not for each (a subscriber that never waits fails it every
 * round).
 *
 * And a read-back that outlasts its poll (its READs held back by the
 * test) while another copy of the stream delivers part of the gap
 * (subscriber/sources.c shares one tracker between copies and sets each
 * copy's before its poll): what the other copy delivered is not delivered
 * again.  That one drives the rc transport's own poll (tb_rc_rx_ops),
 * as sources.c does.
 *
 * The work requests posted are counted, and held back when asked, by
 * wrapping the device context's post_send (the test defines
 * ibv_open_device, which the static library binds to, and calls the real
 * one).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/seq.h"
#include "bus/transport/rc.h"
#include "bus/transport/transport.h"
#include "tests/common/proc.h"
#include <tickbus/tickbus.h>

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 10
#define GAP 5
#define STREAM 12

/* ------------------------------------------- the READs tickbus posts */

static int n_reads;  /* RDMA READ work requests posted, all QPs */
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);

/* While hold_reads is set, a post of READs is kept here, not posted (the
 * poster is told it went), until held_release: a READ that takes long. */
static int hold_reads;
static struct ibv_qp *held_qp;
static struct ibv_send_wr held_wr[4];
static struct ibv_sge held_sge[4];
static int n_held;

static int counting_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad)
{
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		n_reads += w->opcode == IBV_WR_RDMA_READ;
	if (hold_reads && wr->opcode == IBV_WR_RDMA_READ) {
		assert_int_equal(n_held, 0);
		for (struct ibv_send_wr *w = wr; w; w = w->next) {
			assert_true(n_held < 4);
			assert_int_equal(w->num_sge, 1);
			held_sge[n_held] = w->sg_list[0];
			held_wr[n_held] = *w;
			held_wr[n_held].sg_list = &held_sge[n_held];
			held_wr[n_held].next = NULL;
			if (n_held)
				held_wr[n_held - 1].next = &held_wr[n_held];
			n_held++;
		}
		held_qp = qp;
		return 0;
	}
	return real_post_send(qp, wr, bad);
}

static void held_release(void)
{
	struct ibv_send_wr *bad;

	assert_true(n_held > 0);
	assert_int_equal(real_post_send(held_qp, held_wr, &bad), 0);
	n_held = 0;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	static struct ibv_context *(*real)(struct ibv_device *);
	struct ibv_context *ctx;

	if (!real)
		real = (struct ibv_context * (*)(struct ibv_device *))
			dlvsym(RTLD_NEXT, "ibv_open_device", "IBVERBS_1.1");
	ctx = real(dev);
	if (ctx) {
		real_post_send = ctx->ops.post_send;
		ctx->ops.post_send = counting_post_send;
	}
	return ctx;
}

/* -------------------------------------------------------- the stream */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* What the subscriber delivered: each sequence's poll and flags. */
typedef struct got {
	uint64_t last;       /* the last sequence */
	int order_errors;
	int poll;            /* the poll under way (numbered by the test) */
	int replayed;        /* TB_MSG_F_REPLAY, in the round */
	int last_replay_poll; /* the poll that delivered the last of them */
	uint64_t live;       /* the round's live frame ... */
	int live_poll;       /* ... and its poll; 0: not yet */
} got_t;

static void on_msg(void *clientd, const tb_msg_t *m)
{
	got_t *g = clientd;

	g->order_errors += g->last && m->seq != g->last + 1;
	g->last = m->seq;
	if (m->flags & TB_MSG_F_REPLAY) {
		g->replayed++;
		g->last_replay_poll = g->poll;
	}
	if (m->seq == g->live)
		g->live_poll = g->poll;
}

/* Polls until `seq` is delivered, then on for `idle` empty polls (credit
 * goes back on idle polls), for 5 s at most. */
static void drain_to(tb_subscriber_t *sub, got_t *g, uint64_t seq, int idle)
{
	uint64_t until = now_ms() + 5000;
	int quiet = 0;

	while (g->last < seq || quiet < idle) {
		int rc;

		g->poll++;
		rc = tb_sub_poll(sub, on_msg, g, 256);
		assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
		quiet = rc == 0 && g->last >= seq ? quiet + 1 : 0;
		assert_true(now_ms() < until);
	}
}

typedef struct rig {
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	got_t g;
	uint64_t seq;        /* the last published */
} rig_t;

static void rig_cfg(tb_stream_cfg_t *cp)
{
	tb_stream_cfg_t c;

	tb_stream_cfg_init(&c);
	snprintf(c.name, sizeof(c.name), "rcread");
	c.id = STREAM;
	c.transport = TB_TRANSPORT_RC;
	c.ring_size = 1 << 20;   /* TB_RC_RECV_DEPTH frames fit: receives
				  * run out first, not room */
	c.slow_consumer = TB_SLOW_LAP;
	c.heartbeat_ms = 2000;   /* a heartbeat names a skipped range: rare */
	c.liveness_timeout_ms = 20000;
	snprintf(c.token, sizeof(c.token), "rcread");
	snprintf(c.control.host, sizeof(c.control.host), "127.0.0.1");
	c.control.port = (uint16_t)proc_free_port();
	*cp = c;
}

static void rig_open(rig_t *t)
{
	uint8_t msg[64] = {0};
	tb_stream_cfg_t c;

	memset(t, 0, sizeof(*t));
	rig_cfg(&c);
	assert_int_equal(tb_publisher_open(&t->pub, &c), 0);
	assert_int_equal(tb_subscriber_open(&t->sub, &c), 0);
	/* Joined: frames arrive. */
	for (uint64_t until = now_ms() + 20000; t->g.last == 0;) {
		t->seq = (uint64_t)tb_pub_offer(t->pub, 1, msg, sizeof(msg));
		usleep(1000);
		while (tb_sub_poll(t->sub, on_msg, &t->g, 256) > 0)
			;
		assert_true(now_ms() < until);
	}
}

static void rig_close(rig_t *t)
{
	tb_subscriber_close(t->sub);
	tb_publisher_close(t->pub);
}

/* One round: the publisher skips exactly GAP frames, then writes the live
 * one; polls until it is delivered.  Returns whether the poll that posted
 * the READs delivered it, or -1 when the round did not make the gap (a
 * heartbeat named the skipped range first, and it was read back then). */
static int one_gap(rig_t *t)
{
	uint8_t msg[64] = {0};
	int reads, post_poll = 0, rc;
	uint64_t until;

	drain_to(t->sub, &t->g, t->seq, 300);
	usleep(2000);   /* the last credit lands */
	for (int i = 0; i < (int)TB_RC_RECV_DEPTH + GAP; i++)
		t->seq = (uint64_t)tb_pub_offer(t->pub, 1, msg, sizeof(msg));
	t->g.replayed = 0;
	drain_to(t->sub, &t->g, t->seq - GAP, 300);
	if (t->g.replayed) {
		drain_to(t->sub, &t->g, t->seq, 300);
		return -1;
	}
	usleep(2000);
	t->g.live = t->seq = (uint64_t)tb_pub_offer(t->pub, 1, msg, sizeof(msg));
	t->g.live_poll = 0;
	usleep(1000);   /* it lands */
	until = now_ms() + 5000;
	while (!t->g.live_poll) {
		reads = n_reads;
		t->g.poll++;
		rc = tb_sub_poll(t->sub, on_msg, &t->g, 256);
		assert_true(rc >= 0);
		if (n_reads != reads && !post_poll)
			post_poll = t->g.poll;
		assert_true(now_ms() < until);
	}
	/* The gap, read back, and the live frame, in order. */
	assert_int_equal(t->g.order_errors, 0);
	assert_int_equal(t->g.last, t->seq);
	assert_int_equal(t->g.replayed, GAP);
	assert_true(post_poll != 0);
	/* The poll that delivered the last frame read back delivered the
	 * live one after it. */
	assert_int_equal(t->g.live_poll, t->g.last_replay_poll);
	return t->g.live_poll == post_poll;
}

/* ------------------------------------- the transport's poll, bare */

typedef struct bare {
	tb_publisher_t *pub;
	tb_rx_t *rx;
	tb_seq_t seq;        /* the tracker, ours (sources.c's, shared) */
	tb_seq_range_t loss;
	got_t g;
	uint64_t pub_seq;    /* the last published */
} bare_t;

static int bare_poll(bare_t *b)
{
	int rc;

	b->g.poll++;
	rc = b->rx->ops->poll(b->rx, &b->seq, &b->loss, on_msg, &b->g, 256);
	assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
	return rc;
}

static void bare_drain_to(bare_t *b, uint64_t seq, int idle)
{
	uint64_t until = now_ms() + 5000;
	int quiet = 0;

	while (b->g.last < seq || quiet < idle) {
		int rc = bare_poll(b);

		quiet = rc == 0 && b->g.last >= seq ? quiet + 1 : 0;
		assert_true(now_ms() < until);
	}
}

/* A read-back collected a poll later than it was posted, after another
 * copy of the stream delivered the first 3 of its 5 frames: the other 2
 * come read back, then the live frame, each once, in order. */
static void a_read_back_skips_what_another_copy_delivered(void **state)
{
	uint8_t msg[64] = {0};
	tb_stream_cfg_t c;
	uint64_t first, until;
	bare_t b;

	(void)state;
	memset(&b, 0, sizeof(b));
	tb_seq_init(&b.seq, 0);
	rig_cfg(&c);
	assert_int_equal(tb_publisher_open(&b.pub, &c), 0);
	assert_int_equal(tb_rc_rx_ops.open(&b.rx, &c), 0);
	for (until = now_ms() + 20000; b.g.last == 0;) {
		b.pub_seq = (uint64_t)tb_pub_offer(b.pub, 1, msg, sizeof(msg));
		usleep(1000);
		while (bare_poll(&b) > 0)
			;
		assert_true(now_ms() < until);
	}
	/* Skipped for GAP, as in one_gap. */
	bare_drain_to(&b, b.pub_seq, 300);
	usleep(2000);
	for (int i = 0; i < (int)TB_RC_RECV_DEPTH + GAP; i++)
		b.pub_seq = (uint64_t)tb_pub_offer(b.pub, 1, msg, sizeof(msg));
	bare_drain_to(&b, b.pub_seq - GAP, 300);
	assert_int_equal(b.g.replayed, 0);
	first = b.pub_seq - GAP + 1;
	/* The live frame; the poll that finds the gap posts the READs,
	 * which the test holds, and waits for them in vain. */
	hold_reads = 1;
	usleep(2000);
	b.g.live = b.pub_seq = (uint64_t)tb_pub_offer(b.pub, 1, msg, sizeof(msg));
	usleep(1000);
	for (until = now_ms() + 5000; !n_held;) {
		assert_int_equal(bare_poll(&b), 0);
		assert_true(now_ms() < until);
	}
	hold_reads = 0;
	assert_int_equal(b.g.last, first - 1);
	/* Another copy delivers first .. first + 2, and sets our tracker
	 * past them, as sources.c does before it polls us. */
	b.seq.expected = first + 3;
	b.g.last = first + 2;
	held_release();
	until = now_ms() + 5000;
	while (!b.g.live_poll) {
		bare_poll(&b);
		assert_true(now_ms() < until);
	}
	assert_int_equal(b.g.order_errors, 0);
	assert_int_equal(b.g.replayed, GAP - 3);
	assert_int_equal(b.g.last, b.pub_seq);
	assert_int_equal(b.seq.expected, b.pub_seq + 1);
	b.rx->ops->close(b.rx);
	tb_publisher_close(b.pub);
}

/* The gap read back and the frame after it come together, in the poll
 * that posts the READs whenever they land within its wait (at least one
 * round in ROUNDS: see the top of the file). */
static void a_gap_and_the_frame_after_it_come_in_one_poll(void **state)
{
	rig_t t;
	int same = 0, rounds = 0;

	(void)state;
	rig_open(&t);
	for (int i = 0; i < 3 * ROUNDS && rounds < ROUNDS; i++) {
		int k = one_gap(&t);

		if (k >= 0) {
			same += k;
			rounds++;
		}
	}
	assert_int_equal(rounds, ROUNDS);
	print_message("read back in the poll that found the gap: %d of %d rounds\n",
		      same, ROUNDS);
	assert_true(same >= 1);
	rig_close(&t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_gap_and_the_frame_after_it_come_in_one_poll),
		cmocka_unit_test(a_read_back_skips_what_another_copy_delivered),
	};

	(void)argc;
	(void)argv;
	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-rcread-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	setenv("TICKBUS_QUIET", "1", 0);
	if (getenv("TB_CMOCKA_FILTER"))
		cmocka_set_test_filter(getenv("TB_CMOCKA_FILTER"));
	return cmocka_run_group_tests_name("transport_rc_read", tests, NULL, NULL);
}
