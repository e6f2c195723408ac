/*
 * metrics.c - the Prometheus text exposition of the counters files (see
 * metrics.h for the families).
 *
 * The format's rules that matter here: a family's HELP and TYPE come once,
 * before its samples, and its samples are contiguous; label values escape
 * backslash, double quote and newline; a histogram's buckets are
 * cumulative, end with le="+Inf" equal to _count, and come with _sum.
 * Counts are derived from the buckets of the copy (the writer may have
 * moved on between two loads), so the +Inf bucket and _count always agree.
 */
#include "tools/stat/metrics.h"

#include <inttypes.h>
#include <string.h>

/* One label value, escaped. */
static void label_value(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(out, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", out);
		else
			fputc(*s, out);
	}
}

static void proc_labels(FILE *out, const tb_counters_proc_t *p)
{
	fprintf(out, "pid=\"%d\",process=\"", (int)p->pid);
	label_value(out, p->name);
	fputc('"', out);
}

static void stream_labels(FILE *out, const tb_counters_proc_t *p,
			  uint32_t id, uint32_t role, const char *name,
			  const char *transport)
{
	proc_labels(out, p);
	fputs(",stream=\"", out);
	label_value(out, name);
	fprintf(out, "\",stream_id=\"%u\",role=\"%s\",transport=\"", id,
		tb_counter_role_name((int)role));
	label_value(out, transport);
	fputc('"', out);
}

static void family(FILE *out, const char *name, const char *type,
		   const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const counter_help[TB_CTR_COUNT] = {
	[TB_CTR_PUBLISHED] = "Messages published.",
	[TB_CTR_DELIVERED] = "Messages delivered to the application.",
	[TB_CTR_GAPS] = "Gaps detected.",
	[TB_CTR_LAPPED] = "Times this reader was overrun.",
	[TB_CTR_BACK_PRESSURED] = "Offers refused by back-pressure.",
	[TB_CTR_RECOVERY_REQUESTS] = "Gap recovery requests sent.",
	[TB_CTR_RECOVERY_OK] = "Gap recoveries completed.",
	[TB_CTR_RECOVERY_FAILED] = "Gap recoveries that failed.",
	[TB_CTR_ERRORS] = "Errors.",
	[TB_CTR_DUPLICATES] = "Duplicate frames dropped.",
	[TB_CTR_MALFORMED] = "Malformed datagrams or frames dropped.",
	[TB_CTR_REORDERED] = "Datagrams that came after their gap was told.",
	[TB_CTR_STALE_EPOCH] = "Datagrams of a publisher epoch already left.",
	[TB_CTR_REPLAYED] = "Frames delivered by recovery.",
	[TB_CTR_DATA_LOSS] = "Losses recovery could not repair.",
};

static void counters(FILE *out, tb_counters_proc_t *const *procs, int n)
{
	for (int k = 0; k < TB_CTR_COUNT; k++) {
		char name[96];

		snprintf(name, sizeof(name), "tickbus_%s_total",
			 tb_counter_name(k));
		family(out, name, "counter", counter_help[k]
			     ? counter_help[k]
			     : "Malformed datagrams of this kind dropped.");
		for (int i = 0; i < n; i++)
			for (int j = 0; j < procs[i]->n_streams; j++) {
				const tb_counters_stream_t *st =
					&procs[i]->streams[j];

				fprintf(out, "%s{", name);
				stream_labels(out, procs[i], st->stream_id,
					      st->role, st->name,
					      st->transport);
				fprintf(out, "} %" PRIu64 "\n", st->c[k]);
			}
	}
}

/* `ns` as exact decimal seconds ("0.000000064", "2.147483648"): a bucket
 * bound must survive the trip through text unchanged. */
static const char *seconds_text(uint64_t ns, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%" PRIu64 ".%09" PRIu64,
			 ns / 1000000000u, ns % 1000000000u);

	while (n > 2 && buf[n - 1] == '0' && buf[n - 2] != '.')
		buf[--n] = '\0';
	return buf;
}

static void histogram(FILE *out, const tb_counters_proc_t *p,
		      const tb_counters_hist_t *h)
{
	static const char fam[] = "tickbus_latency_seconds";
	uint64_t cum = 0;
	char le[32];

#define HIST_LABELS()                                                      \
	do {                                                               \
		stream_labels(out, p, h->stream_id, h->role, "", "");      \
		fputs(",name=\"", out);                                    \
		label_value(out, h->name);                                 \
		fputc('"', out);                                           \
	} while (0)

	for (int b = 0; b < TB_COUNTERS_HIST_BUCKETS; b++) {
		cum += h->b[b];
		fprintf(out, "%s_bucket{", fam);
		HIST_LABELS();
		if (b < TB_COUNTERS_HIST_BUCKETS - 1)
			fprintf(out, ",le=\"%s\"} %" PRIu64 "\n",
				seconds_text(tb_counter_hist_le_ns((unsigned)b),
					     le, sizeof(le)), cum);
		else
			fprintf(out, ",le=\"+Inf\"} %" PRIu64 "\n", cum);
	}
	fprintf(out, "%s_sum{", fam);
	HIST_LABELS();
	fprintf(out, "} %.9f\n", (double)h->sum_ns / 1e9);
	fprintf(out, "%s_count{", fam);
	HIST_LABELS();
	fprintf(out, "} %" PRIu64 "\n", cum);
#undef HIST_LABELS
}

int tb_stat_metrics_write(FILE *out, tb_counters_proc_t *const *procs, int n,
			  uint64_t now_ns, int reaped)
{
	family(out, "tickbus_processes", "gauge",
	       "tickbus processes with a live counters file.");
	fprintf(out, "tickbus_processes %d\n", n);
	family(out, "tickbus_stale_files_reaped", "gauge",
	       "Counters files of dead processes removed by this reading.");
	fprintf(out, "tickbus_stale_files_reaped %d\n", reaped);
	family(out, "tickbus_process_start_time_seconds", "gauge",
	       "When the process created its counters file (Unix time).");
	for (int i = 0; i < n; i++) {
		fputs("tickbus_process_start_time_seconds{", out);
		proc_labels(out, procs[i]);
		fprintf(out, "} %.3f\n", (double)procs[i]->start_ns / 1e9);
	}
	family(out, "tickbus_heartbeat_age_seconds", "gauge",
	       "Seconds since the process last beat; -1 if it never did.");
	for (int i = 0; i < n; i++) {
		uint64_t hb = procs[i]->heartbeat_ns;
		double age = hb == 0 ? -1
			     : hb > now_ns ? 0 : (double)(now_ns - hb) / 1e9;

		fputs("tickbus_heartbeat_age_seconds{", out);
		proc_labels(out, procs[i]);
		fprintf(out, "} %.3f\n", age);
	}
	counters(out, procs, n);
	family(out, "tickbus_latency_seconds", "histogram",
	       "Latency histograms the processes export (by name).");
	for (int i = 0; i < n; i++)
		for (int j = 0; j < procs[i]->n_hists; j++)
			histogram(out, procs[i], &procs[i]->hists[j]);
	family(out, "tickbus_mr_bytes", "gauge",
	       "Bytes of each memory registration (tb-doctor --audit).");
	for (int i = 0; i < n; i++)
		for (int j = 0; j < procs[i]->n_mrs; j++) {
			const tb_counters_mr_t *m = &procs[i]->mrs[j];
			char acc[96];

			fputs("tickbus_mr_bytes{", out);
			stream_labels(out, procs[i], m->stream_id, m->role, "",
				      m->transport);
			fprintf(out, ",use=\"%s\",access=\"%s\",peers=\"%u\"} "
				"%" PRIu64 "\n", tb_mr_use_name((int)m->use),
				tb_mr_access_str(m->access, acc, sizeof(acc)),
				m->n_peers, m->length);
		}
	return ferror(out) ? -1 : 0;
}
