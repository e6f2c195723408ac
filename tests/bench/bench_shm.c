/*
 * bench_shm - the shm transport against its floors, every goal as a ratio
 * measured in one run.
 *
 * Floors, on the same two pinned cores, interleaved run by run with what
 * they bound so that a noisy neighbour hurts both alike:
 *   latency     a raw cache-line ping-pong: two processes bounce a counter
 *               through two cache lines of shared memory, spinning with one
 *               pause per look; its round trip is the least any same-host
 *               transport can take;
 *   throughput  a minimal single-producer single-consumer ring of 96-byte
 *               slots: the producer copies 64 bytes in and store-releases
 *               the slot's sequence word; the consumer polls the next
 *               slot's sequence word and copies the payload out; the
 *               producer waits only when the ring is full (it reads the
 *               consumer's position, published every 64 messages).
 * tickbus, the same way:
 *   latency     two shm streams through the public API, A publishes 64
 *               bytes and polls the other stream, B's handler answers; the
 *               round trip stamped as tb-latency stamps it (before the
 *               offer, in the handler);
 *   tb-latency  the tool users run (tools/tb-latency.c), same cores, same
 *               size, busy-spin: it must agree with the above within 10%;
 *   throughput  one publisher offers 64-byte messages, one subscriber
 *               process polls; the publisher is held back (by the bench,
 *               not by tickbus, whose shm writer never waits) when it is
 *               half a ring ahead, exactly as the floor's producer, so the
 *               rate is the one at which nothing is lost, and lost must be
 *               0.  Twice: one tb_pub_offer a message, each stamped with
 *               its own reading of the clock, and BURST messages a
 *               tb_pub_offerv, one reading for the burst (a TSC read is
 *               tens of cycles: a good part of a small offer).
 * Either throughput run settles, by chance and the machine's state, into
 * a pace it keeps.  A reader that has caught up waits at the line the
 * writer writes next, so every message costs that line's transfer each
 * way, and both sides go at that pace; a writer that keeps ahead lets the
 * reader stream lines written a while ago, many times faster.  The
 * floor's rate alone has spanned 12 to 105 M msg/s within one set of runs
 * here, so each run's rates are printed, with how often its reader found
 * nothing (empty polls a message: near 0 when it kept behind), to show
 * what the median ratio is made of.
 * And the cost in instructions (callgrind, load-independent): tb_pub_offer
 * and tb_sub_poll per 64-byte message, polled one and 64 at a time, and
 * tb_pub_offerv's per message, BURST at a time.
 *
 * Every goal is the median over RUNS (>= 5) runs of the run's own ratio,
 * printed beside the goal, with the command that reproduces it.  Not a
 * test: it exits 0 unless it could not run.  Output lines start with
 * "bench shm" for tests/bench/run-bench.sh.  With $TB_BENCH_HGRM_DIR set,
 * the distributions of all runs, merged, are written there (microseconds,
 * for tb-hist): shm-floor-rtt.hgrm and shm-tickbus-rtt.hgrm.
 *
 * Modes:
 *   bench_shm [--quick] [--runs N] [--cores A,B]
 *   bench_shm --instructions              the callgrind counts alone
 *   bench_shm --callgrind BATCH COUNT     one process, no timing: offer
 *                                         BATCH, poll them, COUNT in all
 *                                         (run under callgrind by the bench
 *                                         itself)
 *   bench_shm --callgrind-v BATCH COUNT   the same, each BATCH one
 *                                         tb_pub_offerv
 */
#include <tickbus/tickbus.h>

#include "bus/barrier.h"
#include "bus/clock.h"
#include <tickbus/hist.h>
#include "tests/common/bench.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS_DEFAULT 5
#define RUNS_MAX 15
#define WARMUP 20000
#define ROUNDS 200000
#define TPUT_MSGS 20000000ull
#define TPUT_RING (4u << 20)
#define SPSC_SLOTS 32768u /* 3 MiB of 96-byte slots, about TPUT_RING */
#define CG_COUNT 64000
/* Messages a tb_pub_offerv call takes in the burst runs. */
#define BURST 16

/* The goals (DESIGN.md section 8, issue 12). */
#define GOAL_P50 1.3
#define GOAL_P99 1.6
#define GOAL_P999 2.5
#define GOAL_TPUT 0.4
#define GOAL_AGREE 0.10

static int core_a = 0, core_b = 1, runs = RUNS_DEFAULT, quick;
static uint64_t rounds = ROUNDS, tput_msgs = TPUT_MSGS;
static tb_hist_t *all_floor, *all_tickbus;
static char self[PATH_MAX];

typedef struct rtt {
	int64_t p50, p99, p999, max;
} rtt_t;

static void summarise(const tb_hist_t *h, rtt_t *r)
{
	r->p50 = tb_hist_value_at_percentile(h, 50);
	r->p99 = tb_hist_value_at_percentile(h, 99);
	r->p999 = tb_hist_value_at_percentile(h, 99.9);
	r->max = tb_hist_max(h);
}

static void *shared(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------ latency floor */

struct pingpong {
	_Atomic uint64_t ping tb_cache_aligned;
	_Atomic uint64_t pong tb_cache_aligned;
};

static int floor_rtt(rtt_t *r)
{
	struct pingpong *pp = shared(sizeof(*pp));
	tb_hist_t *h;
	uint64_t i;
	pid_t child;

	if (!pp)
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
		if (i > WARMUP)
			tb_hist_record(h, (int64_t)(tb_clock_now_ns() - t0));
	}
	waitpid(child, NULL, 0);
	summarise(h, r);
	tb_hist_merge(all_floor, h);
	tb_hist_free(h);
	munmap(pp, sizeof(*pp));
	return 0;
}

/* ---------------------------------------------------- tickbus latency */

static void cfg_for(tb_stream_cfg_t *cfg, const char *name, uint32_t id,
		    uint64_t ring_size)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = id;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = ring_size;
	cfg->idle = TB_IDLE_BUSY_SPIN;
	/* Neither side is dead for being descheduled a second. */
	cfg->liveness_timeout_ms = 60000;
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

struct answer {
	uint64_t got, at_ns;
};

static void on_answer(void *clientd, const tb_msg_t *m)
{
	struct answer *a = clientd;

	(void)m;
	a->at_ns = tb_clock_now_ns_inline();
	a->got++;
}

static int tickbus_rtt(rtt_t *r)
{
	tb_stream_cfg_t ping, pong;
	tb_subscriber_t *sub;
	tb_publisher_t *pub;
	struct answer a = {0, 0};
	uint8_t msg[64];
	tb_hist_t *h;
	uint64_t i;
	pid_t child;
	int rc = 0;

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
		/* Every ping until the pinger closes: a slow start gets it
		 * more than WARMUP + rounds (it pings until answered), and
		 * an echo that stopped at a count left its last pings
		 * unanswered. */
		for (;;) {
			int n = tb_sub_poll(sub, on_ping, &e, 16);

			if (n == TB_CLOSED || n == TB_PUBLISHER_DEAD)
				break;
			if (n <= 0)
				tb_cpu_relax();
		}
		tb_publisher_close(e.pub);
		tb_subscriber_close(sub);
		_exit(0);
	}
	tb_thread_pin(core_a);
	if (tb_subscriber_open(&sub, &pong) < 0 || tb_publisher_open(&pub, &ping) < 0)
		return -1;
	/* Until the echo side is attached and answering. */
	for (uint64_t until = tb_clock_now_ns() + 30000000000ull; a.got == 0;) {
		tb_pub_offer(pub, 1, msg, sizeof(msg));
		for (i = 0; i < 100000 && a.got == 0; i++)
			tb_sub_poll(sub, on_answer, &a, 16);
		if (a.got == 0 && tb_clock_now_ns() > until) {
			fprintf(stderr, "bench shm: the echo side did not answer "
				"in 30 s\n");
			rc = -1;
			goto out;
		}
	}
	tb_hist_init(&h, 1, 10000000000ll, 3);
	for (i = a.got; i < WARMUP + rounds; i++) {
		uint64_t want = a.got + 1, t0 = tb_clock_now_ns_inline();
		uint32_t polls = 0;

		tb_pub_offer(pub, 1, msg, sizeof(msg));
		while (a.got < want) {
			if (tb_sub_poll(sub, on_answer, &a, 16) > 0)
				continue;
			tb_cpu_relax();
			/* Bounded: fail, never hang. */
			if (++polls % 65536 == 0 &&
			    tb_clock_now_ns() - t0 > 5000000000ull) {
				fprintf(stderr, "bench shm: no answer to ping %"
					PRIu64 " in 5 s; run abandoned\n", i);
				tb_hist_free(h);
				rc = -1;
				goto out;
			}
		}
		if (i >= WARMUP)
			tb_hist_record(h, (int64_t)(a.at_ns - t0));
	}
	summarise(h, r);
	tb_hist_merge(all_tickbus, h);
	tb_hist_free(h);
out:
	if (rc < 0)
		kill(child, SIGKILL);
	tb_publisher_close(pub);  /* the echo side stops at its close */
	waitpid(child, NULL, 0);
	tb_subscriber_close(sub);
	unlink(ping.shm_path);
	unlink(pong.shm_path);
	return rc;
}

/* ------------------------------------------------------- tb-latency */

/* Runs the tool users run, on the same cores and size; its round trip
 * percentiles.  -1 when it is not there or failed. */
static int tool_rtt(rtt_t *r)
{
	char cmd[PATH_MAX + 256], line[1024], *p;
	FILE *f;
	int found = 0;

	snprintf(cmd, sizeof(cmd), "timeout 600 %s/../bin/tb-latency -n %" PRIu64
		 " -w %d -s 64 --cores %d,%d --idle busy-spin 2>&1", self,
		 rounds, WARMUP, core_a, core_b);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "mode=pingpong")) {
			if (!strstr(line, "warning") && !strstr(line, "measuring"))
				fprintf(stderr, "bench shm: %s", line);
			continue;
		}
		if ((p = strstr(line, " p50=")))
			r->p50 = atoll(p + 5);
		if ((p = strstr(line, " p99=")))
			r->p99 = atoll(p + 5);
		if ((p = strstr(line, " p99.9=")))
			r->p999 = atoll(p + 7);
		if ((p = strstr(line, " max=")))
			r->max = atoll(p + 5);
		found = 1;
	}
	return pclose(f) == 0 && found ? 0 : -1;
}

/* ---------------------------------------------------- throughput floor */

struct slot {
	_Atomic uint64_t seq;  /* i + 1 once slot i holds message i */
	uint8_t payload[64];
	uint8_t pad[24];
};

_Static_assert(sizeof(struct slot) == 96, "96-byte slots");

struct spsc {
	_Atomic uint64_t head tb_cache_aligned; /* consumer's position */
	_Atomic uint64_t done tb_cache_aligned;
	double rate;
	uint64_t empty;
	struct slot slots[SPSC_SLOTS] tb_cache_aligned;
};

/* Messages per second through the SPSC floor; *empty: the consumer's
 * empty looks a message. */
static double floor_tput(double *empty)
{
	struct spsc *q = shared(sizeof(*q));
	uint8_t msg[64];
	double rate;
	pid_t child;

	if (!q)
		return -1;
	memset(msg, 1, sizeof(msg));
	child = fork();
	if (child == 0) {
		uint8_t out[64];
		uint64_t i, t0 = 0, sum = 0, idle = 0;

		tb_thread_pin(core_b);
		for (i = 0; i < tput_msgs; i++) {
			struct slot *s = &q->slots[i % SPSC_SLOTS];

			while (tb_atomic_load_acquire(&s->seq) != i + 1) {
				idle++;
				tb_cpu_relax();
			}
			memcpy(out, s->payload, sizeof(out));
			sum += out[i & 63];
			if (i == 0)
				t0 = tb_clock_now_ns();
			if ((i & 63) == 63)
				tb_atomic_store_release(&q->head, i + 1);
		}
		q->rate = (double)(tput_msgs - 1) / ((tb_clock_now_ns() - t0) / 1e9);
		q->empty = idle;
		tb_atomic_store_release(&q->done, sum | 1);
		_exit(0);
	}
	tb_thread_pin(core_a);
	for (uint64_t i = 0, head = 0; i < tput_msgs; i++) {
		struct slot *s = &q->slots[i % SPSC_SLOTS];

		while (i - head >= SPSC_SLOTS / 2)
			head = tb_atomic_load_acquire(&q->head);
		memcpy(s->payload, msg, sizeof(msg));
		tb_atomic_store_release(&s->seq, i + 1);
	}
	waitpid(child, NULL, 0);
	rate = tb_atomic_load_acquire(&q->done) ? q->rate : -1;
	*empty = (double)q->empty / (double)tput_msgs;
	munmap(q, sizeof(*q));
	return rate;
}

/* -------------------------------------------------- tickbus throughput */

struct tput_share {
	_Atomic uint64_t seen tb_cache_aligned; /* last sequence accounted */
	double rate;
	uint64_t lost, bad, empty;
	_Atomic int done;
};

struct counter {
	uint64_t n, last, bad;
};

static void on_count(void *clientd, const tb_msg_t *m)
{
	struct counter *c = clientd;

	if (m->seq != c->last + 1)
		c->bad++;
	c->n++;
	c->last = m->seq;
}

/* Messages per second delivered to one subscriber process with nothing
 * lost, offered one at a time (`burst` 1: tb_pub_offer) or `burst` at a
 * time (tb_pub_offerv); *lost counts what was lost all the same; *empty:
 * the subscriber's empty polls a message. */
static double tickbus_tput(int burst, uint64_t *lost, double *empty)
{
	struct tput_share *sh = shared(sizeof(*sh));
	/* Half the ring, in 96-byte frames: the floor's margin. */
	const uint64_t ahead = TPUT_RING / 96 / 2;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	uint8_t msg[64];
	tb_pub_msg_t v[BURST];
	double rate;
	pid_t child;

	if (!sh)
		return -1;
	for (int k = 0; k < BURST; k++)
		v[k] = (tb_pub_msg_t){msg, sizeof(msg), 1};
	cfg_for(&cfg, "tput", 3, TPUT_RING);
	unlink(cfg.shm_path);
	memset(msg, 1, sizeof(msg));
	child = fork();
	if (child == 0) {
		struct counter c = {0, 0, 0};
		tb_subscriber_t *sub;
		uint64_t t0 = 0, a, b, l = 0, idle = 0;

		tb_thread_pin(core_b);
		if (tb_subscriber_open(&sub, &cfg) < 0)
			_exit(1);
		while (c.last < tput_msgs) {
			int n = tb_sub_poll(sub, on_count, &c, 256);

			if (n > 0) {
				if (!t0)
					t0 = tb_clock_now_ns();
				tb_atomic_store_release(&sh->seen, c.last);
				continue;
			}
			if ((n == TB_LAPPED || n == TB_GAP) &&
			    tb_sub_loss(sub, &a, &b) == 0) {
				l += b - a + 1;
				c.last = b;
			}
			if (n == TB_CLOSED)
				break;
			idle += n == 0;
			tb_cpu_relax();
		}
		sh->rate = t0 ? (double)c.n / ((tb_clock_now_ns() - t0) / 1e9) : 0;
		sh->lost = l;
		sh->bad = c.bad;
		sh->empty = idle;
		tb_atomic_store_release(&sh->done, 1);
		tb_subscriber_close(sub);
		_exit(0);
	}
	tb_thread_pin(core_a);
	usleep(200000); /* the subscriber waits for the ring and reads from 1 */
	if (tb_publisher_open(&pub, &cfg) < 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		return -1;
	}
	/* tput_msgs is a multiple of BURST. */
	for (uint64_t i = 1, seen = 0; i <= tput_msgs; i += (uint64_t)burst) {
		while (i + (uint64_t)burst - 1 - seen > ahead)
			seen = tb_atomic_load_acquire(&sh->seen);
		if (burst == 1)
			tb_pub_offer(pub, 1, msg, sizeof(msg));
		else
			tb_pub_offerv(pub, v, burst);
	}
	/* Closed before waiting: a reader that attached late ends on
	 * TB_CLOSED instead of waiting forever. */
	tb_publisher_close(pub);
	waitpid(child, NULL, 0);
	rate = tb_atomic_load_acquire(&sh->done) ? sh->rate : -1;
	*lost = sh->lost + sh->bad;
	*empty = (double)sh->empty / (double)tput_msgs;
	munmap(sh, sizeof(*sh));
	unlink(cfg.shm_path);
	return rate;
}

/* ------------------------------------------------------ instructions */

static void count_msg(void *clientd, const tb_msg_t *m)
{
	(void)m;
	++*(uint64_t *)clientd;
}

/* The --callgrind mode: no timing, one process; `vec`: each batch
 * offered with one tb_pub_offerv. */
static int callgrind_main(int batch, int count, int vec)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	uint8_t msg[64];
	tb_pub_msg_t v[64];
	uint64_t got = 0;

	if (batch < 1 || batch > 64 || count % batch)
		return 1;
	memset(msg, 3, sizeof(msg));
	for (int k = 0; k < 64; k++)
		v[k] = (tb_pub_msg_t){msg, sizeof(msg), 1};
	cfg_for(&cfg, "cg", 5, 4 << 20);
	unlink(cfg.shm_path);
	if (tb_publisher_open(&pub, &cfg) < 0 || tb_subscriber_open(&sub, &cfg) < 0)
		return 1;
	for (int i = 0; i < count; i += batch) {
		uint64_t want = got + (uint64_t)batch;

		if (vec && tb_pub_offerv(pub, v, batch) != batch)
			return 1;
		for (int b = 0; !vec && b < batch; b++)
			tb_pub_offer(pub, 1, msg, sizeof(msg));
		while (got < want)
			if (tb_sub_poll(sub, count_msg, &got, batch) < 0)
				return 1;
	}
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return got == (uint64_t)count ? 0 : 1;
}

/* Inclusive instructions of `fn` in a callgrind_annotate listing. */
static double annotated(const char *file, const char *fn)
{
	char cmd[512], line[1024];
	double v = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "callgrind_annotate --inclusive=yes "
		 "--threshold=100 %s 2>/dev/null", file);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char digits[64], *colon = strrchr(line, ':');
		int k = 0;

		/* "file:fn [binary]" or "file:fn" (annotate drops the
		 * binary for the files it can read), never "fn.cold". */
		if (!colon || strncmp(colon + 1, fn, strlen(fn)) != 0 ||
		    !strchr(" \n", colon[1 + strlen(fn)]))
			continue;
		for (const char *c = line; *c && k < 63; c++) {
			if (*c >= '0' && *c <= '9')
				digits[k++] = *c;
			else if (*c != ',' && *c != ' ')
				break;
		}
		digits[k] = 0;
		/* Inlined code is also listed per source file: the function
		 * itself is the largest entry. */
		if (k && atof(digits) > v)
			v = atof(digits);
	}
	pclose(f);
	return v;
}

/* Instructions per message of tb_pub_offer (tb_pub_offerv with `vec`)
 * and tb_sub_poll (the handler's own excluded), messages offered and
 * polled `batch` at a time; -1 without valgrind. */
static int instructions(int batch, int vec, double *offer, double *poll)
{
	char out[128], cmd[PATH_MAX + 512];
	double handler;

	snprintf(out, sizeof(out), "/tmp/bench_shm.%d.callgrind", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "valgrind --tool=callgrind --callgrind-out-file=%s "
		 "--toggle-collect=tb_pub_offer --toggle-collect=tb_pub_offerv "
		 "--toggle-collect=tb_sub_poll "
		 "%s/bench_shm --callgrind%s %d %d >/dev/null 2>&1", out, self,
		 vec ? "-v" : "", batch, CG_COUNT);
	if (system(cmd) != 0)
		return -1;
	*offer = annotated(out, vec ? "tb_pub_offerv" : "tb_pub_offer") /
		 CG_COUNT;
	*poll = annotated(out, "tb_sub_poll") / CG_COUNT;
	handler = annotated(out, "count_msg");
	if (handler > 0)
		*poll -= handler / CG_COUNT;
	unlink(out);
	return *offer > 0 && *poll > 0 ? 0 : -1;
}

/* Instructions per message, load-independent (bench_shm --instructions
 * prints only these). */
static void print_instructions(void)
{
	double o1, p1, o64, p64, ov, pv;

	if (instructions(1, 0, &o1, &p1) == 0 &&
	    instructions(64, 0, &o64, &p64) == 0 &&
	    instructions(BURST, 1, &ov, &pv) == 0)
		printf("bench shm: instructions per 64-byte message (callgrind): "
		       "tb_pub_offer %.0f, tb_pub_offerv %.0f (%d at a time); "
		       "tb_sub_poll %.0f polled one at a time, %.0f 64 at a "
		       "time\n", o1, ov, BURST, p1, p64);
	else
		printf("bench shm: instructions: callgrind not available "
		       "(valgrind); skipped\n");
}

/* ------------------------------------------------------------ report */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *verdict(int met)
{
	return met ? "met" : "NOT met";
}

static void loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");

	buf[0] = '\0';
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
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

/* Each throughput run's rates, and how often its readers found nothing
 * (see the essay): the floor, tickbus offering one at a time (t), and
 * BURST at a time (v). */
static void print_tput_runs(const double *frate, const double *fidle,
			    const double *trate, const double *tidle,
			    const double *vrate, const double *vidle, int n)
{
	printf("bench shm:   each run, M msg/s (empty polls a message): "
	       "floor, tickbus one at a time, %d at a time\n", BURST);
	for (int i = 0; i < n; i++)
		printf("bench shm:     run %d: %6.1f (%.2f)  %5.1f (%.2f)  "
		       "%5.1f (%.2f)\n", i + 1, frate[i] / 1e6, fidle[i],
		       trate[i] / 1e6, tidle[i], vrate[i] / 1e6, vidle[i]);
}

/* The median of the runs' own ratios a[i] / b[i]. */
static double median_ratio(const double *a, const double *b, int n)
{
	double r[RUNS_MAX];

	for (int i = 0; i < n; i++)
		r[i] = a[i] / b[i];
	return median(r, n);
}

/* The largest of v[0..n). */
static double best_of(const double *v, int n)
{
	double b = v[0];

	for (int i = 1; i < n; i++)
		b = v[i] > b ? v[i] : b;
	return b;
}

/* The median of v[0..n), v left in order. */
static double median_of(const double *v, int n)
{
	double c[RUNS_MAX];

	memcpy(c, v, (size_t)n * sizeof(c[0]));
	return median(c, n);
}

/* The run's value of a percentile, by index 0..3: p50, p99, p99.9, max. */
static int64_t pct(const rtt_t *r, int k)
{
	return k == 0 ? r->p50 : k == 1 ? r->p99 : k == 2 ? r->p999 : r->max;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"p50", "p99", "p99.9", "max"};
	static const double goals[] = {GOAL_P50, GOAL_P99, GOAL_P999, 0};
	rtt_t fl[RUNS_MAX], tb[RUNS_MAX], tool[RUNS_MAX];
	double ftput[RUNS_MAX], ttput[RUNS_MAX], ratio[RUNS_MAX];
	double fidle[RUNS_MAX], tidle[RUNS_MAX], vtput[RUNS_MAX], vidle[RUNS_MAX];
	uint64_t lost[RUNS_MAX], lost_all = 0;
	char la0[128], la1[128];
	int i, have_tool = 1;
	ssize_t n;

	if (argc == 4 && strcmp(argv[1], "--callgrind") == 0)
		return callgrind_main(atoi(argv[2]), atoi(argv[3]), 0);
	if (argc == 4 && strcmp(argv[1], "--callgrind-v") == 0)
		return callgrind_main(atoi(argv[2]), atoi(argv[3]), 1);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	if (argc == 2 && strcmp(argv[1], "--instructions") == 0) {
		print_instructions();
		return 0;
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = 1;
			rounds = 20000;
			tput_msgs = 2000000;
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			runs = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--cores") && i + 1 < argc &&
			   sscanf(argv[i + 1], "%d,%d", &core_a, &core_b) == 2) {
			i++;
		} else {
			fprintf(stderr, "usage: bench_shm [--quick] [--runs 5..%d] "
				"[--cores A,B]\n", RUNS_MAX);
			return 2;
		}
	}
	if (runs < 5 || runs > RUNS_MAX) {
		fprintf(stderr, "bench shm: --runs must be 5..%d (goals are "
			"medians of at least 5 runs)\n", RUNS_MAX);
		return 2;
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("bench shm: skipped: needs two cores\n");
		return 0;
	}
	setenv("TICKBUS_QUIET", "1", 0);
	tb_clock_init();
	if (tb_hist_init(&all_floor, 1, 10000000000ll, 3) < 0 ||
	    tb_hist_init(&all_tickbus, 1, 10000000000ll, 3) < 0) {
		fprintf(stderr, "bench shm: %s\n", tb_errmsg());
		return 1;
	}
	loadavg(la0, sizeof(la0));
	for (i = 0; i < runs; i++) {
		if (floor_rtt(&fl[i]) < 0 || tickbus_rtt(&tb[i]) < 0) {
			fprintf(stderr, "bench shm: %s\n", tb_errmsg());
			return 1;
		}
		if (have_tool && tool_rtt(&tool[i]) < 0) {
			fprintf(stderr, "bench shm: tb-latency did not run; its "
				"agreement is not measured\n");
			have_tool = 0;
		}
		ftput[i] = floor_tput(&fidle[i]);
		lost[i] = 0;
		ttput[i] = tickbus_tput(1, &lost[i], &tidle[i]);
		lost_all += lost[i];
		lost[i] = 0;
		vtput[i] = tickbus_tput(BURST, &lost[i], &vidle[i]);
		lost_all += lost[i];
		if (ftput[i] <= 0 || ttput[i] <= 0 || vtput[i] <= 0) {
			fprintf(stderr, "bench shm: a throughput run failed\n");
			return 1;
		}
	}
	loadavg(la1, sizeof(la1));

	printf("bench shm: %d interleaved runs, cores %d and %d, 64-byte "
	       "messages; load average %s at start, %s at end\n", runs, core_a,
	       core_b, la0, la1);
	printf("bench shm: round trip, ns (median run of each)  %8s %8s %8s %8s\n",
	       "p50", "p99", "p99.9", "max");
	for (int which = 0; which < 3; which++) {
		const rtt_t *v = which == 0 ? fl : which == 1 ? tb : tool;
		const char *label = which == 0 ? "floor (cache line)" :
				    which == 1 ? "tickbus shm" : "tb-latency";
		double m[4];

		if (which == 2 && !have_tool)
			continue;
		for (int k = 0; k < 4; k++) {
			for (i = 0; i < runs; i++)
				ratio[i] = (double)pct(&v[i], k);
			m[k] = median(ratio, runs);
		}
		printf("bench shm:   %-34s %8.0f %8.0f %8.0f %8.0f\n", label, m[0],
		       m[1], m[2], m[3]);
	}
	printf("bench shm: round trip, tickbus / floor (median of the runs' "
	       "own ratios):\n");
	for (int k = 0; k < 3; k++) {
		double r;

		for (i = 0; i < runs; i++)
			ratio[i] = (double)pct(&tb[i], k) / (double)pct(&fl[i], k);
		r = median(ratio, runs);
		printf("bench shm:   %-6s %5.2f   goal <= %.1f: %s\n", names[k], r,
		       goals[k], verdict(r <= goals[k]));
	}
	if (have_tool) {
		double r;

		for (i = 0; i < runs; i++)
			ratio[i] = (double)tool[i].p50 / (double)tb[i].p50;
		r = median(ratio, runs);
		printf("bench shm: tb-latency / bench round trip, p50: %.2f   "
		       "goal within %.0f%%: %s\n", r, GOAL_AGREE * 100,
		       verdict(r >= 1 - GOAL_AGREE && r <= 1 + GOAL_AGREE));
	}
	{
		double rt = median_ratio(ttput, ftput, runs);
		double rv = median_ratio(vtput, ftput, runs);

		printf("bench shm: throughput, M msg/s: SPSC floor %.1f, tickbus "
		       "shm %.1f one at a time, %.1f %d at a time (median "
		       "runs)\n", median_of(ftput, runs) / 1e6,
		       median_of(ttput, runs) / 1e6,
		       median_of(vtput, runs) / 1e6, BURST);
		printf("bench shm:   tickbus / floor, tb_pub_offer  %5.2f   goal "
		       ">= %.1f: %s\n", rt, GOAL_TPUT, verdict(rt >= GOAL_TPUT));
		printf("bench shm:   tickbus / floor, tb_pub_offerv %5.2f   goal "
		       ">= %.1f: %s (%d a call)\n", rv, GOAL_TPUT,
		       verdict(rv >= GOAL_TPUT), BURST);
		printf("bench shm:   lost %" PRIu64 "   goal 0: %s\n", lost_all,
		       verdict(lost_all == 0));
		/* Noise only ever slows a run: each side's best is the pace it
		 * keeps when its writer stays ahead (not a goal). */
		printf("bench shm:   best run of each: floor %.1f, tickbus %.1f "
		       "(%.2f), %d at a time %.1f (%.2f)\n",
		       best_of(ftput, runs) / 1e6, best_of(ttput, runs) / 1e6,
		       best_of(ttput, runs) / best_of(ftput, runs), BURST,
		       best_of(vtput, runs) / 1e6,
		       best_of(vtput, runs) / best_of(ftput, runs));
		print_tput_runs(ftput, fidle, ttput, tidle, vtput, vidle, runs);
	}
	print_instructions();
	printf("bench shm: reproduce: %s/bench_shm%s --runs %d --cores %d,%d; "
	       "%s/../bin/tb-latency -n %" PRIu64 " -w %d -s 64 --cores %d,%d "
	       "--idle busy-spin\n", self, quick ? " --quick" : "", runs, core_a,
	       core_b, self, rounds, WARMUP, core_a, core_b);
	if (getenv("TB_BENCH_HGRM_DIR") && *getenv("TB_BENCH_HGRM_DIR")) {
		const char *dir = getenv("TB_BENCH_HGRM_DIR");

		write_hgrm(dir, "shm-floor-rtt.hgrm", all_floor);
		write_hgrm(dir, "shm-tickbus-rtt.hgrm", all_tickbus);
	}
	tb_hist_free(all_floor);
	tb_hist_free(all_tickbus);
	return 0;
}
