/*
 * A burst that loses its tail, then silence, on ud and on udp: the
 * subscriber must be told the exact range within one heartbeat of the
 * burst's end, although nothing more is published.
 *
 * Two processes: the publisher (a child) bursts N messages as fast as it
 * can and then stays open and quiet (its heartbeat thread still beating);
 * the subscriber (this process) does not poll during the burst, so its
 * receive buffers overflow and the burst's tail is lost where a real one
 * would be: the ud receive queue (recv_depth buffers, the rest find no
 * receive posted) or the udp socket buffer (rcvbuf).  Then it polls: the
 * head is delivered, and the tail must come back as one TB_GAP naming
 * exactly [head + 1, N], at most heartbeat_ms (plus scheduling slack on a
 * shared machine) after the subscriber could hear again.  On a loaded
 * machine the tail may come back as more than one TB_GAP: a beat that
 * named the publisher's position a moment before the burst ended, or
 * datagrams still in flight when the subscriber polled again, split it.
 * Then the gaps must follow each other exactly, and each must be told
 * within a heartbeat of the one before.  The subscriber starts polling
 * DRAIN_MS after the burst ended (so that the whole burst has been sent:
 * a NIC, and softrdma's send engine, send after the post returns), and a
 * heartbeat that reaches it before, while its buffers are still full, is
 * lost like the tail.  Times by the clock both processes read
 * (tb_clock_now_ns).  A quiet stream without loss reports nothing.  Then
 * the publisher closes and the subscriber sees TB_CLOSED.
 *
 * ud runs on softrdma (a private fabric), udp on loopback.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BURST 3000
#define HEARTBEAT_MS 200
/* Beyond one heartbeat: the ud beat's settle time (1 ms) and a loaded
 * 2-core machine's scheduling; below the second heartbeat after the burst
 * (2 * HEARTBEAT_MS), so only the first one can have told it.  On a
 * machine so loaded that a process waits longer than that for a core,
 * rerun the test alone before believing a failure. */
#define SLACK_MS 150
#define QUIET_MS 1500
/* The subscriber's wait after the last offer before it polls: the burst's
 * datagrams have all been sent by then (well within a heartbeat). */
#define DRAIN_MS 50

static void cfg_for(tb_stream_cfg_t *c, tb_transport_t t, int lossy)
{
	unsigned p = (unsigned)getpid();

	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "quiet-%s",
		 t == TB_TRANSPORT_UD ? "ud" : "udp");
	c->id = 88;
	c->transport = t;
	c->ring_size = 8 << 20;
	c->heartbeat_ms = HEARTBEAT_MS;
	c->liveness_timeout_ms = 10000;
	snprintf(c->token, sizeof(c->token), "quiet-loss-token");
	snprintf(c->group.host, sizeof(c->group.host), "239.196.%u.%u",
		 (p >> 8) & 0xff, (p & 0xff) | 1);
	c->group.port = (uint16_t)(20000 + p % 12000);
	if (t == TB_TRANSPORT_UDP) {
		snprintf(c->interface, sizeof(c->interface), "127.0.0.1");
		/* Small enough that a burst of 3000 overflows it. */
		c->rcvbuf = lossy ? 64 << 10 : 16 << 20;
	} else {
		c->recv_depth = lossy ? 256 : 4096;
	}
}

/* The publisher: opens, says so, waits for "go", bursts `n` messages (or
 * paces them when not lossy), sends the time of its last offer, stays
 * quiet, closes. */
static void publisher(const tb_stream_cfg_t *cfg, int n, int paced, int to_parent,
		      int from_parent)
{
	tb_publisher_t *pub;
	uint8_t msg[64];
	uint64_t t_end;
	char c;

	alarm(60);
	if (tb_publisher_open(&pub, cfg) < 0) {
		fprintf(stderr, "publisher: %s\n", tb_errmsg());
		_exit(1);
	}
	if (write(to_parent, "o", 1) != 1 || read(from_parent, &c, 1) != 1)
		_exit(1);
	memset(msg, 0x42, sizeof(msg));
	for (int i = 0; i < n; i++) {
		if (tb_pub_offer(pub, 1, msg, sizeof(msg)) < 0)
			_exit(2);
		if (paced && i % 50 == 49)
			usleep(1000);
	}
	t_end = tb_clock_now_ns();
	if (write(to_parent, &t_end, sizeof(t_end)) != sizeof(t_end))
		_exit(1);
	usleep(QUIET_MS * 1000);
	tb_publisher_close(pub);
	_exit(0);
}

/* What the subscriber saw: each message must be the next one, the one
 * after the last message or the last gap named. */
struct tally {
	uint64_t delivered, next;
	int bad;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct tally *t = clientd;

	if (m->seq != t->next)
		t->bad++;
	t->next = m->seq + 1;
	t->delivered++;
}

#define MAX_GAPS 8

struct outcome {
	uint64_t delivered, next;
	int gaps, closed, other, bad;
	uint64_t first[MAX_GAPS], last[MAX_GAPS];
	double gap_ms[MAX_GAPS]; /* from polling again to each TB_GAP */
	double end_ms;           /* from the burst's end to the first TB_GAP */
};

static void run(tb_transport_t t, int lossy, struct outcome *o)
{
	int to_child[2], to_parent[2];
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct tally tally = {0, 1, 0};
	tb_idle_t idle;
	uint64_t t_end, t_resume, until;
	pid_t pid;
	char c;
	int st;

	memset(o, 0, sizeof(*o));
	cfg_for(&cfg, t, lossy);
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(to_parent), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		publisher(&cfg, BURST, !lossy, to_parent[1], to_child[0]);
	}
	close(to_child[0]);
	close(to_parent[1]);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(read(to_parent[0], &c, 1), 1);
	/* Until the burst has ended, and what it sent has arrived or been
	 * lost (a NIC, and softrdma's send engine, send after the post
	 * returns), nothing is polled. */
	assert_int_equal(write(to_child[1], "g", 1), 1);
	assert_int_equal(read(to_parent[0], &t_end, sizeof(t_end)),
			 (ssize_t)sizeof(t_end));
	usleep(DRAIN_MS * 1000);
	t_resume = tb_clock_now_ns();
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	until = tb_clock_mono_ms() + 20000;
	while (!o->closed && tb_clock_mono_ms() < until) {
		int n = tb_sub_poll(sub, on_msg, &tally, 256);

		if (n == TB_GAP) {
			uint64_t first, last, now = tb_clock_now_ns();

			assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
			if (first != tally.next)
				tally.bad++;
			tally.next = last + 1;
			if (o->gaps == 0)
				o->end_ms = (double)(now - t_end) / 1e6;
			if (o->gaps < MAX_GAPS) {
				o->first[o->gaps] = first;
				o->last[o->gaps] = last;
				o->gap_ms[o->gaps] = (double)(now - t_resume) / 1e6;
			}
			o->gaps++;
		} else if (n == TB_CLOSED) {
			o->closed = 1;
		} else if (n < 0 && n != TB_NOT_CONNECTED) {
			o->other++;
			print_message("unexpected: %s\n", tb_strerror(n));
		}
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	o->delivered = tally.delivered;
	o->next = tally.next;
	o->bad = tally.bad;
	tb_subscriber_close(sub);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(to_child[1]);
	close(to_parent[0]);
}

static void tail_lost_then_quiet(tb_transport_t t)
{
	struct outcome o;

	run(t, 1, &o);
	for (int i = 0; i < o.gaps && i < MAX_GAPS; i++)
		print_message("%s: gap %" PRIu64 "-%" PRIu64 " told %.1f ms after "
			      "the subscriber polled again\n",
			      t == TB_TRANSPORT_UD ? "ud" : "udp", o.first[i],
			      o.last[i], o.gap_ms[i]);
	print_message("%s: delivered %" PRIu64 " of %d, first gap %.1f ms after "
		      "the burst ended (heartbeat %d ms)\n",
		      t == TB_TRANSPORT_UD ? "ud" : "udp", o.delivered, BURST,
		      o.end_ms, HEARTBEAT_MS);
	/* Some head arrived, the tail did not. */
	assert_true(o.delivered > 0 && o.delivered < BURST);
	/* Every message in order, each gap starting where the stream had got
	 * to, and all of 1..BURST either delivered or named. */
	assert_int_equal(o.bad, 0);
	assert_int_equal(o.next, BURST + 1);
	/* The tail named exactly: most often one gap; each within one
	 * heartbeat of the subscriber hearing again or of the gap before. */
	assert_true(o.gaps >= 1 && o.gaps <= MAX_GAPS);
	assert_int_equal(o.last[o.gaps - 1], BURST);
	assert_true(o.gap_ms[0] >= 0);
	assert_true(o.gap_ms[0] <= HEARTBEAT_MS + SLACK_MS);
	for (int i = 1; i < o.gaps; i++)
		assert_true(o.gap_ms[i] - o.gap_ms[i - 1] <=
			    HEARTBEAT_MS + SLACK_MS);
	assert_true(o.end_ms <= DRAIN_MS + HEARTBEAT_MS + SLACK_MS);
	assert_int_equal(o.other, 0);
	assert_int_equal(o.closed, 1);
}

static void quiet_without_loss_reports_nothing(tb_transport_t t)
{
	struct outcome o;

	run(t, 0, &o);
	assert_int_equal(o.delivered, BURST);
	assert_int_equal(o.bad, 0);
	assert_int_equal(o.gaps, 0);
	assert_int_equal(o.other, 0);
	assert_int_equal(o.closed, 1);
}

static void ud_tail_lost_then_quiet(void **state)
{
	(void)state;
	tail_lost_then_quiet(TB_TRANSPORT_UD);
}

static void udp_tail_lost_then_quiet(void **state)
{
	(void)state;
	tail_lost_then_quiet(TB_TRANSPORT_UDP);
}

static void ud_quiet_without_loss(void **state)
{
	(void)state;
	quiet_without_loss_reports_nothing(TB_TRANSPORT_UD);
}

static void udp_quiet_without_loss(void **state)
{
	(void)state;
	quiet_without_loss_reports_nothing(TB_TRANSPORT_UDP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ud_tail_lost_then_quiet),
		cmocka_unit_test(udp_tail_lost_then_quiet),
		cmocka_unit_test(ud_quiet_without_loss),
		cmocka_unit_test(udp_quiet_without_loss),
	};

	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-quiet-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	setenv("TICKBUS_QUIET", "1", 0);
	return cmocka_run_group_tests_name("dgram_quiet_loss", tests, NULL, NULL);
}
