/*
 * bench_shm - shm one-way latency against the floor, and 64-byte throughput.
 *
 * The floor is a raw cache-line ping-pong between the same two pinned cores:
 * two processes bounce a counter through two cache lines of shared memory;
 * half the round trip is the least any same-host transport can take.  The
 * tickbus figure is the same ping-pong through two shm streams (A publishes
 * on one and polls the other, B answers), so both are measured the same way,
 * in the same run, on the same cores.  Each is run RUNS times; the median run
 * (by p50) is reported with the ratio to the floor.
 *
 * Throughput: one publisher offers 64-byte messages as fast as it can while
 * a subscriber on the other core polls; messages per second delivered.
 *
 * With $TB_BENCH_HGRM_DIR set, the distributions of all runs, merged, are
 * also written there (microseconds, for tb-hist): shm-floor.hgrm and
 * shm-tickbus.hgrm (one way), shm-floor-rtt.hgrm (the floor's round trip,
 * the floor of tb-latency's ping-pong).
 *
 * Not a test: it prints figures and always exits 0 unless it could not run.
 * Output lines start with "bench shm" for tests/bench/run-bench.sh.
 */
#include <tickbus/tickbus.h>

#include "bus/barrier.h"
#include <tickbus/hist.h>
#include "tests/common/bench.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS 5
#define WARMUP 20000
#define ROUNDS 200000
#define TPUT_MSGS 20000000ull

static int core_a = 0, core_b = 1;
static uint64_t rounds = ROUNDS, tput_msgs = TPUT_MSGS;
/* All runs merged, per side, for the .hgrm files. */
static tb_hist_t *all_floor, *all_floor_rtt, *all_tickbus;

/* --------------------------------------------------------------- floor */

struct pingpong {
	_Atomic uint64_t ping tb_cache_aligned;
	_Atomic uint64_t pong tb_cache_aligned;
};

static int floor_run(bench_result_t *r)
{
	struct pingpong *pp = mmap(NULL, sizeof(*pp), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	tb_hist_t *h;
	uint64_t i;
	pid_t child;

	if (pp == MAP_FAILED)
		return -1;
	tb_atomic_store_relaxed(&pp->ping, 0);
	tb_atomic_store_relaxed(&pp->pong, 0);
	child = fork();
	if (child == 0) {
		tb_thread_pin(core_b);
		for (i = 1; i <= WARMUP + rounds; i++) {
			while (tb_atomic_load_acquire(&pp->ping) != i)
				tb_cpu_relax();
			tb_atomic_store_release(&pp->pong, i);
		}
		_exit(0);
	}
	tb_thread_pin(core_a);
	tb_hist_init(&h, 1, 10000000000ll, 3);
	for (i = 1; i <= WARMUP + rounds; i++) {
		uint64_t t0 = tb_clock_now_ns();

		tb_atomic_store_release(&pp->ping, i);
		while (tb_atomic_load_acquire(&pp->pong) != i)
			tb_cpu_relax();
		if (i > WARMUP) {
			int64_t rtt = (int64_t)(tb_clock_now_ns() - t0);

			tb_hist_record(h, rtt / 2);
			tb_hist_record(all_floor_rtt, rtt);
		}
	}
	waitpid(child, NULL, 0);
	bench_summarise(h, r);
	tb_hist_merge(all_floor, h);
	tb_hist_free(h);
	munmap(pp, sizeof(*pp));
	return 0;
}

/* ------------------------------------------------------------- tickbus */

static void cfg_for(tb_stream_cfg_t *cfg, const char *name, uint32_t id,
		    uint64_t ring_size)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = id;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = ring_size;
	cfg->idle = TB_IDLE_BUSY_SPIN;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "/dev/shm/tb-bench-%s.%d",
		 name, (int)getpid());
}

struct echo {
	tb_publisher_t *pub;
	uint64_t got;
};

static void on_ping(void *clientd, const tb_msg_t *m)
{
	struct echo *e = clientd;

	while (tb_pub_offer(e->pub, m->template_id, m->data, m->len) < 0)
		tb_cpu_relax();
	e->got++;
}

static int shm_pingpong_run(bench_result_t *r)
{
	tb_stream_cfg_t ping, pong;
	tb_subscriber_t *sub;
	tb_publisher_t *pub;
	uint8_t msg[64];
	tb_hist_t *h;
	uint64_t i, got = 0;
	pid_t child;

	cfg_for(&ping, "ping", 1, 4 << 20);
	cfg_for(&pong, "pong", 2, 4 << 20);
	unlink(ping.shm_path);
	unlink(pong.shm_path);
	memset(msg, 7, sizeof(msg));
	child = fork();
	if (child == 0) {
		struct echo e = {0, 0};

		tb_thread_pin(core_b);
		if (tb_subscriber_open(&sub, &ping) < 0 ||
		    tb_publisher_open(&e.pub, &pong) < 0)
			_exit(1);
		while (e.got < WARMUP + rounds)
			tb_sub_poll(sub, on_ping, &e, 16);
		usleep(100000); /* let the last answer be read before close */
		tb_publisher_close(e.pub);
		tb_subscriber_close(sub);
		_exit(0);
	}
	tb_thread_pin(core_a);
	if (tb_subscriber_open(&sub, &pong) < 0 || tb_publisher_open(&pub, &ping) < 0)
		return -1;
	/* Wait until the echo side is attached and answering. */
	{
		uint64_t until = tb_clock_now_ns() + 30000000000ull;

		while (got == 0) {
			tb_pub_offer(pub, 1, msg, sizeof(msg));
			for (i = 0; i < 100000 && got == 0; i++)
				tb_sub_poll(sub, bench_count, &got, 16);
			if (got == 0 && tb_clock_now_ns() > until) {
				fprintf(stderr, "bench shm: the echo side did "
					"not answer in 30 s\n");
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				tb_publisher_close(pub);
				tb_subscriber_close(sub);
				return -1;
			}
		}
	}
	tb_hist_init(&h, 1, 10000000000ll, 3);
	for (i = got; i < WARMUP + rounds; i++) {
		uint64_t t0 = tb_clock_now_ns(), want = got + 1;

		uint32_t polls = 0;

		tb_pub_offer(pub, 1, msg, sizeof(msg));
		while (got < want) {
			tb_sub_poll(sub, bench_count, &got, 16);
			/* Bounded: on a loaded machine the echo side may have
			 * attached late and missed a ping; fail, never hang. */
			if (++polls % 65536 == 0 &&
			    tb_clock_now_ns() - t0 > 5000000000ull) {
				fprintf(stderr, "bench shm: no answer to ping %"
					PRIu64 " in 5 s; run abandoned\n", i);
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				tb_hist_free(h);
				tb_publisher_close(pub);
				tb_subscriber_close(sub);
				unlink(ping.shm_path);
				unlink(pong.shm_path);
				return -1;
			}
		}
		if (i > WARMUP)
			tb_hist_record(h, (int64_t)(tb_clock_now_ns() - t0) / 2);
	}
	waitpid(child, NULL, 0);
	bench_summarise(h, r);
	tb_hist_merge(all_tickbus, h);
	tb_hist_free(h);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
	unlink(ping.shm_path);
	unlink(pong.shm_path);
	return 0;
}

struct counter {
	uint64_t n;
	uint64_t last;
};

static void on_count(void *clientd, const tb_msg_t *m)
{
	struct counter *c = clientd;

	c->n++;
	c->last = m->seq;
}

/* Messages per second delivered to one subscriber; laps count against it. */
static double shm_throughput_run(uint64_t *lost)
{
	tb_stream_cfg_t cfg;
	uint8_t msg[64];
	int pipefd[2];
	double rate = 0;
	pid_t child;

	cfg_for(&cfg, "tput", 3, 64 << 20);
	unlink(cfg.shm_path);
	memset(msg, 1, sizeof(msg));
	if (pipe(pipefd) != 0)
		return -1;
	child = fork();
	if (child == 0) {
		struct counter c = {0, 0};
		tb_subscriber_t *sub;
		uint64_t t0 = 0, a, b, l = 0;

		close(pipefd[0]);
		tb_thread_pin(core_b);
		if (tb_subscriber_open(&sub, &cfg) < 0)
			_exit(1);
		while (c.last < tput_msgs) {
			int n = tb_sub_poll(sub, on_count, &c, 1024);

			if (n > 0 && !t0)
				t0 = tb_clock_now_ns();
			if ((n == TB_LAPPED || n == TB_GAP) && tb_sub_loss(sub, &a, &b) == 0) {
				l += b - a + 1;
				c.last = b;
			}
			if (n == TB_CLOSED)
				break;
		}
		{
			double secs = t0 ? (tb_clock_now_ns() - t0) / 1e9 : 0;
			double out[2] = {secs > 0 ? c.n / secs : 0, (double)l};

			if (write(pipefd[1], out, sizeof(out)) != sizeof(out))
				_exit(1);
		}
		tb_subscriber_close(sub);
		_exit(0);
	}
	close(pipefd[1]);
	tb_thread_pin(core_a);
	{
		tb_publisher_t *pub;
		double in[2];
		uint64_t i;

		usleep(200000); /* the subscriber waits for the ring and reads from 1 */
		if (tb_publisher_open(&pub, &cfg) < 0)
			return -1;
		for (i = 0; i < tput_msgs; i++)
			tb_pub_offer(pub, 1, msg, sizeof(msg));
		/* Closed before waiting: a reader that attached late (a loaded
		 * machine) and saw none of the last messages ends on
		 * TB_CLOSED instead of waiting for them forever. */
		tb_publisher_close(pub);
		if (read(pipefd[0], in, sizeof(in)) == sizeof(in)) {
			rate = in[0];
			*lost = (uint64_t)in[1];
		}
	}
	waitpid(child, NULL, 0);
	close(pipefd[0]);
	unlink(cfg.shm_path);
	return rate;
}

static void write_hgrm(const char *dir, const char *name, const tb_hist_t *h)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || tb_hist_write_hgrm(h, f, 1000.0, 0) < 0)
		fprintf(stderr, "bench shm: cannot write %s\n", path);
	if (f)
		fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	bench_result_t fl[RUNS], tb[RUNS];
	double tput[RUNS];
	uint64_t lost[RUNS];
	int i;

	if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
		rounds = 20000;
		tput_msgs = 2000000;
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("bench shm: skipped: needs two cores\n");
		return 0;
	}
	setenv("TICKBUS_QUIET", "1", 0);
	if (tb_hist_init(&all_floor, 1, 10000000000ll, 3) < 0 ||
	    tb_hist_init(&all_floor_rtt, 1, 10000000000ll, 3) < 0 ||
	    tb_hist_init(&all_tickbus, 1, 10000000000ll, 3) < 0) {
		fprintf(stderr, "bench shm: %s\n", tb_errmsg());
		return 1;
	}
	for (i = 0; i < RUNS; i++) {
		if (floor_run(&fl[i]) < 0 || shm_pingpong_run(&tb[i]) < 0) {
			fprintf(stderr, "bench shm: %s\n", tb_errmsg());
			return 1;
		}
		lost[i] = 0;
		tput[i] = shm_throughput_run(&lost[i]);
	}
	qsort(tput, RUNS, sizeof(tput[0]), cmp_double);
	printf("bench shm: one-way latency, ns, median of %d runs of %" PRIu64
	       " round trips, cores %d and %d\n", RUNS, rounds, core_a, core_b);
	bench_print_vs_floor("bench shm", 22, fl, "floor (cache line)", tb,
			     "tickbus shm", RUNS,
			     "   (goal: p50 <= 1.5, p99.9 <= 3)");
	printf("bench shm: throughput 64-byte messages: %.2f M msg/s median "
	       "(runs: %.2f .. %.2f), %.0f MB/s of payload\n",
	       tput[RUNS / 2] / 1e6, tput[0] / 1e6, tput[RUNS - 1] / 1e6,
	       tput[RUNS / 2] * 64 / 1e6);
	{
		uint64_t total = 0;

		for (i = 0; i < RUNS; i++)
			total += lost[i];
		printf("bench shm: throughput runs lapped the reader for %" PRIu64
		       " messages in all (publisher never waits)\n", total);
	}
	if (getenv("TB_BENCH_HGRM_DIR") && *getenv("TB_BENCH_HGRM_DIR")) {
		const char *dir = getenv("TB_BENCH_HGRM_DIR");

		write_hgrm(dir, "shm-floor.hgrm", all_floor);
		write_hgrm(dir, "shm-floor-rtt.hgrm", all_floor_rtt);
		write_hgrm(dir, "shm-tickbus.hgrm", all_tickbus);
	}
	tb_hist_free(all_floor);
	tb_hist_free(all_floor_rtt);
	tb_hist_free(all_tickbus);
	return 0;
}
