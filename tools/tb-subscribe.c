/*
 * tb-subscribe - subscribes to a stream of tb-publish test messages, checks
 * every payload and the order, and prints what it got: the count, the loss
 * ranges it was told about, the running checksum, and the one-way latency
 * distribution.  Used by `make demo`, the scenario tests and the benchmarks.
 */
#include <tickbus/tickbus.h>
#include <tickbus/hist.h>
#include "tools/cli.h"
#include "tools/demo_msg.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOSSES_SHOWN 16

static const char prog[] = "tb-subscribe";
static volatile sig_atomic_t stop;

struct state {
	uint64_t delivered, first, last, sum;
	uint64_t order_errors, bad_payload, lost, laps, gaps, epochs;
	uint64_t replayed, data_losses;
	uint64_t slow_ns;
	uint64_t stall_every, stall_ms;
	tb_hist_t *lat;
	FILE *loss_log;
	char losses[LOSSES_SHOWN * 48];
	int losses_shown;
};

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-subscribe -c FILE -s STREAM [options]\n"
"       tb-subscribe --shm PATH [options]\n"
"Subscribes, verifies every tb-publish message and prints a summary line:\n"
"  subscriber NAME: delivered=N first=F last=L order_errors=0 bad_payload=0\n"
"    checksum=0x... laps=K gaps=G lost=M losses=A-B,... replayed=R\n"
"    data_losses=D end=count|closed|dead|timeout|signal\n"
"With recovery endpoints in the stream's config, gaps are recovered: the\n"
"replayed messages count in replayed=, what recovery gave up on in\n"
"data_losses= and lost=.\n"
"options:\n"
"  -c, --config FILE     stream configuration file (INI)\n"
"  -s, --stream NAME     stream to read in that file\n"
"      --shm PATH        read an shm stream at PATH without a file\n"
"  -n, --count N         stop after the message with sequence N\n"
"      --start-at SEQ    late join: deliver from SEQ (1 = start of epoch)\n"
"      --timeout-ms MS   give up after MS milliseconds (exit 4)\n"
"      --slow-ns NS      spend NS ns on every message (a slow consumer)\n"
"      --stall-every N   sleep --stall-ms MS after every N live messages\n"
"      --latency         print one-way latency percentiles\n"
"      --hgrm FILE       write the latency distribution (.hgrm, in us)\n"
"      --name NAME       label for the output (default: the pid)\n"
"      --loss-log FILE   write every loss range reported, \"FIRST LAST\" a line\n"
"      --report          print a line per second\n"
"  -h, --help            this text\n"
"exit status: 0 complete, 1 error, 2 usage, 3 publisher died, 4 timeout\n");
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct state *s = clientd;

	if (s->first == 0)
		s->first = m->seq;
	if (s->last && m->seq != s->last + 1)
		s->order_errors++;
	if (!tb_demo_check(m->data, m->len, m->seq))
		s->bad_payload++;
	s->sum = tb_demo_sum(s->sum, m->data, m->len, m->seq);
	s->last = m->seq;
	s->delivered++;
	if (m->flags & TB_MSG_F_REPLAY)
		s->replayed++;
	if (s->lat)
		tb_hist_record(s->lat, (int64_t)(m->receive_ns - m->publish_ns));
	if (s->stall_every && s->delivered % s->stall_every == 0 &&
	    !(m->flags & TB_MSG_F_REPLAY)) {
		struct timespec ts = {(time_t)(s->stall_ms / 1000),
				      (long)(s->stall_ms % 1000) * 1000000L};

		nanosleep(&ts, NULL);
	}
	if (s->slow_ns) {
		uint64_t until = tb_clock_mono_ns() + s->slow_ns;

		while (tb_clock_mono_ns() < until)
			;
	}
}

/* kind: 0 gap, 1 lap, 2 data loss (recovery gave up) */
static void note_loss(struct state *s, tb_subscriber_t *sub, int laps)
{
	uint64_t a = 0, b = 0;
	size_t n = strlen(s->losses);

	if (tb_sub_loss(sub, &a, &b) != 0)
		return;
	s->lost += b - a + 1;
	if (laps == 2)
		s->data_losses++;
	else if (laps)
		s->laps++;
	else
		s->gaps++;
	/* The missing range must follow what was delivered, exactly. */
	if (s->last && a != s->last + 1)
		s->order_errors++;
	s->last = b;
	if (s->loss_log)
		fprintf(s->loss_log, "%" PRIu64 " %" PRIu64 "\n", a, b);
	if (s->losses_shown++ < LOSSES_SHOWN)
		snprintf(s->losses + n, sizeof(s->losses) - n, "%s%" PRIu64 "-%" PRIu64,
			 n ? "," : "", a, b);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		{"shm", required_argument, 0, 'S'},
		{"count", required_argument, 0, 'n'},
		{"timeout-ms", required_argument, 0, 'T'},
		{"slow-ns", required_argument, 0, 'W'},
		{"latency", no_argument, 0, 'l'},
		{"hgrm", required_argument, 0, 'H'},
		{"name", required_argument, 0, 'N'},
		{"loss-log", required_argument, 0, 'G'},
		{"report", no_argument, 0, 'P'},
		{"start-at", required_argument, 0, 'A'},
		{"stall-every", required_argument, 0, 'E'},
		{"stall-ms", required_argument, 0, 'M'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *config = NULL, *stream = NULL, *shm = NULL, *hgrm = NULL;
	const char *loss_log = NULL;
	const char *end = "signal";
	char name[64];
	uint64_t count = 0, timeout_ms = 0, start, last_report, last_delivered = 0;
	uint64_t start_at = 0;
	struct state s;
	int latency = 0, report = 0, c, rc, status = 0;
	tb_subscriber_t *sub;
	tb_idle_t idle;

	memset(&s, 0, sizeof(s));
	snprintf(name, sizeof(name), "%d", (int)getpid());
	while ((c = getopt_long(argc, argv, "c:s:n:h", opts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's': stream = optarg; break;
		case 'S': shm = optarg; break;
		case 'n': if (tb_cli_u64(optarg, &count)) bad = "--count"; break;
		case 'T': if (tb_cli_u64(optarg, &timeout_ms)) bad = "--timeout-ms"; break;
		case 'W': if (tb_cli_u64(optarg, &s.slow_ns)) bad = "--slow-ns"; break;
		case 'l': latency = 1; break;
		case 'H': hgrm = optarg; latency = 1; break;
		case 'N': snprintf(name, sizeof(name), "%s", optarg); break;
		case 'G': loss_log = optarg; break;
		case 'P': report = 1; break;
		case 'E': if (tb_cli_u64(optarg, &s.stall_every)) bad = "--stall-every"; break;
		case 'M': if (tb_cli_u64(optarg, &s.stall_ms)) bad = "--stall-ms"; break;
		case 'A': if (tb_cli_u64(optarg, &start_at) || !start_at) bad = "--start-at"; break;
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

	if (latency && tb_hist_init(&s.lat, 1, 60000000000ll, 3) < 0) {
		fprintf(stderr, "tb-subscribe: %s\n", tb_errmsg());
		return 1;
	}
	if (loss_log && !(s.loss_log = fopen(loss_log, "w"))) {
		fprintf(stderr, "tb-subscribe: cannot write %s\n", loss_log);
		return 1;
	}
	if (shm) {
		tb_stream_cfg_t cfg;

		tb_demo_shm_cfg(&cfg, shm);
		rc = tb_subscriber_open(&sub, &cfg);
	} else {
		rc = tb_subscriber_open_file(&sub, config, stream);
	}
	if (rc < 0) {
		fprintf(stderr, "tb-subscribe: %s\n  (%s)\n", tb_errmsg(), tb_strerror(rc));
		return 1;
	}
	if (start_at && (rc = tb_sub_start_at(sub, start_at)) < 0) {
		fprintf(stderr, "tb-subscribe: %s\n", tb_errmsg());
		tb_subscriber_close(sub);
		return 1;
	}
	tb_cli_on_stop_signals(&stop);

	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	start = last_report = tb_clock_mono_ns();
	while (!stop) {
		int n = tb_sub_poll(sub, on_msg, &s, 256);

		if (n == TB_LAPPED || n == TB_GAP || n == TB_DATA_LOSS) {
			note_loss(&s, sub, n == TB_DATA_LOSS ? 2 : n == TB_LAPPED);
		} else if (n == TB_NEW_EPOCH) {
			s.epochs++;
			s.first = s.last = 0;
			s.delivered = 0;
			s.sum = 0;
		} else if (n == TB_CLOSED) {
			end = "closed";
			break;
		} else if (n == TB_PUBLISHER_DEAD) {
			end = "dead";
			status = 3;
			break;
		} else if (n < 0 && n != TB_NOT_CONNECTED && n != TB_EVICTED) {
			fprintf(stderr, "tb-subscribe: poll: %s: %s\n",
				tb_strerror(n), tb_errmsg());
			end = "error";
			status = 1;
			break;
		}
		if (count && s.last >= count) {
			end = "count";
			break;
		}
		tb_idle_step(&idle, n > 0 ? n : 0);
		if (n <= 0 && (timeout_ms || report)) {
			uint64_t t = tb_clock_mono_ns();

			if (timeout_ms && t - start > timeout_ms * 1000000ull) {
				end = "timeout";
				status = 4;
				break;
			}
			if (report && t - last_report >= 1000000000ull) {
				printf("subscriber %s: t=%.0fs delivered=%" PRIu64
				       " rate=%.0f/s lost=%" PRIu64 "\n", name,
				       (t - start) / 1e9, s.delivered,
				       (s.delivered - last_delivered) * 1e9 /
				       (double)(t - last_report), s.lost);
				fflush(stdout);
				last_report = t;
				last_delivered = s.delivered;
			}
		}
	}

	printf("subscriber %s: delivered=%" PRIu64 " first=%" PRIu64 " last=%" PRIu64
	       " order_errors=%" PRIu64 " bad_payload=%" PRIu64 " checksum=0x%016"
	       PRIx64 " laps=%" PRIu64 " gaps=%" PRIu64 " lost=%" PRIu64
	       " losses=%s replayed=%" PRIu64 " data_losses=%" PRIu64
	       " epochs=%" PRIu64 " end=%s\n",
	       name, s.delivered, s.first, s.last, s.order_errors, s.bad_payload,
	       s.sum, s.laps, s.gaps, s.lost, s.losses[0] ? s.losses : "none",
	       s.replayed, s.data_losses, s.epochs, end);
	if (s.lat && tb_hist_count(s.lat) > 0) {
		printf("subscriber %s: latency_ns count=%" PRId64 " p50=%" PRId64
		       " p90=%" PRId64 " p99=%" PRId64 " p99.9=%" PRId64
		       " max=%" PRId64 "\n", name, tb_hist_count(s.lat),
		       tb_hist_value_at_percentile(s.lat, 50),
		       tb_hist_value_at_percentile(s.lat, 90),
		       tb_hist_value_at_percentile(s.lat, 99),
		       tb_hist_value_at_percentile(s.lat, 99.9),
		       tb_hist_max(s.lat));
	}
	if (hgrm && s.lat) {
		FILE *f = fopen(hgrm, "w");

		if (!f || tb_hist_write_hgrm(s.lat, f, 1000.0, 0) < 0) {
			fprintf(stderr, "tb-subscribe: cannot write %s\n", hgrm);
			status = 1;
		}
		if (f)
			fclose(f);
	}
	fflush(stdout);
	if (s.order_errors || s.bad_payload)
		status = 1;
	if (s.loss_log && fclose(s.loss_log) != 0)
		status = 1;
	tb_subscriber_close(sub);
	tb_hist_free(s.lat);
	return status;
}
