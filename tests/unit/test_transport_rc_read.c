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
 * round).  The work requests posted are recorded by wrapping the device
 * context's post_send (the test defines ibv_open_device, which the static
 * library binds to, and calls the real one).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/rc.h"
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

static int counting_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad)
{
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		n_reads += w->opcode == IBV_WR_RDMA_READ;
	return real_post_send(qp, wr, bad);
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

static void rig_open(rig_t *t)
{
	uint8_t msg[64] = {0};
	tb_stream_cfg_t c;

	memset(t, 0, sizeof(*t));
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
