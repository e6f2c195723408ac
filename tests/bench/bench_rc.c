/*
 * bench_rc - the rc publisher's cost per message against its fan-out.
 *
 * One process: an rc publisher and N subscribers (1, 2, 4, 8), on whatever
 * libibverbs is loaded (softrdma here, through LD_LIBRARY_PATH; a NIC's
 * provider on a machine that has one).  The publishing thread offers 64-byte
 * messages and, between bursts of 32, polls every subscriber so that none is
 * ever lapped; only the offers are timed.
 *
 * Floor, measured in the same run: one raw ibv_post_send of the same
 * WRITE_WITH_IMM (96 bytes, inline, unsignalled but one in 64) on a queue
 * pair of the bench's own, with the completion reaped the same way.  The
 * expectation is linear: tickbus per message ~ N x (floor + its own work).
 *
 * Modes:
 *   bench_rc                       the fan-out table (median of RUNS runs)
 *   bench_rc --batching            the batching rows alone
 *   bench_rc --callgrind N COUNT [ud|rcb]
 *                                  N subscribers, COUNT offers, no timing:
 *                                  run under callgrind with
 *                                  --toggle-collect=tb_pub_offer (the bench
 *                                  script subtracts the verbs provider's
 *                                  instructions to get tickbus's own);
 *                                  with "ud", the same over ud multicast, so
 *                                  the two fan-outs sit side by side: rc
 *                                  posts once per subscriber, ud once;
 *                                  with "rcb", rc with batch_us set and
 *                                  tb_pub_flush() after every 16 offers
 *                                  (collected in tb_pub_flush too)
 *
 * Batching: posts (ibv_post_send calls, doorbells) per message per
 * subscriber, counted on the publisher's device context, and instructions
 * per offer, with batch_us set and bursts of 16 flushed, beside the same
 * figures unbatched, in the same run.
 *
 * The instruction counts are split: the whole offer above the provider
 * (the figure the goals are about: <= 100 for one subscriber, <= 40 per
 * extra one, DESIGN.md section 8), the publisher core's share of it (the
 * self cost of tb_pub_offer's lines from the publisher and its headers:
 * the claim, the frame header, the clock read, the payload copy, the
 * commit) and the rc transport's (the rest: rc's send,
 * tb_rc_pub_send_small, which the offer inlines from rc_pub.h, its slow
 * path and inlined verbs calls included, the provider's post_send and
 * poll_cq excluded).  Each row prints beside the goal, with the
 * per-subscriber step.
 */
#include <tickbus/tickbus.h>

#include "bus/clock.h"
#include "bus/error.h"
#include "tests/common/bench.h"

#include <dlfcn.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RUNS 5
#define MSGS 50000
#define BURST 32
#define MAX_SUBS 8
#define BATCH_BURST 16    /* offers, then tb_pub_flush, when batching */

/* Counting posts: the first device context opened once `count_arm` is
 * set (the publisher's: the rig opens it first) has its post_send
 * counted.  Never armed under callgrind, so the instruction counts hold
 * no counting of their own. */
static int count_arm;
static struct ibv_context *counted_ctx;
static uint64_t n_posts;
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);

static int counting_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad)
{
	if (qp->context == counted_ctx)
		n_posts++;
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
	if (ctx && count_arm) {
		count_arm = 0;
		counted_ctx = ctx;
		real_post_send = ctx->ops.post_send;
		ctx->ops.post_send = counting_post_send;
	}
	return ctx;
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	(void)m;
	++*(uint64_t *)clientd;
}

static int use_ud;
static int use_batch;   /* rc with batch_us, flushed every BATCH_BURST */

static void cfg_for(tb_stream_cfg_t *c, int port)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "bench");
	c->id = 77;
	c->ring_size = 4 << 20;
	snprintf(c->token, sizeof(c->token), "bench");
	/* By hand: TB_BENCH_RETENTION=N measures with retention on, as the
	 * shipped configs run (config/rc.ini, ud.ini). */
	if (getenv("TB_BENCH_RETENTION"))
		c->retention = (uint32_t)strtoul(getenv("TB_BENCH_RETENTION"),
						 NULL, 10);
	if (use_ud) {
		c->transport = TB_TRANSPORT_UD;
		snprintf(c->group.host, sizeof(c->group.host), "239.192.7.%d",
			 1 + port % 250);
		c->group.port = (uint16_t)port;
		return;
	}
	c->transport = TB_TRANSPORT_RC;
	/* Long enough that only a full chain or the flush posts. */
	c->batch_us = use_batch ? 1000 : 0;
	snprintf(c->control.host, sizeof(c->control.host), "127.0.0.1");
	c->control.port = (uint16_t)port;
}

typedef struct rig {
	tb_publisher_t *pub;
	tb_subscriber_t *sub[MAX_SUBS];
	uint64_t got[MAX_SUBS];
	int last_rc[MAX_SUBS];     /* the last condition a poll returned */
	int n;
} rig_t;

static void drain(rig_t *r)
{
	for (int i = 0; i < r->n; i++) {
		int rc;

		while ((rc = tb_sub_poll(r->sub[i], on_msg, &r->got[i], 256)) > 0)
			;
		if (rc < 0)
			r->last_rc[i] = rc;
	}
}

/* Opens a publisher and n subscribers and waits until every one delivers. */
static int rig_open(rig_t *r, int n, int port)
{
	tb_stream_cfg_t c;
	uint8_t msg[64] = {0};
	uint64_t until;

	memset(r, 0, sizeof(*r));
	r->n = n;
	cfg_for(&c, port);
	if (tb_publisher_open(&r->pub, &c) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (tb_subscriber_open(&r->sub[i], &c) < 0)
			return -1;
	until = tb_clock_now_ns() + 20000000000ull;
	for (;;) {
		int all = 1;

		tb_pub_offer(r->pub, 1, msg, sizeof(msg));
		usleep(1000);
		drain(r);
		for (int i = 0; i < n; i++)
			all &= r->got[i] > 0;
		if (all)
			return 0;
		if (tb_clock_now_ns() > until)
			break;
	}
	/* Say which never delivered, and what their polls said. */
	for (int i = 0; i < n; i++)
		if (!r->got[i])
			printf("bench rc: subscriber %d of %d delivered nothing in "
			       "20 s; its last poll: %s\n", i + 1, n,
			       r->last_rc[i] ? tb_strerror(r->last_rc[i]) : "0");
	tb_error_set(TB_ETIMEDOUT, "not every subscriber delivered within 20 s");
	return -1;
}

static void rig_close(rig_t *r)
{
	for (int i = 0; i < r->n; i++)
		tb_subscriber_close(r->sub[i]);
	tb_publisher_close(r->pub);
}

/* ns per offer, offers only. */
static double run_offers(rig_t *r, int count)
{
	uint8_t msg[64] = {0};
	uint64_t spent = 0;

	for (int done = 0; done < count; done += BURST) {
		uint64_t t0 = tb_clock_now_ns();

		for (int k = 0; k < BURST; k++) {
			if (tb_pub_offer(r->pub, 1, msg, sizeof(msg)) < 0)
				k--;    /* back-pressured: never, but never lose one */
			else if (use_batch && (k + 1) % BATCH_BURST == 0)
				tb_pub_flush(r->pub);
		}
		spent += tb_clock_now_ns() - t0;
		drain(r);
	}
	return (double)spent / count;
}

/* The floor: the same work request posted raw on a queue pair of ours. */
static double floor_post(int count)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp[2];
	struct ibv_mr *mr;
	static uint8_t buf[1 << 20] __attribute__((aligned(4096)));
	union ibv_gid gid;
	uint64_t t0, spent = 0;
	int posted = 0, done = 0;

	if (!l || !l[0])
		return -1;
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8192, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE);
	ibv_query_gid(ctx, 1, 0, &gid);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
					      .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 1024,
						      .max_recv_wr = 4096,
						      .max_send_sge = 1,
						      .max_recv_sge = 1,
						      .max_inline_data = 224}};
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
					.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};

		qp[i] = ibv_create_qp(pd, &ia);
		if (!qp[i])
			return -1;
		ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
					.path_mtu = IBV_MTU_4096,
					.dest_qp_num = qp[1 - i]->qp_num,
					.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
					.ah_attr = {.is_global = 1, .port_num = 1}};

		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.hop_limit = 1;
		ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	}
	for (int done_msgs = 0; done_msgs < count; done_msgs += BURST) {
		struct ibv_recv_wr rw = {.num_sge = 0}, *rbad;
		struct ibv_wc wc[64];
		int n;

		for (int k = 0; k < BURST; k++)
			ibv_post_recv(qp[1], &rw, &rbad);
		t0 = tb_clock_now_ns();
		for (int k = 0; k < BURST; k++) {
			struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 96,
					      .lkey = mr->lkey};
			struct ibv_send_wr wr = {
				.sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				.send_flags = IBV_SEND_INLINE,
				.imm_data = htobe32((uint32_t)posted),
				.wr.rdma = {.remote_addr = (uintptr_t)buf + 4096,
					    .rkey = mr->rkey}}, *bad;

			if (++posted % 64 == 0) {
				wr.send_flags |= IBV_SEND_SIGNALED;
				wr.wr_id = (uint64_t)posted;
			}
			if (ibv_post_send(qp[0], &wr, &bad) != 0) {
				fprintf(stderr, "bench rc: floor: ibv_post_send failed\n");
				return -1;
			}
		}
		spent += tb_clock_now_ns() - t0;
		while ((n = ibv_poll_cq(cq, 64, wc)) > 0)
			done += n;
	}
	if (done < count / 2) {   /* receives and signalled sends */
		fprintf(stderr, "bench rc: floor: only %d completions\n", done);
		return -1;
	}
	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return (double)spent / count;
}

/*
 * Instructions per offer of tickbus's own code, for n subscribers: this
 * binary re-run under callgrind (main thread only, collecting inside
 * tb_pub_offer), minus the inclusive cost of the verbs provider's entry
 * points (its post_send, post_recv and poll_cq, with everything they call,
 * libc's locks and copies included).
 * Returns -1 when valgrind is not there.
 */
static double callgrind_per_offer(int n, int count, double *verbs_per_offer,
				  double *transport_per_offer, const char *kind)
{
	char out[128], cmd[1024], line[512];
	double total = -1, verbs = 0, core = 0;
	FILE *f;

	snprintf(out, sizeof(out), "/tmp/bench_rc.%d.callgrind", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "valgrind --tool=callgrind --callgrind-out-file=%s "
		 "--separate-threads=yes --toggle-collect=tb_pub_offer %s"
		 "/proc/%d/exe --callgrind %d %d %s >/dev/null 2>&1",
		 out, strcmp(kind, "rcb") == 0 ? "--toggle-collect=tb_pub_flush " : "",
		 (int)getpid(), n, count, kind);
	if (system(cmd) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "callgrind_annotate --auto=no --inclusive=yes "
		 "--threshold=100 %s-01 2>/dev/null", out);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char digits[64];
		int k = 0;

		for (const char *c = line; *c && k < 63; c++) {
			if (*c >= '0' && *c <= '9')
				digits[k++] = *c;
			else if (*c != ',' && *c != ' ')
				break;
		}
		digits[k] = 0;
		if (!k)
			continue;
		if (strstr(line, "PROGRAM TOTALS"))
			total = atof(digits);
		else if (strstr(line, "libibverbs") &&
			 (strstr(line, "post_send") || strstr(line, "post_recv") ||
			  strstr(line, "poll_cq")))
			verbs += atof(digits);
	}
	pclose(f);
	/* The publisher core: the self cost of tb_pub_offer's lines from
	 * the publisher and its own headers (ring.h, frame.h, clock.h, ...:
	 * bench_core_line).  The transport is the rest above the provider:
	 * its send (tb_rc_pub_send_small, inlined from rc_pub.h) and what
	 * that calls but the provider. */
	snprintf(cmd, sizeof(cmd), "callgrind_annotate --auto=no --threshold=100 %s-01 "
		 "2>/dev/null", out);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char digits[64];
		int k = 0;

		for (const char *c = line; *c && k < 63; c++) {
			if (*c >= '0' && *c <= '9')
				digits[k++] = *c;
			else if (*c != ',' && *c != ' ')
				break;
		}
		digits[k] = 0;
		if (k && bench_core_line(line))
			core += atof(digits);
	}
	pclose(f);
	snprintf(cmd, sizeof(cmd), "rm -f %s*", out);
	if (system(cmd) != 0)
		(void)0;
	if (total < 0)
		return -1;
	*verbs_per_offer = verbs / count;
	*transport_per_offer = core > 0 ? (total - verbs - core) / count : -1;
	return (total - verbs) / count;
}

/* Posts per message per subscriber for n subscribers, batched or not:
 * counted on the publisher's context over `count` offers. */
static double posts_per_msg(int n, int port, int batch, int count)
{
	rig_t r;
	uint64_t before;

	use_batch = batch;
	count_arm = 1;
	if (rig_open(&r, n, port) < 0) {
		use_batch = 0;
		return -1;
	}
	before = n_posts;
	run_offers(&r, count);
	tb_pub_flush(r.pub);
	rig_close(&r);
	use_batch = 0;
	return (double)(n_posts - before) / ((double)count * n);
}

/* The batching rows: posts per message and instructions per offer, with
 * batch_us set and bursts of BATCH_BURST flushed, beside unbatched. */
static void batching(int port)
{
	static const int fan[] = {1, 4};

	printf("bench rc: batch_us set, bursts of %d then tb_pub_flush(), beside "
	       "unbatched (same run)\n", BATCH_BURST);
	printf("%-12s %14s %10s %12s %10s\n", "subscribers", "posts/msg/sub",
	       "batched", "instr/offer", "batched");
	for (size_t f = 0; f < sizeof(fan) / sizeof(fan[0]); f++) {
		double p0 = posts_per_msg(fan[f], port + 2 * (int)f, 0, 20000);
		double p1 = posts_per_msg(fan[f], port + 2 * (int)f + 1, 1, 20000);
		double v, t, i0, i1;

		if (p0 < 0 || p1 < 0) {
			printf("bench rc: batching, %d subscribers: could not set up: "
			       "%s\n", fan[f], tb_errmsg());
			return;
		}
		i0 = callgrind_per_offer(fan[f], 20000, &v, &t, "rc");
		i1 = callgrind_per_offer(fan[f], 20000, &v, &t, "rcb");
		printf("%-12d %14.3f %10.3f %12.0f %10.0f\n", fan[f], p0, p1, i0, i1);
	}
	printf("bench rc: posts are doorbells; instructions per offer above the "
	       "provider, tb_pub_flush's included when batched (-1: no "
	       "valgrind); softrdma's own post costs per request, not per "
	       "doorbell, so its figures would not show the saving\n");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	int port = 24000 + (int)(getpid() % 8000);
	static const int fan[] = {1, 2, 4, 8};
	double floor_v[RUNS], fl, base = 0;
	rig_t r;

	setenv("TICKBUS_QUIET", "1", 0);
	/* No NIC: run on softrdma, next to this build's bench/ directory. */
	if (!getenv("TB_BENCH_RC_REEXEC") && access("/sys/class/infiniband", F_OK) != 0) {
		char self[512], lib[600], *slash;
		ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);

		if (k > 0) {
			self[k] = 0;
			slash = strrchr(self, '/');
			*slash = 0;
			snprintf(lib, sizeof(lib), "%s/../softrdma%s%s", self,
				 getenv("LD_LIBRARY_PATH") ? ":" : "",
				 getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "");
			setenv("LD_LIBRARY_PATH", lib, 1);
			setenv("TB_BENCH_RC_REEXEC", "1", 1);
			*slash = '/';
			execv(self, argv);
		}
	}
	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "bench-rc-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	if (argc >= 4 && strcmp(argv[1], "--callgrind") == 0) {
		int n = atoi(argv[2]), count = atoi(argv[3]);

		use_ud = argc == 5 && strcmp(argv[4], "ud") == 0;
		use_batch = argc == 5 && strcmp(argv[4], "rcb") == 0;

		if (n < 1 || n > MAX_SUBS || count < BURST || rig_open(&r, n, port) < 0) {
			fprintf(stderr, "bench rc: could not set up: %s\n", tb_errmsg());
			return 1;
		}
		run_offers(&r, count);
		rig_close(&r);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--batching") == 0) {
		batching(port);
		return 0;
	}
	for (int i = 0; i < RUNS; i++)
		floor_v[i] = floor_post(MSGS);
	fl = median(floor_v, RUNS);
	if (fl < 0) {
		printf("bench rc: no RDMA device (not even softrdma): skipped\n");
		return 0;
	}
	printf("bench rc: 64-byte messages, %d offers per run, median of %d runs\n",
	       MSGS, RUNS);
	printf("bench rc: floor: one raw ibv_post_send (WRITE_WITH_IMM, 96 B inline) "
	       "%.0f ns\n", fl);
	printf("%-12s %12s %14s %16s\n", "subscribers", "ns/offer", "vs 1 sub",
	       "vs N x floor");
	for (size_t f = 0; f < sizeof(fan) / sizeof(fan[0]); f++) {
		double v[RUNS], m;

		if (rig_open(&r, fan[f], port + (int)f) < 0) {
			printf("bench rc: %d subscribers: could not set up: %s\n",
			       fan[f], tb_errmsg());
			return 1;
		}
		run_offers(&r, MSGS / 5);   /* warm-up */
		for (int i = 0; i < RUNS; i++)
			v[i] = run_offers(&r, MSGS);
		rig_close(&r);
		m = median(v, RUNS);
		if (f == 0)
			base = m;
		printf("%-12d %12.0f %13.2fx %15.2fx\n", fan[f], m, m / base,
		       m / (fan[f] * fl));
	}
	printf("bench rc: instructions per offer above the verbs provider "
	       "(callgrind, publishing thread, inside tb_pub_offer)\n");
	printf("bench rc: goal (DESIGN.md 8): the whole offer <= 100 for one "
	       "subscriber, <= 40 more per extra subscriber\n");
	printf("%-12s %10s %10s %10s %12s %10s %12s %12s\n", "subscribers",
	       "rc tickbus", "goal", "per extra", "rc transport", "pub core",
	       "ud with MAC", "rc verbs");
	{
		double prev = 0;
		int prev_n = 0;

		for (size_t f = 0; f < sizeof(fan) / sizeof(fan[0]); f++) {
			double rv = 0, uv = 0, rt = 0, ut = 0;
			double rown = callgrind_per_offer(fan[f], 20000, &rv, &rt, "rc");
			double uown = callgrind_per_offer(fan[f], 20000, &uv, &ut, "ud");
			char step[32] = "-";

			if (rown < 0) {
				printf("bench rc: callgrind: not available (valgrind); "
				       "skipped\n");
				break;
			}
			if (prev_n)
				snprintf(step, sizeof(step), "%.0f",
					 (rown - prev) / (fan[f] - prev_n));
			printf("%-12d %10.0f %10d %10s %12.0f %10.0f %12.0f %12.0f\n",
			       fan[f], rown, 100 + 40 * (fan[f] - 1), step, rt,
			       rt >= 0 ? rown - rt : -1, uown, rv);
			prev = rown;
			prev_n = fan[f];
		}
	}
	printf("bench rc: ud with MAC: ud's offer above the provider with its "
	       "datagram authentication (GMAC) included; bench_ud gives it "
	       "apart (its goal counts tickbus without the MAC)\n");
	printf("bench rc: rc posts once per subscriber (linear); ud posts once "
	       "(flat: the fabric copies)\n");
	batching(port + 16);
	return 0;
}
