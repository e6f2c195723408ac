/*
 * hist_log.c - the interval histogram log: a writer and a reader of
 * HdrHistogram's log format 1.3 (tb_hist_log_*).
 *
 * A log is text: "#[...]" header lines (format version, StartTime,
 * BaseTime), the column legend, then one line per interval,
 * "[Tag=t,]start,length,max,<base64 V2 compressed histogram>".  The
 * histogram bytes are hist_encoding.c's, their numbers formatted as
 * hist_text.c formats them, so HistogramLogProcessor reads what the writer
 * writes.  The reader checks every field and every length; a bad line is
 * TB_EFORMAT naming its line number, and the reader can go on past it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* newlocale, strtod_l, getline */
#endif

#include <tickbus/hist.h>

#include "bus/error.h"
#include "bus/hist_encoding.h"
#include "bus/hist_text.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define LOG_FORMAT_VERSION "1.3"
#define LOG_LEGEND "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\"," \
		   "\"Interval_Compressed_Histogram\""

/* ================================================================ writer */

struct tb_hist_log_writer {
	FILE *out;
	double max_unit_ratio;
};

int tb_hist_log_writer_open(tb_hist_log_writer_t **w, FILE *out,
			    double start_time_sec, double max_unit_ratio)
{
	char date[64] = "", start[TB_HIST_TEXT_NUM_MAX];
	time_t secs;
	struct tm tm;
	tb_hist_text_locale_t loc;
	int rc, n;

	if (!w || !out)
		return tb_error_set(TB_EINVAL, "hist_log_writer_open: NULL "
				  "argument");
	*w = NULL;
	if (!(max_unit_ratio > 0) || !isfinite(max_unit_ratio) ||
	    !isfinite(start_time_sec) || start_time_sec < 0)
		return tb_error_set(TB_EINVAL, "hist_log_writer_open: start time "
				  "%g or max unit ratio %g out of range",
				  start_time_sec, max_unit_ratio);
	/* Java's Date.toString(), in UTC: "Tue Dec 01 10:00:00 UTC 2020". */
	secs = (time_t)start_time_sec;
	if (gmtime_r(&secs, &tm))
		strftime(date, sizeof(date), "%a %b %d %H:%M:%S UTC %Y", &tm);
	rc = tb_hist_text_locale_enter(&loc);
	if (rc)
		return rc;
	tb_hist_text_fixed(start, sizeof(start), start_time_sec, 3);
	n = fprintf(out, "#[Histogram log format version " LOG_FORMAT_VERSION
		    "]\n#[StartTime: %s (seconds since epoch), %s]\n"
		    LOG_LEGEND "\n", start, date);
	tb_hist_text_locale_leave(&loc);
	if (n < 0)
		return tb_error_set(TB_EIO, "hist_log_writer_open: write failed");
	*w = malloc(sizeof(**w));
	if (!*w)
		return tb_error_set(TB_ENOMEM, "hist_log_writer_open: out of "
				  "memory");
	(*w)->out = out;
	(*w)->max_unit_ratio = max_unit_ratio;
	return 0;
}

int tb_hist_log_writer_comment(tb_hist_log_writer_t *w, const char *text)
{
	if (!w || !text || strchr(text, '\n'))
		return tb_error_set(TB_EINVAL, "hist_log_writer_comment: NULL or "
				  "multi-line comment");
	if (fprintf(w->out, "#%s\n", text) < 0)
		return tb_error_set(TB_EIO, "hist_log_writer_comment: write "
				  "failed");
	return 0;
}

int tb_hist_log_writer_write(tb_hist_log_writer_t *w, const char *tag,
			     double start_sec, double length_sec,
			     const tb_hist_t *h)
{
	uint8_t *bin;
	size_t bin_len;
	char *text;
	tb_hist_text_locale_t loc;
	int rc, n;

	if (!w || !h)
		return tb_error_set(TB_EINVAL, "hist_log_write: NULL argument");
	if (tag && (strlen(tag) >= TB_HIST_TAG_MAX ||
		    strpbrk(tag, ", \t\r\n")))
		return tb_error_set(TB_EINVAL, "hist_log_write: tag '%.80s' is "
				  "too long or holds ',' or white space", tag);
	if (!isfinite(start_sec) || !isfinite(length_sec))
		return tb_error_set(TB_EINVAL, "hist_log_write: times must be "
				  "finite");
	rc = tb_hist_encode(h, &bin, &bin_len);
	if (rc)
		return rc;
	text = malloc(tb_hist_encoding_base64_size(bin_len));
	if (!text) {
		free(bin);
		return tb_error_set(TB_ENOMEM, "hist_log_write: out of memory");
	}
	tb_hist_encoding_base64_encode(bin, bin_len, text);
	free(bin);
	rc = tb_hist_text_locale_enter(&loc);
	if (!rc) {
		char start[TB_HIST_TEXT_NUM_MAX], length[TB_HIST_TEXT_NUM_MAX];
		char max[TB_HIST_TEXT_NUM_MAX];

		tb_hist_text_fixed(start, sizeof(start), start_sec, 3);
		tb_hist_text_fixed(length, sizeof(length), length_sec, 3);
		tb_hist_text_fixed(max, sizeof(max),
			   (double)tb_hist_max(h) / w->max_unit_ratio, 3);
		n = fprintf(w->out, "%s%s%s%s,%s,%s,%s\n",
			    tag && *tag ? "Tag=" : "", tag && *tag ? tag : "",
			    tag && *tag ? "," : "", start, length, max, text);
		tb_hist_text_locale_leave(&loc);
		if (n < 0)
			rc = tb_error_set(TB_EIO, "hist_log_write: write failed");
	}
	free(text);
	return rc;
}

int tb_hist_log_writer_close(tb_hist_log_writer_t *w)
{
	int rc = 0;

	if (!w)
		return 0;
	if (fflush(w->out) != 0)
		rc = tb_error_sys(errno, "hist_log_writer_close: flush");
	free(w);
	return rc;
}

/* ================================================================ reader */

struct tb_hist_log_reader {
	FILE *in;
	char *line;
	size_t cap;
	long lineno;
	double start_time;
	double base_time;
	locale_t c; /* for strtod_l: the log's numbers are C-locale */
};

int tb_hist_log_reader_open(tb_hist_log_reader_t **r, FILE *in)
{
	tb_hist_log_reader_t *n;

	if (!r || !in)
		return tb_error_set(TB_EINVAL, "hist_log_reader_open: NULL "
				  "argument");
	*r = NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return tb_error_set(TB_ENOMEM, "hist_log_reader_open: out of "
				  "memory");
	n->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!n->c) {
		free(n);
		return tb_error_sys(errno, "hist_log_reader_open: newlocale(C)");
	}
	n->in = in;
	n->start_time = NAN;
	n->base_time = NAN;
	*r = n;
	return 0;
}

void tb_hist_log_reader_close(tb_hist_log_reader_t *r)
{
	if (!r)
		return;
	freelocale(r->c);
	free(r->line);
	free(r);
}

double tb_hist_log_reader_start_time(const tb_hist_log_reader_t *r)
{
	return r->start_time;
}

double tb_hist_log_reader_base_time(const tb_hist_log_reader_t *r)
{
	return r->base_time;
}

/* Parses a finite number ending at `stop`; advances *p past the stop. */
static int parse_field(tb_hist_log_reader_t *r, char **p, char stop,
		       double *v, const char *name)
{
	char *end;

	*v = strtod_l(*p, &end, r->c);
	if (end == *p || *end != stop || !isfinite(*v))
		return tb_error_set(TB_EFORMAT, "bad %s field", name);
	*p = end + 1;
	return 0;
}

/* A "#[...]" line: takes in the times and checks the format version. */
static int parse_header(tb_hist_log_reader_t *r, const char *line)
{
	static const char version[] = "#[Histogram log format version ";
	static const char start[] = "#[StartTime: ";
	static const char base[] = "#[BaseTime: ";
	char *end;

	if (!strncmp(line, version, sizeof(version) - 1)) {
		const char *v = line + sizeof(version) - 1;

		if (v[0] != '1' || v[1] != '.')
			return tb_error_set(TB_EFORMAT, "unsupported log format "
					  "version '%.20s'", v);
	} else if (!strncmp(line, start, sizeof(start) - 1)) {
		double t = strtod_l(line + sizeof(start) - 1, &end, r->c);

		if (end == line + sizeof(start) - 1 || !isfinite(t))
			return tb_error_set(TB_EFORMAT, "bad StartTime");
		r->start_time = t;
	} else if (!strncmp(line, base, sizeof(base) - 1)) {
		double t = strtod_l(line + sizeof(base) - 1, &end, r->c);

		if (end == line + sizeof(base) - 1 || !isfinite(t))
			return tb_error_set(TB_EFORMAT, "bad BaseTime");
		r->base_time = t;
	}
	return 0;
}

/* "[Tag=t,]start,length,max,base64" into `e`. */
static int parse_interval(tb_hist_log_reader_t *r, char *line, size_t len,
			  tb_hist_log_entry_t *e)
{
	char *p = line;
	uint8_t *bin;
	size_t b64_len, bin_len = 0;
	int rc;

	if (!strncmp(p, "Tag=", 4)) {
		char *comma = strchr(p + 4, ',');
		size_t tag_len;

		if (!comma)
			return tb_error_set(TB_EFORMAT, "tag without a ','");
		tag_len = (size_t)(comma - (p + 4));
		if (tag_len >= TB_HIST_TAG_MAX)
			return tb_error_set(TB_EFORMAT, "tag longer than %d "
					  "bytes", TB_HIST_TAG_MAX - 1);
		memcpy(e->tag, p + 4, tag_len);
		e->tag[tag_len] = '\0';
		p = comma + 1;
	}
	if ((rc = parse_field(r, &p, ',', &e->start_sec, "StartTimestamp")) ||
	    (rc = parse_field(r, &p, ',', &e->length_sec, "Interval_Length")) ||
	    (rc = parse_field(r, &p, ',', &e->max, "Interval_Max")))
		return rc;
	b64_len = len - (size_t)(p - line);
	bin = malloc(b64_len / 4 * 3 + 1);
	if (!bin)
		return tb_error_set(TB_ENOMEM, "out of memory");
	rc = tb_hist_encoding_base64_decode(p, b64_len, bin, &bin_len);
	if (!rc)
		rc = tb_hist_decode(bin, bin_len, &e->hist);
	free(bin);
	return rc;
}

int tb_hist_log_read(tb_hist_log_reader_t *r, tb_hist_log_entry_t *e)
{
	if (!r || !e)
		return tb_error_set(TB_EINVAL, "hist_log_read: NULL argument");
	memset(e, 0, sizeof(*e));
	for (;;) {
		ssize_t n = getline(&r->line, &r->cap, r->in);
		int rc;

		if (n < 0) {
			if (ferror(r->in))
				return tb_error_set(TB_EIO, "hist_log_read: read "
						  "error after line %ld",
						  r->lineno);
			return 0;
		}
		r->lineno++;
		while (n > 0 && (r->line[n - 1] == '\n' ||
				 r->line[n - 1] == '\r' ||
				 r->line[n - 1] == ' '))
			r->line[--n] = '\0';
		if (n == 0)
			continue;
		if (memchr(r->line, '\0', (size_t)n))
			rc = tb_error_set(TB_EFORMAT, "NUL byte in line");
		else if (r->line[0] == '#')
			rc = parse_header(r, r->line);
		else if (!strncmp(r->line, "\"StartTimestamp\"", 16))
			continue; /* the legend */
		else if ((rc = parse_interval(r, r->line, (size_t)n, e)) == 0)
			return 1;
		if (rc) {
			tb_hist_free(e->hist);
			memset(e, 0, sizeof(*e));
			return tb_error_prepend(rc, "hist log line %ld",
					      r->lineno);
		}
	}
}
