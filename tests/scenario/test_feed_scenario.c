/*
 * test_feed_scenario.c - the feed path end to end with the real programs:
 * tb-feedsim sends a MoldUDP64/ITCH feed over UDP multicast, tb-feedcheck
 * reads it with the feed-handler core (tools/md/feed.c), and the books
 * must match the simulator's own at the end; with loss injected the gaps
 * must be re-requested and filled; without a retransmission server they
 * must be given up and the instruments reported stale; malformed packets
 * are counted and dropped; the feed is a function of its seed; tb-gateway
 * acks orders with their arrival time.  With lines A and B, each losing 5%
 * of its packets independently, only what both lost is re-requested: about
 * the product of the two rates, within a statistical bound; a line that
 * falls silent is reported and the other carries the feed alone.
 *
 * Network: the test moves itself into a network namespace of its own
 * (unshare), brings its loopback up with multicast and a 224.0.0.0/4 route,
 * and every program it starts inherits that namespace; nothing outside is
 * touched, and the namespace goes away with the last process.  Without the
 * privilege to do so the test skips (exit 77).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus/clock.h"
#include "tests/common/scenario.h"
#include <tickbus/tickbus.h>
#include "tools/md/gw.h"
#include "tools/md/mold.h"

#define GROUP "239.194.7.1"
#define GROUP_B "239.194.7.2"
#define PORT 31001
#define RPORT 31002
#define NINST 6
#define SESSION "TBTEST0001"

static char tmpdir[128];

typedef struct run {
	char sim_out[256], chk_out[256];
	char *sim, *chk;
	int sim_rc, chk_rc;
} run_t;

/* Runs tb-feedcheck (extra args `cargs`) against tb-feedsim (extra args
 * `sargs`), both NULL-terminated; ends the simulator's end-of-session phase
 * with SIGTERM once the checker is done. */
static void run_feed(run_t *r, const char *name, char *const sargs[],
		     char *const cargs[])
{
	char *sargv[40], *cargv[40];
	int n = 0, m = 0;
	proc_t sim, chk;

	snprintf(r->sim_out, sizeof(r->sim_out), "%s/%s.sim", tmpdir, name);
	snprintf(r->chk_out, sizeof(r->chk_out), "%s/%s.chk", tmpdir, name);
	cargv[m++] = "tb-feedcheck";
	cargv[m++] = "--session";
	cargv[m++] = SESSION;
	cargv[m++] = "--timeout-ms";
	cargv[m++] = "120000";
	for (; cargs && *cargs; cargs++)
		cargv[m++] = *cargs;
	cargv[m] = NULL;
	sargv[n++] = "tb-feedsim";
	sargv[n++] = "--iface";
	sargv[n++] = "127.0.0.1";
	sargv[n++] = "--session";
	sargv[n++] = SESSION;
	sargv[n++] = "-N";
	sargv[n++] = "6";
	sargv[n++] = "--end-ms";
	sargv[n++] = "150000";
	for (; sargs && *sargs; sargs++)
		sargv[n++] = *sargs;
	sargv[n] = NULL;

	assert_int_equal(proc_start(&chk, r->chk_out, cargv), 0);
	assert_int_equal(proc_wait_output(&chk, "ready", 30000), 0);
	assert_int_equal(proc_start(&sim, r->sim_out, sargv), 0);
	r->chk_rc = proc_wait(&chk, 180000);
	kill(sim.pid, SIGTERM);
	r->sim_rc = proc_wait(&sim, 30000);
	r->sim = proc_output(&sim);
	r->chk = proc_output(&chk);
	fprintf(stderr, "%s: %s%s", name, r->sim, r->chk);
	assert_int_equal(r->sim_rc, 0);
}

static void run_free(run_t *r)
{
	free(r->sim);
	free(r->chk);
}

static uint64_t F(const char *text, const char *key)
{
	uint64_t v = proc_field_u64(text, key);

	if (v == UINT64_MAX)
		fail_msg("no %s= in: %s", key, text);
	return v;
}

/* The books match: same order count and order-state checksum. */
static void assert_books_match(const run_t *r)
{
	char a[64], b[64];

	assert_int_equal(F(r->chk, "ended"), 1);
	assert_int_equal(r->chk_rc, 0);
	assert_int_equal(F(r->chk, "orders"), F(r->sim, "orders"));
	assert_int_equal(proc_field(r->sim, "checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(r->chk, "checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_true(F(r->sim, "orders") > 0);
	assert_int_equal(F(r->chk, "top_mismatch"), 0);
	assert_int_equal(F(r->chk, "recv_zero"), 0);
	assert_int_equal(F(r->chk, "book_errors"), 0);
	assert_int_equal(F(r->chk, "instrument_events"), NINST);
	assert_true(F(r->chk, "book_events") > F(r->sim, "last_seq"));
	/* Every book event had its receive-to-event time recorded. */
	assert_int_equal(F(r->chk, "recv_to_event_count"), F(r->chk, "book_events"));
}

/* ------------------------------------------------------------- tests */

static void test_no_loss(void **state)
{
	char *sargs[] = { "-n", "20000", "-r", "20000", "--start-delay-ms", "300",
			  "-s", "11", NULL };
	run_t r;

	(void)state;
	run_feed(&r, "noloss", sargs, NULL);
	assert_books_match(&r);
	/* Every sequence arrived once, in order, none re-requested. */
	assert_int_equal(F(r.chk, "messages"), F(r.sim, "last_seq"));
	assert_int_equal(F(r.chk, "next_seq"), F(r.sim, "last_seq") + 1);
	assert_int_equal(F(r.chk, "end_seq"), F(r.sim, "last_seq") + 1);
	assert_int_equal(F(r.chk, "duplicates"), 0);
	assert_int_equal(F(r.chk, "gaps"), 0);
	assert_int_equal(F(r.chk, "requests"), 0);
	assert_int_equal(F(r.sim, "requests"), 0);
	assert_int_equal(F(r.chk, "malformed_packets"), 0);
	assert_int_equal(F(r.chk, "system_events"), 4);
	/* Heartbeats during the start delay were seen. */
	assert_true(F(r.chk, "heartbeats") > 0);
	run_free(&r);
}

static void test_loss_recovered(void **state)
{
	char *sargs[] = { "-n", "30000", "-r", "40000", "--drop", "0.05",
			  "--burst-every", "5000", "--burst-len", "1000",
			  "-s", "12", NULL };
	char *cargs[] = { "--gap-timeout-ms", "100", "--gap-retries", "8", NULL };
	run_t r;

	(void)state;
	run_feed(&r, "loss", sargs, cargs);
	assert_true(F(r.sim, "dropped") > 0);
	assert_books_match(&r);
	assert_int_equal(F(r.chk, "messages"), F(r.sim, "last_seq"));
	assert_true(F(r.chk, "gaps") > 0);
	assert_true(F(r.chk, "requests") > 0);
	assert_true(F(r.chk, "retrans_packets") > 0);
	assert_int_equal(F(r.chk, "gaps_lost"), 0);
	assert_int_equal(F(r.chk, "lost_messages"), 0);
	assert_int_equal(F(r.chk, "stale_reports"), 0);
	assert_int_equal(F(r.sim, "bad_requests"), 0);
	assert_true(F(r.sim, "retrans_msgs") > 0);
	run_free(&r);
}

/* Requests go to a port where nobody answers: each gap is retried, then
 * given up, every instrument is reported stale, and the reader still
 * reaches the end of session. */
static void test_loss_unrecoverable(void **state)
{
	char *sargs[] = { "-n", "6000", "-r", "20000", "--drop", "0.02",
			  "-s", "13", NULL };
	char *cargs[] = { "-R", "31999", "--gap-timeout-ms", "10",
			  "--gap-retries", "2", NULL };
	run_t r;

	(void)state;
	run_feed(&r, "unrecoverable", sargs, cargs);
	assert_true(F(r.sim, "dropped") > 0);
	assert_int_equal(r.chk_rc, 0);
	assert_int_equal(F(r.chk, "ended"), 1);
	assert_true(F(r.chk, "gaps_lost") > 0);
	assert_true(F(r.chk, "lost_messages") > 0);
	assert_int_equal(F(r.chk, "gaps_filled"), 0);
	/* One first request and two re-sends per lost gap, at least. */
	assert_true(F(r.chk, "requests") >= 3 * F(r.chk, "gaps_lost"));
	assert_int_equal(F(r.chk, "stale_reports"), NINST * F(r.chk, "gaps_lost"));
	assert_int_equal(F(r.chk, "messages") + F(r.chk, "lost_messages"),
			 F(r.sim, "last_seq"));
	assert_int_equal(F(r.sim, "requests"), 0);
	run_free(&r);
}

/* --duration ends the feed early: whatever was generated is sent, the
 * session ends there, and the books still match. */
static void test_duration(void **state)
{
	char *sargs[] = { "-n", "100000000", "-r", "3000", "-d", "1", "-s", "15",
			  NULL };
	run_t r;

	(void)state;
	run_feed(&r, "duration", sargs, NULL);
	assert_books_match(&r);
	assert_true(F(r.sim, "last_seq") > 100);
	assert_true(F(r.sim, "last_seq") < 1000000);
	assert_int_equal(F(r.chk, "messages"), F(r.sim, "last_seq"));
	/* Cut short: no end-of-market system events, only the opening two. */
	assert_int_equal(F(r.chk, "system_events"), 2);
	run_free(&r);
}

/* ------------------------------------------------------- lines A and B */

/* Lines A and B each drop 5% of data packets, with their own seeds, B a
 * little late (jitter): the books match, every sequence is applied once,
 * and what was re-requested is what both lines lost - about p^2 of the
 * feed, where one line alone would have needed p.  The hole wait is long
 * (500 ms) so that a loaded machine does not turn B's lateness into
 * requests, and what the reader itself had to drop when it fell behind
 * (pending_dropped, whole packets of at most 24 messages) is allowed for:
 * what is measured is the rule, not the machine. */
static void test_ab_lines(void **state)
{
	char *sargs[] = { "-n", "200000", "-r", "50000", "--group-b", GROUP_B,
			  "--drop", "0.05", "--drop-b", "0.05", "--jitter-b-us",
			  "200", "-s", "16", NULL };
	char *cargs[] = { "--group-b", GROUP_B, "--ab-wait-us", "500000",
			  "--line-timeout-ms", "10000", NULL };
	const double p = 0.05;
	double n, both, mean, sd, msgs_per_pkt, want_msgs, sd_msgs, own;
	uint64_t asked;
	run_t r;

	(void)state;
	run_feed(&r, "ab", sargs, cargs);
	assert_books_match(&r);
	assert_int_equal(F(r.chk, "messages"), F(r.sim, "last_seq"));
	assert_int_equal(F(r.chk, "lines"), 2);
	assert_int_equal(F(r.chk, "gaps_lost"), 0);
	/* The simulator's lines lost independently: each about p, both
	 * about p^2 of the data packets (binomial; 5 standard deviations). */
	n = (double)F(r.sim, "data_packets");
	both = (double)F(r.sim, "dropped_both");
	assert_true(fabs((double)F(r.sim, "dropped") - n * p) <= 5 * sqrt(n * p * (1 - p)));
	assert_true(fabs((double)F(r.sim, "dropped_b") - n * p) <= 5 * sqrt(n * p * (1 - p)));
	mean = n * p * p;
	sd = sqrt(n * p * p * (1 - p * p));
	assert_true(fabs(both - mean) <= 5 * sd);
	/* The reader asked for all of that and little else: the messages
	 * both lines lost, at most the odd neighbour a late B copy would
	 * have brought (a request runs to the first packet held), and what
	 * it dropped itself. */
	asked = F(r.chk, "requested_new");
	own = 24.0 * (double)F(r.chk, "pending_dropped");
	assert_true(asked >= F(r.sim, "dropped_both_msgs"));
	assert_true((double)asked <= (double)F(r.sim, "dropped_both_msgs") * 1.3 +
		    50 + own);
	assert_true(F(r.chk, "gaps") <= F(r.sim, "dropped_both") +
		    F(r.chk, "pending_dropped"));
	/* ... which is about p^2 of the messages, not p. */
	msgs_per_pkt = (double)F(r.sim, "last_seq") / n;
	want_msgs = mean * msgs_per_pkt;
	sd_msgs = sd * msgs_per_pkt;
	assert_true((double)asked >= want_msgs - 5 * sd_msgs);
	assert_true((double)asked <= 1.3 * (want_msgs + 5 * sd_msgs) + 50 + own);
	assert_true((double)asked < 0.2 * p * (double)F(r.sim, "last_seq") + own);
	/* Each line won what the other lost, and lost the races it was late
	 * to: every sequence was brought by one of them or re-requested. */
	assert_true(F(r.chk, "a_won") > 0 && F(r.chk, "b_won") > 0);
	assert_true(F(r.chk, "a_won") + F(r.chk, "b_won") +
		    F(r.chk, "requested_new") >= F(r.sim, "last_seq"));
	assert_true(F(r.chk, "a_won") + F(r.chk, "b_won") <= F(r.sim, "last_seq"));
	assert_true(F(r.chk, "b_lost") > F(r.chk, "a_lost"));
	assert_true(F(r.chk, "b_late_packets") > 0);
	assert_int_equal(F(r.chk, "a_silences") + F(r.chk, "b_silences"), 0);
	run_free(&r);
}

/* Line B goes quiet for a stretch of the feed: it is reported silent (a
 * line on stderr, b_silences=1) and back; meanwhile A carries the feed
 * and its own losses are re-requested; the books match. */
static void test_ab_line_silent(void **state)
{
	char *sargs[] = { "-n", "60000", "-r", "60000", "--group-b", GROUP_B,
			  "--drop", "0.01", "--b-silent-from", "20000",
			  "--b-silent-to", "45000", "-s", "17", NULL };
	char *cargs[] = { "--group-b", GROUP_B, "--line-timeout-ms", "300", NULL };
	run_t r;

	(void)state;
	run_feed(&r, "ab-silent", sargs, cargs);
	assert_books_match(&r);
	assert_true(F(r.sim, "silent_b") > 0);
	assert_int_equal(F(r.chk, "b_silences"), 1);
	assert_int_equal(F(r.chk, "a_silences"), 0);
	assert_non_null(strstr(r.chk, "line B silent at sequence"));
	assert_non_null(strstr(r.chk, "line B back at sequence"));
	assert_true(F(r.chk, "requested_new") >= F(r.sim, "dropped_both_msgs"));
	assert_int_equal(F(r.chk, "gaps_lost"), 0);
	run_free(&r);
}

/* Counter `counter` of stream `stream` in tb-stat's JSON `text`, or 0. */
static uint64_t json_counter(const char *text, const char *stream,
			     const char *counter)
{
	char want[128];
	const char *p, *end;

	snprintf(want, sizeof(want), "{\"stream\":\"%s\"", stream);
	p = strstr(text, want);
	if (!p)
		return 0;
	end = strstr(p, "}}");
	snprintf(want, sizeof(want), "\"%s\":", counter);
	p = strstr(p, want);
	if (!p || (end && p > end))
		return 0;
	return strtoull(p + strlen(want), NULL, 10);
}

/* tb-feedhandler on lines A and B: while it runs, tb-stat shows its lines
 * (feed.A and feed.B, kind mold) beside its stream, each with the messages
 * it won; line B falls silent for a stretch, which the handler logs (and
 * counts: an error of feed.B), and comes back; the summary says what each
 * line won and lost. */
static void test_handler_lines(void **state)
{
	char conf[256], cdir[256], fh_out[256], sim_out[256], stat_out[256];
	char *fh, *sim, *stat = NULL;
	/* Line B silent for 1.2 s (messages 40,000 to 100,000 at 50,000/s),
	 * judged silent after 300 ms: far enough apart that a loaded host
	 * pausing the simulator does not pass for a silent line.  Each line
	 * holds its packets back a random 0..100 us, so that either may bring
	 * a message first: without it line A, always sent first, loses only
	 * when the handler happens to read B's socket first, which a busy
	 * host may never do. */
	char *fhv[] = { "tb-feedhandler", "-c", conf, "-s", "md", "--session",
			SESSION, "--group-b", GROUP_B, "--line-timeout-ms", "300",
			"--timeout-ms", "120000", "--linger-ms", "100", NULL };
	char *simv[] = { "tb-feedsim", "--iface", "127.0.0.1", "--session",
			 SESSION, "-N", "6", "-n", "150000", "-r", "50000",
			 "--group-b", GROUP_B, "--drop", "0.02", "--drop-b", "0.02",
			 "--jitter-us", "100", "--jitter-b-us", "100",
			 "--b-silent-from", "40000", "--b-silent-to", "100000",
			 "--end-ms", "150000", "-s", "18", NULL };
	char *statv[] = { "tb-stat", "--once", "--json", "-i", "300", "-d", cdir,
			  NULL };
	proc_t pfh, psim;
	uint64_t until;
	FILE *f;

	(void)state;
	snprintf(conf, sizeof(conf), "%s/lines.ini", tmpdir);
	snprintf(cdir, sizeof(cdir), "%s/counters", tmpdir);
	snprintf(fh_out, sizeof(fh_out), "%s/lines.fh", tmpdir);
	snprintf(sim_out, sizeof(sim_out), "%s/lines.sim", tmpdir);
	snprintf(stat_out, sizeof(stat_out), "%s/lines.stat", tmpdir);
	assert_int_equal(mkdir(cdir, 0755), 0);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "[stream md]\nid = 5\ntransport = shm\n"
		"shm_path = /dev/shm/tb-feed-lines-%d\nring_size = 16M\n",
		(int)getpid());
	fclose(f);
	setenv("TICKBUS_COUNTERS_DIR", cdir, 1);
	assert_int_equal(proc_start(&pfh, fh_out, fhv), 0);
	assert_int_equal(proc_wait_output(&pfh, "ready", 30000), 0);
	assert_int_equal(proc_start(&psim, sim_out, simv), 0);
	/* While it runs: both lines in tb-stat, each having won messages. */
	until = proc_now_ms() + 60000;
	while (proc_now_ms() < until) {
		free(stat);
		assert_int_equal(scenario_run(stat_out, statv, 30000, &stat), 0);
		if (json_counter(stat, "feed.A", "delivered") > 0 &&
		    json_counter(stat, "feed.B", "delivered") > 0)
			break;
	}
	assert_true(json_counter(stat, "feed.A", "delivered") > 0);
	assert_true(json_counter(stat, "feed.B", "delivered") > 0);
	assert_true(json_counter(stat, "md", "published") > 0);
	assert_non_null(strstr(stat, "\"stream\":\"feed.A\""));
	assert_non_null(strstr(stat, "\"stream\":\"feed.B\""));
	assert_non_null(strstr(stat, "\"transport\":\"mold\""));
	assert_non_null(strstr(stat, "\"stream\":\"md\""));
	free(stat);
	assert_int_equal(proc_wait(&pfh, 120000), 0);
	kill(psim.pid, SIGTERM);
	assert_int_equal(proc_wait(&psim, 30000), 0);
	unsetenv("TICKBUS_COUNTERS_DIR");
	fh = proc_output(&pfh);
	sim = proc_output(&psim);
	fprintf(stderr, "lines: %s%s", sim, fh);
	assert_int_equal(F(fh, "ended"), 1);
	assert_int_equal(F(fh, "lost"), 0);
	assert_int_equal(F(fh, "lines"), 2);
	assert_true(F(fh, "a_won") > 0 && F(fh, "b_won") > 0);
	assert_true(F(fh, "a_lost") > 0 && F(fh, "b_lost") > 0);
	assert_int_equal(F(fh, "b_silences"), 1);
	assert_int_equal(F(fh, "a_silences"), 0);
	assert_non_null(strstr(fh, "line B silent for"));
	assert_non_null(strstr(fh, "going on with line A"));
	assert_non_null(strstr(fh, "line B back at sequence"));
	free(fh);
	free(sim);
	{
		char ring[128];

		snprintf(ring, sizeof(ring), "/dev/shm/tb-feed-lines-%d",
			 (int)getpid());
		unlink(ring);
	}
}

static int udp_socket(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	return fd;
}

static void send_to(int fd, const char *addr, uint16_t port, const void *b,
		    size_t n)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	inet_pton(AF_INET, addr, &sa.sin_addr);
	assert_int_equal(sendto(fd, b, n, 0, (struct sockaddr *)&sa, sizeof(sa)),
			 (ssize_t)n);
}

/* Malformed packets sent to the group while the feed runs are counted by
 * the reader and dropped; the books still match.  Bad re-requests sent to
 * the simulator are counted there and answered with nothing. */
static void test_malformed(void **state)
{
	char sim_out[256], chk_out[256], *sim_s, *chk_s;
	char *cargv[] = { "tb-feedcheck", "--session", SESSION, "--timeout-ms",
			  "120000", NULL };
	char *sargv[] = { "tb-feedsim", "--iface", "127.0.0.1", "--session",
			  SESSION, "-N", "6", "-n", "5000", "-r", "5000",
			  "--start-delay-ms", "500", "--end-ms", "150000", "-s",
			  "14", NULL };
	uint8_t pkt[64], req[32];
	proc_t sim, chk;
	int fd = udp_socket(), rc;
	tb_mold_builder_t b;
	size_t n;
	unsigned char one = 1;

	(void)state;
	setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof(one));
	snprintf(sim_out, sizeof(sim_out), "%s/malformed.sim", tmpdir);
	snprintf(chk_out, sizeof(chk_out), "%s/malformed.chk", tmpdir);
	assert_int_equal(proc_start(&chk, chk_out, cargv), 0);
	assert_int_equal(proc_wait_output(&chk, "ready", 30000), 0);
	assert_int_equal(proc_start(&sim, sim_out, sargv), 0);
	usleep(200000);

	/* 1: shorter than a header. */
	send_to(fd, GROUP, PORT, "junk!", 5);
	/* 2: count 3, one block. */
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 1);
	tb_mold_build_add(&b, "abc", 3);
	n = tb_mold_build_end(&b);
	pkt[19] = 3;
	send_to(fd, GROUP, PORT, pkt, n);
	/* 3: a heartbeat with bytes behind it. */
	tb_mold_write_ctl(pkt, SESSION, 1, 0);
	send_to(fd, GROUP, PORT, pkt, 24);
	/* 4: sequence 0. */
	tb_mold_write_ctl(pkt, SESSION, 0, 0);
	send_to(fd, GROUP, PORT, pkt, 20);
	/* A well-formed packet of another session. */
	tb_mold_write_ctl(pkt, "OTHERSESS1", 1, 0);
	send_to(fd, GROUP, PORT, pkt, 20);
	/* Bad re-requests: wrong length, count 0, another session; and one
	 * for sequences the simulator does not have yet. */
	send_to(fd, "127.0.0.1", RPORT, "short", 5);
	tb_mold_req_encode(req, SESSION, 1, 0);
	send_to(fd, "127.0.0.1", RPORT, req, 20);
	tb_mold_req_encode(req, "OTHERSESS1", 1, 5);
	send_to(fd, "127.0.0.1", RPORT, req, 20);
	tb_mold_req_encode(req, SESSION, 1000000, 5);
	send_to(fd, "127.0.0.1", RPORT, req, 20);

	rc = proc_wait(&chk, 180000);
	kill(sim.pid, SIGTERM);
	assert_int_equal(proc_wait(&sim, 30000), 0);
	sim_s = proc_output(&sim);
	chk_s = proc_output(&chk);
	fprintf(stderr, "malformed: %s%s", sim_s, chk_s);
	assert_int_equal(rc, 0);
	assert_int_equal(F(chk_s, "malformed_packets"), 4);
	assert_int_equal(F(chk_s, "wrong_session"), 1);
	assert_int_equal(F(chk_s, "ended"), 1);
	assert_int_equal(F(chk_s, "book_errors"), 0);
	assert_int_equal(F(chk_s, "orders"), F(sim_s, "orders"));
	{
		char a[64], c[64];

		proc_field(sim_s, "checksum", a, sizeof(a));
		proc_field(chk_s, "checksum", c, sizeof(c));
		assert_string_equal(a, c);
	}
	assert_int_equal(F(sim_s, "bad_requests"), 3);
	assert_int_equal(F(sim_s, "unknown_requests"), 1);
	assert_int_equal(F(sim_s, "retrans_msgs"), 0);
	free(sim_s);
	free(chk_s);
	close(fd);
}

/* Same seed, same bytes (whatever the loss and rate); another seed, other
 * bytes.  No reader: the feed goes to the group regardless. */
static void test_deterministic(void **state)
{
	const char *seeds[4] = { "21", "21", "21", "22" };
	const char *drops[4] = { "0", "0.3", "0", "0" };
	const char *rates[4] = { "0", "0", "50000", "0" };
	char crc[4][64], sum[4][64];
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		char out[256], *text;
		char *argv[] = { "tb-feedsim", "--iface", "127.0.0.1", "-n", "5000",
				 "-r", (char *)rates[i], "-s", (char *)seeds[i],
				 "--drop", (char *)drops[i], "--end-ms", "0",
				 "-R", "0", NULL };

		snprintf(out, sizeof(out), "%s/det%d.sim", tmpdir, i);
		assert_int_equal(scenario_run(out, argv, 60000, &text), 0);
		assert_int_equal(proc_field(text, "bytes_crc", crc[i], sizeof(crc[i])), 0);
		assert_int_equal(proc_field(text, "checksum", sum[i], sizeof(sum[i])), 0);
		if (i == 1)
			assert_true(F(text, "dropped") > 0);
		free(text);
	}
	assert_string_equal(crc[0], crc[1]);
	assert_string_equal(crc[0], crc[2]);
	assert_string_equal(sum[0], sum[1]);
	assert_string_not_equal(crc[0], crc[3]);
	assert_string_not_equal(sum[0], sum[3]);
}

/* tb-gateway acks every valid order with its arrival time, and counts and
 * ignores malformed ones. */
static void test_gateway(void **state)
{
	char out[256], *text, portbuf[16];
	char *argv[] = { "tb-gateway", "-p", "0", NULL };
	proc_t gw;
	int fd = udp_socket(), i, acks = 0;
	uint16_t port;
	uint8_t junk[48];
	tb_gw_order_t o;

	(void)state;
	snprintf(out, sizeof(out), "%s/gateway.out", tmpdir);
	assert_int_equal(proc_start(&gw, out, argv), 0);
	assert_int_equal(proc_wait_output(&gw, "ready", 30000), 0);
	text = proc_output(&gw);
	assert_int_equal(proc_field(text, "port", portbuf, sizeof(portbuf)), 0);
	free(text);
	port = (uint16_t)atoi(portbuf);
	assert_true(port > 0);

	/* Malformed first (short, bad magic, bad side): the gateway reads its
	 * socket in order, so once every order is acked these were counted. */
	send_to(fd, "127.0.0.1", port, "x", 1);
	tb_gw_order_init(&o);
	o.qty = 1;
	o.side = 'B';
	memcpy(junk, &o, sizeof(o));
	junk[0] ^= 0xff;
	send_to(fd, "127.0.0.1", port, junk, sizeof(junk));
	o.side = 'Q';
	send_to(fd, "127.0.0.1", port, &o, sizeof(o));

	for (i = 0; i < 100; i++) {
		tb_gw_order_init(&o);
		o.order_id = 1000 + (uint64_t)i;
		o.sent_ns = tb_clock_now_ns();
		o.price = 1234500;
		o.qty = 100;
		o.instrument = 3;
		o.side = i % 2 ? 'S' : 'B';
		send_to(fd, "127.0.0.1", port, &o, sizeof(o));
	}
	{
		uint64_t until = proc_now_ms() + 60000;
		uint8_t seen[100] = {0};

		while (acks < 100 && proc_now_ms() < until) {
			struct pollfd p = { fd, POLLIN, 0 };
			uint8_t buf[128];
			tb_gw_ack_t a;
			ssize_t len;

			memset(&a, 0, sizeof(a));
			if (poll(&p, 1, 100) <= 0)
				continue;
			len = recv(fd, buf, sizeof(buf), 0);
			assert_int_equal(tb_gw_ack_check(buf, (size_t)len, &a), 0);
			assert_true(a.order_id >= 1000 && a.order_id < 1100);
			assert_int_equal(seen[a.order_id - 1000], 0);
			seen[a.order_id - 1000] = 1;
			assert_int_equal(a.status, 0);
			/* Same host, same clock calibration: the arrival lies
			 * between send and now (1 ms slack for cross-core TSC). */
			assert_true(a.arrival_ns + 1000000 >= a.sent_ns);
			assert_true(a.arrival_ns <= tb_clock_now_ns() + 1000000);
			acks++;
		}
	}
	assert_int_equal(acks, 100);
	kill(gw.pid, SIGTERM);
	assert_int_equal(proc_wait(&gw, 30000), 0);
	text = proc_output(&gw);
	fprintf(stderr, "%s", text);
	assert_int_equal(F(text, "orders"), 100);
	assert_int_equal(F(text, "acks"), 100);
	assert_int_equal(F(text, "bad"), 3);
	assert_int_equal(F(text, "bad_size"), 1);
	assert_int_equal(F(text, "bad_magic"), 1);
	assert_int_equal(F(text, "bad_field"), 1);
	free(text);
	close(fd);
}

/* Every bad command-line value is refused with exit status 2 and a line
 * that names the option. */
static void test_bad_arguments(void **state)
{
	static const char *cases[][4] = {
		{ "tb-feedsim", "--port", "0", "--port" },
		{ "tb-feedsim", "--port", "70000", "--port" },
		{ "tb-feedsim", "-n", "0", "--count" },
		{ "tb-feedsim", "--drop", "1.5", "--drop" },
		{ "tb-feedsim", "--drop", "lots", "--drop" },
		{ "tb-feedsim", "--session", "ELEVENCHARS", "--session" },
		{ "tb-feedsim", "--instruments", "0", "--instruments" },
		{ "tb-feedsim", "--max-per-pkt", "0", "--max-per-pkt" },
		{ "tb-feedsim", "--req-max", "65535", "--req-max" },
		{ "tb-feedsim", "--ttl", "256", "--ttl" },
		{ "tb-feedsim", "-g", "239.1.2", "--group" },
		{ "tb-feedsim", "--iface", "eth0", "--iface" },
		{ "tb-feedsim", "--rate", "-5", "--rate" },
		{ "tb-feedsim", "--heartbeat-ms", "0", "--heartbeat-ms" },
		{ "tb-feedsim", "stray", NULL, "unexpected argument" },
		{ "tb-feedsim", "--bogus", NULL, "usage:" },
		{ "tb-feedcheck", "--port", "0", "--port" },
		{ "tb-feedcheck", "--gap-timeout-ms", "0", "--gap-timeout-ms" },
		{ "tb-feedcheck", "--instruments", "5000", "--instruments" },
		{ "tb-feedcheck", "--session", "", "--session" },
		{ "tb-feedcheck", "-H", "localhost", "--retrans-host" },
		{ "tb-feedcheck", "stray", NULL, "unexpected argument" },
		{ "tb-gateway", "--port", "99999", "--port" },
		{ "tb-gateway", "--bind", "any", "--bind" },
		{ "tb-gateway", "--count", "-1", "--count" },
		{ "tb-gateway", "stray", NULL, "unexpected argument" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[256], *text;
		char *argv[] = { (char *)cases[i][0], (char *)cases[i][1],
				 (char *)cases[i][2], NULL };
		int rc;

		snprintf(out, sizeof(out), "%s/badarg%zu.out", tmpdir, i);
		rc = scenario_run(out, argv, 30000, &text);
		if (rc != 2 || !strstr(text, cases[i][3]))
			fail_msg("%s %s %s: want exit 2 naming '%s', got: %s",
				 cases[i][0], cases[i][1], cases[i][2] ? cases[i][2] : "",
				 cases[i][3], text);
		free(text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_loss),
		cmocka_unit_test(test_loss_recovered),
		cmocka_unit_test(test_loss_unrecoverable),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_ab_lines),
		cmocka_unit_test(test_ab_line_silent),
		cmocka_unit_test(test_handler_lines),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_gateway),
		cmocka_unit_test(test_bad_arguments),
	};
	int rc;

	if ((rc = proc_private_multicast_netns()) != 0)
		return rc;
	if (scenario_dir_make(tmpdir, sizeof(tmpdir), "tb-feed-test") != 0) {
		perror("mkdtemp");
		return 1;
	}
	tb_clock_init();
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (rc == 0) {
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmpdir);
	}
	return rc;
}
