/*
 * tb-hist - prints, merges and compares latency distributions, and renders
 * them as an SVG percentile plot.
 *
 * Inputs are either .hgrm files (HdrHistogram's percentile distribution
 * text, as tb-latency, tb-subscribe and the benchmarks write it) or interval
 * histogram logs (HdrHistogram's log format, base64 V2 histograms).  The
 * kind is told from the first non-blank line: the "Value Percentile ..."
 * header is a .hgrm, anything else is read as a log.  A log's intervals are
 * merged into one distribution (optionally those of one tag only).  A .hgrm
 * holds no histogram, only its percentile lines; it is turned back into one
 * by recording each line's count increment at its value, which reproduces
 * every percentile the file lists (a lossless round trip for a .hgrm that
 * tb-hist itself writes with the same ticks).  Values are kept in
 * nanoseconds; --hgrm-unit says what unit a .hgrm's values are in (the
 * HdrHistogram habit, and tickbus's, is microseconds).
 *
 * The plot is the classic HdrHistogram view: latency against percentile on
 * a log 1/(1-p) axis, so that 90%, 99%, 99.9%, ... are equally spaced; one
 * line per input, labelled.  The SVG is self-contained (no script, font or
 * stylesheet), so any browser opens it.
 */
#include <tickbus/tickbus.h>

#include <tickbus/hist.h>
#include "tools/cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS_MAX 16
/* One hour in ns, 3 digits: the layout every tickbus tool records with. */
#define HIST_HIGHEST 3600000000000ll
#define LABEL_MAX 128
/* Points per curve: enough that a polyline looks smooth on 800 px. */
#define PLOT_POINTS 400

typedef struct run {
	const char *path;
	char label[LABEL_MAX];
	tb_hist_t *h;
	int intervals; /* log intervals merged (0 for a .hgrm) */
	int is_log;
} run_t;

typedef struct unit {
	const char *name;
	double ns; /* nanoseconds per unit */
} unit_t;

static const unit_t units[] = {
	{"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9},
};

static const char prog[] = "tb-hist";

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-hist print   [options] FILE...\n"
"       tb-hist merge   -o OUT [options] FILE...\n"
"       tb-hist compare [options] FILE...\n"
"       tb-hist plot    -o OUT.svg [options] FILE...\n"
"FILE is a .hgrm percentile distribution or an interval histogram log\n"
"(HdrHistogram formats); a log's intervals are merged into one.\n"
"commands:\n"
"  print     a summary line per file; with --hgrm or --csv the whole\n"
"            percentile distribution\n"
"  merge     adds all inputs into one distribution, written as .hgrm when\n"
"            OUT ends in .hgrm, as CSV when it ends in .csv, otherwise as an\n"
"            interval log with one interval\n"
"  compare   p50 .. max of every file side by side, with the ratio of each\n"
"            to the first file\n"
"  plot      latency against percentile (log 1/(1-p) axis), one labelled\n"
"            line per file, as a self-contained SVG\n"
"options:\n"
"  -o, --output FILE     output file (merge, plot)\n"
"  -u, --unit U          unit of printed and plotted values: ns, us, ms, s\n"
"                        (default us)\n"
"      --hgrm-unit U     unit of the values in input .hgrm files (default us)\n"
"  -t, --tag TAG         read only the log intervals with this tag\n"
"  -l, --label TEXT      label of the next FILE in compare and plot (may be\n"
"                        repeated; default: the file name)\n"
"      --title TEXT      plot title\n"
"      --hgrm            print: the whole .hgrm distribution\n"
"      --csv             print: the distribution as CSV\n"
"      --markdown        compare: a markdown table\n"
"      --ticks N         percentile lines per halving (default 5)\n"
"  -h, --help            this text\n"
"exit status: 0 done, 1 bad or unreadable input, 2 usage\n");
}

static int parse_unit(const char *s, double *ns, const char **name)
{
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(s, units[i].name)) {
			*ns = units[i].ns;
			if (name)
				*name = units[i].name;
			return 0;
		}
	return -1;
}

/* ---------------------------------------------------------------- input */

static int is_blank(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return *s == '\0';
}

/*
 * Parses a .hgrm: header, data lines "value percentile total [inverse]",
 * "#[...]" footer.  Each data line's total count must not decrease and its
 * percentile must lie in 0..1.  Returns 0 or -1 with a message printed.
 */
static int load_hgrm(FILE *f, const char *path, double unit_ns, tb_hist_t *h)
{
	char line[512];
	int64_t prev = 0;
	long lineno = 0;
	int data = 0;

	while (fgets(line, sizeof(line), f)) {
		double value, pct;
		long long total;
		char *p = line, *end;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fprintf(stderr, "%s: %s: line %ld is too long for a "
				".hgrm\n", prog, path, lineno);
			return -1;
		}
		if (is_blank(line) || line[0] == '#' ||
		    strstr(line, "Percentile"))
			continue;
		errno = 0;
		value = strtod(p, &end);
		if (end == p)
			goto bad;
		p = end;
		pct = strtod(p, &end);
		if (end == p)
			goto bad;
		p = end;
		total = strtoll(p, &end, 10);
		if (end == p || errno)
			goto bad;
		if (!isfinite(value) || value < 0 || !(pct >= 0 && pct <= 1)) {
			fprintf(stderr, "%s: %s: line %ld: value or percentile "
				"out of range\n", prog, path, lineno);
			return -1;
		}
		if (total < prev) {
			fprintf(stderr, "%s: %s: line %ld: total count %lld "
				"is below the line before (%" PRId64 ")\n",
				prog, path, lineno, total, prev);
			return -1;
		}
		if (value * unit_ns > 9e18) {
			fprintf(stderr, "%s: %s: line %ld: value too large\n",
				prog, path, lineno);
			return -1;
		}
		tb_hist_record_n(h, (int64_t)llround(value * unit_ns),
				 total - prev);
		prev = total;
		data++;
		continue;
bad:
		fprintf(stderr, "%s: %s: line %ld is not a .hgrm line "
			"(value percentile total_count [1/(1-p)])\n", prog,
			path, lineno);
		return -1;
	}
	if (ferror(f)) {
		fprintf(stderr, "%s: %s: read error\n", prog, path);
		return -1;
	}
	if (data == 0) {
		fprintf(stderr, "%s: %s: no percentile lines in the .hgrm\n",
			prog, path);
		return -1;
	}
	return 0;
}

/* Merges the intervals of a log (those tagged `tag` only, if set). */
static int load_log(FILE *f, const char *path, const char *tag, run_t *r)
{
	tb_hist_log_reader_t *rd;
	tb_hist_log_entry_t e;
	int rc;

	if (tb_hist_log_reader_open(&rd, f) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, tb_errmsg());
		return -1;
	}
	while ((rc = tb_hist_log_read(rd, &e)) == 1) {
		if (!tag || !strcmp(tag, e.tag)) {
			tb_hist_merge(r->h, e.hist);
			r->intervals++;
		}
		tb_hist_free(e.hist);
	}
	tb_hist_log_reader_close(rd);
	if (rc < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, tb_errmsg());
		return -1;
	}
	if (r->intervals == 0) {
		fprintf(stderr, "%s: %s: no interval histograms%s%s in the "
			"log\n", prog, path, tag ? " tagged " : "",
			tag ? tag : "");
		return -1;
	}
	return 0;
}

static void default_label(run_t *r)
{
	const char *b = strrchr(r->path, '/');
	char *dot;

	snprintf(r->label, sizeof(r->label), "%s", b ? b + 1 : r->path);
	dot = strrchr(r->label, '.');
	if (dot && dot != r->label)
		*dot = '\0';
}

static int load(run_t *r, double hgrm_unit_ns, const char *tag)
{
	char first[512] = "";
	FILE *f = fopen(r->path, "r");
	int rc;

	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, r->path, strerror(errno));
		return -1;
	}
	if (tb_hist_init(&r->h, 1, HIST_HIGHEST, 3) < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		fclose(f);
		return -1;
	}
	while (fgets(first, sizeof(first), f) && is_blank(first))
		first[0] = '\0';
	rewind(f);
	if (first[0] == '\0' || is_blank(first)) {
		fprintf(stderr, "%s: %s: empty file\n", prog, r->path);
		rc = -1;
	} else if (strstr(first, "Value") && strstr(first, "Percentile")) {
		rc = load_hgrm(f, r->path, hgrm_unit_ns, r->h);
	} else {
		r->is_log = 1;
		rc = load_log(f, r->path, tag, r);
	}
	fclose(f);
	if (!r->label[0])
		default_label(r);
	return rc;
}

/* --------------------------------------------------------------- output */

static const double summary_pcts[] = {50, 90, 99, 99.9, 99.99};

static void print_summary(const run_t *r, double u, const char *uname)
{
	const tb_hist_t *h = r->h;

	printf("%s: count=%" PRId64, r->path, tb_hist_count(h));
	for (size_t i = 0; i < sizeof(summary_pcts) / sizeof(summary_pcts[0]);
	     i++)
		printf(" p%g=%.3f", summary_pcts[i],
		       (double)tb_hist_value_at_percentile(h, summary_pcts[i]) /
			       u);
	printf(" max=%.3f min=%.3f mean=%.3f stddev=%.3f unit=%s",
	       (double)tb_hist_max(h) / u, (double)tb_hist_min(h) / u,
	       tb_hist_mean(h) / u, tb_hist_stddev(h) / u, uname);
	if (r->is_log)
		printf(" intervals=%d", r->intervals);
	printf("\n");
}

static int64_t row_value(const run_t *r, size_t row)
{
	return row < 5 ? tb_hist_value_at_percentile(r->h, summary_pcts[row])
		       : tb_hist_max(r->h);
}

/* A table of p50 .. max per run, then each run's ratio to the first; as
 * aligned text, or as a markdown table (labels in full). */
static void compare(run_t *runs, int n, double u, const char *uname, int md)
{
	static const char *rows[] = {"p50", "p90", "p99", "p99.9", "p99.99",
				     "max"};

	if (md) {
		printf("| %s |", uname);
		for (int j = 0; j < n; j++)
			printf(" %s |", runs[j].label);
		for (int j = 1; j < n; j++)
			printf(" %s / %s |", runs[j].label, runs[0].label);
		printf("\n|---|");
		for (int j = 1; j < 2 * n; j++)
			printf("---:|");
		printf("\n");
	} else {
		printf("%-8s", uname);
		for (int j = 0; j < n; j++)
			printf(" %14.14s", runs[j].label);
		for (int j = 1; j < n; j++)
			printf(" %9s", "ratio");
		printf("\n");
	}
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		double v0 = (double)row_value(&runs[0], i);

		printf(md ? "| %s |" : "%-8s", rows[i]);
		for (int j = 0; j < n; j++)
			printf(md ? " %.3f |" : " %14.3f",
			       (double)row_value(&runs[j], i) / u);
		for (int j = 1; j < n; j++) {
			double v = (double)row_value(&runs[j], i);

			if (v0 > 0)
				printf(md ? " %.2f |" : " %9.2f", v / v0);
			else
				printf(md ? " - |" : " %9s", "-");
		}
		printf("\n");
	}
	printf(md ? "| count |" : "%-8s", "count");
	for (int j = 0; j < n; j++)
		printf(md ? " %" PRId64 " |" : " %14" PRId64,
		       tb_hist_count(runs[j].h));
	for (int j = 1; md && j < n; j++)
		printf(" |");
	printf("\n");
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

static int merge_out(run_t *runs, int n, const char *out, double u,
		     int ticks)
{
	tb_hist_t *m;
	FILE *f;
	int rc;

	if (tb_hist_copy(&m, runs[0].h) < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return 1;
	}
	for (int i = 1; i < n; i++)
		tb_hist_merge(m, runs[i].h);
	f = fopen(out, "w");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, out, strerror(errno));
		tb_hist_free(m);
		return 1;
	}
	if (ends_with(out, ".hgrm")) {
		rc = tb_hist_write_hgrm(m, f, u, ticks);
	} else if (ends_with(out, ".csv")) {
		rc = tb_hist_write_csv(m, f, u, ticks);
	} else {
		tb_hist_log_writer_t *w = NULL;

		rc = tb_hist_log_writer_open(&w, f, 0, 1e6);
		if (!rc)
			rc = tb_hist_log_writer_comment(w, "merged by tb-hist");
		if (!rc)
			rc = tb_hist_log_writer_write(w, NULL, 0, 0, m);
		if (w && tb_hist_log_writer_close(w) < 0 && !rc)
			rc = -1;
	}
	if (fclose(f) != 0 && !rc)
		rc = -1;
	if (rc < 0)
		fprintf(stderr, "%s: %s: write failed: %s\n", prog, out,
			tb_errmsg());
	else
		printf("merged %d files, %" PRId64 " samples, into %s\n", n,
		       tb_hist_count(m), out);
	tb_hist_free(m);
	return rc < 0 ? 1 : 0;
}

/* ----------------------------------------------------------------- plot */

#define SVG_W 900
#define SVG_H 540
#define PLOT_L 80
#define PLOT_R 20
#define PLOT_T 50
#define PLOT_B 70

static const char *const colours[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
	"#8c564b", "#e377c2", "#17becf",
};

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			if ((unsigned char)*s >= 0x20)
				fputc(*s, f);
		}
	}
}

/* A round step (1, 2 or 5 x 10^k) giving about `want` ticks up to `max`. */
static double nice_step(double max, int want)
{
	double raw = max / want, mag = pow(10, floor(log10(raw))), f = raw / mag;

	if (f <= 1)
		return mag;
	if (f <= 2)
		return 2 * mag;
	if (f <= 5)
		return 5 * mag;
	return 10 * mag;
}

/* "0%", "90%", "99%", "99.9%", ... for 1/(1-p) = 10^k. */
static void pct_label(char *buf, size_t cap, int k)
{
	if (k == 0) {
		snprintf(buf, cap, "0%%");
	} else if (k <= 2) {
		snprintf(buf, cap, "%s%%", k == 1 ? "90" : "99");
	} else {
		size_t o = 0;

		o += (size_t)snprintf(buf, cap, "99.");
		for (int i = 0; i < k - 2 && o + 2 < cap; i++)
			buf[o++] = '9';
		buf[o++] = '%';
		buf[o] = '\0';
	}
}

static int plot(run_t *runs, int n, const char *out, const char *title,
		double u, const char *uname)
{
	double pw = SVG_W - PLOT_L - PLOT_R, ph = SVG_H - PLOT_T - PLOT_B;
	double ymax = 0, step;
	int64_t most = 0;
	int xmax;
	FILE *f;

	for (int i = 0; i < n; i++) {
		if ((double)tb_hist_max(runs[i].h) / u > ymax)
			ymax = (double)tb_hist_max(runs[i].h) / u;
		if (tb_hist_count(runs[i].h) > most)
			most = tb_hist_count(runs[i].h);
	}
	/* Enough decades to reach the last sample of the largest run (1/(1-p)
	 * = count there), at least 99% and at most 99.99999%. */
	xmax = (int)ceil(log10((double)(most > 1 ? most : 1)));
	if (xmax < 2)
		xmax = 2;
	if (xmax > 7)
		xmax = 7;
	if (!(ymax > 0))
		ymax = 1;
	step = nice_step(ymax, 6);
	ymax = ceil(ymax / step) * step;

	f = fopen(out, "w");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, out, strerror(errno));
		return 1;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
		"font-size=\"12\">\n", SVG_W, SVG_H, SVG_W, SVG_H);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" "
		"font-size=\"16\">", SVG_W / 2);
	xml_text(f, title ? title : "Latency by percentile");
	fprintf(f, "</text>\n");

	/* Grid and ticks. */
	fprintf(f, "<g class=\"x-axis\" stroke=\"#ddd\">\n");
	for (int k = 0; k <= xmax; k++) {
		double x = PLOT_L + pw * k / xmax;
		char lbl[32];

		pct_label(lbl, sizeof(lbl), k);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
			"stroke=\"none\" fill=\"black\">%s</text>\n", x, PLOT_T, x,
			PLOT_T + ph + 5, x, PLOT_T + ph + 20, lbl);
	}
	fprintf(f, "</g>\n<g class=\"y-axis\" stroke=\"#ddd\">\n");
	for (double v = 0; v <= ymax + step / 2; v += step) {
		double y = PLOT_T + ph - ph * v / ymax;

		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
			"stroke=\"none\" fill=\"black\">%g</text>\n", PLOT_L - 5,
			y, PLOT_L + pw, y, PLOT_L - 8, y + 4, v);
	}
	fprintf(f, "</g>\n<rect x=\"%d\" y=\"%d\" width=\"%.0f\" "
		"height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", PLOT_L,
		PLOT_T, pw, ph);
	fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">"
		"Percentile (log scale of 1/(1-p))</text>\n", PLOT_L + pw / 2,
		SVG_H - 20);
	fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" "
		"transform=\"rotate(-90 18 %.1f)\">Latency (%s)</text>\n",
		PLOT_T + ph / 2, PLOT_T + ph / 2, uname);

	/* One polyline per run: x = log10(1/(1-p)) from 0 to xmax. */
	for (int i = 0; i < n; i++) {
		const char *c = colours[i % (sizeof(colours) / sizeof(colours[0]))];

		fprintf(f, "<polyline class=\"run\" fill=\"none\" stroke=\"%s\" "
			"stroke-width=\"2\" points=\"", c);
		for (int j = 0; j <= PLOT_POINTS; j++) {
			double xv = (double)xmax * j / PLOT_POINTS;
			double p = 100.0 * (1.0 - pow(10, -xv));
			double v = (double)tb_hist_value_at_percentile(
					   runs[i].h, j == PLOT_POINTS ? 100 : p) /
				   u;

			fprintf(f, "%.1f,%.1f ", PLOT_L + pw * xv / xmax,
				PLOT_T + ph - ph * v / ymax);
		}
		fprintf(f, "\"/>\n");
		/* Legend, top left inside the plot. */
		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" "
			"fill=\"%s\"/><text class=\"label\" x=\"%d\" y=\"%d\">",
			PLOT_L + 12, PLOT_T + 14 + 18 * i, c, PLOT_L + 32,
			PLOT_T + 20 + 18 * i);
		xml_text(f, runs[i].label);
		fprintf(f, " (p50 %.3g, p99.9 %.3g, max %.3g %s)</text>\n",
			(double)tb_hist_value_at_percentile(runs[i].h, 50) / u,
			(double)tb_hist_value_at_percentile(runs[i].h, 99.9) / u,
			(double)tb_hist_max(runs[i].h) / u, uname);
	}
	fprintf(f, "</svg>\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "%s: %s: write failed: %s\n", prog, out,
			strerror(errno));
		return 1;
	}
	printf("plotted %d runs into %s\n", n, out);
	return 0;
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, 0, 'o'},
		{"unit", required_argument, 0, 'u'},
		{"hgrm-unit", required_argument, 0, 'U'},
		{"tag", required_argument, 0, 't'},
		{"label", required_argument, 0, 'l'},
		{"title", required_argument, 0, 'T'},
		{"hgrm", no_argument, 0, 'H'},
		{"csv", no_argument, 0, 'C'},
		{"markdown", no_argument, 0, 'D'},
		{"ticks", required_argument, 0, 'k'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *cmd, *out = NULL, *tag = NULL, *title = NULL;
	const char *uname = "us", *labels[RUNS_MAX];
	double u = 1e3, hgrm_u = 1e3;
	int c, n_labels = 0, full = 0, csv = 0, markdown = 0, ticks = 0, n;
	int status = 0;
	run_t runs[RUNS_MAX];

	if (argc < 2)
		return tb_cli_usage_exit(usage, '?');
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help"))
		return tb_cli_usage_exit(usage, 'h');
	if (strcmp(cmd, "print") && strcmp(cmd, "merge") &&
	    strcmp(cmd, "compare") && strcmp(cmd, "plot"))
		return tb_cli_usage_error(prog, usage, "unknown command '%s'",
					  cmd);
	optind = 2;
	while ((c = getopt_long(argc, argv, "o:u:t:l:h", opts, NULL)) != -1) {
		char *end;
		long v;

		switch (c) {
		case 'o': out = optarg; break;
		case 'u':
		case 'U':
			if (parse_unit(optarg, c == 'u' ? &u : &hgrm_u,
				       c == 'u' ? &uname : NULL))
				return tb_cli_usage_error(prog, NULL, "unknown unit "
							  "'%s' (ns, us, ms, s)",
							  optarg);
			break;
		case 't': tag = optarg; break;
		case 'l':
			if (n_labels == RUNS_MAX)
				return tb_cli_usage_error(prog, NULL, "more than %d "
							  "labels", RUNS_MAX);
			labels[n_labels++] = optarg;
			break;
		case 'T': title = optarg; break;
		case 'H': full = 1; break;
		case 'C': csv = 1; break;
		case 'D': markdown = 1; break;
		case 'k':
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1000)
				return tb_cli_usage_error(prog, NULL, "--ticks '%s' "
							  "is not in 1..1000",
							  optarg);
			ticks = (int)v;
			break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
	}
	n = argc - optind;
	if (n < 1)
		return tb_cli_usage_error(prog, NULL, "%s: no input files", cmd);
	if (n > RUNS_MAX)
		return tb_cli_usage_error(prog, NULL, "at most %d input files",
					  RUNS_MAX);
	if ((!strcmp(cmd, "merge") || !strcmp(cmd, "plot")) && !out)
		return tb_cli_usage_error(prog, NULL, "%s needs -o FILE", cmd);
	if (n_labels > n)
		return tb_cli_usage_error(prog, NULL, "%d labels for %d files",
					  n_labels, n);

	memset(runs, 0, sizeof(runs));
	for (int i = 0; i < n; i++) {
		runs[i].path = argv[optind + i];
		if (i < n_labels)
			snprintf(runs[i].label, sizeof(runs[i].label), "%s",
				 labels[i]);
		if (load(&runs[i], hgrm_u, tag) < 0) {
			status = 1;
			goto out;
		}
	}

	if (!strcmp(cmd, "print")) {
		for (int i = 0; i < n; i++) {
			if (!full && !csv) {
				print_summary(&runs[i], u, uname);
				continue;
			}
			if (n > 1)
				printf("# %s\n", runs[i].path);
			if ((csv ? tb_hist_write_csv(runs[i].h, stdout, u, ticks)
				 : tb_hist_write_hgrm(runs[i].h, stdout, u,
						      ticks)) < 0) {
				fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
				status = 1;
			}
		}
	} else if (!strcmp(cmd, "compare")) {
		compare(runs, n, u, uname, markdown);
	} else if (!strcmp(cmd, "merge")) {
		status = merge_out(runs, n, out, u, ticks);
	} else {
		status = plot(runs, n, out, title, u, uname);
	}
out:
	for (int i = 0; i < n; i++)
		tb_hist_free(runs[i].h);
	return status;
}
