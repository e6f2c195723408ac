/*
 * hist_encoding.h - base64, as the histogram's binary encoding travels in
 * text (bus/hist_encoding.c).
 *
 * tb_hist_encode / tb_hist_decode (hist.h) give HdrHistogram's V2
 * compressed bytes; the interval log (hist_log.c) carries them as standard
 * base64 on each line.  Internal: not installed, and hidden from the shared
 * library (the map exports tb_hist_*).
 */
#ifndef TB_HIST_ENCODING_H
#define TB_HIST_ENCODING_H

#include <stddef.h>
#include <stdint.h>

#define TB_HIST_ENCODING_HIDDEN __attribute__((visibility("hidden")))

/* Characters tb_hist_encoding_base64_encode writes for `n` bytes, its
 * terminating NUL included. */
static inline size_t tb_hist_encoding_base64_size(size_t n)
{
	return 4 * ((n + 2) / 3) + 1;
}

/* Standard alphabet with '=' padding; `dst` holds
 * tb_hist_encoding_base64_size(n) characters.  Cannot fail. */
TB_HIST_ENCODING_HIDDEN
void tb_hist_encoding_base64_encode(const uint8_t *src, size_t n, char *dst);

/*
 * Strict decoding of `n` characters: length a positive multiple of 4,
 * padding only at the end, nothing outside the alphabet.  `dst` holds
 * 3 * n / 4 bytes; *out_len gets how many were written.  Returns 0 or
 * TB_EFORMAT with a message naming the bad character and its offset.
 */
TB_HIST_ENCODING_HIDDEN
int tb_hist_encoding_base64_decode(const char *src, size_t n, uint8_t *dst,
				   size_t *out_len);

#endif
