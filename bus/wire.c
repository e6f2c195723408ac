/*
 * wire.c - the shared codec of tickbus's TCP protocols (the convention is
 * in wire.h): header framing and checks, table-driven encode and decode,
 * and the field rules every protocol applies.
 */
#include "bus/wire.h"

#include "bus/error.h"

#include <endian.h>
#include <string.h>

/* ---------------------------------------------------------------- header */

void tb_wire_hdr_put(tb_wire_hdr_t *w, uint16_t magic, uint8_t version,
		     uint8_t type, uint32_t length)
{
	w->magic = htole16(magic);
	w->version = version;
	w->type = type;
	w->length = htole32(length);
}

const char *tb_wire_type_name(const tb_wire_proto_t *p, unsigned type)
{
	return type >= 1 && type <= p->type_max ? p->types[type].name : "?";
}

const char *tb_wire_enum_name(const char *const *names, unsigned max,
			      unsigned v)
{
	return v >= 1 && v <= max ? names[v] : "?";
}

int tb_wire_frame_need(const tb_wire_proto_t *p, const void *buf,
		       size_t have)
{
	tb_wire_hdr_t w;
	uint16_t magic;
	uint32_t length;

	/* The magic alone already tells a stranger apart: fail early. */
	if (have >= sizeof(w.magic)) {
		memcpy(&magic, buf, sizeof(magic));
		magic = le16toh(magic);
		if (magic != p->magic)
			return tb_error_set(TB_EPROTO,
					  "%s: bad magic 0x%04x (expected 0x%04x)",
					  p->name, magic, p->magic);
	}
	if (have < TB_WIRE_HDR_LEN)
		return (int)(TB_WIRE_HDR_LEN - have);

	memcpy(&w, buf, sizeof(w));
	length = le32toh(w.length);
	if (length < TB_WIRE_HDR_LEN || length > p->msg_max)
		return tb_error_set(TB_EPROTO,
				  "%s: length %u is outside %u..%u", p->name,
				  length, TB_WIRE_HDR_LEN, p->msg_max);
	/* Another version's sizes are unknown here; tb_*_decode() will say
	 * which version it was once the bounded message is in. */
	if (w.version == p->version) {
		if (w.type < 1 || w.type > p->type_max)
			return tb_error_set(TB_EPROTO,
					  "%s: unknown message type %u",
					  p->name, w.type);
		if (length != p->types[w.type].size)
			return tb_error_set(TB_EPROTO,
					  "%s %s: length %u, but the message is %u bytes",
					  p->name, p->types[w.type].name, length,
					  p->types[w.type].size);
	}
	return have >= length ? 0 : (int)(length - have);
}

int tb_wire_hdr_check(const tb_wire_proto_t *p, const void *buf, size_t len,
		      tb_wire_hdr_t *h)
{
	tb_wire_hdr_t w;

	if (len < TB_WIRE_HDR_LEN)
		return tb_error_set(TB_EPROTO,
				  "%s: truncated: %zu bytes, a header is %u",
				  p->name, len, TB_WIRE_HDR_LEN);
	memcpy(&w, buf, sizeof(w));
	h->magic = le16toh(w.magic);
	h->version = w.version;
	h->type = w.type;
	h->length = le32toh(w.length);

	if (h->magic != p->magic)
		return tb_error_set(TB_EFORMAT,
				  "%s: bad magic 0x%04x (expected 0x%04x)",
				  p->name, h->magic, p->magic);
	if (h->version != p->version)
		return tb_error_set(TB_EFORMAT,
				  "%s: protocol version %u is not supported; this peer speaks version %u",
				  p->name, h->version, p->version);
	if (h->type < 1 || h->type > p->type_max)
		return tb_error_set(TB_EPROTO, "%s: unknown message type %u",
				  p->name, h->type);
	if (h->length != p->types[h->type].size)
		return tb_error_set(TB_EPROTO,
				  "%s %s: length %u, but the message is %u bytes",
				  p->name, p->types[h->type].name, h->length,
				  p->types[h->type].size);
	if (h->length > len)
		return tb_error_set(TB_EPROTO,
				  "%s %s: truncated: %zu of %u bytes (length)",
				  p->name, p->types[h->type].name, len,
				  h->length);
	return 0;
}

/* ------------------------------------------------------- encode, decode */

/* One message, aligned for any wire struct. */
typedef union wire_scratch {
	uint8_t b[TB_WIRE_MSG_MAX];
	uint64_t align;
} wire_scratch_t;

int tb_wire_encode(const tb_wire_proto_t *p, unsigned type, void *buf,
		   size_t cap, const void *m)
{
	const tb_wire_type_t *t = &p->types[type];
	wire_scratch_t w;
	int rc;

	if (cap < t->size)
		return tb_error_set(TB_EMSGSIZE, "%s %s: buffer of %zu bytes, the "
				  "message is %zu", p->name, t->name, cap,
				  (size_t)t->size);
	memset(&w, 0, t->size);
	if ((rc = t->put(&w, m)) < 0)
		return rc;
	tb_wire_hdr_put((tb_wire_hdr_t *)&w, p->magic, p->version,
			(uint8_t)type, t->size);
	memcpy(buf, &w, t->size);
	return (int)t->size;
}

int tb_wire_decode(const tb_wire_proto_t *p, const void *buf, size_t len,
		   tb_wire_hdr_t *h, void *m)
{
	wire_scratch_t w;
	int rc;

	if ((rc = tb_wire_hdr_check(p, buf, len, h)) < 0)
		return rc;
	/* Copied first, so that `buf` may have any alignment; the size is
	 * the type's, at most msg_max. */
	memcpy(&w, buf, h->length);
	if ((rc = p->types[h->type].get(&w, m)) < 0)
		return rc;
	return (int)h->length;
}

/* --------------------------------------------------------- field checks */

int tb_wire_stream_id_check(const char *ctx, uint32_t id, int code)
{
	if (id == 0)
		return tb_error_set(code, "%s: stream_id 0 names no stream", ctx);
	return 0;
}

int tb_wire_epoch_check(const char *ctx, uint64_t epoch, int code)
{
	if (epoch == 0)
		return tb_error_set(code, "%s: epoch 0 is not an epoch", ctx);
	return 0;
}

int tb_wire_seq_check(const char *ctx, const char *what, uint64_t seq,
		      int code)
{
	if (seq == 0)
		return tb_error_set(code, "%s: %s 0 (sequences start at 1)", ctx,
				  what);
	return 0;
}

int tb_wire_enum_check(const char *ctx, const char *what, unsigned v,
		       unsigned max, const char *kind, int code)
{
	if (v < 1 || v > max)
		return tb_error_set(code, "%s: %s %u is not %s (1..%u)", ctx, what,
				  v, kind, max);
	return 0;
}

int tb_wire_reserved_check(const char *ctx, const char *what, uint64_t v)
{
	if (v != 0)
		return tb_error_set(TB_EPROTO, "%s: %s is not zero", ctx, what);
	return 0;
}

/* --------------------------------------------------------------- strings */

static int str_byte_ok(unsigned char c, enum tb_wire_str_rule rule)
{
	if (rule == TB_WIRE_STR_TEXT)
		return c >= 0x20 && c <= 0x7e;
	return c > 0x20 && c <= 0x7e;
}

static const char *str_rule_words(enum tb_wire_str_rule rule)
{
	return rule == TB_WIRE_STR_TEXT ? "printable ASCII"
					: "printable ASCII without spaces";
}

int tb_wire_str_check(const char *ctx, const char *what, const char *f,
		      size_t size, enum tb_wire_str_rule rule)
{
	size_t n = strnlen(f, size), i;

	if (n == size)
		return tb_error_set(TB_EPROTO, "%s: %s is not NUL-terminated "
				  "within its %zu bytes", ctx, what, size);
	for (i = 0; i < n; i++)
		if (!str_byte_ok((unsigned char)f[i], rule))
			return tb_error_set(TB_EPROTO,
					  "%s: %s has byte 0x%02x at %zu; it must be %s",
					  ctx, what, (unsigned char)f[i], i,
					  str_rule_words(rule));
	for (i = n + 1; i < size; i++)
		if (f[i] != 0)
			return tb_error_set(TB_EPROTO,
					  "%s: %s has non-zero bytes after its NUL",
					  ctx, what);
	if (rule == TB_WIRE_STR_TOKEN && n == 0)
		return tb_error_set(TB_EPROTO, "%s: %s is empty", ctx, what);
	return 0;
}

int tb_wire_str_put(const char *ctx, const char *what, char *dst,
		    const char *src, size_t size, enum tb_wire_str_rule rule)
{
	size_t n = strnlen(src, size), i;

	if (n == size)
		return tb_error_set(TB_EINVAL, "%s: %s is longer than %zu characters",
				  ctx, what, size - 1);
	for (i = 0; i < n; i++)
		if (!str_byte_ok((unsigned char)src[i], rule))
			return tb_error_set(TB_EINVAL,
					  "%s: %s has byte 0x%02x at %zu; it must be %s",
					  ctx, what, (unsigned char)src[i], i,
					  str_rule_words(rule));
	if (rule == TB_WIRE_STR_TOKEN && n == 0)
		return tb_error_set(TB_EINVAL, "%s: %s is empty", ctx, what);
	memset(dst, 0, size);
	memcpy(dst, src, n);
	return 0;
}

int tb_wire_token_equal(const char *a, const char *b, size_t size)
{
	size_t la = strnlen(a, size);
	size_t lb = strnlen(b, size);
	unsigned diff = (unsigned)(la ^ lb);
	size_t i;

	/* Every position is visited whatever the contents; positions past a
	 * token's end compare as NUL.  Which branch `i < la` takes depends on
	 * the lengths alone. */
	for (i = 0; i < size; i++) {
		unsigned char ca = i < la ? (unsigned char)a[i] : 0;
		unsigned char cb = i < lb ? (unsigned char)b[i] : 0;

		diff |= (unsigned)(ca ^ cb);
	}
	return diff == 0;
}
