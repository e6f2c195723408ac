/*
 * bench_sources - what arbitration between two copies of a stream (hot
 * failover, subscriber/sources.c) adds to delivery, against one copy in
 * the same run.
 *
 * Latency: a ping-pong between two pinned cores over shm, as bench_shm's.
 * The floor is the ping stream taken from one copy (a plain subscriber);
 * the figure is the same ping published on two copies (the first copy
 * first, as the faster of two feed handlers would) and taken from both by
 * tb_subscriber_open_sources.  One way = half the round trip; each is run
 * RUNS times and the median run (by p50) reported with the ratio.
 *
 * Instructions: this binary re-run under callgrind counts what tb_sub_poll
 * executes per message delivered, one message per poll (the live case),
 * for one copy and for two: the difference is the arbitration's own cost,
 * independent of the machine's load.  Skipped, saying so, without
 * valgrind.
 *
 * Not a test: it prints figures and exits 0 unless it could not run.
 * Output lines start with "bench sources".
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
#include <sys/wait.h>
#include <unistd.h>

#define RUNS 5
#define WARMUP 20000
#define ROUNDS 100000
#define CG_COUNT 20000

static int core_a = 0, core_b = 1;
static int run_pid; /* names the rings the same in the forked side */

static void cfg_for(tb_stream_cfg_t *cfg, const char *name, uint32_t id)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = id;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = 4 << 20;
	cfg->idle = TB_IDLE_BUSY_SPIN;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path),
		 "/dev/shm/tb-bench-src-%s.%d", name, run_pid);
}

/* The ping stream: `copies` copies (1 or 2) of stream 1, and the whole. */
static void ping_cfgs(tb_stream_cfg_t *whole, tb_stream_cfg_t copy[2])
{
	cfg_for(whole, "ping", 1);
	cfg_for(&copy[0], "ping_a", 1);
	cfg_for(&copy[1], "ping_b", 1);
}

static int open_ping_sub(tb_subscriber_t **sub, int copies)
{
	tb_stream_cfg_t whole, copy[2];

	ping_cfgs(&whole, copy);
	if (copies == 1)
		return tb_subscriber_open(sub, &copy[0]);
	return tb_subscriber_open_sources(sub, &whole, copy, 2);
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

/* One ping-pong run with the ping taken from `copies` copies. */
static int pingpong_run(int copies, bench_result_t *r)
{
	tb_stream_cfg_t whole, copy[2], pong;
	tb_publisher_t *pub[2] = {NULL, NULL};
	tb_subscriber_t *sub;
	uint8_t msg[64];
	uint64_t i, got = 0;
	int ready[2];
	tb_hist_t *h;
	pid_t child;
	char c0;

	ping_cfgs(&whole, copy);
	cfg_for(&pong, "pong", 2);
	memset(msg, 7, sizeof(msg));
	for (int c = 0; c < 2; c++)
		unlink(copy[c].shm_path);
	unlink(pong.shm_path);
	/* The publishers first: the echo side attaches from their start. */
	tb_thread_pin(core_a);
	for (int c = 0; c < copies; c++)
		if (tb_publisher_open_epoch(&pub[c], &copy[c], 99) < 0)
			return -1;
	if (tb_subscriber_open(&sub, &pong) < 0 || pipe(ready) != 0)
		return -1;
	child = fork();
	if (child == 0) {
		struct echo e = {0, 0};
		tb_subscriber_t *ps;

		tb_thread_pin(core_b);
		if (open_ping_sub(&ps, copies) < 0 ||
		    tb_publisher_open(&e.pub, &pong) < 0 ||
		    write(ready[1], "r", 1) != 1)   /* attached: ping away */
			_exit(1);
		while (e.got < WARMUP + ROUNDS)
			tb_sub_poll(ps, on_ping, &e, 16);
		usleep(100000);
		tb_publisher_close(e.pub);
		tb_subscriber_close(ps);
		_exit(0);
	}
	close(ready[1]);
	if (read(ready[0], &c0, 1) != 1) {
		close(ready[0]);
		waitpid(child, NULL, 0);
		return -1;
	}
	close(ready[0]);
	tb_hist_init(&h, 1, 10000000000ll, 3);
	for (i = 0; i < WARMUP + ROUNDS; i++) {
		uint64_t t0 = tb_clock_now_ns(), want = got + 1;
		uint32_t polls = 0;

		for (int c = 0; c < copies; c++)
			tb_pub_offer(pub[c], 1, msg, sizeof(msg));
		while (got < want) {
			tb_sub_poll(sub, bench_count, &got, 16);
			if (++polls % 65536 == 0 &&
			    tb_clock_now_ns() - t0 > 10000000000ull) {
				fprintf(stderr, "bench sources: no answer to ping %"
					PRIu64 " in 10 s; run abandoned\n", i);
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				tb_hist_free(h);
				return -1;
			}
		}
		if (i >= WARMUP)
			tb_hist_record(h, (int64_t)(tb_clock_now_ns() - t0) / 2);
	}
	waitpid(child, NULL, 0);
	bench_summarise(h, r);
	tb_hist_free(h);
	tb_subscriber_close(sub);
	for (int c = 0; c < copies; c++)
		tb_publisher_close(pub[c]);
	for (int c = 0; c < 2; c++)
		unlink(copy[c].shm_path);
	unlink(pong.shm_path);
	return 0;
}

/* ------------------------------------------------------------ callgrind */

/* Under callgrind: CG_COUNT messages, each offered on `copies` copies and
 * delivered by one tb_sub_poll (the only function collected). */
static int callgrind_child(int copies)
{
	tb_stream_cfg_t whole, copy[2];
	tb_publisher_t *pub[2] = {NULL, NULL};
	tb_subscriber_t *sub;
	uint8_t msg[64] = {0};
	uint64_t got = 0;

	ping_cfgs(&whole, copy);
	for (int c = 0; c < copies; c++)
		if (tb_publisher_open_epoch(&pub[c], &copy[c], 99) < 0)
			return 1;
	if (open_ping_sub(&sub, copies) < 0)
		return 1;
	while (tb_sub_poll(sub, bench_count, &got, 16) == TB_NOT_CONNECTED)
		;
	for (int i = 0; i < CG_COUNT; i++) {
		uint64_t want = got + 1;

		for (int c = 0; c < copies; c++)
			tb_pub_offer(pub[c], 1, msg, sizeof(msg));
		while (got < want)
			tb_sub_poll(sub, bench_count, &got, 1);
	}
	tb_subscriber_close(sub);
	for (int c = 0; c < copies; c++) {
		tb_publisher_close(pub[c]);
		unlink(copy[c].shm_path);
	}
	return 0;
}

/* Instructions per delivered message inside tb_sub_poll with `copies`
 * copies, or -1 when valgrind is not there. */
static double callgrind_per_message(int copies)
{
	char out[128], cmd[1024], line[512];
	double total = -1;
	FILE *f;

	snprintf(out, sizeof(out), "/tmp/bench_sources.%d.callgrind", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "valgrind --tool=callgrind --callgrind-out-file=%s "
		 "--separate-threads=yes --toggle-collect=tb_sub_poll "
		 "/proc/%d/exe --callgrind %d >/dev/null 2>&1",
		 out, (int)getpid(), copies);
	if (system(cmd) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "callgrind_annotate --threshold=100 %s-01 "
		 "2>/dev/null", out);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char digits[64];
		int k = 0;

		if (!strstr(line, "PROGRAM TOTALS"))
			continue;
		for (const char *c = line; *c && k < 63; c++) {
			if (*c >= '0' && *c <= '9')
				digits[k++] = *c;
			else if (*c != ',' && *c != ' ')
				break;
		}
		digits[k] = 0;
		total = atof(digits);
	}
	pclose(f);
	snprintf(cmd, sizeof(cmd), "rm -f %s*", out);
	if (system(cmd) != 0)
		(void)0;
	return total < 0 ? -1 : total / CG_COUNT;
}

int main(int argc, char **argv)
{
	bench_result_t one[RUNS], two[RUNS];
	double i1, i2;
	int runs = 0;

	run_pid = (int)getpid();
	if (argc >= 3 && strcmp(argv[1], "--callgrind") == 0)
		return callgrind_child(atoi(argv[2]) == 2 ? 2 : 1);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		core_b = 0;
	(void)tb_clock_now_ns();
	printf("bench sources: shm ping-pong, one way (ns), %d runs of %d, "
	       "median run; cores %d and %d\n", RUNS, ROUNDS, core_a, core_b);
	for (int r = 0; r < RUNS; r++) {
		if (pingpong_run(1, &one[runs]) < 0 ||
		    pingpong_run(2, &two[runs]) < 0) {
			fprintf(stderr, "bench sources: a run failed; skipped\n");
			continue;
		}
		runs++;
	}
	if (runs == 0) {
		printf("bench sources: could not run\n");
		return 1;
	}
	bench_print_vs_floor("bench sources", 22, one, "one copy (floor)", two,
			     "two copies, arbitrated", runs, "");
	i1 = callgrind_per_message(1);
	i2 = callgrind_per_message(2);
	if (i1 < 0 || i2 < 0) {
		printf("bench sources: instructions: valgrind not available; "
		       "skipped\n");
		return 0;
	}
	printf("bench sources: instructions per message in tb_sub_poll "
	       "(callgrind, one per poll): one copy %.0f, two copies %.0f, "
	       "arbitration %+.0f\n", i1, i2, i2 - i1);
	return 0;
}
