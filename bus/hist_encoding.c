/*
 * hist_encoding.c - the histogram as bytes: HdrHistogram's V2 compressed
 * encoding (tb_hist_encode / tb_hist_decode), and the base64 the interval
 * log carries it in (hist_encoding.h).
 *
 * The decoder is the one place where outside bytes become a histogram, so
 * it trusts nothing: every length is checked against what is present before
 * it is used, the zlib stream must end exactly where the header says, and
 * every count must land inside the layout the header asks for.  Bad input
 * is TB_EFORMAT with a message saying which check failed, never a crash.
 */
#include "bus/hist_encoding.h"

#include <tickbus/hist.h>

#include "bus/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ======================================================= binary encoding */

/*
 * HdrHistogram V2, big-endian throughout:
 *   compressed envelope: u32 cookie 0x1c849314, u32 length, zlib stream;
 *   inside the stream:   u32 cookie 0x1c849313, u32 payload length,
 *                        u32 normalizing index offset (0), u32 digits,
 *                        u64 lowest, u64 highest, f64 integer-to-double
 *                        ratio (1.0), then the payload: the counts array
 *                        up to its last non-zero cell as ZigZag LEB128
 *                        varints, a run of n > 1 zero cells as -n.
 * The cookies' 0x10 bit is the "word size" nibble HdrHistogram sets for V2
 * (base cookies 0x1c849303 / 0x1c849304); readers compare cookie & ~0xf0.
 */
#define V2_COOKIE_BASE 0x1c849303u
#define V2_COMPRESSED_COOKIE_BASE 0x1c849304u
#define V2_WORD_SIZE_NIBBLE 0x10u
#define V2_COOKIE_MASK (~0xf0u)
#define V2_HEADER_SIZE 40   /* 4 x u32 + 2 x u64 + f64 */
#define V2_ENVELOPE_SIZE 8  /* cookie + length */
#define VARINT_MAX 9        /* 8 x 7 bits, then one full byte: 64 bits */

static void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

/* ZigZag (small magnitudes of either sign become small) then LEB128, the
 * ninth byte carrying a full 8 bits.  Returns the bytes written. */
static size_t put_varint(uint8_t *p, int64_t v)
{
	uint64_t z = ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63));
	size_t n = 0;

	while (n < VARINT_MAX - 1 && z >= 0x80) {
		p[n++] = (uint8_t)(z | 0x80);
		z >>= 7;
	}
	p[n++] = (uint8_t)z;
	return n;
}

/* Reads one varint from [*p, end); returns false when it runs past end. */
static bool get_varint(const uint8_t **p, const uint8_t *end, int64_t *v)
{
	uint64_t z = 0;
	const uint8_t *q = *p;
	int shift = 0;

	for (int i = 0; i < VARINT_MAX; i++) {
		uint8_t b;

		if (q == end)
			return false;
		b = *q++;
		if (i == VARINT_MAX - 1) {
			z |= (uint64_t)b << shift;
			break;
		}
		z |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			break;
	}
	*p = q;
	*v = (int64_t)((z >> 1) ^ (0 - (z & 1)));
	return true;
}

int tb_hist_encode(const tb_hist_t *h, uint8_t **buf, size_t *len)
{
	int32_t used = 0;
	size_t raw_len = V2_HEADER_SIZE, raw_cap;
	uLongf zlen;
	uint8_t *raw, *out;
	uint64_t ratio_bits;
	double ratio = 1.0;
	int zrc;

	if (!h || !buf || !len)
		return tb_error_set(TB_EINVAL, "hist_encode: NULL argument");
	*buf = NULL;
	*len = 0;
	for (int32_t i = h->counts_len - 1; i >= 0; i--)
		if (h->counts[i]) {
			used = i + 1;
			break;
		}
	raw_cap = V2_HEADER_SIZE + (size_t)used * VARINT_MAX;
	raw = malloc(raw_cap);
	if (!raw)
		return tb_error_set(TB_ENOMEM, "hist_encode: cannot allocate %zu "
				  "bytes", raw_cap);
	for (int32_t i = 0; i < used;) {
		int64_t c = h->counts[i++];
		int64_t zeros = 0;

		if (c == 0) {
			zeros = 1;
			while (i < used && h->counts[i] == 0) {
				zeros++;
				i++;
			}
		}
		raw_len += put_varint(raw + raw_len, zeros > 1 ? -zeros : c);
	}
	memcpy(&ratio_bits, &ratio, sizeof(ratio_bits));
	put_be32(raw, V2_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
	put_be32(raw + 4, (uint32_t)(raw_len - V2_HEADER_SIZE));
	put_be32(raw + 8, 0);
	put_be32(raw + 12, (uint32_t)h->significant_digits);
	put_be64(raw + 16, (uint64_t)h->lowest_discernible);
	put_be64(raw + 24, (uint64_t)h->highest_trackable);
	put_be64(raw + 32, ratio_bits);

	zlen = compressBound((uLong)raw_len);
	out = malloc(V2_ENVELOPE_SIZE + zlen);
	if (!out) {
		free(raw);
		return tb_error_set(TB_ENOMEM, "hist_encode: cannot allocate %lu "
				  "bytes", (unsigned long)zlen);
	}
	zrc = compress2(out + V2_ENVELOPE_SIZE, &zlen, raw, (uLong)raw_len,
			Z_DEFAULT_COMPRESSION);
	free(raw);
	if (zrc != Z_OK) {
		free(out);
		return tb_error_set(zrc == Z_MEM_ERROR ? TB_ENOMEM : TB_EINVAL,
				  "hist_encode: zlib compress2 failed (%d)",
				  zrc);
	}
	put_be32(out, V2_COMPRESSED_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
	put_be32(out + 4, (uint32_t)zlen);
	*buf = out;
	*len = V2_ENVELOPE_SIZE + zlen;
	return 0;
}

/* Inflates exactly `want` bytes into `dst`.  Returns 0, or TB_EFORMAT when
 * the stream is corrupt or ends early. */
static int inflate_exactly(z_stream *zs, uint8_t *dst, size_t want,
			   const char *what)
{
	zs->next_out = dst;
	zs->avail_out = (uInt)want;
	while (zs->avail_out > 0) {
		int zrc = inflate(zs, Z_NO_FLUSH);

		if (zrc == Z_STREAM_END)
			break;
		if (zrc == Z_BUF_ERROR) /* no input left: cut short */
			return tb_error_set(TB_EFORMAT, "hist_decode: compressed "
					  "data truncated in the %s", what);
		if (zrc != Z_OK)
			return tb_error_set(TB_EFORMAT, "hist_decode: bad zlib "
					  "data in the %s: %s", what,
					  zs->msg ? zs->msg : "unknown error");
	}
	if (zs->avail_out > 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: %s is %zu bytes "
				  "short of its stated length", what,
				  (size_t)zs->avail_out);
	return 0;
}

/* After the payload: the zlib stream must end here, with no input left. */
static int inflate_end_check(z_stream *zs)
{
	uint8_t extra;
	int zrc;

	zs->next_out = &extra;
	zs->avail_out = 1;
	zrc = inflate(zs, Z_NO_FLUSH);
	if (zrc != Z_STREAM_END) {
		if (zs->avail_out == 0)
			return tb_error_set(TB_EFORMAT, "hist_decode: data goes "
					  "on past the stated payload length");
		if (zrc == Z_BUF_ERROR || zrc == Z_OK)
			return tb_error_set(TB_EFORMAT, "hist_decode: compressed "
					  "data truncated (no end of stream)");
		return tb_error_set(TB_EFORMAT, "hist_decode: bad zlib data: %s",
				  zs->msg ? zs->msg : "unknown error");
	}
	if (zs->avail_out == 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: data goes on past "
				  "the stated payload length");
	if (zs->avail_in > 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: %u bytes after the "
				  "end of the compressed data",
				  (unsigned)zs->avail_in);
	return 0;
}

/* Fills h's counts from a V2 payload. */
static int decode_counts(tb_hist_t *h, const uint8_t *p, const uint8_t *end)
{
	int64_t index = 0, total = 0;

	while (p < end) {
		int64_t v;

		if (!get_varint(&p, end, &v))
			return tb_error_set(TB_EFORMAT, "hist_decode: payload "
					  "ends inside a count");
		if (v < 0) {
			if (v == INT64_MIN || -v > h->counts_len - index)
				return tb_error_set(TB_EFORMAT, "hist_decode: "
						  "run of zeros goes past the "
						  "end of the %d counts",
						  h->counts_len);
			index += -v;
			continue;
		}
		if (index >= h->counts_len)
			return tb_error_set(TB_EFORMAT, "hist_decode: counts go "
					  "past the end of the %d counts of "
					  "this layout", h->counts_len);
		if (v > INT64_MAX - total)
			return tb_error_set(TB_EFORMAT, "hist_decode: total "
					  "count overflows 64 bits");
		h->counts[index++] = v;
		total += v;
	}
	h->total_count = total;
	return 0;
}

int tb_hist_decode(const void *buf, size_t len, tb_hist_t **out)
{
	const uint8_t *in = (const uint8_t *)buf;
	uint8_t hdr[V2_HEADER_SIZE], *payload = NULL;
	uint32_t cookie, zlen, payload_len;
	int64_t lowest, highest;
	uint64_t ratio_bits;
	double ratio;
	int32_t digits, offset;
	tb_hist_t *h = NULL;
	z_stream zs;
	int rc;

	if (!out || (!buf && len))
		return tb_error_set(TB_EINVAL, "hist_decode: NULL argument");
	*out = NULL;
	if (len < V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: %zu bytes, too "
				  "short for a compressed histogram", len);
	cookie = get_be32(in);
	if ((cookie & V2_COOKIE_MASK) != V2_COMPRESSED_COOKIE_BASE)
		return tb_error_set(TB_EFORMAT, "hist_decode: bad cookie 0x%08x "
				  "(want a V2 compressed histogram, 0x%08x)",
				  cookie, V2_COMPRESSED_COOKIE_BASE |
						  V2_WORD_SIZE_NIBBLE);
	zlen = get_be32(in + 4);
	if (zlen > len - V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: truncated: %u "
				  "compressed bytes announced, %zu present",
				  zlen, len - V2_ENVELOPE_SIZE);
	if (zlen < len - V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: %zu bytes after "
				  "the compressed histogram",
				  len - V2_ENVELOPE_SIZE - zlen);

	memset(&zs, 0, sizeof(zs));
	if (inflateInit(&zs) != Z_OK)
		return tb_error_set(TB_ENOMEM, "hist_decode: inflateInit failed");
	zs.next_in = (Bytef *)(uintptr_t)(in + V2_ENVELOPE_SIZE);
	zs.avail_in = zlen;
	rc = inflate_exactly(&zs, hdr, sizeof(hdr), "header");
	if (rc)
		goto out;

	cookie = get_be32(hdr);
	payload_len = get_be32(hdr + 4);
	offset = (int32_t)get_be32(hdr + 8);
	digits = (int32_t)get_be32(hdr + 12);
	lowest = (int64_t)get_be64(hdr + 16);
	highest = (int64_t)get_be64(hdr + 24);
	ratio_bits = get_be64(hdr + 32);
	memcpy(&ratio, &ratio_bits, sizeof(ratio));
	if ((cookie & V2_COOKIE_MASK) != V2_COOKIE_BASE) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: bad inner cookie "
				"0x%08x (want V2, 0x%08x)", cookie,
				V2_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
		goto out;
	}
	/* The normalizing offset says how the writer rotated its own counts
	 * array; the payload is in logical order whatever it is (HdrHistogram
	 * applies it before filling), so it is not needed here.  A ratio
	 * other than 1 is a DoubleHistogram, whose counts are not values.
	 * hdr-histogram-js writes the ratio as the integer 1, bits 0x1. */
	(void)offset;
	if (ratio != 1.0 && ratio_bits != 1) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: integer-to-double "
				"ratio %g: a DoubleHistogram, not supported",
				ratio);
		goto out;
	}
	rc = tb_hist_init(&h, lowest, highest, digits);
	if (rc == TB_EINVAL) {
		rc = tb_error_prepend(TB_EFORMAT, "hist_decode: bad parameters");
		goto out;
	} else if (rc) {
		goto out;
	}
	if (payload_len > (uint64_t)h->counts_len * VARINT_MAX) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: payload length %u is "
				"more than %d counts can take", payload_len,
				h->counts_len);
		goto out;
	}
	payload = malloc(payload_len ? payload_len : 1);
	if (!payload) {
		rc = tb_error_set(TB_ENOMEM, "hist_decode: cannot allocate %u "
				"bytes", payload_len);
		goto out;
	}
	rc = inflate_exactly(&zs, payload, payload_len, "payload");
	if (!rc)
		rc = inflate_end_check(&zs);
	if (!rc)
		rc = decode_counts(h, payload, payload + payload_len);
out:
	inflateEnd(&zs);
	free(payload);
	if (rc) {
		tb_hist_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

/* ================================================================ base64 */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void tb_hist_encoding_base64_encode(const uint8_t *src, size_t n, char *dst)
{
	size_t i = 0;

	for (; i + 3 <= n; i += 3) {
		uint32_t w = (uint32_t)src[i] << 16 |
			     (uint32_t)src[i + 1] << 8 | src[i + 2];

		*dst++ = b64_alphabet[w >> 18];
		*dst++ = b64_alphabet[(w >> 12) & 63];
		*dst++ = b64_alphabet[(w >> 6) & 63];
		*dst++ = b64_alphabet[w & 63];
	}
	if (i < n) {
		uint32_t w = (uint32_t)src[i] << 16;

		if (i + 1 < n)
			w |= (uint32_t)src[i + 1] << 8;
		*dst++ = b64_alphabet[w >> 18];
		*dst++ = b64_alphabet[(w >> 12) & 63];
		*dst++ = i + 1 < n ? b64_alphabet[(w >> 6) & 63] : '=';
		*dst++ = '=';
	}
	*dst = '\0';
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int tb_hist_encoding_base64_decode(const char *src, size_t n, uint8_t *dst,
				   size_t *out_len)
{
	size_t pad = 0, o = 0;

	if (n == 0 || n % 4 != 0)
		return tb_error_set(TB_EFORMAT, "bad base64: length %zu is not a "
				  "positive multiple of 4", n);
	if (src[n - 1] == '=')
		pad = src[n - 2] == '=' ? 2 : 1;
	for (size_t i = 0; i < n; i += 4) {
		uint32_t w = 0;

		for (size_t j = 0; j < 4; j++) {
			unsigned char c = (unsigned char)src[i + j];
			int v = b64_value((char)c);

			if (v < 0 && !(c == '=' && i + j >= n - pad))
				return tb_error_set(TB_EFORMAT, "bad base64: "
						  "character 0x%02x at offset "
						  "%zu", c, i + j);
			w = w << 6 | (uint32_t)(v < 0 ? 0 : v);
		}
		dst[o++] = (uint8_t)(w >> 16);
		if (i + 4 < n || pad < 2)
			dst[o++] = (uint8_t)(w >> 8);
		if (i + 4 < n || pad < 1)
			dst[o++] = (uint8_t)w;
	}
	*out_len = o;
	return 0;
}
