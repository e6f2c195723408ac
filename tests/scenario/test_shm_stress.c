/*
 * The shm ring under constant laps: a writer at full speed into the
 * smallest ring (64 KiB), frames from 8 bytes to the largest the ring
 * allows (8 KiB), through offer, claim/commit and claim/abort, in bursts
 * of 64 Ki frames with a breath of up to 2 ms between some; readers in
 * processes of their own, slowed at random (a busy wait in the handler now
 * and then, a sleep between polls now and then), so that they are lapped
 * again and again, often in the middle of copying a frame.
 *
 * What must hold, for every reader:
 *  - every delivered payload is exactly what the writer wrote for that
 *    sequence (its length and every byte are a function of the sequence):
 *    never a torn or overwritten frame;
 *  - sequences come in order, and every one up to the last published is
 *    either delivered once or inside exactly one reported range (TB_LAPPED;
 *    never TB_GAP: the ring was not corrupt, so a reader that says so
 *    misjudged a lap);
 *  - the readers were lapped (else nothing was tested) and did deliver.
 *
 * In `make test` the count is bounded (TB_STRESS_FRAMES, default 8 M, 1 M
 * under the sanitizers); `make bench` runs it with hundreds of
 * millions:  test_shm_stress --frames N [--readers R] [--seed S].
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "tests/common/rng.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SAN 1
#endif
#endif
#ifndef UNDER_SAN
#define UNDER_SAN 0
#endif

#define FRAMES_DEFAULT (UNDER_SAN ? 1000000ull : 8000000ull)
#define READERS_MAX 4
#define RING (64u << 10)
/* The largest payload: an eighth of the ring, less the frame header. */
#define PAYLOAD_MAX (RING / 8 - 32)

static uint64_t frames = 0, seed = 1;
static int readers = 2;
static char path[128];

/* ------------------------------------------------------------ payloads */

/* The payload length of sequence s: mostly 8..127 bytes, one in 64 up to
 * the largest frame, any byte count. */
static uint32_t payload_len(uint64_t s)
{
	uint64_t h = tb_hash_mix64(s ^ seed);

	if ((h & 63) == 0)
		return 8 + (uint32_t)((h >> 8) % (PAYLOAD_MAX - 8 + 1));
	return 8 + (uint32_t)((h >> 8) % 120);
}

/* Word i of sequence s's payload: word 0 is s itself. */
static uint64_t payload_word(uint64_t s, uint32_t i)
{
	return i == 0 ? s : tb_hash_mix64((s << 12) + i + seed);
}

static void payload_fill(uint8_t *p, uint32_t len, uint64_t s)
{
	uint32_t i;

	for (i = 0; 8 * (i + 1) <= len; i++) {
		uint64_t w = payload_word(s, i);

		memcpy(p + 8 * i, &w, 8);
	}
	if (len % 8) {
		uint64_t w = payload_word(s, i);

		memcpy(p + 8 * i, &w, len % 8);
	}
}

/* 0 if `m` is exactly what the writer wrote for m->seq. */
static int payload_bad(const tb_msg_t *m)
{
	const uint8_t *p = m->data;
	uint32_t i, len = payload_len(m->seq);

	if (m->len != len || m->template_id != (uint16_t)(m->seq * 7))
		return 1;
	for (i = 0; 8 * (i + 1) <= len; i++) {
		uint64_t w;

		memcpy(&w, p + 8 * i, 8);
		if (w != payload_word(m->seq, i))
			return 1;
	}
	if (len % 8) {
		uint64_t w = payload_word(m->seq, i);

		if (memcmp(p + 8 * i, &w, len % 8) != 0)
			return 1;
	}
	return 0;
}

static void cfg_for(tb_stream_cfg_t *cfg)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "stress");
	cfg->id = 41;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = RING;
	cfg->heartbeat_ms = 50;
	cfg->liveness_timeout_ms = 30000; /* readers are slow, not the test */
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", path);
}

/* ------------------------------------------------------------- writer */

/* Publishes 1..frames at full speed; every 7th through claim/commit, and
 * one claim in 101 aborted first. */
static int writer_main(void)
{
	static uint8_t buf[PAYLOAD_MAX];
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	uint64_t s;

	cfg_for(&cfg);
	if (tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "writer: %s\n", tb_errmsg());
		return 1;
	}
	for (s = 1; s <= frames; s++) {
		uint32_t len = payload_len(s);
		uint16_t tpl = (uint16_t)(s * 7);

		/* Bursts at full speed, with a breath between them now and
		 * then, so that readers also catch up and read at length
		 * before they are lapped again. */
		if ((s & 0xffff) == 0) {
			struct timespec ts = {0, (long)(tb_hash_mix64(s ^ seed) %
							 2000000)};

			nanosleep(&ts, NULL);
		}

		if (s % 7 == 0) {
			tb_claim_t c;

			if (s % 101 == 0) {
				if (tb_pub_claim(pub, tpl, PAYLOAD_MAX, &c) < 0 ||
				    tb_pub_abort(pub, &c) < 0)
					return 2;
			}
			if (tb_pub_claim(pub, tpl, len, &c) < 0)
				return 2;
			payload_fill(c.data, len, s);
			if (tb_pub_commit(pub, &c) != (int64_t)s)
				return 2;
		} else {
			payload_fill(buf, len, s);
			if (tb_pub_offer(pub, tpl, buf, len) != (int64_t)s)
				return 2;
		}
	}
	tb_publisher_close(pub);
	return 0;
}

/* ------------------------------------------------------------- readers */

struct reader {
	uint64_t next;       /* every sequence below is accounted for */
	uint64_t delivered, lost, laps, gaps, bad, order;
	uint64_t rng;
};

static void busy_ns(uint64_t ns)
{
	uint64_t until = tb_clock_mono_ns() + ns;

	while (tb_clock_mono_ns() < until)
		;
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct reader *r = clientd;

	if (m->seq != r->next)
		r->order++;
	r->next = m->seq + 1;
	r->delivered++;
	if (payload_bad(m))
		r->bad++;
	/* Now and then a slow handler: the writer runs on meanwhile. */
	if ((rng_xorshift64s(&r->rng) & 2047) == 0)
		busy_ns(rng_xorshift64s(&r->rng) % 50000);
}

/* Reads until the writer closes; writes its figures to `out`. */
static int reader_main(int id, int out)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct reader r;
	uint64_t v[8];
	int closed = 0;

	memset(&r, 0, sizeof(r));
	r.next = 1;
	r.rng = seed * 1000003u + (uint64_t)id + 1;
	cfg_for(&cfg);
	if (tb_subscriber_open(&sub, &cfg) < 0) {
		fprintf(stderr, "reader %d: %s\n", id, tb_errmsg());
		return 1;
	}
	while (!closed) {
		int limit = 1 + (int)(rng_xorshift64s(&r.rng) % 64);
		int n = tb_sub_poll(sub, on_msg, &r, limit);

		if (n == TB_LAPPED || n == TB_GAP) {
			uint64_t first, last;

			if (tb_sub_loss(sub, &first, &last) != 0 || first != r.next ||
			    last < first)
				r.order++;
			r.lost += last - first + 1;
			r.next = last + 1;
			if (n == TB_LAPPED)
				r.laps++;
			else
				r.gaps++;
		} else if (n == TB_CLOSED) {
			closed = 1;
		} else if (n < 0 && n != TB_NOT_CONNECTED) {
			fprintf(stderr, "reader %d: poll: %s\n", id, tb_strerror(n));
			return 1;
		}
		/* Now and then a pause between polls. */
		if ((rng_xorshift64s(&r.rng) & 511) == 0) {
			struct timespec ts = {0, (long)(rng_xorshift64s(&r.rng) %
							 100000)};

			nanosleep(&ts, NULL);
		}
	}
	tb_subscriber_close(sub);
	v[0] = r.next;
	v[1] = r.delivered;
	v[2] = r.lost;
	v[3] = r.laps;
	v[4] = r.gaps;
	v[5] = r.bad;
	v[6] = r.order;
	v[7] = 0;
	return write(out, v, sizeof(v)) == sizeof(v) ? 0 : 1;
}

/* ---------------------------------------------------------------- test */

static pid_t spawn(int (*fn)(int, int), int id, int out)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(3600);
		_exit(fn(id, out));
	}
	return pid;
}

static int writer_entry(int id, int out)
{
	(void)id;
	(void)out;
	return writer_main();
}

static void readers_never_see_a_torn_frame(void **state)
{
	pid_t rpid[READERS_MAX], wpid;
	int pipes[READERS_MAX][2], status;
	uint64_t t0 = tb_clock_mono_ms(), total_laps = 0;

	(void)state;
	snprintf(path, sizeof(path), "/dev/shm/tb-test-shm-stress.%d", (int)getpid());
	unlink(path);
	for (int i = 0; i < readers; i++) {
		assert_int_equal(pipe(pipes[i]), 0);
		rpid[i] = spawn(reader_main, i, pipes[i][1]);
		close(pipes[i][1]);
	}
	usleep(100000); /* the readers wait for the ring: they read from 1 */
	wpid = spawn(writer_entry, 0, -1);
	assert_int_equal(waitpid(wpid, &status, 0), wpid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	for (int i = 0; i < readers; i++) {
		uint64_t v[8];

		assert_int_equal(read(pipes[i][0], v, sizeof(v)), sizeof(v));
		assert_int_equal(waitpid(rpid[i], &status, 0), rpid[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		print_message("reader %d: delivered=%" PRIu64 " lost=%" PRIu64
			      " laps=%" PRIu64 " gaps=%" PRIu64 " bad=%" PRIu64
			      " order=%" PRIu64 "\n", i, v[1], v[2], v[3], v[4],
			      v[5], v[6]);
		assert_int_equal(v[5], 0);          /* no torn frame */
		assert_int_equal(v[6], 0);          /* in order, no overlap */
		assert_int_equal(v[4], 0);          /* no lap taken for corruption */
		assert_int_equal(v[0], frames + 1); /* all accounted for */
		assert_int_equal(v[1] + v[2], frames);
		assert_true(v[1] > 0);
		total_laps += v[3];
		close(pipes[i][0]);
	}
	/* Lapped, or nothing was tested. */
	assert_true(total_laps > 0);
	print_message("%" PRIu64 " frames in %.1f s, %d readers, %" PRIu64
		      " laps told\n", frames, (tb_clock_mono_ms() - t0) / 1e3,
		      readers, total_laps);
	unlink(path);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(readers_never_see_a_torn_frame),
	};
	const char *env = getenv("TB_STRESS_FRAMES");

	frames = env && *env ? strtoull(env, NULL, 10) : FRAMES_DEFAULT;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--frames"))
			frames = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--readers"))
			readers = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
	}
	if (frames == 0 || readers < 1 || readers > READERS_MAX) {
		fprintf(stderr, "usage: test_shm_stress [--frames N] [--readers "
			"1..%d] [--seed S]\n", READERS_MAX);
		return 2;
	}
	setenv("TICKBUS_QUIET", "1", 0);
	return cmocka_run_group_tests_name("shm_stress", tests, NULL, NULL);
}
