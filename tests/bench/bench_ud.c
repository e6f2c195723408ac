/*
 * bench_ud - the ud publisher's cost per message against the number of
 * subscribers, next to a floor, and frames per datagram against the batch.
 *
 * Floor: the same datagrams (a packet header and one 96-byte frame) posted
 * with raw ibv_post_send, one per message, to the same group with the same
 * subscribers, in the same run.  The tickbus figure is the ud transport's
 * send path (pack + post) per message.  Both time only the publishing
 * calls, in bursts of BURST with a pause between bursts so that the
 * subscriber processes can drain their receive queues on a shared machine.
 *
 * What "against the number of subscribers" shows depends on the device.
 * On a NIC the replication happens in the HCA and the switch: one post per
 * datagram whatever the group's size, so the cost is flat.  On softrdma the
 * sending process itself copies the datagram into every receiver
 * (process_vm_writev per receiver), so the time per message grows
 * linearly; the posts per message (printed) stay 1, which is the property
 * the transport controls.
 *
 * Instructions per offer (callgrind): the publisher alone is re-run under
 * valgrind (bench_ud --callgrind-pub COUNT, subscribers started outside it
 * on the same fabric), collecting inside tb_pub_offer only, 64-byte
 * messages, one datagram each.  From callgrind's inclusive counts: the
 * verbs provider's entry points (post_send, poll_cq, post_recv) are the
 * provider's, nettle's GMAC (or AES) entry points and the project's own
 * GHASH (tb_ghash_*, self counts) are the MAC's (see mac_gcm_line); the
 * rest is tickbus's own, split into the publisher core (claim, frame,
 * commit: tb_pub_offer's own lines from the publisher and its ring,
 * frame, clock and counter headers, see bench_core_line) and the ud transport
 * (the rest: its send, inlined into the offer from ud.h and dgram.h, and
 * what that calls: packing, signing set-up, the post).  Goal (DESIGN.md, issue 12): tickbus's own <= 100 and
 * flat in the number of subscribers; the MAC is printed beside it.
 *
 * Runs on softrdma when there is no RDMA device: it re-executes itself with
 * LD_LIBRARY_PATH pointing at build/softrdma and a private fabric.  Not a
 * test: it prints figures and exits 0 unless it could not run.  Lines start
 * with "bench ud".
 */
#include "bus/clock.h"
#include "bus/error.h"
#include "bus/transport/ud.h"
#include "tests/common/bench.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STREAM 77
#define MSGS 20000
#define BURST 256
#define PAYLOAD 64

static void cfg_for(tb_stream_cfg_t *cfg, uint32_t batch_us)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "bench-ud");
	cfg->id = STREAM;
	cfg->transport = TB_TRANSPORT_UD;
	snprintf(cfg->group.host, sizeof(cfg->group.host), "239.77.0.1");
	cfg->group.port = 5077;
	cfg->ring_size = 8 << 20;
	cfg->batch_us = batch_us;
	cfg->liveness_timeout_ms = 60000;
	snprintf(cfg->token, sizeof(cfg->token), "bench-token");
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	(void)m;
	(*(uint64_t *)clientd)++;
}

/* A subscriber process: polls until SIGTERM. */
static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static void subscriber(int ready_fd)
{
	tb_stream_cfg_t cfg;
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	tb_idle_t idle;
	uint64_t got = 0;

	signal(SIGTERM, on_term);
	cfg_for(&cfg, 0);
	if (tb_ud_rx_ops.open(&rx, &cfg) < 0)
		_exit(1);
	tb_seq_init(&seq, 0);
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (!stop) {
		int n = rx->ops->poll(rx, &seq, &loss, on_msg, &got, 256);

		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	rx->ops->close(rx);
	_exit(0);
}

static int start_subscribers(pid_t *pids, int n)
{
	int fd[2];
	char c;

	if (pipe(fd) != 0)
		return -1;
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(fd[0]);
			alarm(120);
			subscriber(fd[1]);
		}
	}
	close(fd[1]);
	for (int i = 0; i < n; i++)
		if (read(fd[0], &c, 1) != 1) {
			close(fd[0]);
			return -1;
		}
	close(fd[0]);
	return 0;
}

static void stop_subscribers(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
}

static void pause_us(long us)
{
	struct timespec ts = {0, us * 1000};

	nanosleep(&ts, NULL);
}

/* tickbus ud: ns per message of claim + commit + send (pack and post),
 * flushing every `flush_every` messages when batching. */
static double run_tickbus(uint32_t batch_us, int flush_every, double *posts,
			  double *frames_per_dgram)
{
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;
	tb_ud_tx_t *u;
	uint64_t seq = 1, ns = 0;

	cfg_for(&cfg, batch_us);
	if (tb_ud_tx_ops.open(&tx, &cfg, 4242) < 0)
		return -1;
	u = (tb_ud_tx_t *)tx;
	for (int b = 0; b < MSGS / BURST; b++) {
		uint64_t t0 = tb_clock_now_ns();

		for (int i = 0; i < BURST; i++, seq++) {
			tb_frame_hdr_t *f = tb_ring_claim(&tx->ring, PAYLOAD, seq);
			uint64_t from = tx->ring.tail;

			tb_frame_init(f, PAYLOAD, 1, STREAM, seq, t0);
			memset(tb_frame_payload(f), (int)(uint8_t)seq, PAYLOAD);
			tb_ring_commit(&tx->ring);
			tx->ops->send(tx, from, tx->ring.tail);
			if (flush_every && (i + 1) % flush_every == 0)
				tx->ops->flush(tx);
		}
		ns += tb_clock_now_ns() - t0;
		pause_us(2000);
	}
	tx->ops->flush(tx);
	*posts = (double)u->posted / (double)(seq - 1);
	*frames_per_dgram = (double)u->dg.frames / (double)tb_ud_tx_datagrams(u);
	tx->ops->close(tx, seq - 1);
	return (double)ns / (double)(seq - 1);
}

/* The floor: raw ibv_post_send of the same datagram, one per message. */
static double run_floor(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_qp_init_attr ia = {.cap = {256, 1, 1, 1, 0}, .qp_type = IBV_QPT_UD};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qkey = TB_UD_QKEY(STREAM)};
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	static uint8_t buf[TB_PACKET_HDR_LEN + 96] __attribute__((aligned(64)));
	uint64_t ns = 0, seq = 1;
	struct ibv_wc wc[16];

	if (l)
		ibv_free_device_list(l);
	if (!ctx)
		return -1;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						 IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	tb_ud_mgid("239.77.0.1", &aa.grh.dgid);
	aa.grh.hop_limit = 1;
	ah = ibv_create_ah(pd, &aa);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), 0);
	if (!ah || !mr)
		return -1;
	for (int b = 0; b < MSGS / BURST; b++) {
		uint64_t t0 = tb_clock_now_ns();

		for (int i = 0; i < BURST; i++, seq++) {
			struct ibv_sge sge = {(uintptr_t)buf, sizeof(buf), mr->lkey};
			struct ibv_send_wr wr = {.wr_id = seq, .sg_list = &sge,
						 .num_sge = 1,
						 .opcode = IBV_WR_SEND_WITH_IMM,
						 .imm_data = htonl((uint32_t)seq)}, *bad;
			tb_frame_hdr_t *f = (tb_frame_hdr_t *)(buf + TB_PACKET_HDR_LEN);

			tb_packet_init((tb_packet_hdr_t *)buf, 0, STREAM, 99, seq, 1,
				    sizeof(buf));
			tb_frame_init(f, PAYLOAD, 1, STREAM, seq, t0);
			if (i == BURST - 1)
				wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
			wr.wr.ud.remote_qkey = TB_UD_QKEY(STREAM);
			ibv_post_send(qp, &wr, &bad);
		}
		while (ibv_poll_cq(cq, 16, wc) == 0)
			;
		ns += tb_clock_now_ns() - t0;
		pause_us(2000);
	}
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return (double)ns / (double)(seq - 1);
}

/* ------------------------------------------------- instructions per offer */

/* The publisher alone, through the public API: what valgrind runs. */
static int callgrind_pub(int count)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	uint8_t msg[PAYLOAD];

	cfg_for(&cfg, 0);
	if (tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "bench ud: %s\n", tb_errmsg());
		return 1;
	}
	memset(msg, 7, sizeof(msg));
	for (int i = 0; i < count; i++) {
		tb_pub_offer(pub, 1, msg, sizeof(msg));
		if (i % BURST == BURST - 1)
			pause_us(2000); /* the subscribers drain */
	}
	tb_publisher_close(pub);
	return 0;
}

/* Sums callgrind_annotate's inclusive counts of the lines that contain
 * `obj` and one of `fns` (NULL-terminated). */
struct cg_sums {
	double total, verbs, mac, core;
};

static int cg_line_count(const char *line, double *v)
{
	char digits[64];
	int k = 0;

	for (const char *c = line; *c && k < 63; c++) {
		if (*c >= '0' && *c <= '9')
			digits[k++] = *c;
		else if (*c != ',' && *c != ' ')
			break;
	}
	digits[k] = 0;
	*v = k ? atof(digits) : 0;
	return k > 0;
}

/*
 * The MAC's share of the counts, so that it compares across its two
 * implementations: nettle's GMAC, or the project's own GHASH (functions
 * named tb_ghash_*, dgram_auth.c) with nettle's AES for the tag's mask.
 * Nettle's entry points are taken inclusive (with the AES and the libc
 * copies they call), its AES only when no GMAC entry point ran (nettle's
 * GCM calls it: it would count twice), the GHASH's functions by their
 * self counts (however they call one another, nothing counts twice).
 * What calls them (dgram_auth's sign) stays tickbus's own.
 */
static int mac_gcm_line(const char *line)
{
	return strstr(line, "libnettle") &&
	       (strstr(line, "nettle_gcm_set_iv ") ||
		strstr(line, "nettle_gcm_update ") ||
		strstr(line, "nettle_gcm_digest "));
}

static int mac_aes_line(const char *line)
{
	return strstr(line, "libnettle") &&
	       (strstr(line, "nettle_aes128_encrypt ") ||
		strstr(line, "nettle_aes_encrypt "));
}

/* "1,234 ( 1.00%)  file:tb_ghash_name [object]", or a line of ghash.h
 * inlined into another function (the GHASH's own inline part). */
static int mac_ghash_line(const char *line)
{
	const char *fn = strstr(line, "%)");

	if (fn && strstr(fn, "/ghash.h:"))
		return 1;
	fn = fn ? strchr(fn, ':') : NULL;
	return fn && strncmp(fn + 1, "tb_ghash_", 9) == 0;
}

/* Runs the publisher under callgrind with `subs` subscribers polling
 * outside it; per offer, into *s.  -1 when valgrind is not there. */
static int callgrind_run(int subs, int count, struct cg_sums *s)
{
	char out[128], cmd[1024], line[512];
	double gcm = 0, aes = 0;
	pid_t pids[8];
	FILE *f;
	int rc;

	memset(s, 0, sizeof(*s));
	if (start_subscribers(pids, subs) < 0)
		return -1;
	snprintf(out, sizeof(out), "/tmp/bench_ud.%d.callgrind", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "valgrind --tool=callgrind --callgrind-out-file=%s "
		 "--separate-threads=yes --toggle-collect=tb_pub_offer "
		 "/proc/%d/exe --callgrind-pub %d >/dev/null 2>&1",
		 out, (int)getpid(), count);
	rc = system(cmd);
	stop_subscribers(pids, subs);
	if (rc != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "callgrind_annotate --auto=no --inclusive=yes "
		 "--threshold=100 %s-01 2>/dev/null", out);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		double v;

		if (!cg_line_count(line, &v))
			continue;
		if (strstr(line, "PROGRAM TOTALS"))
			s->total = v;
		else if (strstr(line, "libibverbs") &&
			 (strstr(line, "post_send") || strstr(line, "post_recv") ||
			  strstr(line, "poll_cq")))
			s->verbs += v;
		else if (mac_gcm_line(line))
			gcm += v;
		else if (mac_aes_line(line))
			aes += v;
	}
	s->mac = gcm + (gcm > 0 ? 0 : aes);
	pclose(f);
	snprintf(cmd, sizeof(cmd), "callgrind_annotate --auto=no --threshold=100 %s-01 "
		 "2>/dev/null", out);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		double v;

		if (!cg_line_count(line, &v) || strstr(line, "PROGRAM TOTALS"))
			continue;
		if (mac_ghash_line(line))
			s->mac += v;
		else if (bench_core_line(line))
			s->core += v;
	}
	pclose(f);
	snprintf(cmd, sizeof(cmd), "rm -f %s*", out);
	if (system(cmd) != 0)
		(void)0;
	if (s->total <= 0)
		return -1;
	s->total /= count;
	s->verbs /= count;
	s->mac /= count;
	s->core /= count;
	return 0;
}

static void print_instructions(void)
{
	static const int subs[] = {1, 2, 4, 8};
	const int count = 20000;

	printf("bench ud: instructions per offer (callgrind, publishing thread, "
	       "inside tb_pub_offer), %d-byte messages, one datagram each\n",
	       PAYLOAD);
	printf("bench ud: %-12s %9s %9s %10s %10s %10s   %s\n", "subscribers",
	       "tickbus", "pub core", "ud send", "MAC", "provider",
	       "goal: tickbus <= 100, flat");
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		struct cg_sums s;
		double own, core, send;

		if (callgrind_run(subs[i], count, &s) < 0) {
			printf("bench ud: callgrind: not available (valgrind); "
			       "skipped\n");
			return;
		}
		own = s.total - s.verbs - s.mac;
		core = s.core;
		send = own - core;
		printf("bench ud: %-12d %9.0f %9.0f %10.0f %10.0f %10.0f   %s\n",
		       subs[i], own, core, send, s.mac, s.verbs,
		       own <= 100 ? "met" : "not met");
	}
	printf("bench ud: tickbus = pub core + ud send (own code, libc's copies "
	       "included); MAC = the GMAC of the datagram (authentication: nettle, "
	       "tb_ghash_*); "
	       "provider = the verbs library\n");
}

/* No device and not on softrdma yet: run again on softrdma. */
static void use_softrdma(char **argv)
{
	char exe[PATH_MAX], dir[PATH_MAX + 32], fab[64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0 || getenv("BENCH_UD_REEXEC"))
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(dir, sizeof(dir), "%s/../softrdma", exe);
	snprintf(fab, sizeof(fab), "bench-ud-%d", (int)getpid());
	setenv("LD_LIBRARY_PATH", dir, 1);
	setenv("SOFTRDMA_FABRIC", fab, 1);
	setenv("BENCH_UD_REEXEC", "1", 1);
	execv("/proc/self/exe", argv);
}

int main(int argc, char **argv)
{
	static const int subs[] = {1, 2, 4, 8};
	static const int batches[] = {1, 4, 16, 64};
	struct ibv_device **l;
	const char *dev;
	int n = 0;
	pid_t pids[8];

	setenv("TICKBUS_QUIET", "1", 1);
	if (argc == 3 && !strcmp(argv[1], "--callgrind-pub"))
		return callgrind_pub(atoi(argv[2]));
	l = ibv_get_device_list(&n);
	if (!l || n == 0) {
		if (l)
			ibv_free_device_list(l);
		use_softrdma(argv);
		printf("bench ud: skipped, no RDMA device and no softrdma\n");
		return 0;
	}
	dev = ibv_get_device_name(l[0]);
	printf("bench ud: device %s; %d messages of %d bytes in bursts of %d, "
	       "time of the publishing calls only\n", dev, MSGS, PAYLOAD, BURST);
	if (!strcmp(dev, "softrdma0"))
		printf("bench ud: softrdma copies every datagram into every "
		       "subscriber from the sender: time grows with subscribers "
		       "here, posts per message do not\n");
	ibv_free_device_list(l);

	if (argc == 2 && !strcmp(argv[1], "--instructions")) {
		print_instructions();
		return 0;
	}
	printf("bench ud: %-12s %12s %12s %8s %14s\n", "subscribers", "floor ns/msg",
	       "ud ns/msg", "ratio", "posts/msg");
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		double fl, ud, posts, fpd;

		if (start_subscribers(pids, subs[i]) < 0) {
			printf("bench ud: could not start subscribers\n");
			return 1;
		}
		fl = run_floor();
		ud = run_tickbus(0, 0, &posts, &fpd);
		stop_subscribers(pids, subs[i]);
		if (fl <= 0 || ud <= 0) {
			printf("bench ud: could not run (%s)\n", tb_errmsg());
			return 1;
		}
		printf("bench ud: %-12d %12.0f %12.0f %8.2f %14.3f\n", subs[i], fl,
		       ud, ud / fl, posts);
	}

	printf("bench ud: %-12s %12s %12s %14s\n", "batch (flush", "ud ns/msg",
	       "frames/dgram", "posts/msg");
	if (start_subscribers(pids, 1) < 0)
		return 1;
	for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
		double posts, fpd, ud = run_tickbus(1000000, batches[i], &posts, &fpd);

		printf("bench ud: every %-6d %12.0f %12.2f %14.3f\n", batches[i], ud,
		       fpd, posts);
	}
	stop_subscribers(pids, 1);
	print_instructions();
	return 0;
}
