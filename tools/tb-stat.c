/*
 * tb-stat - a live view of every tickbus process on this host, from the
 * counters files each one keeps (bus/counters.h): per stream, messages per
 * second, totals, gaps, laps, back-pressure, recovery requests and outcomes,
 * errors, and how old the process's heartbeat is.
 *
 * Each refresh reads the directory afresh, so processes that start are
 * picked up and processes that die drop out (the reader skips files whose
 * pid is gone or reused); a process seen at the previous refresh and gone
 * now is listed once as "gone".  Rates are the difference between two
 * refreshes of the same process (same pid and start time) and stream; a
 * stream seen for the first time has no rate yet ("-").
 *
 * --once takes two readings --interval-ms apart and prints one table (so
 * rates are real); --json prints one JSON object per refresh, one per line.
 *
 * For monitoring: --prometheus writes one reading in the Prometheus text
 * format (tools/stat/metrics.h) to stdout or, with --output, atomically to
 * a file (node-exporter's textfile collector); --listen ADDR serves it on
 * http://ADDR/metrics (tools/stat/httpd.h), a fresh reading per scrape.
 *
 * Every reading removes the counters files of processes that are gone
 * (SIGKILLed, crashed: they could not remove their own), unless --no-reap.
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"

#include "bus/config.h"
#include "bus/counters.h"
#include "bus/net.h"
#include "tools/stat/httpd.h"
#include "tools/stat/metrics.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Processes one refresh keeps; more are counted but not shown. */
#define PROCS_MAX 256

static const char prog[] = "tb-stat";
static volatile sig_atomic_t stop;

typedef struct snap {
	int n, dropped, reaped;
	uint64_t at_ns; /* CLOCK_REALTIME of the reading */
	tb_counters_proc_t *procs[PROCS_MAX];
} snap_t;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-stat [options]\n"
"Shows every running tickbus process and its streams, refreshed live.\n"
"  -1, --once            two readings --interval-ms apart, one table, exit\n"
"  -j, --json            JSON, one object per refresh and line\n"
"  -i, --interval-ms MS  time between refreshes (default 1000)\n"
"  -n, --count N         stop after N refreshes (default: until ^C)\n"
"  -d, --dir DIR         where the counters files are (default\n"
"                        $TICKBUS_COUNTERS_DIR or /dev/shm)\n"
"  -p, --prometheus      one reading in the Prometheus text format, exit\n"
"  -o, --output FILE     with --prometheus: write FILE atomically (for\n"
"                        node-exporter's textfile collector)\n"
"  -l, --listen ADDR     serve http://ADDR/metrics (host:port) until ^C\n"
"      --no-reap         keep the counters files of dead processes\n"
"  -h, --help            this text\n"
"columns: msgs/s (published for a publisher, delivered otherwise), total,\n"
"gaps, laps, back-pressure, recovery requests/ok/failed, errors (errors +\n"
"malformed), heartbeat age\n"
"exit status: 0 done, 1 cannot read the directory (or listen, or write\n"
"FILE), 2 usage\n");
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void snap_clear(snap_t *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->procs[i]);
	s->n = 0;
	s->dropped = 0;
}

static int on_proc(void *arg, const tb_counters_proc_t *p)
{
	snap_t *s = arg;
	tb_counters_proc_t *copy;

	if (s->n == PROCS_MAX) {
		s->dropped++;
		return 0;
	}
	copy = malloc(sizeof(*copy));
	if (!copy) {
		s->dropped++;
		return 0;
	}
	*copy = *p;
	s->procs[s->n++] = copy;
	return 0;
}

static int cmp_proc(const void *a, const void *b)
{
	const tb_counters_proc_t *x = *(tb_counters_proc_t *const *)a;
	const tb_counters_proc_t *y = *(tb_counters_proc_t *const *)b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int take(snap_t *s, const char *dir, int reap)
{
	int rc;

	snap_clear(s);
	s->at_ns = realtime_ns();
	rc = tb_counters_read_dir_reap(dir, reap ? TB_COUNTERS_DELETE_STALE : 0,
				       on_proc, s, &s->reaped);
	if (rc < 0)
		return rc;
	qsort(s->procs, (size_t)s->n, sizeof(s->procs[0]), cmp_proc);
	return 0;
}

static const tb_counters_proc_t *find_proc(const snap_t *s,
					   const tb_counters_proc_t *p)
{
	for (int i = 0; i < s->n; i++)
		if (s->procs[i]->pid == p->pid &&
		    s->procs[i]->start_ticks == p->start_ticks)
			return s->procs[i];
	return NULL;
}

static const tb_counters_stream_t *find_stream(const tb_counters_proc_t *p,
					       const tb_counters_stream_t *st)
{
	if (!p)
		return NULL;
	for (int i = 0; i < p->n_streams; i++)
		if (p->streams[i].stream_id == st->stream_id &&
		    p->streams[i].role == st->role &&
		    !strcmp(p->streams[i].name, st->name))
			return &p->streams[i];
	return NULL;
}

/* The count a stream's rate is computed from. */
static uint64_t flow(const tb_counters_stream_t *st)
{
	return st->role == TB_ROLE_PUBLISHER ? st->c[TB_CTR_PUBLISHED]
					     : st->c[TB_CTR_DELIVERED];
}

/* Messages per second since `prev`, or -1 when there is no earlier
 * reading of this stream. */
static double rate(const tb_counters_stream_t *st,
		   const tb_counters_stream_t *prev, uint64_t dt_ns)
{
	if (!prev || dt_ns == 0 || flow(st) < flow(prev))
		return -1;
	return (double)(flow(st) - flow(prev)) * 1e9 / (double)dt_ns;
}

static double age_s(uint64_t now, uint64_t hb)
{
	if (hb == 0 || hb > now)
		return hb == 0 ? -1 : 0;
	return (double)(now - hb) / 1e9;
}

static void print_table(const snap_t *cur, const snap_t *prev, int tty)
{
	uint64_t dt = prev ? cur->at_ns - prev->at_ns : 0;
	time_t secs = (time_t)(cur->at_ns / 1000000000ull);
	char when[32];
	struct tm tm;
	int streams = 0;

	for (int i = 0; i < cur->n; i++)
		streams += cur->procs[i]->n_streams;
	gmtime_r(&secs, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("tb-stat %s UTC  processes=%d streams=%d\n", when, cur->n,
	       streams);
	printf("%-7s %-14s %-16s %5s %-10s %-5s %10s %12s %6s %6s %7s %7s %6s "
	       "%6s %6s %6s\n", "PID", "PROCESS", "STREAM", "ID", "ROLE",
	       "TRANS", "MSGS/S", "TOTAL", "GAPS", "LAPS", "BACKPR", "REC_REQ",
	       "REC_OK", "REC_KO", "ERRORS", "HB_AGE");
	for (int i = 0; i < cur->n; i++) {
		const tb_counters_proc_t *p = cur->procs[i];
		const tb_counters_proc_t *pp = prev ? find_proc(prev, p) : NULL;
		double age = age_s(cur->at_ns, p->heartbeat_ns);
		char agebuf[16];

		if (age < 0)
			snprintf(agebuf, sizeof(agebuf), "-");
		else
			snprintf(agebuf, sizeof(agebuf), "%.1fs", age);
		if (p->n_streams == 0)
			printf("%-7d %-14.14s %-16s\n", (int)p->pid, p->name,
			       "(no streams)");
		for (int j = 0; j < p->n_streams; j++) {
			const tb_counters_stream_t *st = &p->streams[j];
			double r = rate(st, find_stream(pp, st), dt);
			char ratebuf[24];

			if (r < 0)
				snprintf(ratebuf, sizeof(ratebuf), "-");
			else
				snprintf(ratebuf, sizeof(ratebuf), "%.0f", r);
			printf("%-7d %-14.14s %-16.16s %5u %-10.10s %-5.5s %10s "
			       "%12" PRIu64 " %6" PRIu64 " %6" PRIu64 " %7" PRIu64
			       " %7" PRIu64 " %6" PRIu64 " %6" PRIu64 " %6" PRIu64
			       " %6s\n", (int)p->pid, p->name, st->name,
			       st->stream_id, tb_counter_role_name((int)st->role),
			       st->transport, ratebuf, flow(st),
			       st->c[TB_CTR_GAPS], st->c[TB_CTR_LAPPED],
			       st->c[TB_CTR_BACK_PRESSURED],
			       st->c[TB_CTR_RECOVERY_REQUESTS],
			       st->c[TB_CTR_RECOVERY_OK],
			       st->c[TB_CTR_RECOVERY_FAILED],
			       st->c[TB_CTR_ERRORS] + st->c[TB_CTR_MALFORMED],
			       agebuf);
		}
	}
	if (prev)
		for (int i = 0; i < prev->n; i++)
			if (!find_proc(cur, prev->procs[i]))
				printf("gone: pid %d (%s)\n",
				       (int)prev->procs[i]->pid,
				       prev->procs[i]->name);
	if (cur->dropped)
		printf("(%d more processes not shown)\n", cur->dropped);
	if (cur->reaped)
		printf("reaped: %d counters files of dead processes\n",
		       cur->reaped);
	fflush(stdout);
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_json(const snap_t *cur, const snap_t *prev)
{
	uint64_t dt = prev ? cur->at_ns - prev->at_ns : 0;

	printf("{\"time_ns\":%" PRIu64 ",\"interval_ns\":%" PRIu64
	       ",\"reaped\":%d,\"processes\":[", cur->at_ns, dt, cur->reaped);
	for (int i = 0; i < cur->n; i++) {
		const tb_counters_proc_t *p = cur->procs[i];
		const tb_counters_proc_t *pp = prev ? find_proc(prev, p) : NULL;
		double age = age_s(cur->at_ns, p->heartbeat_ns);

		printf("%s{\"pid\":%d,\"name\":", i ? "," : "", (int)p->pid);
		json_string(p->name);
		printf(",\"start_ns\":%" PRIu64 ",\"heartbeat_age_s\":",
		       p->start_ns);
		if (age < 0)
			printf("null");
		else
			printf("%.3f", age);
		printf(",\"streams\":[");
		for (int j = 0; j < p->n_streams; j++) {
			const tb_counters_stream_t *st = &p->streams[j];
			double r = rate(st, find_stream(pp, st), dt);

			printf("%s{\"stream\":", j ? "," : "");
			json_string(st->name);
			printf(",\"id\":%u,\"role\":", st->stream_id);
			json_string(tb_counter_role_name((int)st->role));
			printf(",\"transport\":");
			json_string(st->transport);
			if (r < 0)
				printf(",\"msgs_per_s\":null");
			else
				printf(",\"msgs_per_s\":%.1f", r);
			printf(",\"counters\":{");
			for (int k = 0; k < TB_CTR_COUNT; k++)
				printf("%s\"%s\":%" PRIu64, k ? "," : "",
				       tb_counter_name(k), st->c[k]);
			printf("}}");
		}
		printf("]}");
	}
	printf("],\"gone\":[");
	if (prev) {
		int first = 1;

		for (int i = 0; i < prev->n; i++)
			if (!find_proc(cur, prev->procs[i])) {
				printf("%s%d", first ? "" : ",",
				       (int)prev->procs[i]->pid);
				first = 0;
			}
	}
	printf("]}\n");
	fflush(stdout);
}

static void nap_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (!stop && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* One reading as metrics to `out`. */
static int render(void *arg, FILE *out)
{
	const struct { const char *dir; int reap; } *a = arg;
	static snap_t s;
	int rc;

	if (take(&s, a->dir, a->reap) < 0)
		return -1;
	rc = tb_stat_metrics_write(out, s.procs, s.n, s.at_ns, s.reaped);
	snap_clear(&s);
	return rc;
}

/* --prometheus: stdout, or `output` written whole and renamed over, so
 * that a collector never reads half a file. */
static int prometheus_once(const char *dir, int reap, const char *output)
{
	struct { const char *dir; int reap; } a = {dir, reap};
	char tmp[TB_PATH_MAX];
	FILE *f;

	if (!output) {
		if (render(&a, stdout) != 0 || fflush(stdout) != 0)
			goto fail;
		return 0;
	}
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", output, (int)getpid()) >=
	    (int)sizeof(tmp)) {
		fprintf(stderr, "%s: --output path too long\n", prog);
		return 1;
	}
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, tmp, strerror(errno));
		return 1;
	}
	if (render(&a, f) != 0 || fclose(f) != 0) {
		unlink(tmp);
		goto fail;
	}
	if (rename(tmp, output) != 0) {
		fprintf(stderr, "%s: rename %s to %s: %s\n", prog, tmp, output,
			strerror(errno));
		unlink(tmp);
		return 1;
	}
	return 0;
fail:
	fprintf(stderr, "%s: %s\n", prog, tb_errmsg()[0] ? tb_errmsg()
							 : "write failed");
	return 1;
}

/* --listen: serve /metrics until a stop signal. */
static int serve(const char *dir, int reap, const char *addr)
{
	struct { const char *dir; int reap; } a = {dir, reap};
	tb_endpoint_t ep;
	uint16_t port;
	int lfd, rc;

	if (tb_config_endpoint_parse(&ep, addr) < 0)
		return tb_cli_usage_error(prog, NULL, "--listen '%s': %s", addr,
					  tb_errmsg());
	lfd = tb_net_listen(&ep, &port);
	if (lfd < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return 1;
	}
	fprintf(stderr, "%s: serving http://%s:%u/metrics\n", prog, ep.host,
		(unsigned)port);
	while (!stop) {
		rc = tb_stat_httpd_serve_one(lfd, 200, render, &a);
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			close(lfd);
			return 1;
		}
	}
	close(lfd);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"once", no_argument, 0, '1'},
		{"json", no_argument, 0, 'j'},
		{"interval-ms", required_argument, 0, 'i'},
		{"count", required_argument, 0, 'n'},
		{"dir", required_argument, 0, 'd'},
		{"prometheus", no_argument, 0, 'p'},
		{"output", required_argument, 0, 'o'},
		{"listen", required_argument, 0, 'l'},
		{"no-reap", no_argument, 0, 'R'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static snap_t a, b;
	snap_t *cur = &a, *prev = &b;
	const char *dir = NULL, *output = NULL, *listen = NULL;
	uint64_t interval_ms = 1000, count = 0, done = 0;
	int once = 0, json = 0, prom = 0, reap = 1, c, have_prev = 0, tty;

	while ((c = getopt_long(argc, argv, "1ji:n:d:po:l:h", opts, NULL)) != -1) {
		switch (c) {
		case '1': once = 1; break;
		case 'j': json = 1; break;
		case 'i':
			if (tb_cli_u64(optarg, &interval_ms) ||
			    interval_ms < 10 || interval_ms > 3600000)
				return tb_cli_usage_error(prog, NULL, "--interval-ms "
							  "'%s' is not in "
							  "10..3600000", optarg);
			break;
		case 'n':
			if (tb_cli_u64(optarg, &count) || count == 0)
				return tb_cli_usage_error(prog, NULL, "--count '%s' "
							  "is not a number "
							  "above 0", optarg);
			break;
		case 'd': dir = optarg; break;
		case 'p': prom = 1; break;
		case 'o': output = optarg; break;
		case 'l': listen = optarg; break;
		case 'R': reap = 0; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);
	if (output && !prom)
		return tb_cli_usage_error(prog, NULL, "--output goes with "
					  "--prometheus");
	if (listen && (prom || once || json))
		return tb_cli_usage_error(prog, NULL, "--listen serves the "
					  "metrics itself: not with "
					  "--prometheus, --once or --json");
	tb_cli_on_stop_signals(&stop);
	if (prom)
		return prometheus_once(dir, reap, output);
	if (listen)
		return serve(dir, reap, listen);
	tty = !json && isatty(STDOUT_FILENO);
	if (once)
		count = 1;

	/* The first reading only seeds the rates when --once asks for one
	 * table; live, every reading is shown. */
	if (once) {
		if (take(prev, dir, reap) < 0)
			goto fail;
		have_prev = 1;
		nap_ms(interval_ms);
	}
	while (!stop) {
		snap_t *t;

		if (take(cur, dir, reap) < 0)
			goto fail;
		if (once)
			cur->reaped += prev->reaped; /* the seeding reading's */
		if (json)
			print_json(cur, have_prev ? prev : NULL);
		else
			print_table(cur, have_prev ? prev : NULL, tty);
		if (count && ++done >= count)
			break;
		t = prev;
		prev = cur;
		cur = t;
		have_prev = 1;
		nap_ms(interval_ms);
	}
	snap_clear(&a);
	snap_clear(&b);
	return 0;
fail:
	fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
	snap_clear(&a);
	snap_clear(&b);
	return 1;
}
