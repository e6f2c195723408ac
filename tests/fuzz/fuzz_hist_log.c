/*
 * fuzz_hist_log.c - libFuzzer target for the interval histogram log reader
 * (bus/hist_log.c: tb_hist_log_read, HdrHistogram's log format 1.3), which
 * tb-hist and the benchmarks' tools run on files they are given.
 *
 * The input is the text of a log, read through a memory stream until the
 * end, going on past bad lines as the reader allows.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - each read returns 1 with an interval, 0 at the end, or TB_EFORMAT /
 *     TB_ENOMEM for one bad line (after which reading goes on); a bad line
 *     leaves no histogram behind;
 *   - an interval has a histogram, a tag without ',' that fits
 *     TB_HIST_TAG_MAX, and finite times;
 *   - the reader ends: it consumes a line per call at least;
 *   - the first interval (whose tag the writer takes: one without white
 *     space), written again by tb_hist_log_writer_write, reads back with
 *     the same tag and an equal histogram.
 */
#include "bus/error.h"
#include "tests/fuzz/fuzz_util.h"
#include <tickbus/hist.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes `e` as a one-interval log and reads it back. */
static void rewrite(const tb_hist_log_entry_t *e)
{
	tb_hist_log_writer_t *w;
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t back;
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len), *in;

	if (!out || tb_hist_log_writer_open(&w, out, 0, 1e6) != 0 ||
	    tb_hist_log_writer_write(w, e->tag[0] ? e->tag : NULL, e->start_sec,
				     e->length_sec, e->hist) != 0 ||
	    tb_hist_log_writer_close(w) != 0)
		abort();
	fclose(out);
	in = fmemopen(text, len, "r");
	if (!in || tb_hist_log_reader_open(&r, in) != 0 ||
	    tb_hist_log_read(r, &back) != 1 || strcmp(back.tag, e->tag) != 0 ||
	    !tb_hist_equal(back.hist, e->hist))
		abort();
	tb_hist_free(back.hist);
	tb_hist_log_reader_close(r);
	fclose(in);
	free(text);
}

/* The reader takes any tag up to its ','; the writer, as HdrHistogram's
 * tools expect, none with white space. */
static int has_space(const char *t)
{
	for (; *t; t++)
		if (isspace((unsigned char)*t))
			return 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = fuzz_copy(data, size);
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	size_t lines = 1;
	FILE *in;
	int rc, calls = 0, rewritten = 0;

	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	in = size ? fmemopen(buf, size, "r") : fopen("/dev/null", "r");
	if (!in || tb_hist_log_reader_open(&r, in) != 0)
		abort();
	while ((rc = tb_hist_log_read(r, &e)) != 0) {
		if ((size_t)++calls > lines)
			abort(); /* a call that consumed no line */
		if (rc < 0) {
			if ((rc != TB_EFORMAT && rc != TB_ENOMEM) || e.hist)
				abort();
			continue;
		}
		if (rc != 1 || !e.hist || strlen(e.tag) >= TB_HIST_TAG_MAX ||
		    !isfinite(e.start_sec) || !isfinite(e.length_sec) ||
		    !isfinite(e.max))
			abort();
		if (strchr(e.tag, ','))
			abort();
		/* Writing walks every count of the layout, which costs more
		 * than reading the line: the first interval of an input is
		 * enough to hold the writer to the reader. */
		if (!has_space(e.tag) && !rewritten++)
			rewrite(&e);
		tb_hist_free(e.hist);
	}
	tb_hist_log_reader_close(r);
	fclose(in);
	free(buf);
	return 0;
}
