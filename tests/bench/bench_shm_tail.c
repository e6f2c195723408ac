/*
 * bench_shm_tail - where shm's round-trip tail comes from, and whose it is.
 *
 * The round trip of bench_shm, instrumented on both sides, and the raw
 * cache-line ping-pong beside it with the same instruments:
 *   poll gap     the longest time between two consecutive polls (looks, for
 *                the floor) while a side waits: a gap longer than a poll
 *                means the waiting core did something else (an interrupt, a
 *                preemption, the hypervisor) - the machine's;
 *   commit       tb_pub_offer on each side (the writer: claim, copy,
 *                commit) - tickbus's;
 *   handler      the echo handler (its offer, measured inside it);
 *   one way      the ping's publish stamp to the echo handler's entry.
 * Every round trip above the run's p99 and p99.9 is attributed: to a poll
 * gap on either side (the machine's), else to a slow commit (tickbus's),
 * else to the transfer itself (the machine's: what the floor also shows).
 * Also counted over the run: interrupts on the two cores (/proc/interrupts)
 * and involuntary context switches of the two processes.
 *
 * The instruments cost a TSC read per poll; this run explains the tail,
 * bench_shm measures it.  Not a test.  Output lines start with
 * "bench shm tail".  Usage: bench_shm_tail [--rounds N] [--cores A,B]
 * [--ring BYTES] (default 4 MiB, as bench_shm).
 */
#include <tickbus/tickbus.h>

#include "bus/barrier.h"
#include "bus/clock.h"
#include <tickbus/hist.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define WARMUP 20000
#define GAP_NS 1000 /* a poll gap this long is not the loop's own */
#define SLOW_COMMIT_NS 1000

static int core_a = 0, core_b = 1;
static int owner; /* the pid in the ring names: the measuring process's */
static uint64_t ring_size = 4 << 20;
static uint64_t rounds = 200000 + WARMUP;

/* What the echo side records per round trip, in shared memory. */
struct echo_rec {
	uint64_t oneway_ns, handler_ns, gap_ns;
};

struct shared {
	_Atomic uint64_t ping tb_cache_aligned;
	_Atomic uint64_t pong tb_cache_aligned;
	uint64_t nvcsw;        /* the echo side's involuntary switches */
	struct echo_rec rec[]; /* by round */
};

static uint64_t ticks_to_ns(uint64_t ticks)
{
	tb_clock_calib_t c;

	tb_clock_get(&c, NULL);
	return (uint64_t)(((unsigned __int128)ticks * c.mult) >> c.shift);
}

/* Involuntary context switches of this process so far. */
static uint64_t nvcsw(void)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "nonvoluntary_ctxt_switches:", 27))
			v = strtoull(line + 27, NULL, 10);
	fclose(f);
	return v;
}

/* Interrupts taken by CPU `cpu` so far, all sources. */
static uint64_t interrupts(int cpu)
{
	char line[4096];
	uint64_t total = 0;
	FILE *f = fopen("/proc/interrupts", "r");

	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f)) { /* the CPU header */
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');

		if (!p)
			continue;
		p++;
		for (int c = 0; c <= cpu; c++) {
			char *end;
			uint64_t v = strtoull(p, &end, 10);

			if (end == p)
				break;
			if (c == cpu)
				total += v;
			p = end;
		}
	}
	fclose(f);
	return total;
}

static void print_hist(const char *what, const tb_hist_t *h)
{
	printf("bench shm tail:   %-30s p50 %7" PRId64 "  p99 %7" PRId64
	       "  p99.9 %8" PRId64 "  max %9" PRId64 " ns\n", what,
	       tb_hist_value_at_percentile(h, 50),
	       tb_hist_value_at_percentile(h, 99),
	       tb_hist_value_at_percentile(h, 99.9), tb_hist_max(h));
}

static void cfg_for(tb_stream_cfg_t *cfg, const char *name, uint32_t id)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = id;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = ring_size;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path),
		 "/dev/shm/tb-bench-tail-%s.%d", name, owner);
}

/* --------------------------------------------------------------- echo */

/* Round numbers travel in the first 8 bytes of the 64-byte messages;
 * HELLO marks the probes sent until the echo side answers. */
#define HELLO UINT64_MAX

struct echo {
	tb_publisher_t *pub;
	struct shared *sh;
	uint64_t last_round, last_poll, max_gap;
};

static void on_ping(void *clientd, const tb_msg_t *m)
{
	struct echo *e = clientd;
	uint64_t t0 = tb_clock_now_ns_inline(), t1, round;

	while (tb_pub_offer(e->pub, m->template_id, m->data, m->len) < 0)
		tb_cpu_relax();
	t1 = tb_clock_now_ns_inline();
	memcpy(&round, m->data, sizeof(round));
	if (round != HELLO && round < rounds) {
		struct echo_rec *r = &e->sh->rec[round];

		r->oneway_ns = t0 - m->publish_ns;
		r->handler_ns = t1 - t0;
		r->gap_ns = ticks_to_ns(e->max_gap);
		e->last_round = round;
	}
	e->max_gap = 0;
}

static void echo_main(struct shared *sh, int floor)
{
	tb_stream_cfg_t ping, pong;
	tb_subscriber_t *sub;
	struct echo e = {0, sh, 0, 0, 0};
	uint64_t base = nvcsw();

	tb_thread_pin(core_b);
	if (floor) {
		for (uint64_t i = 1, last = tb_clock_tsc(), gap = 0; i <= rounds; i++) {
			while (tb_atomic_load_acquire(&sh->ping) != i) {
				uint64_t t = tb_clock_tsc();

				if (t - last > gap)
					gap = t - last;
				last = t;
				tb_cpu_relax();
			}
			tb_atomic_store_release(&sh->pong, i);
			sh->rec[i - 1].gap_ns = ticks_to_ns(gap);
			gap = 0;
		}
		sh->nvcsw = nvcsw() - base;
		_exit(0);
	}
	cfg_for(&ping, "ping", 1);
	cfg_for(&pong, "pong", 2);
	if (tb_subscriber_open(&sub, &ping) < 0 ||
	    tb_publisher_open(&e.pub, &pong) < 0)
		_exit(1);
	e.last_poll = tb_clock_tsc();
	while (e.last_round != rounds - 1) {
		uint64_t t = tb_clock_tsc();

		if (t - e.last_poll > e.max_gap)
			e.max_gap = t - e.last_poll;
		e.last_poll = t;
		if (tb_sub_poll(sub, on_ping, &e, 16) <= 0)
			tb_cpu_relax();
	}
	sh->nvcsw = nvcsw() - base;
	usleep(100000);
	tb_publisher_close(e.pub);
	tb_subscriber_close(sub);
	_exit(0);
}

/* ------------------------------------------------------------ measure */

struct answer {
	uint64_t round, at_ns; /* the last answer's round */
};

static void on_answer(void *clientd, const tb_msg_t *m)
{
	struct answer *a = clientd;

	a->at_ns = tb_clock_now_ns_inline();
	memcpy(&a->round, m->data, sizeof(a->round));
}

/* One instrumented run of the floor (floor = 1) or tickbus. */
static int run(int floor)
{
	size_t len = sizeof(struct shared) + rounds * sizeof(struct echo_rec);
	struct shared *sh = mmap(NULL, len, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *rtt = calloc(rounds, sizeof(uint64_t));
	uint64_t *gap_a = calloc(rounds, sizeof(uint64_t));
	uint64_t *commit = calloc(rounds, sizeof(uint64_t));
	tb_hist_t *h_rtt, *h_gap_a, *h_gap_b, *h_commit, *h_handler, *h_oneway;
	uint64_t irq0[2], irq1[2], nv0, nv_a;
	tb_stream_cfg_t ping, pong;
	tb_subscriber_t *sub = NULL;
	tb_publisher_t *pub = NULL;
	struct answer a = {0, 0};
	uint64_t hello = HELLO;
	uint8_t msg[64];
	pid_t child;

	if (sh == MAP_FAILED || !rtt || !gap_a || !commit)
		return -1;
	memset(msg, 7, sizeof(msg));
	cfg_for(&ping, "ping", 1);
	cfg_for(&pong, "pong", 2);
	unlink(ping.shm_path);
	unlink(pong.shm_path);
	irq0[0] = interrupts(core_a);
	irq1[0] = interrupts(core_b);
	child = fork();
	if (child == 0)
		echo_main(sh, floor);
	tb_thread_pin(core_a);
	nv0 = nvcsw();
	if (!floor) {
		if (tb_subscriber_open(&sub, &pong) < 0 ||
		    tb_publisher_open(&pub, &ping) < 0)
			return -1;
		/* Until the echo side answers. */
		memcpy(msg, &hello, sizeof(hello));
		a.round = 0;
		while (a.round != HELLO) {
			tb_pub_offer(pub, 1, msg, sizeof(msg));
			for (int i = 0; i < 100000 && a.round != HELLO; i++)
				tb_sub_poll(sub, on_answer, &a, 16);
		}
		/* Answers to more probes may still come: rounds are told
		 * apart by number. */
	}
	for (uint64_t i = 0; i < rounds; i++) {
		uint64_t t0 = tb_clock_now_ns_inline(), t1, last, gap = 0;

		if (floor) {
			tb_atomic_store_release(&sh->ping, i + 1);
			t1 = tb_clock_now_ns_inline();
			last = tb_clock_tsc();
			while (tb_atomic_load_acquire(&sh->pong) != i + 1) {
				uint64_t t = tb_clock_tsc();

				if (t - last > gap)
					gap = t - last;
				last = t;
				tb_cpu_relax();
			}
			a.at_ns = tb_clock_now_ns_inline();
		} else {
			memcpy(msg, &i, sizeof(i));
			tb_pub_offer(pub, 1, msg, sizeof(msg));
			t1 = tb_clock_now_ns_inline();
			last = tb_clock_tsc();
			while (a.round != i) {
				uint64_t t = tb_clock_tsc();

				if (t - last > gap)
					gap = t - last;
				last = t;
				if (tb_sub_poll(sub, on_answer, &a, 16) <= 0)
					tb_cpu_relax();
			}
		}
		rtt[i] = a.at_ns - t0;
		commit[i] = t1 - t0;
		gap_a[i] = ticks_to_ns(gap);
	}
	nv_a = nvcsw() - nv0;
	waitpid(child, NULL, 0);
	irq0[1] = interrupts(core_a);
	irq1[1] = interrupts(core_b);

	tb_hist_init(&h_rtt, 1, 10000000000ll, 3);
	tb_hist_init(&h_gap_a, 1, 10000000000ll, 3);
	tb_hist_init(&h_gap_b, 1, 10000000000ll, 3);
	tb_hist_init(&h_commit, 1, 10000000000ll, 3);
	tb_hist_init(&h_handler, 1, 10000000000ll, 3);
	tb_hist_init(&h_oneway, 1, 10000000000ll, 3);
	for (uint64_t i = WARMUP; i < rounds; i++) {
		tb_hist_record(h_rtt, (int64_t)rtt[i]);
		tb_hist_record(h_gap_a, (int64_t)gap_a[i] + 1);
		tb_hist_record(h_gap_b, (int64_t)sh->rec[i].gap_ns + 1);
		tb_hist_record(h_commit, (int64_t)commit[i] + 1);
		if (!floor) {
			tb_hist_record(h_handler, (int64_t)sh->rec[i].handler_ns + 1);
			tb_hist_record(h_oneway, (int64_t)sh->rec[i].oneway_ns + 1);
		}
	}
	printf("bench shm tail: %s, %" PRIu64 " round trips, cores %d and %d\n",
	       floor ? "floor (cache line)" : "tickbus shm", rounds - WARMUP,
	       core_a, core_b);
	print_hist("round trip", h_rtt);
	print_hist("longest poll gap, measuring side", h_gap_a);
	print_hist("longest poll gap, echo side", h_gap_b);
	print_hist(floor ? "store (the ping)" : "commit (tb_pub_offer)", h_commit);
	if (!floor) {
		print_hist("echo handler (its offer)", h_handler);
		print_hist("one way, publish to handler", h_oneway);
	}
	for (int k = 0; k < 2; k++) {
		double pc = k ? 99.9 : 99;
		int64_t cut = tb_hist_value_at_percentile(h_rtt, pc);
		uint64_t n = 0, gaps = 0, slow = 0;

		for (uint64_t i = WARMUP; i < rounds; i++) {
			uint64_t slow_commit = commit[i] > SLOW_COMMIT_NS ||
					       (!floor && sh->rec[i].handler_ns >
							  SLOW_COMMIT_NS);

			if ((int64_t)rtt[i] <= cut)
				continue;
			n++;
			if (gap_a[i] > GAP_NS || sh->rec[i].gap_ns > GAP_NS)
				gaps++;
			else if (slow_commit)
				slow++;
		}
		printf("bench shm tail:   above p%-4g (%" PRId64 " ns): %6" PRIu64
		       " round trips: %5.1f%% with a poll gap > %d ns (the "
		       "machine's), %5.1f%% a slow commit (tickbus's), %5.1f%% "
		       "neither (the transfer)\n", pc, cut, n,
		       n ? 100.0 * gaps / n : 0, GAP_NS, n ? 100.0 * slow / n : 0,
		       n ? 100.0 * (n - gaps - slow) / n : 0);
	}
	printf("bench shm tail:   interrupts during the run: core %d %" PRIu64
	       ", core %d %" PRIu64 "; involuntary context switches: measuring "
	       "side %" PRIu64 ", echo side %" PRIu64 "\n", core_a,
	       irq0[1] - irq0[0], core_b, irq1[1] - irq1[0], nv_a, sh->nvcsw);
	tb_hist_free(h_rtt);
	tb_hist_free(h_gap_a);
	tb_hist_free(h_gap_b);
	tb_hist_free(h_commit);
	tb_hist_free(h_handler);
	tb_hist_free(h_oneway);
	if (!floor) {
		tb_publisher_close(pub);
		tb_subscriber_close(sub);
	}
	unlink(ping.shm_path);
	unlink(pong.shm_path);
	munmap(sh, len);
	free(rtt);
	free(gap_a);
	free(commit);
	return 0;
}

int main(int argc, char **argv)
{
	char la[128] = "";
	FILE *f;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rounds"))
			rounds = strtoull(argv[i + 1], NULL, 10) + WARMUP;
		else if (!strcmp(argv[i], "--ring"))
			ring_size = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--cores"))
			sscanf(argv[i + 1], "%d,%d", &core_a, &core_b);
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("bench shm tail: skipped: needs two cores\n");
		return 0;
	}
	setenv("TICKBUS_QUIET", "1", 0);
	tb_clock_init();
	owner = (int)getpid();
	f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fgets(la, sizeof(la), f))
			la[strcspn(la, "\n")] = '\0';
		fclose(f);
	}
	printf("bench shm tail: load average %s\n", la);
	if (run(1) < 0 || run(0) < 0) {
		fprintf(stderr, "bench shm tail: %s\n", tb_errmsg());
		return 1;
	}
	return 0;
}
