/*
 * fuzz_hist_decode.c - libFuzzer target for the histogram's binary decoder
 * (bus/hist_encoding.c: tb_hist_decode, HdrHistogram's V2 compressed
 * encoding, and the base64 that carries it in interval logs).
 *
 * The input is read twice: as the compressed bytes themselves (what a log
 * line's base64 decodes to, or what another HdrHistogram wrote), and as
 * base64 text.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - tb_hist_decode returns 0 with a histogram, or TB_EFORMAT / TB_ENOMEM
 *     with none;
 *   - a decoded histogram is consistent (its count is the sum of its
 *     buckets' counts, each positive and cumulated in order, min <= max
 *     when it holds samples) and survives a
 *     round trip: encoded again and decoded, it is equal, and that second
 *     encoding is the same bytes as the first (one encoding per
 *     histogram);
 *   - base64 decodes strictly or fails with TB_EFORMAT, never writing more
 *     than 3/4 of its input; what it decodes encodes back to text that
 *     decodes to the same bytes.
 */
#include "bus/error.h"
#include "bus/hist_encoding.h"
#include "tests/fuzz/fuzz_util.h"
#include <tickbus/hist.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void as_binary(const uint8_t *buf, size_t size)
{
	tb_hist_t *h = (tb_hist_t *)&h, *h2 = NULL, *h3 = NULL;
	uint8_t *e1 = NULL, *e2 = NULL;
	size_t n1, n2;
	tb_hist_iter_t it;
	int64_t sum = 0;
	int rc = tb_hist_decode(buf, size, &h);

	if (rc != 0) {
		if ((rc != TB_EFORMAT && rc != TB_ENOMEM) || h != NULL)
			abort();
		return;
	}
	tb_hist_iter_init(&it, h);
	while (tb_hist_iter_next(&it)) {
		if (it.count <= 0 || it.value_lo > it.value_hi)
			abort();
		sum += it.count;
		if (it.cumulative != sum)
			abort();
	}
	if (sum != tb_hist_count(h) ||
	    (sum > 0 && tb_hist_min(h) > tb_hist_max(h)))
		abort();
	if (tb_hist_encode(h, &e1, &n1) != 0 || tb_hist_decode(e1, n1, &h2) != 0 ||
	    !tb_hist_equal(h, h2) || tb_hist_encode(h2, &e2, &n2) != 0 ||
	    n1 != n2 || memcmp(e1, e2, n1) != 0 ||
	    tb_hist_decode(e2, n2, &h3) != 0 || !tb_hist_equal(h2, h3))
		abort();
	free(e1);
	free(e2);
	tb_hist_free(h);
	tb_hist_free(h2);
	tb_hist_free(h3);
}

static void as_base64(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	uint8_t *bin = malloc(size / 4 * 3 + 1), *bin2;
	char *again;
	size_t n = 0, n2 = 0;
	int rc;

	if (!bin)
		abort();
	rc = tb_hist_encoding_base64_decode(text, size, bin, &n);
	if (rc != 0) {
		if (rc != TB_EFORMAT)
			abort();
		free(bin);
		return;
	}
	if (n > size / 4 * 3)
		abort();
	again = malloc(tb_hist_encoding_base64_size(n));
	bin2 = malloc(n + 1);
	if (!again || !bin2)
		abort();
	tb_hist_encoding_base64_encode(bin, n, again);
	if (strlen(again) + 1 != tb_hist_encoding_base64_size(n) ||
	    tb_hist_encoding_base64_decode(again, strlen(again), bin2, &n2) != 0 ||
	    n2 != n || memcmp(bin, bin2, n) != 0)
		abort();
	free(again);
	free(bin2);
	free(bin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = fuzz_copy(data, size);

	as_binary(buf, size);
	as_base64(buf, size);
	free(buf);
	return 0;
}
