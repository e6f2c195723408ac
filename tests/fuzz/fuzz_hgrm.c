/*
 * fuzz_hgrm.c - libFuzzer target for the .hgrm reader, tb-hist's
 * load_hgrm() (tools/tb-hist.c): the percentile distribution text that
 * tb-latency, tb-subscribe and the benchmarks write and tb-hist reads back
 * to print, merge, compare and plot.
 *
 * load_hgrm is static in the tool, so the tool's source is included here
 * with its main() renamed; nothing of it runs but the reader.  The input
 * is the text of a .hgrm file, read through a memory stream into a
 * histogram of tb-hist's own layout, with values in microseconds (its
 * default --hgrm-unit).  The reader's messages go to stderr, which
 * `make fuzz` closes (-close_fd_mask).
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - load_hgrm returns 0 or -1;
 *   - what it loads holds exactly the last data line's total count (each
 *     line adds its count increment at its value).
 */
#define main tb_hist_tool_main
#include "tools/tb-hist.c"
#undef main

#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The last data line's total count: its third number.  Lines are those
 * load_hgrm reads as data (not blank, not '#', not the header). */
static long long last_total(const char *text)
{
	long long total = 0;
	const char *line = text;

	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		char copy[512];
		double v, p;
		long long t;

		if (n < sizeof(copy)) {
			memcpy(copy, line, n);
			copy[n] = '\0';
			if (!is_blank(copy) && copy[0] != '#' &&
			    !strstr(copy, "Percentile") &&
			    sscanf(copy, "%lf %lf %lld", &v, &p, &t) == 3)
				total = t;
		}
		line += n + (nl != NULL);
	}
	return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	tb_hist_t *h;
	FILE *in;
	int rc;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	in = size ? fmemopen(text, size, "r") : fopen("/dev/null", "r");
	if (!in || tb_hist_init(&h, 1, HIST_HIGHEST, 3) != 0)
		abort();
	rc = load_hgrm(in, "fuzz.hgrm", 1e3, h);
	if (rc != 0 && rc != -1)
		abort();
	if (rc == 0 && !memchr(data, '\0', size) &&
	    tb_hist_count(h) != last_total(text))
		abort();
	fclose(in);
	tb_hist_free(h);
	free(text);
	return 0;
}
