/*
 * test_publisher - the publisher's offer: its own copy of the clock, and
 * the count of what it published, across its inline and checked ways.
 *
 * tb_pub_offer stamps a small message with its own forward-moved copy of
 * the host's TSC calibration (clock.h, tb_clock_fwd_t) and stores the
 * sequence as the count of frames published; a larger message, a claim
 * and a commit, a frame that pads the ring's end go other ways.  These
 * tests hold them to the same results: the stamp is the shared clock's to
 * the nanosecond, and the count is exact whatever way each message took.
 * tb_pub_offerv takes a burst the same ways, with one stamp for all of it.
 */
#include <tickbus/tickbus.h>

#include "bus/clock.h"
#include "bus/counters.h"
#include "tests/common/rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char shm_path[128];
static char counters_dir[128];

static int setup(void **state)
{
	(void)state;
	snprintf(shm_path, sizeof(shm_path), "/dev/shm/tb-unit-pub.%d",
		 (int)getpid());
	unlink(shm_path);
	snprintf(counters_dir, sizeof(counters_dir), "/tmp/tb-unit-pub.XXXXXX");
	if (!mkdtemp(counters_dir))
		return -1;
	setenv("TICKBUS_COUNTERS_DIR", counters_dir, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[200];

	(void)state;
	unlink(shm_path);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", counters_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The forward-moved calibration converts exactly as the calibration it
 * came from, for any tick from 2^32 before its base on: realistic rates
 * (0.2 to 5 ns a tick), TSCs near the base, an hour and a year after,
 * and the first tick the move covers. */
static void the_offers_clock_is_the_calibrations(void **state)
{
	uint64_t rng = 0x7075626c69736865ull;

	(void)state;
	for (int c = 0; c < 2000; c++) {
		tb_clock_calib_t cal = {0};
		tb_clock_fwd_t fwd;
		double ns_per_tick = 0.2 + (double)(rng_splitmix64(&rng) % 4800) / 1000;

		cal.base_tsc = rng_splitmix64(&rng) >> 2;
		cal.base_ns = UINT64_C(1700000000000000000) +
			      (rng_splitmix64(&rng) >> 8);
		cal.mult = (uint64_t)(ns_per_tick * (double)(UINT64_C(1) << 32));
		cal.shift = TB_CLOCK_SHIFT;
		tb_clock_fwd_init(&fwd, &cal);
		for (int k = 0; k < 64; k++) {
			uint64_t r = rng_splitmix64(&rng), d;

			switch (k % 5) {
			case 0: d = r % 1000; break;                     /* ticks */
			case 1: d = r % (UINT64_C(1) << 44); break;      /* ~an hour */
			case 2: d = r % (UINT64_C(1) << 57); break;      /* ~a year */
			case 3: d = -(r % (UINT64_C(1) << 20)); break;   /* behind */
			default: d = -(UINT64_C(1) << 32) + r % 4; break; /* the edge */
			}
			assert_int_equal(tb_clock_fwd_to_ns(&fwd, cal.base_tsc + d),
					 tb_clock_calib_to_ns(&cal, cal.base_tsc + d));
		}
	}
}

/* What the subscriber saw. */
typedef struct got {
	uint64_t n;
	uint64_t bad;          /* wrong sequence, length or bytes */
	uint64_t early, late;  /* stamps outside the offer's bracket */
	uint64_t lo, hi;       /* the clock before and after the offer */
	uint32_t want_len;
} got_t;

static void fill(uint8_t *b, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seq * 29u + i * 3u + 11u);
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	got_t *g = clientd;
	uint8_t want[512];

	g->n++;
	fill(want, m->len, m->seq);
	if (m->seq != g->n || m->len != g->want_len ||
	    memcmp(want, m->data, m->len) != 0)
		g->bad++;
	g->early += m->publish_ns < g->lo;
	g->late += m->publish_ns > g->hi;
}

/* The published count of stream `name` in this process's counters file. */
static uint64_t published(const char *name)
{
	tb_counters_proc_t *p = calloc(1, sizeof(*p));
	uint64_t v = UINT64_MAX;

	assert_non_null(p);
	tb_counters_heartbeat();
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	for (int i = 0; i < p->n_streams; i++)
		if (p->streams[i].role == TB_ROLE_PUBLISHER &&
		    strcmp(p->streams[i].name, name) == 0)
			v = p->streams[i].c[TB_CTR_PUBLISHED];
	free(p);
	return v;
}

/*
 * Messages of every small size (the inline offer), larger ones (the
 * checked offer), claims committed and aborted, over a ring small enough
 * to pad its end again and again: each arrives once, in order, whole,
 * stamped between the shared clock's reads before and after its offer,
 * and the published count is the last sequence after each way.
 */
static void every_way_stamps_and_counts_alike(void **state)
{
	static const uint32_t sizes[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 17,
					 31, 32, 33, 48, 63, 64, 65, 100, 300};
	const int rounds = 2000;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	got_t g = {0};
	uint64_t seq = 0;
	uint8_t msg[512];

	(void)state;
	tb_clock_init();
	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "unit-pub");
	cfg.id = 31;
	cfg.transport = TB_TRANSPORT_SHM;
	cfg.ring_size = 64 << 10;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "%s", shm_path);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (int r = 0; r < rounds; r++) {
		uint32_t len = sizes[r % (sizeof(sizes) / sizeof(sizes[0]))];
		int way = r % 3;   /* 0, 1: offer; 2: claim, commit */

		seq++;
		fill(msg, len, seq);
		g.want_len = len;
		g.lo = tb_clock_now_ns();
		if (way < 2) {
			assert_int_equal(tb_pub_offer(pub, 3, msg, len),
					 (int64_t)seq);
		} else {
			tb_claim_t c;

			/* One given back first: no sequence consumed. */
			assert_int_equal(tb_pub_claim(pub, 3, len, &c), 0);
			assert_int_equal(tb_pub_abort(pub, &c), 0);
			assert_int_equal(tb_pub_claim(pub, 3, len, &c), 0);
			memcpy(c.data, msg, len);
			assert_int_equal(tb_pub_commit(pub, &c), (int64_t)seq);
		}
		g.hi = tb_clock_now_ns();
		while (g.n < seq)
			assert_true(tb_sub_poll(sub, on_msg, &g, 16) >= 0);
		if (r % 250 == 249 || r == rounds - 1)
			assert_int_equal(published(cfg.name), seq);
	}
	assert_int_equal(g.n, rounds);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.early, 0);
	assert_int_equal(g.late, 0);
	assert_int_equal(tb_pub_next_seq(pub), (uint64_t)rounds + 1);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

/* A fresh shm stream (a file a failed test left is gone). */
static void shm_cfg(tb_stream_cfg_t *cfg)
{
	unlink(shm_path);
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "unit-pub");
	cfg->id = 31;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = 64 << 10;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", shm_path);
}

typedef struct burst_got {
	uint64_t n, bad;
	uint64_t stamp;        /* the burst's: every frame of it carries it */
	uint64_t stamps;       /* distinct stamps seen in the burst */
	uint64_t lo, hi;       /* the clock before and after tb_pub_offerv */
	const uint32_t *lens;  /* the burst's sizes, from its first sequence */
	uint64_t first;
} burst_got_t;

static void on_burst_msg(void *clientd, const tb_msg_t *m)
{
	burst_got_t *g = clientd;
	uint8_t want[512];
	uint32_t len = g->lens[m->seq - g->first];

	g->n++;
	fill(want, len, m->seq);
	g->bad += m->seq != g->n || m->len != len || m->template_id != 5 ||
		  memcmp(want, m->data, len) != 0 || m->publish_ns < g->lo ||
		  m->publish_ns > g->hi;
	if (m->publish_ns != g->stamp) {
		g->stamp = m->publish_ns;
		g->stamps++;
	}
}

/*
 * Bursts of 1 to 40 messages of every small size and some larger ones,
 * over a ring small enough to pad its end again and again, so that
 * inline offers, checked ones and the pad's detour all come within one
 * burst: each burst is published whole (tb_pub_offerv returns its
 * count), every message arrives once, in order, whole, and every frame
 * of a burst carries one stamp, taken between the clock's reads before
 * and after the call.  The published count is the last sequence.
 */
static void a_burst_takes_one_stamp_and_keeps_order(void **state)
{
	static const uint32_t sizes[] = {0, 1, 8, 17, 32, 63, 64, 65, 100,
					 300, 64, 48};
	const int rounds = 600;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	burst_got_t g = {0};
	uint8_t bufs[40][512];
	uint32_t lens[40];
	tb_pub_msg_t v[40];
	uint64_t seq = 0;

	(void)state;
	tb_clock_init();
	shm_cfg(&cfg);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	g.lens = lens;
	for (int r = 0; r < rounds; r++) {
		int n = 1 + r % 40;

		for (int i = 0; i < n; i++) {
			lens[i] = sizes[(r + i) % (sizeof(sizes) / sizeof(sizes[0]))];
			fill(bufs[i], lens[i], seq + 1 + (uint64_t)i);
			v[i] = (tb_pub_msg_t){bufs[i], lens[i], 5};
		}
		g.first = seq + 1;
		g.stamps = 0;
		g.lo = tb_clock_now_ns();
		assert_int_equal(tb_pub_offerv(pub, v, n), n);
		g.hi = tb_clock_now_ns();
		seq += (uint64_t)n;
		while (g.n < seq)
			assert_true(tb_sub_poll(sub, on_burst_msg, &g, 16) >= 0);
		assert_int_equal(g.stamps, 1);
		assert_int_equal(tb_pub_next_seq(pub), seq + 1);
	}
	assert_int_equal(g.n, seq);
	assert_int_equal(g.bad, 0);
	assert_int_equal(published(cfg.name), seq);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

/*
 * A burst stops at the first message it cannot offer, as writev stops:
 * the count before it is returned and those are published; offering
 * from there returns that message's error.  A burst whose first message
 * cannot go returns the error and publishes nothing; so does one offered
 * with a claim open.  No messages: 0.  A negative count or no array:
 * TB_EINVAL.
 */
static void a_burst_stops_at_a_message_it_cannot_offer(void **state)
{
	static uint8_t big[9000];  /* over a 64 KiB ring's largest frame */
	uint8_t small[2][64];
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_pub_msg_t v[4];
	tb_claim_t c;
	got_t g = {0};

	(void)state;
	shm_cfg(&cfg);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	v[0] = (tb_pub_msg_t){small[0], 64, 5};
	v[1] = (tb_pub_msg_t){small[1], 64, 5};
	v[2] = (tb_pub_msg_t){big, sizeof(big), 5};
	v[3] = (tb_pub_msg_t){small[0], 64, 5};
	fill(small[0], 64, 1);
	fill(small[1], 64, 2);
	g.want_len = 64;
	g.hi = UINT64_MAX;

	assert_int_equal(tb_pub_offerv(pub, v, 4), 2);
	assert_int_equal(tb_pub_next_seq(pub), 3);
	assert_int_equal(tb_pub_offerv(pub, v + 2, 2), TB_EMSGSIZE);
	assert_int_equal(tb_pub_next_seq(pub), 3);
	assert_int_equal(tb_pub_offerv(pub, v, 0), 0);
	assert_int_equal(tb_pub_offerv(pub, v, -1), TB_EINVAL);
	assert_int_equal(tb_pub_offerv(pub, NULL, 1), TB_EINVAL);
	assert_int_equal(tb_pub_claim(pub, 5, 64, &c), 0);
	assert_int_equal(tb_pub_offerv(pub, v, 2), TB_ESTATE);
	assert_int_equal(tb_pub_abort(pub, &c), 0);
	assert_int_equal(tb_pub_next_seq(pub), 3);
	assert_int_equal(published(cfg.name), 2);
	/* What was published arrives, and nothing else. */
	while (g.n < 2)
		assert_true(tb_sub_poll(sub, on_msg, &g, 16) >= 0);
	assert_int_equal(tb_sub_poll(sub, on_msg, &g, 16), 0);
	assert_int_equal(g.n, 2);
	assert_int_equal(g.bad, 0);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_offers_clock_is_the_calibrations),
		cmocka_unit_test(every_way_stamps_and_counts_alike),
		cmocka_unit_test(a_burst_takes_one_stamp_and_keeps_order),
		cmocka_unit_test(a_burst_stops_at_a_message_it_cannot_offer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
