/*
 * tb-latency - measures tickbus latency over any transport a config file
 * names: round trip (ping-pong) or one way, over a sweep of message sizes,
 * back to back or at a fixed rate with coordinated-omission correction.
 *
 * Two streams: "ping" carries the measuring messages from the `pub` end to
 * the `sub` end; "pong" carries answers back.  In ping-pong mode the sub end
 * echoes every ping and the pub end measures the round trip.  In one-way
 * mode the sub end measures (its clock minus the stamp in the message; same
 * host: the shared calibrated TSC; across hosts the clocks must be
 * synchronised, see the README) and uses the pong stream only to say it is
 * ready and that it has finished a size.  The tool uses nothing but the
 * public API (tickbus.h), so every transport the library opens works here.
 *
 * Coordinated omission.  A load generator that waits for each answer before
 * sending the next stops sampling exactly while the system is slow, so the
 * slow periods are under-counted.  With --rate, every message has an
 * intended send time (start + i / rate) and its latency is measured from
 * that time, not from when it actually went out: a stall shows up in every
 * message that should have been sent during it.  The uncorrected figures
 * (from the actual send) are printed beside them.
 *
 * Intervals.  The measuring thread records into a tb_hist_recorder_t; a
 * second thread samples it every --interval-ms without stopping the
 * recording (no lock on the measuring side) and appends each interval to
 * the --log file, tagged with the message size.
 *
 * Message layout (first 40 bytes of every payload, native byte order: the
 * two ends run on machines of the same architecture):
 *   magic u32, kind u16, pad u16, size u32, pad u32, id u64,
 *   intended_ns u64, sent_ns u64
 * A one-way SIZE_END carries in `id` how many measured (DATA) messages of
 * the size were sent, so that the sub end's `lost` counts exactly the
 * measured messages that did not arrive (a gap the bus reports may also
 * cover warm-up messages), and a message that neither arrived nor was
 * reported lost by the bus is caught: the sub end says so and fails.
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"

#include <tickbus/hist.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAT_MAGIC 0x544c4254u /* "TBLT" */
#define SIZES_MAX 32
#define SIZE_MAX_BYTES (1u << 20)
/* One hour in ns with 3 digits: the layout every tickbus tool uses. */
#define HIST_HIGHEST 3600000000000ll

enum lat_kind {
	K_PROBE = 1, /* pub -> sub until the sub answers: are you there? */
	K_WARM = 2,  /* measured, not recorded */
	K_DATA = 3,  /* measured and recorded */
	K_SIZE_END = 4, /* one-way: end of a size; the sub answers when done */
	K_END = 5,   /* the run is over; the sub answers and exits */
	K_READY = 6, /* one-way sub -> pub: answer to a probe */
	K_ACK = 7,   /* one-way sub -> pub: answer to SIZE_END and END */
};

typedef struct lat_msg {
	uint32_t magic;
	uint16_t kind;
	uint16_t pad0;
	uint32_t size;
	uint32_t pad1;
	uint64_t id;
	uint64_t intended_ns;
	uint64_t sent_ns;
} lat_msg_t;

_Static_assert(sizeof(lat_msg_t) == 40, "lat_msg layout");

#define SIZE_MIN ((uint32_t)sizeof(lat_msg_t))

typedef struct opts {
	const char *config, *ping_name, *pong_name, *role, *hgrm, *log;
	int pingpong;
	uint64_t count, warmup, rate, interval_ms, timeout_ms, msg_timeout_ms;
	uint32_t sizes[SIZES_MAX];
	int n_sizes;
	int core_pub, core_sub;
	int idle_set;
	tb_idle_kind_t idle;
} opts_t;

static const char prog[] = "tb-latency";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-latency [-c FILE] [options]\n"
"Measures latency through two tickbus streams, ping and pong.\n"
"  -c, --config FILE     streams config (INI); without it, two shm streams\n"
"                        under /dev/shm are made up for this run\n"
"      --ping NAME       stream the pub end sends on (default ping)\n"
"      --pong NAME       stream the answers come back on (default pong)\n"
"  -m, --mode M          pingpong (round trip, default) or oneway\n"
"  -r, --role R          both (default: fork the two ends), pub (send and,\n"
"                        in pingpong, measure) or sub (echo, or in oneway\n"
"                        measure); run pub and sub as two commands to put\n"
"                        them on two hosts\n"
"  -n, --count N         measured messages per size (default 100000)\n"
"  -w, --warmup N        messages sent first and not recorded (default 10000)\n"
"  -s, --size LIST       payload bytes, e.g. 64 or 64,256,1024 (a sweep);\n"
"                        each %u..%u (default 64)\n"
"      --rate R          messages per second, each measured from its\n"
"                        intended send time (coordinated-omission\n"
"                        correction); 0 = back to back (default in\n"
"                        pingpong; oneway default 100000)\n"
"      --cores A,B       pin the pub end to core A, the sub end to core B\n"
"                        (default: the streams' publisher_core and\n"
"                        subscriber_core)\n"
"      --idle I          busy-spin, spin-then-yield or backoff (default:\n"
"                        the ping stream's idle key)\n"
"      --hgrm FILE       write the distribution (.hgrm, microseconds); with\n"
"                        several sizes FILE gets -SIZE before its extension\n"
"      --log FILE        write an interval histogram log, tag size-SIZE\n"
"                        (--hgrm and --log: written by the end that\n"
"                        measures: pub in pingpong, sub in oneway)\n"
"      --interval-ms MS  log interval (default 1000)\n"
"      --timeout-ms MS   give up when the other end is silent this long\n"
"                        (default 30000)\n"
"      --msg-timeout-ms MS  pingpong: a ping unanswered this long counts\n"
"                        as lost and the next goes out (default 1000)\n"
"  -h, --help            this text\n"
"prints per size: mode= size= count= lost= p50= p90= p99= p99.9= p99.99=\n"
"max= (ns); lost: measured messages that did not arrive (pingpong: not\n"
"answered in time; oneway: reported lost by the bus, and the sub end\n"
"fails if any vanished without a report)\n"
"exit status: 0 done, 1 error, 2 usage, 4 the other end did not answer\n",
		SIZE_MIN, SIZE_MAX_BYTES);
}

static uint64_t now_ns(void)
{
	return tb_clock_now_ns();
}

/* ------------------------------------------------------------- options */

static int parse_sizes(const char *s, opts_t *o)
{
	char buf[256], *tok, *save = NULL;

	if (strlen(s) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", s);
	o->n_sizes = 0;
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (o->n_sizes == SIZES_MAX || tb_cli_u64(tok, &v) ||
		    v < SIZE_MIN || v > SIZE_MAX_BYTES)
			return -1;
		o->sizes[o->n_sizes++] = (uint32_t)v;
	}
	return o->n_sizes ? 0 : -1;
}

static int parse_cores(const char *s, opts_t *o)
{
	char *end;
	long a, b;

	a = strtol(s, &end, 10);
	if (end == s || *end != ',' || a < 0 || a > 4095)
		return -1;
	s = end + 1;
	b = strtol(s, &end, 10);
	if (end == s || *end || b < 0 || b > 4095)
		return -1;
	o->core_pub = (int)a;
	o->core_sub = (int)b;
	return 0;
}

static int parse_idle(const char *s, tb_idle_kind_t *k)
{
	if (!strcmp(s, "busy-spin"))
		*k = TB_IDLE_BUSY_SPIN;
	else if (!strcmp(s, "spin-then-yield"))
		*k = TB_IDLE_SPIN_YIELD;
	else if (!strcmp(s, "backoff"))
		*k = TB_IDLE_BACKOFF;
	else
		return -1;
	return 0;
}

/* ------------------------------------------------------------- streams */

typedef struct ends {
	tb_stream_cfg_t ping, pong;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_idle_t idle;
	uint8_t *buf; /* SIZE_MAX_BYTES of outgoing payload */
} ends_t;

/* The two stream configs: from the file, or two made-up shm streams. */
static int stream_cfgs(const opts_t *o, ends_t *e, const char *shm_tag)
{
	if (o->config) {
		tb_config_t *cfg;
		const tb_stream_cfg_t *a, *b;

		if (tb_config_load(&cfg, o->config) < 0) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			return -1;
		}
		a = tb_config_stream(cfg, o->ping_name);
		b = tb_config_stream(cfg, o->pong_name);
		if (!a || !b) {
			fprintf(stderr, "%s: %s: no stream '%s' (need both "
				"'%s' and '%s')\n", prog, o->config,
				a ? o->pong_name : o->ping_name, o->ping_name,
				o->pong_name);
			tb_config_free(cfg);
			return -1;
		}
		e->ping = *a;
		e->pong = *b;
		tb_config_free(cfg);
		return 0;
	}
	tb_stream_cfg_init(&e->ping);
	tb_stream_cfg_init(&e->pong);
	snprintf(e->ping.name, sizeof(e->ping.name), "%s", o->ping_name);
	snprintf(e->pong.name, sizeof(e->pong.name), "%s", o->pong_name);
	e->ping.id = 1;
	e->pong.id = 2;
	e->ping.transport = e->pong.transport = TB_TRANSPORT_SHM;
	e->ping.ring_size = e->pong.ring_size = 8u << 20;
	snprintf(e->ping.shm_path, sizeof(e->ping.shm_path),
		 "/dev/shm/tb-latency%s.%s", shm_tag, o->ping_name);
	snprintf(e->pong.shm_path, sizeof(e->pong.shm_path),
		 "/dev/shm/tb-latency%s.%s", shm_tag, o->pong_name);
	return 0;
}

/* The pub end publishes ping and reads pong; the sub end the reverse. */
static int open_ends(const opts_t *o, ends_t *e, int pub_end)
{
	int core = pub_end ? o->core_pub : o->core_sub;
	int rc;

	if (core < 0)
		core = pub_end ? e->ping.publisher_core
			       : e->ping.subscriber_core;
	if (core >= 0 && tb_thread_pin(core) < 0) {
		fprintf(stderr, "%s: pin to core %d: %s\n", prog, core,
			tb_errmsg());
		return -1;
	}
	tb_idle_init(&e->idle, o->idle_set ? o->idle : e->ping.idle);
	e->buf = calloc(1, SIZE_MAX_BYTES);
	if (!e->buf) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return -1;
	}
	rc = tb_subscriber_open(&e->sub, pub_end ? &e->pong : &e->ping);
	if (rc >= 0)
		rc = tb_publisher_open(&e->pub, pub_end ? &e->ping : &e->pong);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return -1;
	}
	return 0;
}

static void close_ends(ends_t *e)
{
	if (e->pub)
		tb_publisher_close(e->pub);
	if (e->sub)
		tb_subscriber_close(e->sub);
	free(e->buf);
}

/* Offers until the stream takes it (back-pressure), or fails.  The first
 * attempt is stamped `at` when it is not 0 (the caller just read the
 * clock: one read per message on the measured path, as bench_shm). */
static int send_msg_at(ends_t *e, lat_msg_t *m, uint32_t size,
		       uint64_t deadline, uint64_t at)
{
	for (;;) {
		int64_t rc;

		m->sent_ns = at ? at : now_ns();
		at = 0;
		memcpy(e->buf, m, sizeof(*m));
		rc = tb_pub_offer(e->pub, 1, e->buf, size);
		if (rc > 0)
			return 0;
		if (rc != TB_BACK_PRESSURED && rc != TB_NOT_CONNECTED) {
			fprintf(stderr, "%s: offer %u bytes: %s\n", prog, size,
				tb_strerror((int)rc));
			return -1;
		}
		if (stop || now_ns() > deadline) {
			fprintf(stderr, "%s: could not send: %s\n", prog,
				tb_strerror((int)rc));
			return -1;
		}
		tb_idle_step(&e->idle, 0);
	}
}

static int send_msg(ends_t *e, lat_msg_t *m, uint32_t size, uint64_t deadline)
{
	return send_msg_at(e, m, size, deadline, 0);
}

/* ----------------------------------------------------------- measuring */

typedef struct meter {
	tb_hist_recorder_t *rec;
	tb_hist_t *interval, *total, *raw;
	tb_hist_log_writer_t *log;
	double log_start, last_flush;
	uint64_t interval_ms;
	uint32_t size;
	pthread_t sampler;
	int sampling;
	int quit; /* under mu: the main thread asks the sampler to end */
	pthread_mutex_t mu; /* guards quit for the timed wait */
	pthread_cond_t cv;
} meter_t;

static void meter_flush(meter_t *m)
{
	double t = (double)now_ns() / 1e9, from = m->last_flush;

	m->last_flush = t;
	tb_hist_recorder_sample(m->rec, m->interval);
	tb_hist_merge(m->total, m->interval);
	if (m->log && tb_hist_count(m->interval) > 0) {
		char tag[32];

		snprintf(tag, sizeof(tag), "size-%u", m->size);
		if (tb_hist_log_writer_write(m->log, tag, from - m->log_start,
					     t - from, m->interval) < 0)
			fprintf(stderr, "%s: log: %s\n", prog, tb_errmsg());
	}
}

/* The sampling thread: one interval per interval_ms, without ever making
 * the measuring thread wait. */
static void *sampler_main(void *arg)
{
	meter_t *m = arg;
	struct timespec ts;

	pthread_mutex_lock(&m->mu);
	while (!m->quit) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)(m->interval_ms % 1000) * 1000000L;
		ts.tv_sec += (time_t)(m->interval_ms / 1000) +
			     ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		if (!m->quit)
			meter_flush(m);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

static int meter_init(meter_t *m, const opts_t *o, FILE *log_file)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	m->interval_ms = o->interval_ms;
	if (tb_hist_recorder_init(&m->rec, 1, HIST_HIGHEST, 3) < 0 ||
	    tb_hist_init(&m->interval, 1, HIST_HIGHEST, 3) < 0 ||
	    tb_hist_init(&m->total, 1, HIST_HIGHEST, 3) < 0 ||
	    tb_hist_init(&m->raw, 1, HIST_HIGHEST, 3) < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return -1;
	}
	m->log_start = (double)now_ns() / 1e9;
	if (log_file &&
	    tb_hist_log_writer_open(&m->log, log_file, m->log_start, 1e6) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, o->log, tb_errmsg());
		return -1;
	}
	return 0;
}

static int meter_start(meter_t *m, uint32_t size)
{
	tb_hist_t *scratch = m->interval;

	m->size = size;
	tb_hist_recorder_sample(m->rec, scratch); /* drop what came before */
	tb_hist_reset(m->total);
	tb_hist_reset(m->raw);
	m->last_flush = (double)now_ns() / 1e9;
	m->quit = 0;
	if (pthread_create(&m->sampler, NULL, sampler_main, m) != 0) {
		fprintf(stderr, "%s: cannot start the sampling thread\n", prog);
		return -1;
	}
	m->sampling = 1;
	return 0;
}

static void meter_stop(meter_t *m)
{
	if (!m->sampling)
		return;
	pthread_mutex_lock(&m->mu);
	m->quit = 1;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->sampler, NULL);
	m->sampling = 0;
	meter_flush(m); /* the last, partial interval */
}

static void meter_free(meter_t *m)
{
	meter_stop(m);
	if (m->log)
		tb_hist_log_writer_close(m->log);
	tb_hist_recorder_free(m->rec);
	tb_hist_free(m->interval);
	tb_hist_free(m->total);
	tb_hist_free(m->raw);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
}

static void hgrm_name(char *buf, size_t cap, const char *base, uint32_t size,
		      int sweep)
{
	const char *dot = strrchr(base, '.'), *slash = strrchr(base, '/');

	if (!sweep) {
		snprintf(buf, cap, "%s", base);
	} else if (dot && (!slash || dot > slash)) {
		snprintf(buf, cap, "%.*s-%u%s", (int)(dot - base), base, size,
			 dot);
	} else {
		snprintf(buf, cap, "%s-%u", base, size);
	}
}

/* Prints one size's line and writes its .hgrm.  Returns 0 or -1. */
static int report(const meter_t *m, const opts_t *o, uint64_t lost)
{
	const tb_hist_t *h = m->total;
	int rc = 0;

	printf("%s: mode=%s size=%u count=%" PRId64 " lost=%" PRIu64
	       " rate=%" PRIu64 " p50=%" PRId64 " p90=%" PRId64 " p99=%" PRId64
	       " p99.9=%" PRId64 " p99.99=%" PRId64 " max=%" PRId64
	       " mean=%.0f unit=ns\n", prog, o->pingpong ? "pingpong" : "oneway",
	       m->size, tb_hist_count(h), lost, o->rate,
	       tb_hist_value_at_percentile(h, 50),
	       tb_hist_value_at_percentile(h, 90),
	       tb_hist_value_at_percentile(h, 99),
	       tb_hist_value_at_percentile(h, 99.9),
	       tb_hist_value_at_percentile(h, 99.99), tb_hist_max(h),
	       tb_hist_mean(h));
	if (o->rate)
		printf("%s: uncorrected size=%u p50=%" PRId64 " p99=%" PRId64
		       " p99.9=%" PRId64 " max=%" PRId64 " unit=ns\n", prog,
		       m->size, tb_hist_value_at_percentile(m->raw, 50),
		       tb_hist_value_at_percentile(m->raw, 99),
		       tb_hist_value_at_percentile(m->raw, 99.9),
		       tb_hist_max(m->raw));
	if (o->hgrm) {
		char path[512];
		FILE *f;

		hgrm_name(path, sizeof(path), o->hgrm, m->size,
			  o->n_sizes > 1);
		f = fopen(path, "w");
		if (!f || tb_hist_write_hgrm(h, f, 1000.0, 0) < 0) {
			fprintf(stderr, "%s: cannot write %s: %s\n", prog, path,
				f ? tb_errmsg() : strerror(errno));
			rc = -1;
		}
		if (f && fclose(f) != 0)
			rc = -1;
	}
	fflush(stdout);
	return rc;
}

/* -------------------------------------------------------- the pub end */

struct wait_for {
	uint16_t kind; /* 0: any kind */
	uint64_t id;   /* with K_DATA/K_WARM: the id wanted */
	int got;
	uint64_t recv_ns;
};

static void on_answer(void *clientd, const tb_msg_t *msg)
{
	struct wait_for *w = clientd;
	/* The clock first, as a strategy stamps a tick on arrival: the
	 * round trip is the bus's, not this tool's parsing. */
	uint64_t t = now_ns();
	lat_msg_t m;

	if (msg->len < sizeof(m))
		return;
	memcpy(&m, msg->data, sizeof(m));
	if (m.magic != LAT_MAGIC)
		return;
	if ((w->kind == 0 || m.kind == w->kind) &&
	    (w->kind != K_DATA || m.id == w->id)) {
		w->got = 1;
		w->recv_ns = t;
	}
}

/* Polls the answer stream until `w` is satisfied or `until` passes.
 * Returns 1 got it, 0 timed out, -1 failure. */
static int await(ends_t *e, struct wait_for *w, uint64_t until)
{
	uint32_t n = 0;

	w->got = 0;
	while (!w->got) {
		int rc = tb_sub_poll(e->sub, on_answer, w, 16);

		if (rc == TB_PUBLISHER_DEAD || rc == TB_CLOSED) {
			/* Nothing more will come: waiting out every
			 * message's timeout would take hours. */
			fprintf(stderr, "%s: the other end %s\n", prog,
				rc == TB_CLOSED ? "left" : "died");
			return -1;
		}
		if (w->got)
			break;
		if ((++n & 63) == 0 && (stop || now_ns() > until))
			return 0;
		tb_idle_step(&e->idle, rc > 0 ? rc : 0);
	}
	return 1;
}

/* Sends probes until the other end answers.  Returns 1, 0 (timeout), -1. */
static int handshake(ends_t *e, const opts_t *o)
{
	uint64_t until = now_ns() + o->timeout_ms * 1000000ull;
	lat_msg_t m = {LAT_MAGIC, K_PROBE, 0, SIZE_MIN, 0, 0, 0, 0};

	while (now_ns() < until && !stop) {
		struct wait_for w = {o->pingpong ? K_PROBE : K_READY, 0, 0, 0};
		int rc;

		m.intended_ns = now_ns();
		if (send_msg(e, &m, SIZE_MIN, until) < 0)
			return -1;
		rc = await(e, &w, now_ns() + 10000000ull); /* 10 ms */
		if (rc != 0)
			return rc;
	}
	fprintf(stderr, "%s: no answer on stream '%s' within %" PRIu64
		" ms: is the sub end running?\n", prog, e->pong.name,
		o->timeout_ms);
	return 0;
}

/* Waits until the scheduled time of a fixed-rate send. */
static void pace(ends_t *e, uint64_t when)
{
	while (now_ns() < when && !stop)
		tb_idle_step(&e->idle, 0);
	e->idle.spins = 0;
}

static int run_pub(const opts_t *o, ends_t *e, meter_t *mt)
{
	uint64_t interval = o->rate ? 1000000000ull / o->rate : 0;
	int rc;

	rc = handshake(e, o);
	if (rc <= 0)
		return rc < 0 ? 1 : 4;
	for (int s = 0; s < o->n_sizes && !stop; s++) {
		uint32_t size = o->sizes[s];
		uint64_t total = o->warmup + o->count, lost = 0, sent = 0, t0;
		lat_msg_t m = {LAT_MAGIC, 0, 0, size, 0, 0, 0, 0};

		if (o->pingpong && meter_start(mt, size) < 0)
			return 1;
		printf("%s: measuring size=%u\n", prog, size);
		t0 = now_ns();
		for (uint64_t i = 0; i < total && !stop; i++) {
			struct wait_for w = {K_DATA, 0, 0, 0};

			m.kind = i < o->warmup ? K_WARM : K_DATA;
			m.id = ((uint64_t)s << 48) | i;
			m.intended_ns = interval ? t0 + i * interval : now_ns();
			if (interval) {
				pace(e, m.intended_ns);
				if (now_ns() < m.intended_ns) /* stopped */
					break;
			}
			/* Back to back, the intended time is the send time:
			 * one clock read, not two, on the measured path. */
			if (send_msg_at(e, &m, size, m.intended_ns + o->timeout_ms *
					1000000ull, interval ? 0 : m.intended_ns) < 0)
				return 1;
			sent += m.kind == K_DATA;
			if (!o->pingpong)
				continue;
			w.kind = K_DATA;
			w.id = m.id;
			if (m.kind == K_WARM) {
				w.kind = K_WARM;
			}
			rc = await(e, &w, m.sent_ns + o->msg_timeout_ms *
							      1000000ull);
			if (rc < 0)
				return 1;
			if (rc == 0) {
				lost++;
				continue;
			}
			if (m.kind == K_DATA) {
				tb_hist_recorder_record(
					mt->rec,
					(int64_t)(w.recv_ns - m.intended_ns));
				tb_hist_record(mt->raw,
					       (int64_t)(w.recv_ns - m.sent_ns));
			}
		}
		if (o->pingpong) {
			meter_stop(mt);
			if (report(mt, o, lost) < 0)
				return 1;
		} else {
			struct wait_for w = {K_ACK, 0, 0, 0};

			m.kind = K_SIZE_END;
			m.id = sent;
			if (send_msg(e, &m, SIZE_MIN, now_ns() +
					o->timeout_ms * 1000000ull) < 0)
				return 1;
			rc = await(e, &w, now_ns() + o->timeout_ms * 1000000ull);
			if (rc <= 0) {
				fprintf(stderr, "%s: the sub end did not finish "
					"size %u\n", prog, size);
				return rc < 0 ? 1 : 4;
			}
		}
	}
	{
		lat_msg_t m = {LAT_MAGIC, K_END, 0, SIZE_MIN, 0, 0, 0, 0};
		struct wait_for w = {o->pingpong ? K_END : K_ACK, 0, 0, 0};

		if (send_msg(e, &m, SIZE_MIN, now_ns() + o->timeout_ms *
							   1000000ull) < 0)
			return 1;
		/* Wait for the answer so that the sub end sees END before the
		 * ring closes; a missing answer is not a failure. */
		await(e, &w, now_ns() + 1000000000ull);
	}
	return stop ? 1 : 0;
}

/* -------------------------------------------------------- the sub end */

struct sub_state {
	const opts_t *o;
	ends_t *e;
	meter_t *mt;
	int done, failed, answer;
	uint32_t cur_size; /* one-way: size being measured, 0 = none */
	uint64_t seen;     /* messages seen, for the silence timeout */
	uint64_t last_seen_ns;
	uint64_t told_lost; /* messages the bus reported lost, of any kind */
	uint64_t data;      /* DATA messages of cur_size received */
	lat_msg_t reply;
};

/* The end of a size whose pub end sent `sent` measured messages: reports
 * the ones missing as lost; fails if the bus did not report them all. */
static int size_done(struct sub_state *s, uint64_t sent)
{
	uint64_t missing = sent > s->data ? sent - s->data : 0;
	int rc = report(s->mt, s->o, missing);

	if (missing > s->told_lost) {
		fprintf(stderr, "%s: size %u: %" PRIu64 " messages neither "
			"arrived nor were reported lost (the bus reported %"
			PRIu64 ")\n", prog, s->cur_size, missing, s->told_lost);
		rc = -1;
	}
	s->cur_size = 0;
	s->data = 0;
	s->told_lost = 0;
	return rc;
}

static void on_ping(void *clientd, const tb_msg_t *msg)
{
	struct sub_state *s = clientd;
	uint64_t t;
	lat_msg_t m;

	s->seen++;
	if (msg->len < sizeof(m))
		return;
	if (s->o->pingpong) {
		/* The echo reads no clock: it is on the measured path, and
		 * the pub end times the round trip.  It reads only the magic
		 * before it answers, and the kind after. */
		/* Echo the message as it came, whatever it is. */
		uint32_t magic;
		uint16_t kind;
		int64_t rc;

		memcpy(&magic, msg->data, sizeof(magic));
		if (magic != LAT_MAGIC)
			return;

		while ((rc = tb_pub_offer(s->e->pub, msg->template_id,
					  msg->data, msg->len)) ==
			       TB_BACK_PRESSURED ||
		       rc == TB_NOT_CONNECTED) {
			if (stop)
				break;
			tb_idle_step(&s->e->idle, 0);
		}
		if (rc < 0)
			s->failed = 1;
		memcpy(&kind, (const uint8_t *)msg->data +
		       offsetof(lat_msg_t, kind), sizeof(kind));
		if (kind == K_END)
			s->done = 1;
		return;
	}
	memcpy(&m, msg->data, sizeof(m));
	if (m.magic != LAT_MAGIC)
		return;
	t = now_ns();
	switch (m.kind) {
	case K_PROBE:
		s->reply.kind = K_READY;
		s->answer = 1;
		break;
	case K_WARM:
	case K_DATA:
		if (s->cur_size != m.size) {
			if (s->cur_size)
				meter_stop(s->mt);
			s->cur_size = m.size;
			if (meter_start(s->mt, m.size) < 0)
				s->failed = 1;
		}
		if (m.kind == K_DATA) {
			s->data++;
			tb_hist_recorder_record(s->mt->rec,
						(int64_t)(t - m.intended_ns));
			tb_hist_record(s->mt->raw, (int64_t)(t - m.sent_ns));
		}
		break;
	case K_SIZE_END:
	case K_END:
		s->reply.kind = K_ACK;
		s->answer = 1;
		if (s->cur_size) {
			meter_stop(s->mt);
			if (size_done(s, m.kind == K_SIZE_END ? m.id : s->data) < 0)
				s->failed = 1;
		}
		if (m.kind == K_END)
			s->done = 1;
		break;
	}
}

static int run_sub(const opts_t *o, ends_t *e, meter_t *mt)
{
	struct sub_state s;
	uint32_t n = 0;
	uint64_t seen = 0;

	memset(&s, 0, sizeof(s));
	s.o = o;
	s.e = e;
	s.mt = mt;
	s.reply.magic = LAT_MAGIC;
	s.reply.size = SIZE_MIN;
	s.last_seen_ns = now_ns();
	while (!s.done && !s.failed && !stop) {
		int rc = tb_sub_poll(e->sub, on_ping, &s, 64);

		if (s.answer) {
			s.answer = 0;
			if (send_msg(e, &s.reply, SIZE_MIN, now_ns() +
					o->timeout_ms * 1000000ull) < 0)
				return 1;
		}
		if (rc == TB_LAPPED || rc == TB_GAP) {
			uint64_t a, b;

			if (tb_sub_loss(e->sub, &a, &b) == 0)
				s.told_lost += b - a + 1;
		} else if (rc == TB_PUBLISHER_DEAD) {
			fprintf(stderr, "%s: the pub end died\n", prog);
			return 1;
		}
		if (rc <= 0 && (++n & 63) == 0 && seen != s.seen) {
			seen = s.seen;
			s.last_seen_ns = now_ns();
		}
		if (rc <= 0 && (n & 63) == 0 &&
		    now_ns() - s.last_seen_ns > o->timeout_ms * 1000000ull) {
			fprintf(stderr, "%s: nothing on stream '%s' for %" PRIu64
				" ms: is the pub end running?\n", prog,
				e->ping.name, o->timeout_ms);
			return 4;
		}
		tb_idle_step(&e->idle, rc > 0 ? rc : 0);
	}
	if (s.done && o->pingpong)
		usleep(100000); /* let the last answer be read before close */
	return s.failed || stop ? 1 : 0;
}

/* ----------------------------------------------------------------- main */

static int run_end(const opts_t *o, ends_t *e, int pub_end)
{
	FILE *log_file = NULL;
	meter_t mt;
	int measures = pub_end == o->pingpong, rc;

	if (open_ends(o, e, pub_end) < 0) {
		close_ends(e);
		return 1;
	}
	if (measures && o->log) {
		log_file = fopen(o->log, "w");
		if (!log_file) {
			fprintf(stderr, "%s: %s: %s\n", prog, o->log,
				strerror(errno));
			close_ends(e);
			return 1;
		}
	}
	if (meter_init(&mt, o, log_file) < 0) {
		rc = 1;
	} else {
		rc = pub_end ? run_pub(o, e, &mt) : run_sub(o, e, &mt);
	}
	meter_free(&mt);
	if (log_file && fclose(log_file) != 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, o->log, strerror(errno));
		rc = rc ? rc : 1;
	}
	close_ends(e);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"config", required_argument, 0, 'c'},
		{"ping", required_argument, 0, 'P'},
		{"pong", required_argument, 0, 'Q'},
		{"mode", required_argument, 0, 'm'},
		{"role", required_argument, 0, 'r'},
		{"count", required_argument, 0, 'n'},
		{"warmup", required_argument, 0, 'w'},
		{"size", required_argument, 0, 's'},
		{"rate", required_argument, 0, 'R'},
		{"cores", required_argument, 0, 'C'},
		{"idle", required_argument, 0, 'I'},
		{"hgrm", required_argument, 0, 'H'},
		{"log", required_argument, 0, 'L'},
		{"interval-ms", required_argument, 0, 'i'},
		{"timeout-ms", required_argument, 0, 'T'},
		{"msg-timeout-ms", required_argument, 0, 'M'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	opts_t o;
	ends_t e;
	char tag[32] = "";
	int c, rate_set = 0, status;

	memset(&o, 0, sizeof(o));
	memset(&e, 0, sizeof(e));
	o.ping_name = "ping";
	o.pong_name = "pong";
	o.role = "both";
	o.pingpong = 1;
	o.count = 100000;
	o.warmup = 10000;
	o.sizes[0] = 64;
	o.n_sizes = 1;
	o.interval_ms = 1000;
	o.timeout_ms = 30000;
	o.msg_timeout_ms = 1000;
	o.core_pub = o.core_sub = -1;
	while ((c = getopt_long(argc, argv, "c:m:r:n:w:s:h", lopts, NULL)) !=
	       -1) {
		const char *what = NULL;

		switch (c) {
		case 'c': o.config = optarg; break;
		case 'P': o.ping_name = optarg; break;
		case 'Q': o.pong_name = optarg; break;
		case 'm':
			if (!strcmp(optarg, "pingpong"))
				o.pingpong = 1;
			else if (!strcmp(optarg, "oneway"))
				o.pingpong = 0;
			else
				what = "--mode: pingpong or oneway";
			break;
		case 'r':
			if (strcmp(optarg, "both") && strcmp(optarg, "pub") &&
			    strcmp(optarg, "sub"))
				what = "--role: both, pub or sub";
			o.role = optarg;
			break;
		case 'n':
			if (tb_cli_u64(optarg, &o.count) || o.count == 0)
				what = "--count: a number above 0";
			break;
		case 'w':
			if (tb_cli_u64(optarg, &o.warmup))
				what = "--warmup: a number";
			break;
		case 's':
			if (parse_sizes(optarg, &o))
				what = "--size: up to 32 sizes, each in range";
			break;
		case 'R':
			if (tb_cli_u64(optarg, &o.rate) || o.rate > 1000000000)
				what = "--rate: 0..1000000000 per second";
			rate_set = 1;
			break;
		case 'C':
			if (parse_cores(optarg, &o))
				what = "--cores: A,B";
			break;
		case 'I':
			if (parse_idle(optarg, &o.idle))
				what = "--idle: busy-spin, spin-then-yield or "
				       "backoff";
			o.idle_set = 1;
			break;
		case 'H': o.hgrm = optarg; break;
		case 'L': o.log = optarg; break;
		case 'i':
			if (tb_cli_u64(optarg, &o.interval_ms) ||
			    o.interval_ms == 0 || o.interval_ms > 3600000)
				what = "--interval-ms: 1..3600000";
			break;
		case 'T':
			if (tb_cli_u64(optarg, &o.timeout_ms) ||
			    o.timeout_ms == 0 || o.timeout_ms > 86400000)
				what = "--timeout-ms: 1..86400000";
			break;
		case 'M':
			if (tb_cli_u64(optarg, &o.msg_timeout_ms) ||
			    o.msg_timeout_ms == 0 ||
			    o.msg_timeout_ms > 86400000)
				what = "--msg-timeout-ms: 1..86400000";
			break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (what)
			return tb_cli_bad_value(prog, NULL, what, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, usage, argv[optind]);
	if (!strcmp(o.ping_name, o.pong_name))
		return tb_cli_usage_error(prog, NULL, "--ping and --pong must "
					  "be two streams");
	if (!o.pingpong && !rate_set)
		o.rate = 100000;

	setvbuf(stdout, NULL, _IOLBF, 0);
	tb_cli_on_stop_signals(&stop);
	tb_clock_now_ns(); /* calibrate now, not on the first sample */

	if (!strcmp(o.role, "both") && !o.config)
		snprintf(tag, sizeof(tag), ".%d", (int)getpid());
	if (stream_cfgs(&o, &e, tag) < 0)
		return 1;
	if (!o.config && !strcmp(o.role, "both")) {
		unlink(e.ping.shm_path);
		unlink(e.pong.shm_path);
	}

	if (!strcmp(o.role, "pub")) {
		status = run_end(&o, &e, 1);
	} else if (!strcmp(o.role, "sub")) {
		status = run_end(&o, &e, 0);
	} else {
		pid_t child;
		int ws = 0;

		fflush(stdout);
		child = fork();
		if (child < 0) {
			fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
			return 1;
		}
		if (child == 0)
			exit(run_end(&o, &e, 0));
		status = run_end(&o, &e, 1);
		if (status != 0)
			kill(child, SIGTERM);
		while (waitpid(child, &ws, 0) < 0 && errno == EINTR)
			;
		if (status == 0 && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
			fprintf(stderr, "%s: the sub end failed (%s %d)\n", prog,
				WIFEXITED(ws) ? "exit" : "signal",
				WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
			status = 1;
		}
		if (!o.config) {
			unlink(e.ping.shm_path);
			unlink(e.pong.shm_path);
		}
	}
	return status;
}
