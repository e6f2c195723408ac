/*
 * tb-publish - publishes a stream of quote-like test messages at a fixed
 * rate, and prints what it sent: the count, the epoch and a checksum that
 * the subscribers' must match.  Used by `make demo`, the scenario tests and
 * the benchmarks.
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"
#include "tools/demo_msg.h"

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char prog[] = "tb-publish";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-publish -c FILE -s STREAM [options]\n"
"       tb-publish --shm PATH [options]\n"
"Publishes quote-like test messages and prints a summary line:\n"
"  publisher: published=N checksum=0x... epoch=E seconds=S rate=R\n"
"options:\n"
"  -c, --config FILE     stream configuration file (INI)\n"
"  -s, --stream NAME     stream to publish in that file\n"
"      --shm PATH        publish an shm stream at PATH without a file\n"
"      --ring BYTES      ring size with --shm (default 4194304)\n"
"  -n, --count N         messages to publish (default 1000000)\n"
"  -r, --rate R          messages (bursts, with --burst) per second;\n"
"                        0 = as fast as possible\n"
"                        (default 0)\n"
"  -z, --size BYTES      payload size, 48..65536 (default 64)\n"
"  -b, --burst N         offer N messages back to back (one rate slot),\n"
"                        then tb_pub_flush(); 0 = no flushes (default 0)\n"
"      --offerv          offer each burst with one tb_pub_offerv (one\n"
"                        clock reading for all of it); needs --burst,\n"
"                        at most 4096\n"
"      --linger-ms MS    wait this long before closing (default 0)\n"
"      --start-delay-ms MS  wait this long after opening (default 0)\n"
"      --wait-subscribers N  before the first message, wait until N\n"
"                        subscribers are connected (rc only: other\n"
"                        transports do not know their readers)\n"
"      --wait-ms MS      give up waiting for them after MS, exit 1\n"
"                        (default 60000)\n"
"      --report          print a line per second\n"
"  -h, --help            this text\n");
}

/* The largest --burst that --offerv takes. */
#define BURST_V_MAX 4096u

/* Offers messages seq .. seq + n - 1, written side by side into `bufs`,
 * with tb_pub_offerv, again from where it stopped while the stream is
 * back-pressured or not yet connected, and adds what it published to
 * *sum.  Returns how many it published (fewer than n when stopped), or
 * -1 with a message. */
static int offer_burst(tb_publisher_t *pub, tb_idle_t *idle, uint8_t *bufs,
		       tb_pub_msg_t *v, int n, uint32_t size, uint64_t seq,
		       uint64_t *sum)
{
	int done = 0;

	for (int i = 0; i < n; i++) {
		tb_demo_fill(bufs + (size_t)i * size, size, seq + (uint64_t)i);
		v[i] = (tb_pub_msg_t){bufs + (size_t)i * size, size,
				      TB_DEMO_TEMPLATE_QUOTE};
	}
	while (done < n) {
		int k = tb_pub_offerv(pub, v + done, n - done);

		if (k == TB_BACK_PRESSURED || k == TB_NOT_CONNECTED) {
			if (stop)
				break;
			tb_idle_step(idle, 0);
			continue;
		}
		if (k < 0) {
			fprintf(stderr, "%s: offer %" PRIu64 ": %s\n", prog,
				seq + (uint64_t)done, tb_strerror(k));
			return -1;
		}
		done += k;
	}
	for (int i = 0; i < done; i++)
		*sum = tb_demo_sum(*sum, bufs + (size_t)i * size, size,
				   seq + (uint64_t)i);
	return done;
}

/* Waits until `want` subscribers are connected, at most `wait_ms`:
 * 0, or -1 with a message (the transport cannot tell, the time ran out
 * or a signal came). */
static int wait_subscribers(tb_publisher_t *pub, int want, uint64_t wait_ms)
{
	uint64_t until = tb_clock_mono_ms() + wait_ms;
	int have;

	if (until < wait_ms)
		until = UINT64_MAX; /* "forever", not a wrap to at once */
	while ((have = tb_pub_subscribers(pub)) >= 0 && have < want) {
		if (stop) {
			fprintf(stderr, "%s: stopped while waiting: %d of %d "
				"subscribers connected\n", prog, have, want);
			return -1;
		}
		if (tb_clock_mono_ms() >= until) {
			fprintf(stderr, "%s: %d of %d subscribers connected after "
				"%" PRIu64 " ms; not publishing\n", prog, have,
				want, wait_ms);
			return -1;
		}
		usleep(1000);
	}
	if (have < 0) {
		fprintf(stderr, "%s: --wait-subscribers: %s\n", prog, tb_errmsg());
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		{"shm", required_argument, 0, 'S'},
		{"ring", required_argument, 0, 'R'},
		{"count", required_argument, 0, 'n'},
		{"rate", required_argument, 0, 'r'},
		{"size", required_argument, 0, 'z'},
		{"burst", required_argument, 0, 'b'},
		{"offerv", no_argument, 0, 'V'},
		{"linger-ms", required_argument, 0, 'L'},
		{"start-delay-ms", required_argument, 0, 'D'},
		{"wait-subscribers", required_argument, 0, 'W'},
		{"wait-ms", required_argument, 0, 'T'},
		{"report", no_argument, 0, 'P'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *config = NULL, *stream = NULL, *shm = NULL;
	uint64_t count = 1000000, rate = 0, size = 64, linger = 0, delay = 0;
	uint64_t want_subs = 0, wait_ms = 60000;
	uint64_t ring = 4 << 20, seq, sum = 0, start, next_due, interval = 0;
	uint64_t burst = 0, in_burst = 0;
	uint64_t last_report, last_count = 0, next_check = 1024;
	uint8_t *buf;
	tb_pub_msg_t *v = NULL;
	int report = 0, use_v = 0, c, rc;
	tb_publisher_t *pub;
	tb_idle_t idle;

	while ((c = getopt_long(argc, argv, "c:s:n:r:z:b:h", opts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's': stream = optarg; break;
		case 'S': shm = optarg; break;
		case 'R': if (tb_cli_u64(optarg, &ring)) bad = "--ring"; break;
		case 'n': if (tb_cli_u64(optarg, &count)) bad = "--count"; break;
		case 'r': if (tb_cli_u64(optarg, &rate)) bad = "--rate"; break;
		case 'z':
			if (tb_cli_u64(optarg, &size) || size < TB_DEMO_MIN_SIZE ||
			    size > 65536)
				bad = "--size";
			break;
		case 'b': if (tb_cli_u64(optarg, &burst)) bad = "--burst"; break;
		case 'L': if (tb_cli_u64(optarg, &linger)) bad = "--linger-ms"; break;
		case 'D': if (tb_cli_u64(optarg, &delay)) bad = "--start-delay-ms"; break;
		case 'W':
			if (tb_cli_u64(optarg, &want_subs) || want_subs > INT_MAX)
				bad = "--wait-subscribers";
			break;
		case 'T': if (tb_cli_u64(optarg, &wait_ms)) bad = "--wait-ms"; break;
		case 'P': report = 1; break;
		case 'V': use_v = 1; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (bad)
			return tb_cli_bad_value(prog, usage, bad, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, usage, argv[optind]);
	if (!shm && (!config || !stream))
		return tb_cli_usage_error(prog, usage, "-c FILE -s STREAM or "
					  "--shm PATH is required");
	if (use_v && (burst == 0 || burst > BURST_V_MAX))
		return tb_cli_usage_error(prog, usage, "--offerv needs --burst "
					  "1..4096");

	if (shm) {
		tb_stream_cfg_t cfg;

		tb_demo_shm_cfg(&cfg, shm);
		cfg.ring_size = ring;
		rc = tb_publisher_open(&pub, &cfg);
	} else {
		rc = tb_publisher_open_file(&pub, config, stream);
	}
	if (rc < 0) {
		fprintf(stderr, "tb-publish: %s\n  (%s)\n", tb_errmsg(), tb_strerror(rc));
		return 1;
	}
	tb_cli_on_stop_signals(&stop);
	if (want_subs && wait_subscribers(pub, (int)want_subs, wait_ms) < 0) {
		tb_publisher_close(pub);
		return 1;
	}
	if (delay)
		usleep((useconds_t)(delay * 1000));

	/* A burst's messages side by side for --offerv, else one. */
	buf = malloc(size * (use_v ? burst : 1));
	if (use_v)
		v = calloc(burst, sizeof(*v));
	if (!buf || (use_v && !v)) {
		fprintf(stderr, "tb-publish: out of memory\n");
		return 1;
	}
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	if (rate)
		interval = 1000000000ull / rate;
	start = last_report = tb_clock_mono_ns();
	next_due = start;
	for (seq = 1; seq <= count && !stop; seq++) {
		int64_t r;

		if (interval && in_burst == 0) {
			while (tb_clock_mono_ns() < next_due)
				tb_idle_step(&idle, 0);
			next_due += interval;
		}
		if (use_v) {
			uint64_t n = count - seq + 1 < burst ? count - seq + 1 : burst;
			int k = offer_burst(pub, &idle, buf, v, (int)n,
					    (uint32_t)size, seq, &sum);

			if (k < 0)
				return 1;
			/* seq: the last published (the loop's ++ moves on) */
			seq += (uint64_t)k - 1;
			in_burst = burst - 1;   /* the flush below ends it */
			goto offered;
		}
		tb_demo_fill(buf, (uint32_t)size, seq);
		r = tb_pub_offer(pub, TB_DEMO_TEMPLATE_QUOTE, buf, (uint32_t)size);
		if (r == TB_BACK_PRESSURED || r == TB_NOT_CONNECTED) {
			tb_idle_step(&idle, 0);
			seq--;
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "tb-publish: offer %" PRIu64 ": %s\n", seq,
				tb_strerror((int)r));
			return 1;
		}
		sum = tb_demo_sum(sum, buf, (uint32_t)size, seq);
offered:
		if (burst && ++in_burst == burst) {
			/* The end of a burst: what a batching stream holds
			 * leaves now, not at its deadline. */
			tb_pub_flush(pub);
			in_burst = 0;
		}
		if (report && seq >= next_check &&
		    tb_clock_mono_ns() - last_report >= 1000000000ull) {
			uint64_t t = tb_clock_mono_ns();

			printf("publisher: t=%.0fs published=%" PRIu64 " rate=%.0f/s\n",
			       (t - start) / 1e9, seq,
			       (seq - last_count) * 1e9 / (double)(t - last_report));
			fflush(stdout);
			last_report = t;
			last_count = seq;
		}
		if (seq >= next_check)
			next_check = seq + 1024;
	}
	seq--;
	tb_pub_flush(pub);
	{
		double secs = (tb_clock_mono_ns() - start) / 1e9;

		printf("publisher: published=%" PRIu64 " checksum=0x%016" PRIx64
		       " epoch=%" PRIu64 " seconds=%.3f rate=%.0f\n",
		       seq, sum, tb_pub_epoch(pub), secs, secs > 0 ? seq / secs : 0.0);
		fflush(stdout);
	}
	if (linger && !stop)
		usleep((useconds_t)(linger * 1000));
	tb_publisher_close(pub);
	free(buf);
	free(v);
	return 0;
}
